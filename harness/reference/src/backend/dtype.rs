//! Element types: the runtime [`DType`] tag, the [`Float`] storage types (f16, f32, f64) and the
//! [`Real`] arithmetic types (f32, f64) the kernels compute in.

use super::{DfdxMatOps, DfdxOps};
use std::fmt::Debug;

/// dtypes a leaf signature can carry (`int32` for counters, like optax's `count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE binary16 (`float16`).
    F16,
    /// IEEE binary32 (`float32`).
    F32,
    /// IEEE binary64 (`float64`).
    F64,
    /// 32-bit signed integer (`int32`), for step counters.
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
    /// Widen to f64; exact for every type implementing this trait.
    fn as_f64(self) -> f64;
    /// Round an f64 to this type (round to nearest even, in one rounding; identity for f64).
    fn of_f64(x: f64) -> Self;
    /// Widen to the accumulator type ([`Float::Acc`]); exact.
    fn to_acc(self) -> Self::Acc;
    /// Round an accumulator value back to this type (round to nearest even; identity for f32 and
    /// f64).
    fn from_acc(x: Self::Acc) -> Self;
    /// Round an f32 to this type (round to nearest even; exact for f32 and f64).
    fn of_f32(x: f32) -> Self {
        Self::of_f64(x as f64)
    }
    /// [`Float::of_f32`] over a slice (`dst.len() == src.len()`); f16 runs a loop compiled for
    /// the F16C conversion instruction where the CPU has it (half's slice conversion elsewhere),
    /// which rounds identically.
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
    /// `s` as a slice of `half::f16` when `Self` is f16 (`None` otherwise): lets a kernel with a
    /// form of its own for f16 (the f16 fill of [`crate::stack::rng::fill_canonical`]) pick it
    /// without unsafe casts.
    fn f16_slice_mut(s: &mut [Self]) -> Option<&mut [half::f16]> {
        let _ = s;
        None
    }
    /// Raw bits, widened, for bitwise comparisons.
    fn bits(self) -> u64;
    /// `true` for any NaN payload.
    fn is_nan(self) -> bool {
        self.as_f64().is_nan()
    }
    /// `true` unless the value is infinite or NaN.
    fn is_finite(self) -> bool {
        self.as_f64().is_finite()
    }
}

