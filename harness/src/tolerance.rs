//! Every numerical tolerance of the workspace, in one place, per dtype.
//!
//! A value `got` is close to `want` when `|got - want| <= atol + rtol * |want|` (golden-v1's rule).
//! Bitwise laws use no tolerance at all; these are for comparisons against closed forms and finite
//! differences, where rounding genuinely differs.

use crate::backend::DType;

/// Absolute and relative tolerance.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Tol {
    pub rtol: f64,
    pub atol: f64,
}

impl Tol {
    /// `|got - want| <= atol + rtol*|want|`; infinities must match exactly, NaN only NaN.
    pub fn close(&self, got: f64, want: f64) -> bool {
        if want.is_nan() {
            return got.is_nan();
        }
        if want.is_infinite() {
            return got == want;
        }
        (got - want).abs() <= self.atol + self.rtol * want.abs()
    }
}

/// Tolerance for comparing one computation done two legitimately different ways in `dtype`
/// (e.g. closed form vs iteration). f16: 10 bits of mantissa; f32: 23; f64: 52.
pub fn for_dtype(dtype: DType) -> Tol {
    match dtype {
        DType::F16 => Tol {
            rtol: 1e-2,
            atol: 1e-3,
        },
        DType::F32 => Tol {
            rtol: 1e-5,
            atol: 1e-6,
        },
        DType::F64 | DType::I32 => Tol {
            rtol: 1e-12,
            atol: 1e-14,
        },
    }
}
