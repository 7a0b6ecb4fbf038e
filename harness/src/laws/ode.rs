//! Laws of the ODE solvers: convergence order, step-size control, round trips, reproducibility,
//! and typed errors for bad input. Every law runs every method it applies to on generated
//! problems with known answers (the fixtures of `ode::fixtures`).

use super::{check_property, first_bit_difference, Family, Law};
use crate::backend::Real;
use crate::ode::dfdx_step::{DfdxRkStep, DfdxStepOut};
use crate::ode::fixtures::{Linear, LotkaVolterra};
use crate::ode::grad::{self, DiffField, GradMode, Gradient};
use crate::ode::stepper::{RkStep, StepSpan};
use crate::ode::Integration;
use crate::ode::Tableau;
use crate::ode::{
    solve, solve_observed, Controller, Pid, Solution, SolveOptions, Solver, StepEvent, VectorField,
};
use crate::reference::Face;
use crate::tolerance;
use proptest::prelude::*;

/// A damped rotation `y' = [[-a, w], [-w, -a]] y` from `y0` over `[0, t1]`: closed form known.
#[derive(Debug, Clone, Copy)]
pub struct RotationCase {
    /// Damping rate `a`, in `[0, 1)`.
    pub alpha: f64,
    /// Angular frequency `w`, in `[0.2, 2)`.
    pub omega: f64,
    /// Initial state (non-zero).
    pub y0: [f64; 2],
    /// End time (the solve starts at 0), in `[0.5, 2)`.
    pub t1: f64,
}

/// Damped rotations with a non-zero start, rates in `[0, 1)`, frequencies in `[0.2, 2)` and
/// horizons in `[0.5, 2)`.
pub fn rotation_case() -> impl Strategy<Value = RotationCase> {
    (
        0.0f64..1.0,
        0.2f64..2.0,
        -2.0f64..2.0,
        -2.0f64..2.0,
        0.5f64..2.0,
    )
        .prop_filter("non-zero start", |(_, _, a, b, _)| a.abs() + b.abs() > 0.1)
        .prop_map(|(alpha, omega, a, b, t1)| RotationCase {
            alpha,
            omega,
            y0: [a, b],
            t1,
        })
}

pub use crate::tolerance::{ORDER_BAND, ORDER_ROUND_OFF_FLOOR};

/// Halving the constant step divides the error by about `2^p`, for every method.
pub fn convergence_order(c: &RotationCase) -> Result<(), String> {
    convergence_order_of(c, &Solver::ALL.map(|s| s.tableau()))
}

/// [`convergence_order`] for the given methods, each judged by the order its tableau claims, on
/// both [`order_problems`].
pub fn convergence_order_of(
    c: &RotationCase,
    tableaus: &[crate::ode::Tableau],
) -> Result<(), String> {
    for OrderProblem {
        name,
        field,
        exact,
        band,
    } in order_problems(c)?
    {
        for tab in tableaus {
            let err = |steps: f64| -> Result<f64, String> {
                let ctl = Controller::constant(c.t1 / steps).map_err(|e| e.to_string())?;
                let opts = SolveOptions {
                    save_steps: false,
                    ..Default::default()
                };
                let sol = solve(
                    &*field,
                    &Integration::new(tab, &ctl, 0.0, c.t1).with_options(opts),
                    &c.y0,
                )
                .map_err(|e| e.to_string())?;
                super::max_abs_difference("final state", &sol.y_final, &exact)
            };
            order_verdict(tab.order(), band, err(16.0)?, err(32.0)?)
                .map_err(|e| format!("{name}: {}: {e}", tab.name()))?;
        }
    }
    Ok(())
}

/// The problems the order laws measure on, with their closed forms at `c.t1` (from 0) and the
/// band of measured orders each accepts: the damped rotation `y' = A y` ([`ORDER_BAND`]), and
/// `y' = (1 + t) A y`, the same orbit travelled at the speed `1 + t`
/// ([`TIME_DEPENDENT_ORDER_BAND`]). The matrices `(1 + t) A` commute at all times, so the second
/// has the closed form `e^{(t + t^2 / 2) A} y0`, the rotation's at `t + t^2 / 2`. Its field
/// depends on `t`, so a method that evaluates a stage at the wrong time (a wrong node `c_i`, or
/// the field frozen at the start) loses at least one order there (the order condition
/// `sum_i b_i c_i = 1/2` fails), where the autonomous rotation cannot show it.
pub fn order_problems(c: &RotationCase) -> Result<[OrderProblem; 2], String> {
    let rotation = Linear::damped_rotation(c.alpha, c.omega).map_err(|e| e.to_string())?;
    Ok([
        OrderProblem {
            name: "y' = A y",
            field: std::sync::Arc::new(rotation.clone()),
            exact: Linear::damped_rotation_exact(c.alpha, c.omega, c.y0, c.t1),
            band: ORDER_BAND,
        },
        OrderProblem {
            name: "y' = (1 + t) A y",
            field: std::sync::Arc::new(Sped(rotation)),
            exact: Linear::damped_rotation_exact(c.alpha, c.omega, c.y0, c.t1 + c.t1 * c.t1 / 2.0),
            band: TIME_DEPENDENT_ORDER_BAND,
        },
    ])
}

/// One of [`order_problems`].
pub struct OrderProblem {
    /// The equation, for messages.
    pub name: &'static str,
    /// Its field.
    pub field: crate::subject::ode::SharedField,
    /// The closed form at the case's `t1`.
    pub exact: [f64; 2],
    /// How far below and above the claimed order the measured one may lie.
    pub band: (f64, f64),
}

pub use crate::tolerance::TIME_DEPENDENT_ORDER_BAND;

/// `f(t, y) = (1 + t) g(t, y)` ([`order_problems`]).
struct Sped(Linear);

impl VectorField<f64> for Sped {
    fn eval(&self, t: f64, y: &[f64], dy: &mut [f64]) {
        VectorField::<f64>::eval(&self.0, t, y, dy);
        let speed = 1.0 + t;
        dy.iter_mut().for_each(|d| *d *= speed);
    }
    fn dim(&self) -> Option<usize> {
        VectorField::<f64>::dim(&self.0)
    }
}

/// The verdict of the order laws on the errors `e1` with 16 constant steps and `e2` with 32 of a
/// method of order `p`: the measured order `log2(e1 / e2)` within `band` of `p`, unless `e2` is
/// at round-off (below [`ORDER_ROUND_OFF_FLOOR`]), where the ratio no longer measures the order. A NaN error
/// fails.
pub fn order_verdict(p: u32, band: (f64, f64), e1: f64, e2: f64) -> Result<(), String> {
    if e2 < ORDER_ROUND_OFF_FLOOR {
        return Ok(());
    }
    let p = p as f64;
    let p_hat = (e1 / e2).log2();
    if !(p - band.0..=p + band.1).contains(&p_hat) {
        return Err(format!(
            "measured order {p_hat:.3}, expected {p} (errors {e1:e} -> {e2:e})"
        ));
    }
    Ok(())
}

