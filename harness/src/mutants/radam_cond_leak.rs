//! `radam-cond-leak`: the `lax.cond` form re-staged every step, retaining what each step captured
//! (optax #580 / #969). The step counter enters the staging key as if it were static, so every
//! step is a new trace, and each trace's plan keeps a copy of the moments it closed over, so live
//! memory grows with the number of steps.

use super::Mutant;
use crate::laws::radam::{last_momentum_step, leaf, run_memory_law, Stepper};
use crate::laws::DEFAULT_SEED;
use crate::optim::{self, Chain, ScaleByLearningRate, ScaleByRadam, Selection, Transform};
use crate::reference::Result;
use crate::stage::{KeyHasher, Stage};
use crate::tree::{apply_updates, Tree};

type Radam = Chain<ScaleByRadam, ScaleByLearningRate>;

/// The leaking branch form.
pub struct CondLeak {
    opt: Radam,
    state: <Radam as Transform<f32>>::State,
    /// One plan per step, each holding the captured moments.
    stage: Stage<Tree<f32>>,
}

impl CondLeak {
    /// The leaking stepper for `params` (default hyperparameters, learning rate 1e-3).
    pub fn new(params: &Tree<f32>) -> Result<Self> {
        let opt = optim::radam(1e-3, Default::default(), Selection::Branch)?;
        let state = opt.init(params)?;
        Ok(Self {
            opt,
            state,
            stage: Stage::new("radam_cond"),
        })
    }
}

impl Stepper for CondLeak {
    fn step(&mut self, params: &mut Tree<f32>, grads: &Tree<f32>) -> Result<()> {
        let count = self.state.0.count;
        let key = KeyHasher::default()
            .val(Transform::<f32>::static_key(&self.opt))
            .val(count) // the bug: dynamic state treated as static
            .finish();
        let mu = self.state.0.mu.clone();
        self.stage.call(key, &*params, |_| Ok(mu))?;
        let (u, s) = self.opt.update(grads, &self.state, params)?;
        *params = apply_updates(params, &u)?;
        self.state = s;
        Ok(())
    }
    fn traces(&self) -> Option<usize> {
        Some(self.stage.traces())
    }
}

pub fn mutant() -> Mutant {
    Mutant {
        name: "radam-cond-leak",
        incident: "optax #580/#969 (lax.cond re-staged per step)",
        law: "radam_steps_trace_once_memory_flat",
        run: || {
            let _g = crate::probe::exclusive();
            let make =
                |p: &Tree<f32>| -> Result<Box<dyn Stepper>> { Ok(Box::new(CondLeak::new(p)?)) };
            let _ = leaf::<f32>;
            run_memory_law(
                "radam_steps_trace_once_memory_flat",
                8,
                DEFAULT_SEED,
                &make,
                last_momentum_step(&Default::default()),
            )
        },
    }
}
