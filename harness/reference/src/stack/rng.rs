//! A counter-based random generator: every value is a hash of `(seed, layer, tensor, index)`.
//!
//! The generator is SplitMix64 used as a keyed counter hash (as in Salmon et al.'s counter-based
//! generators, with SplitMix64's finaliser as the bijection): a stream key is mixed from
//! `(seed, layer, tensor)`, and element `i` is `mix64(key + (i + 1) * GOLDEN)` — exactly the
//! `i`-th output of a SplitMix64 stream started at `key`. No state is carried from one value to
//! the next, so a value can be produced in any order, any chunking, on any thread.
//!
//! Guarantees: [`uniform`] is a pure function of its arguments; it returns a multiple of `2^-23`
//! in `[-1, 1)` (24 random bits, exact in f32); [`init_value`] scales it by `1/sqrt(fan_in)`
//! (equinox `Linear`'s limit) with one f32 rounding. The f32 value is the *canonical* value:
//! every dtype's parameter is its round-to-nearest cast, so f16 init equals `cast(f32 init)`.
//!
//! # References
//! Steele, Lea, Flood, "Fast splittable pseudorandom number generators" (OOPSLA 2014);
//! Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3" (SC 2011);
//! equinox #673 (why the order of generation must not matter).
//!
//! # Example
//! ```
//! use harness_reference::stack::rng::{uniform, init_value};
//! let a = uniform(1, 2, 3, 4);
//! assert_eq!(a, uniform(1, 2, 3, 4)); // pure
//! assert!((-1.0..1.0).contains(&a));
//! assert!(init_value(1, 2, 3, 4, 16).abs() <= 0.25);
//! ```

use crate::backend::{run_at, vectorised, Float, Kernel, Simd};

/// SplitMix64's increment (2^64 / golden ratio).
pub const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's finaliser: a bijection of `u64` with good avalanche.
#[inline(always)]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The stream key of one tensor of one layer.
#[inline]
pub fn stream_key(seed: u64, layer: u64, tensor: u64) -> u64 {
    let k = mix64(seed.wrapping_add(GOLDEN));
    let k = mix64(k ^ layer.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    mix64(
        k ^ tensor
            .wrapping_mul(0xA076_1D64_78BD_642F)
            .wrapping_add(GOLDEN),
    )
}

/// Element `index` of the stream `key`: uniform in `[-1, 1)`, a multiple of `2^-23`.
#[inline(always)]
pub fn uniform_at(key: u64, index: u64) -> f32 {
    centred(mix64(
        key.wrapping_add(index.wrapping_add(1).wrapping_mul(GOLDEN)),
    ))
}

/// A hash's 24 high bits as a uniform value in `[-1, 1)`: `[0, 2^24) -> [-2^23, 2^23)` (exact in
/// i32 and in f32) `-> [-1, 1)` exactly.
#[inline(always)]
fn centred(h: u64) -> f32 {
    centred_integer(h) * (1.0 / (1u32 << 23) as f32)
}

/// A hash's 24 high bits as an integer in `[-2^23, 2^23)`, exact in f32.
#[inline(always)]
fn centred_integer(h: u64) -> f32 {
    ((h >> 40) as i32 - (1 << 23)) as f32
}

/// Uniform in `[-1, 1)` for `(seed, layer, tensor, index)`.
pub fn uniform(seed: u64, layer: u64, tensor: u64, index: u64) -> f32 {
    uniform_at(stream_key(seed, layer, tensor), index)
}

/// The initialisation limit `1/sqrt(fan_in)` in f32 (fan_in >= 1).
#[inline]
pub fn limit(fan_in: usize) -> f32 {
    1.0 / (fan_in as f32).sqrt()
}

/// The canonical (f32) initial value: `uniform * 1/sqrt(fan_in)`.
pub fn init_value(seed: u64, layer: u64, tensor: u64, index: u64, fan_in: usize) -> f32 {
    uniform(seed, layer, tensor, index) * limit(fan_in)
}

/// Fill `out` with the canonical values of elements `start .. start + out.len()` of one stream.
#[inline]
pub fn fill_f32(key: u64, lim: f32, start: u64, out: &mut [f32]) {
    // the counter `key + (i + 1) GOLDEN` advanced by one addition per element (the same value
    // modulo 2^64 as `uniform_at`'s product, which the loop would otherwise repeat per element)
    let mut z = key.wrapping_add(start.wrapping_add(1).wrapping_mul(GOLDEN));
    // `(k 2^-23) lim` with one product: `k 2^-23` and `lim 2^-23` are exact (powers of two scale
    // without rounding, and neither is subnormal: |k| >= 1 or k = 0, and lim = 1/sqrt(fan_in) is
    // far above 2^-103), so both forms round the same real `k lim 2^-23` once
    let scale = lim * (1.0 / (1u32 << 23) as f32);
    for o in out.iter_mut() {
        *o = centred_integer(mix64(z)) * scale;
        z = z.wrapping_add(GOLDEN);
    }
}

/// [`fill_f32`] as a [`Kernel`].
struct Fill<'a> {
    key: u64,
    lim: f32,
    start: u64,
    out: &'a mut [f32],
}

