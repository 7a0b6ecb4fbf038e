//! Every numerical tolerance of the workspace, in one place, per dtype.
//!
//! A value `got` is close to `want` when `|got - want| <= atol + rtol * |want|` (golden-v1's rule).
//! Bitwise laws use no tolerance at all; these are for comparisons against closed forms and finite
//! differences, where rounding genuinely differs.

use crate::backend::DType;

/// Absolute and relative tolerance.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Tol {
    /// Relative part, a fraction of `|want|`.
    pub rtol: f64,
    /// Absolute part.
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

/// The distance from `|x|` (rounded to `dtype`) to the next larger number of `dtype`: one unit
/// in the last place. Infinite or NaN `x` gives NaN.
///
/// ```
/// use harness::backend::DType;
/// use harness::tolerance::spacing;
/// assert_eq!(spacing(DType::F64, 1.0), f64::EPSILON);
/// assert_eq!(spacing(DType::F32, -1.0), f32::EPSILON as f64);
/// assert_eq!(spacing(DType::F32, 3000.0), 2f64.powi(-12));
/// ```
pub fn spacing(dtype: DType, x: f64) -> f64 {
    if !x.is_finite() {
        return f64::NAN;
    }
    match dtype {
        DType::F32 => {
            let y = (x.abs() as f32).min(f32::MAX);
            (f32::from_bits(y.to_bits() + 1) - y) as f64
        }
        DType::F16 => {
            let y = half::f16::from_f64(x.abs()).min(half::f16::MAX);
            (half::f16::from_bits(y.to_bits() + 1) - y).to_f64()
        }
        DType::F64 | DType::I32 => {
            let y = x.abs().min(f64::MAX);
            f64::from_bits(y.to_bits() + 1) - y
        }
    }
}

