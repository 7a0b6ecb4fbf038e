//! Wrong backtracking line searches, each a [`TraceSubject`] of its own: the line-search laws of
//! `laws::linesearch` must catch every one. Each runs the reference search and then makes one
//! mistake with its result.
//!
//! - [`DoubledStep`]: the step returned is twice the accepted one (the parameters are not those
//!   the Armijo test accepted): the Armijo and convex-monotone laws catch it.
//! - [`LearningRateHalvedAfterTheSearch`]: one decrease too many after the accepted candidate
//!   (state and step): the evaluation-count law catches it, bit for bit.
//! - [`StepsOnNonFinite`]: when no candidate was finite, a unit step along `-grad` instead of a
//!   zero step (the Armijo test written so that NaN passes): the non-finite law catches it.

use crate::backend::Real;
use crate::laws::linesearch::{CaseObjective, Reference, TraceSubject};
use crate::optim::linesearch::{LineSearchState, SgdLineSearch, Staged};
use crate::optim::{ChainState, NoState};
use crate::reference::Result;
use crate::tree::Tree;

type State<A> = ChainState<NoState, LineSearchState<A>>;

/// The reference's step, doubled.
///
/// ```
/// use harness::laws::linesearch::{armijo_on_success_with, ls_case};
/// use harness::laws::{check_property, DEFAULT_SEED};
/// use harness::mutants::linesearch_steps::DoubledStep;
/// let r = check_property("armijo", 128, DEFAULT_SEED, ls_case(), |c| {
///     armijo_on_success_with(c, &DoubledStep)
/// });
/// assert!(r.is_err());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct DoubledStep;

/// The reference's accepted learning rate halved once more, in the state and in the step.
#[derive(Debug, Clone, Copy)]
pub struct LearningRateHalvedAfterTheSearch;

/// The reference, except that a search with no finite candidate steps by `-grad`.
#[derive(Debug, Clone, Copy)]
pub struct StepsOnNonFinite;

/// `tree * k`, element by element.
fn scaled<A: Real>(tree: &Tree<A>, k: A) -> Tree<A> {
    tree.map(|a| a.map(|v| v * k))
}

macro_rules! after_the_reference {
    ($subject:ty, |$u:ident, $next:ident, $grad:ident| $mistake:block) => {
        impl TraceSubject for $subject {
            fn init<A: Real>(&self, opt: &SgdLineSearch, params: &Tree<A>) -> Result<State<A>> {
                Reference.init(opt, params)
            }
            fn update<A: Real>(
                &self,
                staged: &mut Staged<SgdLineSearch>,
                $grad: &Tree<A>,
                state: &State<A>,
                params: &Tree<A>,
                value: A,
                objective: &CaseObjective,
            ) -> Result<(Tree<A>, State<A>)> {
                #[allow(unused_mut)]
                let (mut $u, mut $next) =
                    Reference.update(staged, $grad, state, params, value, objective)?;
                $mistake
                Ok(($u, $next))
            }
        }
    };
}

after_the_reference!(DoubledStep, |u, next, grad| {
    u = scaled(&u, A::of_f64(2.0));
});

after_the_reference!(LearningRateHalvedAfterTheSearch, |u, next, grad| {
    let half = A::of_f64(0.5);
    next.1.learning_rate.value *= half;
    u = scaled(&u, half);
});

after_the_reference!(StepsOnNonFinite, |u, next, grad| {
    if next.1.info.decrease_error.value.is_infinite() {
        u = scaled(grad, A::of_f64(-1.0));
    }
});
