//! Put your own optimizer under the laws.
//!
//! A small Adam written the way a user would write it — its own state type, its own arithmetic
//! (f64 inside, rounded to the parameters' dtype), optax's `init`/`update` shape through the
//! reference's [`Transform`] trait — is staged like `jax.jit(update)` ([`Staged`]) and handed to
//! the optimizer suite, which draws hyperparameters, dtypes, parameters and gradient sequences,
//! and checks it step for step against the reference, for finite updates, for invalid
//! hyperparameters, for a fixed state signature, for one trace over N steps and for flat memory.
//!
//! ```sh
//! cargo run --release -p harness --example custom_optimizer -- good     # every law passes, exit 0
//! cargo run --release -p harness --example custom_optimizer -- buggy    # exit 1, with the counterexample
//! ```
//!
//! `buggy` plants the CNF step-counter bug of diffrax #574 in the optimizer: the step count
//! joins the static configuration the update is specialised on (as a Python int passed to a
//! jitted function does), so every step traces again: `optimizer_one_trace` fails.
//! `buggy-eps` plants a numerical slip (`eps` inside the square root, a PyTorch-style mix-up):
//! `optimizer_matches_reference` fails. `buggy-count` advances the step count once per tensor
//! rather than once per step (the counter bumped inside the loop over the leaves), which only a
//! model with two tensors or more shows: `optimizer_matches_reference` fails on a case of two.

use harness::backend::{Array, DType, Float};
use harness::optim::Transform;

use harness::stage::{HasSignature, KeyHasher, LeafSig, Signature};
use harness::subject::optimizer::{self, Algorithm, OptimizerSpec, Staged, SuiteOptions};
use harness::subject::{Error, Result};
use harness::tree::Tree;
use std::cell::Cell;
use std::process::ExitCode;

harness::install_counting_allocator!();

/// Which version of the optimizer to build.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Good,
    /// The step counter is hashed into the staging key.
    StepInKey,
    /// `m / sqrt(v + eps)` instead of `m / (sqrt(v) + eps)`.
    EpsInsideSqrt,
    /// The step count advances once per tensor.
    CountPerTensor,
}

/// Adam: `m = b1 m + (1-b1) g`, `v = b2 v + (1-b2) g^2`,
/// `u = -lr m_hat / (sqrt(v_hat + eps_root) + eps)` with `m_hat = m / (1 - b1^t)`,
/// `v_hat = v / (1 - b2^t)` (Nesterov: `m_hat = b1 m / (1 - b1^(t+1)) + (1-b1) g / (1 - b1^t)`).
struct MyAdam {
    lr: f64,
    b1: f64,
    b2: f64,
    eps: f64,
    eps_root: f64,
    nesterov: bool,
    variant: Variant,
    /// Steps taken so far (only the buggy variant lets it into the key).
    steps: Cell<u64>,
}

impl MyAdam {
    fn new(spec: &OptimizerSpec, variant: Variant) -> Result<Self> {
        let h = spec.hyper.moments;
        let in_unit = |name: &'static str, x: f64| {
            if (0.0..1.0).contains(&x) {
                Ok(())
            } else {
                Err(Error::InvalidHyper {
                    name,
                    value: x.to_string(),
                    expected: "must be in [0, 1)".into(),
                })
            }
        };
        in_unit("b1", h.b1)?;
        in_unit("b2", h.b2)?;
        for (name, x) in [("eps", h.eps), ("eps_root", h.eps_root)] {
            if !(x.is_finite() && x >= 0.0) {
                return Err(Error::InvalidHyper {
                    name,
                    value: x.to_string(),
                    expected: "must be finite and >= 0".into(),
                });
            }
        }
        if !spec.learning_rate.is_finite() {
            return Err(Error::InvalidHyper {
                name: "learning_rate",
                value: spec.learning_rate.to_string(),
                expected: "must be finite".into(),
            });
        }
        Ok(MyAdam {
            lr: spec.learning_rate,
            b1: h.b1,
            b2: h.b2,
            eps: h.eps,
            eps_root: h.eps_root,
            nesterov: h.nesterov,
            variant,
            steps: Cell::new(0),
        })
    }
}

/// The state: the step count and both moments, in the parameters' dtype.
#[derive(Clone, Debug)]
struct MyState<E> {
    count: i32,
    mu: Tree<E>,
    nu: Tree<E>,
}

