//! The reference optimizers re-parameterised to PyTorch's conventions (`torch.optim.Adam`,
//! `torch.optim.RAdam`, which crates such as candle-optimisers follow), and the law that compares a
//! subject with them step for step.
//!
//! Where the two conventions agree and where they differ, with `c1 = 1 - b1^t`,
//! `c2 = 1 - b2^t`, `m_hat = m_t / c1`, `v_hat = v_t / c2`:
//!
//! | | optax (`docs/ALGORITHMS.md` §1-2) | PyTorch |
//! |---|---|---|
//! | Adam step | `-lr m_hat / (sqrt(v_hat + eps_root) + eps)` | `-lr m_hat / (sqrt(v_hat) + eps)`: optax's with `eps_root = 0` |
//! | RAdam, rectified | `-lr r_t m_hat / (sqrt(v_hat + eps_root) + eps)` | `-lr r_t m_hat sqrt(c2) / (sqrt(v_t) + eps)` |
//! | RAdam, branch taken | `rho_t >= threshold` (default 5) | `rho_t > 5`, no parameter |
//! | RAdam, below it | `-lr m_hat` | `-lr m_hat` (the same) |
//! | weight decay | `adamw`: `+ wd * p` to the scaled step, before `-lr` | `Adam(weight_decay)`: `g + wd * p` before the moments (L2); `AdamW`: `p (1 - lr wd)` first (decoupled) |
//!
//! PyTorch's rectified RAdam step equals optax's with the step-dependent epsilon
//! [`radam_eps_at`]`(eps, b2, t) = eps / sqrt(c2)`, since
//! `m_hat sqrt(c2) / (sqrt(v_t) + eps) = m_hat / (sqrt(v_hat) + eps / sqrt(c2))`, and PyTorch's
//! strict `rho_t > 5` is optax's `rho_t >= threshold` with [`PYTORCH_RADAM_THRESHOLD`], the next
//! f64 above 5 (both compute `rho_t` in f64). [`reference_updates`] is therefore the reference
//! RAdam itself, rebuilt at every step with that epsilon and threshold over the state it carries
//! (the state, `count` and the moments, does not depend on `eps`). Nothing here is taken from a
//! peer's code: the formulas are those of the papers and PyTorch's documentation.
//!
//! PyTorch's rule is always well posed: a selected step has `rho_t > 5 > 4`, so the rectifier's
//! square-root argument is positive, whatever `b2`.
//!
//! # References
//! - PyTorch documentation, `torch.optim.Adam`, `torch.optim.AdamW`, `torch.optim.RAdam` (the
//!   algorithm boxes).
//! - L. Liu et al., "On the variance of the adaptive learning rate and beyond", ICLR 2020.
//! - `docs/ALGORITHMS.md` sections 1-2 (optax's forms).
//!
//! ```
//! use peers::pytorch_convention::{radam_eps_at, PYTORCH_RADAM_THRESHOLD};
//! // at step 1 with b2 = 0.999, PyTorch's eps is 31.6 times optax's
//! assert!((radam_eps_at(1e-8, 0.999, 1) / 1e-8 - 1000f64.sqrt()).abs() < 1e-9);
//! assert_eq!(PYTORCH_RADAM_THRESHOLD, f64::from_bits(5f64.to_bits() + 1));
//! ```

use harness::backend::{DType, Real};
use harness::laws::radam::{finiteness_domain, leaf};
use harness::laws::strategies::OptCase;
use harness::optim::{self, RadamHyper, Selection, Transform};
use harness::reference::{Error, Result};
use harness::subject::optimizer::{
    compare_step_for_step, spec_of, Algorithm, Factory, Optimizer, OptimizerSpec,
};
use harness::tree::{apply_updates, Tree};

/// optax's `threshold` that makes `rho_t >= threshold` PyTorch's `rho_t > 5`: the next f64 above 5.
pub const PYTORCH_RADAM_THRESHOLD: f64 = 5.000000000000001;

