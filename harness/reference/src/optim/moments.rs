//! The moment machinery Adam, RAdam (and Muon's momentum) share: hyperparameters, state,
//! bias corrections.
//!
//! Step-dependent scalars (`1 - b^t`, `rho_t`, `r_t`) are computed in f64 — the count's
//! precision in the golden cases (jax x64) — and only then cast to the arithmetic dtype, so low
//! precision tensors never see `1 - 1 = 0`. Moments are stored in the arithmetic dtype
//! ([`Float::Acc`]): f32 for f16 parameters (`docs/ALGORITHMS.md` §1's f16 pitfall), else the
//! params dtype.

use crate::backend::{DType, Float, Real};
use crate::error::ensure;
use crate::stage::{HasSignature, KeyHasher, LeafSig, Signature};
use crate::tree::Tree;
use crate::{Error, Result};

/// Hyperparameters of `scale_by_adam` (optax defaults: b1 0.9, b2 0.999, eps 1e-8,
/// eps_root 0, nesterov false).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct AdamHyper {
    /// First-moment decay, in `[0, 1)`; default `0.9`.
    pub b1: f64,
    /// Second-moment decay, in `[0, 1)`; default `0.999`.
    pub b2: f64,
    /// Added to `sqrt(v_hat + eps_root)` in the denominator (finite, `>= 0`); default `1e-8`.
    pub eps: f64,
    /// Added to `v_hat` inside the square root (finite, `>= 0`); default `0`.
    pub eps_root: f64,
    /// Use the Nesterov form of `m_hat`: `b1 m_t / (1 - b1^(t+1)) + (1 - b1) g / (1 - b1^t)`.
    pub nesterov: bool,
}

impl Default for AdamHyper {
    fn default() -> Self {
        Self {
            b1: 0.9,
            b2: 0.999,
            eps: 1e-8,
            eps_root: 0.0,
            nesterov: false,
        }
    }
}

impl AdamHyper {
    /// Check every range: `b1, b2` in [0, 1), `eps, eps_root` finite and >= 0.
    pub fn validate(&self) -> Result<()> {
        ensure(
            (0.0..1.0).contains(&self.b1),
            "b1",
            self.b1,
            "must be in [0, 1)",
        )?;
        ensure(
            (0.0..1.0).contains(&self.b2),
            "b2",
            self.b2,
            "must be in [0, 1)",
        )?;
        ensure(
            self.eps.is_finite() && self.eps >= 0.0,
            "eps",
            self.eps,
            "must be finite and >= 0",
        )?;
        ensure(
            self.eps_root.is_finite() && self.eps_root >= 0.0,
            "eps_root",
            self.eps_root,
            "must be finite and >= 0",
        )
    }

    /// A positive `eps`/`eps_root` that rounds to zero in the arithmetic dtype would bring back
    /// `0/0` on zero gradients; reject it, naming the dtype.
    pub fn validate_for<A: Real>(&self) -> Result<()> {
        for (name, x) in [("eps", self.eps), ("eps_root", self.eps_root)] {
            if x > 0.0 && A::of_f64(x).as_f64() == 0.0 {
                return Err(Error::InvalidHyper {
                    name,
                    value: x.to_string(),
                    expected: format!("must not round to 0 in {}", A::DTYPE),
                });
            }
        }
        Ok(())
    }

    pub(crate) fn hash_into(&self, h: KeyHasher) -> KeyHasher {
        h.f64(self.b1)
            .f64(self.b2)
            .f64(self.eps)
            .f64(self.eps_root)
            .val(self.nesterov)
    }
}

/// `{count, mu, nu}`: optax's `ScaleByAdamState` (RAdam uses the same).
#[derive(Clone, Debug, PartialEq)]
pub struct MomentState<A> {
    /// Steps taken, int32, saturating at `i32::MAX`.
    pub count: i32,
    /// First moment `m_t` (raw, not bias-corrected).
    pub mu: Tree<A>,
    /// Second moment `v_t`.
    pub nu: Tree<A>,
}

impl<A: Float> MomentState<A> {
    /// Zeros shaped like `params`.
    pub fn zeros<E: Float>(params: &Tree<E>) -> Self {
        Self {
            count: 0,
            mu: params.zeros_like(),
            nu: params.zeros_like(),
        }
    }
}

impl<A: Float> HasSignature for MomentState<A> {
    fn signature(&self) -> Signature {
        let mut s = Signature::new();
        s.push("count", LeafSig::strong(&[], DType::I32));
        s.with("mu", self.mu.signature())
            .with("nu", self.nu.signature())
    }
}

/// `count + 1`, saturating (optax's `safe_increment`).
pub fn safe_increment(count: i32) -> i32 {
    count.saturating_add(1)
}

/// `1 - decay^t` in f64.
pub fn bias_correction(decay: f64, t: i32) -> f64 {
    1.0 - decay.powf(t as f64)
}

/// The per-step scalars of the moment update, already cast to the arithmetic dtype `A`.
#[derive(Clone, Copy, Debug)]
pub struct MomentScalars<A> {
    /// `1 - b1^t`
    pub bc1: A,
    /// `1 - b1^(t+1)` (nesterov)
    pub bc1_next: A,
    /// `1 - b2^t`
    pub bc2: A,
}

/// The constants of the moment update, converted once to the arithmetic dtype.
#[derive(Clone, Copy, Debug)]
pub struct MomentConsts<A> {
    /// `b1` in `A`.
    pub b1: A,
    /// `1 - b1`, computed in f64 then cast (as optax's weak literal `1 - decay` is).
    pub one_minus_b1: A,
    /// `b2` in `A`.
    pub b2: A,
    /// `1 - b2`, computed in f64 then cast.
    pub one_minus_b2: A,
    /// `eps` in `A`.
    pub eps: A,
    /// `eps_root` in `A`.
    pub eps_root: A,
    /// Whether the Nesterov form of `m_hat` is used.
    pub nesterov: bool,
}

impl AdamHyper {
    /// Constants in `A`.
    pub fn consts<A: Real>(&self) -> MomentConsts<A> {
        MomentConsts {
            b1: A::of_f64(self.b1),
            one_minus_b1: A::of_f64(1.0 - self.b1),
            b2: A::of_f64(self.b2),
            one_minus_b2: A::of_f64(1.0 - self.b2),
            eps: A::of_f64(self.eps),
            eps_root: A::of_f64(self.eps_root),
            nesterov: self.nesterov,
        }
    }
    /// Scalars for step `t` (1-based).
    pub fn scalars<A: Real>(&self, t: i32) -> MomentScalars<A> {
        MomentScalars {
            bc1: A::of_f64(bias_correction(self.b1, t)),
            bc1_next: A::of_f64(bias_correction(self.b1, safe_increment(t))),
            bc2: A::of_f64(bias_correction(self.b2, t)),
        }
    }
}

/// Check that `grads` and `params` have the state's structure (typed error otherwise).
pub fn check_inputs<E: Float, A: Float>(
    grads: &Tree<E>,
    state: &MomentState<A>,
    params: &Tree<E>,
) -> Result<()> {
    state.mu.check_like(grads, "grads")?;
    state.mu.check_like(params, "params")
}
