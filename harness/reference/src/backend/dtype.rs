//! Element types: the runtime [`DType`] tag, the [`Float`] storage types (f16, f32, f64) and the
//! [`Real`] arithmetic types (f32, f64) the kernels compute in.

use super::{DfdxMatOps, DfdxOps};
use std::fmt::Debug;

/// dtypes a leaf signature can carry (`int32` for counters, like optax's `count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F16,
    F32,
    F64,
    I32,
}

impl DType {
    /// The numpy-style name (`float16`, `int32`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::I32 => "int32",
        }
    }
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::F64 => 8,
        }
    }
    /// The largest finite value (65504 for f16; `i32::MAX` for int32).
    pub fn max_finite(self) -> f64 {
        match self {
            DType::F16 => 65504.0,
            DType::F32 => f32::MAX as f64,
            DType::F64 => f64::MAX,
            DType::I32 => i32::MAX as f64,
        }
    }
    /// Parse `float16`/`f16`, `float32`/`f32`, `float64`/`f64`.
    pub fn parse(s: &str) -> Option<DType> {
        match s {
            "float16" | "f16" => Some(DType::F16),
            "float32" | "f32" => Some(DType::F32),
            "float64" | "f64" => Some(DType::F64),
            "int32" | "i32" => Some(DType::I32),
            _ => None,
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A floating-point element type the reference implementation runs in: f16, f32 or f64.
pub trait Float:
    dfdx::dtypes::Dtype + Copy + Send + Sync + PartialEq + PartialOrd + Debug + Default + 'static
{
    /// Signature dtype.
    const DTYPE: DType;
    /// The arithmetic (and optimizer-moment) type: f32 for f16 and f32, f64 for f64.
    type Acc: Real;
    fn as_f64(self) -> f64;
    fn of_f64(x: f64) -> Self;
    fn to_acc(self) -> Self::Acc;
    fn from_acc(x: Self::Acc) -> Self;
    /// Round an f32 to this type (round to nearest even; exact for f32 and f64).
    fn of_f32(x: f32) -> Self {
        Self::of_f64(x as f64)
    }
    /// [`Float::of_f32`] over a slice (`dst.len() == src.len()`); f16 uses half's vectorised
    /// conversion (F16C where the CPU has it), which rounds identically.
    fn cast_f32_slice(src: &[f32], dst: &mut [Self]) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = Self::of_f32(s);
        }
    }
    /// `n` zeros, from memory the allocator hands out zeroed (fresh pages arrive zeroed, so no
    /// pass writes them; f32 and f64 get this from `vec!`, f16 through its bit pattern).
    fn zeroed_vec(n: usize) -> Vec<Self> {
        vec![Self::default(); n]
    }
    /// Raw bits, widened, for bitwise comparisons.
    fn bits(self) -> u64;
    fn is_nan(self) -> bool {
        self.as_f64().is_nan()
    }
    fn is_finite(self) -> bool {
        self.as_f64().is_finite()
    }
}

/// An arithmetic type (f32 or f64): a [`Float`] that is its own accumulator and that dfdx can
/// compute with (see [`Ten`](super::Ten)).
pub trait Real:
    Float<Acc = Self> + num_traits::Float + Send + Sync + std::iter::Sum + DfdxOps + DfdxMatOps
{
}
impl Real for f32 {}
impl Real for f64 {}

/// The dfdx operations the composed forms use, stamped for the concrete dtypes so that generic
impl Float for half::f16 {
    const DTYPE: DType = DType::F16;
    type Acc = f32;
    fn as_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
    fn of_f64(x: f64) -> Self {
        half::f16::from_f64(x)
    }
    fn to_acc(self) -> f32 {
        self.to_f32()
    }
    fn from_acc(x: f32) -> Self {
        half::f16::from_f32(x)
    }
    fn of_f32(x: f32) -> Self {
        half::f16::from_f32(x)
    }
    fn cast_f32_slice(src: &[f32], dst: &mut [Self]) {
        use half::slice::HalfFloatSliceExt;
        dst.convert_from_f32_slice(src);
    }
    fn zeroed_vec(n: usize) -> Vec<Self> {
        use half::vec::HalfBitsVecExt;
        // `vec![0u16; n]` is a zeroed allocation; +0.0 in f16 is the all-zero pattern
        vec![0u16; n].reinterpret_into()
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
}

impl Float for f32 {
    const DTYPE: DType = DType::F32;
    type Acc = f32;
    fn as_f64(self) -> f64 {
        self as f64
    }
    fn of_f64(x: f64) -> Self {
        x as f32
    }
    fn to_acc(self) -> f32 {
        self
    }
    fn from_acc(x: f32) -> Self {
        x
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
}

impl Float for f64 {
    const DTYPE: DType = DType::F64;
    type Acc = f64;
    fn as_f64(self) -> f64 {
        self
    }
    fn of_f64(x: f64) -> Self {
        x
    }
    fn to_acc(self) -> f64 {
        self
    }
    fn from_acc(x: f64) -> Self {
        x
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
}