/// The epsilon that makes optax's rectified RAdam step at step `t` (1-based) PyTorch's:
/// `eps / sqrt(1 - b2^t)`, computed in f64.
///
/// # References
/// - The module documentation (the derivation).
///
/// ```
/// // far from the start the two conventions meet
/// let e = peers::pytorch_convention::radam_eps_at(1e-8, 0.9, 10_000);
/// assert_eq!(e, 1e-8);
/// ```
pub fn radam_eps_at(eps: f64, b2: f64, t: u64) -> f64 {
    eps / (1.0 - b2.powf(t as f64)).sqrt()
}

/// Whether PyTorch's Adam/RAdam can take `spec` at all: no `eps_root` (PyTorch has none) and no
/// nesterov momentum (PyTorch's NAdam is another algorithm, with a momentum schedule).
///
/// ```
/// use harness::optim::RadamHyper;
/// use harness::subject::optimizer::{Algorithm, OptimizerSpec};
/// let mut spec = OptimizerSpec { algorithm: Algorithm::Adam, learning_rate: 1e-3, hyper: RadamHyper::default() };
/// assert!(peers::pytorch_convention::expressible(&spec));
/// spec.hyper.moments.eps_root = 1e-8;
/// assert!(!peers::pytorch_convention::expressible(&spec));
/// ```
pub fn expressible(spec: &OptimizerSpec) -> bool {
    spec.hyper.moments.eps_root == 0.0 && !spec.hyper.moments.nesterov
}

/// The updates PyTorch's Adam or RAdam (with `spec`'s `lr`, `b1`, `b2`, `eps`; RAdam with its
/// fixed `rho_t > 5` rule, `spec.hyper.threshold` is not read) gives for `grads`, step after
/// step from `params`, each applied before the next: the reference re-parameterised as the module
/// documentation derives. Errors: a spec [`expressible`] rejects, or one the reference rejects
/// (out-of-range hyperparameters, an `eps` that rounds to 0 in `E`).
///
/// # References
/// - The module documentation; `harness::optim::adam`, `harness::optim::radam`.
///
/// ```
/// use harness::optim::RadamHyper;
/// use harness::subject::optimizer::{Algorithm, OptimizerSpec};
/// use harness::laws::radam::leaf;
/// let spec = OptimizerSpec { algorithm: Algorithm::RAdam, learning_rate: 0.1, hyper: RadamHyper::default() };
/// let u = peers::pytorch_convention::reference_updates(&spec, &leaf::<f64>(&[1.0]), &[leaf(&[2.0])]).unwrap();
/// // step 1 is never rectified: -lr * m_hat = -lr * g
/// assert!((u[0].get("w").unwrap().data()[0] + 0.2).abs() < 1e-15);
/// ```
pub fn reference_updates<E: Real>(
    spec: &OptimizerSpec,
    params: &Tree<E>,
    grads: &[Tree<E>],
) -> Result<Vec<Tree<E>>> {
    if !expressible(spec) {
        return Err(Error::External(format!(
            "not expressible in PyTorch's convention: {spec:?}"
        )));
    }
    let lr = spec.learning_rate;
    let mut p = params.clone();
    let mut out = Vec::with_capacity(grads.len());
    match spec.algorithm {
        Algorithm::Adam => {
            let t = optim::adam(lr, spec.hyper.moments)?;
            let mut s = t.init(&p)?;
            for g in grads {
                let (u, next) = t.update(g, &s, &p)?;
                p = apply_updates(&p, &u)?;
                s = next;
                out.push(u);
            }
        }
        Algorithm::RAdam => {
            let at = |step: u64| {
                let mut h = RadamHyper {
                    threshold: PYTORCH_RADAM_THRESHOLD,
                    ..spec.hyper
                };
                h.moments.eps = radam_eps_at(spec.hyper.moments.eps, h.moments.b2, step);
                optim::radam(lr, h, Selection::Where)
            };
            let mut s = at(1)?.init(&p)?;
            for (i, g) in grads.iter().enumerate() {
                let (u, next) = at(i as u64 + 1)?.update(g, &s, &p)?;
                p = apply_updates(&p, &u)?;
                s = next;
                out.push(u);
            }
        }
    }
    Ok(out)
}

