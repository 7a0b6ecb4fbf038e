//! Wrong ways to differentiate through a solve, each a [`GradientSubject`] of its own: the
//! gradient laws of `laws::ode` must catch every one.
//!
//! - [`DropThetaOfStage`]: one Runge–Kutta stage's parameter cotangent is lost (a stage that
//!   sees a detached copy of `theta`): the finite-difference laws catch it.
//! - [`StoreEveryState`], [`UniformSegments`]: checkpointing schedules that reverse correctly
//!   (bit-identical gradients) but store more than the binomial bound: the memory law catches
//!   them.
//! - [`CompressedCheckpoints`]: the binomial schedule with every checkpoint rounded to f32: the
//!   bitwise law (checkpointed equals full tape) catches it.

use crate::backend::{device, taped_leaf, taped_reuse, taped_vjp, Taped};
use crate::laws::ode::{GradProblem, GradientSubject};
use crate::ode::checkpoint::{binomial, Binomial, Schedule, Sweep};
use crate::ode::grad::{self, DiffField, GradMode, Gradient, ManualVjp};
use crate::reference::Result;
use std::cell::RefCell;

/// Differentiates with stage `stage`'s contribution to `dL/dtheta` dropped in every step.
#[derive(Debug, Clone, Copy)]
pub struct DropThetaOfStage(pub usize);

impl GradientSubject for DropThetaOfStage {
    fn gradient(
        &self,
        field: &dyn DiffField,
        p: &GradProblem<'_>,
        mode: GradMode,
    ) -> Result<Gradient> {
        let wrapped = StageVjpOnTape {
            field,
            drop_theta_of: self.0,
            kept: RefCell::new(Vec::new()),
        };
        scheduled(&wrapped, p, mode, &Binomial)
    }
}

/// A field whose per-evaluation vector–Jacobian product is taken on dfdx's tape, one
/// evaluation at a time, so that each stage's cotangents are separate; the `theta` cotangent
/// of stage `drop_theta_of` is discarded.
struct StageVjpOnTape<'a> {
    field: &'a dyn DiffField,
    drop_theta_of: usize,
    /// `(t, y)` of the evaluation kept in each slot (slot = stage index).
    kept: RefCell<Vec<(f64, Vec<f64>)>>,
}

impl DiffField for StageVjpOnTape<'_> {
    fn dim(&self) -> usize {
        self.field.dim()
    }
    fn theta(&self) -> Vec<f64> {
        self.field.theta()
    }
    fn eval(&self, t: f64, y: &[f64], theta: &[f64], dy: &mut [f64]) {
        self.field.eval(t, y, theta, dy)
    }
    fn eval_taped(&self, t: f64, y: Taped, theta: Taped) -> Taped {
        self.field.eval_taped(t, y, theta)
    }
    fn manual_vjp(&self) -> Option<&dyn ManualVjp> {
        Some(self)
    }
}

impl ManualVjp for StageVjpOnTape<'_> {
    fn eval_kept(&self, slot: usize, t: f64, y: &[f64], theta: &[f64], dy: &mut [f64]) {
        let mut kept = self.kept.borrow_mut();
        if kept.len() <= slot {
            kept.resize(slot + 1, (0.0, Vec::new()));
        }
        kept[slot] = (t, y.to_vec());
        self.field.eval(t, y, theta, dy);
    }
    fn vjp_kept(
        &self,
        slot: usize,
        theta: &[f64],
        fbar: &[f64],
        ybar: &mut [f64],
        thetabar: &mut [f64],
    ) {
        let (t, y) = self.kept.borrow()[slot].clone();
        let dev = device();
        let (y_leaf, th_leaf) = (taped_leaf(&dev, &y), taped_leaf(&dev, theta));
        let f = self
            .field
            .eval_taped(t, taped_reuse(&y_leaf), taped_reuse(&th_leaf));
        let g = taped_vjp(f, fbar, Vec::new(), &[&y_leaf, &th_leaf]);
        ybar.copy_from_slice(&g[0]);
        if slot != self.drop_theta_of {
            for (acc, v) in thetabar.iter_mut().zip(&g[1]) {
                *acc += v;
            }
        }
    }
}

