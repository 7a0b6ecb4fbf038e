//! The GEMM kernel dfdx's CPU matmul calls (`gemm` 0.15), issued directly into planned buffers,
//! single-threaded or split across a [`crate::pool::Pool`], whole or by upper-triangle tiles;
//! and, for the small shapes `gemm` serves poorly, kernels of our own with the bits of its call
//! (depth-2 products, narrow outputs from a column-major operand, and products up to 64 columns
//! wide summed as outer products in AVX-512 registers: see `SmallProduct`); and that last kernel
//! with a hidden layer's element-wise work applied to each tile before it leaves the registers
//! ([`hidden_layer_into`]). Products whose bits need not be dfdx's may instead go to a later
//! release of the same crate with its AVX-512 kernels enabled ([`GemmKernel::Widest`]).

use super::{vectorised, Kernel, Real};
use crate::pool::{PartsPtr, Pool};

/// A strided read-only matrix operand of [`gemm_into`]: element `(i, j)` is
/// `data[offset + i*rs + j*cs]`.
#[derive(Clone, Copy)]
pub struct Operand<'a, A> {
    /// The backing buffer; every addressed element must lie inside it.
    pub data: &'a [A],
    /// Index in `data` of element `(0, 0)`.
    pub offset: usize,
    /// Row stride: distance in `data` between `(i, j)` and `(i + 1, j)`.
    pub rs: usize,
    /// Column stride: distance in `data` between `(i, j)` and `(i, j + 1)`.
    pub cs: usize,
}

/// An `m x n` matrix product of depth `k`: `lhs` is `m x k`, `rhs` is `k x n` (each at its
/// own strides).
#[derive(Clone, Copy)]
pub struct Product<'a, A> {
    /// Output rows.
    pub m: usize,
    /// Output columns.
    pub n: usize,
    /// Depth: columns of `lhs`, rows of `rhs`.
    pub k: usize,
    /// The left factor, `m x k`.
    pub lhs: Operand<'a, A>,
    /// The right factor, `k x n`.
    pub rhs: Operand<'a, A>,
}

/// The row-major destination of a [`Product`]: element `(i, j)` is `data[offset + i*rs + j]`
/// (`rs >= n`, or any for a single row).
pub struct Dest<'a, A> {
    /// The backing buffer; every written element must lie inside it.
    pub data: &'a mut [A],
    /// Index in `data` of element `(0, 0)`.
    pub offset: usize,
    /// Row stride.
    pub rs: usize,
}

/// `dst(i, j) = sum_k lhs(i,k) rhs(k,j)` for the `m x n` product `p`, overwriting `dst`, with the
/// bits of the very `gemm::gemm` call dfdx's CPU matmul makes (so results are bit-identical to
/// dfdx's): through that call, or for small shapes through a kernel of our own that forms every
/// element the same way (`SmallProduct`: [`SHALLOW_DEPTH`], [`NARROW_SIDE`], [`OUTER_MAX_DEPTH`]).
/// Products of fewer than [`GEMM_PARALLEL_MIN`] multiply-adds run on the calling thread; larger
/// ones use gemm's rayon parallelism (dfdx always does), which allocates per call (see the
/// module notes); single-threaded calls reuse their thread's scratch.
///
/// Panics if an operand's strided extent falls outside its slice (a bug in the caller's plan).
///
/// ```
/// use harness_reference::backend::{gemm_into, Dest, Operand, Product};
/// // [1 2; 3 4] [5; 6] = [17; 39], written into the second and third of four slots
/// let (a, b) = ([1.0, 2.0, 3.0, 4.0], [5.0, 6.0]);
/// let mut out = [0.0f64; 4];
/// let row_major = |data, cols| Operand { data, offset: 0, rs: cols, cs: 1 };
/// gemm_into(
///     Product { m: 2, n: 1, k: 2, lhs: row_major(&a[..], 2), rhs: row_major(&b[..], 1) },
///     Dest { data: &mut out, offset: 1, rs: 1 },
/// );
/// assert_eq!(out, [0.0, 17.0, 39.0, 0.0]);
/// ```
pub fn gemm_into<A: Real>(p: Product<'_, A>, dst: Dest<'_, A>) {
    gemm_into_on(GemmKernel::Dfdx, p, dst)
}

/// One call of `kernel` for the whole product into `dst` (row stride `dst_rs`): on the calling
/// thread below [`GEMM_PARALLEL_MIN`] multiply-adds, else on every thread of rayon's pool
/// (`Parallelism::Rayon`, as dfdx's matmul asks).
///
/// # Safety
/// As [`gemm_raw`]: `p`'s operands and the `m x n` destination in bounds, not overlapping.
unsafe fn gemm_whole<A: Real>(kernel: GemmKernel, p: &Product<'_, A>, dst: *mut A, dst_rs: usize) {
    let Product { m, n, k, lhs, rhs } = *p;
    let threads = if m * n * k < GEMM_PARALLEL_MIN {
        1
    } else {
        rayon::current_num_threads()
    };
    // SAFETY: the caller's contract: operands and destination in bounds, not overlapping
    unsafe {
        gemm_raw(
            m,
            n,
            k,
            dst,
            dst_rs,
            lhs.data.as_ptr().add(lhs.offset),
            lhs.rs,
            lhs.cs,
            rhs.data.as_ptr().add(rhs.offset),
            rhs.rs,
            rhs.cs,
            kernel,
            threads,
        )
    }
}

/// Which release of the `gemm` crate a product is issued to.
///
/// The two compute the same sums with the same operands, each element to within gemm's usual
/// rounding, but in different orders and vector widths, so their bits differ: a result that must
/// equal dfdx's bit for bit uses [`GemmKernel::Dfdx`]. Either one's result is a function of the
/// shape and the operands only on a given machine (the kernel and the depth chunks follow the
/// CPU's features and cache sizes), not of the thread count for the pooled forms below.
///
/// # References
/// - `gemm` 0.15 and 0.19 (crates.io, sarah-ek/gemm); 0.19's `x86-v4` feature enables its
///   AVX-512 kernels, chosen at run time by CPU feature detection.
///
/// # Example
/// ```
/// use harness_reference::backend::{gemm_into_on, Dest, GemmKernel, Operand, Product};
/// let (a, b) = ([1.0f32, 2.0, 3.0, 4.0], [5.0f32, 6.0, 7.0, 8.0]);
/// let op = |data| Operand { data, offset: 0, rs: 2, cs: 1 };
/// for kernel in [GemmKernel::Dfdx, GemmKernel::Widest] {
///     let mut out = [0.0f32; 4];
///     let p = Product { m: 2, n: 2, k: 2, lhs: op(&a[..]), rhs: op(&b[..]) };
///     gemm_into_on(kernel, p, Dest { data: &mut out, offset: 0, rs: 2 });
///     assert_eq!(out, [19.0, 22.0, 43.0, 50.0]); // exact: small integers
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmKernel {
    /// `gemm` 0.15, the call dfdx 0.13's CPU matmul makes: results bit-identical to dfdx's.
    Dfdx,
    /// `gemm` 0.19 with its AVX-512 kernels enabled, on a CPU without them its next widest: 2.0x
    /// dfdx's rate on a `1024^3` f32 product (one thread and two) on an AVX-512 Xeon (family 6
    /// model 207), where 0.15 runs its 256-bit kernels only.
    Widest,
}

