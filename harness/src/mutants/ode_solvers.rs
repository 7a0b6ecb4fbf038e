//! Wrong ODE solves, each a [`SolveSubject`] of its own: the step-control, round-trip,
//! bad-input and solve-face laws of `laws::ode` must catch every one.
//!
//! Three wrap the reference solve and make one mistake around it; the others are one
//! hand-written Runge–Kutta loop (the reference's stages, a PI controller written out) with one
//! line of it wrong.
//!
//! - [`ShrinksAfterAccept`]: after an accepted step the step-size factor is clipped to
//!   `[factormin, factormax]` instead of `[1, factormax]`, so a step accepted with an error
//!   close to 1 is followed by a shorter one: the step-control law catches it.
//! - [`SafetyInTheAcceptanceTest`]: a step is kept when `safety * scaled_error < 1`, so errors in
//!   `[1, 1/safety)` are accepted: the step-control law catches it.
//! - [`BackwardWithoutTimeReversal`]: a backward request is solved forward over the sorted
//!   interval: the round-trip law catches it.
//! - [`StageSumOrderFromCallCount`]: the new state sums the stage contributions in an order that
//!   depends on how many solves came before: the reproducibility half of the round-trip law
//!   catches it.
//! - [`SkipsInputValidation`]: the hand-written loop without the input checks: the bad-input
//!   law catches it.
//! - [`StopsAtTheLastWholeStep`]: a constant-step fast solve that ends at the last whole step
//!   `t0 + floor((t1 - t0)/dt) dt` instead of `t1`: the solve half of the face law catches it.

use crate::backend::Real;
use crate::laws::ode::{ReferenceSolve, SolveSubject};
use crate::ode::stepper::{RkStep, StepSpan};
use crate::ode::{solve, Controller, Integration, Solution, Stats, StepEvent, VectorField};
use crate::reference::{Error, Result};
use num_traits::Float;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The one line of [`hand_written`] that is wrong.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Slip {
    FactorClippedToFactorminAfterAccept,
    SafetyInTheAcceptanceTest,
    StagesSummedBackward,
    NoInputChecks,
    /// None: the loop as documented.
    Correct,
}

/// A PI controller whose factor after an accepted step may fall below 1.
///
/// ```
/// use harness::laws::ode::{pid_case, step_control_with};
/// use harness::laws::{check_property, DEFAULT_SEED};
/// use harness::mutants::ode_solvers::ShrinksAfterAccept;
/// let r = check_property("step control", 16, DEFAULT_SEED, pid_case(), |c| {
///     step_control_with(c, &ShrinksAfterAccept)
/// });
/// assert!(r.unwrap_err().contains("followed by a shorter"));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ShrinksAfterAccept;

/// A solver that keeps a step when `safety * scaled_error < 1` (the safety factor applied to
/// the acceptance test as well as to the next step's size).
#[derive(Debug, Clone, Copy)]
pub struct SafetyInTheAcceptanceTest;

/// A solver that sorts the endpoints of its interval, so a backward request (`t1 < t0`) is
/// integrated forward from `t1` to `t0`, as if time needed no reversal.
#[derive(Debug, Clone, Copy)]
pub struct BackwardWithoutTimeReversal;

/// A solver whose new state sums the stage contributions last-to-first on every other call, as
/// a reduction whose order depends on scheduling would: identical requests give different bits.
#[derive(Debug, Default)]
pub struct StageSumOrderFromCallCount {
    calls: AtomicUsize,
}

/// A solver that integrates whatever it is given: NaN states, non-finite times, zero or
/// wrong-signed steps, empty states.
#[derive(Debug, Clone, Copy)]
pub struct SkipsInputValidation;

/// A constant-step solve that takes only whole steps (a loop `while t + dt <= t1`): when
/// rounding leaves `t1 - t0` a sliver off a whole number of steps, it ends at
/// `t0 + floor((t1 - t0)/dt) dt` instead of `t1`. Adaptive solves are the reference's.
#[derive(Debug, Clone, Copy)]
pub struct StopsAtTheLastWholeStep;

