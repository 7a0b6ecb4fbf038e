//! The fused single-pass form of Adam and RAdam: one read of `g, p, m, v` and one write of
//! `p, m, v` per element, in place, over planned buffers; after the first step it allocates
//! nothing.
//!
//! Per element, in the arithmetic dtype `A` (the same operations in the same order as the
//! composed form, so the two agree bit for bit):
//!
//! ```text
//! m <- (1-b1) g + b1 m ;  v <- (1-b2) (g g) + b2 v
//! m_hat = m / bc1  (nesterov: b1 (m / bc1_next) + (1-b1) (g / bc1)) ;  v_hat = v / bc2
//! out = Adam:  m_hat / (sqrt(v_hat + eps_root) + eps)
//!       RAdam: rectified ? (r m_hat) / (sqrt(v_hat + eps_root) + eps) : m_hat
//! p <- p + round_E(round_E(out) * (-lr))
//! ```
//!
//! The step goes through the specialisation cache: the plan (constants in `A`, `-lr` in the
//! params dtype) is built once per parameter signature; `count` is dynamic state, so stepping
//! never re-traces.
//!
//! # Example
//! ```
//! use harness_reference::backend::Array;
//! use harness_reference::optim::{FusedMoments, RadamHyper, Selection};
//! use harness_reference::tree::Tree;
//! let mut p = Tree::from_leaves([("w".to_string(), Array::vector(vec![1.0f32; 8]))]).unwrap();
//! let g = p.clone();
//! let mut opt = FusedMoments::radam(1e-3, RadamHyper::default(), Selection::Where, &p).unwrap();
//! for _ in 0..10 {
//!     opt.step(&mut p, &g).unwrap();
//! }
//! assert_eq!(opt.traces(), 1);
//! assert_eq!(opt.state().count, 10);
//! ```

use super::moments::{check_inputs, safe_increment, AdamHyper, MomentConsts, MomentScalars};
use super::radam::{RadamHyper, Selection};
use super::MomentState;
use crate::backend::{vectorised, Float, Kernel};
use crate::error::ensure;
use crate::stage::{KeyHasher, Stage};
use crate::tree::Tree;
use crate::Result;
use rayon::prelude::*;

/// Elements per parallel work item; below one chunk a leaf is updated on the calling thread.
pub const CHUNK: usize = 1 << 16;

/// Which moment rule the fused kernel applies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MomentRule {
    /// Adam: `m_hat / (sqrt(v_hat + eps_root) + eps)`.
    Adam,
    /// RAdam: the rectified Adam step where `rho_t >= threshold`, else `m_hat`.
    Radam {
        /// Minimum `rho_t` for the rectified branch (finite).
        threshold: f64,
        /// Per-step branch or element-wise selection (identical bits).
        selection: Selection,
    },
}

/// What a trace builds: constants converted to the arithmetic dtype.
#[derive(Clone, Copy, Debug)]
struct Plan<A> {
    c: MomentConsts<A>,
    /// `-lr` rounded to the params dtype, widened.
    neg_lr: A,
}

/// The per-step choice of output, hoisted out of the element loop.
#[derive(Clone, Copy)]
enum Out<A> {
    Adam,
    Rectified(A),
    Momentum,
    /// Both branches computed, `selected` picks the rectified one.
    Where {
        r: A,
        selected: bool,
    },
}

/// Fused Adam/RAdam owning its state.
pub struct FusedMoments<E: Float> {
    rule: MomentRule,
    hyper: AdamHyper,
    learning_rate: f64,
    state: MomentState<E::Acc>,
    stage: Stage<Plan<E::Acc>>,
}

