//! # `tanh` in f64 without a library call, for the training kernels
//!
//! The CNF's training step evaluates `tanh` on every hidden unit of every sample at every stage
//! (about 6 million calls per step of the benchmark configuration), and the C library's `tanh`
//! (a call to `expm1` behind a call) was a third of the step's time. This version is plain
//! arithmetic with no calls and no data-dependent branches, so the compiler can vectorise the
//! loops around it. Its multiply-adds are fused by name (`mul_add`), each rounded once,
//! correctly, so its bits are the same on every CPU: one instruction in the AVX2 and AVX-512
//! forms of [`crate::backend::vectorised`] and on AArch64, the C library's `fma` in the portable
//! x86-64 form (correct there too, but a call per operation, several times slower).
//! Over a slice, [`tanh_slice`] runs each step of the method over a block of [`BLOCK`] values
//! before the next ([`tanh_lanes`], [`tanh_f32_lanes`]), so that several vectors are in flight
//! at once; the one-value forms are the one-lane case of the same code, so the bits do not
//! depend on the form.
//!
//! ```text
//! tanh(x)  = sign(x) * m / (m + 2),   m = expm1(2|x|)         (2|x| clamped to 40: tanh = 1)
//! expm1(y) = 2^k (e^r - 1) + (2^k - 1),  k = round(y / ln 2),  r = y - k ln 2 (two-part ln 2)
//! e^r - 1  = r + r^2/2! + ... + r^13/13!                   (|r| <= ln 2 / 2, Estrin's scheme)
//! ```
//!
//! With `k` rounded to nearest, `|r| <= ln 2 / 2` and the first term left out, `r^14 / 14!`, is
//! below `2^-56 |r|`; for `k = 0` (`y < ln 2 / 2`) `expm1` is the series alone, so small
//! arguments keep their relative accuracy; for `k >= 1` the two terms of `m` can have opposite
//! signs, but `2^k - 1` is exact and outweighs `2^k |e^r - 1| <= 2^k (1 - 2^-1/2)`, so the
//! relative error of the first term grows by at most `0.586 / 0.414 = 1.42` in `m` (at `k = 1`).
//! Guarantees: within 6 ulp of glibc's `tanh` over the whole line
//! (tested on a dense sweep of 2 million points and a geometric sweep to subnormals; on 4 million
//! points of `[-25, 25]`, 96.0% equal and a worst of 4 ulp, near `|x| = 0.24`, from the rounding
//! of `m` and `m + 2`), odd (`tanh(-x) = -tanh(x)` bit for bit, signed zeros kept),
//! `tanh(+-inf) = +-1`, NaN in gives NaN out.
//!
//! # References
//! - W. J. Cody, W. Waite, *Software Manual for the Elementary Functions*, Prentice-Hall 1980
//!   (argument reduction with a two-part `ln 2`).
//! - The split `ln 2 = LN2_HI + LN2_LO` with `LN2_HI` exact in 32 bits is fdlibm's.

use crate::backend::{DType, Real};

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
const TERMS: usize = 13;
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

/// How many values [`tanh_slice`] passes to the lane forms at once.
///
/// Each operation of the method runs over all of them before the next, so one block of 64 is
/// 8 (f64) or 4 (f32) independent AVX-512 vectors in flight, where the element-wise loop
/// `h_i = tanh(x_i)` compiled by itself keeps about one: the method is a chain of some 30
/// dependent operations, longer than the out-of-order window can overlap. On one core of the
/// benchmark machine (Zen 4), for the method as it was before its multiply-adds were fused (17
/// terms in f64), the loop over one chunk of the CNF (`125 x 64` values) took 2.7 (f64) and
/// 2.2 ns (f32) per value, and the blocks 1.6-1.7 and 0.9 ns, with the same bits; the fused
/// method takes 1.34 (f64) and 0.40 ns (f32) in blocks.
pub const BLOCK: usize = 64;

/// `[f(0), .., f(N - 1)]`: one operation of the method over every lane, as a plain loop (which the
/// compiler turns into vector instructions when the lanes are many, and into a scalar when there is
/// one).
macro_rules! lanes {
    ($n:expr, |$i:ident| $e:expr) => {{
        let mut out = [Default::default(); $n];
        for $i in 0..$n {
            out[$i] = $e;
        }
        out
    }};
}

