//! Wrong continuous normalising flows, each written out on its own from the reference's
//! building blocks ([`flow::block_solve`], [`flow::log_normal`]): the CNF laws must catch every
//! one.
//!
//! - [`FlowBug::ForwardBlockOrder`]: the log-likelihood runs the blocks first to last instead of
//!   last to first (caught by the round trip and the closed form on linear fields).
//! - [`FlowBug::DeltaNotCarried`]: the log-density change restarts at 0 in every block, so only
//!   the last block's change counts (caught by normalisation with two blocks).
//! - [`FlowBug::TraceSignFlipped`]: the change of log-density has the wrong sign (caught by the
//!   closed form and normalisation).
//! - [`DetachedTrace`] / [`loss_and_grad_detached_trace`]: the trace's cotangent is dropped in
//!   the hand-written VJP (what first-order autodiff through a trace computed as a constant
//!   gives): `d tr / d theta` lost (caught by the loss gradient's finite differences and by the
//!   hand-written VJP against the tape).

use crate::backend::{Real, Taped};
use crate::cnf::flow::{self, LossGrad};
use crate::cnf::{CnfParams, TrainBlock};
use crate::ode::grad::{DiffField, GradMode, ManualVjp};
use crate::reference::Result;

/// Which bookkeeping of the flow is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowBug {
    /// The blocks are integrated in forward order when computing `log p(x)` (the reverse solve must
    /// run the last block first).
    ForwardBlockOrder,
    /// Each block's log-density change is not added to the one carried in from the blocks before
    /// it.
    DeltaNotCarried,
    /// The trace term enters the log-density with the wrong sign.
    TraceSignFlipped,
}

/// Fix the log-density part (`delta`, after the `n x d` state) of `after`, one block's output,
/// as the bug would: `before` is the block's input.
fn corrupt_delta(bug: FlowBug, nd: usize, before: &[f64], after: &mut [f64]) {
    match bug {
        FlowBug::DeltaNotCarried => {
            for (a, b) in after[nd..].iter_mut().zip(&before[nd..]) {
                *a -= *b;
            }
        }
        FlowBug::TraceSignFlipped => {
            for (a, b) in after[nd..].iter_mut().zip(&before[nd..]) {
                *a = *b + *b - *a;
            }
        }
        FlowBug::ForwardBlockOrder => {}
    }
}

/// `log p(x)` per point (exact trace) with `bug`; the reference is [`flow::log_likelihood`].
pub fn log_likelihood(bug: FlowBug, params: &CnfParams<f64>, x: &[f64]) -> Result<Vec<f64>> {
    let cfg = &params.cfg;
    let d = cfg.data_size;
    let n = flow::check_batch(cfg, x, None)?;
    let mut z = x.to_vec();
    z.resize(n * (d + 1), 0.0);
    let order: Vec<usize> = match bug {
        FlowBug::ForwardBlockOrder => (0..cfg.blocks).collect(),
        _ => (0..cfg.blocks).rev().collect(),
    };
    for b in order {
        let mut next = flow::block_solve(params, b, n, None, flow::Span::towards_base(cfg), &z)?;
        corrupt_delta(bug, n * d, &z, &mut next);
        z = next;
    }
    Ok((0..n)
        .map(|i| z[n * d + i] + flow::log_normal(&z[i * d..(i + 1) * d]))
        .collect())
}

/// Samples pushed forward with `bug`'s bookkeeping of the log-density (the block order of
/// sampling is the reference's: [`FlowBug::ForwardBlockOrder`] is a bug of the log-likelihood):
/// `(x, log p(x))`; the reference is [`flow::sample`].
pub fn sample(bug: FlowBug, params: &CnfParams<f64>, z: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
    let cfg = &params.cfg;
    let d = cfg.data_size;
    let n = flow::check_batch(cfg, z, None)?;
    let mut s = z.to_vec();
    s.resize(n * (d + 1), 0.0);
    for b in 0..cfg.blocks {
        let mut next = flow::block_solve(params, b, n, None, flow::Span::towards_data(cfg), &s)?;
        corrupt_delta(bug, n * d, &s, &mut next);
        s = next;
    }
    let lp = (0..n)
        .map(|i| flow::log_normal(&z[i * d..(i + 1) * d]) - s[n * d + i])
        .collect();
    s.truncate(n * d);
    Ok((s, lp))
}

/// The log-likelihood of `bug` as the laws' function type ([`crate::laws::cnf::Ll`]).
pub fn ll(bug: FlowBug) -> crate::laws::cnf::Ll {
    match bug {
        FlowBug::ForwardBlockOrder => |p, x| log_likelihood(FlowBug::ForwardBlockOrder, p, x),
        FlowBug::DeltaNotCarried => |p, x| log_likelihood(FlowBug::DeltaNotCarried, p, x),
        FlowBug::TraceSignFlipped => |p, x| log_likelihood(FlowBug::TraceSignFlipped, p, x),
    }
}

/// A block field whose hand-written VJP ignores the cotangent of the trace (the last `n`
/// components of the augmented state's derivative), in `A` (f32 or f64).
pub struct DetachedTrace<A: Real = f64>(pub TrainBlock<A>);

impl<A: Real> DiffField<A> for DetachedTrace<A> {
    fn dim(&self) -> usize {
        self.0.dim()
    }
    fn theta(&self) -> Vec<A> {
        self.0.theta()
    }
    fn eval(&self, t: A, y: &[A], theta: &[A], dy: &mut [A]) {
        self.0.eval(t, y, theta, dy)
    }
    fn eval_taped(&self, t: f64, y: Taped, theta: Taped) -> Taped {
        self.0.eval_taped(t, y, theta)
    }
    fn manual_vjp(&self) -> Option<&dyn ManualVjp<A>> {
        Some(self)
    }
}

impl<A: Real> ManualVjp<A> for DetachedTrace<A> {
    fn eval_kept(&self, slot: usize, t: A, y: &[A], theta: &[A], dy: &mut [A]) {
        self.0.eval_kept(slot, t, y, theta, dy)
    }
    fn vjp_kept(&self, slot: usize, theta: &[A], fbar: &[A], ybar: &mut [A], thetabar: &mut [A]) {
        let nd = self.0.n * self.0.layout.data_size;
        let mut detached = fbar.to_vec();
        detached[nd..].fill(A::zero());
        self.0.vjp_kept(slot, theta, &detached, ybar, thetabar)
    }
}

/// [`flow::loss_and_grad`] with every block differentiated as [`DetachedTrace`] (in `A`).
pub fn loss_and_grad_detached_trace<A: Real>(
    params: &CnfParams<A>,
    x: &[A],
    probes: Option<&[A]>,
    mode: GradMode,
) -> Result<LossGrad<A>> {
    flow::loss_and_grad_with(params, x, probes, mode, DetachedTrace)
}