/// A PID run on a damped rotation.
#[derive(Debug, Clone, Copy)]
pub struct PidCase {
    /// The system solved, with its closed form.
    pub problem: RotationCase,
    /// Relative tolerance; the absolute tolerance is `rtol * 1e-2`.
    pub rtol: f64,
    /// Proportional coefficient (0, 0.3 or 0.4).
    pub pcoeff: f64,
    /// Integral coefficient (1 or 0.3).
    pub icoeff: f64,
    /// Smallest shrink factor, in `[0.1, 0.5)`.
    pub factormin: f64,
    /// Safety factor, in `[0.5, 0.95)`.
    pub safety: f64,
    /// Solve from `t1` down to 0 instead of from 0 to `t1`.
    pub backward: bool,
}

/// PID runs on [`rotation_case`]'s problems: tolerances `1e-3`, `1e-6` or in `[1e-8, 1e-2)`,
/// I-control or one of two PI settings, `factormin` in `[0.1, 0.5)`, `safety` in
/// `[0.5, 0.95)`, forward or backward.
pub fn pid_case() -> impl Strategy<Value = PidCase> {
    (
        rotation_case(),
        prop_oneof![Just(1e-3), Just(1e-6), 1e-8f64..1e-2],
        prop_oneof![Just((0.0, 1.0)), Just((0.3, 0.3)), Just((0.4, 0.3))],
        0.1f64..0.5,
        0.5f64..0.95,
        any::<bool>(),
    )
        .prop_map(
            |(problem, rtol, (pcoeff, icoeff), factormin, safety, backward)| PidCase {
                problem,
                rtol,
                pcoeff,
                icoeff,
                factormin,
                safety,
                backward,
            },
        )
}

fn pid(c: &PidCase) -> Result<Pid, String> {
    (|| {
        Pid::new(c.rtol, c.rtol * 1e-2)?
            .pcoeff(c.pcoeff)?
            .icoeff(c.icoeff)?
            .factormin(c.factormin)?
            .safety(c.safety)
    })()
    .map_err(|e: crate::reference::Error| e.to_string())
}

/// A whole solve under test, called as the reference's [`solve_observed`] is: a field, the
/// method, controller, interval and options of `integration`, `y0`, and an observer told of
/// every attempted step. The step-control, round-trip, bad-input and solve-face laws run it.
pub trait SolveSubject {
    /// Solve `field` from `y0` as `integration` says, calling `observer` after every attempted
    /// step; bad input must be an `Err`.
    fn solve<A: Real>(
        &self,
        field: &dyn VectorField<A>,
        integration: &Integration<'_, A>,
        y0: &[A],
        observer: &mut dyn FnMut(&StepEvent<A>),
    ) -> crate::reference::Result<Solution<A>>;
}

/// The reference solve, [`solve_observed`].
pub struct ReferenceSolve;

impl SolveSubject for ReferenceSolve {
    fn solve<A: Real>(
        &self,
        field: &dyn VectorField<A>,
        integration: &Integration<'_, A>,
        y0: &[A],
        observer: &mut dyn FnMut(&StepEvent<A>),
    ) -> crate::reference::Result<Solution<A>> {
        solve_observed(field, integration, y0, |e| observer(e))
    }
}

/// The verdict of [`step_control`] on the attempted steps of one solve ending at `t1`
/// (`finished`: the solve reached `t1` rather than `max_steps`).
pub fn check_step_events(
    solver: &str,
    events: &[StepEvent<f64>],
    p: &Pid,
    t1: f64,
    finished: bool,
) -> Result<(), String> {
    for (k, w) in events.windows(2).enumerate() {
        let (a, b) = (w[0], w[1]);
        let (da, db) = ((a.t_end - a.t_start).abs(), (b.t_end - b.t_start).abs());
        let clipped = b.t_end == t1;
        let se = a.scaled_error.unwrap_or(0.0);
        if a.accepted && se >= 1.0 {
            return Err(format!(
                "{solver} step {k}: accepted with scaled error {se}"
            ));
        }
        if a.accepted && !clipped && db < da * (1.0 - 1e-9) {
            return Err(format!(
                "{solver} step {k}: accepted step of {da:e} followed by a shorter {db:e}"
            ));
        }
        if !a.accepted && !clipped {
            let f = db / da;
            if f < p.factormin * (1.0 - 1e-9) || f > p.safety * (1.0 + 1e-9) {
                return Err(format!(
                    "{solver} step {k}: rejected step shrank by {f}, outside [{}, {}]",
                    p.factormin, p.safety
                ));
            }
        }
    }
    if let (true, Some(last)) = (finished, events.last()) {
        if !last.accepted || last.t_end != t1 {
            return Err(format!("{solver}: did not end with an accepted step at t1"));
        }
    }
    Ok(())
}

/// Accepted steps have scaled error < 1; after an accepted step the next step is not shorter
/// (unless clipped to end at `t1`); after a rejected one it shrinks by a factor in
/// `[factormin, safety]` (relative slack 1e-9 for the rounding of `t + dt`).
pub fn step_control(c: &PidCase) -> Result<(), String> {
    step_control_with(c, &ReferenceSolve)
}

/// [`step_control`] on `subject`'s solves: every embedded method under the case's PID
/// controller, the attempted steps judged by [`check_step_events`].
pub fn step_control_with<S: SolveSubject>(c: &PidCase, subject: &S) -> Result<(), String> {
    let p = pid(c)?;
    let field =
        Linear::damped_rotation(c.problem.alpha, c.problem.omega).map_err(|e| e.to_string())?;
    let (t0, t1) = if c.backward {
        (c.problem.t1, 0.0)
    } else {
        (0.0, c.problem.t1)
    };
    for solver in Solver::ALL
        .into_iter()
        .filter(|s| s.tableau().b_err().is_some())
    {
        let mut events: Vec<StepEvent<f64>> = Vec::new();
        let tab = solver.tableau();
        let ctl = Controller::Pid(p);
        let integration = Integration::new(&tab, &ctl, t0, t1);
        let budget = integration.options.max_steps;
        // Running out of `max_steps` is not a control-law violation (some PI settings crawl on
        // low-order methods); the invariants are still checked on every step taken, and a
        // subject that says so must have reported the whole budget of attempted steps.
        let finished = match subject.solve(&field, &integration, &c.problem.y0, &mut |e| {
            events.push(*e)
        }) {
            Ok(_) if events.is_empty() => {
                return Err(format!(
                    "{solver}: solved from {t0} to {t1} reporting no step"
                ))
            }
            Ok(_) => true,
            Err(crate::reference::Error::MaxStepsExceeded { .. }) if events.len() != budget => {
                return Err(format!(
                    "{solver}: out of its budget of {budget} steps after reporting {}",
                    events.len()
                ))
            }
            Err(crate::reference::Error::MaxStepsExceeded { .. }) => false,
            Err(e) => return Err(format!("{solver}: {e}")),
        };
        check_step_events(&solver.to_string(), &events, &p, t1, finished)?;
    }
    Ok(())
}

