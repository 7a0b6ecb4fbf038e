//! The ODE solver suite: laws every explicit solver must obey, run on any [`OdeSolver`] — the
//! reference's tableau-driven stepper ([`ReferenceSolver`]), or a black-box solver written
//! elsewhere behind an adapter. Every solve runs on its own thread under a time limit, so a
//! solver that panics or never returns is a verdict, not a crash or a hang of the harness.
//!
//! | law | applies to | what must hold |
//! |---|---|---|
//! | `ode_convergence_order` | constant steps, known order `p` | halving the step divides the error against the closed form by `2^p` (band [`crate::laws::ode::ORDER_BAND`]), on the damped rotation and on a field that depends on time ([`order_problems`]) |
//! | `ode_tolerance_proportionality` | adaptive steps | on both [`order_problems`], the global error against the closed form is at most `K (rtol |y|max + atol)` per accepted step ([`PROPORTIONALITY_K`]) and, where the looser solve's error exceeds the tighter local tolerance, shrinks when the tolerance shrinks 100-fold |
//! | `ode_adaptive_order` | adaptive steps, known order | on both [`order_problems`], tightening `rtol` from 1e-4 to 1e-8 multiplies the accepted steps by at most [`ADAPTIVE_STEP_GROWTH_SLACK`] `x 10^(4/(q+1))` (plus [`ADAPTIVE_STEP_GROWTH_STEPS`]), `q` the order of the error estimate ([`OdeSolver::error_estimate_order`], `p - 1` by default): a corrupted estimate (a stage at the wrong time) shows in the work of a solver that only steps adaptively |
//! | `ode_round_trip` | adaptive steps, backward integration | on both [`order_problems`], forward then backward returns to `y0` within the same bound |
//! | `ode_evaluations_accounted` | solvers that declare [`OdeSolver::evaluations`] | every field evaluation of a solve is accounted for by the steps it reports ([`Evaluations::at_most`]), on both [`order_problems`] and a fast decay whose first steps are often rejected, in every stepping mode supported |
//! | `ode_reproducible` | every solver | the same request twice gives the same bits |
//! | `ode_step_budget_honoured` | adaptive steps | a solve that takes `n` attempted steps under an ample budget is refused under a budget of `n - 1`, and gives the same bits under a budget of `n` |
//! | `ode_bad_input_is_typed_error` | every solver | each of [`bad_inputs`] (NaN/inf `y0`, non-finite times, zero/negative tolerance or step, `max_steps` of 3) in every stepping mode the solver supports: an error or an answer within 3 attempted steps; never a panic, a hang or a non-finite answer; `t0 == t1` returns `y0` or an error |
//!
//! # References
//! - E. Hairer, S. P. Nørsett, G. Wanner, *Solving Ordinary Differential Equations I*, 2nd ed.,
//!   §II.3 (convergence order), §II.4 (tolerance proportionality of error-per-step control).
//!
//! ```
//! use harness::subject::ode::{self, ReferenceSolver, SuiteOptions};
//! use harness::ode::Solver;
//! let tsit5 = std::sync::Arc::new(ReferenceSolver::new(Solver::Tsit5));
//! let opts = SuiteOptions { cases: 4, ..SuiteOptions::default() };
//! let report = ode::check(tsit5, &opts);
//! assert!(report.passed(), "{}", report.summary());
//! ```

use super::suite_property;
use crate::laws::ode::{order_problems, order_verdict, rotation_case, OrderProblem, RotationCase};
use crate::laws::{max_abs_difference, timed, Family, LawReport, DEFAULT_SEED};
use crate::ode::fixtures::Linear;
use crate::ode::Integration;
use crate::ode::{solve, Controller, Pid, SolveOptions, Solver, VectorField};
use crate::reference::Result;
use crate::subject::optimizer::SuiteReport;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A vector field a solver thread can own.
pub type SharedField = Arc<dyn VectorField<f64> + Send + Sync>;

/// How the solver places its steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stepping {
    /// Constant steps of `dt` (the sign of `t1 - t0`; the last step may be shorter).
    Constant {
        /// The step, non-zero and signed like `t1 - t0`.
        dt: f64,
    },
    /// Error-per-step control with relative and absolute tolerances.
    Adaptive {
        /// Relative tolerance (`> 0`).
        rtol: f64,
        /// Absolute tolerance (`> 0`).
        atol: f64,
    },
}

/// One initial value problem to solve: `dy/dt = f(t, y)`, `y(t0) = y0`, up to `t1`.
#[derive(Clone)]
pub struct SolveRequest {
    /// The right-hand side `f(t, y)`.
    pub field: SharedField,
    /// Start time.
    pub t0: f64,
    /// End time (either side of `t0`).
    pub t1: f64,
    /// Initial state.
    pub y0: Vec<f64>,
    /// How steps are placed.
    pub stepping: Stepping,
    /// Attempted steps (accepted and rejected) allowed before the solver must give up.
    pub max_steps: usize,
}

impl std::fmt::Debug for SolveRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SolveRequest {{ t0: {}, t1: {}, y0: {:?}, {:?}, max_steps: {} }}",
            self.t0, self.t1, self.y0, self.stepping, self.max_steps
        )
    }
}

