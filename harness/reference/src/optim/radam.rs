//! RAdam (`optax.scale_by_radam`), composed form, with the selection as a choice of form.
//!
//! With `t = count + 1`, moments and bias correction as Adam's (see [`super::adam()`]):
//!
//! ```text
//! rho_inf = 2/(1-b2) - 1
//! rho_t   = rho_inf - 2 t b2^t / (1 - b2^t)
//! r_t     = sqrt( (rho_t-4)(rho_t-2) rho_inf / ((rho_inf-4)(rho_inf-2) rho_t) )
//! out     = rho_t >= threshold ? r_t m_hat / (sqrt(v_hat + eps_root) + eps) : m_hat
//! ```
//!
//! `rho_t` and `r_t` are computed in f64 (the golden cases' precision; optax in f32 mode computes
//! them in f32, 0.03-0.05 low at small `t`) and cast to the arithmetic dtype.
//!
//! Two forms of the selection:
//! - [`Selection::Branch`] decides per step and computes one branch (what `lax.cond` did);
//! - [`Selection::Where`] computes both and selects element-wise (what `jnp.where` does). The
//!   rectified branch uses `r_t` only where it is selected and the safe value 1 elsewhere, so both
//!   branches are finite for finite inputs (for `2 < rho_t < 4` the raw `r_t` is NaN).
//!
//! Guarantees: both forms give bit-identical updates and states; the state signature never changes.
//! Where the rectifier is *selected* but undefined (a `threshold` below 4 with `rho_inf > 4`, see
//! [`RadamHyper::well_posed`]) the output is NaN exactly as upstream's.
//!
//! # References
//! - Liu et al., *On the Variance of the Adaptive Learning Rate and Beyond*, arXiv:1908.03265.
//! - optax #580, #969 (the `lax.cond` leak), PR #974 (the `jnp.where` fix);
//!   `docs/ALGORITHMS.md` §2.
//!
//! # Example
//! ```
//! use harness_reference::optim::{RadamHyper, Selection};
//! let h = RadamHyper::default();
//! // Default b2: steps 1-5 are un-rectified, step 6 is the first rectified step.
//! assert!(!h.rectification(5).rectified && h.rectification(6).rectified);
//! // The raw rectifier is NaN at steps 3 and 4; the Where form's safe value is finite.
//! assert!(h.rectification(3).r.is_nan() && h.rectification(3).r_where().is_finite());
//! ```

use super::adam::{composed_denominator, composed_update};
use super::moments::{AdamHyper, MomentState};
use super::Transform;
use crate::backend::{Float, Real, Ten};
use crate::error::ensure;
use crate::stage::KeyHasher;
use crate::tree::Tree;
use crate::Result;

/// How the rectified/un-rectified choice is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Selection {
    /// Decide per step, compute one branch (`lax.cond`).
    Branch,
    /// Compute both branches, select element-wise (`jnp.where`), unselected branch sanitised.
    Where,
}

/// Hyperparameters of `scale_by_radam` (optax defaults: Adam's, threshold 5).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct RadamHyper {
    /// Adam's moment hyperparameters (`b1, b2, eps, eps_root, nesterov`).
    pub moments: AdamHyper,
    /// Minimum `rho_t` for the rectified branch (finite); default 5.
    pub threshold: f64,
}

impl Default for RadamHyper {
    fn default() -> Self {
        Self {
            moments: AdamHyper::default(),
            threshold: 5.0,
        }
    }
}

/// The rectification schedule at one step.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Rectification {
    /// The 1-based step `t = count + 1`.
    pub t: i32,
    /// `rho_t = rho_inf - 2 t b2^t / (1 - b2^t)`, in f64.
    pub rho_t: f64,
    /// `rho_t >= threshold`
    pub rectified: bool,
    /// The raw `r_t` (NaN where its square-root argument is negative).
    pub r: f64,
}

impl Rectification {
    /// The rectifier the `Where` form multiplies the rectified branch by: `r_t` where selected,
    /// the safe value 1 where not (so the unselected branch is finite).
    pub fn r_where(&self) -> f64 {
        if self.rectified {
            self.r
        } else {
            1.0
        }
    }
}

impl RadamHyper {
    /// The moments' hyperparameters ([`super::AdamHyper::validate`]) and a finite threshold,
    /// else [`crate::Error::InvalidHyper`] naming the field.
    pub fn validate(&self) -> Result<()> {
        self.moments.validate()?;
        ensure(
            self.threshold.is_finite(),
            "threshold",
            self.threshold,
            "must be finite",
        )
    }
    /// `rho_inf = 2/(1-b2) - 1`
    pub fn rho_inf(&self) -> f64 {
        2.0 / (1.0 - self.moments.b2) - 1.0
    }
    /// `rho_t` and `r_t` at step `t` (1-based), in f64.
    pub fn rectification(&self, t: i32) -> Rectification {
        let b2 = self.moments.b2;
        let rho_inf = self.rho_inf();
        let b2_t = b2.powf(t as f64);
        let rho_t = rho_inf - 2.0 * t as f64 * b2_t / (1.0 - b2_t);
        let r = ((rho_t - 4.0) * (rho_t - 2.0) * rho_inf
            / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t))
            .sqrt();
        Rectification {
            t,
            rho_t,
            rectified: rho_t >= self.threshold,
            r,
        }
    }
    /// Whether the rectifier is finite at every step where it is selected. `rho_t` rises from 1
    /// towards `rho_inf`, so the selected steps have `rho_t` in `[max(threshold, 1), rho_inf)`; the
    /// square-root argument `(rho-4)(rho-2) / ((rho_inf-4)(rho_inf-2))` is non-negative there iff:
    /// `rho_inf > 4`: `threshold >= 4`; `2 < rho_inf < 4`: `threshold >= 2`; `rho_inf < 2`: always;
    /// `rho_inf` exactly 2 or 4 divides by zero, so only if nothing is ever selected.
    pub fn well_posed(&self) -> bool {
        let rho_inf = self.rho_inf();
        let lo = self.threshold.max(1.0);
        if lo >= rho_inf {
            return true; // never selected
        }
        if rho_inf > 4.0 {
            lo >= 4.0
        } else if rho_inf > 2.0 && rho_inf < 4.0 {
            lo >= 2.0
        } else {
            rho_inf < 2.0
        }
    }
    pub(crate) fn hash_into(&self, h: KeyHasher) -> KeyHasher {
        self.moments.hash_into(h).f64(self.threshold)
    }
}

