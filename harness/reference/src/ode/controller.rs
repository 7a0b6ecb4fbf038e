//! Step-size controllers: a constant step and diffrax's PID controller, as validated settings
//! plus the per-solve decision rules (`init`/`adapt`) the stepping loop in `solve.rs` calls.
//!
//! **Constant step** ([`Constant`]): every step is accepted. With `n = ceil((t1 - t0) /
//! nextafter_up(dt0))`, step 1 ends at `t0 + dt0`, step `k` (`2 <= k < n`) at
//! `t0 + ((t1 - t0) * k) * (1/n)`, step `n` exactly at `t1`; endpoints are never accumulated by
//! repeated addition.
//!
//! **PID** ([`Pid`]): `scaled_error = RMS(y_error / (atol + rtol*max(|y0|, |y1|)))` (a NaN in
//! `y1` makes it use `y0`); accept iff `< 1`; `factor = safety * inv^{(kI+kP+kD)/q} *
//! prev^{-(kP+2kD)/q} * prev_prev^{kD/q}` (a zero exponent contributes exactly 1), clipped to
//! `[1, factormax]` when accepted and `[factormin, safety]` when rejected; `dt_next = dt*factor`,
//! then `dtmax`/`dtmin` clipping. `q` is the method's order. The history `(prev, prev_prev)`
//! starts at `(1, 1)`, advances only on acceptance, and stores `1` for an `inv` of 0 or inf.
//!
//! Initial step when `dt0` is not given: [`InitialStep::Diffrax0p01`] (default) is exactly
//! `0.01`, which is what diffrax 0.7.2 really does — its `_select_initial_step` returns 0.01
//! unless the term `isinstance(terms, ODETerm)`, and `diffeqsolve` has already wrapped the term
//! for the time direction, so the check always fails. [`InitialStep::Hairer`] is the rule of
//! Hairer–Nørsett–Wanner as written in diffrax (see [`hairer_initial_step`]).
//!
//! Guarantees: every constructor and setter validates and names the parameter and its legal
//! range; `solve` re-validates, so struct literals with bad values are rejected too. The rules
//! never panic: non-finite errors propagate as in JAX (NaN-propagating clip) and are bounded by
//! the solver's `max_steps`.
//!
//! # References
//! - diffrax 0.7.2 `_step_size_controller/{pid.py, constant.py}`.
//! - E. Hairer, S. P. Nørsett, G. Wanner, *Solving Ordinary Differential Equations I*, §II.4
//!   (initial step, I controller); E. Hairer, G. Wanner, *… II*, §IV.2 (PI control).
//! - G. Söderlind, "Digital filters in adaptive time-stepping", *ACM TOMS* 29 (2003) 1–26.

use super::numerics::{nan_clip, nan_max, nan_min, next_up, rms_norm};
use super::problem::VectorField;
use crate::backend::Real;
use crate::error::ensure;
use crate::Result;
use num_traits::Float as NF;

/// How the PID controller picks the first step when `dt0` is not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialStep {
    /// Exactly `0.01` (then `dtmax`/`dtmin` and the interval): diffrax 0.7.2's actual behaviour.
    #[default]
    Diffrax0p01,
    /// Hairer–Nørsett–Wanner I, §II.4, as written in diffrax's `_select_initial_step`.
    Hairer,
}

/// A constant step size `dt0` (signed like `t1 - t0`; must be finite and non-zero).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Constant {
    /// The signed step (finite, non-zero): the first step ends at `t0 + dt0`, the last exactly at
    /// `t1`, with `n = ceil((t1 - t0) / nextafter_up(dt0))` steps in all (see the module docs).
    pub dt0: f64,
}

impl Constant {
    /// A constant step; `dt0` must be finite and non-zero (its sign is checked by `solve`).
    pub fn new(dt0: f64) -> Result<Constant> {
        let c = Constant { dt0 };
        c.validate()?;
        Ok(c)
    }
    /// Check the settings.
    pub fn validate(&self) -> Result<()> {
        ensure(
            self.dt0.is_finite() && self.dt0 != 0.0,
            "dt0",
            self.dt0,
            "must be finite and non-zero",
        )
    }
}

