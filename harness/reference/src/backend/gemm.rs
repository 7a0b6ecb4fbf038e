//! The GEMM kernel dfdx's CPU matmul calls (`gemm` 0.15), issued directly into planned buffers,
//! single-threaded or split across a [`crate::pool::Pool`], whole or by upper-triangle tiles.

use super::{vectorised, Kernel, Real};
use crate::pool::{PartsPtr, Pool};

/// A strided read-only matrix operand of [`gemm_into`]: element `(i, j)` is
/// `data[offset + i*rs + j*cs]`.
#[derive(Clone, Copy)]
pub struct Operand<'a, A> {
    pub data: &'a [A],
    pub offset: usize,
    pub rs: usize,
    pub cs: usize,
}

/// `dst[i*dst_rs + j] = sum_k lhs(i,k) rhs(k,j)` for an `m x n` block, overwriting `dst`, through
/// the very `gemm::gemm` call dfdx's CPU matmul makes (so results are bit-identical to dfdx's).
/// Products of fewer than [`GEMM_PARALLEL_MIN`] multiply-adds run on the calling thread; larger
/// ones use gemm's rayon parallelism (dfdx always does), which allocates per call (see the
/// module notes); single-threaded calls reuse their thread's scratch.
///
/// Panics if an operand's strided extent falls outside its slice (a bug in the caller's plan).
#[allow(clippy::too_many_arguments)]
pub fn gemm_into<A: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [A],
    dst_offset: usize,
    dst_rs: usize,
    lhs: Operand<'_, A>,
    rhs: Operand<'_, A>,
) {
    if !gemm_checked(m, n, k, dst, dst_offset, dst_rs, &lhs, &rhs) {
        return;
    }
    let mut small = SmallProduct {
        m,
        n,
        k,
        out: RowMajor {
            data: &mut *dst,
            offset: dst_offset,
            rs: dst_rs,
        },
        lhs: &lhs,
        rhs: &rhs,
    };
    if small.shallow() || small.narrow() {
        return;
    }
    let parallelism = if m * n * k < GEMM_PARALLEL_MIN {
        gemm::Parallelism::None
    } else {
        gemm::Parallelism::Rayon(rayon::current_num_threads())
    };
    // SAFETY: `gemm_checked` asserted every touched index in bounds; `dst` is borrowed mutably,
    // the operands immutably, so they do not alias.
    unsafe {
        gemm_raw(
            m,
            n,
            k,
            dst.as_mut_ptr().add(dst_offset),
            dst_rs,
            lhs.data.as_ptr().add(lhs.offset),
            lhs.rs,
            lhs.cs,
            rhs.data.as_ptr().add(rhs.offset),
            rhs.rs,
            rhs.cs,
            parallelism,
        )
    }
}

/// Output widths up to this may take gemm 0.15's small-size path (`m, n <= 64` after its
/// transpose to a column-oriented destination, `gemm-common` `gemm.rs`), whose depth chunk is
/// `kc = min(k, 512)` instead of `kernel_params`' `ceil(k / ceil(k / auto_kc))`: a block of at
/// most 64 rows of a narrow product could then sum over `k` in other chunks than the whole
/// product. [`gemm_into_pooled`] splits rows only of wider products.
pub const GEMM_SMALL_SIDE: usize = 64;

