//! # The block field on dfdx's tape: the field's dfdx face
//!
//! The reference form of the CNF field and its gradient, the one to read against
//! `docs/ALGORITHMS.md` §6: the same maths as the fast hand-written [`super::field`] and
//! [`super::adjoint`], written with taped dfdx operations so that one ordinary
//! backward pass gives `d/dtheta` and `d/dy` of both `f` and the trace — the trace's own
//! derivative included, because the hand-written tangents `du = (W1 dh) * s`,
//! `dh' = (1 - h'^2) du` are ordinary taped operations (dfdx has no higher-order autodiff; the
//! tangents make it unnecessary). Values used more than once (`W1`, `s`, `h'`) go through a
//! [`Graph`] so each operation is on the tape once.
//!
//! [`TrainBlock`] is a [`DiffField`]: [`crate::ode::grad`] takes it through a solve with the full
//! tape or checkpointing. Its forward values ([`super::flow::TapedField`], the log-density under
//! [`crate::Face::Dfdx`]) and its gradients are held to the fast forms by the laws
//! `cnf_field_faces_agree` and `cnf_hand_vjp_matches_tape`.

use super::adjoint::{self, BackScratch};
use super::config::Layout;
use super::field::{self, Kept, Transposed};
use crate::backend::{
    device, reuse2, taped_add_row, taped_as_matrix, taped_concat, taped_const2, taped_flatten,
    taped_matmul_t, taped_mul_row, taped_one_minus_sq, taped_range, taped_reuse,
    taped_row_dot_const, taped_scale, taped_sigmoid, taped_tanh, Graph, Real, Taped, Taped2,
};
use crate::ode::grad::{DiffField, ManualVjp};
use std::cell::RefCell;
use std::sync::{Arc, Mutex};

/// One block's augmented field over a batch, with its parameters, for gradients, in the
/// arithmetic type `A` (f32 or f64): the forward pass ([`field::forward`]) and the
/// hand-written VJP ([`super::adjoint`]) run in `A`; the taped form
/// ([`DiffField::eval_taped`]) is f64 whatever `A` is.
///
/// ```
/// use harness_reference::cnf::{CnfConfig, CnfParams, TrainBlock};
/// use harness_reference::ode::grad::DiffField;
/// let cfg = CnfConfig { width: 8, depth: 1, blocks: 1, ..CnfConfig::default() };
/// let p = CnfParams::<f32>::init(cfg, 0)?;
/// let block = TrainBlock::new(p.layout.clone(), 2, None, p.blocks[0].clone());
/// let mut dz = [0.0f32; 6];
/// block.eval(0.5, &[0.1, -0.2, 1.0, 0.5, 0.0, 0.0], &p.blocks[0], &mut dz);
/// assert!(dz.iter().all(|v| v.is_finite()));
/// # Ok::<(), harness_reference::Error>(())
/// ```
pub struct TrainBlock<A: Real = f64> {
    /// Offsets of the block's layers inside `theta`.
    pub layout: Layout,
    /// Samples per batch.
    pub n: usize,
    /// Hutchinson probes (`n x d`), or `None` for the exact trace.
    pub probes: Option<Vec<A>>,
    /// The block's flat parameters (`layout.len` values).
    pub theta: Vec<A>,
    /// Differentiate on dfdx's tape instead of by the hand-written VJP of [`super::adjoint`]
    /// (the cross-check of the two).
    #[doc(hidden)]
    pub on_tape: bool,
    work: RefCell<BlockScratch<A>>,
    /// Where `work` goes when the block is dropped.
    pool: Option<Arc<ScratchPool<A>>>,
}

/// The buffers a [`TrainBlock`] writes: one kept evaluation per stage slot, the evaluation
/// outside the gradient's stages, the transposed weights and the backward pass's scratch. Every
/// element is written before it is read, so the values left by an earlier block (of any size)
/// do not change a result.
pub(crate) struct BlockScratch<A> {
    kept: Vec<Kept<A>>,
    scratch: Kept<A>,
    transposed: Transposed<A>,
    back: BackScratch<A>,
}

impl<A: Real> Default for BlockScratch<A> {
    fn default() -> Self {
        BlockScratch {
            kept: Vec::new(),
            scratch: Kept::scratch(),
            transposed: Transposed::default(),
            back: BackScratch::default(),
        }
    }
}

