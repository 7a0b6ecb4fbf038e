//! # Gradients through a solve: discretise-then-optimise, full tape or checkpointed
//!
//! For `L = <w, y(t1)>` with `w = dL/dy(t1)` given, [`gradient`] returns `dL/dy0` and
//! `dL/dtheta` for a field with parameters `theta` ([`DiffField`]). The forward [`solve`] (any
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
//! construction:
//! - [`GradMode::FullTape`] stores every state `y_0..y_{n-1}`: `n` states.
//! - [`GradMode::Checkpointed`] stores the states at the starts of `c` uniform segments of
//!   length `L = ceil(n/c)`; in reverse it recomputes one segment's states from its checkpoint
//!   and sweeps it. Peak: `c + L` states plus the one-step graph. The default budget is diffrax's
//!   `RecursiveCheckpointAdjoint` default, `floor(-1.5 + sqrt(2*max_steps + 0.25)) + 1`
//!   ([`default_checkpoints`]; 90 for `max_steps = 4096`). Unlike diffrax's online binomial
//!   (revolve) schedule, segments are uniform (two levels), so the peak is `c + ceil(n/c)`
//!   states rather than revolve's optimum; the recomputation cost is one extra forward pass.
//!
//! Both forms also hold the accepted step times (`n + 1` f64, in a growing vector of capacity
//! at most `2(n + 1)`), which the forward solve reports one by one.
//!
//! Guarantees: `w`, `y0` and `theta` of the wrong length are [`crate::Error::ShapeMismatch`];
//! non-finite `w`, `y0`, `theta` or times are [`crate::Error::InvalidHyper`]; solve errors
//! (max_steps, bad controller) propagate. `y_final` returned is the recomputed state, equal bit
//! for bit to [`solve`]'s for forward (`t1 > t0`) solves.
//!
//! # References
//! - P. Kidger, diffrax 0.7.2 `RecursiveCheckpointAdjoint` (`_adjoint.py`) and equinox's
//!   `checkpointed_while_loop` (default checkpoint count).
//! - A. Griewank, A. Walther, "Algorithm 799: revolve: an implementation of checkpointing for
//!   the reverse or adjoint mode of computational differentiation", *ACM TOMS* 26(1), 2000.
//!
//! ```
//! use harness::ode::fixtures::LotkaVolterra;
//! use harness::ode::grad::{gradient, GradMode};
//! use harness::ode::{Controller, SolveOptions, Solver};
//! let lv = LotkaVolterra::new(1.5, 1.0, 3.0, 1.0)?;
//! let run = |mode| {
//!     gradient(&lv, &Solver::Tsit5.tableau(), &Controller::pid(1e-6, 1e-8)?, 0.0, 1.0,
//!              &[1.0, 1.0], &[1.0, 0.0], mode, &SolveOptions::default())
//! };
//! let full = run(GradMode::FullTape)?;
//! let ckpt = run(GradMode::Checkpointed { checkpoints: Some(3) })?;
//! assert_eq!(full.d_y0, ckpt.d_y0); // bit for bit
//! assert_eq!(full.d_theta, ckpt.d_theta);
//! assert_eq!(full.d_theta.len(), 4); // alpha, beta, gamma, delta
//! # Ok::<(), harness::Error>(())
//! ```

use super::fixtures::{Linear, LotkaVolterra};
use super::problem::VectorField;
use super::solve::{solve_observed, SolveOptions};
use super::tableau::Tableau;
use super::Controller;
use crate::backend::{
    device, taped_gather, taped_leaf, taped_matvec, taped_mul_const, taped_reuse, taped_split,
    taped_vjp, Tape64, Taped,
};
use crate::{Error, Result};

/// A vector field `f(t, y; theta)` differentiable in `y` and `theta` through dfdx's tape.
pub trait DiffField {
    /// State length.
    fn dim(&self) -> usize;
    /// The parameters the gradient is taken with respect to (flat).
    fn theta(&self) -> Vec<f64>;
    /// Write `f(t, y; theta)` into `dy` (plain f64).
    fn eval(&self, t: f64, y: &[f64], theta: &[f64], dy: &mut [f64]);
    /// `f(t, y; theta)` as a taped dfdx computation (same maths as [`DiffField::eval`]).
    fn eval_taped(&self, t: f64, y: Taped, theta: Taped) -> Taped;
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

/// A [`DiffField`] at fixed parameters, as a plain [`VectorField`] for the forward solve.
struct AtTheta<'a, F: ?Sized> {
    field: &'a F,
    theta: &'a [f64],
}

