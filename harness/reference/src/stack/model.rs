//! The two layouts of a model: stacked `[N, ...]` per tensor, or a list of per-layer tensors.
//!
//! Guarantees: [`Stacked::layer`] is a view of layer `l`'s slice of every tensor (no copy);
//! [`LayerList::to_stacked`] copies a list into the stacked layout keeping the list alive (so it
//! transiently holds both: `2*N*P*s`), [`LayerList::into_stacked`] frees each layer as soon as it
//! is copied (peak `N*P*s + P*s`); both give the same bits. [`Stacked::checksum`] is an FNV-1a
//! hash of every element's bits in tensor order.
//!
//! # References
//! equinox #673 ("stacking a list transiently doubles memory unless each layer is freed as it is
//! copied").
//!
//! # Example
//! ```
//! use harness_reference::backend::DType;
//! use harness_reference::stack::{build, StackConfig, Strategy};
//! let cfg = StackConfig::new(3, 4, 5, DType::F32)?;
//! let list = build::<f32>(&cfg, 1, Strategy::LayerwiseList, &mut ())?.into_list()?;
//! let stacked = list.to_stacked()?;
//! assert_eq!(stacked.layer(2).w1, list.layers()[2].tensors[0].data());
//! assert_eq!(list.into_stacked()?.checksum(), stacked.checksum());
//! # Ok::<(), harness_reference::Error>(())
//! ```

use super::config::{StackConfig, TensorId};
use crate::backend::{Array, Float};
use crate::Result;

/// One layer's tensors, borrowed: `w1 [H, D]`, `b1 [H]`, `w2 [D, H]`, `b2 [D]` (row-major).
#[derive(Debug, Clone, Copy)]
pub struct LayerView<'a, E> {
    /// `[H, D]` row-major.
    pub w1: &'a [E],
    /// `[H]`.
    pub b1: &'a [E],
    /// `[D, H]` row-major.
    pub w2: &'a [E],
    /// `[D]`.
    pub b2: &'a [E],
}

/// The stacked model: tensor `t` has shape `[N, ...layer_shape(t)]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stacked<E> {
    config: StackConfig,
    /// Indexed by [`TensorId`].
    pub tensors: [Array<E>; 4],
}

/// One layer, owning its four tensors (indexed by [`TensorId`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Layer<E> {
    /// `w1, b1, w2, b2` with their per-layer shapes.
    pub tensors: [Array<E>; 4],
}

/// The per-layer list.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerList<E> {
    config: StackConfig,
    layers: Vec<Layer<E>>,
}

/// FNV-1a over the bits of every element of every tensor, in order.
fn fnv<'a, E: Float>(h: &mut u64, xs: impl IntoIterator<Item = &'a E>) {
    for x in xs {
        for b in x.bits().to_le_bytes() {
            *h = (*h ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3);
        }
    }
}
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

impl<E: Float> Stacked<E> {
    /// Assemble from four stacked tensors (shapes checked against `config`).
    pub fn new(config: StackConfig, tensors: [Array<E>; 4]) -> Result<Self> {
        for t in TensorId::ALL {
            let want = config.stacked_shape(t);
            if tensors[t as usize].shape() != want.as_slice() {
                return Err(crate::Error::ShapeMismatch {
                    leaf: t.name().into(),
                    expected: want,
                    got: tensors[t as usize].shape().to_vec(),
                });
            }
        }
        Ok(Self { config, tensors })
    }
    /// The validated sizes and dtype.
    pub fn config(&self) -> &StackConfig {
        &self.config
    }
    /// Layer `l` as slices into the stack.
    pub fn layer(&self, l: usize) -> LayerView<'_, E> {
        let s = |t: TensorId| {
            let n = self.config.layer_len(t);
            &self.tensors[t as usize].data()[l * n..(l + 1) * n]
        };
        LayerView {
            w1: s(TensorId::W1),
            b1: s(TensorId::B1),
            w2: s(TensorId::W2),
            b2: s(TensorId::B2),
        }
    }
    /// Bytes of parameter data (`N*P*s`).
    pub fn data_bytes(&self) -> usize {
        self.tensors.iter().map(|a| a.len()).sum::<usize>() * std::mem::size_of::<E>()
    }
    /// FNV-1a of every element's bits, tensor by tensor.
    pub fn checksum(&self) -> u64 {
        let mut h = FNV_OFFSET;
        for a in &self.tensors {
            fnv(&mut h, a.data());
        }
        h
    }
    /// The first element whose bits differ from `other`'s, if any.
    pub fn first_difference(&self, other: &Stacked<E>) -> Option<String> {
        if self.config != other.config {
            return Some(format!(
                "configs differ: {:?} vs {:?}",
                self.config, other.config
            ));
        }
        for t in TensorId::ALL {
            let (a, b) = (
                self.tensors[t as usize].data(),
                other.tensors[t as usize].data(),
            );
            if let Some(i) = (0..a.len()).find(|&i| a[i].bits() != b[i].bits()) {
                return Some(format!("{}[{i}]: {:?} != {:?}", t.name(), a[i], b[i]));
            }
        }
        None
    }
}