/// diffrax's `PIDController` settings. Defaults: `pcoeff = 0, icoeff = 1, dcoeff = 0,
/// factormin = 0.2, factormax = 10, safety = 0.9`, no `dtmin`/`dtmax`, `dt0 = None`,
/// `initial_step = Diffrax0p01`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pid {
    /// Relative tolerance (finite, `> 0`), scaled by `max(|y0|, |y1|)` per element.
    pub rtol: f64,
    /// Absolute tolerance (finite, `> 0`).
    pub atol: f64,
    /// Proportional coefficient `kP` (finite).
    pub pcoeff: f64,
    /// Integral coefficient `kI` (finite); `1` with `kP = kD = 0` is the classic I controller.
    pub icoeff: f64,
    /// Derivative coefficient `kD` (finite).
    pub dcoeff: f64,
    /// Smallest shrink factor on rejection, in `(0, 1]`.
    pub factormin: f64,
    /// Largest growth factor on acceptance, finite and `>= 1`.
    pub factormax: f64,
    /// Safety factor multiplying every proposed factor, in `(0, 1]`.
    pub safety: f64,
    /// Minimum step magnitude (finite, `> 0`); a step clipped to it is accepted.
    pub dtmin: Option<f64>,
    /// Maximum step magnitude (finite, `> 0`).
    pub dtmax: Option<f64>,
    /// First step (finite, non-zero, signed like `t1 - t0`), or `None` to use `initial_step`.
    pub dt0: Option<f64>,
    /// How the first step is picked when `dt0` is `None`.
    pub initial_step: InitialStep,
}

impl Pid {
    /// A PID (by default pure I) controller with tolerances `rtol, atol` (finite, `> 0`) and the
    /// diffrax defaults for everything else.
    ///
    /// ```
    /// use harness_reference::ode::{InitialStep, Pid};
    /// let pid = Pid::new(1e-6, 1e-8)?.pcoeff(0.4)?.icoeff(0.3)?.dt0(Some(0.1))?;
    /// assert_eq!((pid.factormin, pid.factormax, pid.safety), (0.2, 10.0, 0.9));
    /// assert_eq!(pid.initial_step, InitialStep::Diffrax0p01);
    /// assert!(Pid::new(0.0, 1e-8).is_err());
    /// assert!(Pid::new(1e-6, 1e-8)?.factormin(1.5).is_err());
    /// # Ok::<(), harness_reference::Error>(())
    /// ```
    pub fn new(rtol: f64, atol: f64) -> Result<Pid> {
        let p = Pid {
            rtol,
            atol,
            pcoeff: 0.0,
            icoeff: 1.0,
            dcoeff: 0.0,
            factormin: 0.2,
            factormax: 10.0,
            safety: 0.9,
            dtmin: None,
            dtmax: None,
            dt0: None,
            initial_step: InitialStep::Diffrax0p01,
        };
        p.validate()?;
        Ok(p)
    }

