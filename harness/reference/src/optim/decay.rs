//! `optax.add_decayed_weights`: `u <- u + weight_decay * p` (decoupled weight decay, as AdamW
//! applies it after the Adam scaling and before the learning rate). A weight decay of exactly 0
//! leaves `u` untouched, as optax skips a zero constant: `u + 0 * p` would turn an infinite
//! parameter into NaN where optax keeps `u`.
//!
//! # References
//! I. Loshchilov, F. Hutter, "Decoupled weight decay regularization", ICLR 2019.

use super::{NoState, Transform};
use crate::backend::Float;
use crate::error::ensure;
use crate::stage::KeyHasher;
use crate::tree::Tree;
use crate::Result;

/// `u + wd * p`, except that `wd == 0` gives `u` exactly (optax's skip of a zero constant: with
/// `p = ±inf`, `0 * p` is NaN).
///
/// ```
/// use harness_reference::optim::decay::decayed;
/// assert_eq!(decayed(1.5f64, 0.0, f64::INFINITY), 1.5);
/// assert_eq!(decayed(1.5f64, 0.5, 2.0), 2.5);
/// ```
pub fn decayed<A: crate::backend::Real>(u: A, wd: A, p: A) -> A {
    if wd == A::zero() {
        u
    } else {
        u + wd * p
    }
}

/// Adds `weight_decay * params` to the updates, element-wise in the accumulator type.
#[derive(Clone, Debug, PartialEq)]
pub struct AddDecayedWeights {
    weight_decay: f64,
}

impl AddDecayedWeights {
    /// `weight_decay` must be finite.
    pub fn new(weight_decay: f64) -> Result<Self> {
        ensure(
            weight_decay.is_finite(),
            "weight_decay",
            weight_decay,
            "must be finite",
        )?;
        Ok(Self { weight_decay })
    }
}

impl<E: Float> Transform<E> for AddDecayedWeights {
    type State = NoState;
    fn static_key(&self) -> u64 {
        KeyHasher::default()
            .val("add_decayed_weights")
            .f64(self.weight_decay)
            .finish()
    }
    fn init(&self, _params: &Tree<E>) -> Result<NoState> {
        Ok(NoState)
    }
    fn update(&self, u: &Tree<E>, _s: &NoState, p: &Tree<E>) -> Result<(Tree<E>, NoState)> {
        u.check_like(p, "params")?;
        let wd = E::of_f64(self.weight_decay).to_acc();
        let leaves = u.iter().zip(p.iter()).map(|((name, ua), (_, pa))| {
            let data = ua
                .data()
                .iter()
                .zip(pa.data())
                .map(|(&x, &q)| E::from_acc(decayed(x.to_acc(), wd, q.to_acc())))
                .collect();
            Ok((
                name.clone(),
                crate::backend::Array::new(ua.shape().to_vec(), data)?,
            ))
        });
        Ok((
            Tree::from_leaves(leaves.collect::<Result<Vec<_>>>()?)?,
            NoState,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Array;

    #[test]
    fn decay_adds_scaled_params() {
        // closed form: u + 0.5 * p
        let t = |v: Vec<f64>| Tree::from_leaves([("w".to_string(), Array::vector(v))]).unwrap();
        let d = AddDecayedWeights::new(0.5).unwrap();
        let (u, _) = d
            .update(&t(vec![1.0, -2.0]), &NoState, &t(vec![4.0, 2.0]))
            .unwrap();
        assert_eq!(u.get("w").unwrap().data(), &[3.0, -1.0]);
        assert!(AddDecayedWeights::new(f64::NAN).is_err());
    }

    #[test]
    fn zero_decay_leaves_updates_untouched_even_for_infinite_params() {
        // optax skips a zero constant weight decay: u + 0 * inf would be NaN
        let t = |v: Vec<f64>| Tree::from_leaves([("w".to_string(), Array::vector(v))]).unwrap();
        let d = AddDecayedWeights::new(0.0).unwrap();
        let (u, _) = d
            .update(
                &t(vec![1.0, -2.0]),
                &NoState,
                &t(vec![f64::INFINITY, f64::NAN]),
            )
            .unwrap();
        assert_eq!(u.get("w").unwrap().data(), &[1.0, -2.0]);
    }
}
