//! Muon (`optax.contrib.muon`) with its Newton–Schulz coefficients in the state.
//!
//! Default routing: every parameter with exactly two dimensions goes through
//!
//! ```text
//! scale_by_muon -> scale_by_shape -> add_decayed_weights(weight_decay) -> scale_by_learning_rate(lr)
//! m_t = beta m + (1-beta) g ;  m_hat as Adam's first moment (nesterov: beta m_t/(1-beta^(t+1)) + (1-beta) g/(1-beta^t))
//! u = orth(m_hat) * sqrt(max(1, cols/rows)) + weight_decay * p (skipped when 0) ;  out = -lr u
//! ```
//!
//! and every other parameter through AdamW (`adam_b1, adam_b2`, Muon's `eps`, `adam_eps_root`,
//! `adam_weight_decay`, `adam_learning_rate` defaulting to `learning_rate`, nesterov = Muon's).
//!
//! State `{count, mu, ns_coeffs}` (plus the AdamW branch's `{count, mu, nu}`): `init` builds and
//! validates the coefficient tensor — the only place one is built — and `update` carries it
//! through unchanged, so the state signature never changes (optax #1186 / PR #1193). Each use
//! casts it to the matrix's arithmetic dtype ([`coeffs::CoeffPolicy`]).
//!
//! Precision: arithmetic runs in [`Float::Acc`] (f32 for f16 parameters, like the moment
//! machinery), rounding to the params dtype once at the end of each branch, then `* -lr`.
//! Zero-size matrices are admitted (their update is empty); optax raises for `rows = 0`.
//!
//! # References
//! - K. Jordan et al., *Muon*, 2024; Liu et al., *Muon is Scalable for LLM Training*,
//!   arXiv:2502.16982; Ahn et al., *Dion*, arXiv:2504.05295.
//! - optax 0.2.8 `optax/contrib/_muon.py`; `docs/ALGORITHMS.md` §1 and §3.
//!
//! # Example
//! ```
//! use harness_reference::backend::Array;
//! use harness_reference::optim::{Muon, MuonHyper, Transform};
//! use harness_reference::tree::Tree;
//! let params = Tree::from_leaves([
//!     ("w".to_string(), Array::new(vec![2, 3], vec![0.5f64; 6]).unwrap()),
//!     ("b".to_string(), Array::vector(vec![0.0f64; 3])),
//! ]).unwrap();
//! let opt = Muon::new(MuonHyper::new(0.02)).unwrap();
//! let state = opt.init(&params).unwrap();
//! let (u, next) = opt.update(&params, &state, &params).unwrap();
//! assert_eq!(next.ns_coeffs, state.ns_coeffs); // carried unchanged
//! assert_eq!(u.get("w").unwrap().shape(), &[2, 3]);
//! ```

pub mod coeffs;
pub mod newton_schulz;
pub mod ns_passes;
pub mod shard;

pub use coeffs::{CoeffPolicy, CoeffSpec, PerUse};
pub use newton_schulz::{orthogonalize_composed, NsPlan};
pub use shard::{MuonStepper, Sharding};

use super::moments::AdamHyper;
use super::{MomentState, Transform};
use crate::backend::{Array, DType, Float};
use crate::error::ensure;
use crate::stage::{HasSignature, KeyHasher, LeafSig, Signature};
use crate::tree::Tree;
use crate::Result;

