//! Put your own ODE solver under the laws.
//!
//! A Bogacki–Shampine 3(2) solver written the way a user would write it — its own stepping
//! loop, its own error norm and step-size controller, its own start-up step, nothing from the
//! reference's stepper — is wrapped in the [`OdeSolver`] trait and handed to the ODE suite,
//! which draws problems with closed forms and checks it for its convergence order (on an
//! autonomous field and on one that depends on time, with constant steps and through the work
//! of adaptive ones), tolerance proportionality, the backward
//! round trip, reproducibility, the step budget, the field evaluations its reported steps
//! account for, and fifteen bad inputs in each stepping mode.
//! Every solve runs on its own thread under a time limit, so a panic or a hang is a verdict.
//!
//! ```sh
//! cargo run --release -p harness --example custom_solver -- good           # every law passes, exit 0
//! cargo run --release -p harness --example custom_solver -- buggy-node     # exit 1, with the counterexample
//! ```
//!
//! The planted bugs, each caught by the laws named:
//! - `buggy-node` evaluates the second stage at `t + h/3` instead of `t + h/2` (its state still
//!   at `h/2`): on an autonomous field nothing changes, on `y' = (1 + t) A y` the order condition
//!   `sum_i b_i c_i = 1/2` fails and the method is of order 1 there: `ode_convergence_order`,
//!   and `ode_adaptive_order` (its adaptive steps grow with the tolerance as a lower order's do).
//! - `buggy-budget` counts only accepted steps against `max_steps`, so rejected attempts are
//!   free and a budget smaller than the work is not a limit: `ode_step_budget_honoured`.
//! - `buggy-tol` takes a zero or negative `rtol` as it comes (as `ode_solvers` 0.6.2's `Dopri5`
//!   does, `docs/findings/ode_solvers-nonpositive-rtol-accepted.md`):
//!   `ode_bad_input_is_typed_error`.
//! - `buggy-hidden` neither reports its rejected attempts nor counts them against `max_steps`:
//!   the budget law cannot see it (the budget and the report agree), the field evaluations do:
//!   `ode_evaluations_accounted`, from the counts the solver declares
//!   ([`OdeSolver::evaluations`]).
//!
//! # References
//! - P. Bogacki, L. F. Shampine, "A 3(2) pair of Runge–Kutta formulas", *Appl. Math. Lett.* 2
//!   (1989) 321–325 (the tableau).
//! - E. Hairer, S. P. Nørsett, G. Wanner, *Solving Ordinary Differential Equations I*, 2nd ed.,
//!   §II.4 (the error norm, the controller and the starting step).

use harness::subject::ode::{
    self, Evaluations, OdeSolver, SolveReport, SolveRequest, Stepping, SuiteOptions,
};
use harness::subject::{Error, Result};
use std::process::ExitCode;
use std::sync::Arc;

/// Which version of the solver to build.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Good,
    /// The second stage's time is `t + h/3`.
    WrongNode,
    /// Rejected attempts do not count against the budget.
    FreeRejections,
    /// `rtol <= 0` is not refused.
    NonPositiveRtol,
    /// Rejected attempts are neither reported nor counted against the budget.
    HiddenRejections,
}

/// Bogacki–Shampine 3(2), first same as last: with `c = (0, 1/2, 3/4, 1)`,
/// `k1 = f(t, y)`, `k2 = f(t + h/2, y + h/2 k1)`, `k3 = f(t + 3h/4, y + 3h/4 k2)`,
/// `y1 = y + h (2/9 k1 + 1/3 k2 + 4/9 k3)` (order 3), `k4 = f(t + h, y1)` (the next step's `k1`),
/// and the embedded order-2 solution `y1* = y + h (7/24 k1 + 1/4 k2 + 1/3 k3 + 1/8 k4)`, whose
/// difference from `y1` estimates the local error.
struct Bs3 {
    variant: Variant,
}