/// What a solve returned.
#[derive(Debug, Clone, PartialEq)]
pub struct SolveReport {
    /// The state at `t1`.
    pub y_final: Vec<f64>,
    /// Steps accepted.
    pub accepted: usize,
    /// Steps rejected (0 for constant steps).
    pub rejected: usize,
}

/// A solver under test.
pub trait OdeSolver: Send + Sync {
    /// Name for reports (crate, method).
    fn name(&self) -> String;
    /// The classical order of the method, when known (the convergence law needs it).
    fn order(&self) -> Option<u32>;
    /// The order `q` of the local error estimate the step-size controller holds to the
    /// tolerance (an estimate of size `h^(q+1)`): `order - 1` by default, an embedded pair's
    /// lower order. `ode_adaptive_order` reads it; a method with a lower-order estimate (RK4
    /// against an Euler step: 1) says so here.
    fn error_estimate_order(&self) -> Option<u32> {
        self.order().map(|p| p.saturating_sub(1))
    }
    /// Whether it takes this kind of stepping at all (a fixed-step method has no tolerances).
    fn supports(&self, stepping: &Stepping) -> bool;
    /// Whether it integrates backward (`t1 < t0`).
    fn backward(&self) -> bool {
        true
    }
    /// The field evaluations a solve with this stepping makes, when the solver can state them:
    /// `ode_evaluations_accounted` then checks that the steps a solve reports account for every
    /// evaluation it made. `None` (the default): the law does not apply.
    fn evaluations(&self, _stepping: &Stepping) -> Option<Evaluations> {
        None
    }
    /// Solve; an input the solver cannot honour must be an `Err`.
    fn solve(&self, request: &SolveRequest) -> Result<SolveReport>;
}

/// How many times a solver evaluates the field: at most
/// `per_solve + per_attempted_step * (accepted + rejected) + per_accepted_step * accepted`
/// evaluations for a solve that reports `accepted` and `rejected` steps. An explicit
/// Runge–Kutta method of `s` stages that reuses its last stage as the next step's first (FSAL)
/// makes `1 + (s - 1)` per attempt; one that does not, `s - 1` per attempt and one per accepted
/// step (the new start point's derivative, shared by the attempts from it). The law is as sharp
/// as the counts: with the exact ones, a single unreported attempt shows.
///
/// ```
/// use harness::subject::ode::{Evaluations, OdeSolver, ReferenceSolver, Stepping};
/// use harness::ode::Solver;
/// let tsit5 = ReferenceSolver::new(Solver::Tsit5);
/// let e = tsit5.evaluations(&Stepping::Constant { dt: 0.1 }).unwrap();
/// assert_eq!(e, Evaluations { per_solve: 1, per_attempted_step: 6, per_accepted_step: 0 });
/// assert_eq!(e.at_most(10, 2), 1 + 6 * 12);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evaluations {
    /// Evaluations made once per solve (the start's derivative, a starting-step heuristic).
    pub per_solve: usize,
    /// Evaluations made by every attempted step, accepted or rejected.
    pub per_attempted_step: usize,
    /// Evaluations made once per accepted step.
    pub per_accepted_step: usize,
}

impl Evaluations {
    /// The most evaluations a solve reporting `accepted` and `rejected` steps may make.
    pub fn at_most(&self, accepted: usize, rejected: usize) -> usize {
        self.per_solve
            .saturating_add(
                self.per_attempted_step
                    .saturating_mul(accepted.saturating_add(rejected)),
            )
            .saturating_add(self.per_accepted_step.saturating_mul(accepted))
    }
}

/// The reference solver: one of the tableaus of [`Solver`] through [`crate::ode::solve`], with
/// diffrax's PID controller (I-control) for adaptive stepping.
#[derive(Debug, Clone, Copy)]
pub struct ReferenceSolver(pub Solver);

impl ReferenceSolver {
    /// The reference solver with this tableau (the same as `ReferenceSolver(solver)`).
    pub fn new(solver: Solver) -> Self {
        Self(solver)
    }
}

