//! The reference optimizers re-parameterised to PyTorch's conventions (`torch.optim.Adam`,
//! `AdamW`, `RAdam`, `NAdam`, which crates such as candle-optimisers follow), and the law that compares a
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
//! | weight decay | `adamw`: `+ wd * p` to the scaled step, before `-lr` | `Adam(weight_decay)`: `g + wd * p` before the moments (L2); `AdamW`: `p (1 - lr wd)` first (decoupled): the same step as optax's `adamw` |
//! | Nesterov | `nadam`: `m_hat = b1 m_t / (1 - b1^(t+1)) + (1 - b1) g / (1 - b1^t)` | `NAdam`: `b1` replaced by the schedule `mu_t = b1 (1 - 0.96^(t psi) / 2)`, products of `mu` for the powers ([`nadam_updates`]) |
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

use harness::backend::{Array, DType, Real};
use harness::laws::radam::finiteness_domain;
use harness::laws::strategies::OptCase;
use harness::optim::{self, RadamHyper, Selection, Transform};
use harness::reference::{Error, Result};
use harness::subject::optimizer::{
    case_trees, compare_step_for_step, is_unsupported, Algorithm, Factory, Optimizer,
    OptimizerSpec, SuiteCase,
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

/// PyTorch's `NAdam` default `momentum_decay` (`psi`, 4e-3).
pub const PYTORCH_NADAM_MOMENTUM_DECAY: f64 = 4e-3;

/// PyTorch's `AdamW` default `weight_decay` (1e-2).
pub const PYTORCH_ADAMW_WEIGHT_DECAY: f64 = 1e-2;

/// A PyTorch optimizer, with the hyperparameters an [`OptimizerSpec`] does not carry.
///
/// | variant | spec handed to a subject's factory | PyTorch |
/// |---|---|---|
/// | `Adam` | `Algorithm::Adam`, not nesterov | `Adam(lr, betas, eps)` |
/// | `AdamW` | `Algorithm::Adam`, not nesterov | `AdamW(lr, betas, eps, weight_decay)` |
/// | `RAdam` | `Algorithm::RAdam`, not nesterov, `threshold` 5 | `RAdam(lr, betas, eps)` |
/// | `NAdam` | `Algorithm::Adam`, nesterov | `NAdam(lr, betas, eps, momentum_decay)` |
///
/// ```
/// use peers::pytorch_convention::Torch;
/// assert_eq!(Torch::NAdam { momentum_decay: 4e-3 }.name(), "NAdam");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Torch {
    /// `torch.optim.Adam` (no weight decay).
    Adam,
    /// `torch.optim.AdamW`: the parameter scaled by `1 - lr weight_decay` before the Adam step.
    AdamW {
        /// The decoupled decay rate, multiplied by the learning rate.
        weight_decay: f64,
    },
    /// `torch.optim.RAdam` (no weight decay).
    RAdam,
    /// `torch.optim.NAdam` (no weight decay): Nesterov momentum with the schedule
    /// `mu_t = b1 (1 - 0.96^(t momentum_decay) / 2)`.
    NAdam {
        /// `psi` of the schedule above (PyTorch's default 4e-3).
        momentum_decay: f64,
    },
}

