//! `linesearch-weak-init`: `init` builds `info.num_linesearch_steps` as a weak literal
//! (`jnp.asarray(0)` in optax 0.2.8), while `update` returns it strong (optax #1171; still
//! present after PR #1175). The state's signature changes on the first update, so a jitted loop
//! traces twice.

use super::Mutant;
use crate::backend::Real;
use crate::laws::linesearch::{trace_case, trace_once, CaseObjective, Reference, TraceSubject};
use crate::laws::{check_property, DEFAULT_SEED};
use crate::optim::linesearch::{LineSearch, LineSearchState, Scalar, SgdLineSearch, Staged};
use crate::optim::{ChainState, NoState};
use crate::reference::Result;
use crate::tree::Tree;

/// The reference with a weak counter after `init`.
pub struct WeakInit;

impl TraceSubject for WeakInit {
    fn init<A: Real>(
        &self,
        opt: &SgdLineSearch,
        params: &Tree<A>,
    ) -> Result<ChainState<NoState, LineSearchState<A>>> {
        let mut s = opt.init(params)?;
        s.1.info.num_linesearch_steps = Scalar::weak(0); // the bug
        Ok(s)
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
        Reference.update(staged, grad, state, params, value, objective)
    }
}

/// The `linesearch-weak-init` mutant (optax #1171 / PR #1175), caught by `linesearch_trace_once`.
pub fn mutant() -> Mutant {
    Mutant {
        name: "linesearch-weak-init",
        incident: "optax #1171 / PR #1175 (weak num_linesearch_steps after init)",
        law: "linesearch_trace_once",
        run: || {
            check_property(
                "linesearch_trace_once",
                128,
                DEFAULT_SEED,
                trace_case(),
                |c| trace_once(c, &WeakInit),
            )
        },
    }
}
