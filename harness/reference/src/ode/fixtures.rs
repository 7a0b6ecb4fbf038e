//! Test problems: the golden-v1 ODE problems (`linear`, `lotka_volterra`, `van_der_pol`,
//! `forced_decay`) and problems with closed-form solutions for convergence checks.
//!
//! Every fixture is a [`VectorField`] in any [`Real`]; parameters are stored in f64 and cast to
//! the arithmetic type on use (exactly as diffrax casts weakly-typed Python floats). Problems with
//! a known solution expose it as `exact(t)` so one generic test can run every method on them.
//!
//! # References
//! - golden-v1 (`docs/GOLDEN-FORMAT.md`), kind `ode` (the definitions of the four problems).
//! - E. Hairer, S. P. Nørsett, G. Wanner, *Solving Ordinary Differential Equations I*, §I.16
//!   (Lotka–Volterra), §I.16/§II.4 (Van der Pol).

use super::problem::VectorField;
use crate::backend::Real;
use crate::error::ensure;
use crate::{Error, Result};
use num_traits::Float as NF;

/// `dy/dt = A y` with a dense row-major `n x n` matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Linear {
    n: usize,
    a: Vec<f64>,
}

impl Linear {
    /// From an `n x n` row-major matrix (`a.len() == n*n`, `n >= 1`, finite entries).
    pub fn new(n: usize, a: Vec<f64>) -> Result<Linear> {
        if n == 0 || n.checked_mul(n) != Some(a.len()) {
            return Err(Error::ShapeMismatch {
                leaf: "linear.A".into(),
                expected: vec![n, n],
                got: vec![a.len()],
            });
        }
        ensure(
            a.iter().all(|x| x.is_finite()),
            "linear.A",
            format!("{a:?}"),
            "must be finite",
        )?;
        Ok(Linear { n, a })
    }

    /// The damped rotation `A = [[-alpha, omega], [-omega, -alpha]]`, whose solution from
    /// `y(0) = y0` is `e^{-alpha t} R(t) y0` ([`Linear::damped_rotation_exact`]).
    pub fn damped_rotation(alpha: f64, omega: f64) -> Result<Linear> {
        Linear::new(2, vec![-alpha, omega, -omega, -alpha])
    }

    /// Closed form of [`Linear::damped_rotation`]: `y(t) = e^{-alpha t} [[cos wt, sin wt],
    /// [-sin wt, cos wt]] y0` (check: `d/dt` gives `-alpha y + omega [y1, -y0]` = `A y`).
    pub fn damped_rotation_exact(alpha: f64, omega: f64, y0: [f64; 2], t: f64) -> [f64; 2] {
        let (s, c) = (omega * t).sin_cos();
        let e = (-alpha * t).exp();
        [e * (c * y0[0] + s * y0[1]), e * (-s * y0[0] + c * y0[1])]
    }

    /// The matrix size `n`.
    pub fn n(&self) -> usize {
        self.n
    }

    /// The matrix, row-major.
    pub fn matrix(&self) -> &[f64] {
        &self.a
    }
}

impl<A: Real> VectorField<A> for Linear {
    fn eval(&self, _t: A, y: &[A], dy: &mut [A]) {
        let n = self.n;
        for (i, out) in dy.iter_mut().enumerate().take(n) {
            let mut acc = A::zero();
            for (j, &yj) in y.iter().enumerate().take(n) {
                acc += A::of_f64(self.a[i * n + j]) * yj;
            }
            *out = acc;
        }
    }
    fn dim(&self) -> Option<usize> {
        Some(self.n)
    }
}

/// Lotka–Volterra predator–prey: `[alpha*x - beta*x*y, delta*x*y - gamma*y]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LotkaVolterra {
    /// Prey growth rate `alpha` (finite).
    pub alpha: f64,
    /// Predation rate `beta` (finite).
    pub beta: f64,
    /// Predator death rate `gamma` (finite).
    pub gamma: f64,
    /// Predator growth per prey eaten `delta` (finite).
    pub delta: f64,
}

impl LotkaVolterra {
    /// With finite parameters.
    pub fn new(alpha: f64, beta: f64, gamma: f64, delta: f64) -> Result<Self> {
        for (name, v) in [
            ("alpha", alpha),
            ("beta", beta),
            ("gamma", gamma),
            ("delta", delta),
        ] {
            ensure(v.is_finite(), name, v, "must be finite")?;
        }
        Ok(LotkaVolterra {
            alpha,
            beta,
            gamma,
            delta,
        })
    }

