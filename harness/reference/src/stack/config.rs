//! The validated size of a stack: `N` layers of an MLP block `D -> H -> D` in one dtype.
//!
//! Each layer has four tensors ([`TensorId`]): `w1 [H, D]`, `b1 [H]`, `w2 [D, H]`, `b2 [D]`, so
//! `P = 2*D*H + H + D` parameters per layer; stacked, every tensor gains a leading `[N]` axis.
//!
//! Guarantees: a [`StackConfig`] that exists has `N, D, H >= 1`, a float dtype, and every byte
//! count the strategies and their bounds use — `N*P*8` (f64 or f32 + f32 scratch), `N*P*(4+s)`
//! (the vmap peak) and `2*N*P*s` — fits in `usize`; otherwise construction returns a typed
//! error ([`crate::Error::InvalidHyper`] naming the field, or [`crate::Error::Overflow`]).
//!
//! # References
//! equinox #673 (the 16 x 1024-4096-1024 Mistral-style block used for the CLI figures).
//!
//! # Example
//! ```
//! use harness_reference::backend::DType;
//! use harness_reference::stack::StackConfig;
//! let cfg = StackConfig::new(16, 1024, 4096, DType::F16)?;
//! assert_eq!(cfg.params_per_layer(), 2 * 1024 * 4096 + 4096 + 1024);
//! assert_eq!(cfg.final_bytes(), 16 * cfg.params_per_layer() * 2);
//! assert!(StackConfig::new(0, 1, 1, DType::F16).is_err());
//! assert!(StackConfig::new(usize::MAX, 2, 2, DType::F32).is_err());
//! # Ok::<(), harness_reference::Error>(())
//! ```

use crate::backend::DType;
use crate::error::{ensure, Error, Result};

/// The four tensors of a block, in generation order (their index is the RNG's tensor id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum TensorId {
    /// First-layer weight, `[H, D]` (fan-in `D`).
    W1 = 0,
    /// First-layer bias, `[H]`.
    B1 = 1,
    /// Second-layer weight, `[D, H]` (fan-in `H`).
    W2 = 2,
    /// Second-layer bias, `[D]`.
    B2 = 3,
}

impl TensorId {
    /// The four tensors in generation order (`W1, B1, W2, B2`; index = discriminant).
    pub const ALL: [TensorId; 4] = [TensorId::W1, TensorId::B1, TensorId::W2, TensorId::B2];
    /// The lowercase field name: `w1`, `b1`, `w2` or `b2`.
    ///
    /// ```
    /// use harness_reference::stack::TensorId;
    /// let names: Vec<_> = TensorId::ALL.iter().map(|t| t.name()).collect();
    /// assert_eq!(names, ["w1", "b1", "w2", "b2"]);
    /// assert_eq!(TensorId::W2 as usize, 2);
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            TensorId::W1 => "w1",
            TensorId::B1 => "b1",
            TensorId::W2 => "w2",
            TensorId::B2 => "b2",
        }
    }
}

/// `N` layers of `D -> H -> D` in `dtype` (validated; see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct StackConfig {
    layers: usize,
    width: usize,
    hidden: usize,
    dtype: DType,
}

fn mul(a: usize, b: usize, what: &str) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| Error::Overflow(format!("{what}: {a} * {b} overflows usize")))
}

