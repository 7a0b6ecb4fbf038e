//! `argmin` 0.11.0 behind [`BacktrackingSearch`]: `BacktrackingLineSearch` with
//! `ArmijoCondition`, run by argmin's `Executor` on `Vec<f64>` (`argmin-math` 0.5.1, `vec`).
//!
//! The adapter maps a [`SearchRequest`] onto the crate's documented calls and nothing more:
//! `ArmijoCondition::new(c)`, `BacktrackingLineSearch::new(condition).rho(rho)`,
//! `search_direction(d)`, `initial_step_length(alpha_0)`, and an `Executor` configured with the
//! start point, its cost and gradient (so the search does not evaluate them again) and
//! `max_iters(max_trials - 1)`: argmin evaluates the first candidate in `init`, before its first
//! iteration, and one more per iteration. A request for zero trials cannot be expressed that way
//! and is refused by the adapter. The answer is the state's current point when the search
//! terminated with `SolverConverged` (the condition held), else the state's best point with
//! `accepted: false`. Errors of the crate become `Err`; a panic or a hang is left to the suite's
//! time-limited thread to report.
//!
//! # References
//! - `argmin` 0.11.0 documentation, `solver::linesearch::BacktrackingLineSearch`,
//!   `solver::linesearch::condition::ArmijoCondition`, `core::Executor`.
//!
//! ```
//! use harness::subject::linesearch::BacktrackingSearch;
//! assert!(!peers::argmin_adapter::Argmin.accepts_zero_slope_rtol());
//! ```

use argmin::core::{
    CostFunction, Executor, Gradient, LineSearch, State, TerminationReason, TerminationStatus,
};
use argmin::solver::linesearch::condition::ArmijoCondition;
use argmin::solver::linesearch::BacktrackingLineSearch;
use harness::subject::linesearch::{
    BacktrackingSearch, SearchProblem, SearchReport, SearchRequest,
};
use harness::subject::{Error, Result};
use std::sync::Arc;

/// The crate version the adapter was written against (pinned in `Cargo.toml`).
pub const VERSION: &str = "0.11.0";

/// `argmin`'s backtracking line search with the Armijo condition.
#[derive(Debug, Clone, Copy)]
pub struct Argmin;

/// The suite's objective as an argmin problem (its evaluations are counted by the suite).
struct Problem(Arc<SearchProblem>);

impl CostFunction for Problem {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, x: &Vec<f64>) -> std::result::Result<f64, argmin::core::Error> {
        self.0
            .value(x)
            .map_err(|e| argmin::core::Error::msg(e.to_string()))
    }
}

impl Gradient for Problem {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, x: &Vec<f64>) -> std::result::Result<Vec<f64>, argmin::core::Error> {
        self.0
            .gradient(x)
            .map_err(|e| argmin::core::Error::msg(e.to_string()))
    }
}

fn crate_error(e: argmin::core::Error) -> Error {
    Error::External(format!("argmin: {e}"))
}

impl BacktrackingSearch for Argmin {
    fn name(&self) -> String {
        "argmin BacktrackingLineSearch + ArmijoCondition".into()
    }
    fn accepts_zero_slope_rtol(&self) -> bool {
        false // ArmijoCondition::new documents c in (0, 1)
    }
    fn search(&self, r: &SearchRequest) -> Result<SearchReport> {
        let iterations = r
            .max_trials
            .checked_sub(1)
            .ok_or_else(|| Error::InvalidHyper {
                name: "max_trials",
                value: "0".into(),
                expected: "at least 1: argmin evaluates the first candidate before any iteration"
                    .into(),
            })?;
        let condition = ArmijoCondition::new(r.slope_rtol).map_err(crate_error)?;
        let mut search: BacktrackingLineSearch<Vec<f64>, Vec<f64>, _, f64> =
            BacktrackingLineSearch::new(condition)
                .rho(r.decrease_factor)
                .map_err(crate_error)?;
        search.search_direction(r.direction.clone());
        search
            .initial_step_length(r.initial_step)
            .map_err(crate_error)?;
        let (x0, g0, f0) = (r.x0.clone(), r.grad0.clone(), r.value0);
        let result = Executor::new(Problem(Arc::clone(&r.problem)), search)
            .configure(|s| {
                s.param(x0)
                    .gradient(g0)
                    .cost(f0)
                    .max_iters(iterations as u64)
            })
            .run()
            .map_err(crate_error)?;
        let state = &result.state;
        let accepted = matches!(
            state.get_termination_status(),
            TerminationStatus::Terminated(TerminationReason::SolverConverged)
        );
        let x = if accepted {
            state.get_param()
        } else {
            state.get_best_param()
        };
        Ok(SearchReport {
            x: x.cloned().unwrap_or_else(|| r.x0.clone()),
            value: if accepted {
                state.get_cost()
            } else {
                state.get_best_cost()
            },
            accepted,
        })
    }
}