/// Solving forward then backward returns to `y0` within `K * (rtol |y|max + atol) * steps` with
/// `K = 1e3` (each accepted step commits a local error below `rtol |y| + atol`, amplified at most
/// by `e^{L T} <= e^{4}` on these problems), and a constant-step solve repeated is bit-identical.
/// The verdict of [`round_trip`]: `back` (the state after solving forward then backward with
/// `steps` accepted steps in all) is within `1e3 * (rtol |y0|max + atol) * steps` of `y0`.
pub fn check_round_trip(
    solver: &str,
    y0: &[f64],
    back: &[f64],
    p: &Pid,
    steps: usize,
) -> Result<(), String> {
    let ymax = y0.iter().map(|x| x.abs()).fold(0.0, f64::max);
    let bound = 1e3 * (p.rtol * ymax + p.atol) * steps as f64;
    let dist = super::max_abs_difference(&format!("{solver}: round trip"), back, y0)?;
    if dist.is_nan() || dist > bound {
        return Err(format!(
            "{solver}: round trip missed y0 by {dist:e} > bound {bound:e}"
        ));
    }
    Ok(())
}

/// Law: for every embedded method under PID control, solving forward then backward over the
/// same interval returns to `y0` within the controller's tolerance ([`check_round_trip`]), and
/// two identical constant-step solves give the same bits.
pub fn round_trip(c: &PidCase) -> Result<(), String> {
    round_trip_with(c, &ReferenceSolve)
}

/// [`round_trip`] on `subject`'s solves: both halves, the round trip and the bitwise
/// reproducibility of a constant-step solve.
pub fn round_trip_with<S: SolveSubject>(c: &PidCase, subject: &S) -> Result<(), String> {
    let p = pid(c)?;
    let field =
        Linear::damped_rotation(c.problem.alpha, c.problem.omega).map_err(|e| e.to_string())?;
    let t1 = c.problem.t1;
    let opts = SolveOptions {
        save_steps: false,
        ..Default::default()
    };
    // a solve that runs out of its budget is skipped (out of budget, not a miss) only when the
    // subject reported that many attempted steps
    let run = |integration: &Integration<'_, f64>, y0: &[f64]| {
        let mut attempted = 0;
        let budget = integration.options.max_steps;
        match subject.solve(&field, integration, y0, &mut |_| attempted += 1) {
            Err(crate::reference::Error::MaxStepsExceeded { .. }) if attempted != budget => {
                Err(crate::reference::Error::External(format!(
                    "out of its budget of {budget} steps after reporting {attempted}"
                )))
            }
            r => r,
        }
    };
    for solver in Solver::ALL
        .into_iter()
        .filter(|s| s.tableau().b_err().is_some())
    {
        let tab = solver.tableau();
        let ctl = Controller::Pid(p);
        let (fwd, back) = match run(
            &Integration::new(&tab, &ctl, 0.0, t1).with_options(opts),
            &c.problem.y0,
        )
        .and_then(|f| {
            run(
                &Integration::new(&tab, &ctl, t1, 0.0).with_options(opts),
                &f.y_final,
            )
            .map(|b| (f, b))
        }) {
            Ok(fb) => fb,
            Err(crate::reference::Error::MaxStepsExceeded { .. }) => continue, // out of budget, not a miss
            Err(e) => return Err(format!("{solver}: {e}")),
        };
        let steps = fwd.stats.num_accepted_steps + back.stats.num_accepted_steps;
        check_round_trip(solver.name(), &c.problem.y0, &back.y_final, &p, steps)?;
        let ctl = Controller::constant(t1 / 7.0).map_err(|e| e.to_string())?;
        let constant = Integration::new(&tab, &ctl, 0.0, t1).with_options(opts);
        let a = run(&constant, &c.problem.y0).map_err(|e| e.to_string())?;
        let b = run(&constant, &c.problem.y0).map_err(|e| e.to_string())?;
        let differs = a.y_final.iter().zip(&b.y_final);
        if let Some((i, (x, y))) = differs
            .enumerate()
            .find(|(_, (x, y))| x.to_bits() != y.to_bits())
        {
            return Err(format!(
                "{solver}: constant-step solve not bitwise reproducible: y_final[{i}] = {x:?}, \
                 then {y:?}"
            ));
        }
    }
    Ok(())
}

/// Bad input for a solve: each field may be made invalid.
#[derive(Debug, Clone, Copy)]
pub struct BadInput {
    /// First state component (any value, NaN and infinities included); the second is 1.
    pub y0: f64,
    /// Start time (possibly non-finite).
    pub t0: f64,
    /// End time (possibly non-finite).
    pub t1: f64,
    /// First (PID) or constant step (possibly zero, non-finite or of the wrong sign).
    pub dt0: f64,
    /// PID relative tolerance (possibly `<= 0` or non-finite).
    pub rtol: f64,
    /// Pass an empty state.
    pub empty_state: bool,
    /// Use a constant step rather than the PID controller.
    pub constant: bool,
}

fn weird() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(-f64::INFINITY),
        Just(0.0),
        Just(-1.0),
        Just(1.0),
        -1e3f64..1e3
    ]
}

