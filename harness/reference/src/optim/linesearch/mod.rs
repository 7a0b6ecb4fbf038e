//! Line searches: transforms whose update also receives the objective.
//!
//! optax's `GradientTransformationExtraArgs`: `update(u, state, params, value, grad, value_fn)`.
//! Here that is the [`LineSearch`] trait; `chain(descent, search)` is a [`LineSearch`] when the
//! first element is an ordinary [`Transform`] ([`sgd_linesearch`] builds the usual
//! `sgd(1.0) + backtracking`). [`Staged`] is `jax.jit(update)`: the update goes through the
//! specialisation cache, keyed by the search's static configuration and the objective's *type*
//! ([`objective_key`]), never its address, so re-creating the same objective never re-traces.
//!
//! - [`armijo`] — the acceptance rule as a value.
//! - [`backtracking`] — `scale_by_backtracking_linesearch`, its round written once over
//!   [`SearchKernels`], with the loop kernels ([`FastKernels`]);
//! - [`dfdx_face`] — the same kernels as dfdx tensor operations ([`crate::Face::Dfdx`]).
//! - [`objective`] — the [`Objective`] trait and the fixture problems.

pub mod armijo;
pub mod backtracking;
pub mod dfdx_face;
pub mod objective;

pub use armijo::Armijo;
pub use backtracking::{
    add_scale, slope, BacktrackingHyper, FastKernels, LineSearchInfo, LineSearchState, RoundArgs,
    Scalar, ScaleByBacktrackingLinesearch, SearchKernels,
};
pub use dfdx_face::DfdxKernels;
pub use objective::{point, Himmelblau, Matyas, Objective, Quadratic, Rosenbrock};

use super::{Chain, ChainState, ScaleByLearningRate, Transform};
use crate::backend::Real;
use crate::stage::{static_key, HasSignature, KeyHasher, LeafSig, Signature, Stage};
use crate::tree::Tree;
use crate::{Error, Result};
use std::any::TypeId;

/// A transform whose update needs the objective (optax's extra-args update).
pub trait LineSearch<A: Real> {
    /// Its [`Signature`] must be the same after `init` and after every `update`.
    type State: Clone + std::fmt::Debug + HasSignature;
    /// Hash of the static configuration.
    fn static_key(&self) -> u64;
    /// The state before the first update (its signature is the one every update must keep).
    fn init(&self, params: &Tree<A>) -> Result<Self::State>;
    /// `updates` is the direction, `value`/`grad` are `f(params)` and its gradient.
    fn update<O: Objective<A> + ?Sized>(
        &self,
        updates: &Tree<A>,
        state: &Self::State,
        params: &Tree<A>,
        value: A,
        grad: &Tree<A>,
        objective: &O,
    ) -> Result<(Tree<A>, Self::State)>;
}

impl<A: Real, T: Transform<A>, L: LineSearch<A>> LineSearch<A> for Chain<T, L> {
    type State = ChainState<T::State, L::State>;
    fn static_key(&self) -> u64 {
        KeyHasher::default()
            .val("chain")
            .val(self.0.static_key())
            .val(self.1.static_key())
            .finish()
    }
    fn init(&self, params: &Tree<A>) -> Result<Self::State> {
        Ok(ChainState(self.0.init(params)?, self.1.init(params)?))
    }
    fn update<O: Objective<A> + ?Sized>(
        &self,
        updates: &Tree<A>,
        state: &Self::State,
        params: &Tree<A>,
        value: A,
        grad: &Tree<A>,
        objective: &O,
    ) -> Result<(Tree<A>, Self::State)> {
        let (u, s0) = self.0.update(updates, &state.0, params)?;
        let (u, s1) = self
            .1
            .update(&u, &state.1, params, value, grad, objective)?;
        Ok((u, ChainState(s0, s1)))
    }
}

/// `chain(sgd(learning_rate=1.0), scale_by_backtracking_linesearch(**hyper))`.
pub type SgdLineSearch = Chain<ScaleByLearningRate, ScaleByBacktrackingLinesearch>;

