//! # Gradients through a solve: discretise-then-optimise, full tape or checkpointed
//!
//! For `L = <w, y(t1)>` with `w = dL/dy(t1)` given, [`gradient`] returns `dL/dy0` and
//! `dL/dtheta` for a field with parameters `theta` ([`DiffField`]). The forward [`solve`](super::solve()) (any
//! tableau, any controller) fixes the accepted step times `t_0 < ... < t_n` (step-size decisions
//! are not differentiated, as in diffrax); the states `y_k` along those times are recomputed by
//! one plain-f64 Runge–Kutta step function ([`forward_on_times`]), and a reverse sweep applies
//! each step's vector-Jacobian product, computed by dfdx's tape on a one-step graph: trace `y_k`
//! and `theta`, build the stages `k_i = f(t_k + c_i dt, y_k + dt sum_j a_ij k_j)` and
//! `y_{k+1} = y_k + dt sum_i b_i k_i` (FSAL tableaus: the last stage's input, as diffrax), and
//! back-propagate `sum(lambda_{k+1} * y_{k+1})` to get `lambda_k = dL/dy_k` and the step's
//! `dL/dtheta` contribution, accumulated in reverse step order.
//!
//! Two forms share that per-step VJP and the accumulation order, so they are bit-identical by
//! construction (the states are recomputed by the same deterministic step function):
//! - [`GradMode::FullTape`] stores every state `y_0..y_{n-1}`: `n` states, `n` forward steps.
//! - [`GradMode::Checkpointed`] runs the offline binomial (revolve) schedule of
//!   [`checkpoint`] with a budget of `c` checkpoints: the forward solve has fixed `n`, so the
//!   optimal schedule is known before the sweep. With the repetition number `t` (the least `t`
//!   with `n <= beta(c, t) = C(c+t, c)`), it takes `F(n, c) = t n - beta(c+1, t-1)` forward
//!   steps, the fewest any schedule with `c` stored states can (Griewank–Walther), plus one to
//!   recompute `y_n`: [`Gradient::forward_steps`]` = 1 + F(n, c)`. Peak: the `c` checkpoints (a
//!   stack allocated once, `c x dim` f64), the working state, `y_final`, `lambda` and the
//!   one-step graph — no segment buffer, nothing growing with `n` but the step times. The
//!   default budget is diffrax's `RecursiveCheckpointAdjoint` default,
//!   `floor(-1.5 + sqrt(2*max_steps + 0.25)) + 1` ([`default_checkpoints`]; 90 for
//!   `max_steps = 4096`), chosen so that `beta(c, 2) = (c+1)(c+2)/2 >= max_steps`: every
//!   solve that fits in `max_steps` is reversed with each step recomputed at most twice
//!   (`t <= 2`), so `forward_steps <= 2n`. diffrax schedules online (it does not know `n` in
//!   advance); the bound on stored states is the same.
//!
//! A field with a hand-written vector–Jacobian product ([`DiffField::manual_vjp`], e.g. the
//! CNF's [`crate::cnf::adjoint`]) is differentiated without dfdx: each step's stages are
//! evaluated keeping what the field's VJP needs, and the step's reverse mode is written out
//! (`kbar_i = dt b_i lambda`, then from the last stage down `zbar_i = J_i^T kbar_i`, `lambda +=
//! zbar_i`, `kbar_j += dt a_ij zbar_i`); both forms and every schedule use it alike, so the
//! bitwise equality of full tape and checkpointing is unchanged.
//!
//! Both forms also hold the accepted step times (`n + 1` f64, in a growing vector of capacity
//! at most `2(n + 1)`), which the forward solve reports one by one.
//!
//! Guarantees: `w`, `y0` and `theta` of the wrong length are [`crate::Error::ShapeMismatch`];
//! non-finite `w`, `y0`, `theta` or times are [`crate::Error::InvalidHyper`]; solve errors
//! (max_steps, bad controller) propagate. `y_final` returned is the recomputed state, equal bit
//! for bit to [`solve`](super::solve())'s for forward (`t1 > t0`) solves.
//!
//! # References
//! - P. Kidger, diffrax 0.7.2 `RecursiveCheckpointAdjoint` (`_adjoint.py`) and equinox's
//!   `checkpointed_while_loop` (default checkpoint count).
//! - A. Griewank, "Achieving logarithmic growth of temporal and spatial complexity in reverse
//!   automatic differentiation", *Optimization Methods and Software* 1(1), 1992.
//! - A. Griewank, A. Walther, "Algorithm 799: revolve: an implementation of checkpointing for
//!   the reverse or adjoint mode of computational differentiation", *ACM TOMS* 26(1), 2000.
//!
//! ```
//! use harness_reference::ode::fixtures::LotkaVolterra;
//! use harness_reference::ode::grad::{gradient, GradMode};
//! use harness_reference::ode::{Controller, Integration, Solver};
//! let lv = LotkaVolterra::new(1.5, 1.0, 3.0, 1.0)?;
//! let (tsit5, pid) = (Solver::Tsit5.tableau(), Controller::pid(1e-6, 1e-8)?);
//! let run = |mode| {
//!     gradient(&lv, &Integration::new(&tsit5, &pid, 0.0, 1.0), &[1.0, 1.0], &[1.0, 0.0], mode)
//! };
//! let full = run(GradMode::FullTape)?;
//! let ckpt = run(GradMode::Checkpointed { checkpoints: Some(3) })?;
//! assert_eq!(full.d_y0, ckpt.d_y0); // bit for bit
//! assert_eq!(full.d_theta, ckpt.d_theta);
//! assert_eq!(full.d_theta.len(), 4); // alpha, beta, gamma, delta
//! # Ok::<(), harness_reference::Error>(())
//! ```