/// [`gemm_into`] with the `m` output rows split into [`Pool::threads`] contiguous blocks, each
/// one single-threaded `gemm::gemm` call (`Parallelism::None`) on its own pool thread. Each
/// element of the output is computed by the same kernel with the same depth chunks as in one
/// call over all rows (gemm's depth chunk depends on `k` only, for outputs wider than
/// [`GEMM_SMALL_SIDE`]; rows are independent), so the result is bit-identical to [`gemm_into`]'s
/// whatever the number of threads (tested below). Products smaller than [`GEMM_PARALLEL_MIN`],
/// narrower than [`GEMM_SMALL_SIDE`] or with fewer than two rows per thread run as one call on
/// the calling thread.
#[allow(clippy::too_many_arguments)]
pub fn gemm_into_pooled<A: Real>(
    pool: &mut Pool,
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [A],
    dst_offset: usize,
    dst_rs: usize,
    lhs: Operand<'_, A>,
    rhs: Operand<'_, A>,
) {
    if !gemm_checked(m, n, k, dst, dst_offset, dst_rs, &lhs, &rhs) {
        return;
    }
    let parts = pool.threads();
    let split =
        parts > 1 && m * n * k >= GEMM_PARALLEL_MIN && n > GEMM_SMALL_SIDE && m >= 2 * parts;
    let parts = if split { parts } else { 1 };
    let d = PartsPtr::new(dst.as_mut_ptr().wrapping_add(dst_offset));
    let l = PartsPtr::of_read_only(lhs.data.as_ptr().wrapping_add(lhs.offset));
    let r = PartsPtr::of_read_only(rhs.data.as_ptr().wrapping_add(rhs.offset));
    let part = |i: usize| {
        // rows [m i / parts, m (i+1) / parts)
        let (r0, r1) = (m * i / parts, m * (i + 1) / parts);
        if r1 == r0 {
            return;
        }
        // SAFETY: `gemm_checked` asserted the whole product in bounds; part `i` writes only the
        // rows `r0..r1` of `dst` (disjoint from every other part's, as `dst_rs >= n`), and reads
        // the operands, which nothing writes during the call.
        unsafe {
            gemm_raw(
                r1 - r0,
                n,
                k,
                d.get().add(r0 * dst_rs),
                dst_rs,
                l.get().add(r0 * lhs.rs),
                lhs.rs,
                lhs.cs,
                r.get(),
                rhs.rs,
                rhs.cs,
                gemm::Parallelism::None,
            )
        }
    };
    if parts == 1 {
        part(0);
    } else {
        pool.run(&part);
    }
}

/// One tile of a tiled product: output rows `r0..r1`, columns `c0..c1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile {
    pub r0: usize,
    pub r1: usize,
    pub c0: usize,
    pub c1: usize,
}

/// `dst[r0..r1, c0..c1] = lhs[r0..r1, :] rhs[:, c0..c1]` for every tile of `tiles` (the
/// operands are an `m x k` and a `k x n` matrix; tiles lie inside `m x n`). The pool's threads
/// claim the tiles in list order (so list the large ones first), each tile one
/// single-threaded `gemm::gemm` call: a tile's
/// result does not depend on which thread computes it, so the output is bit-identical for
/// every thread count. Tiles must not overlap.
#[allow(clippy::too_many_arguments)]
pub fn gemm_tiles_pooled<A: Real>(
    pool: &mut Pool,
    tiles: &[Tile],
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [A],
    dst_rs: usize,
    lhs: Operand<'_, A>,
    rhs: Operand<'_, A>,
) {
    if !gemm_checked(m, n, k, dst, 0, dst_rs, &lhs, &rhs) {
        return;
    }
    for t in tiles {
        assert!(
            t.r0 <= t.r1 && t.r1 <= m && t.c0 <= t.c1 && t.c1 <= n,
            "gemm_tiles_pooled: tile {t:?} outside {m} x {n}"
        );
    }
    let threads = pool.threads();
    let d = PartsPtr::new(dst.as_mut_ptr());
    let l = PartsPtr::of_read_only(lhs.data.as_ptr().wrapping_add(lhs.offset));
    let r = PartsPtr::of_read_only(rhs.data.as_ptr().wrapping_add(rhs.offset));
    // tiles are claimed in list order from a shared counter: a thread slowed down (by another
    // process on its core) takes fewer of them
    let next = std::sync::atomic::AtomicUsize::new(0);
    let part = |_: usize| loop {
        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(t) = tiles.get(i) else { break };
        if t.r1 == t.r0 || t.c1 == t.c0 {
            continue;
        }
        // SAFETY: `gemm_checked` asserted the whole `m x n` product in bounds and every tile
        // lies inside it; tiles are disjoint and each is claimed once, so parts write disjoint
        // elements of `dst`, and the operands are only read.
        unsafe {
            gemm_raw(
                t.r1 - t.r0,
                t.c1 - t.c0,
                k,
                d.get().add(t.r0 * dst_rs + t.c0),
                dst_rs,
                l.get().add(t.r0 * lhs.rs),
                lhs.rs,
                lhs.cs,
                r.get().add(t.c0 * rhs.cs),
                rhs.rs,
                rhs.cs,
                gemm::Parallelism::None,
            )
        }
    };
    if threads == 1 || tiles.len() < 2 {
        part(0);
    } else {
        pool.run(&part);
    }
}

