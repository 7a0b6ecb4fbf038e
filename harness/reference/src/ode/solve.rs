//! The stepping loop: explicit Runge–Kutta integration of `dy/dt = f(t, y)` from `t0` to `t1`
//! with any [`Tableau`] and [`Controller`], reproducing diffrax 0.7.2's `diffeqsolve` with
//! `SaveAt(steps=True)`.
//!
//! One step from `(t_prev, y0)` to `t_next`, `dt = t_next - t_prev`, computes
//! `k_i = dt * f(t_prev + c_i*dt, y0 + sum_j a_ij k_j)` (the FSAL last stage at exactly
//! `t_next`), `y1 = y0 + sum_i b_i k_i` and `y_error = sum_i e_i k_i` with NaN replaced by
//! `+inf`. The controller accepts or rejects and places the next step; then
//! `t_prev = min(t_prev', t1)` and a proposed end beyond `t1` minus 100 ULPs becomes `t1` (after
//! an accepted step) or the midpoint `t_prev + (t1 - t_prev)/2` (after a rejected one). The
//! first step ends at `min(t0 + dt0, t1)`.
//!
//! A backward solve (`t1 < t0`) integrates `g(s, y) = -f(-s, y)` from `-t0` to `-t1` with step
//! `-dt0` and reports negated times — bit-identical to diffrax, whose time-direction wrapper
//! performs the same exact negations.
//!
//! Guarantees: bad input (empty or non-finite `y0`, non-finite `t0`/`t1`, a `dt0` that is zero,
//! non-finite, or of the wrong sign, a PID controller with a method without error estimate, a
//! field whose declared dimension differs from `y0`) is a typed error, never a panic; every
//! solve stops after at most `max_steps` attempted steps ([`crate::Error::MaxStepsExceeded`]),
//! whatever the field returns; `t0 == t1` returns `y0` after zero steps. The stepping itself is
//! allocation-free: stage buffers are allocated once per solve (saving a step pushes its time
//! and a copy of its state).
//!
//! # References
//! - P. Kidger, diffrax 0.7.2 `_integrate.py` (`diffeqsolve`, `loop`, `_clip_to_end`) and
//!   `_solver/runge_kutta.py`.
//! - E. Hairer, S. P. Nørsett, G. Wanner, *Solving Ordinary Differential Equations I*, 2nd ed.,
//!   §II.1–II.4.
//! - Ch. Tsitouras (2011); J. R. Dormand, P. J. Prince (1980) — see `tableau.rs`.

use super::controller::{
    hairer_initial_step, ConstantRun, Controller, Decision, InitialStep, PidRun, SolveStart,
};
use super::dfdx_step::{self, DfdxRkStep};
use super::numerics::{minus_100_ulps, nan_min};
use super::problem::{Reversed, VectorField};
use super::stepper::{RkStep, StepSpan};
use super::tableau::Tableau;
use crate::backend::{Float, Real};
use crate::error::ensure;
use crate::{Error, Face, Result};
use num_traits::Float as NF;

/// Options of a solve. Defaults: `max_steps = 4096` (diffrax's), `save_steps = true`, the fast
/// face.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SolveOptions {
    /// Maximum number of attempted (accepted + rejected) steps before the solve fails.
    pub max_steps: usize,
    /// Record the time and state at the end of every accepted step (`SaveAt(steps=True)`).
    pub save_steps: bool,
    /// The form of each step and of the error norm: the fast [`RkStep`], or the dfdx face
    /// ([`super::dfdx_step`]); the two give the same bits (law `ode_step_faces_agree`).
    pub face: Face,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions {
            max_steps: 4096,
            save_steps: true,
            face: Face::Fast,
        }
    }
}

/// What to integrate and how, apart from the field and the initial state: the method, the
/// step-size controller, the interval `[t0, t1]` (`t1 < t0` integrates backward) and the
/// options. Build it with [`Integration::new`] and adjust with the builder methods.
///
/// ```
/// use harness_reference::ode::{Controller, Integration, Solver};
/// let tsit5 = Solver::Tsit5.tableau();
/// let pid = Controller::pid(1e-6, 1e-8)?;
/// let i = Integration::new(&tsit5, &pid, 0.0, 1.0).max_steps(100).save_steps(false);
/// assert_eq!((i.options.max_steps, i.options.save_steps), (100, false));
/// # Ok::<(), harness_reference::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Integration<'a, A> {
    /// The Runge–Kutta method.
    pub tableau: &'a Tableau,
    /// The step-size controller (a PID controller needs a method with an error estimate).
    pub controller: &'a Controller,
    /// Start time.
    pub t0: A,
    /// End time (either side of `t0`; the solve runs in its direction).
    pub t1: A,
    /// Step budget, saving and the other settings.
    pub options: SolveOptions,
}

impl<'a, A> Integration<'a, A> {
    /// `tableau` with `controller` from `t0` to `t1`, default [`SolveOptions`].
    pub fn new(tableau: &'a Tableau, controller: &'a Controller, t0: A, t1: A) -> Self {
        Integration {
            tableau,
            controller,
            t0,
            t1,
            options: SolveOptions::default(),
        }
    }
    /// Replace the options.
    pub fn with_options(mut self, options: SolveOptions) -> Self {
        self.options = options;
        self
    }
    /// Attempted steps allowed before the solve fails.
    pub fn max_steps(mut self, max_steps: usize) -> Self {
        self.options.max_steps = max_steps;
        self
    }
    /// Record the time and state of every accepted step.
    pub fn save_steps(mut self, save: bool) -> Self {
        self.options.save_steps = save;
        self
    }
    /// Step with this face of the kernel.
    pub fn face(mut self, face: Face) -> Self {
        self.options.face = face;
        self
    }
}

