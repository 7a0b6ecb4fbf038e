//! `ode_solvers` 0.6.2 behind [`OdeSolver`]: `Dopri5` and `Dop853` (embedded error estimates,
//! step-size control with the crate's defaults) and `Rk4` (constant steps).
//!
//! The adapter maps a [`SolveRequest`] onto the crate's constructors and nothing more:
//! - adaptive: `Dopri5::from_param` / `Dop853::from_param` with the request's `rtol`, `atol`
//!   and `max_steps` (`n_max`), sparse output, the crate's default safety factor, step-size
//!   bounds and stiffness test, and `h = 0` (the crate chooses the initial step) — the defaults
//!   `Dopri5::new` uses, with the step limit and output kind set;
//! - constant, `Rk4`: `Rk4::new` with the request's `dt` (the crate's step count is
//!   `ceil((x_end - x) / step_size)`);
//! - constant, `Dopri5` and `Dop853`: the crate has no fixed-step mode for them, so the adapter
//!   pins the step through the same constructor: the first step `h = dt`, the largest step
//!   `h_max = |dt|`, and tolerances so loose ([`PINNED_TOLERANCE`]) that every step is accepted
//!   and grows to `h_max` at once (the controller caps an accepted step's successor at `h_max`;
//!   the crate stretches the last step by up to 1% to land on `x_end`). The convergence-order
//!   law can then measure the method's order, which adaptive stepping alone cannot show.
//!
//! The state is a `nalgebra::DVector<f64>`; the field is evaluated through slices. Errors of the
//! crate (`IntegrationError`) become `Err`; a panic or a hang inside the crate is left to the
//! suite's time-limited thread to report.
//!
//! # References
//! - E. Hairer, S. P. Nørsett, G. Wanner, *Solving Ordinary Differential Equations I* (DOPRI5,
//!   DOP853: the codes `ode_solvers` ports).
//! - `ode_solvers` 0.6.2 documentation, `Dopri5::from_param`, `Rk4::new`.
//!
//! ```
//! use harness::subject::ode::{OdeSolver, SharedField, SolveRequest, Stepping};
//! use peers::ode_solvers_adapter::{Method, OdeSolvers};
//! use std::sync::Arc;
//! assert_eq!(OdeSolvers(Method::Dopri5).order(), Some(5));
//! // pinned steps: y' = -y over [0, 1] in exactly 10 accepted steps of 0.1, none rejected
//! let decay: SharedField = Arc::new(|_t: f64, y: &[f64], dy: &mut [f64]| dy[0] = -y[0]);
//! let mut r = SolveRequest {
//!     field: decay,
//!     t0: 0.0,
//!     t1: 1.0,
//!     y0: vec![1.0],
//!     stepping: Stepping::Constant { dt: 0.1 },
//!     max_steps: 100,
//! };
//! for method in [Method::Dopri5, Method::Dop853] {
//!     let s = OdeSolvers(method).solve(&r).unwrap();
//!     assert_eq!((s.accepted, s.rejected), (10, 0));
//!     assert!((s.y_final[0] - (-1f64).exp()).abs() < 1e-7);
//! }
//! // a pinned step must point toward t1
//! r.stepping = Stepping::Constant { dt: -0.1 };
//! assert!(OdeSolvers(Method::Dop853).solve(&r).is_err());
//! ```

use harness::reference::{Error, Result};
use harness::subject::ode::{
    Evaluations, OdeSolver, SharedField, SolveReport, SolveRequest, Stepping,
};
use ode_solvers::{DVector, Dop853, Dopri5, OutputType, Rk4, System};

/// The crate version the adapter was written against (pinned in `Cargo.toml`).
pub const VERSION: &str = "0.6.2";

/// `rtol` and `atol` of a pinned-step solve of `Dopri5` or `Dop853` (see the module docs): the
/// scaled error estimate is then below `1e-200` for any finite state the laws use, so no step
/// is rejected.
pub const PINNED_TOLERANCE: f64 = 1e200;

/// The settings of one `from_param` call that differ between stepping modes.
struct Steps {
    rtol: f64,
    atol: f64,
    /// Largest step (`h_max`).
    h_max: f64,
    /// First step (`h`; `0` lets the crate choose it).
    h: f64,
}

impl Steps {
    /// The settings for `r`. Adaptive requests go to the crate as they are; a pinned step is the
    /// adapter's own mode, so the adapter refuses a `dt` that is not finite, is zero or points
    /// away from `t1` (the crate would read `h = 0` as "choose the first step" and take a step
    /// of the wrong sign as given).
    fn of(r: &SolveRequest) -> Result<Steps> {
        match r.stepping {
            Stepping::Adaptive { rtol, atol } => Ok(Steps {
                rtol,
                atol,
                h_max: r.t1 - r.t0,
                h: 0.0,
            }),
            Stepping::Constant { dt } => {
                if !(dt.is_finite() && dt != 0.0 && (r.t1 - r.t0) * dt >= 0.0) {
                    return Err(Error::External(format!(
                        "ode_solvers adapter: a pinned step needs a finite, non-zero dt signed \
                         like t1 - t0; got dt = {dt} from {} to {}",
                        r.t0, r.t1
                    )));
                }
                Ok(Steps {
                    rtol: PINNED_TOLERANCE,
                    atol: PINNED_TOLERANCE,
                    h_max: dt,
                    h: dt,
                })
            }
        }
    }
}