impl<F: DiffField + ?Sized> VectorField<f64> for AtTheta<'_, F> {
    fn eval(&self, t: f64, y: &[f64], dy: &mut [f64]) {
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
    /// Store `checkpoints` segment starts (default [`default_checkpoints`]`(max_steps)`) and
    /// recompute one segment at a time: `c + ceil(n/c)` states.
    Checkpointed { checkpoints: Option<usize> },
}

/// diffrax's default checkpoint count, `floor(-1.5 + sqrt(2*max_steps + 0.25)) + 1`.
pub fn default_checkpoints(max_steps: usize) -> usize {
    ((-1.5 + (2.0 * max_steps as f64 + 0.25).sqrt()).floor() as i64 + 1).max(1) as usize
}

/// Gradients of `L = <w, y(t1)>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Gradient {
    /// `dL/dy0`.
    pub d_y0: Vec<f64>,
    /// `dL/dtheta`.
    pub d_theta: Vec<f64>,
    /// The state at `t1`, recomputed along the accepted times.
    pub y_final: Vec<f64>,
    /// Accepted step times `t_0 .. t_n`.
    pub ts: Vec<f64>,
    /// Checkpoints used (`n` for the full tape).
    pub checkpoints: usize,
}

/// The gradient of `<w, y(t1)>` with respect to `y0` and `field.theta()`; see the module docs.
#[allow(clippy::too_many_arguments)]
pub fn gradient<F: DiffField + ?Sized>(
    field: &F,
    tableau: &Tableau,
    controller: &Controller,
    t0: f64,
    t1: f64,
    y0: &[f64],
    w: &[f64],
    mode: GradMode,
    opts: &SolveOptions,
) -> Result<Gradient> {
    gradient_impl(
        field,
        tableau,
        controller,
        t0,
        t1,
        y0,
        Cotangent::Given(w),
        mode,
        opts,
        None,
    )
}

/// The gradient of a loss `L(y(t1))` whose cotangent `dL/dy(t1)` depends on the final state:
/// `cotangent(y_final)` is called once, after the forward pass and before the reverse sweep
/// (saves the extra forward solve that computing `y(t1)` first would cost). Otherwise as
/// [`gradient`]; a cotangent of the wrong length or non-finite is an error.
#[allow(clippy::too_many_arguments)]
pub fn gradient_of<F: DiffField + ?Sized>(
    field: &F,
    tableau: &Tableau,
    controller: &Controller,
    t0: f64,
    t1: f64,
    y0: &[f64],
    cotangent: impl FnOnce(&[f64]) -> Result<Vec<f64>>,
    mode: GradMode,
    opts: &SolveOptions,
) -> Result<Gradient> {
    gradient_impl(
        field,
        tableau,
        controller,
        t0,
        t1,
        y0,
        Cotangent::Of(Box::new(cotangent)),
        mode,
        opts,
        None,
    )
}

/// `dL/dy(t1)`: given, or computed from `y(t1)`.
enum Cotangent<'a> {
    Given(&'a [f64]),
    Of(Box<dyn FnOnce(&[f64]) -> Result<Vec<f64>> + 'a>),
}

impl Cotangent<'_> {
    fn resolve(self, y_final: &[f64]) -> Result<Vec<f64>> {
        let w = match self {
            Cotangent::Given(w) => w.to_vec(),
            Cotangent::Of(f) => f(y_final)?,
        };
        check_input("w", &w, y_final.len())?;
        Ok(w)
    }
}

/// Deliberately wrong variants of [`gradient`], for showing that the gradient laws can fail.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// Stage `i` sees a detached copy of `theta` (its `theta` contribution is dropped).
    DropThetaOfStage(usize),
    /// Checkpoints are stored rounded to f32 ("compressed checkpoints").
    RoundCheckpointsToF32,
}

/// [`gradient`] with a [`Mutation`] applied.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn gradient_mutant<F: DiffField + ?Sized>(
    field: &F,
    tableau: &Tableau,
    controller: &Controller,
    t0: f64,
    t1: f64,
    y0: &[f64],
    w: &[f64],
    mode: GradMode,
    opts: &SolveOptions,
    mutation: Mutation,
) -> Result<Gradient> {
    gradient_impl(
        field,
        tableau,
        controller,
        t0,
        t1,
        y0,
        Cotangent::Given(w),
        mode,
        opts,
        Some(mutation),
    )
}