impl<E: Float> HasSignature for MyState<E> {
    fn signature(&self) -> Signature {
        let mut s = Signature::new()
            .with("mu", self.mu.signature())
            .with("nu", self.nu.signature());
        s.push("count", LeafSig::strong(&[], DType::I32));
        s
    }
}

impl<E: Float> Transform<E> for MyAdam {
    type State = MyState<E>;

    fn static_key(&self) -> u64 {
        let key = KeyHasher::default()
            .val("my_adam")
            .f64(self.lr)
            .f64(self.b1)
            .f64(self.b2)
            .f64(self.eps)
            .f64(self.eps_root)
            .val(self.nesterov);
        match self.variant {
            Variant::StepInKey => key.val(self.steps.get()).finish(),
            _ => key.finish(),
        }
    }

    fn init(&self, params: &Tree<E>) -> Result<MyState<E>> {
        Ok(MyState {
            count: 0,
            mu: params.zeros_like(),
            nu: params.zeros_like(),
        })
    }

    fn update(
        &self,
        grads: &Tree<E>,
        state: &MyState<E>,
        params: &Tree<E>,
    ) -> Result<(Tree<E>, MyState<E>)> {
        grads.check_like(params, "grads")?;
        self.steps.set(self.steps.get() + 1);
        let mut t = state.count.saturating_add(1);
        let (b1, b2) = (self.b1, self.b2);
        let (mut mu, mut nu, mut updates) = (Tree::new(), Tree::new(), Tree::new());
        for (k, (name, g)) in grads.iter().enumerate() {
            if self.variant == Variant::CountPerTensor && k > 0 {
                t = t.saturating_add(1);
            }
            let (c1, c2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
            let c1_next = 1.0 - b1.powi(t.saturating_add(1));
            let (m0, v0) = (&state.mu.0[name], &state.nu.0[name]);
            let n = g.data().len();
            let (mut m, mut v, mut u) = (
                Vec::with_capacity(n),
                Vec::with_capacity(n),
                Vec::with_capacity(n),
            );
            for i in 0..n {
                let gi = g.data()[i].as_f64();
                let mi = E::of_f64(b1 * m0.data()[i].as_f64() + (1.0 - b1) * gi);
                let vi = E::of_f64(b2 * v0.data()[i].as_f64() + (1.0 - b2) * gi * gi);
                let (mf, vf) = (mi.as_f64(), vi.as_f64());
                let m_hat = if self.nesterov {
                    b1 * mf / c1_next + (1.0 - b1) * gi / c1
                } else {
                    mf / c1
                };
                let v_hat = vf / c2;
                let step = match self.variant {
                    Variant::EpsInsideSqrt => m_hat / (v_hat + self.eps_root + self.eps).sqrt(),
                    _ => m_hat / ((v_hat + self.eps_root).sqrt() + self.eps),
                };
                m.push(mi);
                v.push(vi);
                u.push(E::of_f64(-self.lr * step));
            }
            let shape = g.shape().to_vec();
            mu.0.insert(name.clone(), Array::new(shape.clone(), m)?);
            nu.0.insert(name.clone(), Array::new(shape.clone(), v)?);
            updates.0.insert(name.clone(), Array::new(shape, u)?);
        }
        Ok((updates, MyState { count: t, mu, nu }))
    }
}

fn main() -> ExitCode {
    let arg = std::env::args().nth(1).unwrap_or_else(|| "good".into());
    let variant = match arg.as_str() {
        "good" => Variant::Good,
        "buggy" => Variant::StepInKey,
        "buggy-eps" => Variant::EpsInsideSqrt,
        "buggy-count" => Variant::CountPerTensor,
        other => {
            eprintln!(
                "custom_optimizer: unknown variant `{other}` (good, buggy, buggy-eps, buggy-count)"
            );
            return ExitCode::from(2);
        }
    };
    // Adam only: RAdam specs are skipped by the suite.
    let make = move |spec: &OptimizerSpec| match spec.algorithm {
        Algorithm::Adam => Ok(Staged::new(MyAdam::new(spec, variant)?)),
        Algorithm::RAdam => Err(optimizer::unsupported(spec)),
    };
    let report = optimizer::check(&format!("my_adam ({arg})"), &make, &SuiteOptions::default());
    print!("{}", report.summary());
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