/// Step counts, as diffrax's `sol.stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Steps whose error was accepted (every step of a constant-step solve).
    pub num_accepted_steps: usize,
    /// Steps the controller rejected and retried with a smaller `dt`.
    pub num_rejected_steps: usize,
    /// `num_accepted_steps + num_rejected_steps`.
    pub num_steps: usize,
}

/// The result of a solve.
#[derive(Debug, Clone, PartialEq)]
pub struct Solution<A> {
    /// End time of every accepted step, in order (empty unless `save_steps`).
    pub ts: Vec<A>,
    /// State at each of `ts` (empty unless `save_steps`).
    pub ys: Vec<Vec<A>>,
    /// State at `t1`.
    pub y_final: Vec<A>,
    /// Accepted and rejected step counts.
    pub stats: Stats,
}

/// One attempted step, as reported to a [`solve_observed`] observer (times in the caller's
/// direction).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepEvent<A> {
    /// Start and end of the attempted step.
    pub t_start: A,
    /// End of the attempted step.
    pub t_end: A,
    /// Whether the controller accepted the step.
    pub accepted: bool,
    /// The PID controller's scaled error (`None` for a constant step).
    pub scaled_error: Option<A>,
}

/// Solve `dy/dt = f(t, y)`, `y(t0) = y0`, from `t0` to `t1` (either direction).
///
/// ```
/// use harness_reference::ode::{fixtures::ExpDecay, solve, Controller, Integration, Solver};
/// let decay = ExpDecay::new(1.0)?;
/// let (tsit5, pid) = (Solver::Tsit5.tableau(), Controller::pid(1e-8, 1e-10)?);
/// let sol = solve(&decay, &Integration::new(&tsit5, &pid, 0.0, 1.0), &[1.0f64])?;
/// assert!((sol.y_final[0] - (-1.0f64).exp()).abs() < 1e-7);
/// assert_eq!(sol.ts.last(), Some(&1.0));
/// assert_eq!(sol.stats.num_steps, sol.stats.num_accepted_steps + sol.stats.num_rejected_steps);
/// # Ok::<(), harness_reference::Error>(())
/// ```
pub fn solve<A: Real, F: VectorField<A> + ?Sized>(
    field: &F,
    integration: &Integration<'_, A>,
    y0: &[A],
) -> Result<Solution<A>> {
    solve_observed(field, integration, y0, |_| {})
}

/// [`solve`], calling `observer` after every attempted step (accepted or rejected).
pub fn solve_observed<A: Real, F: VectorField<A> + ?Sized>(
    field: &F,
    integration: &Integration<'_, A>,
    y0: &[A],
    observer: impl FnMut(&StepEvent<A>),
) -> Result<Solution<A>> {
    let Integration {
        tableau,
        controller,
        t0,
        t1,
        options,
    } = *integration;
    let opts = &options;
    let n = y0.len();
    ensure(
        n > 0,
        "y0",
        "[]",
        "the state must have at least one element",
    )?;
    if let Some(d) = field.dim() {
        if d != n {
            return Err(Error::ShapeMismatch {
                leaf: "y0".into(),
                expected: vec![d],
                got: vec![n],
            });
        }
    }
    if let Some(i) = y0.iter().position(|v| !Float::is_finite(*v)) {
        return Err(Error::InvalidHyper {
            name: "y0",
            value: format!("{:?} at index {i}", y0[i]),
            expected: "every element must be finite".into(),
        });
    }
    ensure(
        Float::is_finite(t0),
        "t0",
        format!("{t0:?}"),
        "must be finite",
    )?;
    ensure(
        Float::is_finite(t1),
        "t1",
        format!("{t1:?}"),
        "must be finite",
    )?;
    controller.validate()?;
    if let Controller::Pid(_) = controller {
        ensure(
            tableau.b_err().is_some(),
            "controller",
            format!("pid with {}", tableau.name()),
            "adaptive step sizes need a method with an error estimate; use a constant step",
        )?;
    }
    let dt0 = controller.dt0().map(A::of_f64);
    if let Some(h) = dt0 {
        // The f64 setting may not survive the cast (1e-50 is 0 in f32).
        ensure(
            Float::is_finite(h) && h != A::zero(),
            "dt0",
            format!("{h:?}"),
            "must be finite and non-zero in the solve's precision",
        )?;
    }
    if t0 == t1 {
        return Ok(Solution {
            ts: Vec::new(),
            ys: Vec::new(),
            y_final: y0.to_vec(),
            stats: Stats::default(),
        });
    }
    let forward = t1 > t0;
    // Step placement computes `(t1 - t0) * k` for k up to the step count: that must not overflow,
    // or the step ends become inf/NaN (found by the `ode` fuzz target).
    let span = NF::abs(t1 - t0) * A::of_f64(opts.max_steps.max(1) as f64);
    ensure(
        Float::is_finite(span),
        "t1 - t0",
        format!("{:?}", t1 - t0),
        "times max_steps must be finite in the solve's precision",
    )?;
    if let Some(h) = dt0 {
        ensure(
            (h > A::zero()) == forward,
            "dt0",
            format!("{h:?}"),
            &format!("must have the sign of t1 - t0 = {:?}", t1 - t0),
        )?;
    }
    let leg = Leg {
        tab: tableau,
        controller,
        s0: t0,
        s1: t1,
        h0: dt0,
        opts,
        dir: A::one(),
    };
    if forward {
        run(field, leg, y0, observer)
    } else {
        let backward = Leg {
            s0: -t0,
            s1: -t1,
            h0: dt0.map(|h| -h),
            dir: -A::one(),
            ..leg
        };
        run(&Reversed(field), backward, y0, observer)
    }
}

