//! Trees of named leaves, processed in the order of their names (golden-v1's rule).

use crate::backend::{Array, Float};
use crate::stage::{HasSignature, LeafSig, Signature};
use crate::{Error, Result};
use std::collections::BTreeMap;

/// A pytree with string leaf names, sorted; the only tree shape optimizers deal with here.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Tree<E>(pub BTreeMap<String, Array<E>>);

impl<E: Copy + Default> Tree<E> {
    /// An empty tree.
    pub fn new() -> Self {
        Self(BTreeMap::new())
    }
    /// Build from `(name, array)` pairs; duplicate names are an error.
    pub fn from_leaves(leaves: impl IntoIterator<Item = (String, Array<E>)>) -> Result<Self> {
        let mut map = BTreeMap::new();
        for (k, v) in leaves {
            if map.insert(k.clone(), v).is_some() {
                return Err(Error::Structure(format!("duplicate leaf `{k}`")));
            }
        }
        Ok(Self(map))
    }
    /// The leaves in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Array<E>)> {
        self.0.iter()
    }
    /// The leaves in name order, mutable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut Array<E>)> {
        self.0.iter_mut()
    }
    /// The leaf named `name`.
    pub fn get(&self, name: &str) -> Option<&Array<E>> {
        self.0.get(name)
    }
    /// How many leaves.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether there is no leaf.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Total number of elements over all leaves.
    pub fn numel(&self) -> usize {
        self.0.values().map(|a| a.len()).sum()
    }
    /// Same leaf names as `other`, and the same shapes: else a typed error naming the first leaf
    /// that differs.
    pub fn check_like<F: Copy + Default>(&self, other: &Tree<F>, what: &str) -> Result<()> {
        if self.0.len() != other.0.len() || self.0.keys().zip(other.0.keys()).any(|(a, b)| a != b) {
            return Err(Error::Structure(format!(
                "{what}: leaves {:?} do not match {:?}",
                self.0.keys().collect::<Vec<_>>(),
                other.0.keys().collect::<Vec<_>>()
            )));
        }
        for ((k, a), b) in self.0.iter().zip(other.0.values()) {
            if a.shape() != b.shape() {
                return Err(Error::ShapeMismatch {
                    leaf: format!("{what}.{k}"),
                    expected: a.shape().to_vec(),
                    got: b.shape().to_vec(),
                });
            }
        }
        Ok(())
    }
    /// Leaf-wise map.
    pub fn map<F: Copy + Default>(&self, f: impl Fn(&Array<E>) -> Array<F>) -> Tree<F> {
        Tree(self.0.iter().map(|(k, v)| (k.clone(), f(v))).collect())
    }
    /// Zeros of the same shapes, in another element type.
    pub fn zeros_like<F: Copy + Default>(&self) -> Tree<F> {
        self.map(|a| Array::zeros(a.shape()).expect("shape came from an existing array"))
    }
}

impl<E: Float> HasSignature for Tree<E> {
    fn signature(&self) -> Signature {
        let mut s = Signature::new();
        for (k, v) in &self.0 {
            s.push(k.clone(), LeafSig::strong(v.shape(), E::DTYPE));
        }
        s
    }
    fn matches(&self, sig: &Signature) -> bool {
        sig.leaves().len() == self.0.len()
            && self.0.iter().zip(sig.leaves()).all(|((k, v), (p, l))| {
                k == p && l.dtype == E::DTYPE && !l.weak && l.shape == v.shape()
            })
    }
}

/// `params + updates`, leaf by leaf (optax's `apply_updates`), in the params' dtype.
pub fn apply_updates<E: Float>(params: &Tree<E>, updates: &Tree<E>) -> Result<Tree<E>> {
    params.check_like(updates, "updates")?;
    Ok(Tree(
        params
            .0
            .iter()
            .zip(updates.0.values())
            .map(|((k, p), u)| {
                let sum = p.zip_map_vectorised(u, |p, u| E::from_acc(p.to_acc() + u.to_acc()));
                (k.clone(), sum)
            })
            .collect(),
    ))
}