/// `tanh` of each of `N` values, by the method of the module docs, one operation at a time over
/// all lanes (the same operations on each lane as [`tanh`], so the same bits: [`tanh`] is this
/// with one lane).
///
/// ```
/// use harness_reference::cnf::tanh::{tanh, tanh_lanes};
/// let x = [-3.0, -0.25, 0.0, 1e-300, 0.5, 19.0, 21.0, f64::INFINITY];
/// let y = tanh_lanes(x);
/// for (xi, yi) in x.iter().zip(y) {
///     assert_eq!(yi.to_bits(), tanh(*xi).to_bits());
/// }
/// ```
#[inline(always)]
pub fn tanh_lanes<const N: usize>(x: [f64; N]) -> [f64; N] {
    let c = &INV_FACT;
    // y = min(2|x|, CLAMP) = k ln 2 + r with k = round(y / ln 2) in 0..=58, to nearest, so that
    // |r| <= ln 2 / 2; rounded by the magic constant and read off the rounded double's low bits
    // (no float-to-int conversion); y < ln 2 / 2 gives k = 0 and r = y, the series alone
    let y: [f64; N] = lanes!(N, |i| {
        let y = 2.0 * x[i].abs();
        if y > CLAMP {
            CLAMP
        } else {
            y
        }
    });
    let t: [f64; N] = lanes!(N, |i| y[i] * INV_LN2 + ROUND_MAGIC);
    let kf: [f64; N] = lanes!(N, |i| t[i] - ROUND_MAGIC);
    // r = (y - k LN2_HI) - k LN2_LO: the first product is exact
    let r: [f64; N] = lanes!(N, |i| (-kf[i])
        .mul_add(LN2_LO, (-kf[i]).mul_add(LN2_HI, y[i])));
    // 2^k from the bits of t
    let scale: [f64; N] = lanes!(N, |i| {
        let k = t[i].to_bits().wrapping_sub(ROUND_MAGIC.to_bits());
        f64::from_bits(k.wrapping_add(1023) << 52)
    });
    // e^r - 1 = r q(r), q(r) = sum_{i<13} c_i r^i with c_i = 1 / (i + 1)!, by Estrin's scheme (a
    // shallow tree of independent fused multiply-adds instead of one long Horner chain):
    //   q = [(c0 + c1 r) + r^2 (c2 + c3 r)] + r^4 [(c4 + c5 r) + r^2 (c6 + c7 r)]
    //     + r^8 {[(c8 + c9 r) + r^2 (c10 + c11 r)] + r^4 c12}
    let r2: [f64; N] = lanes!(N, |i| r[i] * r[i]);
    let r4: [f64; N] = lanes!(N, |i| r2[i] * r2[i]);
    let r8: [f64; N] = lanes!(N, |i| r4[i] * r4[i]);
    let lin = |j: usize, i: usize| c[j + 1].mul_add(r[i], c[j]);
    let quad = |j: usize, i: usize| r2[i].mul_add(lin(j + 2, i), lin(j, i));
    let q0: [f64; N] = lanes!(N, |i| r4[i].mul_add(quad(4, i), quad(0, i)));
    let q1: [f64; N] = lanes!(N, |i| r4[i].mul_add(c[12], quad(8, i)));
    let q: [f64; N] = lanes!(N, |i| r8[i].mul_add(q1[i], q0[i]));
    // m = expm1(y) = 2^k (e^r - 1) + (2^k - 1), 2^k - 1 exact
    let m: [f64; N] = lanes!(N, |i| scale[i].mul_add(r[i] * q[i], scale[i] - 1.0));
    // tanh(x) = sign(x) m / (m + 2)
    lanes!(N, |i| (m[i] / (m[i] + 2.0)).copysign(x[i]))
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
    tanh_lanes([x])[0]
}

/// `ln 2` split for f32: the low 9 bits of `LN2_HI_F32`'s significand are zero, so
/// `k * LN2_HI_F32` is exact in f32 for `k < 2^9` (here `k <= 28`).
const LN2_HI_F32: f32 = 0.693_145_75; // 0x3f317200
const LN2_LO_F32: f32 = 1.428_606_8e-6; // ln 2 - LN2_HI_F32, rounded
/// `1.5 * 2^23`: adding and subtracting it rounds an f32 of magnitude below `2^22` to an integer.
const ROUND_MAGIC_F32: f32 = 12_582_912.0;
/// Terms of the f32 series `(e^r - 1) / r = sum_i r^i / (i + 1)!`: the first left out,
/// `r^7 / 8!` for `|r| <= ln 2 / 2`, is below `2^-25`.
const TERMS_F32: usize = 7;
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