/// One forward integration for [`run`]: `[s0, s1]` with `s1 > s0`, a first step `h0 > 0` (when
/// given), and `dir` mapping solve time to the caller's time (`-1` for a solve run backwards as
/// the forward solve of the reversed field).
#[derive(Clone, Copy)]
struct Leg<'a, A> {
    tab: &'a Tableau,
    controller: &'a Controller,
    s0: A,
    s1: A,
    h0: Option<A>,
    opts: &'a SolveOptions,
    dir: A,
}

/// The stepping loop of `leg`. Each face gets a loop of its own ([`run_in`]): sharing one, the
/// fast face's loop carried the dfdx face's tape code, twice its own size, and lost its step size
/// from a register to the stack (`harness bench ode`: 22.2 us against 21.4 us apart).
fn run<A: Real, G: VectorField<A> + ?Sized>(
    g: &G,
    leg: Leg<'_, A>,
    y0: &[A],
    observer: impl FnMut(&StepEvent<A>),
) -> Result<Solution<A>> {
    match leg.opts.face {
        Face::Fast => run_in::<A, G, false>(g, leg, y0, observer),
        Face::Dfdx => run_in::<A, G, true>(g, leg, y0, observer),
    }
}

/// [`run`] in the fast face (`DFDX = false`) or the dfdx face (`DFDX = true`).
fn run_in<A: Real, G: VectorField<A> + ?Sized, const DFDX: bool>(
    g: &G,
    leg: Leg<'_, A>,
    y0: &[A],
    mut observer: impl FnMut(&StepEvent<A>),
) -> Result<Solution<A>> {
    let Leg {
        tab,
        controller,
        s0,
        s1,
        h0,
        opts,
        dir,
    } = leg;
    let n = y0.len();
    let st = tab.stages();
    let fsal = tab.fsal();
    let rk = RkStep::<A>::new(tab);
    let face = DFDX.then(|| DfdxRkStep::<A>::new(tab));
    // Stage buffers: fs[i*n..(i+1)*n] = f at stage i (unscaled by dt).
    let mut fs = vec![A::zero(); st * n];
    let mut y = y0.to_vec();
    let mut y1 = vec![A::zero(); n];
    let mut ytmp = vec![A::zero(); n];
    let mut yerr = vec![A::zero(); n];
    let mut f0_valid = false;

    enum Run<A> {
        Const(ConstantRun<A>),
        Pid(PidRun<A>),
    }
    let (first_end, mut ctl) = match controller {
        Controller::Constant(_) => {
            // validated: a constant controller always carries dt0
            let h = h0.unwrap_or_else(A::one);
            let (t, r) = ConstantRun::init(s0, s1, h);
            (t, Run::Const(r))
        }
        Controller::Pid(p) => {
            let r = PidRun::new(p, tab.order());
            let h = match (h0, p.initial_step) {
                (Some(h), _) => h,
                (None, InitialStep::Diffrax0p01) => A::of_f64(0.01),
                (None, InitialStep::Hairer) => {
                    // `yerr` is free scratch until the first error estimate.
                    let start = SolveStart {
                        t0: s0,
                        y0: &y,
                        rtol: A::of_f64(p.rtol),
                        atol: A::of_f64(p.atol),
                        order: tab.order(),
                    };
                    let h = hairer_initial_step(g, start, &mut fs[..n], &mut ytmp, &mut yerr);
                    // fs[0] now holds f(s0, y0): reuse it as the first stage.
                    f0_valid = true;
                    h
                }
            };
            (r.init(s0, h), Run::Pid(r))
        }
    };
    let mut tprev = s0;
    let mut tnext = nan_min(first_end, s1);
    let clip_at = minus_100_ulps(s1);
    let mut stats = Stats::default();
    let mut ts = Vec::new();
    let mut ys = Vec::new();

    while tprev < s1 {
        if stats.num_steps >= opts.max_steps {
            return Err(Error::MaxStepsExceeded {
                max_steps: opts.max_steps,
                t: (tprev * dir).as_f64(),
                t_end: (s1 * dir).as_f64(),
            });
        }
        let dt = tnext - tprev;
        // f0 is already in fs[0] after an accepted FSAL step or the initial-step selection
        let first = usize::from(f0_valid);
        let span = StepSpan {
            tprev,
            tnext,
            y: &y,
        };
        if let Some(face) = &face {
            dfdx_face_step(face, g, span, first, &mut fs, &mut y1, &mut yerr);
        } else {
            rk.stages(span, first..st, &mut fs, &mut ytmp, &mut |_, t, z, k| {
                g.eval(t, z, k)
            });
            rk.combine(dt, &y, &fs, &ytmp, &mut y1);
            rk.error(dt, &fs, &mut yerr);
        }
        f0_valid = true;
        let (dec, scaled_error): (Decision<A>, Option<A>) = match &mut ctl {
            Run::Const(r) => (r.adapt(tnext), None),
            Run::Pid(r) => {
                let se = if DFDX {
                    dfdx_face_scaled_error(r, &y, &y1, &yerr)
                } else {
                    r.scaled_error(&y, &y1, &yerr)
                };
                (r.adapt(tprev, tnext, se), Some(se))
            }
        };
        let new_tprev = nan_min(dec.tprev, s1);
        let new_tnext = if dec.tnext > clip_at {
            if dec.keep {
                s1
            } else {
                new_tprev + A::of_f64(0.5) * (s1 - new_tprev)
            }
        } else {
            dec.tnext
        };
        stats.num_steps += 1;
        observer(&StepEvent {
            t_start: tprev * dir,
            t_end: tnext * dir,
            accepted: dec.keep,
            scaled_error,
        });
        if dec.keep {
            stats.num_accepted_steps += 1;
            std::mem::swap(&mut y, &mut y1);
            if fsal {
                // FSAL: the last stage f(t_next, y1) is the next step's first stage.
                fs.copy_within((st - 1) * n..st * n, 0);
            } else {
                f0_valid = false;
            }
            if opts.save_steps {
                ts.push(new_tprev * dir);
                ys.push(y.clone());
            }
        } else {
            stats.num_rejected_steps += 1;
        }
        tprev = new_tprev;
        tnext = new_tnext;
    }
    Ok(Solution {
        ts,
        ys,
        y_final: y,
        stats,
    })
}

