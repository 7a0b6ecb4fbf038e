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

/// CNF log-likelihood of a linear field vs its closed form (matrix exponential, f64).
///
/// Derivation: Tsit5 on `y' = A y` with 10 constant steps of `h = T/10`, `T <= 1`, and
/// `||A||_1 <= 3` (entries of `W1` in [-1, 1], `d <= 3`, sigmoid < 1): the one-step error is the
/// stability polynomial's deviation from `exp(hA)`, `sum_{k>=6} |hA|^k / k!` up to Tsit5's
/// order-6 coefficient, `<= (0.3)^6 / 720 * e^0.3 ~ 1.4e-6` relative per step in the worst case;
/// over 10 steps and through `|y|^2/2` with `|x| <= 3*sqrt(3)` that bounds `|delta log p|` by
/// about 1e-4, so `atol = 1e-4` is the proven envelope. The trace term itself is integrated
/// exactly (a constant; `sum b_i = 1`). Observed: worst 3e-9 over the law's cases.
pub const CNF_LINEAR: Tol = Tol {
    rtol: 1e-6,
    atol: 1e-4,
};

/// Sampling (forward solve) then evaluating (backward solve) the same point: the two
/// constant-step Tsit5 solves invert each other up to truncation, `O(h^5)` per unit time for
/// smooth fields (`h = 0.05`, `T = 0.5`, Lipschitz constants of the test models below 5).
/// Bound: `10 steps * C h^6` with `C ~ L^6/720 * |y|` gives ~1e-7 per block on the law's
/// models; `atol = 1e-6` leaves a factor of 10. Observed: worst 4e-9.
pub const CNF_ROUND_TRIP: Tol = Tol {
    rtol: 1e-6,
    atol: 1e-6,
};

/// `|sum_cells p h^2 - 1|` for a small 2-D model on `[-7, 7]^2` with 140 x 140 cells (`h = 0.1`).
///
/// Derivation: the midpoint rule's error is `h^2/24 * integral |laplacian p|`, about
/// `0.01/24 * 2/pi ~ 3e-4` for a unit Gaussian (and a few times that for the law's mildly
/// deformed densities); the mass outside the square is below `e^{-(7-s)^2/2}` with `s <= 3` the
/// largest displacement the model's field can produce over `T = 0.5` (|f| <= sum |w3| + ...),
/// i.e. below 4e-4. Hence 5e-3. Observed: worst 6e-4.
pub const CNF_NORMALISATION: f64 = 5e-3;