    /// Proportional coefficient (finite).
    pub fn pcoeff(mut self, v: f64) -> Result<Pid> {
        self.pcoeff = v;
        self.validate().map(|_| self)
    }
    /// Integral coefficient (finite).
    pub fn icoeff(mut self, v: f64) -> Result<Pid> {
        self.icoeff = v;
        self.validate().map(|_| self)
    }
    /// Derivative coefficient (finite).
    pub fn dcoeff(mut self, v: f64) -> Result<Pid> {
        self.dcoeff = v;
        self.validate().map(|_| self)
    }
    /// Smallest shrink factor on rejection, in `(0, 1]`.
    pub fn factormin(mut self, v: f64) -> Result<Pid> {
        self.factormin = v;
        self.validate().map(|_| self)
    }
    /// Largest growth factor on acceptance, finite and `>= 1`.
    pub fn factormax(mut self, v: f64) -> Result<Pid> {
        self.factormax = v;
        self.validate().map(|_| self)
    }
    /// Safety factor, in `(0, 1]`.
    pub fn safety(mut self, v: f64) -> Result<Pid> {
        self.safety = v;
        self.validate().map(|_| self)
    }
    /// Minimum step (finite, `> 0`, `<= dtmax`); a step at `dtmin` is accepted automatically.
    pub fn dtmin(mut self, v: Option<f64>) -> Result<Pid> {
        self.dtmin = v;
        self.validate().map(|_| self)
    }
    /// Maximum step (finite, `> 0`).
    pub fn dtmax(mut self, v: Option<f64>) -> Result<Pid> {
        self.dtmax = v;
        self.validate().map(|_| self)
    }
    /// First step (finite, non-zero, signed like `t1 - t0`), or `None` to select it.
    pub fn dt0(mut self, v: Option<f64>) -> Result<Pid> {
        self.dt0 = v;
        self.validate().map(|_| self)
    }
    /// Initial-step rule used when `dt0` is `None`.
    pub fn initial_step(mut self, v: InitialStep) -> Pid {
        self.initial_step = v;
        self
    }

    /// Check every setting against its legal range.
    pub fn validate(&self) -> Result<()> {
        ensure(
            self.rtol.is_finite() && self.rtol > 0.0,
            "rtol",
            self.rtol,
            "must be finite and > 0",
        )?;
        ensure(
            self.atol.is_finite() && self.atol > 0.0,
            "atol",
            self.atol,
            "must be finite and > 0",
        )?;
        ensure(
            self.pcoeff.is_finite(),
            "pcoeff",
            self.pcoeff,
            "must be finite",
        )?;
        ensure(
            self.icoeff.is_finite(),
            "icoeff",
            self.icoeff,
            "must be finite",
        )?;
        ensure(
            self.dcoeff.is_finite(),
            "dcoeff",
            self.dcoeff,
            "must be finite",
        )?;
        ensure(
            self.factormin > 0.0 && self.factormin <= 1.0,
            "factormin",
            self.factormin,
            "must be in (0, 1]",
        )?;
        ensure(
            self.factormax.is_finite() && self.factormax >= 1.0,
            "factormax",
            self.factormax,
            "must be finite and >= 1",
        )?;
        ensure(
            self.safety > 0.0 && self.safety <= 1.0,
            "safety",
            self.safety,
            "must be in (0, 1]",
        )?;
        if let Some(v) = self.dtmin {
            ensure(
                v.is_finite() && v > 0.0,
                "dtmin",
                v,
                "must be finite and > 0",
            )?;
        }
        if let Some(v) = self.dtmax {
            ensure(
                v.is_finite() && v > 0.0,
                "dtmax",
                v,
                "must be finite and > 0",
            )?;
        }
        if let (Some(lo), Some(hi)) = (self.dtmin, self.dtmax) {
            ensure(lo <= hi, "dtmin", lo, &format!("must be <= dtmax = {hi}"))?;
        }
        if let Some(v) = self.dt0 {
            ensure(
                v.is_finite() && v != 0.0,
                "dt0",
                v,
                "must be finite and non-zero",
            )?;
        }
        Ok(())
    }
}

/// A step-size controller.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Controller {
    /// Every step `dt0` (the last one ending exactly at `t1`); every step accepted.
    Constant(Constant),
    /// Adaptive steps from the embedded error estimate (the method must have one).
    Pid(Pid),
}