/// Bounds checks shared by the GEMM entry points; `false` when nothing is left to compute
/// (empty output; `k = 0` zero-fills it).
#[allow(clippy::too_many_arguments)]
fn gemm_checked<A: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [A],
    dst_offset: usize,
    dst_rs: usize,
    lhs: &Operand<'_, A>,
    rhs: &Operand<'_, A>,
) -> bool {
    if m == 0 || n == 0 {
        return false;
    }
    let last = |o: usize, rs: usize, cs: usize, r: usize, c: usize| o + (r - 1) * rs + (c - 1) * cs;
    assert!(
        last(dst_offset, dst_rs, 1, m, n) < dst.len() && (m == 1 || dst_rs >= n),
        "gemm_into: dst"
    );
    if k == 0 {
        for i in 0..m {
            dst[dst_offset + i * dst_rs..dst_offset + i * dst_rs + n].fill(A::default());
        }
        return false;
    }
    assert!(
        last(lhs.offset, lhs.rs, lhs.cs, m, k) < lhs.data.len(),
        "gemm_into: lhs"
    );
    assert!(
        last(rhs.offset, rhs.rs, rhs.cs, k, n) < rhs.data.len(),
        "gemm_into: rhs"
    );
    true
}

/// The `gemm::gemm` call dfdx makes, on raw pointers: `dst` row-major with row stride
/// `dst_rs`, `read_dst = false`, `alpha = 0`, `beta = 1`, no conjugation.
///
/// # Safety
/// Every element of the `m x n` output and of the `m x k`, `k x n` operands at the given
/// strides must be in bounds, and the output must not overlap the operands.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_raw<A: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut A,
    dst_rs: usize,
    lhs: *const A,
    lhs_rs: usize,
    lhs_cs: usize,
    rhs: *const A,
    rhs_rs: usize,
    rhs_cs: usize,
    parallelism: gemm::Parallelism,
) {
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        dst_rs as isize,
        false,
        lhs,
        lhs_cs as isize,
        lhs_rs as isize,
        rhs,
        rhs_cs as isize,
        rhs_rs as isize,
        A::default(),
        A::of_f64(1.0),
        false,
        false,
        false,
        parallelism,
    )
}

/// Depths up to this, for outputs up to [`GEMM_SMALL_SIDE`] wide, are multiplied by
/// [`gemm_into`] in one vectorised pass per output row rather than by `gemm::gemm`, with the
/// bits of the `gemm::gemm` call: `lhs(i, 0) rhs(0, j)`, plus `lhs(i, 1) rhs(1, j)` (rounded
/// products, no fused multiply-add), as `gemm` 0.15 forms them for these depths.
pub const SHALLOW_DEPTH: usize = 2;

/// An `m x n x k` product into a row-major block, for the two shapes [`gemm_into`] computes
/// without `gemm::gemm`'s own path.
struct SmallProduct<'a, 'b, A> {
    m: usize,
    n: usize,
    k: usize,
    out: RowMajor<'a, A>,
    lhs: &'b Operand<'b, A>,
    rhs: &'b Operand<'b, A>,
}