impl<E: Float> Layer<E> {
    /// The four tensors as borrowed slices.
    pub fn view(&self) -> LayerView<'_, E> {
        LayerView {
            w1: self.tensors[0].data(),
            b1: self.tensors[1].data(),
            w2: self.tensors[2].data(),
            b2: self.tensors[3].data(),
        }
    }
}

impl<E: Float> LayerList<E> {
    /// Assemble from per-layer tensors (count and shapes checked against `config`).
    pub fn new(config: StackConfig, layers: Vec<Layer<E>>) -> Result<Self> {
        if layers.len() != config.layers() {
            return Err(crate::Error::ShapeMismatch {
                leaf: "layers".into(),
                expected: vec![config.layers()],
                got: vec![layers.len()],
            });
        }
        for (l, layer) in layers.iter().enumerate() {
            for t in TensorId::ALL {
                let want = config.layer_shape(t);
                if layer.tensors[t as usize].shape() != want.as_slice() {
                    return Err(crate::Error::ShapeMismatch {
                        leaf: format!("layers[{l}].{}", t.name()),
                        expected: want,
                        got: layer.tensors[t as usize].shape().to_vec(),
                    });
                }
            }
        }
        Ok(Self { config, layers })
    }
    /// The validated sizes and dtype.
    pub fn config(&self) -> &StackConfig {
        &self.config
    }
    /// The `N` layers, in order.
    pub fn layers(&self) -> &[Layer<E>] {
        &self.layers
    }
    /// Bytes of parameter data (`N*P*s`).
    pub fn data_bytes(&self) -> usize {
        self.layers
            .iter()
            .flat_map(|l| l.tensors.iter())
            .map(|a| a.len())
            .sum::<usize>()
            * std::mem::size_of::<E>()
    }
    /// Copy into the stacked layout, keeping the list (both alive: `2*N*P*s`).
    pub fn to_stacked(&self) -> Result<Stacked<E>> {
        let cfg = self.config;
        let tensors = TensorId::ALL.map(|t| {
            let mut v = Vec::with_capacity(cfg.layers() * cfg.layer_len(t));
            for layer in &self.layers {
                v.extend_from_slice(layer.tensors[t as usize].data());
            }
            (t, v)
        });
        let [a, b, c, d] = tensors.map(|(t, v)| Array::new(cfg.stacked_shape(t), v));
        Stacked::new(cfg, [a?, b?, c?, d?])
    }
    /// Move into the stacked layout, freeing each layer as soon as it is copied.
    pub fn into_stacked(self) -> Result<Stacked<E>> {
        let cfg = self.config;
        let mut vs: [Vec<E>; 4] =
            TensorId::ALL.map(|t| Vec::with_capacity(cfg.layers() * cfg.layer_len(t)));
        for layer in self.layers {
            for (v, a) in vs.iter_mut().zip(layer.tensors.iter()) {
                v.extend_from_slice(a.data());
            }
        }
        let [a, b, c, d] = TensorId::ALL
            .map(|t| Array::new(cfg.stacked_shape(t), std::mem::take(&mut vs[t as usize])));
        Stacked::new(cfg, [a?, b?, c?, d?])
    }
}

impl<E: Float> Stacked<E> {
    /// Copy into the per-layer layout (for comparisons with an unrolled loop).
    pub fn to_list(&self) -> Result<LayerList<E>> {
        let cfg = self.config;
        let mut layers = Vec::with_capacity(cfg.layers());
        for l in 0..cfg.layers() {
            let v = self.layer(l);
            let [a, b, c, d] = [
                (TensorId::W1, v.w1),
                (TensorId::B1, v.b1),
                (TensorId::W2, v.w2),
                (TensorId::B2, v.b2),
            ]
            .map(|(t, x)| Array::new(cfg.layer_shape(t), x.to_vec()));
            layers.push(Layer {
                tensors: [a?, b?, c?, d?],
            });
        }
        LayerList::new(cfg, layers)
    }
}

impl<E: Float> LayerList<E> {
    /// The same hash as [`Stacked::checksum`] of the stacked form, computed without stacking.
    pub fn checksum(&self) -> u64 {
        let mut h = FNV_OFFSET;
        for t in TensorId::ALL {
            for layer in &self.layers {
                fnv(&mut h, layer.tensors[t as usize].data());
            }
        }
        h
    }
}