use super::checkpoint;
use super::fixtures::{Linear, LotkaVolterra};
use super::problem::VectorField;
use super::solve::Integration;
use super::solve::{solve_observed, SolveOptions};
use super::stepper::{RkStep, StepSpan};
use super::tableau::Tableau;
use super::Controller;
use crate::backend::{
    device, taped_gather, taped_leaf, taped_matvec, taped_mul_const, taped_reuse, taped_split,
    taped_vjp, Real, Tape64, Taped,
};
use crate::{Error, Result};

/// A vector field `f(t, y; theta)` differentiable in `y` and `theta` through dfdx's tape, in
/// the arithmetic type `A` (f32 or f64; f64 unless named).
///
/// The tape is f64 whatever `A` is: [`DiffField::eval_taped`] is built on widened values, and
/// the taped sweep rounds each step's cotangents back to `A` (for `A = f64` both conversions
/// are the identity).
pub trait DiffField<A: Real = f64> {
    /// State length.
    fn dim(&self) -> usize;
    /// The parameters the gradient is taken with respect to (flat).
    fn theta(&self) -> Vec<A>;
    /// Write `f(t, y; theta)` into `dy` (plain arithmetic in `A`).
    fn eval(&self, t: A, y: &[A], theta: &[A], dy: &mut [A]);
    /// `f(t, y; theta)` as a taped dfdx computation (same maths as [`DiffField::eval`], in f64).
    fn eval_taped(&self, t: f64, y: Taped, theta: Taped) -> Taped;
    /// A hand-written VJP of one evaluation, if the field has one: the reverse sweep then
    /// differentiates each step by [`ManualVjp`] instead of building a dfdx graph.
    fn manual_vjp(&self) -> Option<&dyn ManualVjp<A>> {
        None
    }
}

/// A field's vector–Jacobian product written by hand, evaluated where the forward pass was:
/// the step's stages are evaluated with [`ManualVjp::eval_kept`] (slot `i` for stage `i`) and
/// then differentiated in reverse stage order with [`ManualVjp::vjp_kept`] on the same slot.
/// Everything is in the field's arithmetic type `A`.
pub trait ManualVjp<A = f64> {
    /// `f(t, y; theta)` into `dy`, keeping in `slot` what [`ManualVjp::vjp_kept`] needs.
    fn eval_kept(&self, slot: usize, t: A, y: &[A], theta: &[A], dy: &mut [A]);
    /// At the evaluation kept in `slot`: `ybar = (df/dy)^T fbar` (overwritten) and
    /// `thetabar += (df/dtheta)^T fbar`.
    fn vjp_kept(&self, slot: usize, theta: &[A], fbar: &[A], ybar: &mut [A], thetabar: &mut [A]);
}