impl Controller {
    /// `Controller::Constant(Constant::new(dt0)?)`.
    pub fn constant(dt0: f64) -> Result<Controller> {
        Ok(Controller::Constant(Constant::new(dt0)?))
    }
    /// `Controller::Pid(Pid::new(rtol, atol)?)`.
    pub fn pid(rtol: f64, atol: f64) -> Result<Controller> {
        Ok(Controller::Pid(Pid::new(rtol, atol)?))
    }
    /// Check the settings.
    pub fn validate(&self) -> Result<()> {
        match self {
            Controller::Constant(c) => c.validate(),
            Controller::Pid(p) => p.validate(),
        }
    }
    /// The user's first step, if any (signed like `t1 - t0`).
    pub fn dt0(&self) -> Option<f64> {
        match self {
            Controller::Constant(c) => Some(c.dt0),
            Controller::Pid(p) => p.dt0,
        }
    }
}

/// What a controller decided after one attempted step (diffrax's `adapt_step_size` output).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Decision<A> {
    pub keep: bool,
    pub tprev: A,
    pub tnext: A,
}

/// Per-solve constant-step state, in the forward (`t1 > t0`) time of the solve.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConstantRun<A> {
    steps_completed: u64,
    num_steps: u64,
    t0: A,
    t1: A,
    recip_n: A,
}

impl<A: Real> ConstantRun<A> {
    /// `(first step end t0 + dt0, state)`; `dt0 > 0`, `t1 > t0`.
    pub fn init(t0: A, t1: A, dt0: A) -> (A, Self) {
        let n = NF::ceil((t1 - t0) / next_up(dt0));
        // `n` may exceed u64 for absurdly small dt0; the solve then stops at max_steps anyway.
        let num_steps = n.to_u64().unwrap_or(u64::MAX);
        let run = ConstantRun {
            steps_completed: 1,
            num_steps,
            t0,
            t1,
            recip_n: A::one() / n,
        };
        (t0 + dt0, run)
    }

    /// Accept the step ending at `t1_step` and place the next end.
    pub fn adapt(&mut self, t1_step: A) -> Decision<A> {
        self.steps_completed = self.steps_completed.saturating_add(1);
        let k = self.steps_completed;
        let tnext = if k == self.num_steps {
            self.t1
        } else {
            // diffrax writes `t0 + (t1 - t0) * k / n`; the golden cases (jax 0.10.2, XLA CPU)
            // are bit-identical to the division done as a multiplication by the reciprocal.
            self.t0 + ((self.t1 - self.t0) * A::of_f64(k as f64)) * self.recip_n
        };
        Decision {
            keep: true,
            tprev: t1_step,
            tnext,
        }
    }
}

/// Per-solve PID settings cast to the arithmetic type, plus the error history.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PidRun<A> {
    rtol: A,
    atol: A,
    coeff1: Option<A>,
    coeff2: Option<A>,
    coeff3: Option<A>,
    safety: A,
    factormin: A,
    factormax: A,
    dtmin: Option<A>,
    dtmax: Option<A>,
    prev_inv: A,
    prev_prev_inv: A,
    keep_next: bool,
}

impl<A: Real> PidRun<A> {
    /// Settings for a method of error order `q`, history `(1, 1)`.
    pub fn new(p: &Pid, q: u32) -> Self {
        let q = q as f64;
        let coeff = |c: f64| if c == 0.0 { None } else { Some(A::of_f64(c)) };
        PidRun {
            rtol: A::of_f64(p.rtol),
            atol: A::of_f64(p.atol),
            coeff1: coeff((p.icoeff + p.pcoeff + p.dcoeff) / q),
            coeff2: coeff(-(p.pcoeff + 2.0 * p.dcoeff) / q),
            coeff3: coeff(p.dcoeff / q),
            safety: A::of_f64(p.safety),
            factormin: A::of_f64(p.factormin),
            factormax: A::of_f64(p.factormax),
            dtmin: p.dtmin.map(A::of_f64),
            dtmax: p.dtmax.map(A::of_f64),
            prev_inv: A::one(),
            prev_prev_inv: A::one(),
            keep_next: false,
        }
    }