#[cfg(test)]
impl<A: Real> BlockScratch<A> {
    /// Every element of every buffer set to NaN (a stale read then shows in the results).
    pub(super) fn poison(&mut self) {
        self.kept.iter_mut().for_each(Kept::poison);
        self.scratch.poison();
        self.transposed.poison();
        self.back.poison();
    }
}

#[cfg(test)]
impl<A> ScratchPool<A> {
    /// `f` on every held buffer set.
    pub(super) fn each(&self, f: impl FnMut(&mut BlockScratch<A>)) {
        self.held().iter_mut().for_each(f);
    }
}

/// Buffers of dropped training blocks, for the next ones ([`TrainBlock::with_pool`]): a training
/// loop that keeps one pool allocates its blocks' buffers in its first step and reuses them
/// after, instead of allocating and freeing megabytes per step, which leaves every later step's
/// speed to how the allocator serves them (zeroing, page faults).
///
/// ```
/// use harness_reference::cnf::{CnfConfig, CnfParams, TrainBlock, ScratchPool};
/// use harness_reference::ode::grad::DiffField;
/// use std::sync::Arc;
/// let cfg = CnfConfig { width: 8, depth: 1, blocks: 1, ..CnfConfig::default() };
/// let p = CnfParams::<f64>::init(cfg, 0)?;
/// let pool = Arc::new(ScratchPool::default());
/// for _ in 0..2 {
///     let block = TrainBlock::new(p.layout.clone(), 2, None, p.blocks[0].clone())
///         .with_pool(&pool);
///     let mut dz = [0.0; 6];
///     block.eval(0.5, &[0.1, -0.2, 1.0, 0.5, 0.0, 0.0], &p.blocks[0], &mut dz);
/// }
/// assert_eq!(pool.len(), 1); // the second block reused the first one's buffers
/// # Ok::<(), harness_reference::Error>(())
/// ```
pub struct ScratchPool<A>(Mutex<Vec<BlockScratch<A>>>);

impl<A> Default for ScratchPool<A> {
    fn default() -> Self {
        ScratchPool(Mutex::new(Vec::new()))
    }
}

impl<A> ScratchPool<A> {
    /// Buffers held for the next blocks.
    pub fn len(&self) -> usize {
        self.held().len()
    }

    /// Whether no buffers are held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Vec<BlockScratch<A>>> {
        // a block that panicked while holding the lock left whole buffers behind (a push or a
        // pop is all that runs under it)
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<A: Real> TrainBlock<A> {
    /// Block weights `theta` (`layout.len`) over a batch of `n` samples, with Hutchinson
    /// `probes` (`n x d`) or `None` for the exact trace.
    pub fn new(layout: Layout, n: usize, probes: Option<Vec<A>>, theta: Vec<A>) -> Self {
        Self {
            layout,
            n,
            probes,
            theta,
            on_tape: false,
            work: RefCell::new(BlockScratch::default()),
            pool: None,
        }
    }

    /// The same block with its buffers taken from `pool` (if it holds any), and given back to it
    /// when the block is dropped.
    pub fn with_pool(mut self, pool: &Arc<ScratchPool<A>>) -> Self {
        if let Some(work) = pool.held().pop() {
            self.work = RefCell::new(work);
        }
        self.pool = Some(Arc::clone(pool));
        self
    }
}

impl<A: Real> Drop for TrainBlock<A> {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.held().push(std::mem::take(self.work.get_mut()));
        }
    }
}

/// The values of `v` in f64 (exact).
fn wide<A: Real>(v: &[A]) -> Vec<f64> {
    v.iter().map(|x| x.as_f64()).collect()
}

/// `n x d` rows, each the unit vector `e_j`.
fn unit_rows(n: usize, d: usize, j: usize) -> Vec<f64> {
    let mut e = vec![0.0; n * d];
    for row in e.chunks_exact_mut(d) {
        row[j] = 1.0;
    }
    e
}

impl<A: Real> TrainBlock<A> {
    /// The field ([`field::forward`]) into `dy = [f; tr]`, keeping its products in the stage
    /// slot `slot`, or in the scratch evaluation for `None`.
    fn forward(&self, slot: Option<usize>, t: A, y: &[A], theta: &[A], dy: &mut [A]) {
        let (f, tr) = dy.split_at_mut(self.n * self.layout.data_size);
        let probes = self.probes.as_deref();
        let work = &mut *self.work.borrow_mut();
        let kept = match slot {
            Some(slot) => {
                if work.kept.len() <= slot {
                    work.kept.resize_with(slot + 1, Kept::default);
                }
                &mut work.kept[slot]
            }
            None => &mut work.scratch,
        };
        let transposed = &mut work.transposed;
        field::forward(field::ForwardPass {
            layout: &self.layout,
            th: theta,
            n: self.n,
            probes,
            t,
            y,
            f,
            tr,
            kept,
            transposed,
        });
    }
}