/// `tol` widened for an update read back as `new - old` parameters, `old` the parameter and
/// `want` the expected update: the in-place step rounds twice to the parameters' spacing (the
/// decayed parameter, then the step subtracted from it), and the difference `new - old` is
/// exact when the two are within a factor 2 (Sterbenz) or rounds once more, so the reading
/// is off the step by at most 1.5 units in the last place of the larger of `|old|` and
/// `|old + want|`; the allowance is 2 of them, added to `atol`. In f32 a parameter near 3000 has
/// spacing 2.4e-4: an update of 7e-3 read this way may be off by up to 3.7e-4 (5%), which no
/// bug explains.
///
/// ```
/// use harness::backend::DType;
/// use harness::tolerance::{conformance, read_through_params};
/// let t = read_through_params(conformance(DType::F32), DType::F32, 3000.0, -7e-3);
/// assert!(t.close(-7e-3 + 2.4e-4, -7e-3));
/// assert!(!t.close(-7e-3 + 1e-3, -7e-3));
/// ```
pub fn read_through_params(tol: Tol, dtype: DType, old: f64, want: f64) -> Tol {
    let scale = old.abs().max((old + want).abs());
    Tol {
        rtol: tol.rtol,
        atol: tol.atol + 2.0 * spacing(dtype, scale),
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

/// One unit in the last place of an f64 subnormal (`2^-1074`, `f64::from_bits(1)`): the absolute
/// rounding error of one operation whose result is subnormal is at most half of it, however small
/// the result (so a relative tolerance alone cannot describe it).
pub const F64_SUBNORMAL_ULP: f64 = f64::from_bits(1);

/// Absolute slack between `(x * r) / d` and `(x / d) * r` in f64 (RAdam's rectified branch vs
/// Adam's update times `r`), beyond the relative [`for_dtype`] tolerance: where `x * r`, `x / d`
/// or the result is subnormal each carries an absolute error up to `F64_SUBNORMAL_ULP / 2`; the
/// first is divided by `d >= d_min`, the second multiplied by `r`. Found by the radam fuzz target
/// (`fixtures/regressions/radam/subnormal-*`): `g = 1.7e-316`, `eps = 2.5e-316` differ by 1e-9
/// relative.
pub fn reordered_quotient_subnormal_slack(r: f64, d_min: f64) -> f64 {
    F64_SUBNORMAL_ULP * (r.abs() / d_min + r.abs() + 1.0)
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
/// exactly (a constant; `sum b_i = 1`). Observed: worst 5.2e-9 over 400 generated cases.
pub const CNF_LINEAR: Tol = Tol {
    rtol: 1e-6,
    atol: 1e-4,
};

/// Sampling (forward solve) then evaluating (backward solve) the same point: the two
/// constant-step Tsit5 solves invert each other up to truncation, `O(h^5)` per unit time for
/// smooth fields (`h = 0.05`, `T = 0.5`, Lipschitz constants of the test models below 5).
/// Bound: `10 steps * C h^6` with `C ~ L^6/720 * |y|` gives ~1e-7 per block on the law's
/// models; `atol = 1e-6` leaves a factor of 10. Observed: worst 1.4e-10 over 160 models
/// (widths 1-8, depths 0-2, up to 2 blocks, weights up to 1.5x the initial scale).
pub const CNF_ROUND_TRIP: Tol = Tol {
    rtol: 1e-6,
    atol: 1e-6,
};

/// `|s_out,i - P(s_in,i / |X|_F)|`: the sorted singular values of a Newton–Schulz output (f64,
/// `m x n` with `m <= 16`, `n <= 48`, 5 iterations) against the iteration's scalar polynomial
/// applied to the sorted normalised input singular values (the law
/// `muon_singular_value_band`).
///
/// Derivation: each iteration forms `A = X X^T` and `B = b A + c A^2` (sums of at most 48
/// terms) and `X' = a X + B X`, a few ulp (`u = 1.1e-16`) per term, `~ 3 x 48 u ~ 1.6e-14`
/// relative per iteration; an error in a singular value is then carried by the polynomial's
/// slope, at most the preset's `a ~ 3.4` per iteration, `3.4^5 ~ 450` over five. With the
/// Jacobi singular values' own `~ n u` this gives `~ 5 x 1.6e-14 x 450 ~ 4e-11`; `1e-9` leaves a
/// factor of 25. Observed: worst 1.34e-14 over 9000 generated cases (3 seeds x 3000). Wrong
/// coefficients move the values by `O(1e-2)`.
pub const NS_SINGULAR_VALUES: f64 = 1e-9;

/// `|sum_cells p h^2 - 1|` for a small 2-D model on `[-7, 7]^2` with 140 x 140 cells (`h = 0.1`).
///
/// Derivation: for a smooth density that is negligible at the boundary, the midpoint rule's
/// Euler–Maclaurin boundary terms vanish and its error decays exponentially in `1/h` (it is
/// limited by the width of the strip where `p` is analytic, here set by `tanh`/`sigmoid` poles
/// at distance ~1), so with `h = 0.1` the quadrature error is far below 1e-8. The mass outside
/// the square is below `exp(-(7 - s)^2 / 2)` with `s <= 2` the largest displacement the law's
/// fields (`|f| <= 4` over `T = 0.5`) produce, about 4e-6; the flow's own truncation error
/// (CNF_ROUND_TRIP) is 1e-6 per point. Hence 1e-5. Observed: worst 6.5e-11 (three 2-block
/// width-8 models at 1.5x scale). A wrong trace sign or a dropped block changes the mass by
/// O(1).
pub const CNF_NORMALISATION: f64 = 1e-5;

/// The hand-written VJP of a CNF block ([`crate::cnf::adjoint`]) vs the same VJP on dfdx's tape,
/// compared on the gradient of a whole training loss (f64). Both compute the same sums in other
/// orders (stacked vs separate products, fused vs separate elementwise passes), so they differ by
/// rounding only: a few ulp per operation, amplified by at most the number of operations on a
/// path (`~ 10 steps x 6 stages x 4 layers x 64-term sums`, `~ 2e4`), i.e. `~ 2e4 * 2.2e-16 ~
/// 5e-12` relative to the gradient's scale. Hence `rtol = 1e-9, atol = 1e-11`, a factor of 100
/// above that. Observed: worst 1.7e-14 relative to the block's largest gradient entry over 300
/// generated cases (exact and Hutchinson, one and three chunks). A wrong term (a dropped trace
/// cotangent, a sign) misses by O(1e-3) or more.
pub const CNF_MANUAL_VJP: Tol = Tol {
    rtol: 1e-9,
    atol: 1e-11,
};

/// The CNF training loss and its gradient ([`crate::cnf::flow::loss_and_grad`]) computed in
/// `dtype` vs the same computation in f64 on the same weights, batch and probes (the
/// `dtype`-rounded values, so that only the arithmetic differs); gradient entries are compared
/// against their block's largest entry (as [`CNF_MANUAL_VJP`]).
///
/// Derivation (f32): every operation rounds with unit roundoff `u = 2^-24 ~ 6e-8`. A gradient
/// entry is a sum over the reverse sweep of `~ 10 steps x 6 stages x 4 layers` contributions,
/// each the end of a path of `~ 64`-term products through the layers: `~ 2e4` roundings on a
/// path, as in [`CNF_MANUAL_VJP`]. Their errors are independent in sign and add like a random
/// walk, `sqrt(2e4) u ~ 8.5e-6` of the block's scale. Hence `rtol = 2e-4`, a factor of 20
/// above that estimate (the worst case, `2e4 u ~ 1.2e-3` with every rounding in one
/// direction, is not what rounding to nearest does over a path this long), and `atol = 1e-6`
/// for entries and losses near 0 (the loss is `O(1)`; its own f32 rounding is `~ 2e-7`).
/// Observed: worst 1.4e-5 relative to the block's largest entry for the gradient and 4.5e-7
/// relative for the loss over 400 generated cases (exact and Hutchinson, one chunk and
/// several). A wrong term (the trace cotangent dropped) misses by 3.6e-4 to O(1) of the
/// block's scale on the same cases. f64 against itself is the same computation, bit for bit;
/// f16 is not a CNF dtype and gets [`for_dtype`]'s.
pub fn cnf_loss_grad(dtype: DType) -> Tol {
    match dtype {
        DType::F32 => Tol {
            rtol: 2e-4,
            atol: 1e-6,
        },
        d => for_dtype(d),
    }
}

/// The CNF block field `[f; trace]` (f64) computed by the fast hand-written forward
/// ([`crate::cnf::field`]) vs its dfdx face on the tape ([`crate::cnf::flow::TapedField`]), at
/// one point. One evaluation is at most `4` layers of `<= 9`-term sums plus the tangent products
/// (`d <= 3` of them), each in another order (stacked vs separate products): a few ulp per
/// operation over `~ 100` operations on a path, `~ 100 * 2.2e-16 ~ 2e-14` relative to the
/// output's scale. Hence `rtol = 1e-12, atol = 1e-13` (50x that). Observed: worst 4.4e-16
/// absolute (2.2e-14 relative to the largest output) over 2000 generated cases (exact trace). A wrong term (a trace sign, a dropped bias) misses by
/// O(1e-2).
pub const CNF_FIELD_FACES: Tol = Tol {
    rtol: 1e-12,
    atol: 1e-13,
};

/// Conformance of an independent implementation of an optimizer to the reference, step for step:
/// the tolerances the optimizer golden cases record (`fixtures/gen/gen_optim.py`'s `TOLERANCE`:
/// f32 `rtol 2e-4, atol 1e-6`, f64 `rtol 1e-9, atol 1e-12`), under which the reference itself
/// matches optax. Two implementations that both match optax at this tolerance are within twice
/// it of each other; the check uses it once, so a difference the tolerance does not explain is
/// a finding, not rounding. f16 (not compared step for step) gets [`for_dtype`]'s.
pub fn conformance(dtype: DType) -> Tol {
    match dtype {
        DType::F32 => Tol {
            rtol: 2e-4,
            atol: 1e-6,
        },
        DType::F64 | DType::I32 => Tol {
            rtol: 1e-9,
            atol: 1e-12,
        },
        DType::F16 => for_dtype(DType::F16),
    }
}

/// Significant decimal digits a number keeps in the reviewed snapshots
/// (`tests/snapshots/*.snap`; see [`snapshot_rounded`]).
///
/// Snapshots pin numerics by review, not by a bound with a derivation: a change that shows in a
/// snapshot is one a person looks at with `cargo insta review`. Six digits are below f32's
/// precision (24 bits, about 7.2 digits), so a change of a few ulp in an f32 value usually leaves
/// its snapshot alone (it shows only when the value lies near a rounding boundary of the sixth
/// digit), while any change of 1e-5 relative or more shows. The same six digits are used for f16
/// values (which they hold exactly) and f64 ones, where an f64 change below 1e-6 relative is left
/// to the bitwise laws (1 and 2 threads, fast and composed forms, same seed) and to the golden
/// cases against the real libraries, which compare at [`conformance`]'s f64 tolerance.
pub const SNAPSHOT_DIGITS: i32 = 6;

/// `x` rounded to [`SNAPSHOT_DIGITS`] significant decimal digits (half away from zero); zero,
/// infinities and NaN as they are.
///
/// ```
/// use harness::tolerance::snapshot_rounded;
/// assert_eq!(snapshot_rounded(3.14159265), 3.14159);
/// assert_eq!(snapshot_rounded(-0.000123456789), -0.000123457);
/// assert_eq!(snapshot_rounded(0.0), 0.0);
/// assert!(snapshot_rounded(f64::NAN).is_nan());
/// ```
pub fn snapshot_rounded(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    // scale so that the digits kept are the integer part: 10^(digits - 1 - floor(log10 |x|))
    let s = 10f64.powi(SNAPSHOT_DIGITS - 1 - x.abs().log10().floor() as i32);
    (x * s).round() / s
}

/// The error below which an order law stops reading the ratio of two errors
/// ([`order_verdict`](crate::laws::ode::order_verdict)): the order problems' states are `O(1)`
/// (`|y0| <= 2`), and a 32-step f64 solve rounds a few times per stage, so its round-off alone is
/// `~ 32 x 10 x 2.2e-16 ~ 7e-14`; an error of `1e-13` or less is mostly round-off, and
/// `log2(e(h) / e(h/2))` no longer measures the truncation order.
pub const ORDER_ROUND_OFF_FLOOR: f64 = 1e-13;

/// Accepted measured order `p_hat = log2(e(h) / e(h/2))` for a method of order `p` on the
/// damped rotation ([`convergence_order`](crate::laws::ode::convergence_order)):
/// `p - 0.25 <= p_hat <= p + 1.25`. The lower edge allows pre-asymptotic and round-off effects
/// at the step sizes used (`(t1-t0)/16` and `/32`); the upper edge allows methods whose leading
/// error term nearly cancels on this problem (Tsit5 measures 5.2-5.9 here, documented in
/// `ode::solve`'s tests).
pub const ORDER_BAND: (f64, f64) = (0.25, 1.25);

/// Accepted measured order on `y' = (1 + t) A y`: at least `p - 0.5`, with no upper edge (an
/// order above the claimed one is not a stage evaluated at the wrong time). Measured over 2000
/// cases of [`rotation_case`](crate::laws::ode::rotation_case) for every reference method at 16 and 32 steps: `p_hat - p` from
/// -0.41 (Tsit5) to +1.26 (Tsit5), Euler's and Heun's within [-0.20, 1.20]; a wrong node or a
/// frozen time loses a whole order or more.
pub const TIME_DEPENDENT_ORDER_BAND: (f64, f64) = (0.5, f64::INFINITY);

/// Accepted global error per accepted step, in units of the local tolerance
/// `rtol |y|max + atol`: each accepted step commits a local error below the tolerance,
/// amplified along the solve at most by `e^{L T} <= e^4` on the suite's problems (`L <= 2`,
/// `T <= 2`), with a factor 20 for the controllers' different error norms. The same constant
/// bounds the round trip.
pub const PROPORTIONALITY_K: f64 = 1e3;

/// How many times the predicted growth of the accepted steps an adaptive solve may show when its
/// tolerance is tightened ([`ADAPTIVE_TOLERANCE_SPAN`]): the law allows
/// `ADAPTIVE_STEP_GROWTH_SLACK * span^(1/(q+1)) * N + ADAPTIVE_STEP_GROWTH_STEPS` steps at the
/// tight tolerance for `N` at the loose one, `q` the order of the error estimate. An
/// error-per-step controller holds each step's estimate, of size `h^(q+1)`, near the tolerance,
/// so the steps grow as `tol^(-1/(q+1))`. Measured on 200
/// [`rotation_case`](crate::laws::ode::rotation_case)s of both order problems, `rtol` 1e-4 then
/// 1e-8: at most 1.055 times `span^(1/(q+1))` for every adaptive reference method (1.087 on
/// 1000 other cases), 0.994 for `ode_solvers`' Dopri5, 0.885 for diffsol's Tsit45, and 1.012 on
/// 1000 cases for `ode_solvers`' Dop853 with its twelfth node corrected (a patched copy of the
/// crate, outside this repository). The factor 2 is margin over those; a stage at the wrong time
/// leaves an order-1 estimate, `span^(1/2)`: 100 times for the span of 10^4 (31 times an
/// order-8 method's 3.2).
pub const ADAPTIVE_STEP_GROWTH_SLACK: f64 = 2.0;

/// Steps the adaptive-order law allows on top of the predicted growth: a solve of a few steps
/// at the loose tolerance is limited by the interval, not by its error.
pub const ADAPTIVE_STEP_GROWTH_STEPS: f64 = 4.0;

/// The loose and the tight `rtol` of the adaptive-order law (`atol = rtol / 100`): a span of
/// 10^4.
pub const ADAPTIVE_TOLERANCE_SPAN: (f64, f64) = (1e-4, 1e-8);

/// Largest `|orth(X^T) - orth(X)^T|` over entries allowed for *square* inputs, in units of the
/// dtype's epsilon times `n` (non-square inputs must agree bit for bit). Measured: 3000 cases of
/// the law's inputs (n <= 24, bounded coefficients, f32 and f64) pass at `16 n eps` and fail at
/// `n eps` (5x5 f64: 1.6e-15); the bound keeps a factor 4 of margin: `64 n eps`.
pub const SQUARE_TRANSPOSE_ULPS_PER_N: f64 = 64.0;

/// Bound of [`planned_matches_composed`](crate::laws::muon::planned_matches_composed) in units of `m * eps` (`m` the small side). Measured
/// with the plan on `gemm` 0.15 (`GemmKernel::Dfdx`): 3000 cases (sides <= 40) pass at 16 and
/// fail at 1 (3x12 f32: 4.7e-7); a factor 4 of margin. Measured again on both kernels over 3000
/// random f32 cases (sides 1-40, diagonal blocks 1-8, the standard coefficients, 5
/// iterations): the largest difference from the composed form is 5.0 `m * eps` on 0.15 and 6.0
/// on 0.19 (the default plan), a factor of more than 10 below the bound.
pub const PLANNED_ULPS_PER_M: f64 = 64.0;

/// Standard errors of the probe mean the Hutchinson estimate may lie from the exact trace.
pub const HUTCHINSON_SIGMAS: f64 = 5.0;
