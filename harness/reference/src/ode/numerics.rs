//! Floating-point helpers that follow JAX/XLA semantics: `nextafter`, NaN-propagating
//! `minimum`/`maximum`, and optimistix's RMS norm.
//!
//! These exist because `f64::min`/`f64::max` *ignore* NaN while `jnp.minimum`/`jnp.maximum`
//! propagate it, and because diffrax's step-end rules are stated in ULPs. Everything here is
//! exact: no helper rounds differently from the operation it names.
//!
//! # References
//! - diffrax 0.7.2 `_integrate.py` (`_clip_to_end`) and `_step_size_controller/constant.py`.
//! - optimistix `rms_norm` / `two_norm`.

use crate::backend::{DType, Real};
use num_traits::Float as NF;

fn next_up_f64(x: f64) -> f64 {
    if x.is_nan() || x == f64::INFINITY {
        return x;
    }
    if x == 0.0 {
        return f64::from_bits(1);
    }
    let b = x.to_bits();
    if x > 0.0 {
        f64::from_bits(b + 1)
    } else {
        f64::from_bits(b - 1)
    }
}

fn next_up_f32(x: f32) -> f32 {
    if x.is_nan() || x == f32::INFINITY {
        return x;
    }
    if x == 0.0 {
        return f32::from_bits(1);
    }
    let b = x.to_bits();
    if x > 0.0 {
        f32::from_bits(b + 1)
    } else {
        f32::from_bits(b - 1)
    }
}

/// The next representable value towards `+inf` (`nextafter(x, inf)`), in `A`'s own precision.
pub fn next_up<A: Real>(x: A) -> A {
    match A::DTYPE {
        DType::F32 => A::of_f64(next_up_f32(x.as_f64() as f32) as f64),
        _ => A::of_f64(next_up_f64(x.as_f64())),
    }
}

/// The next representable value towards `-inf`, with XLA's flush-to-zero behaviour at zero:
/// `next_down(0) = -MIN_POSITIVE` (the smallest negative *normal*), not a subnormal.
pub fn next_down_ftz<A: Real>(x: A) -> A {
    if x == A::zero() {
        return -A::min_positive_value();
    }
    match A::DTYPE {
        DType::F32 => A::of_f64(-next_up_f32(-(x.as_f64() as f32)) as f64),
        _ => A::of_f64(-next_up_f64(-x.as_f64())),
    }
}

/// `t1` moved 100 ULPs towards `-inf` (repeated [`next_down_ftz`]): diffrax's end-clip threshold.
pub fn minus_100_ulps<A: Real>(t1: A) -> A {
    let mut x = t1;
    for _ in 0..100 {
        x = next_down_ftz(x);
    }
    x
}

/// `jnp.minimum`: IEEE 754-2019 `minimum`, which is what XLA computes on CPU (checked against
/// jax 0.10.2): NaN if either operand is NaN, and `-0 < +0`, so `min(+0, -0) = min(-0, +0) = -0`
/// (NumPy's `np.minimum` returns its first operand on a tie of zeros instead).
pub fn nan_min<A: Real>(a: A, b: A) -> A {
    if NF::is_nan(a) || NF::is_nan(b) {
        A::nan()
    } else if a < b {
        a
    } else if b < a {
        b
    } else if NF::is_sign_negative(a) {
        // equal values: only the signs of two zeros can differ
        a
    } else {
        b
    }
}

/// `jnp.maximum`: IEEE 754-2019 `maximum` (as [`nan_min`]): NaN if either operand is NaN, and
/// `max(+0, -0) = max(-0, +0) = +0`.
pub fn nan_max<A: Real>(a: A, b: A) -> A {
    if NF::is_nan(a) || NF::is_nan(b) {
        A::nan()
    } else if a > b {
        a
    } else if b > a {
        b
    } else if NF::is_sign_positive(a) {
        a
    } else {
        b
    }
}

/// `jnp.clip(x, lo, hi)` = `minimum(maximum(x, lo), hi)`, NaN-propagating.
pub fn nan_clip<A: Real>(x: A, lo: A, hi: A) -> A {
    nan_min(nan_max(x, lo), hi)
}