impl Torch {
    /// PyTorch's class name.
    pub fn name(&self) -> &'static str {
        match self {
            Torch::Adam => "Adam",
            Torch::AdamW { .. } => "AdamW",
            Torch::RAdam => "RAdam",
            Torch::NAdam { .. } => "NAdam",
        }
    }
    /// Why a subject of this optimizer is not compared with optax's convention
    /// (`optimizer_matches_reference`).
    pub fn why_not_optax(&self) -> &'static str {
        match self {
            Torch::Adam => "compared in PyTorch's convention (optimizer_matches_pytorch_convention), which is optax's with eps_root = 0",
            Torch::AdamW { .. } => "the optimizer suite's specification has no weight decay; compared with optax's adamw, which is PyTorch's AdamW, in optimizer_matches_pytorch_convention",
            Torch::RAdam => "optax's RAdam (eps added to sqrt(v_hat), rho_t >= threshold) is not expressible in the peer's parameters (eps added to sqrt(v_t), rho_t > 5); compared in PyTorch's convention instead (optimizer_matches_pytorch_convention)",
            Torch::NAdam { .. } => "PyTorch's NAdam (momentum schedule mu_t = b1 (1 - 0.96^(t psi) / 2)) is not optax's nadam (mu_t = b1, its limit as psi grows); compared in PyTorch's convention instead (optimizer_matches_pytorch_convention)",
        }
    }
    /// The spec that asks a subject's factory for this optimizer, with `case`'s learning rate,
    /// `b1`, `b2` and `eps` (the table in the type's documentation).
    pub fn spec(&self, case: &OptCase) -> OptimizerSpec {
        let mut spec = OptimizerSpec {
            algorithm: match self {
                Torch::RAdam => Algorithm::RAdam,
                _ => Algorithm::Adam,
            },
            dtype: case.dtype,
            learning_rate: case.learning_rate,
            hyper: case.hyper,
        };
        spec.hyper.threshold = 5.0;
        spec.hyper.moments.nesterov = matches!(self, Torch::NAdam { .. });
        spec
    }
}

/// Whether PyTorch's optimizers can take `spec` at all: no `eps_root` (PyTorch has none).
///
/// ```
/// use harness::optim::RadamHyper;
/// use harness::subject::optimizer::{Algorithm, OptimizerSpec};
/// let mut spec = OptimizerSpec { algorithm: Algorithm::Adam, learning_rate: 1e-3, ..OptimizerSpec::default() };
/// assert!(peers::pytorch_convention::expressible(&spec));
/// spec.hyper.moments.eps_root = 1e-8;
/// assert!(!peers::pytorch_convention::expressible(&spec));
/// ```
pub fn expressible(spec: &OptimizerSpec) -> bool {
    spec.hyper.moments.eps_root == 0.0
}