/// `theta` = `A` row-major; `f = A y` (a dfdx matmul).
impl DiffField for Linear {
    fn dim(&self) -> usize {
        self.n()
    }
    fn theta(&self) -> Vec<f64> {
        self.matrix().to_vec()
    }
    fn eval(&self, _t: f64, y: &[f64], theta: &[f64], dy: &mut [f64]) {
        let n = self.n();
        for (i, out) in dy.iter_mut().enumerate().take(n) {
            let mut acc = 0.0;
            for (j, &yj) in y.iter().enumerate().take(n) {
                acc += theta[i * n + j] * yj;
            }
            *out = acc;
        }
    }
    fn eval_taped(&self, _t: f64, y: Taped, theta: Taped) -> Taped {
        taped_matvec(theta, self.n(), self.n(), y)
    }
}

/// `theta = [alpha, beta, gamma, delta]`; `f = [alpha x - beta x p, delta x p - gamma p]`.
impl DiffField for LotkaVolterra {
    fn dim(&self) -> usize {
        2
    }
    fn theta(&self) -> Vec<f64> {
        vec![self.alpha, self.beta, self.gamma, self.delta]
    }
    fn eval(&self, _t: f64, y: &[f64], th: &[f64], dy: &mut [f64]) {
        let (x, p) = (y[0], y[1]);
        dy[0] = th[0] * x - th[1] * x * p;
        dy[1] = th[3] * x * p - th[2] * p;
    }
    fn eval_taped(&self, _t: f64, y: Taped, theta: Taped) -> Taped {
        // xp = y * swap(y) = [x p, p x]; f = [alpha, -gamma] * y + [-beta, delta] * xp
        let swapped = taped_gather(taped_reuse(&y), &[1, 0]);
        let xp = taped_reuse(&y) * swapped;
        let lin = taped_mul_const(taped_gather(taped_reuse(&theta), &[0, 2]), &[1.0, -1.0]);
        let quad = taped_mul_const(taped_gather(theta, &[1, 3]), &[-1.0, 1.0]);
        lin * y + quad * xp
    }
}

/// `f = 0` on `R^d` (step placement of constant-step solves).
struct ZeroField(usize);

impl<A: Real> VectorField<A> for ZeroField {
    fn eval(&self, _t: A, _y: &[A], dy: &mut [A]) {
        dy.fill(A::zero());
    }
    fn dim(&self) -> Option<usize> {
        Some(self.0)
    }
}

/// A [`DiffField`] at fixed parameters, as a plain [`VectorField`] for the forward solve.
struct AtTheta<'a, A, F: ?Sized> {
    field: &'a F,
    theta: &'a [A],
}

impl<A: Real, F: DiffField<A> + ?Sized> VectorField<A> for AtTheta<'_, A, F> {
    fn eval(&self, t: A, y: &[A], dy: &mut [A]) {
        self.field.eval(t, y, self.theta, dy)
    }
    fn dim(&self) -> Option<usize> {
        Some(self.field.dim())
    }
}

/// How the reverse sweep gets the states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GradMode {
    /// Store every state: `n` states.
    FullTape,
    /// Store at most `checkpoints` states (default [`default_checkpoints`]`(max_steps)`; clamped
    /// to `[1, n]`) and recompute the others by the binomial schedule of [`checkpoint`].
    Checkpointed {
        /// The state budget, or `None` for [`default_checkpoints`]`(max_steps)`.
        checkpoints: Option<usize>,
    },
}

/// diffrax's default checkpoint count, `floor(-1.5 + sqrt(2*max_steps + 0.25)) + 1`.
pub fn default_checkpoints(max_steps: usize) -> usize {
    ((-1.5 + (2.0 * max_steps as f64 + 0.25).sqrt()).floor() as i64 + 1).max(1) as usize
}

