//! The workspace's order of summation for long reductions: sixteen interleaved partial sums per
//! block of 8,192 terms, and the blocks' totals added as a balanced tree.
//!
//! A sum `s = t_0 + t_1 + ... + t_{n-1}` is computed as
//!
//! ```text
//! block b  = terms b*8192 .. min((b+1)*8192, n)                (the last block may be shorter)
//! lane_k   = ((0 + t_k) + t_{k+16}) + t_{k+32} + ...           over block b's terms; term i in
//!                                                              lane i mod 16
//! total_b  = tree(lane_0, ..., lane_15)                        halving: lane_k += lane_{k+w},
//!                                                              w = 8, 4, 2, 1
//! s        = pairs(total_0, ..., total_{B-1})                  B blocks padded with zeros to a
//!                                                              power of two, then adjacent
//!                                                              pairs added until one is left
//! ```
//!
//! The order depends on `n` only, never on the hardware or the thread count, so every result is
//! reproducible bit for bit; a sum of at most 8,192 terms is one block. It has three properties a
//! single running sum lacks: the sixteen lanes are independent, so the loop runs as SIMD adds
//! instead of one latency-bound chain (a running f32 sum of 65,536 terms waits about 200,000
//! cycles on its own adds); the blocks are independent, so a long sum splits over threads
//! ([`blocked_sum`], which from [`PARALLEL_BLOCKS`] blocks cuts the tree into subtrees,
//! [`SumSplit`], and shares them with helper threads); and the rounding error grows like `(8192/16 + 4 + log2 B) u`
//! instead of `n u` (Higham, §4.2: the error bound of a sum is set by the depth of its tree).
//! Padding with zeros does not change a bit: a lane or a total is never `-0` (it starts at `+0`,
//! and `+0 + x` is `-0` for no `x`), so adding `+0` to it is exact.
//!
//! The dfdx face reproduces the same order with tensor operations
//! ([`crate::backend::Ten::lane_sum`]): pad with zeros, reduce a `[B, 512, 16]` view along its
//! middle axis (dfdx accumulates from zero in index order), halve the lanes of every block, then add
//! adjacent totals.
//!
//! # References
//! - N. J. Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., SIAM 2002, §4.2
//!   (summation error bounds in terms of the depth of the summation tree).
//!
//! # Example
//! ```
//! use harness_reference::backend::{lane_dot, lane_sum, LANES};
//! let x: Vec<f64> = (0..100).map(|i| i as f64).collect();
//! assert_eq!(LANES, 16);
//! assert_eq!(lane_sum(&x), 4950.0);
//! assert_eq!(lane_dot(&x, &x), 328350.0); // sum of i^2, i < 100
//! ```

use super::{vectorised, Kernel, Real};

/// Number of interleaved partial sums.
pub const LANES: usize = 16;

/// Sixteen partial sums, every one starting at zero.
#[derive(Clone, Copy, Debug)]
pub struct Lanes<A>(pub [A; LANES]);

impl<A: Real> Default for Lanes<A> {
    fn default() -> Self {
        Self([A::zero(); LANES])
    }
}

// `Real` has no `AddAssign`: the accumulations are spelled out
#[allow(clippy::assign_op_pattern)]
impl<A: Real> Lanes<A> {
    /// `lane_k += terms[k]` for a full block of sixteen consecutive terms.
    #[inline(always)]
    pub fn add_block(&mut self, terms: &[A; LANES]) {
        for (l, &t) in self.0.iter_mut().zip(terms) {
            *l = *l + t;
        }
    }

    /// `lane_k += terms[k]` for the last, partial block (`terms.len() < 16`).
    #[inline]
    pub fn add_tail(&mut self, terms: &[A]) {
        for (l, &t) in self.0.iter_mut().zip(terms) {
            *l = *l + t;
        }
    }

    /// The halving tree: `lane_k += lane_{k+w}` for `w = 8, 4, 2, 1`; the sum is lane 0.
    #[inline]
    pub fn total(mut self) -> A {
        let mut w = LANES / 2;
        while w > 0 {
            for k in 0..w {
                self.0[k] = self.0[k] + self.0[k + w];
            }
            w /= 2;
        }
        self.0[0]
    }
}

