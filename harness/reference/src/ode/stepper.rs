//! The explicit Runge–Kutta step, written once: stage inputs, stage times, the new state and
//! the embedded error, for any [`Tableau`], in any arithmetic type. The stepping loop
//! ([`super::solve()`]), the gradient's forward recomputation and its hand-written reverse sweep
//! ([`super::grad`]) all step through it, so they are bit-identical by construction.
//!
//! One step from `(t_prev, y)` to `t_next`, `dt = t_next - t_prev`, with `s` stages:
//!
//! ```text
//! z_0 = y,   z_i = y + sum_{j<i} a_ij (dt k_j),   k_i = f(t_i, z_i)
//! t_0 = t_prev,   t_i = t_next if c_i == 1 else t_prev + c_i dt       (diffrax's end-of-step rule)
//! y' = y + sum_i b_i (dt k_i)        (FSAL tableaus: y' = z_{s-1}, the last stage's input)
//! err = sum_i e_i (dt k_i)           (the embedded error, for adaptive control)
//! ```
//!
//! Every sum accumulates from `0` in index order, zero coefficients included (so an infinite
//! stage derivative times a zero weight gives NaN, as in diffrax's dense sums).
//!
//! # References
//! - E. Hairer, S. P. Nørsett, G. Wanner, *Solving Ordinary Differential Equations I*, 2nd ed.,
//!   §II.1 (explicit Runge–Kutta methods), §II.4 (embedded pairs).
//! - P. Kidger, diffrax 0.7.2 `_solver/runge_kutta.py` (the `c_i == 1` rule; FSAL as "SSAL").
//!
//! ```
//! use harness_reference::ode::{stepper::{RkStep, StepSpan}, Solver};
//! // One Heun step of y' = -y from y = 1 over [0, 0.1]:
//! // k_0 = -1, z_1 = 1 - 0.1, k_1 = -0.9, y' = 1 + 0.5 (0.1 (-1)) + 0.5 (0.1 (-0.9)) = 0.905
//! let step = RkStep::<f64>::new(&Solver::Heun.tableau());
//! let (mut ks, mut z, mut y1) = (vec![0.0; 2], vec![0.0; 1], vec![0.0; 1]);
//! let mut f = |_i: usize, _t: f64, z: &[f64], k: &mut [f64]| k[0] = -z[0];
//! let span = StepSpan { tprev: 0.0, tnext: 0.1, y: &[1.0] };
//! step.stages(span, 0..step.stages_len(), &mut ks, &mut z, &mut f);
//! step.combine(0.1, &[1.0], &ks, &z, &mut y1);
//! assert!((y1[0] - 0.905).abs() < 1e-15);
//! ```

use super::tableau::Tableau;
use crate::backend::Real;
use std::ops::Range;

/// One step's span: from the state `y` at `tprev` to `tnext` (`dt = tnext - tprev`, negative
/// for a solve backwards in time).
#[derive(Debug, Clone, Copy)]
pub struct StepSpan<'a, A> {
    /// The time the step starts at.
    pub tprev: A,
    /// The time the step ends at.
    pub tnext: A,
    /// The state at `tprev`.
    pub y: &'a [A],
}

/// A tableau's coefficients in the arithmetic type `A`, and the step built from them.
#[derive(Debug, Clone)]
pub struct RkStep<A> {
    c: Vec<A>,
    /// `a` row by row, flattened: row `i` holds `i` entries and starts at `i (i - 1) / 2`.
    a: Vec<A>,
    b: Vec<A>,
    e: Option<Vec<A>>,
    fsal: bool,
}

impl<A: Real> RkStep<A> {
    /// The coefficients of `tab`, converted to `A` once.
    pub fn new(tab: &Tableau) -> Self {
        let st = tab.stages();
        RkStep {
            c: tab.c().iter().map(|&x| A::of_f64(x)).collect(),
            a: (0..st)
                .flat_map(|i| tab.a(i).iter().map(|&x| A::of_f64(x)))
                .collect(),
            b: tab.b().iter().map(|&x| A::of_f64(x)).collect(),
            e: tab
                .b_err()
                .map(|v| v.iter().map(|&x| A::of_f64(x)).collect()),
            fsal: tab.fsal(),
        }
    }

    /// Number of stages `s`.
    pub fn stages_len(&self) -> usize {
        self.c.len()
    }

    /// First same as last: the new state is the last stage's input.
    pub fn fsal(&self) -> bool {
        self.fsal
    }

    /// Whether the tableau has an embedded error estimate.
    pub fn has_error(&self) -> bool {
        self.e.is_some()
    }