impl OdeSolver for ReferenceSolver {
    fn name(&self) -> String {
        format!("harness-reference {}", self.0)
    }
    fn order(&self) -> Option<u32> {
        Some(self.0.tableau().order())
    }
    fn supports(&self, stepping: &Stepping) -> bool {
        match stepping {
            Stepping::Constant { .. } => true,
            Stepping::Adaptive { .. } => self.0.tableau().b_err().is_some(),
        }
    }
    /// The reference stepper evaluates the start's derivative once; with FSAL each attempt
    /// evaluates the `s - 1` stages after the first (the first is the last of the step before),
    /// without it the start point's derivative is evaluated once per accepted step instead. Its
    /// starting step is 0.01 (diffrax's), evaluated nowhere.
    fn evaluations(&self, _stepping: &Stepping) -> Option<Evaluations> {
        let tableau = self.0.tableau();
        let later = tableau.stages() - 1;
        Some(if tableau.fsal() {
            Evaluations {
                per_solve: 1,
                per_attempted_step: later,
                per_accepted_step: 0,
            }
        } else {
            Evaluations {
                per_solve: 0,
                per_attempted_step: later,
                per_accepted_step: 1,
            }
        })
    }
    fn solve(&self, r: &SolveRequest) -> Result<SolveReport> {
        let controller = match r.stepping {
            Stepping::Constant { dt } => Controller::constant(dt)?,
            Stepping::Adaptive { rtol, atol } => Controller::Pid(Pid::new(rtol, atol)?),
        };
        let opts = SolveOptions {
            max_steps: r.max_steps,
            save_steps: false,
            ..Default::default()
        };
        let sol = solve(
            &*r.field,
            &Integration::new(&self.0.tableau(), &controller, r.t0, r.t1).with_options(opts),
            &r.y0,
        )?;
        Ok(SolveReport {
            y_final: sol.y_final,
            accepted: sol.stats.num_accepted_steps,
            rejected: sol.stats.num_rejected_steps,
        })
    }
}

/// How a solve under the time limit ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The solver answered.
    Solved(SolveReport),
    /// The solver returned an error (the expected answer to bad input).
    Refused(String),
    /// The solver panicked (the payload's message).
    Panicked(String),
    /// No answer within the limit (the thread is left behind).
    TimedOut(Duration),
}

/// Solve `request` on its own thread, waiting at most `limit`.
pub fn solve_within(
    solver: &Arc<dyn OdeSolver>,
    request: &SolveRequest,
    limit: Duration,
) -> Outcome {
    let (solver, request) = (Arc::clone(solver), request.clone());
    match super::call_within("ode-subject", limit, move || solver.solve(&request)) {
        super::Ended::Returned(Ok(rep)) => Outcome::Solved(rep),
        super::Ended::Returned(Err(e)) => Outcome::Refused(e.to_string()),
        super::Ended::NotStarted(why) => Outcome::Refused(why),
        super::Ended::Panicked(m) => Outcome::Panicked(m),
        super::Ended::TimedOut(d) => Outcome::TimedOut(d),
    }
}

/// The message of a panic payload (the same as [`super::panic_message`]).
pub use super::panic_message;

/// How the suite runs.
#[derive(Debug, Clone, Copy)]
pub struct SuiteOptions {
    /// Cases per law (default 24).
    pub cases: u32,
    /// Seed of the case generators (default [`DEFAULT_SEED`]).
    pub seed: u64,
    /// Time limit of one solve (default 10 s).
    pub time_limit: Duration,
}

impl Default for SuiteOptions {
    fn default() -> Self {
        Self {
            cases: 24,
            seed: DEFAULT_SEED,
            time_limit: Duration::from_secs(10),
        }
    }
}

pub use crate::tolerance::PROPORTIONALITY_K;
pub use crate::tolerance::{
    ADAPTIVE_STEP_GROWTH_SLACK, ADAPTIVE_STEP_GROWTH_STEPS, ADAPTIVE_TOLERANCE_SPAN,
};

/// Tolerances the adaptive laws use (`atol = rtol / 100`).
pub const SUITE_RTOLS: [f64; 2] = [1e-4, 1e-6];

fn rotation(c: &RotationCase) -> Result<(SharedField, [f64; 2])> {
    let field = Linear::damped_rotation(c.alpha, c.omega)?;
    Ok((
        Arc::new(field),
        Linear::damped_rotation_exact(c.alpha, c.omega, c.y0, c.t1),
    ))
}

/// The subject's answer to `r`, or why there is none: a refusal, a panic, a time-out, or a
/// final state whose length is not the initial state's.
fn solved(
    solver: &Arc<dyn OdeSolver>,
    r: &SolveRequest,
    limit: Duration,
) -> std::result::Result<SolveReport, String> {
    answered(solver, r, solve_within(solver, r, limit))
}

/// [`solved`] from the outcome of a solve of `r`.
fn answered(
    solver: &Arc<dyn OdeSolver>,
    r: &SolveRequest,
    outcome: Outcome,
) -> std::result::Result<SolveReport, String> {
    match outcome {
        Outcome::Solved(s) if s.y_final.len() != r.y0.len() => Err(format!(
            "{}: {r:?} answered a final state of {} values for a state of {}",
            solver.name(),
            s.y_final.len(),
            r.y0.len()
        )),
        Outcome::Solved(s) => Ok(s),
        other => Err(format!("{}: {r:?} -> {other:?}", solver.name())),
    }
}

/// Largest absolute difference between a final state and the expected one
/// ([`max_abs_difference`]).
fn distance(got: &[f64], want: &[f64]) -> std::result::Result<f64, String> {
    max_abs_difference("final state", got, want)
}