/// optimistix `rms_norm` of a vector given element-wise by `x(i)`, `i < n`:
/// `|x_0|` when `n == 1`, `0` when `n == 0`, else `sqrt(sum x_i^2) / sqrt(n)`.
pub fn rms_norm<A: Real>(n: usize, x: impl Fn(usize) -> A) -> A {
    match n {
        0 => A::zero(),
        1 => NF::abs(x(0)),
        _ => {
            let mut ss = A::zero();
            for i in 0..n {
                let v = x(i);
                ss += v * v;
            }
            NF::sqrt(ss) / A::of_f64((n as f64).sqrt())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_up_moves_one_ulp_in_each_precision() {
        assert_eq!(next_up(1.0f64), 1.0 + f64::EPSILON);
        assert_eq!(next_up(1.0f32), 1.0 + f32::EPSILON);
        assert_eq!(next_up(-1.0f64), -1.0 + f64::EPSILON / 2.0);
        assert_eq!(next_up(f64::INFINITY), f64::INFINITY);
    }

    #[test]
    fn next_down_at_zero_is_smallest_negative_normal() {
        assert_eq!(next_down_ftz(0.0f64), -f64::MIN_POSITIVE);
        assert_eq!(next_down_ftz(0.0f32), -f32::MIN_POSITIVE);
        assert_eq!(next_down_ftz(1.0f64), 1.0 - f64::EPSILON / 2.0);
    }

    #[test]
    fn minus_100_ulps_of_four_is_exact() {
        // ULP of values just below 4.0 is 2^-51 = 4*EPSILON/8*... : 4.0 - 100 * 2^-51.
        assert_eq!(minus_100_ulps(4.0f64), 4.0 - 100.0 * 2f64.powi(-51));
    }

    #[test]
    fn nan_min_max_order_signed_zeros_as_jax_does() {
        // jax 0.10.2 (CPU): jnp.minimum(0., -0.) = jnp.minimum(-0., 0.) = -0.,
        // jnp.maximum(0., -0.) = jnp.maximum(-0., 0.) = 0.
        for (a, b) in [(0.0f64, -0.0f64), (-0.0, 0.0)] {
            assert_eq!(
                nan_min(a, b).to_bits(),
                (-0.0f64).to_bits(),
                "min({a}, {b})"
            );
            assert_eq!(nan_max(a, b).to_bits(), 0.0f64.to_bits(), "max({a}, {b})");
            let (a, b) = (a as f32, b as f32);
            assert_eq!(
                nan_min(a, b).to_bits(),
                (-0.0f32).to_bits(),
                "min({a}, {b}) f32"
            );
            assert_eq!(
                nan_max(a, b).to_bits(),
                0.0f32.to_bits(),
                "max({a}, {b}) f32"
            );
        }
        // otherwise the smaller / larger operand, whichever side it is on
        assert_eq!((nan_min(1.0, 2.0), nan_min(2.0, 1.0)), (1.0, 1.0));
        assert_eq!((nan_max(1.0, 2.0), nan_max(2.0, 1.0)), (2.0, 2.0));
        assert_eq!(nan_min(-1.0, f64::NEG_INFINITY), f64::NEG_INFINITY);
    }

    #[test]
    fn nan_min_max_propagate_nan_unlike_std() {
        assert!(nan_min(f64::NAN, 1.0).is_nan());
        assert!(nan_max(1.0, f64::NAN).is_nan());
        assert!(nan_clip(f64::NAN, 0.2, 10.0).is_nan());
        assert_eq!(nan_clip(0.1, 0.2, 10.0), 0.2);
        assert_eq!(nan_clip(f64::INFINITY, 1.0, 10.0), 10.0);
    }

    #[test]
    fn rms_norm_of_single_element_is_abs_and_of_pair_is_root_mean_square() {
        assert_eq!(rms_norm(1, |_| -3.0f64), 3.0);
        // sqrt(9 + 16) / sqrt(2) = 5 / sqrt(2)
        assert_eq!(rms_norm(2, |i| [3.0f64, 4.0][i]), 5.0 / 2f64.sqrt());
        assert_eq!(rms_norm(0, |_| 1.0f64), 0.0);
    }
}