/// Keyword arguments of `optax.contrib.muon` (defaults of `docs/ALGORITHMS.md` §3).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct MuonHyper {
    /// Muon learning rate (finite); the Muon update is `-learning_rate * u`.
    pub learning_rate: f64,
    /// The Newton–Schulz coefficients `(a, b, c)` (a preset or raw rows; validated by `init`).
    pub ns_coeffs: CoeffSpec,
    /// Newton–Schulz iterations for `[3]` coefficients (a `[k, 3]` tensor runs its `k <= ns_steps`
    /// rows); default 5.
    pub ns_steps: usize,
    /// Momentum decay of the Muon branch, in `[0, 1)`; default `0.95`.
    pub beta: f64,
    /// Added to the Frobenius norm before normalising, and the AdamW branch's `eps`; default
    /// `1e-8`.
    pub eps: f64,
    /// Decoupled weight decay of the Muon branch (finite; skipped when 0).
    pub weight_decay: f64,
    /// Nesterov momentum in both branches; default `true`.
    pub nesterov: bool,
    /// AdamW branch's first-moment decay, in `[0, 1)`.
    pub adam_b1: f64,
    /// AdamW branch's second-moment decay, in `[0, 1)`.
    pub adam_b2: f64,
    /// AdamW branch's `eps_root` (finite, `>= 0`).
    pub adam_eps_root: f64,
    /// AdamW branch's decoupled weight decay (finite).
    pub adam_weight_decay: f64,
    /// `None`: the Muon learning rate.
    pub adam_learning_rate: Option<f64>,
}

impl MuonHyper {
    /// optax's defaults with this learning rate.
    pub fn new(learning_rate: f64) -> Self {
        Self {
            learning_rate,
            ns_coeffs: CoeffSpec::default(),
            ns_steps: 5,
            beta: 0.95,
            eps: 1e-8,
            weight_decay: 0.0,
            nesterov: true,
            adam_b1: 0.9,
            adam_b2: 0.999,
            adam_eps_root: 0.0,
            adam_weight_decay: 0.0,
            adam_learning_rate: None,
        }
    }

    /// Scalar ranges (the coefficients are validated by `init`).
    pub fn validate(&self) -> Result<()> {
        let finite = |name, x: f64| ensure(x.is_finite(), name, x, "must be finite");
        finite("learning_rate", self.learning_rate)?;
        finite("weight_decay", self.weight_decay)?;
        finite("adam_weight_decay", self.adam_weight_decay)?;
        if let Some(lr) = self.adam_learning_rate {
            finite("adam_learning_rate", lr)?;
        }
        ensure(
            (0.0..1.0).contains(&self.beta),
            "beta",
            self.beta,
            "must be in [0, 1)",
        )?;
        self.adam().validate()?;
        self.momentum().validate()
    }

    /// The AdamW branch's moment hyperparameters.
    pub fn adam(&self) -> AdamHyper {
        AdamHyper {
            b1: self.adam_b1,
            b2: self.adam_b2,
            eps: self.eps,
            eps_root: self.adam_eps_root,
            nesterov: self.nesterov,
        }
    }

    /// Muon's momentum as the first half of the moment machinery (`b1 = beta`).
    fn momentum(&self) -> AdamHyper {
        AdamHyper {
            b1: self.beta,
            b2: 0.0,
            eps: self.eps,
            eps_root: 0.0,
            nesterov: self.nesterov,
        }
    }

    /// The AdamW branch's learning rate: `adam_learning_rate`, else `learning_rate`.
    ///
    /// ```
    /// use harness_reference::optim::MuonHyper;
    /// let mut h = MuonHyper::new(0.02);
    /// assert_eq!(h.adam_lr(), 0.02);
    /// h.adam_learning_rate = Some(1e-3);
    /// assert_eq!(h.adam_lr(), 1e-3);
    /// ```
    pub fn adam_lr(&self) -> f64 {
        self.adam_learning_rate.unwrap_or(self.learning_rate)
    }
}

/// `optax.contrib.muon`, with the coefficient conversion policy `P` (the reference: [`PerUse`]).
#[derive(Debug)]
pub struct Muon<P = PerUse> {
    hyper: MuonHyper,
    policy: P,
    face: crate::Face,
}

impl Muon<PerUse> {
    /// Validated scalar hyperparameters (coefficients: at `init`).
    pub fn new(hyper: MuonHyper) -> Result<Self> {
        Self::with_policy(hyper, PerUse)
    }
}