macro_rules! hand_written_with {
    ($subject:ty, |$self_:ident| $slip:expr) => {
        impl SolveSubject for $subject {
            fn solve<A: Real>(
                &$self_,
                field: &dyn VectorField<A>,
                integration: &Integration<'_, A>,
                y0: &[A],
                observer: &mut dyn FnMut(&StepEvent<A>),
            ) -> Result<Solution<A>> {
                hand_written(field, integration, y0, observer, $slip)
            }
        }
    };
}

hand_written_with!(ShrinksAfterAccept, |self| {
    Slip::FactorClippedToFactorminAfterAccept
});
hand_written_with!(SafetyInTheAcceptanceTest, |self| {
    Slip::SafetyInTheAcceptanceTest
});
hand_written_with!(SkipsInputValidation, |self| Slip::NoInputChecks);
hand_written_with!(StageSumOrderFromCallCount, |self| {
    if self.calls.fetch_add(1, Ordering::Relaxed) % 2 == 1 {
        Slip::StagesSummedBackward
    } else {
        Slip::Correct
    }
});

impl SolveSubject for BackwardWithoutTimeReversal {
    fn solve<A: Real>(
        &self,
        field: &dyn VectorField<A>,
        integration: &Integration<'_, A>,
        y0: &[A],
        observer: &mut dyn FnMut(&StepEvent<A>),
    ) -> Result<Solution<A>> {
        let (t0, t1) = (integration.t0, integration.t1);
        let sorted = Integration {
            t0: t0.min(t1),
            t1: t0.max(t1),
            ..*integration
        };
        ReferenceSolve.solve(field, &sorted, y0, observer)
    }
}

impl SolveSubject for StopsAtTheLastWholeStep {
    fn solve<A: Real>(
        &self,
        field: &dyn VectorField<A>,
        integration: &Integration<'_, A>,
        y0: &[A],
        observer: &mut dyn FnMut(&StepEvent<A>),
    ) -> Result<Solution<A>> {
        if let Controller::Constant(c) = integration.controller {
            let (t0, t1, dt) = (integration.t0, integration.t1, A::of_f64(c.dt0));
            let whole = ((t1 - t0) / dt).floor();
            let end = t0 + whole * dt;
            if whole >= A::one() && end != t1 {
                let whole_steps = Integration {
                    t1: end,
                    ..*integration
                };
                return ReferenceSolve.solve(field, &whole_steps, y0, observer);
            }
        }
        ReferenceSolve.solve(field, integration, y0, observer)
    }
}

