//! # ODE solvers: diffrax 0.7.2's explicit Runge–Kutta methods, reproduced
//!
//! Solves `dy/dt = f(t, y)` on flat states in f32 or f64 with Euler, Heun, Midpoint, Ralston,
//! Bosh3, Tsit5 or Dopri5, under a constant step or diffrax's PID controller, stepping exactly as
//! `diffrax.diffeqsolve` does (step placement, end-of-interval clipping, FSAL, backward solves,
//! `max_steps`), so that golden cases recorded from diffrax replay to their stated tolerance.
//!
//! One concern per file:
//! - `tableau.rs` — methods as data ([`Tableau`], [`Solver`]);
//! - `problem.rs` — the [`VectorField`] interface;
//! - `fixtures.rs` — test problems, with closed forms where they exist;
//! - `controller.rs` — [`Constant`] and [`Pid`] step-size control, initial step;
//! - `stepper.rs` — the Runge–Kutta step (fast form); `dfdx_step.rs` — the same step and the
//!   error norm as dfdx tensor operations (the dfdx face, [`crate::Face::Dfdx`]);
//! - `solve.rs` — the stepping loop ([`solve`]);
//! - `grad.rs` — gradients through a solve, full tape or checkpointed ([`grad::gradient`]);
//! - `checkpoint.rs` — checkpoint schedules ([`checkpoint::Schedule`]; the binomial (revolve)
//!   one is the gradient's default);
//! - `numerics.rs` — `nextafter`, NaN-propagating min/max, RMS norm.
//!
//! diffrax behaviours reproduced on purpose (see the files for details): the PID initial step
//! is exactly 0.01 when `dt0` is not given (diffrax's Hairer rule is unreachable in 0.7.2; it is
//! offered as [`InitialStep::Hairer`]); constant steps are placed at fractions of the interval
//! after `n = ceil((t1-t0)/nextafter(dt0))`; a NaN error estimate counts as infinite.
//!
//! ```
//! use harness_reference::ode::{fixtures::LotkaVolterra, solve, Controller, Integration, Solver};
//! let lv = LotkaVolterra::new(1.5, 1.0, 3.0, 1.0)?;
//! let (tsit5, pid) = (Solver::Tsit5.tableau(), Controller::pid(1e-6, 1e-8)?);
//! let sol = solve(&lv, &Integration::new(&tsit5, &pid, 0.0, 5.0), &[1.0f64, 1.0])?;
//! // The golden case ode-lv-tsit5-pid records 43 accepted and 8 rejected steps.
//! assert_eq!((sol.stats.num_accepted_steps, sol.stats.num_rejected_steps), (43, 8));
//! # Ok::<(), harness_reference::Error>(())
//! ```
//!
//! # References
//! - P. Kidger, *diffrax* 0.7.2 (<https://github.com/patrick-kidger/diffrax>).
//! - E. Hairer, S. P. Nørsett, G. Wanner, *Solving Ordinary Differential Equations I: Nonstiff
//!   Problems*, 2nd ed., Springer 1993, §II.4.
//! - Ch. Tsitouras, "Runge–Kutta pairs of order 5(4) satisfying only the first column
//!   simplifying assumption", *Comput. Math. Appl.* 62 (2011).
//! - J. R. Dormand, P. J. Prince, "A family of embedded Runge–Kutta formulae", *J. Comput. Appl.
//!   Math.* 6 (1980).

pub mod checkpoint;
mod controller;
pub mod dfdx_step;
pub mod fixtures;

pub mod grad;
pub(crate) mod numerics;
mod problem;
mod solve;
pub mod stepper;
mod tableau;

pub use controller::{Constant, Controller, InitialStep, Pid};
pub use numerics::{next_down_ftz, next_up};
pub use problem::{Reversed, VectorField};
pub use solve::{solve, solve_observed, Integration, Solution, SolveOptions, Stats, StepEvent};
pub use tableau::{Solver, Tableau};
