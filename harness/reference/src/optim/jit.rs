//! `jax.jit(update)`: a transform's update staged through the specialisation cache.

use super::Transform;
use crate::backend::Float;
use crate::stage::{HasSignature, Signature, Stage};
use crate::tree::Tree;
use crate::Result;

/// A transform whose `update` is traced once per (static configuration, signature of
/// `(updates, state, params)`). A state whose signature drifts between `init` and `update`
/// shows up here as a second trace.
pub struct Jit<T> {
    /// The wrapped transform, called on every update.
    pub transform: T,
    stage: Stage<()>,
}

impl<T> Jit<T> {
    /// Wrap `transform`, with nothing traced yet and no trace limit.
    pub fn new(transform: T) -> Self {
        Self {
            transform,
            stage: Stage::new("update"),
        }
    }
    /// Refuse more than `n` traces (see [`Stage::with_max_traces`]).
    pub fn with_max_traces(mut self, n: usize) -> Self {
        self.stage = self.stage.with_max_traces(n);
        self
    }
    /// Traces made so far (one per new static key or state signature).
    pub fn traces(&self) -> usize {
        self.stage.traces()
    }
    /// The specialisation cache (its trace log and miss reasons).
    pub fn stage(&self) -> &Stage<()> {
        &self.stage
    }

    /// Trace (on a miss) and run `update`.
    pub fn update<E: Float>(
        &mut self,
        updates: &Tree<E>,
        state: &T::State,
        params: &Tree<E>,
    ) -> Result<(Tree<E>, T::State)>
    where
        T: Transform<E>,
    {
        let sig = Signature::new()
            .with("updates", updates.signature())
            .with("state", state.signature())
            .with("params", params.signature());
        self.stage
            .call_sig(self.transform.static_key(), sig, |_| Ok(()))?;
        self.transform.update(updates, state, params)
    }
}