impl<A: Real> ManualVjp<A> for TrainBlock<A> {
    fn eval_kept(&self, slot: usize, t: A, y: &[A], theta: &[A], dy: &mut [A]) {
        self.forward(Some(slot), t, y, theta, dy);
    }
    fn vjp_kept(&self, slot: usize, theta: &[A], fbar: &[A], ybar: &mut [A], thetabar: &mut [A]) {
        let work = &mut *self.work.borrow_mut();
        adjoint::backward(adjoint::BackwardPass {
            layout: &self.layout,
            th: theta,
            n: self.n,
            probes: self.probes.as_deref(),
            kept: &work.kept[slot],
            bar: fbar,
            ybar,
            thbar: thetabar,
            sc: &mut work.back,
        });
    }
}

impl<A: Real> DiffField<A> for TrainBlock<A> {
    fn manual_vjp(&self) -> Option<&dyn ManualVjp<A>> {
        if self.on_tape {
            None
        } else {
            Some(self)
        }
    }
    fn dim(&self) -> usize {
        self.n * (self.layout.data_size + 1)
    }
    fn theta(&self) -> Vec<A> {
        self.theta.clone()
    }
    fn eval(&self, t: A, y: &[A], theta: &[A], dy: &mut [A]) {
        self.forward(None, t, y, theta, dy);
    }
    fn eval_taped(&self, t: f64, y: Taped, theta: Taped) -> Taped {
        let dev = device();
        let (n, d) = (self.n, self.layout.data_size);
        let mut g = Graph::new();
        let theta = g.share(theta);
        let th = |off: usize, len: usize| taped_range(taped_reuse(&theta), off, len);
        let mut h: Taped2 = taped_as_matrix(taped_range(y, 0, n * d), n, d);
        // Initial tangents: e_j for every sample (exact), or the probes.
        let mut dh: Vec<Taped2> = match &self.probes {
            None => (0..d)
                .map(|j| taped_const2(&dev, n, d, unit_rows(n, d, j)))
                .collect(),
            Some(p) => vec![taped_const2(&dev, n, d, wide(p))],
        };
        let nl = self.layout.layers.len();
        let mut u_last = None;
        for (li, l) in self.layout.layers.iter().enumerate() {
            let w1 = g.share(taped_as_matrix(th(l.w1, l.out * l.inp), l.out, l.inp));
            // s = sigmoid(w2 t + b2), c = w3 t
            let s = g.share(taped_sigmoid(
                taped_scale(th(l.w2, l.out), t) + th(l.b2, l.out),
            ));
            let c = taped_scale(th(l.w3, l.out), t);
            // u = (h W1^T + b1) * s + c ; du = (dh W1^T) * s
            let u = taped_add_row(
                taped_mul_row(
                    taped_add_row(taped_matmul_t(h, reuse2(&w1)), th(l.b1, l.out)),
                    taped_reuse(&s),
                ),
                c,
            );
            let du: Vec<Taped2> = dh
                .into_iter()
                .map(|t| taped_mul_row(taped_matmul_t(t, reuse2(&w1)), taped_reuse(&s)))
                .collect();
            if li + 1 == nl {
                u_last = Some((u, du));
                break;
            }
            // h' = tanh(u), dh' = (1 - h'^2) du
            let hn = g.share(taped_tanh(u));
            let gd = g.share(taped_one_minus_sq(reuse2(&hn)));
            dh = du.into_iter().map(|t| reuse2(&gd) * t).collect();
            h = hn;
        }
        let (u, du) = u_last.expect("a block has at least one layer");
        // trace: sum_j (J e_j)_j (exact) or eps . (J eps) (Hutchinson), per sample
        let trace = match &self.probes {
            None => du
                .into_iter()
                .enumerate()
                .map(|(j, t)| taped_row_dot_const(t, unit_rows(n, d, j)))
                .reduce(|a, b| a + b)
                .expect("data_size >= 1"),
            Some(p) => du
                .into_iter()
                .map(|t| taped_row_dot_const(t, wide(p)))
                .next()
                .expect("one probe tangent"),
        };
        g.finish(taped_concat(taped_flatten(u), trace))
    }
}