/// One step of the dfdx face into the solve's buffers: the stage derivatives into `fs`, the new
/// state into `y1`, the embedded error (when the tableau has one) into `yerr`; `first == 1`
/// reuses the `k_0` already in `fs`.
fn dfdx_face_step<A: Real, G: VectorField<A> + ?Sized>(
    face: &DfdxRkStep<A>,
    g: &G,
    span: StepSpan<'_, A>,
    first: usize,
    fs: &mut [A],
    y1: &mut [A],
    yerr: &mut [A],
) {
    let StepSpan { tprev, tnext, y } = span;
    let n = y.len();
    let k0 = (first == 1).then(|| &fs[..n]);
    let out = face.step(tprev, tnext, y, k0, &mut |t, z, k| g.eval(t, z, k));
    for (dst, k) in fs.chunks_exact_mut(n).zip(&out.ks) {
        dst.copy_from_slice(k);
    }
    y1.copy_from_slice(&out.y1);
    if let Some(e) = out.err {
        yerr.copy_from_slice(&e);
    }
}

/// The dfdx face's scaled error of a candidate step.
fn dfdx_face_scaled_error<A: Real>(r: &PidRun<A>, y: &[A], y1: &[A], yerr: &[A]) -> A {
    let (rtol, atol) = r.tolerances();
    dfdx_step::scaled_error(y, y1, yerr, rtol, atol)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ode::controller::{Constant, InitialStep, Pid};
    use crate::ode::fixtures::{ExpDecay, ForcedDecay, Linear, LotkaVolterra, VanDerPol};
    use crate::ode::tableau::Solver;

    /// Tolerances of this file, in one place. `CLOSED_FORM_*`: a tight PID solve against an
    /// exact solution; `ORDER_SLACK`: allowed deviation of a measured convergence order from the
    /// method's order; `ROUND_TRIP`: forward-then-backward with rtol 1e-10.
    const CLOSED_FORM_F64: f64 = 1e-7;
    /// Second-order methods need ~1/sqrt(rtol) steps; they get rtol 1e-8 and this bound.
    const CLOSED_FORM_ORDER2: f64 = 1e-5;
    const CLOSED_FORM_F32: f64 = 1e-4;
    const ORDER_SLACK: f64 = 0.25;
    const ROUND_TRIP: f64 = 1e-8;

    fn opts() -> SolveOptions {
        SolveOptions::default()
    }

    fn bad_name(r: Result<Solution<f64>>) -> &'static str {
        match r {
            Err(Error::InvalidHyper { name, .. }) => name,
            other => panic!("expected InvalidHyper, got {other:?}"),
        }
    }

    /// Error at t = 2 of the damped rotation (alpha 0.5, omega 1, y0 = [1, 0]) with a constant
    /// step `dt`: the max-norm distance to the closed form.
    fn linear_error(m: Solver, dt: f64) -> f64 {
        let l = Linear::damped_rotation(0.5, 1.0).unwrap();
        let sol = solve(
            &l,
            &Integration::new(&m.tableau(), &Controller::constant(dt).unwrap(), 0.0, 2.0)
                .with_options(opts()),
            &[1.0, 0.0],
        )
        .unwrap();
        let exact = Linear::damped_rotation_exact(0.5, 1.0, [1.0, 0.0], 2.0);
        (sol.y_final[0] - exact[0])
            .abs()
            .max((sol.y_final[1] - exact[1]).abs())
    }

    #[test]
    fn every_method_converges_at_its_order_on_the_linear_problem() {
        // Halving dt divides the global error by ~2^p: measured order = log2(e(dt)/e(dt/2)).
        // Step sizes chosen per order so the finest error stays well above rounding (~1e-15).
        for m in Solver::ALL {
            let p = m.tableau().order() as f64;
            let dts: [f64; 3] = if p >= 5.0 {
                [0.4, 0.2, 0.1]
            } else {
                [0.1, 0.05, 0.025]
            };
            let errs: Vec<f64> = dts.iter().map(|&dt| linear_error(m, dt)).collect();
            let orders: Vec<f64> = errs.windows(2).map(|w| (w[0] / w[1]).log2()).collect();
            eprintln!("{m}: errors {errs:?}, measured orders {orders:?} (expected {p})");
            let last = *orders.last().unwrap();
            assert!(
                (last - p).abs() < ORDER_SLACK,
                "{m}: measured order {last}, expected {p}"
            );
        }
    }

    #[test]
    fn every_method_solves_every_fixture_and_keeps_stats_consistent() {
        // One routine, every method x every fixture (diffsol's test_models pattern).
        let lin = Linear::damped_rotation(0.5, 1.0).unwrap();
        let lv = LotkaVolterra::new(1.5, 1.0, 3.0, 1.0).unwrap();
        let vdp = VanDerPol::new(1.0).unwrap();
        let fd = ForcedDecay::new(0.7, 2.0).unwrap();
        let ed = ExpDecay::new(1.3).unwrap();
        let fields: [(&str, &dyn VectorField<f64>, Vec<f64>); 5] = [
            ("linear", &lin, vec![1.0, 0.0]),
            ("lotka_volterra", &lv, vec![1.0, 1.0]),
            ("van_der_pol", &vdp, vec![2.0, 0.0]),
            ("forced_decay", &fd, vec![1.5, -0.5, 0.0]),
            ("exp_decay", &ed, vec![1.0, 2.0]),
        ];
        for m in Solver::ALL {
            // Second-order pairs have a first-order error estimate: a tolerance of 1e-6 would
            // need more than max_steps steps on Lotka-Volterra.
            let ctl = match m.tableau().order() {
                1 => Controller::constant(0.01).unwrap(),
                2 => Controller::pid(1e-4, 1e-6).unwrap(),
                _ => Controller::pid(1e-6, 1e-8).unwrap(),
            };
            for (name, f, y0) in &fields {
                let sol = solve(
                    *f,
                    &Integration::new(&m.tableau(), &ctl, 0.0, 3.0).with_options(opts()),
                    y0,
                )
                .unwrap();
                let s = sol.stats;
                assert_eq!(
                    s.num_steps,
                    s.num_accepted_steps + s.num_rejected_steps,
                    "{m}/{name}"
                );
                assert_eq!(sol.ts.len(), s.num_accepted_steps, "{m}/{name}");
                assert_eq!(sol.ys.len(), sol.ts.len(), "{m}/{name}");
                assert_eq!(sol.ts.last(), Some(&3.0), "{m}/{name}");
                assert_eq!(sol.ys.last(), Some(&sol.y_final), "{m}/{name}");
                assert!(
                    sol.ts.windows(2).all(|w| w[0] < w[1]),
                    "{m}/{name}: times increase"
                );
                assert!(sol.y_final.iter().all(|v| v.is_finite()), "{m}/{name}");
            }
        }
    }

    #[test]
    fn adaptive_methods_match_closed_forms() {
        let ed = ExpDecay::new(1.3).unwrap();
        let fd = ForcedDecay::new(0.7, 2.0).unwrap();
        for m in Solver::ALL.into_iter().filter(|m| *m != Solver::Euler) {
            let (ctl, tol) = if m.tableau().order() == 2 {
                (Controller::pid(1e-8, 1e-10).unwrap(), CLOSED_FORM_ORDER2)
            } else {
                (Controller::pid(1e-10, 1e-12).unwrap(), CLOSED_FORM_F64)
            };
            let o = SolveOptions {
                max_steps: 100_000,
                save_steps: false,
                ..Default::default()
            };
            let sol = solve(
                &ed,
                &Integration::new(&m.tableau(), &ctl, 0.0, 2.0).with_options(o),
                &[1.0],
            )
            .unwrap();
            let err = (sol.y_final[0] - ed.exact(1.0, 2.0)).abs();
            assert!(err < tol, "{m} decay: {err:e}");
            let sol = solve(
                &fd,
                &Integration::new(&m.tableau(), &ctl, 0.0, 2.0).with_options(o),
                &[1.5],
            )
            .unwrap();
            let err = (sol.y_final[0] - fd.exact(1.5, 2.0)).abs();
            assert!(err < tol, "{m} forced: {err:e}");
            assert!(
                sol.ts.is_empty() && sol.ys.is_empty(),
                "save_steps = false saves nothing"
            );
        }
    }

    #[test]
    fn f32_solve_matches_the_closed_form_to_f32_accuracy() {
        let ed = ExpDecay::new(1.3).unwrap();
        let sol = solve(
            &ed,
            &Integration::new(
                &Tableau::tsit5(),
                &Controller::pid(1e-5, 1e-7).unwrap(),
                0.0f32,
                2.0f32,
            )
            .with_options(opts()),
            &[1.0f32],
        )
        .unwrap();
        assert!(((sol.y_final[0] as f64) - ed.exact(1.0, 2.0)).abs() < CLOSED_FORM_F32);
        assert_eq!(sol.ts.last(), Some(&2.0f32));
    }

    #[test]
    fn accepted_steps_have_scaled_error_below_one_and_rejected_at_least_one() {
        let lv = LotkaVolterra::new(1.5, 1.0, 3.0, 1.0).unwrap();
        for m in [
            Solver::Heun,
            Solver::Ralston,
            Solver::Bosh3,
            Solver::Tsit5,
            Solver::Dopri5,
        ] {
            let mut events = Vec::new();
            let rtol = if m.tableau().order() == 2 { 1e-4 } else { 1e-6 };
            let sol = solve_observed(
                &lv,
                &Integration::new(
                    &m.tableau(),
                    &Controller::pid(rtol, rtol * 1e-2).unwrap(),
                    0.0,
                    5.0,
                )
                .with_options(opts()),
                &[1.0, 1.0],
                |e| events.push(*e),
            )
            .unwrap();
            assert_eq!(events.len(), sol.stats.num_steps);
            assert!(
                sol.stats.num_rejected_steps > 0,
                "{m}: the LV case rejects some steps"
            );
            for e in &events {
                let se = e.scaled_error.unwrap();
                assert_eq!(e.accepted, se < 1.0, "{m}: step {e:?}");
            }
        }
    }

    #[test]
    fn backward_solve_is_the_time_reversed_forward_solve_bit_for_bit() {
        let fd = ForcedDecay::new(0.7, 2.0).unwrap();
        for ctl in [
            Controller::pid(1e-6, 1e-8).unwrap(),
            Controller::constant(0.1).unwrap(),
        ] {
            let back_ctl = match ctl {
                Controller::Constant(_) => Controller::constant(-0.1).unwrap(),
                c => c,
            };
            let back = solve(
                &fd,
                &Integration::new(&Tableau::tsit5(), &back_ctl, 1.0, -2.0).with_options(opts()),
                &[0.3],
            )
            .unwrap();
            let fwd = solve(
                &Reversed(&fd),
                &Integration::new(&Tableau::tsit5(), &ctl, -1.0, 2.0).with_options(opts()),
                &[0.3],
            )
            .unwrap();
            assert_eq!(back.ys, fwd.ys);
            assert_eq!(back.ts, fwd.ts.iter().map(|t| -t).collect::<Vec<_>>());
            assert_eq!(back.ts.last(), Some(&-2.0));
            assert_eq!(back.stats, fwd.stats);
        }
    }

    #[test]
    fn forward_then_backward_solve_returns_to_the_initial_state() {
        let lv = LotkaVolterra::new(1.5, 1.0, 3.0, 1.0).unwrap();
        let ctl = Controller::pid(1e-10, 1e-12).unwrap();
        let o = SolveOptions {
            max_steps: 100_000,
            save_steps: false,
            ..Default::default()
        };
        let fwd = solve(
            &lv,
            &Integration::new(&Tableau::dopri5(), &ctl, 0.0, 3.0).with_options(o),
            &[1.0, 1.0],
        )
        .unwrap();
        let back = solve(
            &lv,
            &Integration::new(&Tableau::dopri5(), &ctl, 3.0, 0.0).with_options(o),
            &fwd.y_final,
        )
        .unwrap();
        for (got, want) in back.y_final.iter().zip([1.0, 1.0]) {
            assert!((got - want).abs() < ROUND_TRIP, "{got} vs {want}");
        }
    }

    #[test]
    fn pid_without_dt0_starts_with_exactly_0p01_like_diffrax() {
        let ed = ExpDecay::new(1.0).unwrap();
        let sol = solve(
            &ed,
            &Integration::new(
                &Tableau::tsit5(),
                &Controller::pid(1e-6, 1e-8).unwrap(),
                0.0,
                1.0,
            )
            .with_options(opts()),
            &[1.0],
        )
        .unwrap();
        assert_eq!(sol.ts[0], 0.01);
        // Backward: the first step ends at t0 - 0.01.
        let sol = solve(
            &ed,
            &Integration::new(
                &Tableau::tsit5(),
                &Controller::pid(1e-6, 1e-8).unwrap(),
                1.0,
                0.0,
            )
            .with_options(opts()),
            &[1.0],
        )
        .unwrap();
        assert_eq!(sol.ts[0], -(-1.0 + 0.01));
    }

    #[test]
    fn hairer_initial_step_is_used_when_selected() {
        let ed = ExpDecay::new(1.0).unwrap();
        let pid = Pid::new(1e-3, 1e-6)
            .unwrap()
            .initial_step(InitialStep::Hairer);
        let sol = solve(
            &ed,
            &Integration::new(&Tableau::tsit5(), &Controller::Pid(pid), 0.0, 1.0)
                .with_options(opts()),
            &[1.0],
        )
        .unwrap();
        let (mut a, mut b, mut c) = ([0.0], [0.0], [0.0]);
        let start = crate::ode::controller::SolveStart {
            t0: 0.0,
            y0: &[1.0],
            rtol: 1e-3,
            atol: 1e-6,
            order: 5,
        };
        let h = crate::ode::controller::hairer_initial_step(&ed, start, &mut a, &mut b, &mut c);
        assert_eq!(sol.ts[0], h);
        assert_ne!(h, 0.01);
    }

    #[test]
    fn first_step_longer_than_the_interval_ends_exactly_at_t1() {
        let ed = ExpDecay::new(1.0).unwrap();
        let sol = solve(
            &ed,
            &Integration::new(
                &Tableau::heun(),
                &Controller::constant(5.0).unwrap(),
                0.0,
                0.3,
            )
            .with_options(opts()),
            &[1.0],
        )
        .unwrap();
        assert_eq!(sol.ts, vec![0.3]);
        let pid = Pid::new(1e-3, 1e-6).unwrap().dt0(Some(5.0)).unwrap();
        let sol = solve(
            &ed,
            &Integration::new(&Tableau::heun(), &Controller::Pid(pid), 0.0, 0.3)
                .with_options(opts()),
            &[1.0],
        )
        .unwrap();
        assert_eq!(sol.ts.last(), Some(&0.3));
    }

    #[test]
    fn constant_steps_with_a_non_multiple_interval_shrink_later_steps_and_hit_t1() {
        // n = ceil(1/0.3) = 4 steps: 0.3, then 1*2/4... via the reciprocal rule, then exactly 1.
        let ed = ExpDecay::new(1.0).unwrap();
        let sol = solve(
            &ed,
            &Integration::new(
                &Tableau::midpoint(),
                &Controller::constant(0.3).unwrap(),
                0.0,
                1.0,
            )
            .with_options(opts()),
            &[1.0],
        )
        .unwrap();
        assert_eq!(sol.ts, vec![0.3, 0.5, 0.75, 1.0]);
    }

    #[test]
    fn a_step_ending_within_100_ulps_of_t1_is_snapped_to_t1() {
        // Constant step whose second endpoint t0 + 2*dt0 lands 1 ULP below t1... built directly:
        // dt0 = t1/2 - tiny so that n = 2 and the first step is ~t1/2; the snap is exercised by
        // a PID step proposing t1 - 1 ULP.
        let f = |_t: f64, _y: &[f64], dy: &mut [f64]| dy[0] = 0.0;
        let t1 = 1.0f64;
        let almost = t1 - 3.0 * f64::EPSILON / 2.0; // 3 ULPs below 1.0
        let pid = Pid::new(1e-3, 1e-6).unwrap().dt0(Some(almost)).unwrap();
        let sol = solve(
            &f,
            &Integration::new(&Tableau::heun(), &Controller::Pid(pid), 0.0, t1)
                .with_options(opts()),
            &[1.0],
        )
        .unwrap();
        // The first step ends at `almost` (the initial step is only clipped by min(., t1)); the
        // next proposal (almost + 10*almost) is beyond t1 - 100 ULPs and becomes exactly t1.
        assert_eq!(sol.ts, vec![almost, t1]);
    }

    #[test]
    fn t0_equal_t1_returns_y0_after_zero_steps() {
        let ed = ExpDecay::new(1.0).unwrap();
        let sol = solve(
            &ed,
            &Integration::new(
                &Tableau::tsit5(),
                &Controller::pid(1e-6, 1e-8).unwrap(),
                2.0,
                2.0,
            )
            .with_options(opts()),
            &[3.0],
        )
        .unwrap();
        assert_eq!(sol.y_final, vec![3.0]);
        assert_eq!(sol.stats, Stats::default());
        assert!(sol.ts.is_empty());
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let ed = ExpDecay::new(1.0).unwrap();
        let t5 = Tableau::tsit5();
        let pid = Controller::pid(1e-6, 1e-8).unwrap();
        let run = |ctl: &Controller, t0: f64, t1: f64, y0: &[f64]| {
            solve(
                &ed,
                &Integration::new(&t5, ctl, t0, t1).with_options(opts()),
                y0,
            )
        };
        assert_eq!(bad_name(run(&pid, 0.0, 1.0, &[])), "y0");
        assert_eq!(bad_name(run(&pid, 0.0, 1.0, &[f64::NAN])), "y0");
        assert_eq!(bad_name(run(&pid, 0.0, 1.0, &[1.0, f64::INFINITY])), "y0");
        assert_eq!(bad_name(run(&pid, f64::NAN, 1.0, &[1.0])), "t0");
        assert_eq!(bad_name(run(&pid, 0.0, f64::INFINITY, &[1.0])), "t1");
        assert_eq!(
            bad_name(run(&Controller::constant(-0.1).unwrap(), 0.0, 1.0, &[1.0])),
            "dt0"
        );
        assert_eq!(
            bad_name(run(&Controller::constant(0.1).unwrap(), 1.0, 0.0, &[1.0])),
            "dt0"
        );
        assert_eq!(
            bad_name(run(
                &Controller::Constant(Constant { dt0: 0.0 }),
                0.0,
                1.0,
                &[1.0]
            )),
            "dt0"
        );
        assert_eq!(
            bad_name(run(
                &Controller::Constant(Constant { dt0: f64::NAN }),
                0.0,
                1.0,
                &[1.0]
            )),
            "dt0"
        );
        let neg = Pid::new(1e-6, 1e-8).unwrap().dt0(Some(-0.1)).unwrap();
        assert_eq!(
            bad_name(run(&Controller::Pid(neg), 0.0, 1.0, &[1.0])),
            "dt0"
        );
        assert_eq!(
            bad_name(solve(
                &ed,
                &Integration::new(&Tableau::euler(), &pid, 0.0, 1.0).with_options(opts()),
                &[1.0]
            )),
            "controller"
        );
        // A controller built as a literal with an invalid field is re-validated.
        let lit = Controller::Pid(Pid {
            rtol: -1.0,
            ..Pid::new(1e-6, 1e-8).unwrap()
        });
        assert_eq!(bad_name(run(&lit, 0.0, 1.0, &[1.0])), "rtol");
        // A dt0 that underflows in f32.
        let tiny = Controller::constant(1e-50).unwrap();
        assert!(matches!(
            solve(
                &ed,
                &Integration::new(&t5, &tiny, 0.0f32, 1.0).with_options(opts()),
                &[1.0f32]
            ),
            Err(Error::InvalidHyper { name: "dt0", .. })
        ));
        // The field's declared dimension is checked.
        let lin = Linear::damped_rotation(0.5, 1.0).unwrap();
        assert!(matches!(
            solve(
                &lin,
                &Integration::new(&t5, &pid, 0.0, 1.0).with_options(opts()),
                &[1.0]
            ),
            Err(Error::ShapeMismatch { .. })
        ));
    }

    #[test]
    fn max_steps_overrun_is_an_error_not_a_hang() {
        let ed = ExpDecay::new(1.0).unwrap();
        let o = SolveOptions {
            max_steps: 3,
            save_steps: true,
            ..Default::default()
        };
        let r = solve(
            &ed,
            &Integration::new(
                &Tableau::heun(),
                &Controller::constant(0.1).unwrap(),
                0.0,
                1.0,
            )
            .with_options(o),
            &[1.0],
        );
        assert_eq!(
            r,
            Err(Error::MaxStepsExceeded {
                max_steps: 3,
                t: 0.30000000000000004,
                t_end: 1.0
            })
        );
        // Exactly enough steps is fine: 10 steps of 0.1.
        let o = SolveOptions {
            max_steps: 10,
            save_steps: true,
            ..Default::default()
        };
        assert!(solve(
            &ed,
            &Integration::new(
                &Tableau::heun(),
                &Controller::constant(0.1).unwrap(),
                0.0,
                1.0
            )
            .with_options(o),
            &[1.0]
        )
        .is_ok());
        // max_steps = 0 fails immediately unless there is nothing to do.
        let o = SolveOptions {
            max_steps: 0,
            save_steps: true,
            ..Default::default()
        };
        assert!(matches!(
            solve(
                &ed,
                &Integration::new(
                    &Tableau::heun(),
                    &Controller::constant(0.1).unwrap(),
                    0.0,
                    1.0
                )
                .with_options(o),
                &[1.0]
            ),
            Err(Error::MaxStepsExceeded { .. })
        ));
    }

    #[test]
    fn a_nan_field_under_pid_rejects_until_max_steps_without_panicking() {
        let f = |_t: f64, _y: &[f64], dy: &mut [f64]| dy[0] = f64::NAN;
        let r = solve(
            &f,
            &Integration::new(
                &Tableau::dopri5(),
                &Controller::pid(1e-6, 1e-8).unwrap(),
                0.0,
                1.0,
            )
            .with_options(opts()),
            &[1.0],
        );
        assert!(
            matches!(
                r,
                Err(Error::MaxStepsExceeded {
                    max_steps: 4096,
                    ..
                })
            ),
            "{r:?}"
        );
    }

    #[test]
    fn a_nan_field_under_a_constant_step_propagates_nan_like_diffrax() {
        let f = |t: f64, y: &[f64], dy: &mut [f64]| dy[0] = if t > 0.5 { f64::NAN } else { -y[0] };
        let sol = solve(
            &f,
            &Integration::new(
                &Tableau::heun(),
                &Controller::constant(0.1).unwrap(),
                0.0,
                1.0,
            )
            .with_options(opts()),
            &[1.0],
        )
        .unwrap();
        assert!(sol.y_final[0].is_nan());
        assert_eq!(sol.stats.num_steps, 10);
    }

    #[test]
    fn an_infinite_vector_field_value_is_rejected_and_the_step_shrinks() {
        // f is inf beyond t = 0.5: the error is inf (or NaN -> inf) so those steps are rejected,
        // and the solve ends at max_steps rather than accepting an infinite state.
        let f =
            |t: f64, y: &[f64], dy: &mut [f64]| dy[0] = if t > 0.5 { f64::INFINITY } else { -y[0] };
        let mut accepted_beyond = false;
        let r = solve_observed(
            &f,
            &Integration::new(
                &Tableau::bosh3(),
                &Controller::pid(1e-6, 1e-8).unwrap(),
                0.0,
                1.0,
            )
            .with_options(SolveOptions {
                max_steps: 200,
                save_steps: false,
                ..Default::default()
            }),
            &[1.0],
            |e| {
                if e.accepted && e.t_end > 0.5 {
                    accepted_beyond = true;
                }
            },
        );
        assert!(matches!(r, Err(Error::MaxStepsExceeded { .. })));
        assert!(!accepted_beyond);
    }
}