/// [`gemm_into`] issued to `kernel`: for [`GemmKernel::Dfdx`] exactly [`gemm_into`] (small
/// shapes through its own kernels with the call's bits); for [`GemmKernel::Widest`] one call of
/// that release, single-threaded below [`GEMM_PARALLEL_MIN`] multiply-adds.
///
/// Panics as [`gemm_into`] does when an operand's extent falls outside its slice.
///
/// ```
/// use harness_reference::backend::{gemm_into_on, Dest, GemmKernel, Operand, Product};
/// // a 3 x 2 product of integers (exact in f64) into rows 1..4 of a buffer with 3 columns
/// let (a, b) = ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 0.0, 1.0, 1.0]);
/// let mut out = [0.0f64; 12];
/// let p = Product {
///     m: 3, n: 2, k: 2,
///     lhs: Operand { data: &a[..], offset: 0, rs: 2, cs: 1 },
///     rhs: Operand { data: &b[..], offset: 0, rs: 2, cs: 1 },
/// };
/// gemm_into_on(GemmKernel::Widest, p, Dest { data: &mut out, offset: 3, rs: 3 });
/// assert_eq!(out[3..11], [3.0, 2.0, 0.0, 7.0, 4.0, 0.0, 11.0, 6.0]);
/// ```
pub fn gemm_into_on<A: Real>(kernel: GemmKernel, p: Product<'_, A>, dst: Dest<'_, A>) {
    let Some((dst, dst_offset, dst_rs)) = checked_dest(&p, dst) else {
        return;
    };
    if kernel == GemmKernel::Dfdx {
        // small shapes through kernels of our own with the bits of dfdx's call
        let Product { m, n, k, lhs, rhs } = p;
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
        if small.shallow() || small.narrow() || small.outer() {
            return;
        }
    }
    // SAFETY: `gemm_checked` asserted every touched index in bounds; `dst` is borrowed mutably,
    // the operands immutably, so they do not alias.
    unsafe { gemm_whole(kernel, &p, dst.as_mut_ptr().add(dst_offset), dst_rs) }
}

/// Output widths up to this may take gemm's small-size path (`m, n <= 64` after its
/// transpose to a column-oriented destination, `gemm-common` `gemm.rs`, the same rule in 0.15
/// and 0.19), whose depth chunk is
/// `kc = min(k, 512)` instead of `kernel_params`' `ceil(k / ceil(k / auto_kc))`: a block of at
/// most 64 rows of a narrow product could then sum over `k` in other chunks than the whole
/// product. [`gemm_into_pooled`] splits rows only of wider products.
pub const GEMM_SMALL_SIDE: usize = 64;

/// Outputs of at most this many elements take `gemm` 0.19's small-output path when the left
/// operand's rows and the right operand's columns are contiguous (the right operand stored
/// transposed): a dot-product kernel of its own that sums each element across vector lanes along
/// the depth and then reduces the lanes (`gemm-common` 0.19 `gemm.rs`, `horizontal_microkernel.rs`;
/// in its AVX2 build too), an order other than the general kernels' one accumulator per element.
/// Measured: f64 row blocks of one or two rows of a `130 x 90` product (depth 70, right operand
/// stored transposed) differed from the same rows of the whole product, blocks of three rows or
/// more did not.
pub const GEMM_TINY_OUTPUT: usize = 16 * 16;

/// The fewest rows a row block of an `n`-column product gets in [`gemm_into_pooled`]: two (a
/// single row takes gemm's matrix-vector path) and more than [`GEMM_TINY_OUTPUT`] elements.
///
/// ```
/// use harness_reference::backend::min_block_rows;
/// assert_eq!(min_block_rows(90), 3); // 3 x 90 = 270 elements, more than 16 x 16
/// assert_eq!(min_block_rows(1024), 2);
/// ```
pub fn min_block_rows(n: usize) -> usize {
    (GEMM_TINY_OUTPUT / n.max(1) + 1).max(2)
}

/// [`gemm_into_on`] with the `m` output rows split into [`Pool::threads`] contiguous blocks,
/// each one single-threaded call of `kernel` (`Parallelism::None`) on its own pool thread. Each
/// element of the output is computed by the same kernel with the same depth chunks as in one
/// call over all rows (gemm's depth chunk depends on `k` only, for outputs wider than
/// [`GEMM_SMALL_SIDE`] and blocks of at least [`min_block_rows`]; rows are independent), so the
/// result is bit-identical to [`gemm_into_on`]'s whatever the number of threads (tested below
/// for both kernels). Products smaller than [`GEMM_PARALLEL_MIN`], narrower than
/// [`GEMM_SMALL_SIDE`] or with fewer than [`min_block_rows`] rows per thread run as one call on
/// the calling thread.
pub fn gemm_into_pooled<A: Real>(
    pool: &mut Pool,
    kernel: GemmKernel,
    p: Product<'_, A>,
    dst: Dest<'_, A>,
) {
    let Some((dst, dst_offset, dst_rs)) = checked_dest(&p, dst) else {
        return;
    };
    let Product { m, n, k, lhs, rhs } = p;
    let parts = pool.threads();
    let split = parts > 1
        && m * n * k >= GEMM_PARALLEL_MIN
        && n > GEMM_SMALL_SIDE
        && m >= min_block_rows(n) * parts;
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
                kernel,
                1,
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
    /// First output row of the tile (inclusive).
    pub r0: usize,
    /// End output row of the tile (exclusive); `r0 <= r1`.
    pub r1: usize,
    /// First output column of the tile (inclusive).
    pub c0: usize,
    /// End output column of the tile (exclusive); `c0 <= c1`.
    pub c1: usize,
}

