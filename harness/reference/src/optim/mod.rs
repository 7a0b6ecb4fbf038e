//! Gradient transformations in optax's shape: `init(params) -> state`,
//! `update(updates, state, params) -> (updates, state)`, chaining, and the aliases.
//!
//! Every transform has a *composed* form written with dfdx tensor ops ([`crate::backend::Ten`]),
//! which reads like the formulas; Adam and RAdam also have a *fused* single-pass form
//! ([`fused::FusedMoments`]) that updates parameters in place over planned buffers. A law keeps
//! the two bit-identical.

pub mod adam;
pub mod decay;
pub mod fused;
pub mod jit;
pub mod linesearch;
pub mod moments;
pub mod muon;
pub mod radam;

use crate::backend::Float;
use crate::stage::{HasSignature, KeyHasher, Signature};
use crate::tree::Tree;
use crate::{error::ensure, Result};

pub use adam::ScaleByAdam;
pub use decay::AddDecayedWeights;
pub use fused::FusedMoments;
pub use jit::Jit;
pub use moments::{AdamHyper, MomentState};
pub use muon::{CoeffSpec, Muon, MuonHyper, MuonState};
pub use radam::{RadamHyper, ScaleByRadam, Selection};

/// A gradient transformation (optax's `GradientTransformation`).
pub trait Transform<E: Float> {
    /// The state; its [`Signature`] must be the same after `init` and after every `update`.
    type State: Clone + std::fmt::Debug + HasSignature;
    /// Hash of the static configuration (what `jax.jit` would close over).
    fn static_key(&self) -> u64;
    /// Fresh state for these parameters.
    fn init(&self, params: &Tree<E>) -> Result<Self::State>;
    /// Transform `updates`; the input state is left untouched, so an error corrupts nothing.
    fn update(
        &self,
        updates: &Tree<E>,
        state: &Self::State,
        params: &Tree<E>,
    ) -> Result<(Tree<E>, Self::State)>;
}

/// The empty state of stateless transforms.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct NoState;

impl HasSignature for NoState {
    fn signature(&self) -> Signature {
        Signature::new()
    }
}

/// `a` then `b` (optax's `chain`); the state is the pair, signed as `0.*` and `1.*`.
#[derive(Clone, Debug)]
pub struct Chain<A, B>(pub A, pub B);

/// Compose two transforms.
pub fn chain<A, B>(a: A, b: B) -> Chain<A, B> {
    Chain(a, b)
}

/// State of a [`Chain`].
#[derive(Clone, Debug, PartialEq)]
pub struct ChainState<SA, SB>(pub SA, pub SB);

impl<SA: HasSignature, SB: HasSignature> HasSignature for ChainState<SA, SB> {
    fn signature(&self) -> Signature {
        Signature::new()
            .with("0", self.0.signature())
            .with("1", self.1.signature())
    }
}

impl<E: Float, A: Transform<E>, B: Transform<E>> Transform<E> for Chain<A, B> {
    type State = ChainState<A::State, B::State>;
    fn static_key(&self) -> u64 {
        KeyHasher::default()
            .val("chain")
            .val(self.0.static_key())
            .val(self.1.static_key())
            .finish()
    }
    fn init(&self, params: &Tree<E>) -> Result<Self::State> {
        Ok(ChainState(self.0.init(params)?, self.1.init(params)?))
    }
    fn update(
        &self,
        updates: &Tree<E>,
        state: &Self::State,
        params: &Tree<E>,
    ) -> Result<(Tree<E>, Self::State)> {
        let (u, s0) = self.0.update(updates, &state.0, params)?;
        let (u, s1) = self.1.update(&u, &state.1, params)?;
        Ok((u, ChainState(s0, s1)))
    }
}

/// Multiply updates by `-learning_rate` (optax's `scale_by_learning_rate`), in the updates' dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleByLearningRate {
    learning_rate: f64,
}

impl ScaleByLearningRate {
    /// `learning_rate` must be finite.
    pub fn new(learning_rate: f64) -> Result<Self> {
        ensure(
            learning_rate.is_finite(),
            "learning_rate",
            learning_rate,
            "must be finite",
        )?;
        Ok(Self { learning_rate })
    }
    /// The learning rate `lr` (finite); updates are multiplied by `-lr`.
    pub fn learning_rate(&self) -> f64 {
        self.learning_rate
    }
}

impl<E: Float> Transform<E> for ScaleByLearningRate {
    type State = NoState;
    fn static_key(&self) -> u64 {
        KeyHasher::default()
            .val("scale_by_learning_rate")
            .f64(self.learning_rate)
            .finish()
    }
    fn init(&self, _params: &Tree<E>) -> Result<NoState> {
        Ok(NoState)
    }
    fn update(&self, u: &Tree<E>, _s: &NoState, _p: &Tree<E>) -> Result<(Tree<E>, NoState)> {
        let step = E::of_f64(-self.learning_rate).to_acc();
        Ok((
            u.map(|a| a.map_vectorised(|x| E::from_acc(x.to_acc() * step))),
            NoState,
        ))
    }
}

/// `optax.adam(learning_rate, ...)`: `chain(scale_by_adam, scale_by_learning_rate)`.
pub fn adam(
    learning_rate: f64,
    hyper: AdamHyper,
) -> Result<Chain<ScaleByAdam, ScaleByLearningRate>> {
    Ok(chain(
        ScaleByAdam::new(hyper)?,
        ScaleByLearningRate::new(learning_rate)?,
    ))
}

/// `optax.adamw(learning_rate, ..., weight_decay)`:
/// `chain(scale_by_adam, add_decayed_weights(weight_decay), scale_by_learning_rate)`.
pub fn adamw(learning_rate: f64, hyper: AdamHyper, weight_decay: f64) -> Result<AdamW> {
    Ok(chain(
        chain(
            ScaleByAdam::new(hyper)?,
            AddDecayedWeights::new(weight_decay)?,
        ),
        ScaleByLearningRate::new(learning_rate)?,
    ))
}

/// The transform [`adamw`] builds.
pub type AdamW = Chain<Chain<ScaleByAdam, AddDecayedWeights>, ScaleByLearningRate>;

/// `optax.radam(learning_rate, ...)` with the chosen selection form.
pub fn radam(
    learning_rate: f64,
    hyper: RadamHyper,
    selection: Selection,
) -> Result<Chain<ScaleByRadam, ScaleByLearningRate>> {
    Ok(chain(
        ScaleByRadam::new(hyper, selection)?,
        ScaleByLearningRate::new(learning_rate)?,
    ))
}

pub use crate::tree::apply_updates;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_by_learning_rate_reports_the_rate_it_was_built_with_and_rejects_non_finite() {
        // The rate is reported exactly as given, whatever its sign or size.
        for lr in [0.25, -3.0e-4, 2.0] {
            assert_eq!(ScaleByLearningRate::new(lr).unwrap().learning_rate(), lr);
        }
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(ScaleByLearningRate::new(bad).is_err());
        }
    }

    #[test]
    fn scale_by_learning_rate_static_key_separates_rates() {
        // The specialisation cache reuses a plan only for an equal static key: two rates sharing
        // a key would share a plan.
        let key = |lr| Transform::<f32>::static_key(&ScaleByLearningRate::new(lr).unwrap());
        assert_eq!(key(0.1), key(0.1));
        assert_ne!(key(0.1), key(0.2));
        assert_ne!(key(0.1), key(-0.1));
    }
}