/// [`tanh_f32`] of each of `N` values, one operation at a time over all lanes (the same
/// operations on each lane, so the same bits: [`tanh_f32`] is this with one lane).
///
/// ```
/// use harness_reference::cnf::tanh::{tanh_f32, tanh_f32_lanes};
/// let x = [-3.0f32, -0.25, 0.0, 1e-30, 0.5, 9.0, 11.0, f32::INFINITY];
/// let y = tanh_f32_lanes(x);
/// for (xi, yi) in x.iter().zip(y) {
///     assert_eq!(yi.to_bits(), tanh_f32(*xi).to_bits());
/// }
/// ```
#[inline(always)]
pub fn tanh_f32_lanes<const N: usize>(x: [f32; N]) -> [f32; N] {
    let c = &INV_FACT_F32;
    // y = min(2|x|, 20) = k ln 2 + r with k = round(y / ln 2) in 0..=29, to nearest, so that
    // |r| <= ln 2 / 2, as in the f64 form; y < ln 2 / 2 gives k = 0 and r = y, the series alone
    let y: [f32; N] = lanes!(N, |i| {
        let y = 2.0 * x[i].abs();
        if y > 20.0 {
            20.0
        } else {
            y
        }
    });
    let t: [f32; N] = lanes!(N, |i| y[i] * std::f32::consts::LOG2_E + ROUND_MAGIC_F32);
    let kf: [f32; N] = lanes!(N, |i| t[i] - ROUND_MAGIC_F32);
    let r: [f32; N] = lanes!(N, |i| {
        (-kf[i]).mul_add(LN2_LO_F32, (-kf[i]).mul_add(LN2_HI_F32, y[i]))
    });
    let scale: [f32; N] = lanes!(N, |i| {
        let k = t[i].to_bits().wrapping_sub(ROUND_MAGIC_F32.to_bits());
        f32::from_bits(k.wrapping_add(127) << 23)
    });
    // e^r - 1 = r q(r), q(r) = sum_{i<7} c_i r^i, by Estrin's scheme in fused multiply-adds:
    //   q = [(c0 + c1 r) + r^2 (c2 + c3 r)] + r^4 [(c4 + c5 r) + r^2 c6]
    let r2: [f32; N] = lanes!(N, |i| r[i] * r[i]);
    let r4: [f32; N] = lanes!(N, |i| r2[i] * r2[i]);
    let lin = |j: usize, i: usize| c[j + 1].mul_add(r[i], c[j]);
    let q: [f32; N] = lanes!(N, |i| {
        r4[i].mul_add(
            r2[i].mul_add(c[6], lin(4, i)),
            r2[i].mul_add(lin(2, i), lin(0, i)),
        )
    });
    // m = expm1(y) = 2^k (e^r - 1) + (2^k - 1); tanh(x) = sign(x) m / (m + 2)
    let m: [f32; N] = lanes!(N, |i| scale[i].mul_add(r[i] * q[i], scale[i] - 1.0));
    lanes!(N, |i| (m[i] / (m[i] + 2.0)).copysign(x[i]))
}

/// `tanh(x)` in f32 arithmetic throughout, by the same method as [`tanh`] (`m / (m + 2)` with
/// `m = expm1(2|x|)`, `2|x|` clamped to 20 where `tanh` rounds to 1 in f32, `k` rounded to
/// nearest), with a 7-term series: twice the lanes of the f64 form per vector and about half its
/// terms, for the f32 training path. Guarantees: within
/// 4 ulp (f32) of the f64 [`tanh`] rounded to f32 on a dense sweep of `[-12, 12]` (measured on
/// 4 million points: 94.1% equal, 5.8% 1 ulp apart, 2 points at 4 ulp, near `|x| = 0.06`, from
/// the rounding of `m` and `m + 2`), odd bit for bit,
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
    tanh_f32_lanes([x])[0]
}