/// `dst[r0..r1, c0..c1] = lhs[r0..r1, :] rhs[:, c0..c1]` for every tile of `tiles` (the
/// operands are an `m x k` and a `k x n` matrix; tiles lie inside `m x n`). The pool's threads
/// claim the tiles in list order (so list the large ones first), each tile one
/// single-threaded call of `kernel`: a tile's result does not depend on which thread computes
/// it, so the output is bit-identical for every thread count. Tiles must not overlap.
///
/// Each tile is followed on its thread by `then(tile, dst)` (`dst` the destination's address),
/// while the tile is in that thread's cache. `then` may touch the tile's elements of the
/// destination and elements no tile covers, as long as no two calls touch the same ones and
/// none reads what another writes; it may read the operands.
pub(crate) fn gemm_tiles_pooled<A: Real>(
    pool: &mut Pool,
    kernel: GemmKernel,
    tiles: &[Tile],
    p: Product<'_, A>,
    dst: &mut [A],
    dst_rs: usize,
    then: &(dyn Fn(&Tile, PartsPtr<A>) + Sync),
) {
    let Product { m, n, k, lhs, rhs } = p;
    for t in tiles {
        assert!(
            t.r0 <= t.r1 && t.r1 <= m && t.c0 <= t.c1 && t.c1 <= n,
            "gemm_tiles_pooled: tile {t:?} outside {m} x {n}"
        );
    }
    let computed = gemm_checked(&p, dst, 0, dst_rs);
    let d = PartsPtr::new(dst.as_mut_ptr());
    let nonempty = |t: &&Tile| t.r1 > t.r0 && t.c1 > t.c0;
    if !computed {
        // an empty output, or a depth of 0 (the output zero-filled): the tiles are final
        if m > 0 && n > 0 {
            tiles.iter().filter(nonempty).for_each(|t| then(t, d));
        }
        return;
    }
    let threads = pool.threads();
    let l = PartsPtr::of_read_only(lhs.data.as_ptr().wrapping_add(lhs.offset));
    let r = PartsPtr::of_read_only(rhs.data.as_ptr().wrapping_add(rhs.offset));
    // tiles are claimed in list order from a shared counter: a thread slowed down (by another
    // process on its core) takes fewer of them
    let next = std::sync::atomic::AtomicUsize::new(0);
    let part = |_: usize| loop {
        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(t) = tiles.get(i) else { break };
        if !nonempty(&t) {
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
                kernel,
                1,
            )
        }
        then(t, d);
    };
    if threads == 1 || tiles.len() < 2 {
        part(0);
    } else {
        pool.run(&part);
    }
}

/// [`gemm_checked`] on a [`Dest`]: its slice, offset and row stride when there is a product
/// left to compute, `None` when there is not (the output empty, or zero-filled for `k = 0`).
fn checked_dest<'d, A: Real>(
    p: &Product<'_, A>,
    dst: Dest<'d, A>,
) -> Option<(&'d mut [A], usize, usize)> {
    let Dest { data, offset, rs } = dst;
    gemm_checked(p, data, offset, rs).then_some((data, offset, rs))
}

/// Bounds checks shared by the GEMM entry points; `false` when nothing is left to compute
/// (empty output; `k = 0` zero-fills it).
fn gemm_checked<A: Real>(
    p: &Product<'_, A>,
    dst: &mut [A],
    dst_offset: usize,
    dst_rs: usize,
) -> bool {
    let Product { m, n, k, lhs, rhs } = p;
    let (m, n, k) = (*m, *n, *k);
    if m == 0 || n == 0 {
        return false;
    }
    // the last index an operand's strides reach, or `usize::MAX` if it does not fit a `usize`
    // (so strides that would wrap around cannot pass the checks)
    let last = |o: usize, rs: usize, cs: usize, r: usize, c: usize| {
        (r - 1)
            .checked_mul(rs)
            .zip((c - 1).checked_mul(cs))
            .and_then(|(a, b)| a.checked_add(b))
            .and_then(|a| a.checked_add(o))
            .unwrap_or(usize::MAX)
    };
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

/// The `gemm::gemm` call dfdx makes, on raw pointers, issued to `kernel`'s release of the crate
/// on `threads` threads of rayon's pool (one: the calling thread): `dst` row-major with row
/// stride `dst_rs`, `read_dst = false`, `alpha = 0`, `beta = 1`, no conjugation.
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
    kernel: GemmKernel,
    threads: usize,
) {
    // the same arguments to either release: `dst` column stride 1, no read of `dst`
    // (`alpha = 0`), `beta = 1`, no conjugation
    macro_rules! call {
        ($gemm:ident) => {
            $gemm::gemm(
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
                if threads > 1 {
                    $gemm::Parallelism::Rayon(threads)
                } else {
                    $gemm::Parallelism::None
                },
            )
        };
    }
    match kernel {
        GemmKernel::Dfdx => call!(gemm),
        GemmKernel::Widest => call!(gemm_widest),
    }
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
            rows,
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
                GemmKernel::Dfdx,
                1,
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

impl<A: Real> SmallProduct<'_, '_, A> {
    /// A product with an output 2 to [`GEMM_SMALL_SIDE`] columns wide and at least 2 rows, a
    /// depth of 3 to [`OUTER_MAX_DEPTH`] and a row-major right operand (`rhs.cs == 1`; the left
    /// one at any strides), run on one thread: the product is summed as outer products,
    /// `dst(i, :) = fma(lhs(i, p), rhs(p, :), dst(i, :))` for `p` in order from zero, six rows by
    /// four vectors of the output held in AVX-512 registers at a time, `lhs(i, p)` broadcast and
    /// `rhs(p, :)` loaded as it lies ([`Real::outer_product_simd`]). For these shapes `gemm` 0.15
    /// forms each element as the same chain (one fused multiply-add per depth step from zero, in
    /// order: its depth chunk covers the whole depth, and every AVX-512 CPU has FMA), so the bits
    /// are the same (tested below on a grid of shapes and on tall and deep ones up to the limits,
    /// with signed zeros, an infinity and a NaN). `gemm` 0.15 on stable Rust has no AVX-512
    /// kernels: it packs both operands and runs 256-bit tiles, at 37 GFLOP/s (f64) and 80 (f32)
    /// for `384 x 64 x 64` on the benchmark machine, and 33 and 70 for the `64 x 64 x 384` weight
    /// gradient (a partial last tile); this path runs both at 58 and 117 (one core, Zen 4).
    /// Returns `false` (nothing written) for other shapes (a `1 x n` or `m x 1` output is a
    /// matrix-vector product, which `gemm` sums in another order for small depths: `1 x 3 x 3`
    /// differs), on other CPUs, and for products large enough to use every thread
    /// ([`GEMM_PARALLEL_MIN`]).
    fn outer(&mut self) -> bool {
        let (m, n, k, lhs, rhs) = (self.m, self.n, self.k, self.lhs, self.rhs);
        // a single row or column is a matrix-vector product, which `gemm` sums otherwise
        if rhs.cs != 1
            || m < 2
            || !(2..=GEMM_SMALL_SIDE).contains(&n)
            || k > OUTER_MAX_DEPTH
            || m * n * k >= GEMM_PARALLEL_MIN
        {
            return false;
        }
        let out = &mut self.out;
        A::outer_product_simd(OuterProduct {
            m,
            n,
            k,
            lhs: &lhs.data[lhs.offset..],
            lhs_rs: lhs.rs,
            lhs_cs: lhs.cs,
            rhs: &rhs.data[rhs.offset..],
            rhs_rs: rhs.rs,
            dst: &mut out.data[out.offset..],
            dst_rs: out.rs,
        })
    }
}

/// The deepest product [`gemm_into`] sums as outer products in registers (for outputs up to
/// [`GEMM_SMALL_SIDE`] columns wide from a row-major right operand): `gemm` 0.15's depth chunk
/// for such products, within which it sums each element in one chain.
pub const OUTER_MAX_DEPTH: usize = 512;

/// The operands of a product computed as a sum of outer products (see `SmallProduct::outer`):
/// `dst[i dst_rs + j] = sum_p lhs[p lhs_cs + i] rhs[p rhs_rs + j]` for `i < m`, `j < n`, `p < k`,
/// each element one fused multiply-add chain from zero over `p` in order. The caller has checked
/// that every element the strides reach is in bounds.
#[doc(hidden)]
pub struct OuterProduct<'a, A> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lhs: &'a [A],
    pub lhs_rs: usize,
    pub lhs_cs: usize,
    pub rhs: &'a [A],
    pub rhs_rs: usize,
    pub dst: &'a mut [A],
    pub dst_rs: usize,
}