/// Terms per block.
pub const BLOCK: usize = 8192;

/// Blocks from which [`blocked_sum`] (and the line-search objective's value and gradient) share
/// their work with the helper threads ([`crate::help`]): 4 blocks, 32,768 terms, 128 KiB of f32.
/// The helpers spin between back-to-back jobs, so a split costs about a microsecond rather than
/// the tens a fork-join through a sleeping pool costs: on 65,536 f32 (8 blocks, 2 cores) one
/// line-search evaluation took 5.6 us shared against 9.6 us on one thread, and a step 0.13-0.16
/// ms against 0.22 ms. The threshold itself (4 against 8 blocks) was not measured separately.
pub const PARALLEL_BLOCKS: usize = 4;

/// A lane-order sum cut into parts that can run anywhere: part `k` is the `k`-th subtree of the
/// blocks' tree at a fixed depth (empty subtrees are zero), and [`SumSplit::combine`] adds the
/// parts' totals as the top of the same tree, so the bits equal [`blocked_sum`]'s whatever ran
/// each part.
///
/// ```
/// use harness_reference::backend::{lane_sum, SumSplit, BLOCK};
/// let x: Vec<f32> = (0..5 * BLOCK + 3).map(|i| (i as f32 * 0.1).sin()).collect();
/// let split = SumSplit::new(x.len());
/// assert_eq!(split.parts(), 8); // 6 blocks, padded to 8: one block per part, two empty
/// let block = |start: usize, len: usize| lane_sum(&x[start..start + len]);
/// // the parts in any order, on any thread
/// let mut totals: Vec<f32> = (0..8).rev().map(|k| split.part(k, &block)).collect();
/// totals.reverse();
/// assert_eq!(split.combine(&mut totals).to_bits(), lane_sum(&x).to_bits());
/// ```
///
/// # References
/// - N. J. Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., SIAM 2002, §4.2
///   (the error of a sum follows its tree, so the tree is fixed and only its evaluation moves).
#[derive(Clone, Copy, Debug)]
pub struct SumSplit {
    n: usize,
    blocks: usize,
    /// Blocks per part (a power of two).
    span: usize,
    parts: usize,
}

impl SumSplit {
    /// At most this many parts per split sum: the subtrees three levels below the root of the
    /// blocks' tree, claimed one at a time, so a late or busy helper takes fewer parts and the
    /// caller more.
    pub const MAX_PARTS: usize = 8;

    /// The split of a sum of `n` terms into at most 8 parts (1 part below [`PARALLEL_BLOCKS`]
    /// blocks).
    pub fn new(n: usize) -> Self {
        let blocks = n.div_ceil(BLOCK).max(1);
        let padded = blocks.next_power_of_two();
        let parts = if blocks >= PARALLEL_BLOCKS {
            padded.min(Self::MAX_PARTS)
        } else {
            1
        };
        let span = padded / parts;
        SumSplit {
            n,
            blocks,
            span,
            parts,
        }
    }

    /// Number of parts (a power of two).
    pub fn parts(&self) -> usize {
        self.parts
    }

    /// The total of part `k` (zero when its subtree holds no block).
    pub fn part<A: Real>(&self, k: usize, block_total: &impl Fn(usize, usize) -> A) -> A {
        let first = k * self.span;
        if self.n == 0 || first >= self.blocks {
            return A::zero();
        }
        tree(
            first,
            self.span.min(self.blocks - first),
            self.n,
            block_total,
        )
    }

    /// The sum from the parts' totals (`totals.len() == parts()`): adjacent pairs added until
    /// one is left.
    pub fn combine<A: Real>(&self, totals: &mut [A]) -> A {
        let mut w = totals.len();
        while w > 1 {
            w /= 2;
            for k in 0..w {
                totals[k] = totals[2 * k] + totals[2 * k + 1];
            }
        }
        totals.first().copied().unwrap_or_else(A::zero)
    }
}