/// Halving the constant step divides the error by `2^p`, on both [`order_problems`] (the damped
/// rotation, and the same orbit travelled at the speed `1 + t`: a field that depends on time).
pub fn convergence_order(
    solver: &Arc<dyn OdeSolver>,
    c: &RotationCase,
    limit: Duration,
) -> std::result::Result<(), String> {
    let Some(p) = solver.order() else {
        return Ok(());
    };
    for OrderProblem {
        name,
        field,
        exact,
        band,
    } in order_problems(c)?
    {
        let err = |steps: f64| -> std::result::Result<f64, String> {
            let r = SolveRequest {
                field: Arc::clone(&field),
                t0: 0.0,
                t1: c.t1,
                y0: c.y0.to_vec(),
                stepping: Stepping::Constant { dt: c.t1 / steps },
                max_steps: 4096,
            };
            distance(&solved(solver, &r, limit)?.y_final, &exact)
        };
        order_verdict(p, band, err(16.0)?, err(32.0)?)
            .map_err(|e| format!("{name}: {}: {e}", solver.name()))?;
    }
    Ok(())
}

/// The global error of an adaptive solve is within [`PROPORTIONALITY_K`] local tolerances per
/// accepted step, and, where the looser solve's error exceeds the tighter local tolerance,
/// shrinks when the tolerance shrinks 100-fold; on both [`order_problems`]. A stage evaluated
/// at the wrong time mostly makes an adaptive solver take many more, smaller steps, which a bound
/// per accepted step allows: `ode_solvers` 0.6.2's `Dop853`, whose twelfth stage is evaluated at
/// the step's start, passes this law and fails [`convergence_order`] with pinned steps (measured
/// order 1 for 8) and [`adaptive_order`]. (Far below both tolerances the error of a high-order method depends on where
/// the controller splits the interval, not on the tolerance: `ode_solvers`' Dop853 covers a
/// quarter turn in 2 steps for every `rtol` from 1e-3 to 1e-6 with errors from 1.7e-12 to
/// 4.5e-11.)
pub fn tolerance_proportionality(
    solver: &Arc<dyn OdeSolver>,
    c: &RotationCase,
    limit: Duration,
) -> std::result::Result<(), String> {
    let ymax = c.y0.iter().map(|v| v.abs()).fold(0.0, f64::max);
    for OrderProblem {
        name, field, exact, ..
    } in order_problems(c)?
    {
        let mut errors = Vec::new();
        for rtol in SUITE_RTOLS {
            let atol = rtol * 1e-2;
            let r = SolveRequest {
                field: Arc::clone(&field),
                t0: 0.0,
                t1: c.t1,
                y0: c.y0.to_vec(),
                stepping: Stepping::Adaptive { rtol, atol },
                max_steps: 100_000,
            };
            let s = solved(solver, &r, limit).map_err(|e| format!("{name}: {e}"))?;
            let e = distance(&s.y_final, &exact)?;
            let bound = PROPORTIONALITY_K * (rtol * ymax + atol) * s.accepted.max(1) as f64;
            // NaN errors fail too
            if e.is_nan() || e > bound {
                return Err(format!(
                    "{name}: {}: rtol {rtol:e}: error {e:e} against the closed form > {bound:e} \
                     ({} accepted steps; {r:?})",
                    solver.name(),
                    s.accepted
                ));
            }
            errors.push(e);
        }
        let tight_local = SUITE_RTOLS[1] * ymax + SUITE_RTOLS[1] * 1e-2;
        if errors[0] > tight_local && errors[1] >= errors[0] {
            return Err(format!(
                "{name}: {}: error {:e} at rtol {:e} is not below {:e} at rtol {:e}",
                solver.name(),
                errors[1],
                SUITE_RTOLS[1],
                errors[0],
                SUITE_RTOLS[0]
            ));
        }
    }
    Ok(())
}