/// [`OuterProduct`] in f32 or f64 registers: `false` (nothing written) without AVX-512 F and
/// FMA, or for an empty product.
macro_rules! outer_product_simd {
    ($name:ident, $t:ty, $kernel:ident) => {
        pub(super) fn $name(o: OuterProduct<'_, $t>) -> bool {
            // `gemm` forms the chain with fused multiply-adds only where the CPU reports FMA
            #[cfg(target_arch = "x86_64")]
            if o.m > 0
                && o.n > 0
                && o.k > 0
                && std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("fma")
            {
                // bounds: the last element each operand's strides reach (`usize::MAX` if that
                // does not fit a `usize`, so wrapping strides fail the check)
                let last = |rows: usize, rs: usize, cols: usize, cs: usize| {
                    (rows - 1)
                        .checked_mul(rs)
                        .zip((cols - 1).checked_mul(cs))
                        .and_then(|(a, b)| a.checked_add(b))
                        .unwrap_or(usize::MAX)
                };
                assert!(
                    last(o.m, o.lhs_rs, o.k, o.lhs_cs) < o.lhs.len()
                        && last(o.k, o.rhs_rs, o.n, 1) < o.rhs.len()
                        && last(o.m, o.dst_rs, o.n, 1) < o.dst.len(),
                    "outer product: an operand does not hold {} x {} x {}",
                    o.m,
                    o.n,
                    o.k
                );
                // SAFETY: the CPU has AVX-512 F; every element read or written is in bounds
                // (asserted above), and `dst` does not overlap the operands (it is borrowed
                // mutably beside them).
                unsafe { x86::$kernel(o) };
                return true;
            }
            let _ = o;
            false
        }
    };
}
outer_product_simd!(outer_product_simd_f32, f32, outer_f32);
outer_product_simd!(outer_product_simd_f64, f64, outer_f64);

/// An element-wise map applied to whole rows in place (the activation of
/// [`hidden_layer_into`]); called from code compiled for the CPU's widest vectors, so an
/// `#[inline(always)]` implementation is compiled for them too.
pub trait RowMap<A>: Sync {
    /// `row_i <- f(row_i)` for every element.
    fn apply(&self, row: &mut [A]);
}

/// One hidden layer of a stacked forward pass with tangents (the CNF field's): the product
/// `P = H W^T` of `rows` input rows (the first `n` primal, then tangent rows; row `r >= n`
/// belongs to sample `r mod n`) with the weights' transpose `wt` (`inp x out`, row-major),
/// and from it the next layer's input, element by element,
///
/// ```text
/// h'   = act((P_h + b) * s + c)          (primal rows)
/// dh'  = (1 - h'^2) * (P_q * s)          (tangent rows, h' of the same sample)
/// ```
///
/// every operation rounded on its own, in this order. `p` receives `P` (if given) and `h_out`
/// the next input (`rows x out` each, row-major).
pub struct HiddenLayer<'a, A> {
    /// Primal rows.
    pub n: usize,
    /// All rows (`n` primal, then the tangent rows).
    pub rows: usize,
    /// Input width.
    pub inp: usize,
    /// Output width.
    pub out: usize,
    /// `H`, `rows x inp`.
    pub h_in: &'a [A],
    /// `W^T`, `inp x out`.
    pub wt: &'a [A],
    /// `b`, `s`, `c` (`out` each).
    pub b: &'a [A],
    /// See `b`.
    pub s: &'a [A],
    /// See `b`.
    pub c: &'a [A],
    /// `P`, `rows x out`, overwritten; `None` where nothing reads it (it is then not
    /// stored at all).
    pub p: Option<&'a mut [A]>,
    /// The next layer's input, `rows x out`, overwritten.
    pub h_out: &'a mut [A],
}