    /// Row `i` of `a`.
    fn row(&self, i: usize) -> &[A] {
        let start = i * i.saturating_sub(1) / 2;
        &self.a[start..start + i]
    }

    /// The time of stage `i`: `t_prev`, then `t_next` exactly when `c_i == 1` (diffrax: "no
    /// floating point error"), else `t_prev + c_i dt`.
    pub fn stage_time(&self, i: usize, tprev: A, tnext: A) -> A {
        if i == 0 {
            tprev
        } else if self.c[i] == A::one() {
            tnext
        } else {
            tprev + self.c[i] * (tnext - tprev)
        }
    }

    /// `z <- z_i = y + sum_{j<i} a_ij (dt k_j)` from the stage derivatives `ks` (row-major, one
    /// state per stage; only stages `< i` are read).
    pub fn stage_input(&self, i: usize, dt: A, y: &[A], ks: &[A], z: &mut [A]) {
        let n = y.len();
        let row = self.row(i);
        for m in 0..n {
            let mut acc = A::zero();
            for (j, &aij) in row.iter().enumerate() {
                acc += aij * (dt * ks[j * n + m]);
            }
            z[m] = y[m] + acc;
        }
    }

    /// Evaluate the stages `which` (a range of stage indices) of the step `span`: for each, the
    /// input `z_i` (left in `z`) and `eval(i, t_i, z_i, k_i)` writing the derivative into
    /// `ks[i]`. Stage 0's input is `y` itself; a range from 1 reuses a `k_0` already in `ks`
    /// (FSAL, or the first evaluation of the initial-step selection).
    pub fn stages(
        &self,
        span: StepSpan<'_, A>,
        which: Range<usize>,
        ks: &mut [A],
        z: &mut [A],
        eval: &mut impl FnMut(usize, A, &[A], &mut [A]),
    ) {
        let StepSpan { tprev, tnext, y } = span;
        let n = y.len();
        let dt = tnext - tprev;
        for i in which {
            let t = self.stage_time(i, tprev, tnext);
            let (done, rest) = ks.split_at_mut(i * n);
            if i == 0 {
                eval(0, t, y, &mut rest[..n]);
            } else {
                self.stage_input(i, dt, y, done, z);
                eval(i, t, z, &mut rest[..n]);
            }
        }
    }

    /// `y1 <- y + sum_i b_i (dt k_i)`, or for FSAL tableaus `y1 <- z` (the last stage's input,
    /// left in `z` by [`RkStep::stages`] when it evaluated every stage).
    pub fn combine(&self, dt: A, y: &[A], ks: &[A], z: &[A], y1: &mut [A]) {
        if self.fsal {
            y1.copy_from_slice(z);
            return;
        }
        let n = y.len();
        for m in 0..n {
            let mut acc = A::zero();
            for (i, &bi) in self.b.iter().enumerate() {
                acc += bi * (dt * ks[i * n + m]);
            }
            y1[m] = y[m] + acc;
        }
    }

    /// `err <- sum_i e_i (dt k_i)` with NaN replaced by `+inf` (a non-finite error rejects the
    /// step); `false` (nothing written) for a tableau without an error estimate.
    pub fn error(&self, dt: A, ks: &[A], err: &mut [A]) -> bool {
        let Some(e) = &self.e else {
            return false;
        };
        let n = err.len();
        for (m, out) in err.iter_mut().enumerate() {
            let mut acc = A::zero();
            for (i, &ei) in e.iter().enumerate() {
                acc += ei * (dt * ks[i * n + m]);
            }
            *out = if num_traits::Float::is_nan(acc) {
                A::infinity()
            } else {
                acc
            };
        }
        true
    }

    /// The weights by which `y'` depends on the stage derivatives: `b`, or for FSAL tableaus
    /// the last row of `a` (`y' = z_{s-1}`). The reverse sweep seeds `kbar_i = dt w_i lambda`.
    pub fn output_weights(&self) -> &[A] {
        if self.fsal {
            self.row(self.stages_len() - 1)
        } else {
            &self.b
        }
    }

    /// The stages a step evaluates for its new state: all of them, but an FSAL tableau's last
    /// stage only feeds the next step.
    pub fn evaluated_for_state(&self) -> usize {
        if self.fsal {
            self.stages_len() - 1
        } else {
            self.stages_len()
        }
    }

    /// Row `i` of `a` (the reverse sweep's `kbar_j += dt a_ij zbar_i`).
    pub fn a_row(&self, i: usize) -> &[A] {
        self.row(i)
    }
}