impl<A: Real> SmallProduct<'_, '_, A> {
    /// A product of depth `k <= SHALLOW_DEPTH` and width `n <= GEMM_SMALL_SIDE` (the first
    /// layer of a network on 2-D data, or the backward pass through its last one), computed row
    /// by row: `dst(i, j) = lhs(i, 0) rhs(0, j)` for `k = 1` and
    /// `dst(i, j) = lhs(i, 1) rhs(1, j) + lhs(i, 0) rhs(0, j)` for `k = 2`, each product
    /// rounded, no fused multiply-add. Those are the sums `gemm` 0.15 forms for depths up to 2
    /// on every CPU (`gemm-common`'s `gevv` with the `a * b + c` it is given, and our
    /// `alpha = 0`, `beta = 1`), so the result is bit-identical to the `gemm::gemm` call (tested
    /// below on a grid of shapes up to and past these limits, with signed zeros, an infinity and
    /// a NaN among the operands).
    /// `gevv` walks the output column by column in a scalar loop; here each row is one
    /// vectorised pass ([`vectorised`]). Returns `false` (nothing written) for other shapes.
    fn shallow(&mut self) -> bool {
        let (m, n, k, lhs, rhs) = (self.m, self.n, self.k, self.lhs, self.rhs);
        if k > SHALLOW_DEPTH || n > GEMM_SMALL_SIDE {
            return false;
        }
        // rhs as k contiguous rows of n
        let mut rows = [A::default(); SHALLOW_DEPTH * GEMM_SMALL_SIDE];
        for q in 0..k {
            for j in 0..n {
                rows[q * n + j] = rhs.data[rhs.offset + q * rhs.rs + j * rhs.cs];
            }
        }
        vectorised(ShallowRows {
            m,
            n,
            k,
            out: &mut self.out,
            lhs,
            rows: &rows[..k * n],
        });
        true
    }

    /// A product with a narrow output (`n <= NARROW_SIDE < m`, `m n <= NARROW_ELEMS`) whose left
    /// operand is column-major (`lhs.rs == 1`, as `P^T` is in the weight gradient `P^T H` of a
    /// layer with 2 inputs), computed as `dst^T = rhs^T lhs^T` into a stack buffer (`n x m`,
    /// row-major) and copied out transposed. Both orders form each element the same way in `gemm`
    /// (one accumulator from `+0`, the depth in order, each product commutative; the depth chunk
    /// is the same, since it depends on `k` and on whether both sides are at most
    /// [`GEMM_SMALL_SIDE`]), so the bits are those of the direct call (tested below), but with this
    /// operand layout the transposed call packs cheaply and runs the `m` rows through full register
    /// tiles: 2-4 times faster for `m x 2` outputs over depths 8 to 384 (`64 x 2 x 384`: 8.5 ->
    /// 3.3 us in f64, 7.9 -> 1.9 us in f32). From a row-major left operand it is 10-25% slower,
    /// so that case keeps the direct call, as do products deep enough for the direct call to run
    /// on every thread ([`GEMM_PARALLEL_MIN`]). Returns `false` (nothing written) otherwise.
    fn narrow(&mut self) -> bool {
        let (m, n, k, lhs, rhs) = (self.m, self.n, self.k, self.lhs, self.rhs);
        if k <= SHALLOW_DEPTH
            || lhs.rs != 1
            || n > NARROW_SIDE
            || m <= NARROW_SIDE
            || m * n > NARROW_ELEMS
            || m * n * k >= GEMM_PARALLEL_MIN
        {
            return false;
        }
        let mut t = [A::default(); NARROW_ELEMS];
        // SAFETY: `gemm_checked` asserted the operands in bounds for `m x k` and `k x n`; the
        // transposed operands reach the same elements, and `t` holds the `n x m` result.
        unsafe {
            gemm_raw(
                n,
                m,
                k,
                t.as_mut_ptr(),
                m,
                rhs.data.as_ptr().add(rhs.offset),
                rhs.cs,
                rhs.rs,
                lhs.data.as_ptr().add(lhs.offset),
                lhs.cs,
                lhs.rs,
                gemm::Parallelism::None,
            )
        };
        for i in 0..m {
            for (j, v) in self.out.row(i, n).iter_mut().enumerate() {
                *v = t[j * m + i];
            }
        }
        true
    }
}