/// [`HiddenLayer`] with the element-wise part applied to each tile of the product while it is
/// in registers, where [`gemm_into`] would sum the product as outer products in registers
/// (`SmallProduct::outer`: every element one fused multiply-add chain from zero, the bits of
/// the `gemm` call), and `act` to each primal row once it is whole. The bits are those of
/// [`gemm_into`] followed by the element-wise loops (tested below). Returns `false`, having
/// written nothing, where that path does not apply (no AVX-512 F and FMA, or another shape):
/// the caller then runs the product and the loops itself.
///
/// Panics if a buffer is shorter than the shapes say.
///
/// ```
/// use harness_reference::backend::{hidden_layer_into, HiddenLayer, RowMap};
/// struct Identity;
/// impl RowMap<f64> for Identity {
///     fn apply(&self, _: &mut [f64]) {}
/// }
/// // one sample and its one tangent row through a 3 -> 2 layer, W = [[1, 0, 0], [0, 1, 0]]
/// let (h, wt) = ([1.0, 2.0, 3.0, 0.5, 0.0, 0.0], [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]);
/// let (b, s, c) = ([0.0; 2], [1.0; 2], [0.0; 2]);
/// let (mut p, mut out) = ([0.0; 4], [0.0; 4]);
/// let l = HiddenLayer {
///     n: 1, rows: 2, inp: 3, out: 2, h_in: &h, wt: &wt, b: &b, s: &s, c: &c,
///     p: Some(&mut p), h_out: &mut out,
/// };
/// if hidden_layer_into(l, &Identity) {
///     assert_eq!(p, [1.0, 2.0, 0.5, 0.0]);
///     // primal row: (P + b) s + c; tangent row: (1 - h'^2) (P s)
///     assert_eq!(out, [1.0, 2.0, (1.0 - 1.0) * 0.5, (1.0 - 4.0) * 0.0]);
/// }
/// ```
pub fn hidden_layer_into<A: Real, M: RowMap<A>>(l: HiddenLayer<'_, A>, act: &M) -> bool {
    let (rows, n, inp, out) = (l.rows, l.n, l.inp, l.out);
    assert!(
        n <= rows
            && l.h_in.len() >= rows * inp
            && l.wt.len() >= inp * out
            && l.b.len() >= out
            && l.s.len() >= out
            && l.c.len() >= out
            && l.p.as_ref().is_none_or(|p| p.len() >= rows * out)
            && l.h_out.len() >= rows * out,
        "hidden_layer_into: a buffer is shorter than {rows} x {inp} -> {out}"
    );
    // the shapes `SmallProduct::outer` takes (with a row-major right operand)
    if n == 0
        || rows < 2
        || !(2..=GEMM_SMALL_SIDE).contains(&out)
        || !(3..=OUTER_MAX_DEPTH).contains(&inp)
        || rows * out * inp >= GEMM_PARALLEL_MIN
    {
        return false;
    }
    A::hidden_layer_simd(l, act)
}