/// The lane-order total of blocks `first .. first + blocks` of a sum of `n` terms: the left half
/// of the zero-padded power of two, then what remains.
fn tree<A: Real>(
    first: usize,
    blocks: usize,
    n: usize,
    block_total: &impl Fn(usize, usize) -> A,
) -> A {
    if blocks == 1 {
        let start = first * BLOCK;
        return block_total(start, BLOCK.min(n - start));
    }
    let half = blocks.next_power_of_two() / 2;
    tree(first, half, n, block_total) + tree(first + half, blocks - half, n, block_total)
}

/// `sum_i t_i` for `i < n` in the lane order, given `block_total(start, len)`, the lane-order
/// total of terms `start .. start + len` of one block. When the caller runs on a rayon worker
/// and the sum has at least [`PARALLEL_BLOCKS`] blocks, its parts ([`SumSplit`]) are shared with
/// the helper threads ([`crate::help::run_parts`]); a caller outside the pool runs the tree on
/// its own thread (a loop that wants every core runs inside the pool,
/// `rayon::ThreadPool::install`). The tree, hence every bit, is the same on any number of
/// threads.
pub fn blocked_sum<A: Real>(n: usize, block_total: &(impl Fn(usize, usize) -> A + Sync)) -> A {
    let split = SumSplit::new(n);
    if split.parts() == 1 || rayon::current_thread_index().is_none() {
        return match n {
            0 => A::zero(),
            _ => tree(0, n.div_ceil(BLOCK), n, block_total),
        };
    }
    let totals: [crate::help::Slot<A>; SumSplit::MAX_PARTS] = Default::default();
    crate::help::run_parts(split.parts(), &|k| {
        totals[k].put(split.part(k, block_total))
    });
    let mut totals = totals.map(crate::help::Slot::into_inner);
    split.combine(&mut totals[..split.parts()])
}

/// One block's lane-order total of `x_i` (or of `x_i y_i` when `y` is given): a [`Kernel`].
struct BlockTotal<'a, A> {
    x: &'a [A],
    y: Option<&'a [A]>,
}

impl<A: Real> Kernel for BlockTotal<'_, A> {
    type Output = A;
    #[inline(always)]
    fn run(self) -> A {
        let mut lanes = Lanes::default();
        let mut xb = self.x.chunks_exact(LANES);
        match self.y {
            None => {
                for b in &mut xb {
                    lanes.add_block(b.try_into().expect("a block of LANES"));
                }
                lanes.add_tail(xb.remainder());
            }
            Some(y) => {
                let mut block = [A::zero(); LANES];
                let mut yb = y.chunks_exact(LANES);
                for (a, b) in (&mut xb).zip(&mut yb) {
                    for k in 0..LANES {
                        block[k] = a[k] * b[k];
                    }
                    lanes.add_block(&block);
                }
                let (xr, yr) = (xb.remainder(), yb.remainder());
                for k in 0..xr.len() {
                    block[k] = xr[k] * yr[k];
                }
                lanes.add_tail(&block[..xr.len()]);
            }
        }
        lanes.total()
    }
}

/// `sum_i x_i` in the lane order.
pub fn lane_sum<A: Real>(x: &[A]) -> A {
    blocked_sum(x.len(), &|start, len| {
        vectorised(BlockTotal {
            x: &x[start..start + len],
            y: None,
        })
    })
}

/// `sum_i x_i y_i` in the lane order (each product rounded, then added: no fused multiply-add).
/// The slices must have the same length (the shorter one bounds the sum otherwise).
pub fn lane_dot<A: Real>(x: &[A], y: &[A]) -> A {
    let n = x.len().min(y.len());
    blocked_sum(n, &|start, len| {
        vectorised(BlockTotal {
            x: &x[start..start + len],
            y: Some(&y[start..start + len]),
        })
    })
}