/// An adaptive solve's work grows as the order of its error estimate says: the controller holds
/// an estimate of size `h^(q+1)` ([`OdeSolver::error_estimate_order`], `p - 1` for the usual
/// embedded pair) near the tolerance, so tightening `rtol` from 1e-4 to 1e-8
/// ([`ADAPTIVE_TOLERANCE_SPAN`], `atol = rtol / 100`) multiplies the accepted steps `N` by about
/// `10^(4/(q+1))`, and by at most [`ADAPTIVE_STEP_GROWTH_SLACK`] times that, plus
/// [`ADAPTIVE_STEP_GROWTH_STEPS`], on both [`order_problems`]. The convergence-order law needs
/// constant steps; this one reaches a solver that only steps adaptively, where a bug that
/// corrupts the error estimate shows: a stage evaluated at the wrong time leaves the estimate of
/// an order-1 method, whose controller takes `10^2` times the steps for the span (`ode_solvers`
/// 0.6.2's `Dop853`: 10 accepted steps at 1e-4, and at 1e-8 a false stiffness error after
/// thousands). It does not see a pair that propagates its lower-order solution while claiming
/// the higher order: the estimate, and so the work, are the same.
pub fn adaptive_order(
    solver: &Arc<dyn OdeSolver>,
    c: &RotationCase,
    limit: Duration,
) -> std::result::Result<(), String> {
    let Some(q) = solver.error_estimate_order() else {
        return Ok(());
    };
    // the estimate is h^(q+1)
    let p = q + 1;
    let (loose, tight) = ADAPTIVE_TOLERANCE_SPAN;
    let growth = (loose / tight).powf(1.0 / f64::from(p));
    for OrderProblem { name, field, .. } in order_problems(c)? {
        let steps = |rtol: f64| -> std::result::Result<usize, String> {
            let r = SolveRequest {
                field: Arc::clone(&field),
                t0: 0.0,
                t1: c.t1,
                y0: c.y0.to_vec(),
                stepping: Stepping::Adaptive {
                    rtol,
                    atol: rtol * 1e-2,
                },
                max_steps: 1_000_000,
            };
            solved(solver, &r, limit)
                .map(|s| s.accepted)
                .map_err(|e| format!("{name}: {e}"))
        };
        let n_loose = steps(loose)?;
        let n_tight = steps(tight)?;
        let allowed = ADAPTIVE_STEP_GROWTH_SLACK * growth * n_loose.max(1) as f64
            + ADAPTIVE_STEP_GROWTH_STEPS;
        if n_tight as f64 > allowed {
            // the order whose growth the solve showed: N ~ tol^(-1/p)
            let shown = (loose / tight).log10() / (n_tight as f64 / n_loose.max(1) as f64).log10();
            return Err(format!(
                "{name}: {}: {n_loose} accepted steps at rtol {loose:e}, {n_tight} at {tight:e}: \
                 more than the {allowed:.0} an error estimate of order {q} allows (the work \
                 of order {p}: {growth:.2} times as many steps, by {ADAPTIVE_STEP_GROWTH_SLACK} \
                 with {ADAPTIVE_STEP_GROWTH_STEPS} more); the growth is that of order {shown:.2}",
                solver.name()
            ));
        }
    }
    Ok(())
}

/// A field that counts its evaluations ([`counted`]).
struct Counted {
    field: SharedField,
    count: Arc<AtomicUsize>,
}

/// `field` with a counter of its evaluations: the law `ode_evaluations_accounted` reads it, and a
/// harness of one's own can (the count goes on rising if a solve that timed out keeps running).
///
/// ```
/// use harness::subject::ode::{counted, SharedField};
/// use std::sync::atomic::Ordering;
/// use std::sync::Arc;
/// let decay: SharedField = Arc::new(|_t: f64, y: &[f64], dy: &mut [f64]| dy[0] = -y[0]);
/// let (field, calls) = counted(decay);
/// let mut dy = [0.0];
/// field.eval(0.0, &[2.0], &mut dy);
/// assert_eq!((dy[0], calls.load(Ordering::Relaxed)), (-2.0, 1));
/// ```
pub fn counted(field: SharedField) -> (SharedField, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let field = Arc::new(Counted {
        field,
        count: Arc::clone(&count),
    });
    (field, count)
}

impl VectorField<f64> for Counted {
    fn eval(&self, t: f64, y: &[f64], dy: &mut [f64]) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.field.eval(t, y, dy);
    }
}

/// `y_1' = -l y_1 (1 + y_2^2)`, `y_2' = -k y_1 y_2`: a fast nonlinear decay on which an
/// explicit solver's first steps are often rejected (a starting-step heuristic reads only the
/// first derivatives). `l` in `[20, 100)` and `k` in `[10, 46)` from the case's rate and
/// frequency, the start `|y0| + 0.1`.
fn fast_start(c: &RotationCase) -> (SharedField, Vec<f64>) {
    let (l, k) = (20.0 + 80.0 * c.alpha, 10.0 + 20.0 * c.omega);
    let field: SharedField = Arc::new(move |_t: f64, y: &[f64], dy: &mut [f64]| {
        dy[0] = -l * y[0] * (1.0 + y[1] * y[1]);
        dy[1] = -k * y[0] * y[1];
    });
    (field, c.y0.iter().map(|v| v.abs() + 0.1).collect())
}