    /// The conserved quantity `V = delta*x - gamma*ln x + beta*y - alpha*ln y` (for `x, y > 0`).
    pub fn invariant(&self, y: [f64; 2]) -> f64 {
        self.delta * y[0] - self.gamma * y[0].ln() + self.beta * y[1] - self.alpha * y[1].ln()
    }
}

impl<A: Real> VectorField<A> for LotkaVolterra {
    fn eval(&self, _t: A, y: &[A], dy: &mut [A]) {
        let (x, p) = (y[0], y[1]);
        let (a, b) = (A::of_f64(self.alpha), A::of_f64(self.beta));
        let (g, d) = (A::of_f64(self.gamma), A::of_f64(self.delta));
        dy[0] = a * x - b * x * p;
        dy[1] = d * x * p - g * p;
    }
    fn dim(&self) -> Option<usize> {
        Some(2)
    }
}

/// Van der Pol oscillator: `[y1, mu*(1 - y0^2)*y1 - y0]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VanDerPol {
    /// Damping strength `mu` (finite; `0` gives a harmonic oscillator).
    pub mu: f64,
}

impl VanDerPol {
    /// With a finite `mu`.
    pub fn new(mu: f64) -> Result<Self> {
        ensure(mu.is_finite(), "mu", mu, "must be finite")?;
        Ok(VanDerPol { mu })
    }
}

impl<A: Real> VectorField<A> for VanDerPol {
    fn eval(&self, _t: A, y: &[A], dy: &mut [A]) {
        let one = A::one();
        dy[0] = y[1];
        dy[1] = A::of_f64(self.mu) * (one - y[0] * y[0]) * y[1] - y[0];
    }
    fn dim(&self) -> Option<usize> {
        Some(2)
    }
}

/// Forced decay, element-wise on any state length: `dy/dt = -k*y + sin(w*t)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ForcedDecay {
    /// Decay rate `k` (finite).
    pub k: f64,
    /// Angular frequency `w` of the forcing (finite).
    pub w: f64,
}

impl ForcedDecay {
    /// With finite `k`, `w`.
    pub fn new(k: f64, w: f64) -> Result<Self> {
        ensure(k.is_finite(), "k", k, "must be finite")?;
        ensure(w.is_finite(), "w", w, "must be finite")?;
        Ok(ForcedDecay { k, w })
    }

    /// Closed form from `y(0) = y0`, valid when `k^2 + w^2 > 0`:
    /// `y(t) = (y0 + w/(k^2+w^2)) e^{-kt} + (k sin wt - w cos wt)/(k^2+w^2)`.
    pub fn exact(&self, y0: f64, t: f64) -> f64 {
        let (k, w) = (self.k, self.w);
        let d = k * k + w * w;
        (y0 + w / d) * (-k * t).exp() + (k * (w * t).sin() - w * (w * t).cos()) / d
    }
}

impl<A: Real> VectorField<A> for ForcedDecay {
    fn eval(&self, t: A, y: &[A], dy: &mut [A]) {
        let (k, w) = (A::of_f64(self.k), A::of_f64(self.w));
        let s = NF::sin(w * t);
        for (o, &v) in dy.iter_mut().zip(y) {
            *o = -k * v + s;
        }
    }
}

/// Exponential decay `dy/dt = -lambda*y` element-wise, solution `y0 e^{-lambda t}`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpDecay {
    /// Decay rate `lambda` (finite; negative values grow).
    pub lambda: f64,
}

impl ExpDecay {
    /// With a finite rate.
    pub fn new(lambda: f64) -> Result<Self> {
        ensure(lambda.is_finite(), "lambda", lambda, "must be finite")?;
        Ok(ExpDecay { lambda })
    }
    /// `y0 e^{-lambda t}`.
    pub fn exact(&self, y0: f64, t: f64) -> f64 {
        y0 * (-self.lambda * t).exp()
    }
}