/// `out[i n + j] = lane_dot(a_i, b_j)` for every row `a_i` of `a` (`m x k`, row-major) and every
/// row `b_j` of `b` (`n x k`, row-major), `out` being `m x n`, row-major: a product `a b^T` whose
/// every element is summed in the lane order of [`lane_dot`] (for `k <= BLOCK`; longer rows are
/// [`lane_dot`]'s blocked sums too). Meant for narrow outputs (`n` of a few columns), which a
/// general matrix product runs through mostly empty register tiles.
///
/// On x86-64 with AVX-512 F, sixteen f32 rows or eight f64 rows at a time are multiplied and
/// summed in registers: each row's sixteen lanes (two vectors of eight for f64, added lane by
/// lane for `w = 8`), then the halving tree `lane_k += lane_{k+w}` run on all the rows together
/// by exchanging halves between pairs of rows (`w = 8, 4, 2, 1`), which leaves row `r`'s sum in
/// lane `r` of one vector. A partial last block of a row is loaded under a mask, so its missing
/// terms are `+0`, and adding `+0` changes no lane (a lane is never `-0`: see the module notes).
/// A last group of fewer rows runs with the missing rows as zero vectors (the tree never mixes
/// rows: each lane's total comes from its own row's lanes). Other CPUs use [`lane_dot`] itself.
/// The bits are the same either way (tested below on shapes around every boundary, with signed
/// zeros and infinities).
///
/// Panics if `k > 0` and `a`, `b` or `out` do not hold whole rows (`out.len() = m n`).
///
/// ```
/// use harness_reference::backend::{lane_dot, lane_dot_rows};
/// let a: Vec<f64> = (0..40 * 64).map(|i| ((i * 37) % 101) as f64 / 50.0 - 1.0).collect();
/// let b: Vec<f64> = (0..2 * 64).map(|i| ((i * 13) % 17) as f64 / 17.0).collect();
/// let mut out = vec![0.0; 40 * 2];
/// lane_dot_rows(&a, &b, 64, &mut out);
/// assert_eq!(out[7 * 2 + 1], lane_dot(&a[7 * 64..8 * 64], &b[64..128]));
/// ```
pub fn lane_dot_rows<A: Real>(a: &[A], b: &[A], k: usize, out: &mut [A]) {
    if k == 0 {
        out.fill(A::zero());
        return;
    }
    let (m, n) = (a.len() / k, b.len() / k);
    assert!(
        a.len() == m * k && b.len() == n * k && out.len() == m * n,
        "lane_dot_rows: a {} and b {} are not rows of {k}, or out {} is not {m} x {n}",
        a.len(),
        b.len(),
        out.len()
    );
    let done = if k <= BLOCK && n > 0 {
        A::lane_dot_rows_simd(a, b, k, out)
    } else {
        0
    };
    for i in done..m {
        for j in 0..n {
            out[i * n + j] = lane_dot(&a[i * k..(i + 1) * k], &b[j * k..(j + 1) * k]);
        }
    }
}

/// [`lane_dot_rows`]'s vector form for f32: the rows it wrote (all of them; `0` without
/// AVX-512 F). `k <= BLOCK`, whole rows (checked by the caller).
pub(super) fn dot_rows_simd_f32(a: &[f32], b: &[f32], k: usize, out: &mut [f32]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512 F, which the function is compiled for
        return unsafe { x86::dot_rows_f32(a, b, k, out) };
    }
    let _ = (a, b, k, out);
    0
}