/// The updates PyTorch's `torch` (with `spec`'s `lr`, `b1`, `b2` and `eps`; RAdam with its fixed
/// `rho_t > 5` rule, `spec.hyper.threshold` and `spec.hyper.moments.nesterov` are not read) gives
/// for `grads`, step after step from `params`, each applied before the next: the reference
/// re-parameterised as the module documentation derives (Adam, RAdam), with optax's
/// `add_decayed_weights` (AdamW), and PyTorch's NAdam written out ([`nadam_updates`]).
/// Errors: a spec [`expressible`] rejects, or one the reference rejects (out-of-range
/// hyperparameters, an `eps` that rounds to 0 in `E`).
///
/// AdamW: PyTorch's `p (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps)` is optax's
/// `adamw(lr, wd)` step `p - lr (m_hat / (sqrt(v_hat) + eps) + wd p)` exactly (the moments do not
/// read `p`), so the reference is `optim::adamw` with `eps_root = 0`.
///
/// # References
/// - The module documentation; `harness::optim::adam`, `harness::optim::adamw`,
///   `harness::optim::radam`.
///
/// ```
/// use harness::optim::RadamHyper;
/// use harness::subject::optimizer::{Algorithm, OptimizerSpec};
/// use harness::laws::radam::leaf;
/// use peers::pytorch_convention::{reference_updates, Torch};
/// let spec = OptimizerSpec { algorithm: Algorithm::RAdam, learning_rate: 0.1, ..OptimizerSpec::default() };
/// let u = reference_updates(Torch::RAdam, &spec, &leaf::<f64>(&[1.0]), &[leaf(&[2.0])]).unwrap();
/// // step 1 is never rectified: -lr * m_hat = -lr * g
/// assert!((u[0].get("w").unwrap().data()[0] + 0.2).abs() < 1e-15);
/// // AdamW's first step: -lr (sign(g) + wd p), up to eps
/// let w = reference_updates(Torch::AdamW { weight_decay: 0.5 }, &spec, &leaf::<f64>(&[1.0]), &[leaf(&[2.0])]).unwrap();
/// assert!((w[0].get("w").unwrap().data()[0] + 0.15).abs() < 1e-9);
/// ```
pub fn reference_updates<E: Real>(
    torch: Torch,
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
    let mut moments = spec.hyper.moments;
    moments.nesterov = false;
    let mut p = params.clone();
    let mut out = Vec::with_capacity(grads.len());
    match torch {
        Torch::Adam | Torch::AdamW { .. } => {
            let wd = match torch {
                Torch::AdamW { weight_decay } => weight_decay,
                _ => 0.0,
            };
            let t = optim::adamw(lr, moments, wd)?;
            let mut s = t.init(&p)?;
            for g in grads {
                let (u, next) = t.update(g, &s, &p)?;
                p = apply_updates(&p, &u)?;
                s = next;
                out.push(u);
            }
        }
        Torch::RAdam => {
            let at = |step: u64| {
                let mut h = RadamHyper {
                    threshold: PYTORCH_RADAM_THRESHOLD,
                    moments,
                };
                h.moments.eps = radam_eps_at(moments.eps, h.moments.b2, step);
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
        Torch::NAdam { momentum_decay } => {
            // the reference's own validation of lr, b1, b2, eps (NAdam shares Adam's ranges)
            optim::adam(lr, moments)?;
            return nadam_updates(spec, momentum_decay, params, grads);
        }
    }
    Ok(out)
}

/// PyTorch's NAdam written out, element by element in `E` with the schedule in f64. With
/// `mu_t = b1 (1 - 0.96^(t psi) / 2)` (`psi` = `momentum_decay`) and `P_t = mu_1 ... mu_t`, at
/// step `t` (1-based):
///
/// ```text
/// m_t   = b1 m_{t-1} + (1 - b1) g          v_t = b2 v_{t-1} + (1 - b2) g^2
/// m_hat = mu_{t+1} m_t / (1 - P_{t+1}) + (1 - mu_t) g / (1 - P_t)
/// u     = -lr m_hat / (sqrt(v_t / (1 - b2^t)) + eps)
/// ```
///
/// As `psi` grows the schedule tends to `mu_t = b1` and the step to optax's `nadam`
/// (`docs/ALGORITHMS.md` section 1, nesterov), which is how the two relate. `momentum_decay`
/// must be finite and non-negative.
///
/// # References
/// - T. Dozat, "Incorporating Nesterov momentum into Adam", ICLR 2016 workshop.
/// - PyTorch documentation, `torch.optim.NAdam` (the algorithm box).
///
/// ```
/// use harness::optim::RadamHyper;
/// use harness::subject::optimizer::{Algorithm, OptimizerSpec};
/// use harness::laws::radam::leaf;
/// let spec = OptimizerSpec { algorithm: Algorithm::Adam, learning_rate: 0.1, ..OptimizerSpec::default() };
/// let u = peers::pytorch_convention::nadam_updates(&spec, 4e-3, &leaf::<f64>(&[1.0]), &[leaf(&[2.0])]).unwrap();
/// // step 1: m_hat = g (mu_2 (1 - b1) / (1 - mu_1 mu_2) + 1), v_hat = g^2
/// let (mu1, mu2) = (0.9 * (1.0 - 0.5 * 0.96f64.powf(4e-3)), 0.9 * (1.0 - 0.5 * 0.96f64.powf(8e-3)));
/// let want = -0.1 * (mu2 * 0.1 / (1.0 - mu1 * mu2) + 1.0);
/// assert!((u[0].get("w").unwrap().data()[0] - want).abs() < 1e-9);
/// ```
pub fn nadam_updates<E: Real>(
    spec: &OptimizerSpec,
    momentum_decay: f64,
    params: &Tree<E>,
    grads: &[Tree<E>],
) -> Result<Vec<Tree<E>>> {
    if !(momentum_decay.is_finite() && momentum_decay >= 0.0) {
        return Err(Error::External(format!(
            "momentum_decay {momentum_decay} must be finite and non-negative"
        )));
    }
    let (lr, h) = (spec.learning_rate, spec.hyper.moments);
    let mu = |t: f64| h.b1 * (1.0 - 0.5 * 0.96f64.powf(t * momentum_decay));
    let e = E::of_f64;
    let mut m: Vec<Vec<E>> = params.iter().map(|(_, a)| vec![e(0.0); a.len()]).collect();
    let mut v = m.clone();
    let mut product = 1.0; // P_{t-1}
    let mut out = Vec::with_capacity(grads.len());
    for (step, g) in grads.iter().enumerate() {
        g.check_like(params, "grads")?;
        let t = step as f64 + 1.0;
        let (mu_t, mu_next) = (mu(t), mu(t + 1.0));
        let p_t = product * mu_t;
        let p_next = p_t * mu_next;
        let (c_m, c_g) = (e(mu_next / (1.0 - p_next)), e((1.0 - mu_t) / (1.0 - p_t)));
        let c_v = e(1.0 - h.b2.powf(t));
        let mut leaves = Vec::with_capacity(m.len());
        for (((name, ga), mi), vi) in g.iter().zip(&mut m).zip(&mut v) {
            let data = ga
                .data()
                .iter()
                .zip(mi.iter_mut().zip(vi.iter_mut()))
                .map(|(&gx, (mx, vx))| {
                    *mx = e(h.b1) * *mx + e(1.0 - h.b1) * gx;
                    *vx = e(h.b2) * *vx + e(1.0 - h.b2) * gx * gx;
                    let m_hat = c_m * *mx + c_g * gx;
                    -(e(lr) * m_hat) / ((*vx / c_v).sqrt() + e(h.eps))
                })
                .collect();
            leaves.push((name.clone(), Array::new(ga.shape().to_vec(), data)?));
        }
        product = p_t;
        out.push(Tree::from_leaves(leaves)?);
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
pub fn pytorch_case(case: &SuiteCase) -> SuiteCase {
    let mut c = case.clone();
    c.run.hyper.threshold = 5.0;
    c
}

/// Step for step, the subject's updates equal [`reference_updates`]' within
/// [`harness::tolerance::conformance`] (widened for updates read through the parameters, see
/// `harness::tolerance::read_through_params`), on the [`pytorch_case`] of `case` when it is in
/// the finiteness domain, for each of `torches` whose [`Torch::spec`] is [`expressible`] and
/// built by `make`; `Err` names the first element that differs. [`Compared::Yes`] when at least
/// one was compared.
///
/// # References
/// - `harness::subject::optimizer::matches_reference` (the same law against optax's convention).
pub fn matches_pytorch_convention<E: Real, O: Optimizer<E>>(
    case: &SuiteCase,
    make: &impl Factory<O>,
    torches: &[Torch],
) -> std::result::Result<Compared, String> {
    let mut compared = Compared::Skipped;
    for &torch in torches {
        if matches_one::<E, O>(case, torch, make)? == Compared::Yes {
            compared = Compared::Yes;
        }
    }
    Ok(compared)
}

fn matches_one<E: Real, O: Optimizer<E>>(
    case: &SuiteCase,
    torch: Torch,
    make: &impl Factory<O>,
) -> std::result::Result<Compared, String> {
    let spec = torch.spec(&case.run);
    let case = pytorch_case(case);
    let empty = case.tensors.iter().any(|(_, shape)| shape.contains(&0));
    if !finiteness_domain(&case.run) || !expressible(&spec) || empty {
        // a zero-element parameter is `steps_empty_parameter`'s case
        return Ok(Compared::Skipped);
    }
    let (params, grads) = case_trees::<E>(&case)?;
    let Ok(want) = reference_updates(torch, &spec, &params, &grads) else {
        return Ok(Compared::Skipped);
    };
    let mut opt = match make(&spec) {
        Ok(o) => o,
        Err(e) if is_unsupported(&e) => return Ok(Compared::Skipped),
        Err(e) => return Err(format!("make({spec:?}) failed: {e}")),
    };
    compare_step_for_step(
        &mut opt,
        params,
        &grads,
        &want,
        |at| format!("{} {} step {at}", torch.name(), E::DTYPE),
        "PyTorch-convention reference",
    )?;
    Ok(Compared::Yes)
}

/// [`matches_pytorch_convention`] in the case's dtype (f32 or f64; other dtypes are skipped).
pub fn matches_pytorch_convention_any<O: Optimizer<f32> + Optimizer<f64>>(
    case: &SuiteCase,
    make: &impl Factory<O>,
    torches: &[Torch],
) -> std::result::Result<Compared, String> {
    match case.run.dtype {
        DType::F32 => matches_pytorch_convention::<f32, O>(case, make, torches),
        DType::F64 => matches_pytorch_convention::<f64, O>(case, make, torches),
        _ => Ok(Compared::Skipped),
    }
}

/// A parameter with no elements (an empty bias, a layer of width 0) beside one with elements:
/// one step of each of `torches` the factory builds, in f32 and f64, gives an empty update for
/// the empty leaf and, for the other, the [`reference_updates`]' update within the conformance
/// tolerance (default hyperparameters, learning rate 1e-3, gradient 0.5 at parameter 1). `Err`
/// names the optimizer and dtype and what went wrong; `Ok(n)` the number of (optimizer, dtype)
/// pairs stepped.
///
/// # References
/// - PyTorch's optimizers step zero-element parameters as no-ops (element-wise operations over
///   no elements).
///
/// ```
/// use harness::subject::optimizer::Staged;
/// use harness::optim;
/// use peers::pytorch_convention::{steps_empty_parameter, Torch};
/// // the reference's own Adam, as a subject
/// let make = |s: &harness::subject::optimizer::OptimizerSpec| Ok(Staged::new(optim::adam(s.learning_rate, s.hyper.moments)?));
/// assert_eq!(steps_empty_parameter(&make, &[Torch::Adam]), Ok(2));
/// ```
pub fn steps_empty_parameter<O: Optimizer<f32> + Optimizer<f64>>(
    make: &impl Factory<O>,
    torches: &[Torch],
) -> std::result::Result<usize, String> {
    let case = OptCase {
        hyper: RadamHyper::default(),
        learning_rate: 1e-3,
        dtype: DType::F64,
        params: vec![1.0],
        grads: vec![vec![0.5]],
    };
    let mut stepped = 0;
    for &torch in torches {
        stepped += empty_one::<f32, O>(torch, &case, make)?;
        stepped += empty_one::<f64, O>(torch, &case, make)?;
    }
    Ok(stepped)
}

fn empty_one<E: Real, O: Optimizer<E>>(
    torch: Torch,
    case: &OptCase,
    make: &impl Factory<O>,
) -> std::result::Result<usize, String> {
    let spec = &OptimizerSpec {
        dtype: E::DTYPE,
        ..torch.spec(case)
    };
    let tree = |empty: Vec<E>, full: E| {
        Tree::from_leaves(vec![
            ("b".to_string(), Array::new(vec![1], vec![full])?),
            ("w".to_string(), Array::new(vec![0], empty)?),
        ])
    };
    let at = format!("{} {}", torch.name(), E::DTYPE);
    let params = tree(vec![], E::of_f64(1.0)).map_err(|e| e.to_string())?;
    let grads = vec![tree(vec![], E::of_f64(0.5)).map_err(|e| e.to_string())?];
    let want = reference_updates(torch, spec, &params, &grads).map_err(|e| format!("{at}: {e}"))?;
    let mut opt = match make(spec) {
        Ok(o) => o,
        Err(e) if is_unsupported(&e) => return Ok(0),
        Err(e) => return Err(format!("{at}: make({spec:?}) failed: {e}")),
    };
    compare_step_for_step(
        &mut opt,
        params,
        &grads,
        &want,
        |t| format!("{at} step {t}, parameters {{b: [1.0], w: []}}"),
        "PyTorch-convention reference",
    )?;
    Ok(1)
}