/// The steps a solve reports account for the field evaluations it made: at most
/// [`Evaluations::at_most`] of the counts the solver declares ([`OdeSolver::evaluations`]), on
/// both [`order_problems`] and on a fast nonlinear decay whose first steps are often rejected,
/// adaptive (`rtol` 1e-4 and 1e-6) and with 16 constant steps (not on the decay, where they are
/// unstable), as the solver supports them.
/// A solver that retries rejected steps without reporting them (nor counting them against its
/// budget, which the budget law then cannot see) fails. The law is as sharp as the declared
/// counts, and bounds the evaluations from above only: a rejected attempt reported as accepted,
/// or steps over-reported, do not show. A refused solve has nothing to count and is skipped.
pub fn evaluations_accounted(
    solver: &Arc<dyn OdeSolver>,
    c: &RotationCase,
    limit: Duration,
) -> std::result::Result<(), String> {
    let mut problems: Vec<(&str, SharedField, Vec<f64>)> = order_problems(c)?
        .into_iter()
        .map(|p| (p.name, p.field, c.y0.to_vec()))
        .collect();
    let (fast, fast_y0) = fast_start(c);
    problems.push(("fast decay", fast, fast_y0));
    let mut steppings = vec![Stepping::Constant { dt: c.t1 / 16.0 }];
    steppings.extend(SUITE_RTOLS.map(|rtol| Stepping::Adaptive {
        rtol,
        atol: rtol * 1e-2,
    }));
    for (name, field, y0) in problems {
        for &stepping in &steppings {
            // constant steps of t1/16 are unstable on the fast decay (|l h| up to 25)
            let constant = matches!(stepping, Stepping::Constant { .. });
            if constant && name == "fast decay" {
                continue;
            }
            let Some(counts) = solver.evaluations(&stepping) else {
                continue;
            };
            if !solver.supports(&stepping) {
                continue;
            }
            let (counting, count) = counted(Arc::clone(&field));
            let r = SolveRequest {
                field: counting,
                t0: 0.0,
                t1: c.t1,
                y0: y0.clone(),
                stepping,
                max_steps: 100_000,
            };
            let outcome = solve_within(solver, &r, limit);
            if let Outcome::Refused(_) = outcome {
                // nothing to count: the decay is stiff enough (a rate up to about 500) for a
                // solver's stiffness test to refuse it, and refusals are other laws' concern
                continue;
            }
            let s = answered(solver, &r, outcome).map_err(|e| format!("{name}: {e}"))?;
            let made = count.load(Ordering::Relaxed);
            let allowed = counts.at_most(s.accepted, s.rejected);
            if made > allowed {
                let unreported = (made - allowed) as f64 / counts.per_attempted_step.max(1) as f64;
                return Err(format!(
                    "{name}: {}: {made} field evaluations for the {} accepted and {} rejected \
                     steps reported, whose declared counts ({counts:?}) allow {allowed}: about \
                     {unreported:.1} attempted steps unreported ({r:?})",
                    solver.name(),
                    s.accepted,
                    s.rejected
                ));
            }
        }
    }
    Ok(())
}

/// Forward then backward (adaptive, `rtol 1e-6`) returns to `y0` within [`PROPORTIONALITY_K`]
/// local tolerances per accepted step of both solves, on both [`order_problems`].
pub fn round_trip(
    solver: &Arc<dyn OdeSolver>,
    c: &RotationCase,
    limit: Duration,
) -> std::result::Result<(), String> {
    let (rtol, atol) = (1e-6, 1e-8);
    let ymax = c.y0.iter().map(|v| v.abs()).fold(0.0, f64::max);
    for OrderProblem { name, field, .. } in order_problems(c)? {
        let request = |t0: f64, t1: f64, y0: Vec<f64>| SolveRequest {
            field: Arc::clone(&field),
            t0,
            t1,
            y0,
            stepping: Stepping::Adaptive { rtol, atol },
            max_steps: 100_000,
        };
        let fwd = solved(solver, &request(0.0, c.t1, c.y0.to_vec()), limit)
            .map_err(|e| format!("{name}: {e}"))?;
        let back = solved(solver, &request(c.t1, 0.0, fwd.y_final.clone()), limit)
            .map_err(|e| format!("{name}: {e}"))?;
        let steps = (fwd.accepted + back.accepted).max(1);
        let bound = PROPORTIONALITY_K * (rtol * ymax + atol) * steps as f64;
        let d = distance(&back.y_final, &c.y0)?;
        if d.is_nan() || d > bound {
            return Err(format!(
                "{name}: {}: round trip missed y0 by {d:e} > {bound:e} ({steps} accepted steps)",
                solver.name()
            ));
        }
    }
    Ok(())
}

/// The same request twice gives bit-identical answers (and step counts).
pub fn reproducible(
    solver: &Arc<dyn OdeSolver>,
    c: &RotationCase,
    limit: Duration,
) -> std::result::Result<(), String> {
    let (field, _) = rotation(c).map_err(|e| e.to_string())?;
    let stepping = if solver.supports(&Stepping::Adaptive {
        rtol: 1e-6,
        atol: 1e-8,
    }) {
        Stepping::Adaptive {
            rtol: 1e-6,
            atol: 1e-8,
        }
    } else {
        Stepping::Constant { dt: c.t1 / 7.0 }
    };
    let r = SolveRequest {
        field,
        t0: 0.0,
        t1: c.t1,
        y0: c.y0.to_vec(),
        stepping,
        max_steps: 100_000,
    };
    let (a, b) = (solved(solver, &r, limit)?, solved(solver, &r, limit)?);
    let same = a.accepted == b.accepted
        && a.rejected == b.rejected
        && a.y_final.len() == b.y_final.len()
        && a.y_final
            .iter()
            .zip(&b.y_final)
            .all(|(x, y)| x.to_bits() == y.to_bits());
    if !same {
        return Err(format!("{}: {r:?} gave {a:?} then {b:?}", solver.name()));
    }
    Ok(())
}