impl StackConfig {
    /// Validate and build. Errors: a zero size (`layers`, `width`, `hidden` must be >= 1), a
    /// non-float dtype, or a byte count that overflows `usize` (or exceeds `isize::MAX`, the
    /// largest allocation Rust permits).
    pub fn new(layers: usize, width: usize, hidden: usize, dtype: DType) -> Result<Self> {
        ensure(layers >= 1, "layers", layers, "must be >= 1")?;
        ensure(width >= 1, "width", width, "must be >= 1")?;
        ensure(hidden >= 1, "hidden", hidden, "must be >= 1")?;
        ensure(
            matches!(dtype, DType::F16 | DType::F32 | DType::F64),
            "dtype",
            dtype,
            "must be float16, float32 or float64",
        )?;
        let dh = mul(width, hidden, "width * hidden")?;
        let p = mul(dh, 2, "2 * width * hidden")?
            .checked_add(width + hidden)
            .filter(|_| width.checked_add(hidden).is_some())
            .ok_or_else(|| Error::Overflow("parameters per layer overflow usize".into()))?;
        let total = mul(layers, p, "layers * params_per_layer")?;
        // the largest count any strategy or bound forms: N*P*(4 + 8) covers N*P*(4+s), 2*N*P*s
        let worst = mul(total, 12, "layers * params_per_layer * 12 bytes")?;
        if worst > isize::MAX as usize {
            return Err(Error::Overflow(format!(
                "{layers} layers of {width}-{hidden}-{width}: {worst} bytes exceed isize::MAX"
            )));
        }
        Ok(Self {
            layers,
            width,
            hidden,
            dtype,
        })
    }
    /// `N`.
    pub fn layers(&self) -> usize {
        self.layers
    }
    /// `D`.
    pub fn width(&self) -> usize {
        self.width
    }
    /// `H`.
    pub fn hidden(&self) -> usize {
        self.hidden
    }
    /// The element dtype (always a float: f16, f32 or f64).
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The same sizes in another float dtype.
    pub fn with_dtype(&self, dtype: DType) -> Result<Self> {
        Self::new(self.layers, self.width, self.hidden, dtype)
    }
    /// `P = 2*D*H + H + D`.
    pub fn params_per_layer(&self) -> usize {
        2 * self.width * self.hidden + self.hidden + self.width
    }
    /// `N*P`.
    pub fn params(&self) -> usize {
        self.layers * self.params_per_layer()
    }
    /// `s`, bytes per element of the dtype.
    pub fn elem_bytes(&self) -> usize {
        self.dtype.size()
    }
    /// `N*P*s`: the bytes of the final model's parameters.
    pub fn final_bytes(&self) -> usize {
        self.params() * self.elem_bytes()
    }
    /// Per-layer shape of a tensor.
    pub fn layer_shape(&self, t: TensorId) -> Vec<usize> {
        let (d, h) = (self.width, self.hidden);
        match t {
            TensorId::W1 => vec![h, d],
            TensorId::B1 => vec![h],
            TensorId::W2 => vec![d, h],
            TensorId::B2 => vec![d],
        }
    }
    /// Elements of one layer's tensor (the product of [`Self::layer_shape`], computed without
    /// building the shape: a length query never allocates, so measured peaks do not depend on
    /// whether the compiler removes a temporary vector).
    pub fn layer_len(&self, t: TensorId) -> usize {
        let (d, h) = (self.width, self.hidden);
        match t {
            TensorId::W1 | TensorId::W2 => h * d,
            TensorId::B1 => h,
            TensorId::B2 => d,
        }
    }
    /// Stacked shape `[N, ...]` of a tensor.
    pub fn stacked_shape(&self, t: TensorId) -> Vec<usize> {
        let mut s = vec![self.layers];
        s.extend(self.layer_shape(t));
        s
    }
    /// The fan-in that scales a tensor's initial values (`D` for layer 1, `H` for layer 2).
    pub fn fan_in(&self, t: TensorId) -> usize {
        match t {
            TensorId::W1 | TensorId::B1 => self.width,
            TensorId::W2 | TensorId::B2 => self.hidden,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_len_is_the_product_of_the_layer_shape() {
        let cfg = StackConfig::new(3, 5, 7, DType::F32).unwrap();
        for t in TensorId::ALL {
            assert_eq!(
                cfg.layer_len(t),
                cfg.layer_shape(t).iter().product::<usize>()
            );
        }
    }

    #[test]
    fn zero_sizes_name_the_field() {
        for (n, d, h, field) in [(0, 1, 1, "layers"), (1, 0, 1, "width"), (1, 1, 0, "hidden")] {
            match StackConfig::new(n, d, h, DType::F16) {
                Err(Error::InvalidHyper { name, .. }) => assert_eq!(name, field),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn int_dtype_is_rejected() {
        assert!(matches!(
            StackConfig::new(1, 1, 1, DType::I32),
            Err(Error::InvalidHyper { name: "dtype", .. })
        ));
    }

    #[test]
    fn overflowing_sizes_are_overflow_errors() {
        for (n, d, h) in [
            (usize::MAX, 1, 1),
            (1, usize::MAX, 2),
            (1, 1 << 40, 1 << 40),
            (1 << 30, 1 << 16, 1 << 16),
        ] {
            assert!(
                matches!(
                    StackConfig::new(n, d, h, DType::F64),
                    Err(Error::Overflow(_))
                ),
                "{n} {d} {h}"
            );
        }
    }

    #[test]
    fn the_mistral_sized_stack_counts_its_parameters_and_f16_bytes_by_hand() {
        // 16 x (2*1024*4096 + 4096 + 1024) = 134,299,648 parameters; f16: 268,599,296 bytes
        let c = StackConfig::new(16, 1024, 4096, DType::F16).unwrap();
        assert_eq!(c.params(), 134_299_648);
        assert_eq!(c.final_bytes(), 268_599_296);
        assert_eq!(c.stacked_shape(TensorId::W2), vec![16, 1024, 4096]);
    }
}