/// Gradients of `L = <w, y(t1)>`, in the field's arithmetic type `A`.
#[derive(Debug, Clone, PartialEq)]
pub struct Gradient<A = f64> {
    /// `dL/dy0`.
    pub d_y0: Vec<A>,
    /// `dL/dtheta`.
    pub d_theta: Vec<A>,
    /// The state at `t1`, recomputed along the accepted times.
    pub y_final: Vec<A>,
    /// Accepted step times `t_0 .. t_n`.
    pub ts: Vec<A>,
    /// Checkpoints used (`n` for the full tape).
    pub checkpoints: usize,
    /// Plain Runge–Kutta steps evaluated by the gradient (the forward solve not counted): `n`
    /// for the full tape, `1 + F(n, c)` ([`checkpoint::forward_cost`]) when checkpointed —
    /// the schedule's forward steps plus the step from `y_{n-1}` to `y_final`.
    pub forward_steps: usize,
}

/// The gradient of `<w, y(t1)>` with respect to `y0` and `field.theta()`; see the module docs.
pub fn gradient<A: Real, F: DiffField<A> + ?Sized>(
    field: &F,
    integration: &Integration<'_, A>,
    y0: &[A],
    w: &[A],
    mode: GradMode,
) -> Result<Gradient<A>> {
    gradient_impl(
        field,
        integration,
        y0,
        Cotangent::Given(w),
        mode,
        &checkpoint::Binomial,
    )
}

/// The gradient of a loss `L(y(t1))` whose cotangent `dL/dy(t1)` depends on the final state:
/// `cotangent(y_final)` is called once, when the reverse sweep reaches the last step (saves the
/// extra forward solve that computing `y(t1)` first would cost). Otherwise as [`gradient`]; a
/// cotangent of the wrong length or non-finite is an error, as is an error it returns.
pub fn gradient_of<A: Real, F: DiffField<A> + ?Sized>(
    field: &F,
    integration: &Integration<'_, A>,
    y0: &[A],
    cotangent: impl FnOnce(&[A]) -> Result<Vec<A>>,
    mode: GradMode,
) -> Result<Gradient<A>> {
    gradient_impl(
        field,
        integration,
        y0,
        Cotangent::Of(Box::new(cotangent)),
        mode,
        &checkpoint::Binomial,
    )
}