/// One attempted step from `(t, y)` with `k1 = f(t, y)`: `(y1, k4, y1 - y1*)`.
fn attempt(
    s: &Bs3,
    f: &dyn harness::ode::VectorField<f64>,
    t: f64,
    h: f64,
    y: &[f64],
    k1: &[f64],
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let n = y.len();
    let at = |w: &[f64], k: &[f64], c: f64| -> Vec<f64> {
        (0..n).map(|i| w[i] + h * c * k[i]).collect()
    };
    let eval = |t: f64, y: &[f64]| {
        let mut dy = vec![0.0; n];
        f.eval(t, y, &mut dy);
        dy
    };
    let c2 = if s.variant == Variant::WrongNode {
        1.0 / 3.0
    } else {
        0.5
    };
    let k2 = eval(t + c2 * h, &at(y, k1, 0.5));
    let k3 = eval(t + 0.75 * h, &at(y, &k2, 0.75));
    let y1: Vec<f64> = (0..n)
        .map(|i| y[i] + h * (2.0 / 9.0 * k1[i] + 1.0 / 3.0 * k2[i] + 4.0 / 9.0 * k3[i]))
        .collect();
    let k4 = eval(t + h, &y1);
    // y1 - y1* = h sum_i (b_i - b*_i) k_i
    let err: Vec<f64> = (0..n)
        .map(|i| {
            h * ((2.0 / 9.0 - 7.0 / 24.0) * k1[i]
                + (1.0 / 3.0 - 1.0 / 4.0) * k2[i]
                + (4.0 / 9.0 - 1.0 / 3.0) * k3[i]
                - 1.0 / 8.0 * k4[i])
        })
        .collect();
    (y1, k4, err)
}

/// `max_i |e_i| / (atol + rtol max(|y_i|, |y1_i|))`: at most 1 means the step is accepted.
fn error_norm(e: &[f64], y: &[f64], y1: &[f64], rtol: f64, atol: f64) -> f64 {
    e.iter()
        .zip(y.iter().zip(y1))
        .map(|(e, (a, b))| e.abs() / (atol + rtol * a.abs().max(b.abs())))
        .fold(0.0, |m, r| if r.is_nan() || r > m { r } else { m })
}

fn bad(name: &'static str, value: f64, expected: &str) -> Error {
    Error::InvalidHyper {
        name,
        value: value.to_string(),
        expected: expected.into(),
    }
}