impl<A: Real> VectorField<A> for ExpDecay {
    fn eval(&self, _t: A, y: &[A], dy: &mut [A]) {
        let l = A::of_f64(self.lambda);
        for (o, &v) in dy.iter_mut().zip(y) {
            *o = -l * v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Central-difference check of a closed form against its field at a few times; the step
    /// `h = 1e-5` gives truncation ~1e-10 and rounding ~1e-11, so 1e-8 is a safe bound.
    const FD_TOL: f64 = 1e-8;
    const FD_H: f64 = 1e-5;

    #[test]
    fn linear_applies_the_row_major_matrix() {
        let l = Linear::new(2, vec![1.0, 2.0, 3.0, 4.0]).unwrap();
        let mut dy = [0.0f64; 2];
        l.eval(0.0, &[1.0, 10.0], &mut dy);
        // [1*1 + 2*10, 3*1 + 4*10]
        assert_eq!(dy, [21.0, 43.0]);
    }

    #[test]
    fn linear_rejects_non_square_data() {
        assert!(matches!(
            Linear::new(2, vec![1.0; 3]),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(Linear::new(0, vec![]).is_err());
        assert!(Linear::new(1, vec![f64::NAN]).is_err());
    }

    #[test]
    fn damped_rotation_closed_form_satisfies_the_ode() {
        let (al, om, y0) = (0.5, 1.0, [1.0, 0.0]);
        let l = Linear::damped_rotation(al, om).unwrap();
        for &t in &[0.0, 0.7, 2.5] {
            let yp = Linear::damped_rotation_exact(al, om, y0, t + FD_H);
            let ym = Linear::damped_rotation_exact(al, om, y0, t - FD_H);
            let y = Linear::damped_rotation_exact(al, om, y0, t);
            let mut dy = [0.0f64; 2];
            l.eval(t, &y, &mut dy);
            for i in 0..2 {
                let fd = (yp[i] - ym[i]) / (2.0 * FD_H);
                assert!(
                    (fd - dy[i]).abs() < FD_TOL,
                    "t={t} i={i}: {fd} vs {}",
                    dy[i]
                );
            }
        }
    }

    #[test]
    fn forced_decay_closed_form_satisfies_the_ode_and_initial_value() {
        let f = ForcedDecay::new(0.7, 2.0).unwrap();
        assert!((f.exact(1.5, 0.0) - 1.5).abs() < 1e-15);
        for &t in &[0.3, 1.0, 4.0] {
            let fd = (f.exact(1.5, t + FD_H) - f.exact(1.5, t - FD_H)) / (2.0 * FD_H);
            let mut dy = [0.0f64];
            f.eval(t, &[f.exact(1.5, t)], &mut dy);
            assert!((fd - dy[0]).abs() < FD_TOL);
        }
    }

    #[test]
    fn lotka_volterra_and_van_der_pol_match_hand_values() {
        let lv = LotkaVolterra::new(1.5, 1.0, 3.0, 1.0).unwrap();
        let mut dy = [0.0f64; 2];
        lv.eval(0.0, &[1.0, 1.0], &mut dy);
        // [1.5 - 1, 1 - 3]
        assert_eq!(dy, [0.5, -2.0]);
        let vdp = VanDerPol::new(1.0).unwrap();
        vdp.eval(0.0, &[2.0, 0.0], &mut dy);
        // [0, 1*(1-4)*0 - 2]
        assert_eq!(dy, [0.0, -2.0]);
    }

    #[test]
    fn lotka_volterra_invariant_matches_hand_values_and_is_constant_along_the_flow() {
        let lv = LotkaVolterra::new(1.5, 1.0, 3.0, 1.0).unwrap();
        // V = delta x - gamma ln x + beta y - alpha ln y; at (1, 1) the logs vanish: 1 + 1.
        assert_eq!(lv.invariant([1.0, 1.0]), 2.0);
        // at (e, e): e - 3 + e - 1.5
        let e = std::f64::consts::E;
        assert!((lv.invariant([e, e]) - (2.0 * e - 4.5)).abs() < 1e-15);
        // dV/dt = (delta - gamma/x) x' + (beta - alpha/y) y' = 0 along the field (closed form).
        let mut dy = [0.0f64; 2];
        for y in [[1.0, 1.0], [0.5, 2.0], [4.0, 0.25]] {
            lv.eval(0.0, &y, &mut dy);
            let dv = (lv.delta - lv.gamma / y[0]) * dy[0] + (lv.beta - lv.alpha / y[1]) * dy[1];
            assert!(dv.abs() < 1e-12, "{y:?}: {dv}");
        }
    }

    #[test]
    fn fixtures_evaluate_in_f32() {
        let mut dy = [0.0f32; 2];
        VanDerPol::new(1.0)
            .unwrap()
            .eval(0.0f32, &[2.0, 1.0], &mut dy);
        // [1, (1-4)*1 - 2]
        assert_eq!(dy, [1.0, -5.0]);
        ExpDecay::new(2.0)
            .unwrap()
            .eval(0.0f32, &[1.0, -1.0], &mut dy);
        assert_eq!(dy, [-2.0, 2.0]);
    }
}
