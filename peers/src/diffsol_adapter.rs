//! `diffsol` 0.18.0 behind [`OdeSolver`]: its explicit Runge–Kutta solver `ExplicitRk` with the
//! built-in Tsitouras 5(4) tableau (`OdeSolverProblem::tsit45`), adaptive steps only.
//!
//! The adapter maps a [`SolveRequest`] onto the crate's builder and stepping API and nothing more:
//! - the problem: `OdeBuilder::<NalgebraMat<f64>>::new()` with the field as the `rhs` closure
//!   `f(x, p, t, y)` (no Jacobian, no parameters), `y0` as the `init` closure, `t0`, the request's
//!   `rtol` and one `atol` for every component, and `h0` of `±1` in the direction of `t1 - t0`:
//!   the crate takes only the sign of `h0` and chooses the first step itself (Hairer, Nørsett,
//!   Wanner §II.4's starting-step algorithm), so the adapter sets no initial step; every other
//!   option (controller gains, growth and shrink bounds, minimum step `1e-13`, 40 error-test
//!   failures per step) is the crate's default;
//! - the solve: `set_stop_time(t1)`, then `step()` until it reports `TstopReached`; the answer is
//!   the solver's state `y` there;
//! - the step budget: the crate has no step limit, so the adapter counts attempted steps itself,
//!   `number_of_steps + number_of_error_test_failures` of the solver's statistics (accepted and
//!   rejected), and refuses with an `Err` when the budget is spent before `t1` or when one
//!   `step()` call went past it. One `step()` call retries a rejected step internally, so the
//!   crate may attempt steps past the budget within a call; the answer is then refused, never
//!   returned;
//! - constant steps: the crate has no constant-step mode for its explicit solver, so
//!   [`OdeSolver::supports`] says no, and the suite reports the laws that need them not
//!   applicable.
//!
//! The state is the crate's `NalgebraVec<f64>`; the field is evaluated through slices. Errors of
//! the crate (`DiffsolError`) become `Err(Error::External)`; a panic or a hang inside the crate
//! is left to the suite's time-limited thread to report.
//!
//! # References
//! - Ch. Tsitouras, "Runge–Kutta pairs of order 5(4) satisfying only the first column
//!   simplifying assumption", *Computers & Mathematics with Applications* 62 (2011) 770–775
//!   (the tableau).
//! - E. Hairer, S. P. Nørsett, G. Wanner, *Solving Ordinary Differential Equations I*, §II.4
//!   (the starting step size the crate computes).
//! - `diffsol` 0.18.0 documentation, `OdeBuilder`, `OdeSolverProblem::tsit45`,
//!   `OdeSolverMethod::{set_stop_time, step, get_statistics}`.
//!
//! ```
//! use harness::subject::ode::{OdeSolver, SolveRequest, Stepping};
//! use peers::diffsol_adapter::Diffsol;
//! use std::sync::Arc;
//! let decay = |_t: f64, y: &[f64], dy: &mut [f64]| dy[0] = -y[0];
//! let r = SolveRequest {
//!     field: Arc::new(decay),
//!     t0: 0.0,
//!     t1: 1.0,
//!     y0: vec![1.0],
//!     stepping: Stepping::Adaptive { rtol: 1e-8, atol: 1e-10 },
//!     max_steps: 1000,
//! };
//! let s = Diffsol.solve(&r).unwrap();
//! assert!((s.y_final[0] - (-1f64).exp()).abs() < 1e-6);
//! assert!(s.accepted + s.rejected <= 1000);
//! ```

use diffsol::{NalgebraMat, OdeBuilder, OdeSolverMethod, OdeSolverStopReason, Vector};
use harness::reference::{Error, Result};
use harness::subject::ode::{Evaluations, OdeSolver, SolveReport, SolveRequest, Stepping};

/// The crate version the adapter was written against (pinned in `Cargo.toml`).
///
/// ```
/// assert_eq!(peers::diffsol_adapter::VERSION, "0.18.0");
/// ```
pub const VERSION: &str = "0.18.0";

