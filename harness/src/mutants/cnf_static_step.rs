//! `cnf-static-step`: the training step counter passed as static configuration — what a Python
//! int does under `jax.jit` (diffrax #574: every step re-traced and the compilation cache, one
//! executable per step, grew). [`StaticStep`] stages the reference's step itself, with the
//! counter's value in the static key, so each step is a new trace and the cache keeps every
//! plan; `cnf_train_trace_once` catches it with N = 2.

use super::Mutant;
use crate::backend::Real;
use crate::cnf::train::{StepWorkspace, TrainState, Trainer};
use crate::laws::cnf::{train_case, train_trace_once_with, TrainCase, TrainSubject};
use crate::laws::{check_property, DEFAULT_SEED};
use crate::reference::Result;
use crate::stage::{KeyHasher, Stage};
use proptest::strategy::Strategy;

/// The reference training step (in `A`, f32 or f64), staged with the step counter hashed into
/// the static key.
pub struct StaticStep<A: Real = f64> {
    trainer: Trainer<A>,
    stage: Stage<StepWorkspace<A>>,
}

impl<A: Real> StaticStep<A> {
    /// The mutant around `trainer`.
    pub fn new(trainer: Trainer<A>) -> Self {
        Self {
            trainer,
            stage: Stage::new("cnf_train_step"),
        }
    }
}

impl<A: Real> TrainSubject<A> for StaticStep<A> {
    fn init(&self) -> Result<TrainState<A>> {
        self.trainer.init()
    }
    fn step(&mut self, state: &TrainState<A>) -> Result<(TrainState<A>, f64)> {
        let counter = state.step.data().first().copied().unwrap_or(0);
        // the Python int baked into the trace
        let key = KeyHasher::default()
            .val(self.trainer.static_key())
            .val(counter)
            .finish();
        let trainer = &self.trainer;
        let ws = self.stage.call(key, state, |_| Ok(trainer.workspace()))?;
        trainer.step_in(ws, state)
    }
    fn traces(&self) -> usize {
        self.stage.traces()
    }
    fn plans(&self) -> usize {
        self.stage.plans()
    }
}

/// The mutant as the laws take it (f64; [`typed_subject`] at f64).
pub fn subject(trainer: Trainer) -> Box<dyn TrainSubject> {
    typed_subject(trainer)
}

/// The mutant as the laws take it, in `A`.
pub fn typed_subject<A: Real>(trainer: Trainer<A>) -> Box<dyn TrainSubject<A>> {
    Box::new(StaticStep::new(trainer))
}

/// The `cnf-static-step` mutant (diffrax #574), caught by `cnf_train_trace_once`.
pub fn mutant() -> Mutant {
    Mutant {
        name: "cnf-static-step",
        incident: "diffrax #574 (CNF training re-traced every step; memory grew)",
        law: "cnf_train_trace_once",
        run: || {
            let _g = crate::probe::exclusive();
            check_property(
                "cnf_train_trace_once",
                16,
                DEFAULT_SEED,
                train_case().prop_map(|c| TrainCase { steps: 2, ..c }),
                |c| train_trace_once_with(c, &subject),
            )
        },
    }
}