/// A method of the crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Dormand–Prince 5(4), adaptive (`ode_solvers::Dopri5`).
    Dopri5,
    /// Dormand–Prince 8(5,3), adaptive (`ode_solvers::Dop853`).
    Dop853,
    /// The classical fourth-order Runge–Kutta method with constant steps (`ode_solvers::Rk4`).
    Rk4,
}

impl Method {
    /// Every method the adapter exposes.
    pub const ALL: [Method; 3] = [Method::Dopri5, Method::Dop853, Method::Rk4];
}

/// The field of a request as an `ode_solvers` system.
struct Field(SharedField);

impl System<f64, DVector<f64>> for Field {
    fn system(&self, x: f64, y: &DVector<f64>, dy: &mut DVector<f64>) {
        self.0.eval(x, y.as_slice(), dy.as_mut_slice());
    }
}

/// One method of `ode_solvers` as a subject of the ODE suite.
#[derive(Debug, Clone, Copy)]
pub struct OdeSolvers(pub Method);

fn peer_error(e: impl std::fmt::Display) -> Error {
    Error::External(format!("ode_solvers: {e}"))
}

impl OdeSolver for OdeSolvers {
    fn name(&self) -> String {
        format!("ode_solvers {:?}", self.0)
    }
    fn order(&self) -> Option<u32> {
        Some(match self.0 {
            Method::Dopri5 => 5,
            Method::Dop853 => 8,
            Method::Rk4 => 4,
        })
    }
    fn supports(&self, stepping: &Stepping) -> bool {
        // every method takes constant steps (pinned, for the two adaptive ones); Rk4 has no
        // error estimate
        !matches!((self.0, stepping), (Method::Rk4, Stepping::Adaptive { .. }))
    }
    /// The counts of the crate's own `Stats::num_eval` bookkeeping (`src/dopri5.rs`,
    /// `src/dop853.rs`, `src/rk4.rs`): the start's derivative once, and two more for the starting
    /// step when the crate chooses it (adaptive; a pinned step is given); `Dopri5` 6 per attempt
    /// (FSAL), `Dop853` 11 per attempt and one per accepted step (the step's end, sparse output),
    /// `Rk4` 4 per step.
    fn evaluations(&self, stepping: &Stepping) -> Option<Evaluations> {
        let start = match stepping {
            Stepping::Adaptive { .. } => 3,
            Stepping::Constant { .. } => 1,
        };
        Some(match self.0 {
            Method::Dopri5 => Evaluations {
                per_solve: start,
                per_attempted_step: 6,
                per_accepted_step: 0,
            },
            Method::Dop853 => Evaluations {
                per_solve: start,
                per_attempted_step: 11,
                per_accepted_step: 1,
            },
            Method::Rk4 => Evaluations {
                per_solve: 0,
                per_attempted_step: 4,
                per_accepted_step: 0,
            },
        })
    }
    fn solve(&self, r: &SolveRequest) -> Result<SolveReport> {
        let f = Field(r.field.clone());
        let y0 = DVector::from_column_slice(&r.y0);
        let n_max = u32::try_from(r.max_steps).unwrap_or(u32::MAX);
        let (stats, y_out) = match (self.0, r.stepping) {
            (Method::Rk4, Stepping::Constant { dt }) => {
                let mut s = Rk4::new(f, r.t0, y0, r.t1, dt);
                let stats = s.integrate().map_err(peer_error)?;
                (stats, s.y_out().last().cloned())
            }
            (Method::Dopri5, _) => {
                let k = Steps::of(r)?;
                let mut s = Dopri5::from_param(
                    f,
                    r.t0,
                    r.t1,
                    0.0,
                    y0,
                    k.rtol,
                    k.atol,
                    0.9,
                    0.04,
                    0.2,
                    10.0,
                    k.h_max,
                    k.h,
                    n_max,
                    1000,
                    OutputType::Sparse,
                );
                let stats = s.integrate().map_err(peer_error)?;
                (stats, s.y_out().last().cloned())
            }
            (Method::Dop853, _) => {
                let k = Steps::of(r)?;
                let mut s = Dop853::from_param(
                    f,
                    r.t0,
                    r.t1,
                    0.0,
                    y0,
                    k.rtol,
                    k.atol,
                    0.9,
                    0.0,
                    0.333,
                    6.0,
                    k.h_max,
                    k.h,
                    n_max,
                    1000,
                    OutputType::Sparse,
                );
                let stats = s.integrate().map_err(peer_error)?;
                (stats, s.y_out().last().cloned())
            }
            (Method::Rk4, s) => {
                return Err(Error::External(format!(
                    "ode_solvers Rk4 does not take {s:?}"
                )))
            }
        };
        let y = y_out.ok_or_else(|| peer_error("no output point"))?;
        Ok(SolveReport {
            y_final: y.as_slice().to_vec(),
            accepted: stats.accepted_steps as usize,
            rejected: stats.rejected_steps as usize,
        })
    }
}