/// The reference's checks of the input alone: a solve allowed no step fails with
/// `MaxStepsExceeded` (or, for `t0 == t1`, returns `y0`) exactly when the input passed them.
fn check_input<A: Real>(
    field: &dyn VectorField<A>,
    integration: &Integration<'_, A>,
    y0: &[A],
) -> Result<()> {
    match solve(field, &integration.max_steps(0), y0) {
        Ok(_) | Err(Error::MaxStepsExceeded { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// An explicit Runge–Kutta solve written out: the tableau's stages ([`RkStep`]), steps of
/// `dt0` under a constant controller; under a PID controller the first step `dt0` (else 0.01),
/// the RMS scaled error, and PI control (`dcoeff` ignored; no `dtmin`/`dtmax`), with the factor
/// clipped to `[1, factormax]` after an accepted step and to `[factormin, safety]` after a
/// rejected one. A backward solve runs forward in `s = -t` on `-f(-s, y)`. Correct but for
/// `slip`.
fn hand_written<A: Real>(
    field: &dyn VectorField<A>,
    integration: &Integration<'_, A>,
    y0: &[A],
    observer: &mut dyn FnMut(&StepEvent<A>),
    slip: Slip,
) -> Result<Solution<A>> {
    if slip != Slip::NoInputChecks {
        check_input(field, integration, y0)?;
    }
    let (one, zero) = (A::one(), A::zero());
    let (t0, t1, opts) = (integration.t0, integration.t1, integration.options);
    let dir = if t1 < t0 { -one } else { one };
    let (s0, s1) = (t0 * dir, t1 * dir);
    let rk = RkStep::<A>::new(integration.tableau);
    let (n, stages) = (y0.len(), rk.stages_len());
    let (mut ks, mut z) = (vec![zero; n * stages], vec![zero; n]);
    let (mut y, mut y1, mut err) = (y0.to_vec(), vec![zero; n], vec![zero; n]);
    let mut eval = |_: usize, s: A, y: &[A], dy: &mut [A]| {
        field.eval(s * dir, y, dy);
        if dir < zero {
            dy.iter_mut().for_each(|d| *d = -*d);
        }
    };
    let pid = match integration.controller {
        Controller::Pid(p) => Some(*p),
        Controller::Constant(_) => None,
    };
    let q = A::of_f64(f64::from(integration.tableau.order()));
    let mut h = integration
        .controller
        .dt0()
        .map_or(A::of_f64(0.01), |d| A::of_f64(d) * dir);
    let (mut s, mut prev_inv) = (s0, one);
    let (mut stats, mut ts, mut ys) = (Stats::default(), Vec::new(), Vec::new());
    while s < s1 {
        if stats.num_steps >= opts.max_steps {
            return Err(Error::MaxStepsExceeded {
                max_steps: opts.max_steps,
                t: (s * dir).as_f64(),
                t_end: t1.as_f64(),
            });
        }
        let s_end = if s + h >= s1 { s1 } else { s + h };
        let dt = s_end - s;
        let span = StepSpan {
            tprev: s,
            tnext: s_end,
            y: &y,
        };
        rk.stages(span, 0..stages, &mut ks, &mut z, &mut eval);
        if slip == Slip::StagesSummedBackward {
            let w = rk.output_weights();
            for m in 0..n {
                let acc = (0..w.len())
                    .rev()
                    .fold(zero, |acc, i| acc + w[i] * (dt * ks[i * n + m]));
                y1[m] = y[m] + acc;
            }
        } else {
            rk.combine(dt, &y, &ks, &z, &mut y1);
        }
        let (keep, scaled_error, factor) = match &pid {
            None => (true, None, one),
            Some(p) => {
                rk.error(dt, &ks, &mut err);
                let (rtol, atol) = (A::of_f64(p.rtol), A::of_f64(p.atol));
                let squares = (0..n).fold(zero, |acc, i| {
                    let e = err[i] / (atol + rtol * y[i].abs().max(y1[i].abs()));
                    acc + e * e
                });
                let se = (squares / A::of_f64(n as f64)).sqrt();
                let safety = A::of_f64(p.safety);
                let keep = if slip == Slip::SafetyInTheAcceptanceTest {
                    safety * se < one
                } else {
                    se < one
                };
                let inv = one / se;
                let raw = safety
                    * inv.powf(A::of_f64(p.icoeff + p.pcoeff) / q)
                    * prev_inv.powf(A::of_f64(-p.pcoeff) / q);
                let (lo, hi) = match (keep, slip) {
                    (true, Slip::FactorClippedToFactorminAfterAccept) => (p.factormin, p.factormax),
                    (true, _) => (1.0, p.factormax),
                    (false, _) => (p.factormin, p.safety),
                };
                let factor = raw.max(A::of_f64(lo)).min(A::of_f64(hi));
                if keep {
                    prev_inv = if Float::is_finite(inv) && inv != zero {
                        inv
                    } else {
                        one
                    };
                }
                (keep, Some(se), factor)
            }
        };
        stats.num_steps += 1;
        observer(&StepEvent {
            t_start: s * dir,
            t_end: s_end * dir,
            accepted: keep,
            scaled_error,
        });
        if keep {
            stats.num_accepted_steps += 1;
            y.copy_from_slice(&y1);
            s = s_end;
            if opts.save_steps {
                ts.push(s * dir);
                ys.push(y.clone());
            }
        } else {
            stats.num_rejected_steps += 1;
        }
        if pid.is_some() {
            h = dt * factor;
        }
    }
    Ok(Solution {
        ts,
        ys,
        y_final: y,
        stats,
    })
}
