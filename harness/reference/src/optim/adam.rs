//! Adam (`optax.scale_by_adam`), composed form.
//!
//! Computes, element-wise, with `t = count + 1`:
//!
//! ```text
//! m_t   = (1-b1) g + b1 m            v_t = (1-b2) g^2 + b2 v
//! m_hat = m_t / (1 - b1^t)           (nesterov: b1 m_t/(1-b1^(t+1)) + (1-b1) g/(1-b1^t))
//! v_hat = v_t / (1 - b2^t)
//! out   = m_hat / (sqrt(v_hat + eps_root) + eps)
//! ```
//!
//! Guarantees: the state keeps one signature for ever (`count` int32, `mu`/`nu` in the
//! arithmetic dtype); inputs are validated before anything is computed.
//!
//! # References
//! - Kingma & Ba, *Adam: A Method for Stochastic Optimization*, arXiv:1412.6980.
//! - optax 0.2.8 `scale_by_adam`; `docs/ALGORITHMS.md` §1.
//!
//! # Example
//! ```
//! use harness_reference::backend::Array;
//! use harness_reference::optim::{adam, AdamHyper, Transform};
//! use harness_reference::tree::Tree;
//! let params = Tree::from_leaves([("w".to_string(), Array::vector(vec![1.0f64, 2.0]))]).unwrap();
//! let opt = adam(0.1, AdamHyper::default()).unwrap();
//! let state = opt.init(&params).unwrap();
//! let (u, _state) = opt.update(&params, &state, &params).unwrap();
//! // Step 1 of Adam moves every coordinate by ~lr * sign(g).
//! assert!((u.get("w").unwrap().data()[0] + 0.1).abs() < 1e-6);
//! ```

use super::moments::{check_inputs, safe_increment, AdamHyper, MomentConsts, MomentScalars};
use super::{MomentState, Transform};
use crate::backend::{device, Array, Float, Real, Ten};
use crate::stage::KeyHasher;
use crate::tree::Tree;
use crate::Result;
use dfdx::prelude::Cpu;

/// `scale_by_adam` with validated hyperparameters.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleByAdam {
    hyper: AdamHyper,
}

impl ScaleByAdam {
    /// `scale_by_adam` with `hyper`, after [`AdamHyper::validate`].
    pub fn new(hyper: AdamHyper) -> Result<Self> {
        hyper.validate()?;
        Ok(Self { hyper })
    }
    /// The validated hyperparameters.
    pub fn hyper(&self) -> &AdamHyper {
        &self.hyper
    }
}

/// The composed moment step of one leaf: returns `(m_t, v_t, m_hat, v_hat)`.
pub(crate) fn composed_moments<A: Real>(
    dev: &Cpu,
    c: &MomentConsts<A>,
    s: &MomentScalars<A>,
    g: &Array<A>,
    m: &Array<A>,
    v: &Array<A>,
) -> (Ten<A>, Ten<A>, Ten<A>, Ten<A>) {
    let g = Ten::from_array(dev, g);
    let (m, m_hat) = composed_momentum(dev, c, s, g.clone(), m);
    let v = (g.clone() * g) * c.one_minus_b2 + Ten::from_array(dev, v) * c.b2;
    let v_hat = v.clone() / s.bc2;
    (m, v, m_hat, v_hat)
}

/// The first-moment half of the step, shared with Muon's momentum: returns `(m_t, m_hat)`.
pub(crate) fn composed_momentum<A: Real>(
    dev: &Cpu,
    c: &MomentConsts<A>,
    s: &MomentScalars<A>,
    g: Ten<A>,
    m: &Array<A>,
) -> (Ten<A>, Ten<A>) {
    let m = g.clone() * c.one_minus_b1 + Ten::from_array(dev, m) * c.b1;
    let m_hat = if c.nesterov {
        (m.clone() / s.bc1_next) * c.b1 + (g / s.bc1) * c.one_minus_b1
    } else {
        m.clone() / s.bc1
    };
    (m, m_hat)
}

/// `sqrt(v_hat + eps_root) + eps`
pub(crate) fn composed_denominator<A: Real>(c: &MomentConsts<A>, v_hat: Ten<A>) -> Ten<A> {
    (v_hat + c.eps_root).sqrt() + c.eps
}

/// Runs `leaf_out(shape, m_hat, v_hat)` per leaf after the shared moment step and assembles the
/// outputs and the next state. Shared by Adam and RAdam.
pub(crate) fn composed_update<E: Float>(
    hyper: &AdamHyper,
    grads: &Tree<E>,
    state: &MomentState<E::Acc>,
    params: &Tree<E>,
    leaf_out: impl Fn(&MomentConsts<E::Acc>, Ten<E::Acc>, Ten<E::Acc>) -> Ten<E::Acc>,
) -> Result<(Tree<E>, MomentState<E::Acc>)> {
    hyper.validate_for::<E::Acc>()?;
    check_inputs(grads, state, params)?;
    let dev = device();
    let t = safe_increment(state.count);
    let c = hyper.consts::<E::Acc>();
    let s = hyper.scalars::<E::Acc>(t);
    let (mut out, mut mu, mut nu) = (Tree::new(), Tree::new(), Tree::new());
    for (name, g) in grads.iter() {
        let g_acc = g.map(|x| x.to_acc());
        let (m, v, m_hat, v_hat) =
            composed_moments(&dev, &c, &s, &g_acc, &state.mu.0[name], &state.nu.0[name]);
        let shape = g.shape();
        let o = leaf_out(&c, m_hat, v_hat).to_array(shape)?;
        out.0.insert(name.clone(), o.map(E::from_acc));
        mu.0.insert(name.clone(), m.to_array(shape)?);
        nu.0.insert(name.clone(), v.to_array(shape)?);
    }
    Ok((out, MomentState { count: t, mu, nu }))
}

impl<E: Float> Transform<E> for ScaleByAdam {
    type State = MomentState<E::Acc>;
    fn static_key(&self) -> u64 {
        self.hyper
            .hash_into(KeyHasher::default().val("scale_by_adam"))
            .finish()
    }
    fn init(&self, params: &Tree<E>) -> Result<Self::State> {
        self.hyper.validate_for::<E::Acc>()?;
        Ok(MomentState::zeros(params))
    }
    fn update(
        &self,
        grads: &Tree<E>,
        state: &Self::State,
        params: &Tree<E>,
    ) -> Result<(Tree<E>, Self::State)> {
        let (out, state) =
            composed_update(&self.hyper, grads, state, params, |c, m_hat, v_hat| {
                m_hat / composed_denominator(c, v_hat)
            })?;
        Ok((out, state))
    }
}