/// [`hidden_layer_into`] in f32 or f64 registers: `false` (nothing written) without AVX-512 F
/// and FMA.
macro_rules! hidden_layer_simd {
    ($name:ident, $t:ty, $drive:ident) => {
        pub(super) fn $name<M: RowMap<$t>>(l: HiddenLayer<'_, $t>, act: &M) -> bool {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("fma")
            {
                let (n, rows, inp, out) = (l.n, l.rows, l.inp, l.out);
                // null: `P` not stored
                let p = l.p.map_or(std::ptr::null_mut(), |p| p.as_mut_ptr());
                let h = l.h_out.as_mut_ptr();
                let product = |r0: usize, r1: usize| OuterProduct {
                    m: r1 - r0,
                    n: out,
                    k: inp,
                    lhs: &l.h_in[r0 * inp..r1 * inp],
                    lhs_rs: inp,
                    lhs_cs: 1,
                    rhs: l.wt,
                    rhs_rs: out,
                    dst: &mut [],
                    dst_rs: out,
                };
                // SAFETY: the CPU has AVX-512 F and FMA; the lengths were asserted by the
                // caller, so every row `< rows` of `p` and `h_out` and every column `< out` of
                // `b`, `s`, `c` is in bounds; the primal pass writes rows `< n`, the tangent
                // pass rows `n..rows` and reads the primal rows, which it does not write.
                unsafe {
                    let mut primal = x86::Primal {
                        p,
                        h,
                        rs: out,
                        width: out,
                        b: l.b.as_ptr(),
                        s: l.s.as_ptr(),
                        c: l.c.as_ptr(),
                        map: act,
                    };
                    x86::$drive(&product(0, n), &mut primal);
                    if rows > n {
                        let mut tangent = x86::Tangent {
                            p: if p.is_null() { p } else { p.add(n * out) },
                            h: h.add(n * out),
                            h_primal: h,
                            n,
                            rs: out,
                            s: l.s.as_ptr(),
                        };
                        x86::$drive(&product(n, rows), &mut tangent);
                    }
                }
                return true;
            }
            let _ = (l, act);
            false
        }
    };
}
hidden_layer_simd!(hidden_layer_simd_f32, f32, drive_f32);
hidden_layer_simd!(hidden_layer_simd_f64, f64, drive_f64);

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{OuterProduct, RowMap};
    use std::arch::x86_64::*;

    /// What becomes of a tile of `R x V` accumulated vectors (rows from `i0`, columns from `j0`,
    /// the last vector of a row under `last`), and of each band of rows once all its columns
    /// are done.
    pub(super) trait Finish<V, M> {
        /// # Safety
        /// Every element the tile covers is in bounds of what the finisher writes.
        unsafe fn tile<const R: usize, const W: usize>(
            &mut self,
            i0: usize,
            j0: usize,
            last: M,
            acc: &[[V; W]; R],
        );
        /// # Safety
        /// As for `tile`.
        #[inline(always)]
        unsafe fn rows(&mut self, i0: usize, rows: usize) {
            let _ = (i0, rows);
        }
    }

    /// The plain product: `dst[i rs + j]`.
    pub(super) struct Plain<T> {
        pub dst: *mut T,
        pub rs: usize,
    }

    /// A hidden layer's primal rows (see `super::HiddenLayer`); `p` null: `P` not stored.
    pub(super) struct Primal<'a, T, M> {
        pub p: *mut T,
        pub h: *mut T,
        pub rs: usize,
        pub width: usize,
        pub b: *const T,
        pub s: *const T,
        pub c: *const T,
        pub map: &'a M,
    }

    /// A hidden layer's tangent rows (see `super::HiddenLayer`); rows counted from the first
    /// tangent row, `h_primal` the layer's activated primal rows; `p` null: `P` not stored.
    pub(super) struct Tangent<T> {
        pub p: *mut T,
        pub h: *mut T,
        pub h_primal: *const T,
        pub n: usize,
        pub rs: usize,
        pub s: *const T,
    }

    /// Rows of the left operand held at once (broadcast), and vectors of the right one.
    const ROWS: usize = 6;
    const VECS: usize = 4;

    macro_rules! outer_kernel {
        ($name:ident, $drive:ident, $tile:ident, $t:ty, $v:ty, $mask:ty, $lanes:expr, $zero:ident,
         $set1:ident, $loadz:ident, $fmadd:ident, $store:ident, $add:ident, $mul:ident,
         $sub:ident) => {
            /// `R x V` vectors of the output, summed over the whole depth in registers.
            #[target_feature(enable = "avx512f")]
            #[inline]
            unsafe fn $tile<const R: usize, const V: usize, F: Finish<$v, $mask>>(
                o: &OuterProduct<'_, $t>,
                fin: &mut F,
                i0: usize,
                j0: usize,
                last: $mask,
            ) {
                let (lhs, rhs) = (o.lhs.as_ptr(), o.rhs.as_ptr());
                let mut acc = [[$zero(); V]; R];
                let mut b = [$zero(); V];
                for p in 0..o.k {
                    let row = rhs.add(p * o.rhs_rs + j0);
                    for (v, bv) in b.iter_mut().enumerate() {
                        let mask = if v + 1 == V { last } else { <$mask>::MAX };
                        *bv = $loadz(mask, row.add(v * $lanes));
                    }
                    let col = lhs.add(p * o.lhs_cs + i0 * o.lhs_rs);
                    for (r, acc_r) in acc.iter_mut().enumerate() {
                        // dst(i0 + r, :) = fma(lhs(i0 + r, p), rhs(p, :), dst(i0 + r, :))
                        let a = $set1(*col.add(r * o.lhs_rs));
                        for (x, &bv) in acc_r.iter_mut().zip(&b) {
                            *x = $fmadd(a, bv, *x);
                        }
                    }
                }
                fin.tile(i0, j0, last, &acc);
            }

            /// Stores a tile as it is.
            impl Finish<$v, $mask> for Plain<$t> {
                #[inline(always)]
                unsafe fn tile<const R: usize, const V: usize>(
                    &mut self,
                    i0: usize,
                    j0: usize,
                    last: $mask,
                    acc: &[[$v; V]; R],
                ) {
                    for (r, acc_r) in acc.iter().enumerate() {
                        for (v, &x) in acc_r.iter().enumerate() {
                            let mask = if v + 1 == V { last } else { <$mask>::MAX };
                            $store(self.dst.add((i0 + r) * self.rs + j0 + v * $lanes), mask, x);
                        }
                    }
                }
            }

            /// Stores the tile to `P`, then `(P + b) s + c` to `H`; the rows' activation
            /// once every column of them is written.
            impl<M: RowMap<$t>> Finish<$v, $mask> for Primal<'_, $t, M> {
                #[inline(always)]
                unsafe fn tile<const R: usize, const V: usize>(
                    &mut self,
                    i0: usize,
                    j0: usize,
                    last: $mask,
                    acc: &[[$v; V]; R],
                ) {
                    for (r, acc_r) in acc.iter().enumerate() {
                        for (v, &x) in acc_r.iter().enumerate() {
                            let mask = if v + 1 == V { last } else { <$mask>::MAX };
                            let (at, j) = ((i0 + r) * self.rs + j0 + v * $lanes, j0 + v * $lanes);
                            if !self.p.is_null() {
                                $store(self.p.add(at), mask, x);
                            }
                            // u = (p + b) s + c, each operation rounded on its own
                            let u = $add(
                                $mul(
                                    $add(x, $loadz(mask, self.b.add(j))),
                                    $loadz(mask, self.s.add(j)),
                                ),
                                $loadz(mask, self.c.add(j)),
                            );
                            $store(self.h.add(at), mask, u);
                        }
                    }
                }
                #[inline(always)]
                unsafe fn rows(&mut self, i0: usize, rows: usize) {
                    for i in i0..i0 + rows {
                        self.map.apply(std::slice::from_raw_parts_mut(
                            self.h.add(i * self.rs),
                            self.width,
                        ));
                    }
                }
            }

            /// Stores the tile to `P`, then `(1 - h'^2) (P s)` to `H`, `h'` the activated
            /// primal row of the same sample.
            impl Finish<$v, $mask> for Tangent<$t> {
                #[inline(always)]
                unsafe fn tile<const R: usize, const V: usize>(
                    &mut self,
                    i0: usize,
                    j0: usize,
                    last: $mask,
                    acc: &[[$v; V]; R],
                ) {
                    let one = $set1(1.0);
                    for (r, acc_r) in acc.iter().enumerate() {
                        let hp = self.h_primal.add(((i0 + r) % self.n) * self.rs);
                        for (v, &x) in acc_r.iter().enumerate() {
                            let mask = if v + 1 == V { last } else { <$mask>::MAX };
                            let (at, j) = ((i0 + r) * self.rs + j0 + v * $lanes, j0 + v * $lanes);
                            if !self.p.is_null() {
                                $store(self.p.add(at), mask, x);
                            }
                            let h = $loadz(mask, hp.add(j));
                            // (1 - h'^2) (p s), each operation rounded on its own
                            let y =
                                $mul($sub(one, $mul(h, h)), $mul(x, $loadz(mask, self.s.add(j))));
                            $store(self.h.add(at), mask, y);
                        }
                    }
                }
            }

            /// [`OuterProduct`] by tiles of [`ROWS`] rows and [`VECS`] vectors (the last row
            /// and vector tiles narrower; the last vector of a row under a mask).
            ///
            /// # Safety
            /// The CPU must have AVX-512 F; every element the strides reach is in bounds.
            #[target_feature(enable = "avx512f")]
            pub(super) unsafe fn $name(o: OuterProduct<'_, $t>) {
                let mut fin = Plain {
                    dst: o.dst.as_ptr().cast_mut(),
                    rs: o.dst_rs,
                };
                $drive(&o, &mut fin)
            }

            /// The tiles of [`OuterProduct`] (its destination unused), each handed to `fin`,
            /// and `fin.rows` after each band of rows.
            ///
            /// # Safety
            /// As for the plain form; `fin` writes only where it was built to.
            #[target_feature(enable = "avx512f")]
            pub(super) unsafe fn $drive<F: Finish<$v, $mask>>(
                o: &OuterProduct<'_, $t>,
                fin: &mut F,
            ) {
                let (m, n) = (o.m, o.n);
                let vecs = n.div_ceil($lanes);
                let tail = n - (vecs - 1) * $lanes;
                let tail: $mask = if tail == $lanes {
                    <$mask>::MAX
                } else {
                    (1 << tail) - 1
                };
                let mut i0 = 0;
                while i0 < m {
                    let rows = (m - i0).min(ROWS);
                    let mut v0 = 0;
                    while v0 < vecs {
                        let v = (vecs - v0).min(VECS);
                        let last = if v0 + v == vecs { tail } else { <$mask>::MAX };
                        let j0 = v0 * $lanes;
                        macro_rules! go {
                            ($r:literal) => {
                                match v {
                                    1 => $tile::<$r, 1, F>(o, fin, i0, j0, last),
                                    2 => $tile::<$r, 2, F>(o, fin, i0, j0, last),
                                    3 => $tile::<$r, 3, F>(o, fin, i0, j0, last),
                                    _ => $tile::<$r, 4, F>(o, fin, i0, j0, last),
                                }
                            };
                        }
                        match rows {
                            1 => go!(1),
                            2 => go!(2),
                            3 => go!(3),
                            4 => go!(4),
                            5 => go!(5),
                            _ => go!(6),
                        }
                        v0 += v;
                    }
                    fin.rows(i0, rows);
                    i0 += rows;
                }
            }
        };
    }

    outer_kernel!(
        outer_f32,
        drive_f32,
        tile_f32,
        f32,
        __m512,
        __mmask16,
        16,
        _mm512_setzero_ps,
        _mm512_set1_ps,
        _mm512_maskz_loadu_ps,
        _mm512_fmadd_ps,
        _mm512_mask_storeu_ps,
        _mm512_add_ps,
        _mm512_mul_ps,
        _mm512_sub_ps
    );
    outer_kernel!(
        outer_f64,
        drive_f64,
        tile_f64,
        f64,
        __m512d,
        __mmask8,
        8,
        _mm512_setzero_pd,
        _mm512_set1_pd,
        _mm512_maskz_loadu_pd,
        _mm512_fmadd_pd,
        _mm512_mask_storeu_pd,
        _mm512_add_pd,
        _mm512_mul_pd,
        _mm512_sub_pd
    );
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
    /// `rhs` as `k` contiguous rows of `n`, held by value: the compiler then knows that it cannot
    /// overlap the output, and vectorises the first (store-only) pass too.
    rows: [A; SHALLOW_DEPTH * GEMM_SMALL_SIDE],
}