/// The two branches of one RAdam step as the `Where` form computes them, and the selection.
#[derive(Clone, Debug)]
pub struct RadamBranches<A> {
    /// The schedule at this step (which branch is selected).
    pub rectification: Rectification,
    /// `m_hat` (bias-corrected momentum).
    pub momentum: Tree<A>,
    /// `r * m_hat / (sqrt(v_hat + eps_root) + eps)` with the `r` passed in.
    pub rectified: Tree<A>,
}

/// `scale_by_radam` with validated hyperparameters and a selection form.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleByRadam {
    hyper: RadamHyper,
    selection: Selection,
}

impl ScaleByRadam {
    /// `scale_by_radam` with `hyper` (after [`RadamHyper::validate`]) and this selection form.
    pub fn new(hyper: RadamHyper, selection: Selection) -> Result<Self> {
        hyper.validate()?;
        Ok(Self { hyper, selection })
    }
    /// The validated hyperparameters.
    pub fn hyper(&self) -> &RadamHyper {
        &self.hyper
    }
    /// How the branch is selected.
    pub fn selection(&self) -> Selection {
        self.selection
    }

    /// Both branches of the step that `update(grads, state)` would take, with the rectified
    /// branch multiplied by `r` (the reference passes [`Rectification::r_where`]).
    pub fn branches_with_r<E: Float>(
        &self,
        grads: &Tree<E>,
        state: &MomentState<E::Acc>,
        params: &Tree<E>,
        r: impl Fn(&Rectification) -> f64,
    ) -> Result<RadamBranches<E::Acc>> {
        let rect = self
            .hyper
            .rectification(super::moments::safe_increment(state.count));
        let r = E::Acc::of_f64(r(&rect));
        let both = std::cell::RefCell::new(Vec::new());
        composed_update(
            &self.hyper.moments,
            grads,
            state,
            params,
            |c, m_hat, v_hat| {
                let rectified = (m_hat.clone() * r) / composed_denominator(c, v_hat);
                both.borrow_mut().push((m_hat.clone(), rectified));
                m_hat
            },
        )?;
        let (mut momentum, mut rectified) = (Tree::new(), Tree::new());
        for ((name, g), (m, rc)) in grads.iter().zip(both.into_inner()) {
            momentum.0.insert(name.clone(), m.to_array(g.shape())?);
            rectified.0.insert(name.clone(), rc.to_array(g.shape())?);
        }
        Ok(RadamBranches {
            rectification: rect,
            momentum,
            rectified,
        })
    }

    /// The reference's branches (sanitised rectifier).
    pub fn branches<E: Float>(
        &self,
        grads: &Tree<E>,
        state: &MomentState<E::Acc>,
        params: &Tree<E>,
    ) -> Result<RadamBranches<E::Acc>> {
        self.branches_with_r(grads, state, params, Rectification::r_where)
    }
}

/// The selected output of one leaf, in either form.
fn select<A: Real>(
    selection: Selection,
    rect: &Rectification,
    m_hat: Ten<A>,
    denom: Ten<A>,
    n: usize,
) -> Ten<A> {
    match selection {
        Selection::Branch => {
            if rect.rectified {
                (m_hat * A::of_f64(rect.r)) / denom
            } else {
                m_hat
            }
        }
        Selection::Where => {
            let rectified = (m_hat.clone() * A::of_f64(rect.r_where())) / denom;
            Ten::select(&vec![rect.rectified; n], rectified, m_hat)
        }
    }
}

impl<E: Float> Transform<E> for ScaleByRadam {
    type State = MomentState<E::Acc>;
    fn static_key(&self) -> u64 {
        self.hyper
            .hash_into(KeyHasher::default().val("scale_by_radam"))
            .val(self.selection)
            .finish()
    }
    fn init(&self, params: &Tree<E>) -> Result<Self::State> {
        self.hyper.moments.validate_for::<E::Acc>()?;
        Ok(MomentState::zeros(params))
    }
    fn update(
        &self,
        grads: &Tree<E>,
        state: &Self::State,
        params: &Tree<E>,
    ) -> Result<(Tree<E>, Self::State)> {
        let rect = self
            .hyper
            .rectification(super::moments::safe_increment(state.count));
        let (out, state) = composed_update(
            &self.hyper.moments,
            grads,
            state,
            params,
            |c, m_hat, v_hat| {
                let n = m_hat.len();
                select(
                    self.selection,
                    &rect,
                    m_hat,
                    composed_denominator(c, v_hat),
                    n,
                )
            },
        )?;
        Ok((out, state))
    }
}