/// The step budget is a limit: a solve that takes `n` attempted steps (accepted and rejected)
/// with an ample budget must be refused with `n - 1`, and answered alike with exactly `n`.
pub fn step_budget_honoured(
    solver: &Arc<dyn OdeSolver>,
    c: &RotationCase,
    limit: Duration,
) -> std::result::Result<(), String> {
    let (field, _) = rotation(c).map_err(|e| e.to_string())?;
    let mut r = SolveRequest {
        field,
        t0: 0.0,
        t1: c.t1,
        y0: c.y0.to_vec(),
        stepping: Stepping::Adaptive {
            rtol: 1e-6,
            atol: 1e-8,
        },
        max_steps: 100_000,
    };
    let ample = solved(solver, &r, limit)?;
    let n = ample.accepted + ample.rejected;
    if n < 2 {
        return Ok(()); // a budget of 0 says nothing about the limit
    }
    r.max_steps = n;
    let exact = solved(solver, &r, limit)?;
    let same = exact.y_final.len() == ample.y_final.len()
        && exact
            .y_final
            .iter()
            .zip(&ample.y_final)
            .all(|(x, y)| x.to_bits() == y.to_bits());
    if !same {
        return Err(format!(
            "{}: a budget of exactly the {n} steps it takes changed the answer: {exact:?}, \
             ample budget {ample:?} ({r:?})",
            solver.name()
        ));
    }
    r.max_steps = n - 1;
    match solve_within(solver, &r, limit) {
        Outcome::Refused(_) => Ok(()),
        other => Err(format!(
            "{}: takes {n} attempted steps ({} accepted, {} rejected) with an ample budget, \
             and with a budget of {}: {other:?} ({r:?})",
            solver.name(),
            ample.accepted,
            ample.rejected,
            n - 1
        )),
    }
}

/// One way of making a request invalid.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BadInput {
    /// A non-finite initial state entry.
    Y0(f64),
    /// A non-finite start time.
    T0(f64),
    /// A non-finite end time.
    T1(f64),
    /// A non-positive or non-finite `rtol` (adaptive) or step (constant).
    Tolerance(f64),
    /// `t0 == t1`: not an error, but the answer must be `y0` (or an error).
    EmptyInterval,
    /// A budget of 3 attempted steps: an error, or an answer that took at most 3 attempts (a
    /// high-order method may need no more); never a partial answer past the budget.
    MaxSteps,
}

/// Every bad input the law tries: each non-finite value of `y0`, `t0` and `t1`, each bad
/// tolerance or step, the empty interval and the budget of 3. The list is short, so the law
/// walks all of it in every stepping mode the solver supports instead of sampling it (sampling
/// missed a solver that hung on a step of 0 in one of them).
///
/// ```
/// use harness::subject::ode::{bad_inputs, BadInput};
/// assert_eq!(bad_inputs().len(), 15);
/// assert!(bad_inputs().contains(&BadInput::Tolerance(0.0)));
/// ```
pub fn bad_inputs() -> Vec<BadInput> {
    let weird = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
    let mut all: Vec<BadInput> = Vec::new();
    all.extend(weird.map(BadInput::Y0));
    all.extend(weird.map(BadInput::T0));
    all.extend(weird.map(BadInput::T1));
    all.extend([0.0, -1e-6, f64::NAN, -1.0].map(BadInput::Tolerance));
    all.extend([BadInput::EmptyInterval, BadInput::MaxSteps]);
    all
}

/// [`bad_input_is_typed_error`] on every one of [`bad_inputs`] in each stepping mode
/// (`adaptive`: false for constant steps) the solver supports, stopping at the first failure;
/// returns how many were tried.
pub fn every_bad_input_is_typed_error(
    solver: &Arc<dyn OdeSolver>,
    modes: &[bool],
    limit: Duration,
) -> (u32, std::result::Result<(), String>) {
    let mut tried = 0;
    for &adaptive in modes {
        for b in bad_inputs() {
            tried += 1;
            if let Err(e) = bad_input_is_typed_error(solver, &b, adaptive, limit) {
                let mode = if adaptive { "adaptive" } else { "constant" };
                return (tried, Err(format!("{e}\ninput: {b:?}, {mode} steps")));
            }
        }
    }
    (tried, Ok(()))
}

/// Bad input is an error, within the time limit, never a panic or a non-finite answer.
pub fn bad_input_is_typed_error(
    solver: &Arc<dyn OdeSolver>,
    b: &BadInput,
    adaptive: bool,
    limit: Duration,
) -> std::result::Result<(), String> {
    let field: SharedField = Arc::new(|_t: f64, y: &[f64], dy: &mut [f64]| {
        for (d, v) in dy.iter_mut().zip(y) {
            *d = -v;
        }
    });
    let mut r = SolveRequest {
        field,
        t0: 0.0,
        t1: 1.0,
        y0: vec![1.0, 0.5],
        stepping: if adaptive {
            Stepping::Adaptive {
                rtol: 1e-6,
                atol: 1e-8,
            }
        } else {
            Stepping::Constant { dt: 0.01 }
        },
        max_steps: 4096,
    };
    match *b {
        BadInput::Y0(v) => r.y0[0] = v,
        BadInput::T0(v) => r.t0 = v,
        BadInput::T1(v) => r.t1 = v,
        BadInput::Tolerance(v) => {
            r.stepping = match r.stepping {
                Stepping::Adaptive { atol, .. } => Stepping::Adaptive { rtol: v, atol },
                Stepping::Constant { .. } => Stepping::Constant { dt: v },
            }
        }
        BadInput::EmptyInterval => r.t1 = r.t0,
        BadInput::MaxSteps => r.max_steps = 3,
    }
    let name = solver.name();
    match solve_within(solver, &r, limit) {
        Outcome::Refused(_) => Ok(()),
        Outcome::Solved(s) if *b == BadInput::EmptyInterval => {
            if distance(&s.y_final, &r.y0) == Ok(0.0) {
                Ok(())
            } else {
                Err(format!("{name}: t0 == t1 returned {:?}, not y0", s.y_final))
            }
        }
        // finishing within the budget is an answer, not a bad input accepted
        Outcome::Solved(s)
            if *b == BadInput::MaxSteps
                && s.accepted + s.rejected <= r.max_steps
                && s.y_final.iter().all(|v| v.is_finite()) =>
        {
            Ok(())
        }
        Outcome::Solved(s) => Err(format!("{name}: {b:?} accepted: {r:?} -> {s:?}")),
        Outcome::Panicked(m) => Err(format!("{name}: {b:?} panicked: {m} ({r:?})")),
        Outcome::TimedOut(d) => Err(format!("{name}: {b:?} gave no answer within {d:?} ({r:?})")),
    }
}