/// What one case of [`matches_pytorch_convention`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compared {
    /// Every step was compared and agreed.
    Yes,
    /// Skipped: outside the finiteness domain, not expressible, or declined by the factory.
    Skipped,
}

/// The case PyTorch's convention runs: the drawn case with `threshold` 5 (PyTorch's, which has
/// no such parameter).
pub fn pytorch_case(case: &OptCase) -> OptCase {
    let mut c = case.clone();
    c.hyper.threshold = 5.0;
    c
}

/// The spec of [`pytorch_case`] for `algorithm`: the drawn learning rate and hyperparameters,
/// with `threshold` 5. (The optimizer suite picks one algorithm per case from the threshold's
/// bits, which makes nine cases in ten RAdam; this law asks for both on every case.)
pub fn pytorch_spec(case: &OptCase, algorithm: Algorithm) -> OptimizerSpec {
    let mut spec = spec_of(case);
    spec.algorithm = algorithm;
    spec.hyper.threshold = 5.0;
    spec
}

/// Step for step, the subject's updates equal [`reference_updates`]' within
/// [`tolerance::conformance`], on the [`pytorch_case`] of `case` when it is in the finiteness
/// domain, for each algorithm whose [`pytorch_spec`] is [`expressible`] and built by `make`;
/// `Err` names the first element that differs. [`Compared::Yes`] when at least one algorithm
/// was compared.
///
/// # References
/// - `harness::subject::optimizer::matches_reference` (the same law against optax's convention).
pub fn matches_pytorch_convention<E: Real, O: Optimizer<E>>(
    case: &OptCase,
    make: &impl Factory<O>,
) -> std::result::Result<Compared, String> {
    let mut compared = Compared::Skipped;
    for algorithm in [Algorithm::Adam, Algorithm::RAdam] {
        if matches_one::<E, O>(case, pytorch_spec(case, algorithm), make)? == Compared::Yes {
            compared = Compared::Yes;
        }
    }
    Ok(compared)
}

fn matches_one<E: Real, O: Optimizer<E>>(
    case: &OptCase,
    spec: OptimizerSpec,
    make: &impl Factory<O>,
) -> std::result::Result<Compared, String> {
    let case = pytorch_case(case);
    if !finiteness_domain(&case) || !expressible(&spec) {
        return Ok(Compared::Skipped);
    }
    let params = leaf::<E>(&case.params);
    let grads: Vec<Tree<E>> = case.grads.iter().map(|g| leaf::<E>(g)).collect();
    let Ok(want) = reference_updates(&spec, &params, &grads) else {
        return Ok(Compared::Skipped);
    };
    let mut opt = match make(&spec) {
        Ok(o) => o,
        Err(Error::External(m)) if m.starts_with("unsupported by this subject") => {
            return Ok(Compared::Skipped)
        }
        Err(e) => return Err(format!("make({spec:?}) failed: {e}")),
    };
    compare_step_for_step(
        &mut opt,
        params,
        &grads,
        &want,
        |at| format!("{:?} {} step {at}", spec.algorithm, E::DTYPE),
        "PyTorch-convention reference",
    )?;
    Ok(Compared::Yes)
}

/// [`matches_pytorch_convention`] in the case's dtype (f32 or f64; other dtypes are skipped).
pub fn matches_pytorch_convention_any<O: Optimizer<f32> + Optimizer<f64>>(
    case: &OptCase,
    make: &impl Factory<O>,
) -> std::result::Result<Compared, String> {
    match case.dtype {
        DType::F32 => matches_pytorch_convention::<f32, O>(case, make),
        DType::F64 => matches_pytorch_convention::<f64, O>(case, make),
        _ => Ok(Compared::Skipped),
    }
}
