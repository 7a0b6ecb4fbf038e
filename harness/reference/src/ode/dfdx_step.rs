//! The dfdx face of the explicit Runge–Kutta step and of the controller's error norm: the
//! formulas of [`super::stepper`] written as dfdx tensor operations over the whole state, the
//! form a reader checks first. The solve runs it with [`crate::Face::Dfdx`]; the law
//! `ode_step_faces_agree` proves the fast [`super::stepper::RkStep`] equal to it bit for bit.
//!
//! One step from `(t_prev, y)` to `t_next`, `dt = t_next - t_prev`, with `s` stages:
//!
//! ```text
//! z_0 = y,   z_i = y + sum_{j<i} a_ij (dt k_j),   k_i = f(t_i, z_i)
//! t_0 = t_prev,   t_i = t_next if c_i == 1 else t_prev + c_i dt
//! y' = y + sum_i b_i (dt k_i)        (FSAL: y' = z_{s-1})
//! err = sum_i e_i (dt k_i),  NaN -> +inf
//! scaled_error = rms( err / (atol + rtol max(|y|, |y'|)) )   (y' -> y where y' has a NaN)
//! ```
//!
//! Each sum is a tensor accumulator that starts at zero and adds the terms in stage order, zero
//! weights included: the same sequence of roundings as the fast form, so the two agree bit for
//! bit. The field itself is the caller's function of `(t, z)`; the face hands it each stage
//! input and takes its derivative back.
//!
//! # References
//! - E. Hairer, S. P. Nørsett, G. Wanner, *Solving Ordinary Differential Equations I*, 2nd ed.,
//!   §II.1, §II.4; P. Kidger, diffrax 0.7.2 `_solver/runge_kutta.py`, `_step_size_controller/
//!   adaptive.py` (`_scaled_error`); `docs/ALGORITHMS.md` §4.
//!
//! ```
//! use harness_reference::ode::{dfdx_step::DfdxRkStep, Solver};
//! // One Heun step of y' = -y from y = 1 over [0, 0.1] (closed form of the step: 0.905).
//! let step = DfdxRkStep::<f64>::new(&Solver::Heun.tableau());
//! let out = step.step(0.0, 0.1, &[1.0], None, &mut |_t, z: &[f64], k: &mut [f64]| k[0] = -z[0]);
//! assert!((out.y1[0] - 0.905).abs() < 1e-15);
//! assert!(out.err.is_some());
//! ```

use super::tableau::Tableau;
use crate::backend::{device, Real, Ten};
use dfdx::prelude::Cpu;

/// A tableau's coefficients in `A`, and the step written as dfdx tensor operations.
#[derive(Debug, Clone)]
pub struct DfdxRkStep<A> {
    c: Vec<A>,
    /// Row `i` holds `a_ij` for `j < i`.
    a: Vec<Vec<A>>,
    b: Vec<A>,
    e: Option<Vec<A>>,
    fsal: bool,
}

/// What one step computes: the new state, the embedded error (`None` without an estimate) and
/// every stage derivative `k_i` (unscaled by `dt`).
#[derive(Debug, Clone, PartialEq)]
pub struct DfdxStepOut<A> {
    /// The state after the step, `y0 + dt * sum_i b_i k_i`.
    pub y1: Vec<A>,
    /// The embedded error `dt * sum_i e_i k_i` (`e` the tableau's error weights), or `None` for a
    /// method without them.
    pub err: Option<Vec<A>>,
    /// Stage derivatives `k_i = f(t0 + c_i dt, y0 + dt * sum_j a_ij k_j)`, one per stage, in order.
    pub ks: Vec<Vec<A>>,
}

impl<A: Real> DfdxRkStep<A> {
    /// The coefficients of `tab`, converted to `A` once.
    pub fn new(tab: &Tableau) -> Self {
        let conv = |v: &[f64]| v.iter().map(|&x| A::of_f64(x)).collect::<Vec<A>>();
        DfdxRkStep {
            c: conv(tab.c()),
            a: (0..tab.stages()).map(|i| conv(tab.a(i))).collect(),
            b: conv(tab.b()),
            e: tab.b_err().map(conv),
            fsal: tab.fsal(),
        }
    }

    /// Stage times `t_i`: `t_prev`, then `t_next` exactly where `c_i == 1`, else
    /// `t_prev + c_i dt`.
    pub fn stage_times(&self, tprev: A, tnext: A) -> Vec<A> {
        let dt = tnext - tprev;
        (0..self.c.len())
            .map(|i| match i {
                0 => tprev,
                _ if self.c[i] == A::one() => tnext,
                _ => tprev + self.c[i] * dt,
            })
            .collect()
    }

    /// One step from `(tprev, y)` to `tnext`. `k0`: the first stage's derivative when it is
    /// already known (FSAL, or the initial-step selection), which then is not re-evaluated.
    pub fn step(
        &self,
        tprev: A,
        tnext: A,
        y: &[A],
        k0: Option<&[A]>,
        field: &mut impl FnMut(A, &[A], &mut [A]),
    ) -> DfdxStepOut<A> {
        self.step_at(&self.stage_times(tprev, tnext), tnext - tprev, y, k0, field)
    }