/// The reference gradient with `schedule` driving its checkpointed form.
fn scheduled(
    field: &dyn DiffField,
    p: &GradProblem<'_>,
    mode: GradMode,
    schedule: &dyn Schedule,
) -> Result<Gradient> {
    grad::gradient_scheduled(field, &p.integration, p.y0, p.w, mode, schedule)
}

/// A checkpointing schedule as a gradient subject (its full tape is the reference's).
macro_rules! schedule_subject {
    ($t:ty) => {
        impl GradientSubject for $t {
            fn gradient(
                &self,
                field: &dyn DiffField,
                p: &GradProblem<'_>,
                mode: GradMode,
            ) -> Result<Gradient> {
                scheduled(field, p, mode, self)
            }
        }
    };
}

/// Ignores its budget: stores every state `y_0 .. y_{n-1}` in one forward sweep, then reverses.
/// Correct gradients, `n` states of memory.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreEveryState;

impl Schedule for StoreEveryState {
    fn run(&self, n: usize, _c: usize, sweep: &mut dyn Sweep) {
        for k in 0..n {
            if k > 0 {
                sweep.advance(k - 1, k);
            }
            sweep.store(k);
        }
        for k in (0..n).rev() {
            sweep.restore(k);
            sweep.reverse(k);
            sweep.discard(k);
        }
    }
}
schedule_subject!(StoreEveryState);

/// The two-level uniform schedule: `c` checkpoints at the starts of segments of
/// `L = ceil(n/c)` steps, and in reverse a whole segment's states stored at once
/// (`c + L - 1` states): correct gradients, more memory than the binomial bound.
#[derive(Debug, Clone, Copy, Default)]
pub struct UniformSegments;

impl Schedule for UniformSegments {
    fn run(&self, n: usize, c: usize, sweep: &mut dyn Sweep) {
        let seg = n.div_ceil(c.max(1)).max(1);
        let nseg = n.div_ceil(seg);
        for s in 0..nseg {
            if s > 0 {
                sweep.advance((s - 1) * seg, s * seg);
            }
            sweep.store(s * seg);
        }
        for s in (0..nseg).rev() {
            let (start, end) = (s * seg, ((s + 1) * seg).min(n));
            sweep.restore(start);
            for k in start + 1..end {
                sweep.advance(k - 1, k);
                sweep.store(k);
            }
            for k in (start..end).rev() {
                sweep.restore(k);
                sweep.reverse(k);
                sweep.discard(k);
            }
        }
    }
}
schedule_subject!(UniformSegments);

/// The binomial schedule storing each checkpoint rounded to f32 ("compressed checkpoints"):
/// the states recomputed from a checkpoint drift from the exact ones.
#[derive(Debug, Clone, Copy, Default)]
pub struct CompressedCheckpoints;

/// A sweep whose stores round the working state to f32 first.
struct RoundingSweep<'a>(&'a mut dyn Sweep);

impl Sweep for RoundingSweep<'_> {
    fn advance(&mut self, from: usize, to: usize) {
        self.0.advance(from, to)
    }
    fn store(&mut self, at: usize) {
        for v in self.0.state_mut() {
            *v = *v as f32 as f64;
        }
        self.0.store(at)
    }
    fn restore(&mut self, at: usize) {
        self.0.restore(at)
    }
    fn discard(&mut self, at: usize) {
        self.0.discard(at)
    }
    fn reverse(&mut self, k: usize) {
        self.0.reverse(k)
    }
    fn state_mut(&mut self) -> &mut [f64] {
        self.0.state_mut()
    }
}

impl Schedule for CompressedCheckpoints {
    fn run(&self, n: usize, c: usize, sweep: &mut dyn Sweep) {
        binomial(n, c, &mut RoundingSweep(sweep))
    }
}
schedule_subject!(CompressedCheckpoints);