/// `dL/dy(t1)`: given, or computed from `y(t1)`.
enum Cotangent<'a, A> {
    Given(&'a [A]),
    Of(CotangentFn<'a, A>),
}

/// A cotangent computed from the final state.
type CotangentFn<'a, A> = Box<dyn FnOnce(&[A]) -> Result<Vec<A>> + 'a>;

/// [`gradient`] with the checkpointed form driven by `schedule` instead of the binomial one
/// (`mode` = [`GradMode::Checkpointed`]; the full tape ignores it). Any schedule that reverses
/// every step once, in order `n-1, ..., 0`, gives the same gradient bit for bit; its memory is
/// what it stores.
pub fn gradient_scheduled<A: Real, F: DiffField<A> + ?Sized>(
    field: &F,
    integration: &Integration<'_, A>,
    y0: &[A],
    w: &[A],
    mode: GradMode,
    schedule: &dyn checkpoint::Schedule<A>,
) -> Result<Gradient<A>> {
    gradient_impl(field, integration, y0, Cotangent::Given(w), mode, schedule)
}

fn check_input<A: Real>(name: &'static str, v: &[A], want: usize) -> Result<()> {
    if v.len() != want {
        return Err(Error::ShapeMismatch {
            leaf: name.into(),
            expected: vec![want],
            got: vec![v.len()],
        });
    }
    if let Some(i) = v.iter().position(|x| !x.as_f64().is_finite()) {
        return Err(Error::InvalidHyper {
            name,
            value: format!("{:?} at index {i}", v[i]),
            expected: "every element must be finite".into(),
        });
    }
    Ok(())
}

fn gradient_impl<A: Real, F: DiffField<A> + ?Sized>(
    field: &F,
    integration: &Integration<'_, A>,
    y0: &[A],
    w: Cotangent<'_, A>,
    mode: GradMode,
    schedule: &dyn checkpoint::Schedule<A>,
) -> Result<Gradient<A>> {
    let Integration {
        tableau: tab,
        controller,
        t0,
        options,
        ..
    } = *integration;
    let opts = &options;
    let d = field.dim();
    check_input("y0", y0, d)?;
    if let Cotangent::Given(w) = &w {
        check_input("w", w, d)?;
    }
    let theta = field.theta();
    check_input("theta", &theta, theta.len())?;
    // Forward solve: only the accepted times are kept.
    let mut ts = vec![t0];
    let fwd_opts = SolveOptions {
        save_steps: false,
        ..*opts
    };
    let at = AtTheta {
        field,
        theta: &theta,
    };
    let record = |ev: &crate::ode::StepEvent<A>| {
        if ev.accepted {
            ts.push(ev.t_end);
        }
    };
    match controller {
        // A constant step's times do not depend on the state: place them with a zero field of
        // the same dimension instead of paying for a forward pass that the sweep repeats.
        Controller::Constant(_) => {
            let zero = ZeroField(d);
            solve_observed(&zero, &integration.with_options(fwd_opts), y0, record)?;
        }
        Controller::Pid(_) => {
            solve_observed(&at, &integration.with_options(fwd_opts), y0, record)?;
        }
    }
    let n = ts.len() - 1;
    let checkpoints = match mode {
        GradMode::FullTape => n,
        GradMode::Checkpointed { checkpoints: c } => c
            .unwrap_or_else(|| default_checkpoints(opts.max_steps))
            .clamp(1, n.max(1)),
    };
    let mut sweep = ReverseSweep {
        field,
        tab,
        ts: &ts,
        theta: &theta,
        stepper: Stepper::new(field, tab, &theta),
        stack: Vec::with_capacity(checkpoints * d),
        y: y0.to_vec(),
        y_final: y0.to_vec(),
        lambda: Vec::new(),
        cotangent: Some(w),
        error: None,
        g_theta: vec![A::zero(); theta.len()],
        forward_steps: 0,
    };
    match mode {
        GradMode::FullTape => sweep.full_tape(),
        GradMode::Checkpointed { .. } => schedule.run(n, checkpoints, &mut sweep),
    }
    sweep.resolve(); // n = 0: no reverse step asked for the cotangent
    let ReverseSweep {
        y_final,
        lambda,
        g_theta,
        forward_steps,
        error,
        ..
    } = sweep;
    if let Some(e) = error {
        return Err(e);
    }
    Ok(Gradient {
        d_y0: lambda,
        d_theta: g_theta,
        y_final,
        ts,
        checkpoints,
        forward_steps,
    })
}

/// The reverse sweep's buffers, driven by a checkpoint schedule ([`checkpoint::Sweep`]): the
/// working state `y`, the checkpoint stack (capacity fixed up front: `c` states), the adjoint
/// `lambda = dL/dy_k` and the accumulated `dL/dtheta`.
struct ReverseSweep<'a, 'c, A, F: ?Sized> {
    field: &'a F,
    tab: &'a Tableau,
    ts: &'a [A],
    theta: &'a [A],
    stepper: Stepper<'a, A, F>,
    stack: Vec<A>,
    y: Vec<A>,
    y_final: Vec<A>,
    lambda: Vec<A>,
    g_theta: Vec<A>,
    forward_steps: usize,
    /// Taken when `y_final` is first known (just before the first VJP).
    cotangent: Option<Cotangent<'c, A>>,
    error: Option<Error>,
}

impl<A: Real, F: DiffField<A> + ?Sized> ReverseSweep<'_, '_, A, F> {
    /// Turn the cotangent into `lambda` once `y_final` is known; later VJPs are skipped after
    /// an error.
    fn resolve(&mut self) {
        if let Some(c) = self.cotangent.take() {
            let w = match c {
                Cotangent::Given(w) => Ok(w.to_vec()),
                Cotangent::Of(f) => f(&self.y_final),
            }
            .and_then(|w| check_input("w", &w, self.y_final.len()).map(|()| w));
            match w {
                Ok(w) => self.lambda = w,
                Err(e) => self.error = Some(e),
            }
        }
    }

    /// The full tape, written out on its own (the bitwise law's reference): store
    /// `y_0 .. y_{n-1}` in one sweep, computing `y_n` at its end, then reverse every step.
    fn full_tape(&mut self) {
        let (n, d) = (self.ts.len() - 1, self.y.len());
        for k in 0..n {
            self.stack.extend_from_slice(&self.y);
            self.stepper.step(self.ts[k], self.ts[k + 1], &mut self.y);
            self.forward_steps += 1;
        }
        self.y_final.copy_from_slice(&self.y);
        self.resolve();
        if self.error.is_some() {
            return;
        }
        for k in (0..n).rev() {
            let yk = &self.stack[k * d..(k + 1) * d];
            let at = StepAt {
                tab: self.tab,
                rk: &self.stepper.rk,
                tprev: self.ts[k],
                tnext: self.ts[k + 1],
                y: yk,
                theta: self.theta,
            };
            step_vjp_any(self.field, at, &mut self.lambda, &mut self.g_theta);
        }
    }
}

impl<A: Real, F: DiffField<A> + ?Sized> checkpoint::Sweep<A> for ReverseSweep<'_, '_, A, F> {
    fn advance(&mut self, from: usize, to: usize) {
        for k in from..to {
            self.stepper.step(self.ts[k], self.ts[k + 1], &mut self.y);
        }
        self.forward_steps += to - from;
    }
    fn store(&mut self, _at: usize) {
        self.stack.extend_from_slice(&self.y);
    }
    fn restore(&mut self, _at: usize) {
        let top = self.stack.len() - self.y.len();
        self.y.copy_from_slice(&self.stack[top..]);
    }
    fn discard(&mut self, _at: usize) {
        self.stack.truncate(self.stack.len() - self.y.len());
    }
    fn state_mut(&mut self) -> &mut [A] {
        &mut self.y
    }
    fn reverse(&mut self, k: usize) {
        if k + 2 == self.ts.len() {
            // the last step: y_final = y_n, one more forward step from y_{n-1}
            self.y_final.copy_from_slice(&self.y);
            self.stepper
                .step(self.ts[k], self.ts[k + 1], &mut self.y_final);
            self.forward_steps += 1;
        }
        self.resolve();
        if self.error.is_some() {
            return;
        }
        let at = StepAt {
            tab: self.tab,
            rk: &self.stepper.rk,
            tprev: self.ts[k],
            tnext: self.ts[k + 1],
            y: &self.y,
            theta: self.theta,
        };
        step_vjp_any(self.field, at, &mut self.lambda, &mut self.g_theta);
    }
}

/// One explicit RK step in plain arithmetic (`A`) through the shared [`RkStep`] (the arithmetic
/// of [`super::solve()`]'s loop), with the field's parameters fixed at `theta`.
struct Stepper<'a, A, F: ?Sized> {
    field: &'a F,
    theta: &'a [A],
    rk: RkStep<A>,
    fs: Vec<A>,
    ytmp: Vec<A>,
    y1: Vec<A>,
}