impl<A: Real> Kernel for ShallowRows<'_, '_, '_, A> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (n, lhs) = (self.n, self.lhs);
        let (r0, r1) = self.rows.split_at(n);
        let (r0, r1) = (&r0[..n], &r1[..n]);
        for i in 0..self.m {
            let out = self.out.row(i, n);
            let at = |q: usize| lhs.data[lhs.offset + i * lhs.rs + q * lhs.cs];
            let a0 = at(0);
            if self.k == 1 {
                for (o, &x0) in out.iter_mut().zip(r0) {
                    *o = a0 * x0;
                }
            } else {
                // one pass: the depth-1 term's product rounded, added to the rounded depth-0 one
                let a1 = at(1);
                for ((o, &x0), &x1) in out.iter_mut().zip(r0).zip(r1) {
                    *o = a1 * x1 + a0 * x0;
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

    /// Every value's bits, with every NaN as one pattern: Rust leaves the sign and payload of a
    /// NaN made by arithmetic unspecified (the compiler may swap the operands of an addition,
    /// and x86 returns the first operand's NaN when both are NaN), so two compiled forms of the
    /// same sums may differ there and nowhere else.
    fn bits<A: Real>(v: &[A]) -> Vec<u64> {
        v.iter()
            .map(|x| {
                let x = x.as_f64();
                if x.is_nan() {
                    f64::NAN.to_bits()
                } else {
                    x.to_bits()
                }
            })
            .collect()
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
    fn check_splits<A: Real>(
        kernel: GemmKernel,
        m: usize,
        n: usize,
        k: usize,
        transposed_rhs: bool,
    ) {
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
        gemm_into_on(
            kernel,
            Product {
                m,
                n,
                k,
                lhs: lhs(0),
                rhs,
            },
            Dest {
                data: &mut whole,
                offset: 0,
                rs: n,
            },
        );
        // any row block is reduced exactly as in the whole product
        let b = min_block_rows(n);
        for r0 in [b, 17, m / 3, m / 2, m - b] {
            let mut split = vec![A::default(); m * n];
            gemm_into_on(
                kernel,
                Product {
                    m: r0,
                    n,
                    k,
                    lhs: lhs(0),
                    rhs,
                },
                Dest {
                    data: &mut split,
                    offset: 0,
                    rs: n,
                },
            );
            gemm_into_on(
                kernel,
                Product {
                    m: m - r0,
                    n,
                    k,
                    lhs: lhs(r0 * k),
                    rhs,
                },
                Dest {
                    data: &mut split,
                    offset: r0 * n,
                    rs: n,
                },
            );
            assert_eq!(
                bits(&split),
                bits(&whole),
                "{kernel:?} {m}x{n}x{k} split at {r0}"
            );
        }
        for threads in 1..=4 {
            let mut pool = Pool::new(threads);
            let mut pooled = vec![A::default(); m * n];
            gemm_into_pooled(
                &mut pool,
                kernel,
                Product {
                    m,
                    n,
                    k,
                    lhs: lhs(0),
                    rhs,
                },
                Dest {
                    data: &mut pooled,
                    offset: 0,
                    rs: n,
                },
            );
            assert_eq!(
                bits(&pooled),
                bits(&whole),
                "{kernel:?} {m}x{n}x{k} on {threads} threads"
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
        gemm_into(
            Product { m, n, k, lhs, rhs },
            Dest {
                data: &mut fast,
                offset: 0,
                rs: dst_rs,
            },
        );
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
                GemmKernel::Dfdx,
                1,
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
    #[should_panic(expected = "gemm_into: lhs")]
    fn strides_whose_extent_wraps_around_are_out_of_bounds_not_a_small_extent() {
        // 3 rs = 2^64 + 2 wraps to 2, inside a 5-element slice, if the check wraps too
        let rs = usize::MAX / 3 + 1;
        let (l, r) = ([1.0f32; 5], [1.0f32; 6]);
        let mut dst = [0.0f32; 8];
        let lhs = Operand {
            data: &l[..],
            offset: 0,
            rs,
            cs: 1,
        };
        let rhs = Operand {
            data: &r[..],
            offset: 0,
            rs: 2,
            cs: 1,
        };
        gemm_into(
            Product {
                m: 4,
                n: 2,
                k: 3,
                lhs,
                rhs,
            },
            Dest {
                data: &mut dst,
                offset: 0,
                rs: 2,
            },
        );
    }

    #[test]
    fn outer_products_of_tall_and_deep_shapes_are_bit_identical_to_the_gemm_call() {
        // the register-tiled sum of outer products (`SmallProduct::outer`) up to its depth limit
        // and over many rows, with row tails of every length mod 6 and partial last vectors
        for (m, n, k) in [
            (1000, 64, 64),
            (500, 64, 128),
            (130, 64, 500),
            (64, 64, OUTER_MAX_DEPTH),
            (2, 64, OUTER_MAX_DEPTH),
            (301, 33, 200),
            (383, 48, 64),
            (201, 17, 64),
            (7, 9, 511),
        ] {
            for (lr, rt) in [(true, false), (false, false)] {
                check_against_gemm::<f32>(m, n, k, lr, rt);
                check_against_gemm::<f64>(m, n, k, lr, rt);
            }
        }
    }

    /// A stand-in activation for the tests: odd, bounded, cheap, and not `tanh`, so that a
    /// fused form that skipped it or ran it twice would show.
    struct Squash;
    impl<A: Real> RowMap<A> for Squash {
        #[inline(always)]
        fn apply(&self, row: &mut [A]) {
            for x in row.iter_mut() {
                *x /= A::one() + x.abs();
            }
        }
    }

    /// [`hidden_layer_into`] against [`gemm_into`] followed by the element-wise loops it
    /// stands for, on `n` samples with `k` tangent blocks, `inp -> out`.
    fn check_hidden_layer<A: Real>(n: usize, k: usize, inp: usize, out: usize) {
        let rows = (1 + k) * n;
        let mut h_in: Vec<A> = data(rows * inp, 0.37);
        // a NaN in the last tangent row (so that it poisons only that row) and a signed zero
        if rows >= 4 {
            h_in[rows * inp - 1] = A::of_f64(f64::NAN);
            h_in[1] = A::of_f64(-0.0);
        }
        let wt: Vec<A> = data(inp * out, 0.91);
        let (b, s, c): (Vec<A>, Vec<A>, Vec<A>) = (data(out, 1.3), data(out, 0.7), data(out, 2.9));
        // the composed form
        let mut p0 = vec![A::zero(); rows * out];
        gemm_into(
            Product {
                m: rows,
                n: out,
                k: inp,
                lhs: Operand {
                    data: &h_in,
                    offset: 0,
                    rs: inp,
                    cs: 1,
                },
                rhs: Operand {
                    data: &wt,
                    offset: 0,
                    rs: out,
                    cs: 1,
                },
            },
            Dest {
                data: &mut p0,
                offset: 0,
                rs: out,
            },
        );
        let mut h0 = vec![A::zero(); rows * out];
        for i in 0..n {
            for j in 0..out {
                h0[i * out + j] = (p0[i * out + j] + b[j]) * s[j] + c[j];
            }
            Squash.apply(&mut h0[i * out..(i + 1) * out]);
        }
        for r in n..rows {
            for j in 0..out {
                let h = h0[(r % n) * out + j];
                h0[r * out + j] = (A::one() - h * h) * (p0[r * out + j] * s[j]);
            }
        }
        // the fused form, into buffers holding NaN and one more row than it may write
        let nan = A::of_f64(f64::NAN);
        let (mut p1, mut h1) = (vec![nan; (rows + 1) * out], vec![nan; (rows + 1) * out]);
        let fused = hidden_layer_into(
            HiddenLayer {
                n,
                rows,
                inp,
                out,
                h_in: &h_in,
                wt: &wt,
                b: &b,
                s: &s,
                c: &c,
                p: Some(&mut p1),
                h_out: &mut h1,
            },
            &Squash,
        );
        let avx512 = cfg!(target_arch = "x86_64") && super::super::Simd::Avx512.is_available();
        if !fused {
            assert!(
                !avx512,
                "{n} x {k} x {inp} -> {out}: the fused form declined"
            );
            return;
        }
        let shape = format!("{n} samples, {k} tangents, {inp} -> {out}");
        assert_eq!(bits(&p1[..rows * out]), bits(&p0), "P, {shape}");
        assert_eq!(bits(&h1[..rows * out]), bits(&h0), "H, {shape}");
        assert!(
            p1[rows * out..]
                .iter()
                .chain(&h1[rows * out..])
                .all(|x| x.as_f64().is_nan()),
            "{shape}"
        );
        // without `P`: the same `H`
        let mut h2 = vec![nan; rows * out];
        let l = HiddenLayer {
            n,
            rows,
            inp,
            out,
            h_in: &h_in,
            wt: &wt,
            b: &b,
            s: &s,
            c: &c,
            p: None,
            h_out: &mut h2,
        };
        assert!(hidden_layer_into(l, &Squash));
        assert_eq!(bits(&h2), bits(&h0), "H without P, {shape}");
    }

    #[test]
    fn a_hidden_layer_fused_into_its_product_has_the_bits_of_the_product_then_the_loops() {
        // tiles of 6 rows over primal blocks of every length mod 6 (the tangent rows of the
        // smallest ones reading primal rows of the same tile), full and partial vectors
        for (n, k, inp, out) in [
            (1, 1, 3, 2),
            (1, 2, 5, 7),
            (2, 2, 64, 64),
            (3, 1, 8, 9),
            (5, 2, 17, 16),
            (7, 2, 64, 33),
            (125, 2, 64, 64),
            (128, 1, 64, 64),
            (41, 3, 30, 48),
        ] {
            check_hidden_layer::<f32>(n, k, inp, out);
            check_hidden_layer::<f64>(n, k, inp, out);
        }
    }

    #[test]
    fn a_hidden_layer_outside_the_register_path_is_left_to_the_caller() {
        for (n, k, inp, out) in [(4, 2, 2, 64), (4, 2, 64, 65), (1, 0, 64, 64)] {
            let rows = (1 + k) * n;
            let (h, wt, v) = (
                vec![1.0f64; rows * inp],
                vec![1.0; inp * out],
                vec![1.0; out],
            );
            let (mut p, mut ho) = (vec![-7.0; rows * out], vec![-7.0; rows * out]);
            let l = HiddenLayer {
                n,
                rows,
                inp,
                out,
                h_in: &h,
                wt: &wt,
                b: &v,
                s: &v,
                c: &v,
                p: Some(&mut p),
                h_out: &mut ho,
            };
            assert!(!hidden_layer_into(l, &Squash), "{n} {k} {inp} {out}");
            assert!(p.iter().chain(&ho).all(|&x| x == -7.0));
        }
    }

    #[test]
    fn row_blocks_of_a_product_are_bit_identical_to_the_whole_whatever_the_thread_count_on_either_kernel(
    ) {
        // wide enough for gemm's general path (n > GEMM_SMALL_SIDE); the larger shapes reach
        // GEMM_PARALLEL_MIN, so the pooled form really splits; k > 512 crosses a depth chunk
        for (m, n, k) in [
            (130, 90, 70),
            (256, 256, 256),
            (300, 200, 1100),
            (512, 512, 512),
        ] {
            for kernel in [GemmKernel::Dfdx, GemmKernel::Widest] {
                check_splits::<f32>(kernel, m, n, k, false);
                check_splits::<f32>(kernel, m, n, k, true);
                check_splits::<f64>(kernel, m, n, k, false);
                check_splits::<f64>(kernel, m, n, k, true);
            }
        }
    }
}