    /// The first step end `t0 + clip(dt0)` for a positive `dt0` (dtmax, then dtmin).
    pub fn init(&self, t0: A, dt0: A) -> A {
        let mut dt = dt0;
        if let Some(hi) = self.dtmax {
            dt = nan_min(dt, hi);
        }
        if let Some(lo) = self.dtmin {
            dt = nan_max(dt, lo);
        }
        t0 + dt
    }

    /// `(rtol, atol)` in the solve's precision.
    pub fn tolerances(&self) -> (A, A) {
        (self.rtol, self.atol)
    }

    /// diffrax's `scaled_error` of a candidate step (`y_err` already has NaN replaced by inf).
    pub fn scaled_error(&self, y0: &[A], y1: &[A], y_err: &[A]) -> A {
        let y1_nan = y1.iter().any(|v| NF::is_nan(*v));
        let (rtol, atol) = (self.rtol, self.atol);
        rms_norm(y0.len(), |i| {
            let y1i = if y1_nan { y0[i] } else { y1[i] };
            let y = nan_max(NF::abs(y0[i]), NF::abs(y1i));
            y_err[i] / (atol + y * rtol)
        })
    }

    /// Decide on the step `[t0, t1]` with the given scaled error, and advance the history.
    pub fn adapt(&mut self, t0: A, t1: A, scaled_error: A) -> Decision<A> {
        let one = A::one();
        let mut keep = scaled_error < one;
        if self.dtmin.is_some() {
            keep = keep || self.keep_next;
        }
        let mut inv = one / scaled_error;
        let pow = |x: A, c: Option<A>| c.map_or(one, |c| NF::powf(x, c));
        let f1 = pow(inv, self.coeff1);
        let f2 = pow(self.prev_inv, self.coeff2);
        let f3 = pow(self.prev_prev_inv, self.coeff3);
        let (lo, hi) = if keep {
            (one, self.factormax)
        } else {
            (self.factormin, self.safety)
        };
        let factor = nan_clip(self.safety * f1 * f2 * f3, lo, hi);
        let mut dt = (t1 - t0) * factor;
        if inv == A::zero() || NF::is_infinite(inv) {
            inv = one;
        }
        if let Some(hi) = self.dtmax {
            dt = nan_min(dt, hi);
        }
        if let Some(lo) = self.dtmin {
            self.keep_next = dt <= lo || (self.keep_next && factor == one);
            dt = nan_max(dt, lo);
        }
        let next_t0 = if keep { t1 } else { t0 };
        if keep {
            self.prev_prev_inv = self.prev_inv;
            self.prev_inv = inv;
        }
        Decision {
            keep,
            tprev: next_t0,
            tnext: next_t0 + dt,
        }
    }
}

/// What [`hairer_initial_step`] starts from: the solve's first time and state, its tolerances,
/// and the error order `q` of its method.
#[derive(Clone, Copy)]
pub(crate) struct SolveStart<'a, A> {
    pub t0: A,
    pub y0: &'a [A],
    pub rtol: A,
    pub atol: A,
    pub order: u32,
}