impl Kernel for Fill<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        fill_f32(self.key, self.lim, self.start, self.out)
    }
}

/// [`fill_f32`] compiled for the CPU's widest vectors ([`vectorised`]: on x86-64 AVX-512 gives
/// eight 64-bit lanes with a native 64-bit multiply, AVX2 four lanes with the multiply built from
/// 32-bit ones). Integer hashing, an exact integer-to-float conversion and one f32 product per
/// element: the bits do not depend on how the loop is vectorised, so every form agrees exactly
/// (tested on each form the CPU has).
pub fn fill_f32_vectorised(key: u64, lim: f32, start: u64, out: &mut [f32]) {
    vectorised(Fill {
        key,
        lim,
        start,
        out,
    })
}

/// [`fill_f32`] compiled for `level` ([`run_at`]).
pub fn fill_f32_at(level: Simd, key: u64, lim: f32, start: u64, out: &mut [f32]) {
    run_at(
        level,
        Fill {
            key,
            lim,
            start,
            out,
        },
    )
}

/// Elements generated at a time by [`fill_canonical`]'s general form: an f32 tile on the
/// thread's stack (8 KiB), converted straight into the output.
const TILE: usize = 2048;

/// Fill `out` with the canonical values of elements `start .. start + out.len()` of the stream
/// `key` (scaled by `lim`), each rounded to `E` (round to nearest even): the bits of
/// [`fill_f32`] followed by [`Float::cast_f32_slice`], whatever the CPU.
///
/// For f16 on a CPU with AVX-512 F and DQ, sixteen values at a time are hashed, converted and
/// rounded to f16 in registers, and only the f16 values are stored. Otherwise
/// the values go through an f32 tile on the stack ([`fill_f32_vectorised`], then the cast).
///
/// # Example
/// ```
/// use half::f16;
/// use harness_reference::stack::rng::{fill_canonical, stream_key, uniform_at};
/// let key = stream_key(1, 2, 3);
/// let mut out = [f16::ZERO; 40];
/// fill_canonical(key, 0.5, 100, &mut out);
/// for (i, x) in out.iter().enumerate() {
///     assert_eq!(*x, f16::from_f32(uniform_at(key, 100 + i as u64) * 0.5));
/// }
/// ```
pub fn fill_canonical<E: Float>(key: u64, lim: f32, start: u64, out: &mut [E]) {
    if let Some(h) = E::f16_slice_mut(out) {
        if fused_f16(key, lim, start, h) {
            return;
        }
    }
    let mut f = [0f32; TILE];
    let mut at = start;
    for tile in out.chunks_mut(TILE) {
        let f = &mut f[..tile.len()];
        fill_f32_vectorised(key, lim, at, f);
        E::cast_f32_slice(f, tile);
        at = at.wrapping_add(tile.len() as u64);
    }
}

