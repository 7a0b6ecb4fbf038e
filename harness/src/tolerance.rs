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

/// Gradient through an f64 solve vs a central finite difference `(L(x+h) - L(x-h)) / (2h)`,
/// `h = 1e-6 * max(|x|, 1)`, on the fixed-step-times map ([`crate::ode::grad`]).
///
/// Derivation: truncation is `h^2/6 * |L'''|`, about `1e-12` relative on the test problems
/// (smooth, `|L'''| <= 1e2`). Rounding: an evaluation of `L` over `N` steps with `|L| <= 10`
/// carries an error of about `sqrt(N) * 4 ulp * |L|` (rounding errors of a stable integration
/// add like a random walk), which the difference quotient divides by `2h >= 2e-6`: for the
/// longest solves the law generates (`N ~ 2500`, Heun under PID at rtol 1e-6) that is
/// `50 * 4 * 2.2e-16 * 10 / 2e-6 ~ 2e-7`. Hence `atol = 1e-6`; `rtol = 1e-5` covers the
/// relative part with a wide margin. Observed: `|g - fd| <= 1.1e-8` over every method, constant
/// and PID control, damped rotations and Lotka–Volterra, up to 2445 steps; a wrong gradient
/// (one stage's parameter term dropped) misses by `1e-2` or more.
pub const GRAD_FD: Tol = Tol {
    rtol: 1e-5,
    atol: 1e-6,
};