impl<E: Float> FusedMoments<E> {
    /// Fused `optax.adam(learning_rate, ...)`, initialised for `params`.
    pub fn adam(learning_rate: f64, hyper: AdamHyper, params: &Tree<E>) -> Result<Self> {
        Self::new(MomentRule::Adam, learning_rate, hyper, params)
    }
    /// Fused `optax.radam(learning_rate, ...)`, initialised for `params`.
    pub fn radam(
        learning_rate: f64,
        hyper: RadamHyper,
        selection: Selection,
        params: &Tree<E>,
    ) -> Result<Self> {
        hyper.validate()?;
        let rule = MomentRule::Radam {
            threshold: hyper.threshold,
            selection,
        };
        Self::new(rule, learning_rate, hyper.moments, params)
    }
    fn new(
        rule: MomentRule,
        learning_rate: f64,
        hyper: AdamHyper,
        params: &Tree<E>,
    ) -> Result<Self> {
        hyper.validate()?;
        hyper.validate_for::<E::Acc>()?;
        ensure(
            learning_rate.is_finite(),
            "learning_rate",
            learning_rate,
            "must be finite",
        )?;
        Ok(Self {
            rule,
            hyper,
            learning_rate,
            state: MomentState::zeros(params),
            stage: Stage::new("fused_step"),
        })
    }
    /// The moments and count (in the accumulator type `E::Acc`) after the last step.
    pub fn state(&self) -> &MomentState<E::Acc> {
        &self.state
    }
    /// The state, writable: to restore a checkpoint, or to run other passes over the same
    /// memory (`harness bench` times its traffic limit there). [`FusedMoments::step`] checks the
    /// state against the parameters' structure before every step, so a state of another shape
    /// gives a typed error, not a wrong update.
    ///
    /// ```
    /// use harness_reference::backend::Array;
    /// use harness_reference::optim::{AdamHyper, FusedMoments};
    /// use harness_reference::tree::Tree;
    /// let leaf = |v: f32| Tree::from_leaves([("w".to_string(), Array::new(vec![3], vec![v; 3])?)]);
    /// let (mut p, g) = (leaf(1.0)?, leaf(0.5)?);
    /// let mut adam = FusedMoments::adam(0.1, AdamHyper::default(), &p)?;
    /// adam.step(&mut p, &g)?;
    /// let saved = adam.state().clone();
    /// adam.step(&mut p, &g)?;
    /// *adam.state_mut() = saved.clone();
    /// assert_eq!(adam.state(), &saved);
    /// # Ok::<(), harness_reference::Error>(())
    /// ```
    pub fn state_mut(&mut self) -> &mut MomentState<E::Acc> {
        &mut self.state
    }
    /// Times the step was traced (1 after the first step while the signature holds).
    pub fn traces(&self) -> usize {
        self.stage.traces()
    }

    fn static_key(&self) -> u64 {
        let h = self.hyper.hash_into(KeyHasher::default().val("fused"));
        let h = match self.rule {
            MomentRule::Adam => h.val(0u8),
            MomentRule::Radam {
                threshold,
                selection,
            } => h.val(1u8).f64(threshold).val(selection),
        };
        h.f64(self.learning_rate).finish()
    }

    /// One step: `params <- params - lr * rule(grads)`, state advanced, in place.
    pub fn step(&mut self, params: &mut Tree<E>, grads: &Tree<E>) -> Result<()> {
        check_inputs(grads, &self.state, params)?;
        let key = self.static_key();
        let (hyper, lr) = (self.hyper, self.learning_rate);
        let plan = *self.stage.call(key, &*params, |_| {
            Ok(Plan {
                c: hyper.consts::<E::Acc>(),
                neg_lr: E::of_f64(-lr).to_acc(),
            })
        })?;
        let t = safe_increment(self.state.count);
        let s = self.hyper.scalars::<E::Acc>(t);
        let out = match self.rule {
            MomentRule::Adam => Out::Adam,
            MomentRule::Radam {
                threshold,
                selection,
            } => {
                let rect = RadamHyper {
                    moments: self.hyper,
                    threshold,
                }
                .rectification(t);
                match selection {
                    Selection::Branch if rect.rectified => Out::Rectified(E::Acc::of_f64(rect.r)),
                    Selection::Branch => Out::Momentum,
                    Selection::Where => Out::Where {
                        r: E::Acc::of_f64(rect.r_where()),
                        selected: rect.rectified,
                    },
                }
            }
        };
        let MomentState { mu, nu, .. } = &mut self.state;
        for (((p, g), m), v) in params
            .iter_mut()
            .zip(grads.iter())
            .zip(mu.iter_mut())
            .zip(nu.iter_mut())
        {
            let (p, g, m, v) = (p.1.data_mut(), g.1.data(), m.1.data_mut(), v.1.data_mut());
            let run = |p, g, m, v| {
                vectorised(Chunk {
                    plan: &plan,
                    s: &s,
                    out,
                    p,
                    g,
                    m,
                    v,
                })
            };
            if p.len() <= CHUNK {
                run(p, g, m, v);
            } else {
                p.par_chunks_mut(CHUNK)
                    .zip(g.par_chunks(CHUNK))
                    .zip(m.par_chunks_mut(CHUNK))
                    .zip(v.par_chunks_mut(CHUNK))
                    .for_each(|(((p, g), m), v)| run(p, g, m, v));
            }
        }
        self.state.count = t;
        Ok(())
    }
}

