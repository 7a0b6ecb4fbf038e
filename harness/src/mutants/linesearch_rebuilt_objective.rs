//! `linesearch-rebuilt-objective`: the update's loop functions are keyed by a freshly built
//! object each call (optax #1171: `cond_fn`/`body_fn` defined inside `update`, so every call hands
//! `jax.lax.while_loop` new function objects). Here the staging key takes a fresh object id per
//! call instead of the objective's type, so every update is a new trace.

use super::Mutant;
use crate::backend::Real;
use crate::laws::linesearch::{trace_case, trace_once, CaseObjective, TraceSubject};
use crate::laws::{check_property, DEFAULT_SEED};
use crate::optim::linesearch::{LineSearch, LineSearchState, SgdLineSearch, Staged};
use crate::optim::{ChainState, NoState};
use crate::reference::Result;
use crate::tree::Tree;
use std::sync::atomic::{AtomicU64, Ordering};

/// Ids of the freshly built loop functions (Python's `id()` of a new closure).
static NEXT_OBJECT: AtomicU64 = AtomicU64::new(1);

/// The reference with the objective identity rebuilt per call.
pub struct RebuiltObjective;

impl TraceSubject for RebuiltObjective {
    fn init<A: Real>(
        &self,
        opt: &SgdLineSearch,
        params: &Tree<A>,
    ) -> Result<ChainState<NoState, LineSearchState<A>>> {
        opt.init(params)
    }
    fn update<A: Real>(
        &self,
        staged: &mut Staged<SgdLineSearch>,
        grad: &Tree<A>,
        state: &ChainState<NoState, LineSearchState<A>>,
        params: &Tree<A>,
        value: A,
        objective: &CaseObjective,
    ) -> Result<(Tree<A>, ChainState<NoState, LineSearchState<A>>)> {
        let fresh = NEXT_OBJECT.fetch_add(1, Ordering::Relaxed); // the bug
        staged.update_with_identity(fresh, grad, state, params, value, grad, objective)
    }
}

/// The `linesearch-rebuilt-objective` mutant (optax #1171), caught by `linesearch_trace_once`.
pub fn mutant() -> Mutant {
    Mutant {
        name: "linesearch-rebuilt-objective",
        incident: "optax #1171 (loop functions rebuilt inside update: one trace per call)",
        law: "linesearch_trace_once",
        run: || {
            check_property(
                "linesearch_trace_once",
                128,
                DEFAULT_SEED,
                trace_case(),
                |c| trace_once(c, &RebuiltObjective),
            )
        },
    }
}