fn check_input(name: &'static str, v: &[f64], want: usize) -> Result<()> {
    if v.len() != want {
        return Err(Error::ShapeMismatch {
            leaf: name.into(),
            expected: vec![want],
            got: vec![v.len()],
        });
    }
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(Error::InvalidHyper {
            name,
            value: format!("{:?} at index {i}", v[i]),
            expected: "every element must be finite".into(),
        });
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn gradient_impl<F: DiffField + ?Sized>(
    field: &F,
    tab: &Tableau,
    controller: &Controller,
    t0: f64,
    t1: f64,
    y0: &[f64],
    w: Cotangent<'_>,
    mode: GradMode,
    opts: &SolveOptions,
    mutation: Option<Mutation>,
) -> Result<Gradient> {
    let drop_stage = match mutation {
        Some(Mutation::DropThetaOfStage(i)) => Some(i),
        _ => None,
    };
    let round_ckpt = mutation == Some(Mutation::RoundCheckpointsToF32);
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
    solve_observed(&at, tab, controller, t0, t1, y0, &fwd_opts, |ev| {
        if ev.accepted {
            ts.push(ev.t_end);
        }
    })?;
    let n = ts.len() - 1;
    let mut stepper = Stepper::new(field, tab, &theta);
    // Reverse sweep state.
    let mut lambda;
    let mut g_theta = vec![0.0; theta.len()];
    let mut y_final = y0.to_vec();
    let checkpoints;
    match mode {
        GradMode::FullTape => {
            checkpoints = n;
            let mut states = Vec::with_capacity(n * d);
            let mut y = y0.to_vec();
            for k in 0..n {
                states.extend_from_slice(&y);
                stepper.step(ts[k], ts[k + 1], &mut y);
            }
            y_final = y;
            lambda = w.resolve(&y_final)?;
            for k in (0..n).rev() {
                step_vjp(
                    field,
                    tab,
                    ts[k],
                    ts[k + 1],
                    &states[k * d..(k + 1) * d],
                    &theta,
                    &mut lambda,
                    &mut g_theta,
                    drop_stage,
                );
            }
        }
        GradMode::Checkpointed { checkpoints: c } => {
            let c = c
                .unwrap_or_else(|| default_checkpoints(opts.max_steps))
                .clamp(1, n.max(1));
            checkpoints = c;
            let seg = n.div_ceil(c).max(1);
            let nseg = n.div_ceil(seg);
            let mut ckpt = Vec::with_capacity(nseg * d);
            let mut y = y0.to_vec();
            for k in 0..n {
                if k % seg == 0 {
                    if round_ckpt {
                        ckpt.extend(y.iter().map(|&v| v as f32 as f64));
                    } else {
                        ckpt.extend_from_slice(&y);
                    }
                }
                stepper.step(ts[k], ts[k + 1], &mut y);
            }
            if n > 0 {
                y_final = y;
            }
            lambda = w.resolve(&y_final)?;
            let mut states = Vec::with_capacity(seg * d);
            for s in (0..nseg).rev() {
                let (start, end) = (s * seg, ((s + 1) * seg).min(n));
                states.clear();
                let mut y = ckpt[s * d..(s + 1) * d].to_vec();
                for k in start..end {
                    states.extend_from_slice(&y);
                    if k + 1 < end {
                        stepper.step(ts[k], ts[k + 1], &mut y);
                    }
                }
                for k in (start..end).rev() {
                    let i = k - start;
                    step_vjp(
                        field,
                        tab,
                        ts[k],
                        ts[k + 1],
                        &states[i * d..(i + 1) * d],
                        &theta,
                        &mut lambda,
                        &mut g_theta,
                        drop_stage,
                    );
                }
            }
        }
    }
    Ok(Gradient {
        d_y0: lambda,
        d_theta: g_theta,
        y_final,
        ts,
        checkpoints,
    })
}

/// One explicit RK step in plain f64, with the arithmetic of [`super::solve`]'s loop.
struct Stepper<'a, F: ?Sized> {
    field: &'a F,
    theta: &'a [f64],
    c: Vec<f64>,
    a: Vec<Vec<f64>>,
    b: Vec<f64>,
    fsal: bool,
    fs: Vec<f64>,
    ytmp: Vec<f64>,
}