impl<'a, A: Real, F: DiffField<A> + ?Sized> Stepper<'a, A, F> {
    fn new(field: &'a F, tab: &Tableau, theta: &'a [A]) -> Self {
        let d = field.dim();
        Stepper {
            field,
            theta,
            rk: RkStep::new(tab),
            fs: vec![A::zero(); tab.stages() * d],
            ytmp: vec![A::zero(); d],
            y1: vec![A::zero(); d],
        }
    }

    /// `y <- step(tprev, tnext, y)`.
    fn step(&mut self, tprev: A, tnext: A, y: &mut [A]) {
        let (field, theta) = (self.field, self.theta);
        let st = self.rk.stages_len();
        self.rk.stages(
            StepSpan { tprev, tnext, y },
            0..st,
            &mut self.fs,
            &mut self.ytmp,
            &mut |_, t, z, k| field.eval(t, z, theta, k),
        );
        self.rk
            .combine(tnext - tprev, y, &self.fs, &self.ytmp, &mut self.y1);
        y.copy_from_slice(&self.y1);
    }
}

/// `y(t_n)` along fixed times `ts` from `y0` with parameters `theta` (the map whose derivative
/// [`gradient`] computes; the finite-difference law perturbs its inputs).
pub fn forward_on_times<A: Real, F: DiffField<A> + ?Sized>(
    field: &F,
    tab: &Tableau,
    ts: &[A],
    y0: &[A],
    theta: &[A],
) -> Vec<A> {
    let mut stepper = Stepper::new(field, tab, theta);
    let mut y = y0.to_vec();
    for k in 0..ts.len().saturating_sub(1) {
        stepper.step(ts[k], ts[k + 1], &mut y);
    }
    y
}