impl OdeSolver for Bs3 {
    fn name(&self) -> String {
        format!("my_bs3 ({:?})", self.variant)
    }
    fn order(&self) -> Option<u32> {
        Some(3)
    }
    fn supports(&self, _: &Stepping) -> bool {
        true
    }
    /// `k1` at the start, then `k2`, `k3` and `k4` in every attempt (`k4` is the next `k1`).
    fn evaluations(&self, _: &Stepping) -> Option<Evaluations> {
        Some(Evaluations {
            per_solve: 1,
            per_attempted_step: 3,
            per_accepted_step: 0,
        })
    }
    fn solve(&self, r: &SolveRequest) -> Result<SolveReport> {
        let (t0, t1) = (r.t0, r.t1);
        if !t0.is_finite() || !t1.is_finite() {
            return Err(bad("t0/t1", if t0.is_finite() { t1 } else { t0 }, "finite"));
        }
        if let Some(v) = r.y0.iter().find(|v| !v.is_finite()) {
            return Err(bad("y0", *v, "finite entries"));
        }
        let dir = (t1 - t0).signum();
        let adaptive = match r.stepping {
            Stepping::Constant { dt } => {
                if !(dt.is_finite() && dt != 0.0 && dt.signum() == dir) && t1 != t0 {
                    return Err(bad("dt", dt, "finite, non-zero, signed like t1 - t0"));
                }
                None
            }
            Stepping::Adaptive { rtol, atol } => {
                let rtol_ok =
                    rtol.is_finite() && (rtol > 0.0 || self.variant == Variant::NonPositiveRtol);
                if !rtol_ok {
                    return Err(bad("rtol", rtol, "finite and > 0"));
                }
                if !(atol.is_finite() && atol >= 0.0) {
                    return Err(bad("atol", atol, "finite and >= 0"));
                }
                Some((rtol, atol))
            }
        };
        let mut y = r.y0.clone();
        if t1 == t0 {
            return Ok(SolveReport {
                y_final: y,
                accepted: 0,
                rejected: 0,
            });
        }
        let f = &*r.field;
        let mut k1 = vec![0.0; y.len()];
        f.eval(t0, &y, &mut k1);
        let mut h = match (r.stepping, adaptive) {
            (Stepping::Constant { dt }, _) => dt,
            (_, Some((rtol, atol))) => {
                // starting step: 1% of |y| / |f| in the tolerance's weights (Hairer II.4)
                let w = |v: &[f64]| {
                    v.iter()
                        .zip(&y)
                        .map(|(v, y)| v.abs() / (atol + rtol.abs() * y.abs()))
                        .fold(0.0f64, f64::max)
                };
                let (d0, d1) = (w(&y), w(&k1));
                let h0 = if d0 < 1e-5 || d1 < 1e-5 {
                    1e-6
                } else {
                    0.01 * d0 / d1
                };
                dir * h0.min((t1 - t0).abs())
            }
            _ => unreachable!("adaptive stepping has tolerances"),
        };
        let (mut t, mut accepted, mut rejected) = (t0, 0usize, 0usize);
        while (t1 - t) * dir > 0.0 {
            let spent = match self.variant {
                Variant::FreeRejections | Variant::HiddenRejections => accepted,
                _ => accepted + rejected,
            };
            if spent >= r.max_steps {
                return Err(Error::MaxStepsExceeded {
                    max_steps: r.max_steps,
                    t,
                    t_end: t1,
                });
            }
            // the last step lands on t1
            let last = (t + h - t1) * dir >= 0.0;
            let step = if last { t1 - t } else { h };
            let (y1, k4, e) = attempt(self, f, t, step, &y, &k1);
            let Some((rtol, atol)) = adaptive else {
                (t, y, k1) = (if last { t1 } else { t + step }, y1, k4);
                accepted += 1;
                continue;
            };
            let err = error_norm(&e, &y, &y1, rtol.abs(), atol);
            if err.is_nan() {
                return Err(Error::NonFinite(format!("the error estimate at t = {t}")));
            }
            // h_new = h * clamp(0.9 err^(-1/3), 0.2, 5): err^(-1/(q+1)) with q = 2 the lower order
            let factor = if err == 0.0 {
                5.0
            } else {
                (0.9 * err.powf(-1.0 / 3.0)).clamp(0.2, 5.0)
            };
            if err <= 1.0 {
                (t, y, k1) = (if last { t1 } else { t + step }, y1, k4);
                accepted += 1;
            } else {
                rejected += 1;
            }
            h = step * factor;
            if h.abs() <= f64::EPSILON * t.abs().max(1.0) {
                return Err(Error::NonFinite(format!("the step underflowed at t = {t}")));
            }
        }
        if let Some(v) = y.iter().find(|v| !v.is_finite()) {
            return Err(Error::NonFinite(format!("the final state holds {v}")));
        }
        Ok(SolveReport {
            y_final: y,
            accepted,
            rejected: if self.variant == Variant::HiddenRejections {
                0
            } else {
                rejected
            },
        })
    }
}

fn main() -> ExitCode {
    let arg = std::env::args().nth(1).unwrap_or_else(|| "good".into());
    let variant = match arg.as_str() {
        "good" => Variant::Good,
        "buggy-node" => Variant::WrongNode,
        "buggy-budget" => Variant::FreeRejections,
        "buggy-tol" => Variant::NonPositiveRtol,
        "buggy-hidden" => Variant::HiddenRejections,
        other => {
            eprintln!(
                "custom_solver: unknown variant `{other}` (good, buggy-node, buggy-budget, \
                 buggy-tol, buggy-hidden)"
            );
            return ExitCode::from(2);
        }
    };
    let report = ode::check(Arc::new(Bs3 { variant }), &SuiteOptions::default());
    print!("{}", report.summary());
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