impl<'a, F: DiffField + ?Sized> Stepper<'a, F> {
    fn new(field: &'a F, tab: &Tableau, theta: &'a [f64]) -> Self {
        let st = tab.stages();
        let d = field.dim();
        Stepper {
            field,
            theta,
            c: tab.c().to_vec(),
            a: (0..st).map(|i| tab.a(i).to_vec()).collect(),
            b: tab.b().to_vec(),
            fsal: tab.fsal(),
            fs: vec![0.0; st * d],
            ytmp: vec![0.0; d],
        }
    }

    /// `y <- step(tprev, tnext, y)`.
    fn step(&mut self, tprev: f64, tnext: f64, y: &mut [f64]) {
        let d = y.len();
        let st = self.c.len();
        let dt = tnext - tprev;
        self.field.eval(tprev, y, self.theta, &mut self.fs[..d]);
        for i in 1..st {
            let (done, rest) = self.fs.split_at_mut(i * d);
            for m in 0..d {
                let mut acc = 0.0;
                for (j, &aij) in self.a[i].iter().enumerate() {
                    acc += aij * (dt * done[j * d + m]);
                }
                self.ytmp[m] = y[m] + acc;
            }
            let ti = if self.c[i] == 1.0 {
                tnext
            } else {
                tprev + self.c[i] * dt
            };
            self.field.eval(ti, &self.ytmp, self.theta, &mut rest[..d]);
        }
        if self.fsal {
            y.copy_from_slice(&self.ytmp);
        } else {
            for (m, ym) in y.iter_mut().enumerate() {
                let mut acc = 0.0;
                for (i, &bi) in self.b.iter().enumerate() {
                    acc += bi * (dt * self.fs[i * d + m]);
                }
                *ym += acc;
            }
        }
    }
}

/// `y(t_n)` along fixed times `ts` from `y0` with parameters `theta` (the map whose derivative
/// [`gradient`] computes; the finite-difference law perturbs its inputs).
pub fn forward_on_times<F: DiffField + ?Sized>(
    field: &F,
    tab: &Tableau,
    ts: &[f64],
    y0: &[f64],
    theta: &[f64],
) -> Vec<f64> {
    let mut stepper = Stepper::new(field, tab, theta);
    let mut y = y0.to_vec();
    for k in 0..ts.len().saturating_sub(1) {
        stepper.step(ts[k], ts[k + 1], &mut y);
    }
    y
}

/// One step's VJP on a taped one-step graph: `lambda <- (dy_{k+1}/dy_k)^T lambda`,
/// `g_theta += (dy_{k+1}/dtheta)^T lambda`.
#[allow(clippy::too_many_arguments)]
fn step_vjp<F: DiffField + ?Sized>(
    field: &F,
    tab: &Tableau,
    tprev: f64,
    tnext: f64,
    y: &[f64],
    theta: &[f64],
    lambda: &mut Vec<f64>,
    g_theta: &mut [f64],
    drop_stage: Option<usize>,
) {
    let dev = device();
    let dt = tnext - tprev;
    let y_leaf = taped_leaf(&dev, y);
    let th_leaf = taped_leaf(&dev, theta);
    let st = tab.stages();
    let mut parked: Vec<Tape64> = Vec::with_capacity(st);
    let mut fs: Vec<Taped> = Vec::with_capacity(st);
    let theta_for = |i: usize| {
        if drop_stage == Some(i) {
            taped_leaf(&dev, theta) // a fresh id: this stage's theta gradient is lost
        } else {
            taped_reuse(&th_leaf)
        }
    };
    let mut last_input = None;
    for i in 0..st {
        let mut yi = taped_reuse(&y_leaf);
        for (j, &aij) in tab.a(i).iter().enumerate() {
            if aij != 0.0 {
                yi = yi + taped_reuse(&fs[j]) * (aij * dt);
            }
        }
        let ti = if i == 0 {
            tprev
        } else if tab.c()[i] == 1.0 {
            tnext
        } else {
            tprev + tab.c()[i] * dt
        };
        if i == st - 1 && tab.fsal() {
            // y_{k+1} is the last stage's input; the last stage does not affect it.
            last_input = Some(yi);
            break;
        }
        let fi = field.eval_taped(ti, yi, theta_for(i));
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
    let mut g = taped_vjp(y_next, lambda, parked, &[&y_leaf, &th_leaf]);
    let gt = g.pop().unwrap_or_default();
    *lambda = g.pop().unwrap_or_default();
    for (acc, v) in g_theta.iter_mut().zip(gt) {
        *acc += v;
    }
}