/// `x_i <- tanh(x_i)` over a slice of f64 ([`tanh`]) or f32 ([`tanh_f32`], in f32 arithmetic),
/// in blocks of [`BLOCK`] lanes ([`tanh_lanes`], [`tanh_f32_lanes`]; the last block padded):
/// the bits of the one-value form on every element, with more of the work in flight at once.
/// (The branch is on a constant, resolved at compile time; the conversions between the two
/// widths are exact.)
///
/// ```
/// use harness_reference::cnf::tanh::{tanh, tanh_f32, tanh_slice};
/// let x: Vec<f64> = (0..100).map(|i| (i as f64 - 50.0) / 7.0).collect();
/// let mut y = x.clone();
/// tanh_slice(&mut y);
/// assert!(x.iter().zip(&y).all(|(a, b)| tanh(*a).to_bits() == b.to_bits()));
/// let mut z: Vec<f32> = x.iter().map(|&v| v as f32).collect();
/// tanh_slice(&mut z);
/// assert!(x.iter().zip(&z).all(|(a, b)| tanh_f32(*a as f32).to_bits() == b.to_bits()));
/// ```
#[inline(always)]
pub fn tanh_slice<A: Real>(x: &mut [A]) {
    let mut blocks = x.chunks_exact_mut(BLOCK);
    for block in &mut blocks {
        tanh_block(
            block
                .try_into()
                .expect("chunks_exact_mut yields whole blocks"),
        );
    }
    let rest = blocks.into_remainder();
    if !rest.is_empty() {
        // the same block form over the tail padded with zeros (a block of fixed size keeps the
        // values in registers; a copy of variable length would go through memory)
        let mut padded = [A::zero(); BLOCK];
        padded[..rest.len()].copy_from_slice(rest);
        tanh_block(&mut padded);
        rest.copy_from_slice(&padded[..rest.len()]);
    }
}

/// `x_i <- tanh(x_i)` over one block, in the arithmetic of `A` ([`tanh_slice`]).
#[inline(always)]
fn tanh_block<A: Real>(x: &mut [A; BLOCK]) {
    match A::DTYPE {
        DType::F32 => {
            let out = tanh_f32_lanes(lanes!(BLOCK, |i| x[i].as_f64() as f32));
            for (v, o) in x.iter_mut().zip(out) {
                *v = A::of_f64(o as f64);
            }
        }
        _ => {
            let out = tanh_lanes(lanes!(BLOCK, |i| x[i].as_f64()));
            for (v, o) in x.iter_mut().zip(out) {
                *v = A::of_f64(o);
            }
        }
    }
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

    /// `tanh_slice` over `x` compiled for `level` (as the training kernels run it).
    fn slice_at<A: Real>(level: crate::backend::Simd, x: &[A]) -> Vec<A> {
        struct Slice<A>(Vec<A>);
        impl<A: Real> crate::backend::Kernel for Slice<A> {
            type Output = Vec<A>;
            #[inline(always)]
            fn run(mut self) -> Vec<A> {
                tanh_slice(&mut self.0);
                self.0
            }
        }
        crate::backend::run_at(level, Slice(x.to_vec()))
    }

    #[test]
    fn tanh_slice_gives_the_bits_of_the_one_value_form_at_every_length_and_vector_width() {
        // lengths around the block size (whole blocks, a padded tail, none), values over the
        // clamp and the series' range, signed zeros, subnormals, infinities and NaN
        let special = [
            0.0,
            -0.0,
            5e-324,
            -1e-300,
            1e-8,
            19.9,
            20.1,
            40.0,
            f64::INFINITY,
        ];
        let value = |i: usize| match i % 11 {
            0 => special[(i / 11) % special.len()],
            10 => f64::NAN,
            _ => (i as f64 * 0.61803).sin() * 12.0 / (1 + i % 5) as f64,
        };
        for len in [
            0,
            1,
            7,
            BLOCK - 1,
            BLOCK,
            BLOCK + 1,
            2 * BLOCK,
            3 * BLOCK + 5,
        ] {
            let x: Vec<f64> = (0..len).map(value).collect();
            let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
            for level in crate::backend::Simd::available() {
                for (i, y) in slice_at(level, &x).iter().enumerate() {
                    assert_eq!(
                        y.to_bits(),
                        tanh(x[i]).to_bits(),
                        "{level:?} len {len} x {}",
                        x[i]
                    );
                }
                for (i, y) in slice_at(level, &x32).iter().enumerate() {
                    let want = tanh_f32(x32[i]).to_bits();
                    assert_eq!(y.to_bits(), want, "{level:?} len {len} x {}", x32[i]);
                }
            }
        }
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