impl<P: CoeffPolicy> Muon<P> {
    /// Muon with the coefficient policy `policy`, after [`MuonHyper::validate`].
    pub fn with_policy(hyper: MuonHyper, policy: P) -> Result<Self> {
        hyper.validate()?;
        Ok(Self {
            hyper,
            policy,
            face: crate::Face::Fast,
        })
    }
    /// Orthogonalise with this face: the planned Newton–Schulz ([`NsPlan`], symmetric products
    /// over a workspace) or the composed dfdx form ([`orthogonalize_composed`]); law
    /// `muon_planned_matches_composed` bounds their difference.
    pub fn with_face(mut self, face: crate::Face) -> Self {
        self.face = face;
        self
    }
    /// Which form orthogonalises the momentum (planned or composed dfdx).
    pub fn face(&self) -> crate::Face {
        self.face
    }
    /// The validated hyperparameters.
    pub fn hyper(&self) -> &MuonHyper {
        &self.hyper
    }
    /// The coefficient conversion policy.
    pub fn policy(&self) -> &P {
        &self.policy
    }
}

/// Default routing: exactly two dimensions -> Muon.
pub fn is_muon_leaf(shape: &[usize]) -> bool {
    shape.len() == 2
}

/// `{count, mu, ns_coeffs}` of the Muon branch and the AdamW branch's moment state.
#[derive(Clone, Debug, PartialEq)]
pub struct MuonState<A> {
    /// Steps taken (int32, saturating).
    pub count: i32,
    /// Momentum of the 2-D leaves, in the arithmetic dtype.
    pub mu: Tree<A>,
    /// Newton–Schulz coefficients, float64, shape `[3]` or `[k, 3]`; never changed by `update`.
    pub ns_coeffs: Array<f64>,
    /// AdamW branch over every other leaf.
    pub adam: MomentState<A>,
}

impl<A: Float> HasSignature for MuonState<A> {
    fn signature(&self) -> Signature {
        let mut s = Signature::new();
        s.push("muon.count", LeafSig::strong(&[], DType::I32));
        s.push(
            "muon.ns_coeffs",
            LeafSig::strong(self.ns_coeffs.shape(), DType::F64),
        );
        s.with("muon.mu", self.mu.signature())
            .with("adam", self.adam.signature())
    }
}

impl<E: Float, P: CoeffPolicy> Transform<E> for Muon<P> {
    type State = MuonState<E::Acc>;

    fn static_key(&self) -> u64 {
        let h = &self.hyper;
        // The coefficients are state, not configuration: they do not enter the key.
        KeyHasher::default()
            .val("muon")
            .f64(h.learning_rate)
            .val(h.ns_steps)
            .f64(h.beta)
            .f64(h.eps)
            .f64(h.weight_decay)
            .val(h.nesterov)
            .f64(h.adam_b1)
            .f64(h.adam_b2)
            .f64(h.adam_eps_root)
            .f64(h.adam_weight_decay)
            .f64(h.adam_lr())
            .val(self.face.name())
            .finish()
    }

    fn init(&self, params: &Tree<E>) -> Result<Self::State> {
        self.hyper.adam().validate_for::<E::Acc>()?;
        let ns_coeffs = coeffs::build(&self.hyper.ns_coeffs, self.hyper.ns_steps)?;
        let (muon, adam) = split(params);
        Ok(MuonState {
            count: 0,
            mu: muon.zeros_like(),
            ns_coeffs,
            adam: MomentState::zeros(&adam),
        })
    }

    fn update(
        &self,
        grads: &Tree<E>,
        state: &Self::State,
        params: &Tree<E>,
    ) -> Result<(Tree<E>, Self::State)> {
        let mut plans = shard::fresh_plans(1);
        let (u, s, _) =
            self.update_sharded(grads, state, params, &Sharding::single(), &mut plans)?;
        Ok((u, s))
    }
}

/// `(2-D leaves, other leaves)`.
pub fn split<E: Float>(params: &Tree<E>) -> (Tree<E>, Tree<E>) {
    let mut muon = Tree::new();
    let mut adam = Tree::new();
    for (k, v) in params.iter() {
        let dst = if is_muon_leaf(v.shape()) {
            &mut muon
        } else {
            &mut adam
        };
        dst.0.insert(k.clone(), v.clone());
    }
    (muon, adam)
}