/// One step of the reverse sweep: from `y = y_k` at `tprev` to `tnext`, with parameters
/// `theta`.
#[derive(Clone, Copy)]
struct StepAt<'a, A> {
    tab: &'a Tableau,
    rk: &'a RkStep<A>,
    tprev: A,
    tnext: A,
    y: &'a [A],
    theta: &'a [A],
}

/// One step's VJP, `lambda <- (dy_{k+1}/dy_k)^T lambda`, `g_theta += (dy_{k+1}/dtheta)^T
/// lambda`: by the field's [`ManualVjp`] when it has one, else on the tape.
fn step_vjp_any<A: Real, F: DiffField<A> + ?Sized>(
    field: &F,
    at: StepAt<'_, A>,
    lambda: &mut Vec<A>,
    g_theta: &mut [A],
) {
    match field.manual_vjp() {
        Some(m) => step_vjp_manual(m, at, lambda, g_theta),
        None => step_vjp(field, at, lambda, g_theta),
    }
}

/// One step's VJP by the field's hand-written [`ManualVjp`] (the reverse mode of the
/// Runge–Kutta step, written out). Forward, with `z_0 = y`:
///
/// ```text
/// k_i = f(t_i, z_i),   z_i = y + sum_{j<i} a_ij (dt k_j),   y' = y + sum_i b_i (dt k_i)
/// ```
///
/// (FSAL tableaus: `y'` is the last stage's input `z_{s-1}`, whose `f` is not needed).
/// Reverse, with `ybar = lambda`: `kbar_i = dt b_i lambda` (or, FSAL, `kbar_j = dt a_{s-1,j}
/// lambda`), then for `i` from the last evaluated stage down to 0: `zbar_i = J_i^T kbar_i`,
/// `ybar += zbar_i`, `kbar_j += dt a_ij zbar_i` for `j < i`, `thetabar += (df/dtheta)_i^T
/// kbar_i`. `lambda <- ybar`.
fn step_vjp_manual<A: Real>(
    m: &dyn ManualVjp<A>,
    at: StepAt<'_, A>,
    lambda: &mut Vec<A>,
    g_theta: &mut [A],
) {
    let StepAt {
        tab,
        rk,
        tprev,
        tnext,
        y,
        theta,
    } = at;
    let d = y.len();
    let dt = tnext - tprev;
    let mut ks = vec![A::zero(); tab.stages() * d];
    let mut z = vec![A::zero(); d];
    // Stages evaluated: all but an FSAL tableau's last.
    let evaluated = rk.evaluated_for_state();
    rk.stages(
        StepSpan { tprev, tnext, y },
        0..evaluated,
        &mut ks,
        &mut z,
        &mut |i, t, z, k| m.eval_kept(i, t, z, theta, k),
    );
    // Cotangents of the stage derivatives from y' (y's own path: ybar = lambda).
    let mut kbar = vec![A::zero(); tab.stages() * d];
    for (j, &wj) in rk.output_weights().iter().enumerate().take(evaluated) {
        if wj != A::zero() {
            for (kb, &l) in kbar[j * d..(j + 1) * d].iter_mut().zip(lambda.iter()) {
                *kb += wj * dt * l;
            }
        }
    }
    let mut ybar = lambda.clone();
    let mut zbar = vec![A::zero(); d];
    for i in (0..evaluated).rev() {
        let (before, this) = kbar.split_at_mut(i * d);
        m.vjp_kept(i, theta, &this[..d], &mut zbar, g_theta);
        for (yb, &zb) in ybar.iter_mut().zip(&zbar) {
            *yb += zb;
        }
        for (j, &aij) in rk.a_row(i).iter().enumerate() {
            if aij != A::zero() {
                for (kb, &zb) in before[j * d..(j + 1) * d].iter_mut().zip(&zbar) {
                    *kb += aij * dt * zb;
                }
            }
        }
    }
    *lambda = ybar;
}