/// A row-major destination block: element `(i, j)` is `data[offset + i*rs + j]`.
struct RowMajor<'a, A> {
    data: &'a mut [A],
    offset: usize,
    rs: usize,
}

impl<A> RowMajor<'_, A> {
    /// Row `i`'s first `n` elements.
    #[inline(always)]
    fn row(&mut self, i: usize, n: usize) -> &mut [A] {
        let start = self.offset + i * self.rs;
        &mut self.data[start..start + n]
    }
}

/// The loop of [`SmallProduct::shallow`]: `dst(i, :) = lhs(i, 0) rows(0, :)`, then
/// `dst(i, :) = lhs(i, 1) rows(1, :) + dst(i, :)` when `k = 2`.
struct ShallowRows<'a, 'b, 'c, A> {
    m: usize,
    n: usize,
    k: usize,
    out: &'a mut RowMajor<'c, A>,
    lhs: &'a Operand<'b, A>,
    rows: &'a [A],
}

impl<A: Real> Kernel for ShallowRows<'_, '_, '_, A> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (n, lhs) = (self.n, self.lhs);
        for i in 0..self.m {
            let out = self.out.row(i, n);
            let at = |q: usize| lhs.data[lhs.offset + i * lhs.rs + q * lhs.cs];
            let a = at(0);
            for (o, &r) in out.iter_mut().zip(&self.rows[..n]) {
                *o = a * r;
            }
            for q in 1..self.k {
                let a = at(q);
                for (o, &r) in out.iter_mut().zip(&self.rows[q * n..(q + 1) * n]) {
                    *o = a * r + *o;
                }
            }
        }
    }
}

/// Outputs at most this wide (and at most [`NARROW_ELEMS`] in all, over a depth above
/// [`SHALLOW_DEPTH`], from a column-major left operand) are computed by [`gemm_into`] as their
/// transpose, `dst^T = rhs^T lhs^T`, which `gemm` runs through full register tiles; each
/// element is summed as in the direct call, so the bits are the same.
pub const NARROW_SIDE: usize = 4;
/// The largest narrow output (see [`NARROW_SIDE`]) [`gemm_into`] transposes through a stack
/// buffer.
pub const NARROW_ELEMS: usize = 1024;

/// Multiply-adds from which [`gemm_into`] runs multi-threaded (2^22: a 128x128x256 product).
pub const GEMM_PARALLEL_MIN: usize = 1 << 22;

#[cfg(test)]
mod gemm_tests {
    use super::*;

    fn data<A: Real>(len: usize, seed: f64) -> Vec<A> {
        (0..len)
            .map(|i| A::of_f64((i as f64 * seed).sin()))
            .collect()
    }

    fn bits<A: Real>(v: &[A]) -> Vec<u64> {
        v.iter().map(|x| x.as_f64().to_bits()).collect()
    }

