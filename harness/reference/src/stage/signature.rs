//! Signatures: the part of dynamic data that a trace depends on.

use crate::backend::DType;

/// Shape, dtype and weak flag of one leaf. `weak` mirrors JAX's weak types: a Python scalar
/// literal (`jnp.inf`, `0`) is weak, an array built with an explicit dtype is strong, and the two
/// are different cache keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct LeafSig {
    /// Dimensions, outermost first (empty for a scalar).
    pub shape: Vec<usize>,
    /// Element dtype.
    pub dtype: DType,
    /// JAX's weak-type flag (a weak and a strong leaf are different keys).
    pub weak: bool,
}

impl LeafSig {
    /// A strong leaf (explicit dtype).
    pub fn strong(shape: &[usize], dtype: DType) -> Self {
        Self {
            shape: shape.to_vec(),
            dtype,
            weak: false,
        }
    }
    /// A weak leaf (dtype taken from a Python-scalar-like literal).
    pub fn weak(shape: &[usize], dtype: DType) -> Self {
        Self {
            shape: shape.to_vec(),
            dtype,
            weak: true,
        }
    }
}

impl std::fmt::Display for LeafSig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        write!(
            f,
            "{}{}[{}]",
            if self.weak { "weak " } else { "" },
            self.dtype,
            dims.join(",")
        )
    }
}

/// A tree of leaf signatures, keyed by dotted path, kept sorted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, serde::Serialize)]
pub struct Signature {
    leaves: Vec<(String, LeafSig)>,
}

/// Anything with a signature: optimizer states, parameter trees, staged inputs.
pub trait HasSignature {
    /// The signature (sorted `(path, leaf)` list) of `self`.
    fn signature(&self) -> Signature;
    /// Whether `self` has signature `sig`; override to answer without allocating.
    fn matches(&self, sig: &Signature) -> bool {
        self.signature() == *sig
    }
}

impl Signature {
    /// An empty signature.
    pub fn new() -> Self {
        Self::default()
    }
    /// Add a leaf (keeps the leaves sorted by path; a repeated path replaces the old leaf).
    pub fn push(&mut self, path: impl Into<String>, leaf: LeafSig) {
        let path = path.into();
        match self.leaves.binary_search_by(|(p, _)| p.cmp(&path)) {
            Ok(i) => self.leaves[i].1 = leaf,
            Err(i) => self.leaves.insert(i, (path, leaf)),
        }
    }
    /// Add every leaf of `other` under `prefix.`.
    pub fn nest(&mut self, prefix: &str, other: Signature) {
        for (p, l) in other.leaves {
            self.push(format!("{prefix}.{p}"), l);
        }
    }
    /// Builder form of [`Signature::nest`].
    pub fn with(mut self, prefix: &str, other: Signature) -> Self {
        self.nest(prefix, other);
        self
    }
    /// The leaves, sorted by path.
    pub fn leaves(&self) -> &[(String, LeafSig)] {
        &self.leaves
    }
    /// The leaf at `path`, if any (binary search).
    ///
    /// ```
    /// use harness_reference::backend::DType;
    /// use harness_reference::stage::{LeafSig, Signature};
    /// let mut s = Signature::new();
    /// s.push("count", LeafSig::weak(&[], DType::I32));
    /// s.push("mu", LeafSig::strong(&[2, 3], DType::F32));
    /// assert!(s.get("count").unwrap().weak);
    /// assert_eq!(s.get("mu").unwrap().shape, vec![2, 3]);
    /// assert!(s.get("nu").is_none());
    /// ```
    pub fn get(&self, path: &str) -> Option<&LeafSig> {
        self.leaves
            .binary_search_by(|(p, _)| p.as_str().cmp(path))
            .ok()
            .map(|i| &self.leaves[i].1)
    }
    /// What changed from `self` to `other`, leaf by leaf (empty when equal).
    pub fn diff(&self, other: &Signature) -> SignatureDiff {
        let mut changes = Vec::new();
        let (mut i, mut j) = (0, 0);
        let (a, b) = (&self.leaves, &other.leaves);
        while i < a.len() || j < b.len() {
            match (a.get(i), b.get(j)) {
                (Some((pa, la)), Some((pb, lb))) if pa == pb => {
                    if la != lb {
                        changes.push(LeafChange::Changed(pa.clone(), la.clone(), lb.clone()));
                    }
                    i += 1;
                    j += 1;
                }
                (Some((pa, la)), Some((pb, _))) if pa < pb => {
                    changes.push(LeafChange::Removed(pa.clone(), la.clone()));
                    i += 1;
                }
                (Some(_), Some((pb, lb))) | (None, Some((pb, lb))) => {
                    changes.push(LeafChange::Added(pb.clone(), lb.clone()));
                    j += 1;
                }
                (Some((pa, la)), None) => {
                    changes.push(LeafChange::Removed(pa.clone(), la.clone()));
                    i += 1;
                }
                (None, None) => unreachable!("loop condition"),
            }
        }
        SignatureDiff(changes)
    }
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .leaves
            .iter()
            .map(|(p, l)| format!("{p}: {l}"))
            .collect();
        write!(f, "{{{}}}", parts.join(", "))
    }
}

/// One difference between two signatures.
#[derive(Debug, Clone, PartialEq)]
pub enum LeafChange {
    /// A leaf present in the new signature only: `(path, leaf)`.
    Added(String, LeafSig),
    /// A leaf present in the old signature only: `(path, leaf)`.
    Removed(String, LeafSig),
    /// A leaf whose shape, dtype or weak flag changed: `(path, old, new)`.
    Changed(String, LeafSig, LeafSig),
}

/// The leaf-by-leaf difference of two signatures; displays as
/// ``leaf `info.num_linesearch_steps`: weak int32[] -> int32[]``.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SignatureDiff(pub Vec<LeafChange>);

impl SignatureDiff {
    /// `true` when the two signatures are equal.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Display for SignatureDiff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            return write!(f, "no leaf changed");
        }
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|c| match c {
                LeafChange::Added(p, l) => format!("leaf `{p}` added: {l}"),
                LeafChange::Removed(p, l) => format!("leaf `{p}` removed (was {l})"),
                LeafChange::Changed(p, a, b) => format!("leaf `{p}`: {a} -> {b}"),
            })
            .collect();
        write!(f, "{}", parts.join("; "))
    }
}