/// One chunk of the step, compiled for the CPU's widest vectors ([`vectorised`]): the element
/// loop does IEEE products, quotients, sums and square roots, each correctly rounded, and no
/// fused multiply-add, so its bits are those of the portable loop.
struct Chunk<'a, E: Float> {
    plan: &'a Plan<E::Acc>,
    s: &'a MomentScalars<E::Acc>,
    out: Out<E::Acc>,
    p: &'a mut [E],
    g: &'a [E],
    m: &'a mut [E::Acc],
    v: &'a mut [E::Acc],
}

impl<E: Float> Kernel for Chunk<'_, E> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        kernel(self.plan, self.s, self.out, self.p, self.g, self.m, self.v)
    }
}

/// Dispatch once per leaf chunk to a loop specialised for (nesterov, output rule), so the
/// element loop has no branches and vectorises.
#[inline(always)]
fn kernel<E: Float>(
    plan: &Plan<E::Acc>,
    s: &MomentScalars<E::Acc>,
    out: Out<E::Acc>,
    p: &mut [E],
    g: &[E],
    m: &mut [E::Acc],
    v: &mut [E::Acc],
) {
    let c = plan.c;
    let denom = move |v_hat: E::Acc| num_traits::Float::sqrt(v_hat + c.eps_root) + c.eps;
    macro_rules! go {
        ($f:expr) => {
            if c.nesterov {
                elementwise::<E, true>(plan, s, p, g, m, v, $f)
            } else {
                elementwise::<E, false>(plan, s, p, g, m, v, $f)
            }
        };
    }
    match out {
        Out::Adam => go!(|m_hat, v_hat| m_hat / denom(v_hat)),
        Out::Rectified(r) => go!(|m_hat, v_hat| (m_hat * r) / denom(v_hat)),
        Out::Momentum => go!(|m_hat, _| m_hat),
        Out::Where { r, selected } => go!(|m_hat, v_hat| {
            let rectified = (m_hat * r) / denom(v_hat);
            if selected {
                rectified
            } else {
                m_hat
            }
        }),
    }
}

#[inline(always)]
fn elementwise<E: Float, const NESTEROV: bool>(
    plan: &Plan<E::Acc>,
    s: &MomentScalars<E::Acc>,
    p: &mut [E],
    g: &[E],
    m: &mut [E::Acc],
    v: &mut [E::Acc],
    out: impl Fn(E::Acc, E::Acc) -> E::Acc,
) {
    let c = &plan.c;
    let n = p.len().min(g.len()).min(m.len()).min(v.len());
    let (p, g, m, v) = (&mut p[..n], &g[..n], &mut m[..n], &mut v[..n]);
    for i in 0..n {
        let gi = g[i].to_acc();
        let mi = gi * c.one_minus_b1 + m[i] * c.b1;
        let vi = (gi * gi) * c.one_minus_b2 + v[i] * c.b2;
        m[i] = mi;
        v[i] = vi;
        let m_hat = if NESTEROV {
            (mi / s.bc1_next) * c.b1 + (gi / s.bc1) * c.one_minus_b1
        } else {
            mi / s.bc1
        };
        let o = out(m_hat, vi / s.bc2);
        let u = E::from_acc(E::from_acc(o).to_acc() * plan.neg_lr);
        p[i] = E::from_acc(p[i].to_acc() + u.to_acc());
    }
}