    /// The `k x n` right operand held in `r` as a `k x n` row-major matrix, or (transposed) as
    /// an `n x k` one.
    fn rhs_operand<A>(r: &[A], k: usize, n: usize, transposed: bool) -> Operand<'_, A> {
        let (rs, cs) = if transposed { (1, k) } else { (n, 1) };
        Operand {
            data: r,
            offset: 0,
            rs,
            cs,
        }
    }

    /// `m x n` from `m x k` and either a `k x n` operand or (transposed) an `n x k` one.
    fn check_splits<A: Real>(m: usize, n: usize, k: usize, transposed_rhs: bool) {
        let l = data::<A>(m * k, 0.37);
        let r = data::<A>(k * n, 0.71);
        let lhs = |off: usize| Operand {
            data: &l,
            offset: off,
            rs: k,
            cs: 1,
        };
        let rhs = rhs_operand(&r, k, n, transposed_rhs);
        let mut whole = vec![A::default(); m * n];
        gemm_into(m, n, k, &mut whole, 0, n, lhs(0), rhs);
        // any row block is reduced exactly as in the whole product
        for r0 in [2, 17, m / 3, m / 2, m - 2] {
            let mut split = vec![A::default(); m * n];
            gemm_into(r0, n, k, &mut split, 0, n, lhs(0), rhs);
            gemm_into(m - r0, n, k, &mut split, r0 * n, n, lhs(r0 * k), rhs);
            assert_eq!(bits(&split), bits(&whole), "{m}x{n}x{k} split at {r0}");
        }
        for threads in 1..=4 {
            let mut pool = Pool::new(threads);
            let mut pooled = vec![A::default(); m * n];
            gemm_into_pooled(&mut pool, m, n, k, &mut pooled, 0, n, lhs(0), rhs);
            assert_eq!(
                bits(&pooled),
                bits(&whole),
                "{m}x{n}x{k} on {threads} threads"
            );
        }
    }

    /// `gemm_into` and the `gemm::gemm` call itself on one shape and strides.
    fn check_against_gemm<A: Real>(m: usize, n: usize, k: usize, lhs_rowmajor: bool, rhs_t: bool) {
        let mut l = data::<A>(m * k, 0.37);
        let mut r = data::<A>(k * n, 0.71);
        // signed zeros, an infinity and a NaN among the operands
        l[0] = A::of_f64(-0.0);
        let last = r.len() - 1;
        r[last] = A::of_f64(-0.0);
        if m * k > 3 {
            l[3] = A::of_f64(f64::INFINITY);
        }
        if k * n > 5 {
            r[5] = A::of_f64(f64::NAN);
        }
        let lhs = if lhs_rowmajor {
            Operand {
                data: &l,
                offset: 0,
                rs: k,
                cs: 1,
            }
        } else {
            Operand {
                data: &l,
                offset: 0,
                rs: 1,
                cs: m,
            }
        };
        let rhs = rhs_operand(&r, k, n, rhs_t);
        let dst_rs = n + 3;
        let mut fast = vec![A::of_f64(7.0); m * dst_rs];
        let mut slow = fast.clone();
        gemm_into(m, n, k, &mut fast, 0, dst_rs, lhs, rhs);
        // SAFETY: the operands and `slow` hold every element the strides reach.
        unsafe {
            gemm_raw(
                m,
                n,
                k,
                slow.as_mut_ptr(),
                dst_rs,
                lhs.data.as_ptr(),
                lhs.rs,
                lhs.cs,
                rhs.data.as_ptr(),
                rhs.rs,
                rhs.cs,
                gemm::Parallelism::None,
            )
        };
        assert_eq!(bits(&fast), bits(&slow), "{m}x{n}x{k}");
    }

    #[test]
    fn shallow_and_narrow_products_are_bit_identical_to_the_gemm_call() {
        for k in [1, 2, 3, 4, 64, 384, 600] {
            for n in [
                1,
                2,
                3,
                4,
                5,
                7,
                8,
                17,
                63,
                GEMM_SMALL_SIDE,
                GEMM_SMALL_SIDE + 1,
            ] {
                for m in [1, 2, 4, 5, 24, 64, 65, 128, 256, 257, 384] {
                    for (lr, rt) in [(true, true), (true, false), (false, true), (false, false)] {
                        check_against_gemm::<f32>(m, n, k, lr, rt);
                        check_against_gemm::<f64>(m, n, k, lr, rt);
                    }
                }
            }
        }
    }

    #[test]
    fn row_blocks_of_a_product_are_bit_identical_to_the_whole_whatever_the_thread_count() {
        // wide enough for gemm's general path (n > GEMM_SMALL_SIDE); the larger shapes reach
        // GEMM_PARALLEL_MIN, so the pooled form really splits; k > 512 crosses a depth chunk
        for (m, n, k) in [
            (130, 90, 70),
            (256, 256, 256),
            (300, 200, 1100),
            (512, 512, 512),
        ] {
            check_splits::<f32>(m, n, k, false);
            check_splits::<f32>(m, n, k, true);
            check_splits::<f64>(m, n, k, false);
            check_splits::<f64>(m, n, k, true);
        }
    }
}