/// [`fill_canonical`] for f16 in AVX-512 registers; `false` (and `out` untouched) on a CPU
/// without AVX-512 F and DQ.
fn fused_f16(key: u64, lim: f32, start: u64, out: &mut [half::f16]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512dq")
    {
        // SAFETY: the CPU has the AVX-512 F and DQ instructions the function is compiled for
        let done = unsafe { x86::fill_f16_avx512(key, lim, start, out) };
        // the last `len % 16` values one at a time, with the same bits
        let mut f = [0f32; 16];
        let rest = &mut out[done..];
        fill_f32(
            key,
            lim,
            start.wrapping_add(done as u64),
            &mut f[..rest.len()],
        );
        for (o, x) in rest.iter_mut().zip(f) {
            *o = half::f16::from_f32(x);
        }
        return true;
    }
    let _ = (key, lim, start, out);
    false
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::GOLDEN;
    use std::arch::x86_64::*;

    /// The first `16 floor(len / 16)` values of [`super::fill_canonical`] for f16, sixteen at a
    /// time; returns how many it wrote.
    ///
    /// Per 64-bit lane, with `z` the counter `key + (start + i + 1) G (mod 2^64)`:
    /// `y = (z ^ z >> 30) C1`, `y = (y ^ y >> 27) C2` (two wrapping 64-bit products), which is
    /// SplitMix64's `mix64(z)` before its last step `h = y ^ y >> 31`. That step changes bits
    /// 0..32 only, so the 24 bits kept, `h >> 40`, are `y >> 40`. The high 32-bit halves of two
    /// vectors of eight lanes are gathered into one vector of sixteen, then per lane
    /// `k = (y >> 32 >> 8) - 2^23` (exact in i32), `x = f32(k) * (lim 2^-23)` (an exact conversion
    /// and one rounding, as in [`super::fill_f32`]), and `f16(x)` rounded to nearest even.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F and DQ.
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn fill_f16_avx512(
        key: u64,
        lim: f32,
        start: u64,
        out: &mut [half::f16],
    ) -> usize {
        let whole = out.len() / 16 * 16;
        let z0 = key.wrapping_add(start.wrapping_add(1).wrapping_mul(GOLDEN));
        let lane = |i: u64| z0.wrapping_add(i.wrapping_mul(GOLDEN)) as i64;
        // counters of elements 0..8 and 8..16 of the current block of sixteen
        let mut za = _mm512_set_epi64(
            lane(7),
            lane(6),
            lane(5),
            lane(4),
            lane(3),
            lane(2),
            lane(1),
            lane(0),
        );
        let mut zb = _mm512_add_epi64(za, _mm512_set1_epi64(GOLDEN.wrapping_mul(8) as i64));
        let step = _mm512_set1_epi64(GOLDEN.wrapping_mul(16) as i64);
        let c1 = _mm512_set1_epi64(0xBF58_476D_1CE4_E5B9_u64 as i64);
        let c2 = _mm512_set1_epi64(0x94D0_49BB_1331_11EB_u64 as i64);
        let half_range = _mm512_set1_epi32(1 << 23);
        let scale = _mm512_set1_ps(lim * (1.0 / (1u32 << 23) as f32));
        // the odd 32-bit words (the high halves of the 64-bit lanes) of `a`, then of `b`
        let high_words =
            _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        let mix = |z: __m512i| {
            let y = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64::<30>(z)), c1);
            _mm512_mullo_epi64(_mm512_xor_si512(y, _mm512_srli_epi64::<27>(y)), c2)
        };
        for block in out[..whole].chunks_exact_mut(16) {
            let high = _mm512_permutex2var_epi32(mix(za), high_words, mix(zb));
            let k = _mm512_sub_epi32(_mm512_srli_epi32::<8>(high), half_range);
            let x = _mm512_mul_ps(_mm512_cvtepi32_ps(k), scale);
            let h = _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x);
            // SAFETY: `block` holds sixteen f16 (32 bytes); the store is unaligned
            unsafe { _mm256_storeu_si256(block.as_mut_ptr().cast::<__m256i>(), h) };
            za = _mm512_add_epi64(za, step);
            zb = _mm512_add_epi64(zb, step);
        }
        whole
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_is_pure_and_in_range() {
        for i in 0..10_000 {
            let u = uniform(42, 3, 1, i);
            assert!((-1.0..1.0).contains(&u));
            assert_eq!(u.to_bits(), uniform(42, 3, 1, i).to_bits());
        }
    }

    #[test]
    fn mix64_over_golden_steps_is_the_splitmix64_stream() {
        // Vigna's splitmix64.c seeded with x = 0: its first three outputs.
        let expected = [
            0xE220_A839_7B1D_CDAF,
            0x6E78_9E6A_A1B9_65F4,
            0x06C4_5D18_8009_454F,
        ];
        for (i, e) in expected.into_iter().enumerate() {
            assert_eq!(mix64(GOLDEN.wrapping_mul(i as u64 + 1)), e);
        }
    }

    #[test]
    fn uniform_at_is_the_top_24_bits_of_the_stream_centred_and_scaled() {
        // (splitmix64 output i >> 40) - 2^23, times 2^-23: 0xE220A8 - 0x800000 = 6430888, etc.
        let expected: [i32; 3] = [6_430_888, -1_148_770, -7_945_123];
        for (i, e) in expected.into_iter().enumerate() {
            assert_eq!(uniform_at(0, i as u64), e as f32 / (1u32 << 23) as f32);
        }
    }

    #[test]
    fn stream_key_and_init_value_match_an_independent_implementation() {
        // stream_key(1, 2, 3) by a Python transcription of the module docs' construction.
        assert_eq!(stream_key(1, 2, 3), 0x78B4_F317_1ECA_8C7F);
        // limit = 1/sqrt(fan_in): 1/4 for 16 (exact); init_value = uniform * limit.
        assert_eq!(limit(16), 0.25);
        assert_eq!(limit(1), 1.0);
        let u = uniform(1, 2, 3, 4);
        assert_eq!(init_value(1, 2, 3, 4, 16), u * 0.25);
        assert_eq!(u, uniform_at(0x78B4_F317_1ECA_8C7F, 4));
    }

    #[test]
    fn streams_differ_by_seed_layer_and_tensor() {
        let a = uniform(1, 0, 0, 0);
        assert_ne!(a, uniform(2, 0, 0, 0));
        assert_ne!(a, uniform(1, 1, 0, 0));
        assert_ne!(a, uniform(1, 0, 1, 0));
        assert_ne!(a, uniform(1, 0, 0, 1));
    }

    #[test]
    fn mean_and_variance_are_those_of_uniform_minus_one_one() {
        // U(-1, 1): mean 0, variance 1/3; 10^5 samples: standard error of the mean ~ 0.0018
        let n = 100_000;
        let v: Vec<f64> = (0..n).map(|i| uniform(9, 0, 0, i) as f64).collect();
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.01, "{mean}");
        assert!((var - 1.0 / 3.0).abs() < 0.01, "{var}");
    }

    #[test]
    fn the_vectorised_fill_equals_the_portable_one_bit_for_bit() {
        let mut fast = vec![0f32; 1000];
        let mut slow = vec![0f32; 1000];
        let lims = [0.03125, limit(3), limit(1000), limit(1 << 30)];
        for ((key, start), lim) in [
            (0u64, 0u64),
            (stream_key(7, 3, 1), 12_345),
            (u64::MAX, u64::MAX - 500),
        ]
        .into_iter()
        .flat_map(|ks| lims.map(|l| (ks, l)))
        {
            let same =
                |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            fill_f32(key, lim, start, &mut slow);
            // the loop's running counter and single product give the per-element value, the
            // counter's wrap-around included
            for (i, &x) in slow.iter().enumerate() {
                let want = uniform_at(key, start.wrapping_add(i as u64)) * lim;
                assert_eq!(
                    x.to_bits(),
                    want.to_bits(),
                    "element {i} from {start}, lim {lim}"
                );
            }
            fill_f32_vectorised(key, lim, start, &mut fast);
            assert!(same(&fast, &slow));
            for level in Simd::available() {
                fast.fill(0.0);
                fill_f32_at(level, key, lim, start, &mut fast);
                assert!(same(&fast, &slow), "{level:?}");
            }
        }
    }

    /// `fill_canonical::<E>` against its definition, `E::of_f32` of each [`fill_f32`] value.
    fn canonical_fill_matches_its_definition<E: Float>(key: u64, lim: f32, start: u64, len: usize) {
        let mut want = vec![0f32; len];
        fill_f32(key, lim, start, &mut want);
        let mut got = vec![E::default(); len];
        fill_canonical(key, lim, start, &mut got);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.bits(),
                E::of_f32(*w).bits(),
                "{:?} element {i} of {len} from {start}, lim {lim}",
                E::DTYPE
            );
        }
    }

    #[test]
    fn the_canonical_fill_is_the_f32_fill_rounded_for_every_length_start_and_dtype() {
        // lengths around the sixteen-value blocks and the 2048-value tile; counters that wrap
        // around; limits giving f16 subnormals and zeros (2^-15), and f16 overflow to infinity
        // (7e4 > 65504)
        let lens = [0, 1, 15, 16, 17, 31, 32, 33, 1000, 2048, 4100];
        let lims = [1.0, limit(3), limit(1 << 30), 7.0e4];
        for (key, start) in [
            (0u64, 0u64),
            (stream_key(7, 3, 1), 12_345),
            (u64::MAX, u64::MAX - 500),
        ] {
            for (&len, &lim) in lens.iter().flat_map(|l| lims.iter().map(move |m| (l, m))) {
                canonical_fill_matches_its_definition::<half::f16>(key, lim, start, len);
                canonical_fill_matches_its_definition::<f32>(key, lim, start, len);
                canonical_fill_matches_its_definition::<f64>(key, lim, start, len);
            }
        }
    }

    #[test]
    fn the_f16_fill_runs_in_registers_where_the_cpu_has_avx512() {
        // the test above checks the fused form only where it runs: say whether it did
        let mut out = [half::f16::ZERO; 3];
        let fused = fused_f16(1, 0.5, 0, &mut out);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            fused,
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512dq")
        );
        #[cfg(not(target_arch = "x86_64"))]
        assert!(!fused);
    }

    #[test]
    fn chunked_fill_equals_elementwise() {
        let key = stream_key(5, 6, 7);
        let mut a = vec![0f32; 100];
        fill_f32(key, 0.5, 0, &mut a[..37]);
        fill_f32(key, 0.5, 37, &mut a[37..]);
        for (i, x) in a.iter().enumerate() {
            assert_eq!(x.to_bits(), (uniform(5, 6, 7, i as u64) * 0.5).to_bits());
        }
    }
}