/// Hairer–Nørsett–Wanner's initial step (I, §II.4) exactly as diffrax writes it, for a method of
/// error order `q`, with `scale = atol + |y0|*rtol`:
/// `d0 = RMS(y0/scale)`, `d1 = RMS(f0/scale)`; `h0 = 1e-6` if `d0 < 1e-5` or `d1 < 1e-5`, else
/// `0.01*(d0/d1)`; `f1 = f(t0 + h0, y0 + h0*f0)`; `d2 = RMS((f1 - f0)/scale)/h0`;
/// `h1 = max(1e-6, 1e-3*h0)` if `max(d1, d2) <= 1e-15`, else `(0.01/max(d1, d2))^(1/q)`;
/// result `min(100*h0, h1)`.
///
/// `field` is the field in the solve's forward time (for a backward solve, the reversed field),
/// so the probe step goes the way the solve goes. `f0`, `y1`, `f1` are scratch buffers of the
/// state length. Returns a positive step, or NaN when the field is non-finite at `y0`.
pub(crate) fn hairer_initial_step<A: Real, F: VectorField<A> + ?Sized>(
    field: &F,
    start: SolveStart<'_, A>,
    f0: &mut [A],
    y1: &mut [A],
    f1: &mut [A],
) -> A {
    let SolveStart {
        t0,
        y0,
        rtol,
        atol,
        order: q,
    } = start;
    let n = y0.len();
    field.eval(t0, y0, f0);
    let scale = |i: usize| atol + NF::abs(y0[i]) * rtol;
    let d0 = rms_norm(n, |i| y0[i] / scale(i));
    let d1 = rms_norm(n, |i| f0[i] / scale(i));
    let small = A::of_f64(1e-5);
    let cond = d0 < small || d1 < small;
    let h0 = if cond {
        A::of_f64(1e-6)
    } else {
        A::of_f64(0.01) * (d0 / d1)
    };
    for i in 0..n {
        y1[i] = y0[i] + h0 * f0[i];
    }
    field.eval(t0 + h0, y1, f1);
    let d2 = rms_norm(n, |i| (f1[i] - f0[i]) / scale(i)) / h0;
    let max_d = nan_max(d1, d2);
    let h1 = if max_d <= A::of_f64(1e-15) {
        nan_max(A::of_f64(1e-6), h0 * A::of_f64(1e-3))
    } else {
        NF::powf(A::of_f64(0.01) / max_d, A::of_f64(1.0 / q as f64))
    };
    nan_min(A::of_f64(100.0) * h0, h1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    fn bad_name<T: std::fmt::Debug>(r: Result<T>) -> &'static str {
        match r {
            Err(Error::InvalidHyper { name, .. }) => name,
            other => panic!("expected InvalidHyper, got {other:?}"),
        }
    }

    #[test]
    fn pid_defaults_are_diffraxs() {
        let p = Pid::new(1e-3, 1e-6).unwrap();
        assert_eq!(
            (
                p.pcoeff,
                p.icoeff,
                p.dcoeff,
                p.factormin,
                p.factormax,
                p.safety
            ),
            (0.0, 1.0, 0.0, 0.2, 10.0, 0.9)
        );
        assert_eq!((p.dtmin, p.dtmax, p.dt0), (None, None, None));
        assert_eq!(p.initial_step, InitialStep::Diffrax0p01);
    }

    #[test]
    fn pid_rejects_each_out_of_range_setting_by_name() {
        let p = Pid::new(1e-3, 1e-6).unwrap();
        assert_eq!(bad_name(Pid::new(-1e-3, 1e-6)), "rtol");
        assert_eq!(bad_name(Pid::new(f64::NAN, 1e-6)), "rtol");
        assert_eq!(bad_name(Pid::new(1e-3, 0.0)), "atol");
        assert_eq!(bad_name(Pid::new(1e-3, f64::INFINITY)), "atol");
        assert_eq!(bad_name(p.pcoeff(f64::NAN)), "pcoeff");
        assert_eq!(bad_name(p.icoeff(f64::INFINITY)), "icoeff");
        assert_eq!(bad_name(p.dcoeff(f64::NEG_INFINITY)), "dcoeff");
        assert_eq!(bad_name(p.factormin(0.0)), "factormin");
        assert_eq!(bad_name(p.factormax(0.5)), "factormax");
        assert_eq!(bad_name(p.safety(1.1)), "safety");
        assert_eq!(bad_name(p.dtmin(Some(-1.0))), "dtmin");
        assert_eq!(bad_name(p.dtmax(Some(0.0))), "dtmax");
        assert_eq!(
            bad_name(p.dtmax(Some(0.1)).unwrap().dtmin(Some(0.2))),
            "dtmin"
        );
        assert_eq!(bad_name(p.dt0(Some(0.0))), "dt0");
        assert_eq!(bad_name(p.dt0(Some(f64::NAN))), "dt0");
        assert_eq!(bad_name(Constant::new(0.0)), "dt0");
        assert_eq!(bad_name(Constant::new(f64::INFINITY)), "dt0");
        // A struct literal bypasses the constructor but not validate().
        let lit = Pid { safety: 0.0, ..p };
        assert_eq!(bad_name(lit.validate()), "safety");
    }

    #[test]
    fn constant_steps_follow_the_fraction_rule_and_end_exactly_at_t1() {
        // [0, 1] with dt0 = 0.3: n = ceil(1/0.30000000000000004) = 4.
        let (first, mut run) = ConstantRun::init(0.0f64, 1.0, 0.3);
        assert_eq!(first, 0.3);
        assert_eq!(run.num_steps, 4);
        let d2 = run.adapt(first);
        assert!(d2.keep);
        assert_eq!(d2.tnext, (1.0 * 2.0) * 0.25);
        let d3 = run.adapt(d2.tnext);
        assert_eq!(d3.tnext, (1.0 * 3.0) * 0.25);
        let d4 = run.adapt(d3.tnext);
        assert_eq!(d4.tnext, 1.0);
    }

    #[test]
    fn constant_step_count_uses_nextafter_so_exact_multiples_do_not_add_a_step() {
        // 2.0 / 0.05 rounds to exactly 40.0; dividing by nextafter(0.05) keeps n = 40, not 41.
        let (_, run) = ConstantRun::init(0.0f64, 2.0, 0.05);
        assert_eq!(run.num_steps, 40);
    }

    #[test]
    fn pid_accepts_below_one_and_grows_by_the_i_rule() {
        let mut run = PidRun::<f64>::new(&Pid::new(1e-3, 1e-6).unwrap(), 5);
        // scaled error 0.5: factor = 0.9 * 2^(1/5)
        let d = run.adapt(0.0, 0.1, 0.5);
        assert!(d.keep);
        assert_eq!(d.tprev, 0.1);
        assert_eq!(d.tnext, 0.1 + 0.1 * (0.9 * 2f64.powf(0.2)));
        assert_eq!(run.prev_inv, 2.0);
        assert_eq!(run.prev_prev_inv, 1.0);
    }

    #[test]
    fn pid_never_shrinks_an_accepted_step_nor_grows_a_rejected_one() {
        let mut run = PidRun::<f64>::new(&Pid::new(1e-3, 1e-6).unwrap(), 5);
        // accepted with error 0.99: raw factor 0.9*0.99^-0.2 < 1 -> clipped to 1
        let d = run.adapt(0.0, 0.1, 0.99);
        assert_eq!(d.tnext - d.tprev, 0.1);
        // rejected with a huge error: raw factor ~0 -> clipped up to factormin
        let d = run.adapt(0.1, 0.2, 1e30);
        assert!(!d.keep);
        assert_eq!(d.tprev, 0.1);
        assert_eq!(d.tnext, 0.1 + (0.2 - 0.1) * 0.2);
        // rejection leaves the history alone
        assert_eq!(run.prev_inv, 1.0 / 0.99);
    }

    #[test]
    fn pid_zero_error_grows_by_factormax_and_history_stores_one() {
        let mut run = PidRun::<f64>::new(&Pid::new(1e-3, 1e-6).unwrap(), 2);
        let d = run.adapt(0.0, 0.1, 0.0);
        assert!(d.keep);
        assert_eq!(d.tnext, 0.1 + 0.1 * 10.0);
        assert_eq!(run.prev_inv, 1.0);
    }

    #[test]
    fn pid_infinite_error_rejects_with_factormin() {
        let mut run = PidRun::<f64>::new(&Pid::new(1e-3, 1e-6).unwrap(), 5);
        let d = run.adapt(0.0, 1.0, f64::INFINITY);
        assert!(!d.keep);
        assert_eq!(d.tnext, 0.2);
    }

    #[test]
    fn pid_dtmax_and_dtmin_clip_and_dtmin_forces_acceptance_next() {
        let p = Pid::new(1e-3, 1e-6)
            .unwrap()
            .dtmin(Some(0.05))
            .unwrap()
            .dtmax(Some(0.5))
            .unwrap();
        let mut run = PidRun::<f64>::new(&p, 5);
        assert_eq!(run.init(0.0, 1.0), 0.5);
        assert_eq!(run.init(0.0, 0.01), 0.05);
        // grows 10x but capped at dtmax
        let d = run.adapt(0.0, 0.1, 0.0);
        assert_eq!(d.tnext - d.tprev, 0.5);
        // rejected hard: shrinks to 0.2*0.06 = 0.012 < dtmin -> dtmin, and next step is kept
        let d = run.adapt(0.1, 0.16, 1e30);
        assert!(!d.keep);
        assert_eq!((d.tprev, d.tnext), (0.1, 0.1 + 0.05));
        let d = run.adapt(0.1, 0.15, 1e30);
        assert!(d.keep, "a step at dtmin is accepted whatever its error");
    }

    #[test]
    fn scaled_error_uses_y0_when_candidate_has_nan() {
        let run = PidRun::<f64>::new(&Pid::new(0.5, 1.0).unwrap(), 5);
        // scale = 1 + 0.5*max(|2|, |y1|); with NaN y1 -> 1 + 0.5*2 = 2; single element: |1/2|
        assert_eq!(run.scaled_error(&[2.0], &[f64::NAN], &[1.0]), 0.5);
        assert_eq!(run.scaled_error(&[2.0], &[4.0], &[1.0]), 1.0 / 3.0);
    }

    /// `t0 = 0`, `rtol = 1e-3`, `atol = 1e-6`, a fifth-order method.
    fn decay_start(y0: &[f64]) -> SolveStart<'_, f64> {
        SolveStart {
            t0: 0.0,
            y0,
            rtol: 1e-3,
            atol: 1e-6,
            order: 5,
        }
    }

    #[test]
    fn hairer_initial_step_matches_a_hand_computation_on_decay() {
        // y' = -y, y0 = 1, rtol = 1e-3, atol = 1e-6, q = 5.
        // scale = 1e-6 + 1e-3 = 0.001001; d0 = d1 = 1/0.001001; h0 = 0.01*(d0/d1) = 0.01;
        // f1 = -(1 - 0.01) = -0.99; d2 = |(-0.99 + 1)/0.001001| / 0.01;
        // h1 = (0.01/max(d1, d2))^(1/5); result min(100*h0, h1).
        let f = |_t: f64, y: &[f64], dy: &mut [f64]| dy[0] = -y[0];
        let (mut a, mut b, mut c) = ([0.0], [0.0], [0.0]);
        let h = hairer_initial_step(&f, decay_start(&[1.0]), &mut a, &mut b, &mut c);
        let scale = 1e-6 + 1.0 * 1e-3;
        let d0 = 1.0 / scale;
        let d1 = 1.0 / scale;
        let h0 = 0.01 * (d0 / d1);
        let d2 = ((-(1.0 - h0)) - (-1.0f64)).abs() / scale / h0;
        let h1 = (0.01 / d1.max(d2)).powf(1.0 / 5.0);
        assert_eq!(h, (100.0 * h0).min(h1));
    }

    #[test]
    fn hairer_initial_step_on_zero_state_uses_the_tiny_defaults() {
        // d0 = 0 < 1e-5 -> h0 = 1e-6; f == 0 -> d2 = 0 -> h1 = max(1e-6, 1e-9) = 1e-6.
        let f = |_t: f64, _y: &[f64], dy: &mut [f64]| dy[0] = 0.0;
        let (mut a, mut b, mut c) = ([0.0], [0.0], [0.0]);
        let h = hairer_initial_step(&f, decay_start(&[0.0]), &mut a, &mut b, &mut c);
        assert_eq!(h, 1e-6);
    }
}