/// [`lane_dot_rows`]'s vector form for f64: the rows it wrote (all of them; `0` without
/// AVX-512 F). `k <= BLOCK`, whole rows (checked by the caller).
pub(super) fn dot_rows_simd_f64(a: &[f64], b: &[f64], k: usize, out: &mut [f64]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512 F, which the function is compiled for
        return unsafe { x86::dot_rows_f64(a, b, k, out) };
    }
    let _ = (a, b, k, out);
    0
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::LANES;
    use std::arch::x86_64::*;

    /// Indices into the 32 f32 lanes of two vectors (`permutex2var`): for each of the 16 output
    /// lanes, groups of `g` taken from every other group of `g`, starting at group `start`.
    const fn pick32(g: usize, start: usize) -> [i32; 16] {
        let mut idx = [0i32; 16];
        let mut o = 0;
        while o < 16 {
            idx[o] = (2 * g * (o / g) + start * g + o % g) as i32;
            o += 1;
        }
        idx
    }

    /// As [`pick32`] over the 16 f64 lanes of two vectors.
    const fn pick16(g: usize, start: usize) -> [i64; 8] {
        let mut idx = [0i64; 8];
        let mut o = 0;
        while o < 8 {
            idx[o] = (2 * g * (o / g) + start * g + o % g) as i64;
            o += 1;
        }
        idx
    }

    /// Sixteen rows' lanes (vector `r` = row `r`'s sixteen lanes) to one vector whose lane `r` is
    /// row `r`'s halving-tree total. Step `w` adds lane `k + w` to lane `k` of every row: the
    /// rows' lower and upper halves (`k < w`, `k >= w`) are gathered from pairs of vectors into
    /// two vectors and added, which halves both the lanes per row and the vectors.
    #[target_feature(enable = "avx512f")]
    unsafe fn tree16(v: [__m512; 16]) -> __m512 {
        // w = 8: [a_0..8, b_0..8] + [a_8..16, b_8..16] (128-bit blocks 0,1 | 2,3 of each)
        let s: [__m512; 8] = std::array::from_fn(|p| {
            let (x, y) = (v[2 * p], v[2 * p + 1]);
            _mm512_add_ps(
                _mm512_shuffle_f32x4::<0x44>(x, y),
                _mm512_shuffle_f32x4::<0xee>(x, y),
            )
        });
        let step = |x: __m512, y: __m512, g: usize| {
            let lo = _mm512_loadu_si512(pick32(g, 0).as_ptr().cast());
            let hi = _mm512_loadu_si512(pick32(g, 1).as_ptr().cast());
            _mm512_add_ps(
                _mm512_permutex2var_ps(x, lo, y),
                _mm512_permutex2var_ps(x, hi, y),
            )
        };
        // w = 4, 2, 1: groups of 4, 2, 1 lanes per row
        let t: [__m512; 4] = std::array::from_fn(|q| step(s[2 * q], s[2 * q + 1], 4));
        let u: [__m512; 2] = std::array::from_fn(|p| step(t[2 * p], t[2 * p + 1], 2));
        step(u[0], u[1], 1)
    }

    /// Eight rows' lanes after `w = 8` (vector `r` = row `r`'s lanes `0..8`) to one vector whose
    /// lane `r` is row `r`'s total: steps `w = 4, 2, 1` as in [`tree16`].
    #[target_feature(enable = "avx512f")]
    unsafe fn tree8(v: [__m512d; 8]) -> __m512d {
        let s: [__m512d; 4] = std::array::from_fn(|p| {
            let (x, y) = (v[2 * p], v[2 * p + 1]);
            _mm512_add_pd(
                _mm512_shuffle_f64x2::<0x44>(x, y),
                _mm512_shuffle_f64x2::<0xee>(x, y),
            )
        });
        let step = |x: __m512d, y: __m512d, g: usize| {
            let lo = _mm512_loadu_si512(pick16(g, 0).as_ptr().cast());
            let hi = _mm512_loadu_si512(pick16(g, 1).as_ptr().cast());
            _mm512_add_pd(
                _mm512_permutex2var_pd(x, lo, y),
                _mm512_permutex2var_pd(x, hi, y),
            )
        };
        let t: [__m512d; 2] = std::array::from_fn(|q| step(s[2 * q], s[2 * q + 1], 2));
        step(t[0], t[1], 1)
    }

    /// Every row of [`super::lane_dot_rows`] in f32, sixteen at a time (a last group of fewer
    /// with zero vectors for the missing rows); returns `m`.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F; `a` is `m x k`, `b` is `n x k`, `out` is `m x n`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn dot_rows_f32(a: &[f32], b: &[f32], k: usize, out: &mut [f32]) -> usize {
        let (m, n) = (a.len() / k, b.len() / k);
        let full = k / LANES * LANES;
        let tail: __mmask16 = ((1u32 << (k - full)) - 1) as u16;
        let (a, b) = (a.as_ptr(), b.as_ptr());
        let mut sums = [0f32; 16];
        for i0 in (0..m).step_by(16) {
            let rows = (m - i0).min(16);
            for j in 0..n {
                let bj = b.add(j * k);
                // lane q of row r: ((0 + t_q) + t_{q+16}) + ..., t_c = a_rc b_jc rounded. The
                // sixteen rows' sums advance together, a vector of the depth at a time (sixteen
                // independent additions in flight, in registers); in a last group of fewer rows
                // the missing ones repeat its last row, whose sums are not stored
                let at: [*const f32; 16] =
                    std::array::from_fn(|r| a.add((i0 + r.min(rows - 1)) * k));
                let mut v = [_mm512_setzero_ps(); 16];
                let mut c = 0;
                while c < full {
                    let bv = _mm512_loadu_ps(bj.add(c));
                    for (v, ar) in v.iter_mut().zip(at) {
                        let t = _mm512_mul_ps(_mm512_loadu_ps(ar.add(c)), bv);
                        *v = _mm512_add_ps(*v, t);
                    }
                    c += LANES;
                }
                if tail != 0 {
                    let bv = _mm512_maskz_loadu_ps(tail, bj.add(c));
                    for (v, ar) in v.iter_mut().zip(at) {
                        let t = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, ar.add(c)), bv);
                        *v = _mm512_add_ps(*v, t);
                    }
                }
                _mm512_storeu_ps(sums.as_mut_ptr(), tree16(v));
                for (r, &s) in sums.iter().enumerate().take(rows) {
                    out[(i0 + r) * n + j] = s;
                }
            }
        }
        m
    }

    /// Every row of [`super::lane_dot_rows`] in f64, eight at a time (a last group of fewer with
    /// zero vectors for the missing rows); returns `m`. A row's sixteen lanes are two vectors
    /// (lanes `0..8` and `8..16`), added for `w = 8`.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F; `a` is `m x k`, `b` is `n x k`, `out` is `m x n`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn dot_rows_f64(a: &[f64], b: &[f64], k: usize, out: &mut [f64]) -> usize {
        let (m, n) = (a.len() / k, b.len() / k);
        let full = k / LANES * LANES;
        let rest = k - full;
        let (tail_lo, tail_hi): (__mmask8, __mmask8) = (
            ((1u32 << rest.min(8)) - 1) as u8,
            ((1u32 << rest.saturating_sub(8)) - 1) as u8,
        );
        let (a, b) = (a.as_ptr(), b.as_ptr());
        let mut sums = [0f64; 8];
        for i0 in (0..m).step_by(8) {
            let rows = (m - i0).min(8);
            for j in 0..n {
                let bj = b.add(j * k);
                // as in the f32 form: the eight rows' sums advance together (in registers), a
                // last group of fewer rows repeating its last row; lanes 0..8 and 8..16 of a
                // row are its two vectors `lo` and `hi`
                let at: [*const f64; 8] =
                    std::array::from_fn(|r| a.add((i0 + r.min(rows - 1)) * k));
                let mut lo = [_mm512_setzero_pd(); 8];
                let mut hi = [_mm512_setzero_pd(); 8];
                let mut c = 0;
                while c < full {
                    let (bl, bh) = (_mm512_loadu_pd(bj.add(c)), _mm512_loadu_pd(bj.add(c + 8)));
                    for ((lo, hi), ar) in lo.iter_mut().zip(&mut hi).zip(at) {
                        *lo = _mm512_add_pd(*lo, _mm512_mul_pd(_mm512_loadu_pd(ar.add(c)), bl));
                        *hi = _mm512_add_pd(*hi, _mm512_mul_pd(_mm512_loadu_pd(ar.add(c + 8)), bh));
                    }
                    c += LANES;
                }
                if rest != 0 {
                    let bl = _mm512_maskz_loadu_pd(tail_lo, bj.add(c));
                    for (lo, ar) in lo.iter_mut().zip(at) {
                        let t = _mm512_mul_pd(_mm512_maskz_loadu_pd(tail_lo, ar.add(c)), bl);
                        *lo = _mm512_add_pd(*lo, t);
                    }
                    // lanes 8..16 only if the partial block reaches them (the pointer must
                    // stay inside the row)
                    if rest > 8 {
                        let bh = _mm512_maskz_loadu_pd(tail_hi, bj.add(c + 8));
                        for (hi, ar) in hi.iter_mut().zip(at) {
                            let t =
                                _mm512_mul_pd(_mm512_maskz_loadu_pd(tail_hi, ar.add(c + 8)), bh);
                            *hi = _mm512_add_pd(*hi, t);
                        }
                    }
                }
                // w = 8: lane_k += lane_{k+8}
                let v: [__m512d; 8] = std::array::from_fn(|r| _mm512_add_pd(lo[r], hi[r]));
                _mm512_storeu_pd(sums.as_mut_ptr(), tree8(v));
                for (r, &s) in sums.iter().enumerate().take(rows) {
                    out[(i0 + r) * n + j] = s;
                }
            }
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Float;

    /// The order written out term by term, as the module header defines it.
    fn by_definition(t: &[f32]) -> f32 {
        let mut totals: Vec<f32> = t
            .chunks(BLOCK)
            .map(|b| {
                let mut lane = [0.0f32; LANES];
                for (i, &x) in b.iter().enumerate() {
                    lane[i % LANES] += x;
                }
                for w in [8, 4, 2, 1] {
                    for k in 0..w {
                        lane[k] += lane[k + w];
                    }
                }
                lane[0]
            })
            .collect();
        if totals.is_empty() {
            return 0.0;
        }
        totals.resize(totals.len().next_power_of_two(), 0.0);
        while totals.len() > 1 {
            totals = totals.chunks(2).map(|p| p[0] + p[1]).collect();
        }
        totals[0]
    }

    #[test]
    fn every_form_follows_the_defined_order_bit_for_bit() {
        let sizes = [
            0usize,
            1,
            5,
            15,
            16,
            17,
            31,
            33,
            1000,
            BLOCK - 1,
            BLOCK,
            BLOCK + 1,
        ];
        let more = [3 * BLOCK + 7, 5 * BLOCK, 8 * BLOCK, 9 * BLOCK + 100];
        for n in sizes.into_iter().chain(more) {
            let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 1e3).collect();
            let y: Vec<f32> = (0..n).map(|i| (i as f32 * 1.3).cos()).collect();
            let xy: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a * b).collect();
            let want = by_definition(&x);
            assert_eq!(lane_sum(&x).to_bits(), want.to_bits(), "sum, n = {n}");
            let want = by_definition(&xy);
            assert_eq!(lane_dot(&x, &y).to_bits(), want.to_bits(), "dot, n = {n}");
        }
    }

    #[test]
    fn the_sum_is_the_same_on_one_thread_and_on_two() {
        // enough blocks that the tree splits over the threads at its first levels
        let x: Vec<f32> = (0..(2 * PARALLEL_BLOCKS + 1) * BLOCK + 5)
            .map(|i| (i as f32 * 0.11).sin())
            .collect();
        let on = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| lane_sum(&x)).to_bits()
        };
        assert_eq!(on(1), on(2));
        assert_eq!(on(1), by_definition(&x).to_bits());
        // outside any pool: the same tree on the caller's thread
        assert_eq!(lane_sum(&x).to_bits(), on(2));
    }

    #[test]
    fn a_split_sum_gives_the_trees_bits_whatever_order_its_parts_run_in() {
        // term sizes spread over six decades, so that any other order of the adds rounds
        // differently
        let x: Vec<f32> = (0..33 * BLOCK + 1)
            .map(|i| (i as f32 * 0.37).sin() * 10f32.powi((i % 7) as i32 - 3))
            .collect();
        let p = PARALLEL_BLOCKS * BLOCK;
        for n in [
            0,
            1,
            p - 1,
            p,
            p + 1,
            5 * BLOCK + 3,
            9 * BLOCK + 77,
            16 * BLOCK,
            33 * BLOCK + 1,
        ] {
            let x = &x[..n];
            let split = SumSplit::new(n);
            assert!(split.parts().is_power_of_two() && split.parts() <= SumSplit::MAX_PARTS);
            assert_eq!(
                split.parts() > 1,
                n.div_ceil(BLOCK) >= PARALLEL_BLOCKS,
                "{n}"
            );
            let block = |start: usize, len: usize| lane_sum(&x[start..start + len]);
            let mut totals = vec![0f32; split.parts()];
            for k in (0..split.parts()).rev() {
                totals[k] = split.part(k, &block);
            }
            let want = by_definition(x).to_bits();
            assert_eq!(split.combine(&mut totals).to_bits(), want, "{n} terms");
            // on a rayon worker, the parts shared with the helper threads
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .unwrap();
            assert_eq!(pool.install(|| lane_sum(x)).to_bits(), want, "{n} terms");
        }
    }

    #[test]
    fn the_empty_sum_is_positive_zero_and_nan_propagates() {
        assert_eq!(lane_sum::<f64>(&[]).to_bits(), 0.0f64.to_bits());
        assert!(lane_sum(&[1.0f32, f32::NAN, 2.0]).is_nan());
    }

    #[test]
    fn a_sum_of_ones_is_exact_where_a_running_sum_stalls() {
        // a running f32 sum of 2^25 ones stops at 2^24; lanes of 512 and a tree of blocks do not
        let n = 1usize << 25;
        assert_eq!(lane_sum(&vec![1.0f32; n]), n as f32);
    }

    /// `lane_dot_rows` against `lane_dot` element by element, bit for bit (NaNs only as NaNs),
    /// for rows around every vector boundary (7..17 f64 / 15..33 f32 rows, so the vector form's
    /// partial last group of rows runs too), depths with and without a partial last block, and 1 to 4 columns.
    fn dot_rows_equal_lane_dot<A: Real>(special: &[A]) {
        for k in [1usize, 5, 8, 9, 15, 16, 17, 31, 64, 100, 384] {
            for m in [0usize, 1, 7, 8, 9, 15, 16, 17, 31, 33] {
                for n in 1..=4 {
                    let val = |i: usize, salt: usize| {
                        let h = (i * 2654435761 + salt * 40503) % 1000;
                        match h % 97 {
                            0..=2 => special[h % special.len()],
                            _ => A::of_f64(h as f64 / 250.0 - 2.0),
                        }
                    };
                    let a: Vec<A> = (0..m * k).map(|i| val(i, 1)).collect();
                    let b: Vec<A> = (0..n * k).map(|i| val(i, 2)).collect();
                    let mut out = vec![A::of_f64(7.0); m * n];
                    lane_dot_rows(&a, &b, k, &mut out);
                    for i in 0..m {
                        for j in 0..n {
                            let want = lane_dot(&a[i * k..(i + 1) * k], &b[j * k..(j + 1) * k]);
                            let got = out[i * n + j];
                            assert!(
                                Float::bits(got) == Float::bits(want)
                                    || (Float::is_nan(got) && Float::is_nan(want)),
                                "{:?} m {m} n {n} k {k}: ({i}, {j}) {got:?} != {want:?}",
                                A::DTYPE
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn narrow_products_sum_every_element_in_the_lane_order_of_lane_dot() {
        dot_rows_equal_lane_dot::<f32>(&[0.0, -0.0, f32::INFINITY, 1e-40, -3e38]);
        dot_rows_equal_lane_dot::<f64>(&[0.0, -0.0, f64::NEG_INFINITY, 1e-310, 1e300]);
        let mut out = [1.0f64; 6];
        lane_dot_rows(&[], &[], 0, &mut out);
        assert_eq!(out, [0.0; 6]);
    }
}