    /// The step with the stage times given (`times[i]` is `t_i`) and step size `dt`.
    pub fn step_at(
        &self,
        times: &[A],
        dt: A,
        y: &[A],
        k0: Option<&[A]>,
        field: &mut impl FnMut(A, &[A], &mut [A]),
    ) -> DfdxStepOut<A> {
        let dev = device();
        let n = y.len();
        let y_t = Ten::from_vec(&dev, y.to_vec());
        let mut eval = |t: A, z: &[A]| {
            let mut k = vec![A::zero(); n];
            field(t, z, &mut k);
            k
        };
        // dt k_i, kept as tensors for the weighted sums
        let mut dks: Vec<Ten<A>> = Vec::with_capacity(self.c.len());
        let mut ks: Vec<Vec<A>> = Vec::with_capacity(self.c.len());
        let mut last_z = y_t.clone();
        for (i, row) in self.a.iter().enumerate() {
            let k = if i == 0 {
                k0.map_or_else(|| eval(times[0], y), <[A]>::to_vec)
            } else {
                // z_i = y + sum_{j<i} a_ij (dt k_j)
                let z = y_t.clone() + weighted_sum(&dev, n, row, &dks);
                let zv = z.to_vec();
                last_z = z;
                eval(times[i], &zv)
            };
            dks.push(Ten::from_vec(&dev, k.clone()) * dt);
            ks.push(k);
        }
        let y1 = if self.fsal {
            last_z.to_vec()
        } else {
            // y' = y + sum_i b_i (dt k_i)
            (y_t + weighted_sum(&dev, n, &self.b, &dks)).to_vec()
        };
        let err = self.e.as_ref().map(|e| {
            // err = sum_i e_i (dt k_i), a NaN counting as an infinite error
            let err = weighted_sum(&dev, n, e, &dks);
            let nan: Vec<bool> = err
                .to_vec()
                .iter()
                .map(|v| num_traits::Float::is_nan(*v))
                .collect();
            let inf = Ten::from_vec(&dev, vec![A::infinity(); n]);
            Ten::select(&nan, inf, err).to_vec()
        });
        DfdxStepOut { y1, err, ks }
    }
}

/// `sum_j w_j x_j` accumulated from a zero tensor in index order: `acc <- acc + x_j w_j`.
fn weighted_sum<A: Real>(dev: &Cpu, n: usize, w: &[A], xs: &[Ten<A>]) -> Ten<A> {
    w.iter()
        .zip(xs)
        .fold(Ten::zeros(dev, n), |acc, (&wj, xj)| acc + xj.clone() * wj)
}

/// diffrax's scaled error of a candidate step in dfdx operations:
/// `rms(err / (atol + rtol max(|y0|, |y1|)))`, with `y1` replaced by `y0` when it holds a NaN;
/// the RMS of one element is its absolute value.
pub fn scaled_error<A: Real>(y0: &[A], y1: &[A], y_err: &[A], rtol: A, atol: A) -> A {
    let dev = device();
    let n = y0.len();
    let y1 = if y1.iter().any(|v| num_traits::Float::is_nan(*v)) {
        y0
    } else {
        y1
    };
    let scale = Ten::from_vec(&dev, y0.to_vec())
        .abs()
        .maximum(Ten::from_vec(&dev, y1.to_vec()).abs())
        * rtol
        + atol;
    let ratio = Ten::from_vec(&dev, y_err.to_vec()) / scale;
    match n {
        0 => A::zero(),
        1 => ratio.abs().to_vec()[0],
        _ => (ratio.clone() * ratio).sum().sqrt() / A::of_f64((n as f64).sqrt()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ode::stepper::{RkStep, StepSpan};
    use crate::ode::Solver;

    fn lotka(_t: f64, z: &[f64], k: &mut [f64]) {
        k[0] = 1.5 * z[0] - z[0] * z[1];
        k[1] = -3.0 * z[1] + z[0] * z[1];
    }

    #[test]
    fn every_tableau_steps_bit_for_bit_like_the_fast_stepper() {
        for solver in Solver::ALL {
            let tab = solver.tableau();
            let (fast, face) = (RkStep::<f64>::new(&tab), DfdxRkStep::<f64>::new(&tab));
            let (y, t0, t1) = ([1.0, 0.7], 0.3, 0.3 + 0.137);
            let st = fast.stages_len();
            let (mut ks, mut z, mut y1, mut err) =
                (vec![0.0; 2 * st], [0.0; 2], [0.0; 2], [0.0; 2]);
            let mut f = |_i: usize, t: f64, z: &[f64], k: &mut [f64]| lotka(t, z, k);
            let span = StepSpan {
                tprev: t0,
                tnext: t1,
                y: &y,
            };
            fast.stages(span, 0..st, &mut ks, &mut z, &mut f);
            fast.combine(t1 - t0, &y, &ks, &z, &mut y1);
            let has_err = fast.error(t1 - t0, &ks, &mut err);
            let out = face.step(t0, t1, &y, None, &mut lotka);
            assert_eq!(out.y1, y1, "{solver:?}");
            assert_eq!(out.err.is_some(), has_err, "{solver:?}");
            if let Some(e) = out.err {
                assert_eq!(e, err, "{solver:?}");
            }
            assert_eq!(out.ks.concat(), ks, "{solver:?}");
        }
    }

    #[test]
    fn scaled_error_of_hand_computed_cases() {
        // scale = 1 + 0.5 max(|2|, |y1|): NaN y1 -> y0 -> 2, |1/2|; y1 = 4 -> 3, 1/3
        assert_eq!(scaled_error(&[2.0], &[f64::NAN], &[1.0], 0.5, 1.0), 0.5);
        assert_eq!(scaled_error(&[2.0], &[4.0], &[1.0], 0.5, 1.0), 1.0 / 3.0);
        // two elements, unit scales: sqrt(9 + 16) / sqrt(2)
        let two = scaled_error(&[0.0, 0.0], &[0.0, 0.0], &[3.0, 4.0], 0.0, 1.0);
        assert_eq!(two, 5.0 / 2f64.sqrt());
    }
}