/// [`BadInput`]s: every field drawn from NaN, +-inf, 0, +-1 and `[-1e3, 1e3)`, the state empty
/// or not, a constant or a PID controller.
pub fn bad_input() -> impl Strategy<Value = BadInput> {
    (
        weird(),
        weird(),
        weird(),
        weird(),
        weird(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(y0, t0, t1, dt0, rtol, empty_state, constant)| BadInput {
            y0,
            t0,
            t1,
            dt0,
            rtol,
            empty_state,
            constant,
        })
}

/// Non-finite `y0` or times, `dt0` zero/non-finite/of the wrong sign, tolerances `<= 0` and an
/// empty state give a typed error; nothing panics and nothing loops for ever (`max_steps` 256).
pub fn bad_input_is_typed_error(b: &BadInput) -> Result<(), String> {
    bad_input_is_typed_error_with(b, &ReferenceSolve)
}

/// [`bad_input_is_typed_error`] on `subject`'s solve (Tsit5), judged by [`check_bad_input`].
pub fn bad_input_is_typed_error_with<S: SolveSubject>(
    b: &BadInput,
    subject: &S,
) -> Result<(), String> {
    let field = |_t: f64, y: &[f64], dy: &mut [f64]| {
        for (d, v) in dy.iter_mut().zip(y) {
            *d = -v;
        }
    };
    let y0: Vec<f64> = if b.empty_state {
        vec![]
    } else {
        vec![b.y0, 1.0]
    };
    let ctl = if b.constant {
        Controller::constant(b.dt0)
    } else {
        Pid::new(b.rtol, 1e-8)
            .and_then(|p| p.dt0(Some(b.dt0)))
            .map(Controller::Pid)
    };
    let opts = SolveOptions {
        max_steps: 256,
        save_steps: false,
        ..Default::default()
    };
    let r = ctl.and_then(|c| {
        subject.solve(
            &field,
            &Integration::new(&Solver::Tsit5.tableau(), &c, b.t0, b.t1).with_options(opts),
            &y0,
            &mut |_| {},
        )
    });
    check_bad_input(b, &r)
}

/// The verdict of [`bad_input_is_typed_error`] on the solve's outcome for input `b`.
pub fn check_bad_input(
    b: &BadInput,
    r: &crate::reference::Result<crate::ode::Solution<f64>>,
) -> Result<(), String> {
    let expect_err = b.empty_state
        || !b.y0.is_finite()
        || !b.t0.is_finite()
        || !b.t1.is_finite()
        || !b.dt0.is_finite()
        || b.dt0 == 0.0
        || (b.t1 != b.t0 && (b.t1 - b.t0).signum() != b.dt0.signum())
        || !(b.constant || (b.rtol > 0.0 && b.rtol.is_finite()));
    match r {
        Err(_) => Ok(()),
        Ok(_) if expect_err => Err("bad input was accepted".into()),
        Ok(s) if s.stats.num_steps != s.stats.num_accepted_steps + s.stats.num_rejected_steps => {
            Err("inconsistent stats".into())
        }
        Ok(_) => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------------
// Gradients through a solve (`ode::grad`).

/// A problem for the gradient laws: a damped rotation or Lotka–Volterra, a method, a controller
/// and the cotangent `w = dL/dy(t1)`.
#[derive(Debug, Clone, Copy)]
pub struct GradCase {
    /// `None`: the damped rotation of `rotation`; `Some([alpha, beta, gamma, delta])`: LV.
    pub lv: Option<[f64; 4]>,
    /// The damped rotation (its `y0` and `t1` also serve the LV case, with `y0` made positive).
    pub rotation: RotationCase,
    /// Index into [`Solver::ALL`].
    pub solver: usize,
    /// `Some(k)`: constant step `t1/k`; `None`: PID with `rtol`.
    pub steps: Option<u32>,
    /// PID relative tolerance, used when `steps` is `None`.
    pub rtol: f64,
    /// Weights of the loss `L = <w, y(t1)>`, in `[-1, 1)`.
    pub w: [f64; 2],
    /// Solve backward, from `rotation.t1` down to 0 (`t1 < t0`), instead of from 0 to `t1`.
    pub backward: bool,
}

/// Cases with constant steps up to `max_const_steps`; PID tolerances `rtols`.
fn grad_case(max_const_steps: u32, rtols: [f64; 2]) -> impl Strategy<Value = GradCase> {
    (
        prop_oneof![
            Just(None),
            (0.5f64..2.0, 0.5f64..1.5, 1.0f64..3.0, 0.5f64..1.5)
                .prop_map(|(a, b, g, d)| Some([a, b, g, d]))
        ],
        rotation_case(),
        0..Solver::ALL.len(),
        prop_oneof![Just(None), (1..=max_const_steps).prop_map(Some)],
        prop_oneof![Just(rtols[0]), Just(rtols[1])],
        (-1.0f64..1.0, -1.0f64..1.0),
    )
        .prop_map(|(lv, mut rotation, solver, steps, rtol, (w0, w1))| {
            if lv.is_some() {
                // LV needs a positive start; keep t1 <= 2 so the orbit stays O(1).
                rotation.y0 = [
                    0.5 + rotation.y0[0].abs() * 0.75,
                    0.5 + rotation.y0[1].abs() * 0.75,
                ];
            }
            GradCase {
                lv,
                rotation,
                solver,
                steps,
                rtol,
                w: [w0, w1],
                backward: false,
            }
        })
}

/// `grad_case`'s cases solved backward (`t1 < t0`), for
/// [`grad_backward_matches_fd`].
pub fn backward_grad_case() -> impl Strategy<Value = GradCase> {
    grad_case(30, [1e-4, 1e-6]).prop_map(|c| GradCase {
        backward: true,
        ..c
    })
}

impl GradCase {
    fn field(&self) -> Result<Box<dyn DiffField>, String> {
        Ok(match self.lv {
            Some([a, b, g, d]) => {
                Box::new(LotkaVolterra::new(a, b, g, d).map_err(|e| e.to_string())?)
            }
            None => Box::new(
                Linear::damped_rotation(self.rotation.alpha, self.rotation.omega)
                    .map_err(|e| e.to_string())?,
            ),
        })
    }
    fn solver(&self) -> Solver {
        Solver::ALL[self.solver]
    }
    /// `(t0, t1)`: `(0, T)`, or `(T, 0)` backward.
    fn interval(&self) -> (f64, f64) {
        if self.backward {
            (self.rotation.t1, 0.0)
        } else {
            (0.0, self.rotation.t1)
        }
    }
    fn controller(&self) -> Result<Controller, String> {
        let has_err = self.solver().tableau().b_err().is_some();
        let (t0, t1) = self.interval();
        match self.steps {
            Some(k) => Controller::constant((t1 - t0) / k as f64),
            None if has_err => Controller::pid(self.rtol, self.rtol * 1e-2),
            None => Controller::constant((t1 - t0) / 10.0),
        }
        .map_err(|e| e.to_string())
    }
    /// The gradient computed by `subject`, in `mode`.
    pub fn gradient(
        &self,
        mode: GradMode,
        subject: &dyn GradientSubject,
    ) -> Result<Gradient, String> {
        self.gradient_typed(mode, subject)?
            .map_err(|e| format!("{}: {e}", self.solver()))
    }
    /// [`GradCase::gradient`] with the subject's error as it gave it (outer `Err`: the case
    /// itself could not be set up).
    fn gradient_typed(
        &self,
        mode: GradMode,
        subject: &dyn GradientSubject,
    ) -> Result<crate::reference::Result<Gradient>, String> {
        let f = self.field()?;
        let tab = self.solver().tableau();
        let ctl = self.controller()?;
        let opts = SolveOptions::default();
        let ((t0, t1), y0, w) = (self.interval(), &self.rotation.y0, &self.w);
        let problem = GradProblem {
            integration: Integration::new(&tab, &ctl, t0, t1).with_options(opts),
            y0,
            w,
        };
        Ok(subject.gradient(&*f, &problem, mode))
    }
    /// The full-tape gradient of `subject`, or `None` when it runs out of its step budget
    /// ([`crate::reference::Error::MaxStepsExceeded`]) and so does the reference, which takes
    /// the same steps (same method, controller and budget): out of budget, not a miss. Running
    /// out where the reference finishes is a failure.
    pub fn full_tape(&self, subject: &dyn GradientSubject) -> Result<Option<Gradient>, String> {
        use crate::reference::Error::MaxStepsExceeded;
        match self.gradient_typed(GradMode::FullTape, subject)? {
            Ok(g) => Ok(Some(g)),
            Err(e @ MaxStepsExceeded { .. }) => {
                match self.gradient_typed(GradMode::FullTape, &ReferenceGradient)? {
                    Err(MaxStepsExceeded { .. }) => Ok(None),
                    _ => Err(format!(
                        "{}: {e}, where the reference finishes within the budget",
                        self.solver()
                    )),
                }
            }
            Err(e) => Err(format!("{}: {e}", self.solver())),
        }
    }
    /// Compare `g` with central finite differences of `<w, y(t_n)>` along `g.ts`; the largest
    /// error `|g - fd|` over all components is returned when every one is within
    /// [`tolerance::GRAD_FD`].
    pub fn compare_with_fd(&self, g: &Gradient) -> Result<f64, String> {
        let f = self.field()?;
        let tab = self.solver().tableau();
        let theta = f.theta();
        let y0 = self.rotation.y0.to_vec();
        let loss = |y0: &[f64], th: &[f64]| -> f64 {
            let y = grad::forward_on_times(&*f, &tab, &g.ts, y0, th);
            y.iter().zip(&self.w).map(|(a, b)| a * b).sum()
        };
        let fd = |x: &[f64], i: usize, l: &dyn Fn(&[f64]) -> f64| -> f64 {
            let h = 1e-6 * x[i].abs().max(1.0);
            let (mut xp, mut xm) = (x.to_vec(), x.to_vec());
            xp[i] += h;
            xm[i] -= h;
            (l(&xp) - l(&xm)) / (xp[i] - xm[i])
        };
        let mut worst = 0.0f64;
        let mut check = |what: &str, i: usize, got: f64, want: f64| -> Result<(), String> {
            worst = worst.max((got - want).abs());
            if tolerance::GRAD_FD.close(got, want) {
                Ok(())
            } else {
                Err(format!(
                    "{} ({} steps): d{what}[{i}] = {got:e}, finite difference {want:e}",
                    self.solver(),
                    g.ts.len() - 1
                ))
            }
        };
        for i in 0..y0.len() {
            check("y0", i, g.d_y0[i], fd(&y0, i, &|y: &[f64]| loss(y, &theta)))?;
        }
        for i in 0..theta.len() {
            check(
                "theta",
                i,
                g.d_theta[i],
                fd(&theta, i, &|th: &[f64]| loss(&y0, th)),
            )?;
        }
        Ok(worst)
    }
}

/// One gradient through a solve: `dL/dy0` and `dL/dtheta` of `L = <w, y(t1)>`.
#[derive(Clone, Copy)]
pub struct GradProblem<'a> {
    /// Method, controller, interval and options of the forward solve.
    pub integration: Integration<'a, f64>,
    /// Initial state.
    pub y0: &'a [f64],
    /// Weights of the loss `L = <w, y(t1)>` (length of the state).
    pub w: &'a [f64],
}

/// What computes gradients through a solve for the gradient laws: the reference
/// ([`ReferenceGradient`]), a re-created bug, or a user's implementation.
pub trait GradientSubject: Sync {
    /// The gradient of `problem` for `field`, storing states as `mode` says.
    fn gradient(
        &self,
        field: &dyn DiffField,
        problem: &GradProblem<'_>,
        mode: GradMode,
    ) -> crate::reference::Result<Gradient>;
}

/// The reference implementation, [`grad::gradient`].
pub struct ReferenceGradient;

impl GradientSubject for ReferenceGradient {
    fn gradient(
        &self,
        field: &dyn DiffField,
        p: &GradProblem<'_>,
        mode: GradMode,
    ) -> crate::reference::Result<Gradient> {
        grad::gradient(field, &p.integration, p.y0, p.w, mode)
    }
}

/// The full-tape gradient matches central finite differences of the fixed-times map in f64
/// within [`tolerance::GRAD_FD`], for `y0` and every parameter.
pub fn grad_matches_fd(c: &GradCase) -> Result<(), String> {
    grad_matches_fd_with(c, &ReferenceGradient)
}

/// [`grad_matches_fd`] on `subject`.
pub fn grad_matches_fd_with(c: &GradCase, subject: &dyn GradientSubject) -> Result<(), String> {
    let Some(g) = c.full_tape(subject)? else {
        return Ok(()); // out of budget, not a miss
    };
    c.compare_with_fd(&g).map(|_| ())
}

/// Backward solves (`t1 < t0`, diffrax's time negation): the full-tape gradient of `subject`
/// matches central finite differences of the fixed-times map in f64 within
/// [`tolerance::GRAD_FD`], and the checkpointed gradient (2 checkpoints) equals it bit for bit.
pub fn grad_backward_matches_fd_with(
    c: &GradCase,
    subject: &dyn GradientSubject,
) -> Result<(), String> {
    let backward = GradCase {
        backward: true,
        ..*c
    };
    let Some(g) = backward.full_tape(subject)? else {
        return Ok(()); // out of budget, not a miss
    };
    if g.ts.windows(2).any(|t| t[1] >= t[0]) {
        return Err(format!(
            "{}: backward step times not decreasing",
            backward.solver()
        ));
    }
    backward.compare_with_fd(&g)?;
    let ck = backward.gradient(
        GradMode::Checkpointed {
            checkpoints: Some(2),
        },
        subject,
    )?;
    grads_bitwise_equal(&format!("{} backward c=2", backward.solver()), &ck, &g)
}

/// [`grad_backward_matches_fd_with`] on the reference.
pub fn grad_backward_matches_fd(c: &GradCase) -> Result<(), String> {
    grad_backward_matches_fd_with(c, &ReferenceGradient)
}

/// `Ok` when the two gradients (and recomputed final states) are bit-identical.
pub fn grads_bitwise_equal(what: &str, a: &Gradient, b: &Gradient) -> Result<(), String> {
    for (name, x, y) in [
        ("d_y0", &a.d_y0, &b.d_y0),
        ("d_theta", &a.d_theta, &b.d_theta),
        ("y_final", &a.y_final, &b.y_final),
    ] {
        if x.len() != y.len() {
            return Err(format!("{what}: {name} lengths {} != {}", x.len(), y.len()));
        }
        if let Some(i) = (0..x.len()).find(|&i| x[i].to_bits() != y[i].to_bits()) {
            return Err(format!(
                "{what}: {name}[{i}] {:?} != {:?} (bits differ)",
                x[i], y[i]
            ));
        }
    }
    Ok(())
}

/// The checkpointed gradient equals the full tape's bit for bit, for every checkpoint count
/// `c = 1..=n` and the default budget, both computed by `subject`.
pub fn checkpointed_equals_full_with(
    c: &GradCase,
    subject: &dyn GradientSubject,
) -> Result<(), String> {
    let Some(full) = c.full_tape(subject)? else {
        return Ok(()); // out of budget, not a miss
    };
    let n = full.ts.len() - 1;
    let budgets = (1..=n).map(Some).chain(std::iter::once(None));
    for k in budgets {
        let ck = c.gradient(GradMode::Checkpointed { checkpoints: k }, subject)?;
        grads_bitwise_equal(&format!("{} n={n} c={k:?}", c.solver()), &ck, &full)?;
    }
    Ok(())
}

/// [`checkpointed_equals_full_with`] on the reference.
pub fn checkpointed_equals_full(c: &GradCase) -> Result<(), String> {
    checkpointed_equals_full_with(c, &ReferenceGradient)
}

/// Peak bytes above baseline of gradients on a `dim`-dimensional linear system with `n`
/// constant steps, per mode.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct GradMemory {
    /// Constant steps `n` over `[0, 1]`.
    pub steps: usize,
    /// Checkpoints of the checkpointed run, `ceil(sqrt(n))`.
    pub checkpoints: usize,
    /// Bytes of one state (`8 * dim`).
    pub state_bytes: usize,
    /// Peak bytes above baseline of the full-tape gradient.
    pub full_tape_peak: usize,
    /// Peak bytes above baseline of the subject's checkpointed gradient.
    pub checkpointed_peak: usize,
    /// Forward steps of the checkpointed run ([`Gradient::forward_steps`]).
    pub forward_steps: usize,
    /// Bytes of the step-time vector as held (`8 x capacity`; at most `16 (n + 1)`).
    pub times_bytes: usize,
    /// The one-step overhead (see [`grad_memory`]).
    pub overhead: usize,
    /// `c * state_bytes + times_bytes + overhead`.
    pub bound: usize,
}

/// The block-diagonal system of `dim/2` damped rotations used by the memory law.
pub fn memory_problem(dim: usize) -> Result<Linear, String> {
    let mut a = vec![0.0; dim * dim];
    for b in 0..dim / 2 {
        let (i, al, om) = (2 * b, 0.1 + 0.01 * b as f64, 1.0 + 0.1 * b as f64);
        a[i * dim + i] = -al;
        a[i * dim + i + 1] = om;
        a[(i + 1) * dim + i] = -om;
        a[(i + 1) * dim + i + 1] = -al;
    }
    Linear::new(dim, a).map_err(|e| e.to_string())
}

/// Measure both modes for each `n` in `steps` (checkpoints `ceil(sqrt(n))`) with `solver`;
/// the checkpointed runs are `subject`'s, the full tape and the overhead the reference's. The bound on the checkpointed peak is
/// `c * state_bytes + times_bytes + overhead`: the `c` checkpoints, the step times as held,
/// and the overhead constant, the checkpointed peak of a one-step gradient on the same problem
/// (one checkpoint — so the bound has one state of slack —, the working state, `y_final`, old
/// and new `lambda`, the one-step graph, the step function's stage buffers, `theta` and its
/// gradient): none of these grows with `n`. Hold [`crate::probe::exclusive`] around the call.
pub fn grad_memory(
    dim: usize,
    solver: Solver,
    steps: &[usize],
    subject: &dyn GradientSubject,
) -> Result<Vec<GradMemory>, String> {
    let field = memory_problem(dim)?;
    let tab = solver.tableau();
    let y0: Vec<f64> = (0..dim).map(|i| 1.0 + i as f64 * 0.01).collect();
    let w = vec![1.0; dim];
    let opts = SolveOptions {
        max_steps: 1 << 16,
        ..Default::default()
    };
    let run =
        |n: usize, mode: GradMode, s: &dyn GradientSubject| -> Result<(Gradient, usize), String> {
            let ctl = Controller::constant(1.0 / n as f64).map_err(|e| e.to_string())?;
            let problem = GradProblem {
                integration: Integration::new(&tab, &ctl, 0.0, 1.0).with_options(opts),
                y0: &y0,
                w: &w,
            };
            let (g, mem) = crate::probe::measure(|| s.gradient(&field, &problem, mode));
            Ok((g.map_err(|e| e.to_string())?, mem.peak_above_baseline))
        };
    // warm-up (one-time lazy allocations), then the overhead constant
    run(1, GradMode::FullTape, &ReferenceGradient)?;
    let one = GradMode::Checkpointed {
        checkpoints: Some(1),
    };
    let (_, overhead) = run(1, one, &ReferenceGradient)?;
    let state_bytes = dim * std::mem::size_of::<f64>();
    let mut out = Vec::new();
    for &n in steps {
        let c = (n as f64).sqrt().ceil() as usize;
        let (g, full_tape_peak) = run(n, GradMode::FullTape, &ReferenceGradient)?;
        let (gc, checkpointed_peak) = run(
            n,
            GradMode::Checkpointed {
                checkpoints: Some(c),
            },
            subject,
        )?;
        grads_bitwise_equal("memory run", &gc, &g)?;
        let n_act = g.ts.len() - 1;
        let c = gc.checkpoints;
        let times_bytes = gc.ts.capacity() * std::mem::size_of::<f64>();
        out.push(GradMemory {
            steps: n_act,
            checkpoints: c,
            state_bytes,
            full_tape_peak,
            checkpointed_peak,
            forward_steps: gc.forward_steps,
            times_bytes,
            overhead,
            bound: c * state_bytes + times_bytes + overhead,
        });
    }
    Ok(out)
}

/// The checkpointed peak of every row is within its bound (`c` states and the one-step
/// overhead; no `ceil(n/c)`-state segment buffer, no state per step),
/// and the full tape grows at least linearly: between the first and last rows by
/// `>= 0.9 * (n_last - n_first) * state_bytes`.
pub fn check_grad_memory(rows: &[GradMemory]) -> Result<(), String> {
    for r in rows {
        if r.checkpointed_peak > r.bound {
            return Err(format!(
                "checkpointed peak {} B > bound {} B: {r:?}",
                r.checkpointed_peak, r.bound
            ));
        }
    }
    if let (Some(a), Some(b)) = (rows.first(), rows.last()) {
        let want = 0.9 * (b.steps - a.steps) as f64 * a.state_bytes as f64;
        let grew = b.full_tape_peak as f64 - a.full_tape_peak as f64;
        if grew < want {
            return Err(format!(
                "full tape grew {grew} B from n={} to n={}, expected >= {want} B (linear)",
                a.steps, b.steps
            ));
        }
    }
    Ok(())
}

/// Steps used by the memory law.
pub const GRAD_MEM_STEPS: [usize; 3] = [100, 400, 1600];

/// The memory law with `subject`'s checkpointed runs: 32-dimensional linear system,
/// `n = 100, 400, 1600`, `c = ceil(sqrt(n))`, for the method picked by the case.
pub fn grad_memory_bound_with(solver: &usize, subject: &dyn GradientSubject) -> Result<(), String> {
    let solver = Solver::ALL[*solver];
    let rows = grad_memory(32, solver, &GRAD_MEM_STEPS, subject)?;
    check_grad_memory(&rows).map_err(|e| format!("{solver}: {e}"))
}

/// [`grad_memory_bound_with`] on the reference.
pub fn grad_memory_bound(solver: &usize) -> Result<(), String> {
    grad_memory_bound_with(solver, &ReferenceGradient)
}

// ---------------------------------------------------------------------------------------------
// The fast step equals its dfdx face

/// A case of `ode_step_faces_agree`: the method `Solver::ALL[solver]` on the non-autonomous,
/// nonlinear field `k_j = -a y_j + w y_{j+1} - y_j^3 / 10 + b sin(t + j)` (indices mod `n`)
/// from `(t0, y0)`, four steps ending at `t0 + k dt`, then a whole solve to `t0 + 8 dt` (PID at `rtol` when
/// the method has an error estimate and `rtol` is given, else constant steps).
#[derive(Debug, Clone)]
pub struct FaceCase {
    /// Index into [`Solver::ALL`].
    pub solver: usize,
    /// Run in f32 (else f64).
    pub f32: bool,
    /// Initial state, 1 to 5 components in `[-2, 2)`.
    pub y0: Vec<f64>,
    /// `(a, w, b)`.
    pub coeffs: (f64, f64, f64),
    /// Start time (near zero, moderate, or up to `1e5`).
    pub t0: f64,
    /// Step, either sign, magnitude in `[0.01, 0.3)`.
    pub dt: f64,
    /// PID relative tolerance of the whole solve, or `None` for constant steps.
    pub rtol: Option<f64>,
}

/// Strategy for [`FaceCase`]: every method, both precisions, 1–5 states, times of varied
/// magnitude (near zero, `t_prev + 1 * dt` often misses `t_next` by an ulp), both directions.
pub fn face_case() -> impl Strategy<Value = FaceCase> {
    (
        0..Solver::ALL.len(),
        any::<bool>(),
        prop::collection::vec(-2.0f64..2.0, 1..=5),
        (0.0f64..2.0, -2.0f64..2.0, -1.0f64..1.0),
        // near zero a step is larger than its start, where `t_prev + (t_next - t_prev)` can miss
        // `t_next`; far from zero the step is tiny against the time
        prop_oneof![-3.0f64..3.0, -0.2f64..0.2, 1e3f64..1e5],
        prop_oneof![0.01f64..0.3, -0.3f64..-0.01],
        prop::option::of(prop_oneof![Just(1e-3), 1e-7f64..1e-2]),
    )
        .prop_map(|(solver, f32, y0, coeffs, t0, dt, rtol)| FaceCase {
            solver,
            f32,
            y0,
            coeffs,
            t0,
            dt,
            rtol,
        })
}

impl FaceCase {
    fn dtype(&self) -> crate::backend::DType {
        if self.f32 {
            crate::backend::DType::F32
        } else {
            crate::backend::DType::F64
        }
    }
    /// The case's field in `A`.
    pub fn field<A: Real>(&self, t: A, y: &[A], k: &mut [A]) {
        let (a, w, b) = self.coeffs;
        let (a, w, b, tenth) = (A::of_f64(a), A::of_f64(w), A::of_f64(b), A::of_f64(0.1));
        let n = y.len();
        for j in 0..n {
            let phase = A::of_f64(j as f64);
            k[j] =
                -a * y[j] + w * y[(j + 1) % n] - tenth * y[j] * y[j] * y[j] + b * (t + phase).sin();
        }
    }
}

/// A field `(t, z, k)` writing `f(t, z)` into `k`, as a step's stages call it.
pub type StageField<'a, A> = dyn FnMut(A, &[A], &mut [A]) + 'a;

/// A Runge–Kutta step under test: `ode_step_faces_agree` holds it equal, bit for bit, to the
/// dfdx face ([`DfdxRkStep`]).
pub trait StepSubject {
    /// One step of `tab` from `(tprev, y)` to `tnext`: the new state, the error estimate and the
    /// stage derivatives.
    fn step<A: Real>(
        &self,
        tab: &Tableau,
        tprev: A,
        tnext: A,
        y: &[A],
        field: &mut StageField<'_, A>,
    ) -> DfdxStepOut<A>;
}

/// The fast form ([`RkStep`]): what the solve and both gradient sweeps run.
pub struct FastStep;

impl StepSubject for FastStep {
    fn step<A: Real>(
        &self,
        tab: &Tableau,
        tprev: A,
        tnext: A,
        y: &[A],
        field: &mut StageField<'_, A>,
    ) -> DfdxStepOut<A> {
        let rk = RkStep::<A>::new(tab);
        let (n, st) = (y.len(), rk.stages_len());
        let (mut ks, mut z, mut y1) = (
            vec![A::zero(); n * st],
            vec![A::zero(); n],
            vec![A::zero(); n],
        );
        let mut err = vec![A::zero(); n];
        rk.stages(
            StepSpan { tprev, tnext, y },
            0..st,
            &mut ks,
            &mut z,
            &mut |_, t, z, k| field(t, z, k),
        );
        rk.combine(tnext - tprev, y, &ks, &z, &mut y1);
        let err = rk.error(tnext - tprev, &ks, &mut err).then_some(err);
        DfdxStepOut {
            y1,
            err,
            ks: ks.chunks_exact(n).map(<[A]>::to_vec).collect(),
        }
    }
}

/// `subject`'s steps equal the dfdx face's bit for bit: four consecutive steps of the case,
/// comparing the new state, the error estimate and every stage derivative.
pub fn step_faces_agree_with<S: StepSubject>(c: &FaceCase, subject: &S) -> Result<(), String> {
    by_dtype!(real c.dtype(), step_faces_agree_e[S](c, subject), else Err("unreachable dtype".into()))
}

fn step_faces_agree_e<A: Real, S: StepSubject>(c: &FaceCase, subject: &S) -> Result<(), String> {
    let solver = Solver::ALL[c.solver];
    let tab = solver.tableau();
    let face = DfdxRkStep::<A>::new(&tab);
    let mut y: Vec<A> = c.y0.iter().map(|&v| A::of_f64(v)).collect();
    let mut field = |t: A, y: &[A], k: &mut [A]| c.field(t, y, k);
    // Step ends placed as fractions of an interval, as a constant-step solve places them (not
    // accumulated: `t + (t + dt - t)` is always `t + dt`, a placed end often is not).
    let end = |k: usize| A::of_f64(c.t0 + k as f64 * c.dt);
    let mut t = end(0);
    for step in 0..4 {
        let tnext = end(step + 1);
        let got = subject.step(&tab, t, tnext, &y, &mut field);
        let want = face.step(t, tnext, &y, None, &mut field);
        let at = |what: &str, d: String| {
            format!("{solver} step {step} from t = {t:?} to {tnext:?}: {what}{d}")
        };
        if let Some(d) = first_bit_difference(&got.y1, &want.y1) {
            return Err(at("y1", d));
        }
        match (&got.err, &want.err) {
            (Some(g), Some(w)) => {
                if let Some(d) = first_bit_difference(g, w) {
                    return Err(at("error estimate", d));
                }
            }
            (None, None) => {}
            (g, w) => {
                return Err(at(
                    "error estimate present: ",
                    format!("{} vs {}", g.is_some(), w.is_some()),
                ))
            }
        }
        for (i, (g, w)) in
            super::paired(&at("stages", String::new()), &got.ks, &want.ks)?.enumerate()
        {
            if let Some(d) = first_bit_difference(g, w) {
                return Err(at(&format!("k_{i}"), d));
            }
        }
        y = want.y1;
        t = tnext;
    }
    Ok(())
}

/// A whole solve of the case with the fast face equals the solve with the dfdx face (steps,
/// their times and states, and the counts) bit for bit: the error norm and the controller
/// included.
pub fn solve_faces_agree(c: &FaceCase) -> Result<(), String> {
    solve_faces_agree_with(c, &ReferenceSolve)
}

/// [`solve_faces_agree`] with `subject` solving in the fast face: its whole solve of the case
/// equals the reference's solve in the dfdx face bit for bit.
pub fn solve_faces_agree_with<S: SolveSubject>(c: &FaceCase, subject: &S) -> Result<(), String> {
    by_dtype!(real c.dtype(), solve_faces_agree_e[S](c, subject), else Err("unreachable dtype".into()))
}

fn solve_faces_agree_e<A: Real, S: SolveSubject>(c: &FaceCase, subject: &S) -> Result<(), String> {
    let solver = Solver::ALL[c.solver];
    let tab = solver.tableau();
    let ctl = match c.rtol {
        Some(rtol) if tab.b_err().is_some() => Pid::new(rtol, rtol * 1e-2)
            .and_then(|p| p.dt0(Some(c.dt)))
            .map(Controller::Pid),
        _ => Controller::constant(c.dt),
    }
    .map_err(|e| e.to_string())?;
    let field = |t: A, y: &[A], k: &mut [A]| c.field(t, y, k);
    let y0: Vec<A> = c.y0.iter().map(|&v| A::of_f64(v)).collect();
    let (t0, t1) = (A::of_f64(c.t0), A::of_f64(c.t0 + 8.0 * c.dt));
    let integration = Integration::new(&tab, &ctl, t0, t1).max_steps(2000);
    let fast = subject
        .solve(&field, &integration.face(Face::Fast), &y0, &mut |_| {})
        .map_err(|e| e.to_string());
    let dfdx = solve(&field, &integration.face(Face::Dfdx), &y0).map_err(|e| e.to_string());
    let (fast, dfdx) = match (fast, dfdx) {
        (Ok(f), Ok(d)) => (f, d),
        (Err(f), Err(d)) if f == d => return Ok(()),
        (f, d) => {
            return Err(format!(
                "{solver}: fast {:?}, dfdx face {:?}",
                f.err(),
                d.err()
            ))
        }
    };
    if fast.stats != dfdx.stats {
        return Err(format!(
            "{solver}: steps {:?}, dfdx face {:?}",
            fast.stats, dfdx.stats
        ));
    }
    if let Some(d) = first_bit_difference(&fast.ts, &dfdx.ts) {
        return Err(format!("{solver}: ts{d}"));
    }
    for (i, (f, d)) in super::paired(&format!("{solver}: ys"), &fast.ys, &dfdx.ys)?.enumerate() {
        if let Some(d) = first_bit_difference(f, d) {
            return Err(format!("{solver}: ys[{i}]{d}"));
        }
    }
    if let Some(d) = first_bit_difference(&fast.y_final, &dfdx.y_final) {
        return Err(format!("{solver}: y_final{d}"));
    }
    Ok(())
}

/// The registered law: the fast step ([`FastStep`]) and a whole fast solve equal the dfdx face.
pub fn faces_agree(c: &FaceCase) -> Result<(), String> {
    step_faces_agree_with(c, &FastStep)?;
    solve_faces_agree(c)
}

pub(crate) fn laws() -> Vec<Law> {
    vec![
        Law {
            name: "ode_convergence_order",
            family: Family::Numerics,
            summary: "halving the step divides the error by ~2^p, every method, on y' = A y (ORDER_BAND) and the time-dependent y' = (1 + t) A y (TIME_DEPENDENT_ORDER_BAND)",
            default_cases: 24,
            measures_memory: false,
            run: |c, s| check_property("ode_convergence_order", c, s, rotation_case(), convergence_order),
        },
        Law {
            name: "ode_step_control",
            family: Family::Numerics,
            summary: "accepted: scaled error < 1 and dt never shrinks; rejected: shrink in [factormin, safety]",
            default_cases: 48,
            measures_memory: false,
            run: |c, s| check_property("ode_step_control", c, s, pid_case(), step_control),
        },
        Law {
            name: "ode_round_trip_and_reproducible",
            family: Family::Numerics,
            summary: "forward then backward returns to y0 within the tolerance bound; constant steps bitwise reproducible",
            default_cases: 48,
            measures_memory: false,
            run: |c, s| check_property("ode_round_trip_and_reproducible", c, s, pid_case(), round_trip),
        },
        Law {
            name: "ode_bad_input_is_typed_error",
            family: Family::Numerics,
            summary: "non-finite y0/t, bad dt0, tolerances <= 0, empty state: typed error, no panic, no endless loop",
            default_cases: 512,
            measures_memory: false,
            run: |c, s| check_property("ode_bad_input_is_typed_error", c, s, bad_input(), bad_input_is_typed_error),
        },
        Law {
            name: "ode_step_faces_agree",
            family: Family::Numerics,
            summary: "the fast Runge-Kutta step and solve equal the dfdx face bit for bit (stages, error, norm, controller), every method, f32/f64",
            default_cases: 64,
            measures_memory: false,
            run: |c, s| check_property("ode_step_faces_agree", c, s, face_case(), faces_agree),
        },
        Law {
            name: "ode_grad_matches_finite_differences",
            family: Family::Numerics,
            summary: "dL/dy0 and dL/dtheta through a solve match central finite differences (tolerance GRAD_FD)",
            default_cases: 48,
            measures_memory: false,
            run: |c, s| check_property("ode_grad_matches_finite_differences", c, s, grad_case(30, [1e-4, 1e-6]), grad_matches_fd),
        },
        Law {
            name: "ode_grad_backward_matches_finite_differences",
            family: Family::Numerics,
            summary: "backward solves (t1 < t0): gradients match central finite differences (GRAD_FD); checkpointed equals full tape",
            default_cases: 48,
            measures_memory: false,
            run: |c, s| check_property("ode_grad_backward_matches_finite_differences", c, s, backward_grad_case(), grad_backward_matches_fd),
        },
        Law {
            name: "ode_grad_checkpointed_equals_full_tape",
            family: Family::Numerics,
            summary: "checkpointed gradients equal the full tape's bit for bit, every c in 1..=n and the default",
            default_cases: 16,
            measures_memory: false,
            run: |c, s| check_property("ode_grad_checkpointed_equals_full_tape", c, s, grad_case(24, [1e-2, 1e-3]), checkpointed_equals_full),
        },
        Law {
            name: "ode_grad_checkpoint_memory_bound",
            family: Family::Numerics,
            summary: "checkpointed peak <= c states + step times + one-step overhead for n = 100..1600; full tape grows linearly",
            default_cases: 1,
            measures_memory: true,
            run: |c, s| check_property("ode_grad_checkpoint_memory_bound", c, s, prop_oneof![Just(5usize), Just(2usize)], grad_memory_bound),
        },
    ]
}