/// `diffsol`'s explicit Runge–Kutta solver with the Tsit45 tableau as a subject of the ODE suite
/// (module docs: how a request is mapped).
///
/// ```
/// use harness::subject::ode::{OdeSolver, Stepping};
/// use peers::diffsol_adapter::Diffsol;
/// assert_eq!(Diffsol.name(), "diffsol Tsit45");
/// assert!(Diffsol.supports(&Stepping::Adaptive { rtol: 1e-6, atol: 1e-8 }));
/// assert!(!Diffsol.supports(&Stepping::Constant { dt: 0.1 }));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Diffsol;

fn peer_error(e: impl std::fmt::Display) -> Error {
    Error::External(format!("diffsol: {e}"))
}

impl OdeSolver for Diffsol {
    fn name(&self) -> String {
        "diffsol Tsit45".into()
    }
    /// The classical order of Tsitouras' pair. (The crate's `order()` gives 4, the order of the
    /// embedded estimate, which its controller's exponent uses.)
    fn order(&self) -> Option<u32> {
        Some(5)
    }
    /// The start's derivative, one more for the starting step (the crate's Hairer–Nørsett–Wanner
    /// algorithm evaluates the field at an Euler step from the start), and six a attempt
    /// (Tsit5 is FSAL). Measured through a counting field on the damped rotation, a forced decay
    /// and a Gaussian pulse: `2 + 6 (accepted + rejected)` in every solve.
    fn evaluations(&self, _stepping: &Stepping) -> Option<Evaluations> {
        Some(Evaluations {
            per_solve: 2,
            per_attempted_step: 6,
            per_accepted_step: 0,
        })
    }
    fn supports(&self, stepping: &Stepping) -> bool {
        matches!(stepping, Stepping::Adaptive { .. })
    }
    fn solve(&self, r: &SolveRequest) -> Result<SolveReport> {
        let Stepping::Adaptive { rtol, atol } = r.stepping else {
            return Err(peer_error(format!(
                "the explicit Runge-Kutta solver does not take {:?}",
                r.stepping
            )));
        };
        let field = r.field.clone();
        let y0 = r.y0.clone();
        let direction = if r.t1 < r.t0 { -1.0 } else { 1.0 };
        let problem = OdeBuilder::<NalgebraMat<f64>>::new()
            .t0(r.t0)
            .h0(direction)
            .rtol(rtol)
            .atol([atol])
            .rhs(move |x: &[f64], _p: &[f64], t: f64, y: &mut [f64]| field.eval(t, x, y))
            .init(
                move |_p: &[f64], _t: f64, y: &mut [f64]| y.copy_from_slice(&y0),
                r.y0.len(),
            )
            .build()
            .map_err(peer_error)?;
        let mut solver = problem.tsit45().map_err(peer_error)?;
        solver.set_stop_time(r.t1).map_err(peer_error)?;
        let attempts = |s: &diffsol::ExplicitRk<'_, _>| {
            let st = s.get_statistics();
            (st.number_of_steps, st.number_of_error_test_failures)
        };
        loop {
            let (accepted, rejected) = attempts(&solver);
            if accepted + rejected >= r.max_steps {
                return Err(peer_error(format!(
                    "step budget of {} attempted steps spent at t = {} before t1 = {}",
                    r.max_steps,
                    solver.state().t,
                    r.t1
                )));
            }
            let reason = solver.step().map_err(peer_error)?;
            let (accepted, rejected) = attempts(&solver);
            if accepted + rejected > r.max_steps {
                return Err(peer_error(format!(
                    "{accepted} accepted and {rejected} rejected steps over a budget of {} \
                     attempted steps",
                    r.max_steps
                )));
            }
            match reason {
                OdeSolverStopReason::TstopReached => {
                    return Ok(SolveReport {
                        y_final: solver.state().y.clone_as_vec(),
                        accepted,
                        rejected,
                    })
                }
                OdeSolverStopReason::InternalTimestep => {}
                OdeSolverStopReason::RootFound(t, _) => {
                    return Err(peer_error(format!(
                        "a root at t = {t} with no root function"
                    )))
                }
            }
        }
    }
}