/// One step's VJP on a taped one-step graph. The tape is f64: `y`, `theta`, the times and
/// `lambda` are widened on the way in and the cotangents rounded to `A` on the way out (both
/// exact for `A = f64`).
fn step_vjp<A: Real, F: DiffField<A> + ?Sized>(
    field: &F,
    at: StepAt<'_, A>,
    lambda: &mut Vec<A>,
    g_theta: &mut [A],
) {
    let StepAt {
        tab,
        rk,
        tprev,
        tnext,
        y,
        theta,
    } = at;
    let wide = |v: &[A]| v.iter().map(|x| x.as_f64()).collect::<Vec<f64>>();
    let dev = device();
    let dt = (tnext - tprev).as_f64();
    let y_leaf = taped_leaf(&dev, &wide(y));
    let th_leaf = taped_leaf(&dev, &wide(theta));
    let st = tab.stages();
    let mut parked: Vec<Tape64> = Vec::with_capacity(st);
    let mut fs: Vec<Taped> = Vec::with_capacity(st);
    let mut last_input = None;
    for i in 0..st {
        let mut yi = taped_reuse(&y_leaf);
        for (j, &aij) in tab.a(i).iter().enumerate() {
            if aij != 0.0 {
                yi = yi + taped_reuse(&fs[j]) * (aij * dt);
            }
        }
        let ti = rk.stage_time(i, tprev, tnext).as_f64();
        if i == st - 1 && tab.fsal() {
            // y_{k+1} is the last stage's input; the last stage does not affect it.
            last_input = Some(yi);
            break;
        }
        let fi = field.eval_taped(ti, yi, taped_reuse(&th_leaf));
        let (fi, tape) = taped_split(fi);
        parked.push(tape);
        fs.push(fi);
    }
    let y_next = match last_input {
        Some(y1) => y1,
        None => {
            let mut acc = taped_reuse(&y_leaf);
            for (i, &bi) in tab.b().iter().enumerate() {
                if bi != 0.0 {
                    acc = acc + taped_reuse(&fs[i]) * (bi * dt);
                }
            }
            acc
        }
    };
    let mut g = taped_vjp(y_next, &wide(lambda), parked, &[&y_leaf, &th_leaf]);
    let gt = g.pop().unwrap_or_default();
    *lambda = g
        .pop()
        .unwrap_or_default()
        .into_iter()
        .map(A::of_f64)
        .collect();
    for (acc, v) in g_theta.iter_mut().zip(gt) {
        *acc += A::of_f64(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ode::Solver;

    fn rotation_gradient(n: usize, mode: GradMode) -> Gradient {
        let field = Linear::damped_rotation(0.1, 1.0).unwrap();
        let ctl = Controller::constant(1.0 / n as f64).unwrap();
        let opts = SolveOptions::default();
        let tab = Solver::Tsit5.tableau();
        gradient(
            &field,
            &Integration::new(&tab, &ctl, 0.0, 1.0).with_options(opts),
            &[1.0, 0.5],
            &[0.3, -0.7],
            mode,
        )
        .unwrap()
    }

    #[test]
    fn checkpointed_forward_steps_are_one_plus_the_binomial_cost() {
        for n in 1..=24 {
            let full = rotation_gradient(n, GradMode::FullTape);
            assert_eq!(full.ts.len() - 1, n);
            assert_eq!(full.forward_steps, n, "full tape: one sweep");
            for c in 1..=n + 1 {
                let g = rotation_gradient(
                    n,
                    GradMode::Checkpointed {
                        checkpoints: Some(c),
                    },
                );
                // Closed form (Griewank–Walther): F(n, c) = t n - beta(c+1, t-1), plus the
                // one step from y_{n-1} to y_final.
                let want = 1 + checkpoint::forward_cost(n, c) as usize;
                assert_eq!(g.forward_steps, want, "n={n} c={c}");
                assert_eq!(g.checkpoints, c.min(n));
                assert_eq!(
                    (&g.d_y0, &g.d_theta, &g.y_final),
                    (&full.d_y0, &full.d_theta, &full.y_final)
                );
            }
        }
        // By hand: n = 10, c = 3 has t = 2 (beta(3,1) = 4 < 10 <= beta(3,2) = 10), so
        // F = 2*10 - beta(4,1) = 20 - 5 = 15, and 16 steps in all; c = 1 recomputes
        // 9 + 8 + ... + 0 = 45 steps, 46 in all.
        let g = |c| {
            rotation_gradient(
                10,
                GradMode::Checkpointed {
                    checkpoints: Some(c),
                },
            )
        };
        assert_eq!(g(3).forward_steps, 16);
        assert_eq!(g(1).forward_steps, 46);
    }
}