/// Run every law that applies on `solver`.
pub fn check(solver: Arc<dyn OdeSolver>, opts: &SuiteOptions) -> SuiteReport {
    let (cases, seed, limit) = (opts.cases, opts.seed, opts.time_limit);
    let constant = solver.supports(&Stepping::Constant { dt: 0.1 });
    let adaptive = solver.supports(&Stepping::Adaptive {
        rtol: 1e-6,
        atol: 1e-8,
    });
    let mut laws = Vec::new();
    let mut not_applicable = Vec::new();
    let mut na = |law: &str, why: &str| not_applicable.push((law.to_string(), why.to_string()));
    let on_rotations =
        |law: &'static str, f: &dyn Fn(&RotationCase) -> std::result::Result<(), String>| {
            timed(law, Family::Numerics, cases, false, || {
                suite_property(law, cases, seed, rotation_case(), f)
            })
        };
    if constant && solver.order().is_some() {
        laws.push(on_rotations("ode_convergence_order", &|c| {
            convergence_order(&solver, c, limit)
        }));
    } else {
        na(
            "ode_convergence_order",
            "needs constant steps and a known order",
        );
    }
    if adaptive {
        laws.push(on_rotations("ode_tolerance_proportionality", &|c| {
            tolerance_proportionality(&solver, c, limit)
        }));
        if solver.error_estimate_order().is_some() {
            laws.push(on_rotations("ode_adaptive_order", &|c| {
                adaptive_order(&solver, c, limit)
            }));
        } else {
            na(
                "ode_adaptive_order",
                "needs the order of the error estimate (a known order, or error_estimate_order)",
            );
        }
        laws.push(on_rotations("ode_step_budget_honoured", &|c| {
            step_budget_honoured(&solver, c, limit)
        }));
        if solver.backward() {
            laws.push(on_rotations("ode_round_trip", &|c| {
                round_trip(&solver, c, limit)
            }));
        } else {
            na("ode_round_trip", "the solver does not integrate backward");
        }
    } else {
        na("ode_tolerance_proportionality", "no adaptive stepping");
        na("ode_adaptive_order", "no adaptive stepping");
        na(
            "ode_step_budget_honoured",
            "no adaptive stepping (a constant-step solve's step count is fixed by its interval)",
        );
        na("ode_round_trip", "no adaptive stepping");
    }
    laws.push(on_rotations("ode_reproducible", &|c| {
        reproducible(&solver, c, limit)
    }));
    let declared = [
        Stepping::Constant { dt: 0.1 },
        Stepping::Adaptive {
            rtol: 1e-6,
            atol: 1e-8,
        },
    ]
    .iter()
    .any(|s| solver.supports(s) && solver.evaluations(s).is_some());
    if declared {
        laws.push(on_rotations("ode_evaluations_accounted", &|c| {
            evaluations_accounted(&solver, c, limit)
        }));
    } else {
        na(
            "ode_evaluations_accounted",
            "the solver does not declare its evaluations (OdeSolver::evaluations)",
        );
    }
    // adaptive first: a solver's own tolerances are what a caller gets wrong most often, and a
    // constant-step mode may be an adapter's construct (ode_solvers' pinned steps)
    let modes: Vec<bool> = [(adaptive, true), (constant, false)]
        .into_iter()
        .filter_map(|(supported, mode)| supported.then_some(mode))
        .collect();
    let start = std::time::Instant::now();
    let (tried, outcome) = every_bad_input_is_typed_error(&solver, &modes, limit);
    laws.push(LawReport {
        name: "ode_bad_input_is_typed_error".into(),
        family: Family::Numerics,
        cases: tried,
        passed: outcome.is_ok(),
        seconds: start.elapsed().as_secs_f64(),
        counterexample: outcome.err(),
    });
    SuiteReport {
        subject: solver.name(),
        laws,
        not_applicable,
    }
}