/// Build [`SgdLineSearch`] (validated).
pub fn sgd_linesearch(hyper: BacktrackingHyper) -> Result<SgdLineSearch> {
    Ok(super::chain(
        ScaleByLearningRate::new(1.0)?,
        ScaleByBacktrackingLinesearch::new(hyper)?,
    ))
}

/// optax's `value_and_grad_from_state`: the value and gradient stored by a `store_grad` search
/// (they are `f` and `grad f` at the point the last update moved to), or computed afresh when the
/// stored value is infinite (after `init`). Without a stored gradient: a typed error.
pub fn value_and_grad_from_state<A: Real, O: Objective<A> + ?Sized>(
    objective: &O,
    params: &Tree<A>,
    state: &LineSearchState<A>,
) -> Result<(A, Tree<A>)> {
    let Some(grad) = &state.grad else {
        return Err(Error::InvalidHyper {
            name: "store_grad",
            value: "false".into(),
            expected: "must be true to take the value and gradient from the state".into(),
        });
    };
    if state.value.value.is_infinite() {
        objective.value_and_grad(params)
    } else {
        params.check_like(grad, "state.grad")?;
        Ok((state.value.value, grad.clone()))
    }
}

/// The staging-key part that identifies an objective: its type, never its address.
pub fn objective_key<O: ?Sized + 'static>() -> u64 {
    static_key(&TypeId::of::<O>())
}

/// `jax.jit` of a line search's update: traced once per (static configuration, objective
/// identity, signature of `(updates, state, params, value, grad, objective data)`).
pub struct Staged<L> {
    /// The wrapped line search, called on every update.
    pub search: L,
    stage: Stage<()>,
}

impl<L> Staged<L> {
    /// Wrap `search`, with nothing traced yet and no trace limit.
    pub fn new(search: L) -> Self {
        Self {
            search,
            stage: Stage::new("linesearch_update"),
        }
    }
    /// Refuse more than `n` traces (the error names the leaf whose signature changed).
    pub fn with_max_traces(mut self, n: usize) -> Self {
        self.stage = self.stage.with_max_traces(n);
        self
    }
    /// Traces made so far.
    pub fn traces(&self) -> usize {
        self.stage.traces()
    }
    /// The specialisation cache (its trace log and miss reasons).
    pub fn stage(&self) -> &Stage<()> {
        &self.stage
    }

    /// Trace (on a miss) and run the update; the objective enters the key by [`objective_key`].
    pub fn update<A: Real, O: Objective<A> + 'static>(
        &mut self,
        updates: &Tree<A>,
        state: &L::State,
        params: &Tree<A>,
        value: A,
        grad: &Tree<A>,
        objective: &O,
    ) -> Result<(Tree<A>, L::State)>
    where
        L: LineSearch<A>,
    {
        self.update_with_identity(
            objective_key::<O>(),
            updates,
            state,
            params,
            value,
            grad,
            objective,
        )
    }

    /// [`Staged::update`] with the objective's identity given explicitly.
    #[allow(clippy::too_many_arguments)]
    pub fn update_with_identity<A: Real, O: Objective<A> + ?Sized>(
        &mut self,
        identity: u64,
        updates: &Tree<A>,
        state: &L::State,
        params: &Tree<A>,
        value: A,
        grad: &Tree<A>,
        objective: &O,
    ) -> Result<(Tree<A>, L::State)>
    where
        L: LineSearch<A>,
    {
        let mut sig = Signature::new()
            .with("updates", updates.signature())
            .with("state", state.signature())
            .with("params", params.signature())
            .with("grad", grad.signature())
            .with("objective", objective.data_signature());
        sig.push("value", LeafSig::strong(&[], A::DTYPE));
        let key = KeyHasher::default()
            .val(self.search.static_key())
            .val(identity)
            .finish();
        self.stage.call_sig(key, sig, |_| Ok(()))?;
        self.search
            .update(updates, state, params, value, grad, objective)
    }
}