/// An arithmetic type (f32 or f64): a [`Float`] that is its own accumulator and that dfdx can
/// compute with (see [`Ten`](super::Ten)).
pub trait Real:
    Float<Acc = Self> + num_traits::Float + Send + Sync + std::iter::Sum + DfdxOps + DfdxMatOps
{
    /// The first rows of [`super::lane_dot_rows`] computed in this CPU's vector registers by a
    /// form written for `Self`, with the same bits; returns how many rows it wrote (`0`: no such
    /// form here, every row is left to the portable loop).
    #[doc(hidden)]
    fn lane_dot_rows_simd(a: &[Self], b: &[Self], k: usize, out: &mut [Self]) -> usize {
        let _ = (a, b, k, out);
        0
    }
    /// A small product as a sum of outer products in this CPU's vector registers, with the bits
    /// of the `gemm` call (see [`super::gemm::OuterProduct`]); `false` (nothing written) where
    /// there is no such form.
    #[doc(hidden)]
    fn outer_product_simd(o: super::gemm::OuterProduct<'_, Self>) -> bool {
        let _ = o;
        false
    }
    /// [`super::gemm::hidden_layer_into`] in this CPU's vector registers; `false` (nothing
    /// written) where there is no such form.
    #[doc(hidden)]
    fn hidden_layer_simd<M: super::gemm::RowMap<Self>>(
        l: super::gemm::HiddenLayer<'_, Self>,
        act: &M,
    ) -> bool {
        let _ = (l, act);
        false
    }
}
impl Real for f32 {
    fn lane_dot_rows_simd(a: &[f32], b: &[f32], k: usize, out: &mut [f32]) -> usize {
        super::lanes::dot_rows_simd_f32(a, b, k, out)
    }
    fn outer_product_simd(o: super::gemm::OuterProduct<'_, f32>) -> bool {
        super::gemm::outer_product_simd_f32(o)
    }
    fn hidden_layer_simd<M: super::gemm::RowMap<f32>>(
        l: super::gemm::HiddenLayer<'_, f32>,
        act: &M,
    ) -> bool {
        super::gemm::hidden_layer_simd_f32(l, act)
    }
}
impl Real for f64 {
    fn lane_dot_rows_simd(a: &[f64], b: &[f64], k: usize, out: &mut [f64]) -> usize {
        super::lanes::dot_rows_simd_f64(a, b, k, out)
    }
    fn outer_product_simd(o: super::gemm::OuterProduct<'_, f64>) -> bool {
        super::gemm::outer_product_simd_f64(o)
    }
    fn hidden_layer_simd<M: super::gemm::RowMap<f64>>(
        l: super::gemm::HiddenLayer<'_, f64>,
        act: &M,
    ) -> bool {
        super::gemm::hidden_layer_simd_f64(l, act)
    }
}

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
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("f16c") {
            // SAFETY: the CPU has the F16C instructions the function is compiled for
            return unsafe { f16c::cast_f32_slice(src, dst) };
        }
        use half::slice::HalfFloatSliceExt;
        dst.convert_from_f32_slice(src);
    }
    fn f16_slice_mut(s: &mut [Self]) -> Option<&mut [half::f16]> {
        Some(s)
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

/// f32 to f16 over slices with the F16C conversion instruction, the loop compiled for it.
///
/// `vcvtps2ph` with rounding control 0 rounds to nearest even, as IEEE 754's
/// `convertFormat` does and as [`half::f16::from_f32`] does in software (half itself calls the
/// same instruction when it detects F16C): overflow goes to infinity, a NaN stays a NaN with its
/// leading payload bits. half's slice conversion calls its F16C routine once per 8 values; here
/// the whole loop runs inside one function compiled with the feature, so the instruction is
/// inlined.
///
/// # References
/// - Intel 64 and IA-32 Architectures Software Developer's Manual, vol. 2, `VCVTPS2PH`.
#[cfg(target_arch = "x86_64")]
mod f16c {
    use std::arch::x86_64::{
        __m128i, _mm256_cvtps_ph, _mm256_loadu_ps, _mm_storeu_si128, _MM_FROUND_TO_NEAREST_INT,
    };

    /// `dst[i] = f16(src[i])` for `i < min(src.len(), dst.len())`.
    ///
    /// # Safety
    /// The CPU must have AVX and F16C.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn cast_f32_slice(src: &[f32], dst: &mut [half::f16]) {
        let n = src.len().min(dst.len());
        let (mut s, mut d) = (src[..n].chunks_exact(8), dst[..n].chunks_exact_mut(8));
        for (s8, d8) in (&mut s).zip(&mut d) {
            // SAFETY: `s8` holds 8 f32 (32 bytes) and `d8` 8 f16 (16 bytes); both accesses are
            // unaligned loads and stores
            unsafe {
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(s8.as_ptr()));
                _mm_storeu_si128(d8.as_mut_ptr().cast::<__m128i>(), h);
            }
        }
        for (x, y) in d.into_remainder().iter_mut().zip(s.remainder()) {
            *x = half::f16::from_f32(*y);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Float;
    use half::f16;

    /// f32 values around every f16 rounding boundary, every special class, and a sweep over the
    /// whole f32 bit space.
    fn hard_cases() -> Vec<f32> {
        let mut xs = vec![
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7f80_0001), // signalling NaN
            f32::MIN_POSITIVE,
            65504.0,        // f16::MAX
            65520.0,        // halfway between f16::MAX and the next step: rounds to infinity
            65519.996,      // just below it: rounds to f16::MAX
            2f32.powi(-24), // the smallest f16 subnormal
            2f32.powi(-25), // half of it: a tie, rounds to zero (even)
            2f32.powi(-25) * 1.0000001,
        ];
        // each pair of adjacent positive f16 values: both, their midpoint (a tie) and the f32
        // values one step either side of it
        for bits in 0u16..0x7c00 {
            let (a, b) = (
                f16::from_bits(bits).to_f64(),
                f16::from_bits(bits + 1).to_f64(),
            );
            let mid = ((a + b) / 2.0) as f32; // exact: the midpoint has 12 significant bits
            for x in [
                a as f32,
                mid,
                f32::from_bits(mid.to_bits() - 1),
                f32::from_bits(mid.to_bits() + 1),
            ] {
                xs.extend([x, -x]);
            }
        }
        xs.extend((0..u32::MAX / 4099).map(|k| f32::from_bits(k * 4099)));
        xs
    }

    #[test]
    fn the_f16_slice_cast_rounds_to_nearest_even_like_the_scalar_cast() {
        let xs = hard_cases();
        let mut fast = vec![f16::ZERO; xs.len()];
        // an odd offset, so that both the 8-wide body and the scalar tail run
        f16::cast_f32_slice(&xs[3..], &mut fast[3..]);
        f16::cast_f32_slice(&xs[..3], &mut fast[..3]);
        for (&x, &h) in xs.iter().zip(&fast) {
            // f32 -> f64 is exact and f64 -> f16 rounds once, in software: the reference
            let want = f16::from_f64(x as f64);
            if x.is_nan() {
                assert!(
                    h.is_nan() && h.is_sign_negative() == x.is_sign_negative(),
                    "{x:?}"
                );
            } else {
                assert_eq!(h.to_bits(), want.to_bits(), "{x:e} ({:#010x})", x.to_bits());
            }
        }
    }
}
