//! The element-wise and transposing passes between the products of a planned Newton–Schulz
//! iteration ([`super::NsPlan`]), walked in square blocks and shared across the plan's threads.
//!
//! Three passes per iteration:
//!
//! ```text
//! update_transpose:  X <- a X + Y (skipped on the first iteration);  XT <- X^T
//! mirror_scale:      A[j,i] <- A[i,j] (i < j);                      CA <- c A
//! mirror_combine:    B[i,j] <- b A[i,j] + B[i,j] (i <= j);          B[j,i] <- B[i,j]
//! ```
//!
//! The first is one sweep over `X`, its strips shared across the plan's threads. The last two
//! complete the symmetric products, and the plan runs them tile by tile (`mirror_scale_tile`,
//! `mirror_combine_tile`) on the thread that has just computed a tile of the product, while the
//! tile is in that thread's cache; [`mirror_scale`] and [`mirror_combine`] are the same passes
//! over the whole matrix, on the calling thread. As sweeps over the whole matrix after each
//! product, shared across two cores, they had been where the host's slow phases hit hardest (on
//! two threads they then ran no faster than on one); tile by tile, `1024^2` in f32 went from
//! 166-188 to 168-180 ms (`bench muon`, the two builds alternated five times).
//!
//! A row-major transpose written element by element reads (or writes) one element per cache
//! line, and at the usual power-of-two strides (4 KiB for a 1024-wide f32 matrix) all those
//! lines fall in one cache set and evict each other: 3.2 ms for a 1024^2 f32 matrix on the
//! measuring machine. Here every [`BLOCK`]` x `[`BLOCK`] block is read as whole row segments
//! into a small buffer and written back as whole row segments of the other side, so each cache
//! line is touched once (0.45 ms on one thread).
//!
//! Each element is computed by the same expression whichever block, tile or thread reaches it
//! (the mirrored one is a copy, and `A[i,j] == A[j,i]` exactly, so `c A` is symmetric too), so
//! the results are bit-identical for every thread count and tiling, and to the plain loops they
//! replace.
//!
//! # References
//! - `docs/ALGORITHMS.md` §3 (the iteration); the cache-set argument is the usual one for
//!   power-of-two strides (Intel and AMD optimisation manuals, "cache aliasing").

use crate::backend::Real;
use crate::backend::Tile;
use crate::pool::{PartsPtr, Pool};

/// Side of the square blocks the passes walk (a block of f64 fills 8 KiB of stack).
pub const BLOCK: usize = 32;

/// Run `block(b)` for `b` in `0..count` on the pool, part `p` taking `p, p + threads, ...`.
fn dealt(pool: &mut Pool, count: usize, block: &(dyn Fn(usize) + Sync)) {
    let threads = pool.threads();
    if threads == 1 || count < 2 {
        (0..count).for_each(block);
        return;
    }
    pool.run(&|p| (p..count).step_by(threads).for_each(block));
}

/// `X <- a X + Y` element by element (`x * a + y`), for `x` and `y` of one length.
fn axpy_rows<A: Real>(x: &mut [A], y: &[A], a: A) {
    for (v, &w) in x.iter_mut().zip(y) {
        *v = *v * a + w;
    }
}

/// `X <- a X + Y` when `y` is given (element by element, `x * a + y`), then `XT <- X^T`, for a
/// row-major `m x n` `X` and `n x m` `XT`. Parts take [`BLOCK`]-row strips of `X`: they write
/// those rows of `X` (updated first, so that the transpose reads them from cache) and the same
/// columns of `XT`, disjoint from every other strip's.
///
/// ```
/// use harness_reference::optim::muon::ns_passes::update_transpose;
/// use harness_reference::pool::Pool;
/// let (mut x, y, mut xt) = (vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], vec![1.0f32; 6], vec![0.0; 6]);
/// update_transpose(&mut Pool::new(2), &mut x, Some((&y, 2.0)), &mut xt, 2, 3);
/// assert_eq!(x, [3.0, 5.0, 7.0, 9.0, 11.0, 13.0]);
/// assert_eq!(xt, [3.0, 9.0, 5.0, 11.0, 7.0, 13.0]);
/// ```
pub fn update_transpose<A: Real>(
    pool: &mut Pool,
    x: &mut [A],
    y: Option<(&[A], A)>,
    xt: &mut [A],
    m: usize,
    n: usize,
) {
    assert!(
        x.len() == m * n && xt.len() == m * n,
        "update_transpose: sizes"
    );
    if let Some((y, _)) = y {
        assert_eq!(y.len(), m * n, "update_transpose: Y's size");
    }
    let (xs, ts) = (
        PartsPtr::new(x.as_mut_ptr()),
        PartsPtr::new(xt.as_mut_ptr()),
    );
    let strip = |s: usize| {
        let r0 = s * BLOCK;
        let rows = BLOCK.min(m - r0);
        // SAFETY: rows r0..r0+rows of X belong to this strip alone.
        let xr = unsafe { xs.slice(r0 * n, rows * n) };
        if let Some((y, a)) = y {
            axpy_rows(xr, &y[r0 * n..(r0 + rows) * n], a);
        }
        let mut buf = [[A::default(); BLOCK]; BLOCK];
        for c0 in (0..n).step_by(BLOCK) {
            let cols = BLOCK.min(n - c0);
            for (i, row) in buf.iter_mut().enumerate().take(rows) {
                row[..cols].copy_from_slice(&xr[i * n + c0..i * n + c0 + cols]);
            }
            for j in 0..cols {
                // SAFETY: columns r0..r0+rows of XT's row c0 + j belong to this strip alone.
                let out = unsafe { ts.slice((c0 + j) * m + r0, rows) };
                for (o, row) in out.iter_mut().zip(&buf) {
                    *o = row[j];
                }
            }
        }
    };
    dealt(pool, m.div_ceil(BLOCK), &strip);
}

/// `X <- a X + Y`, element by element (`x * a + y`), in [`BLOCK`]-row strips of width `n`.
///
/// ```
/// use harness_reference::optim::muon::ns_passes::update;
/// let mut x = vec![1.0f64, 2.0];
/// update(&mut harness_reference::pool::Pool::new(1), &mut x, &[0.5, 0.5], 3.0, 2);
/// assert_eq!(x, [3.5, 6.5]);
/// ```
pub fn update<A: Real>(pool: &mut Pool, x: &mut [A], y: &[A], a: A, n: usize) {
    assert_eq!(x.len(), y.len(), "update: sizes");
    let len = x.len();
    let step = BLOCK * n.max(1);
    let xs = PartsPtr::new(x.as_mut_ptr());
    let strip = |s: usize| {
        let (k0, k1) = (s * step, ((s + 1) * step).min(len));
        // SAFETY: elements k0..k1 belong to this strip alone.
        axpy_rows(unsafe { xs.slice(k0, k1 - k0) }, &y[k0..k1], a);
    };
    dealt(pool, len.div_ceil(step), &strip);
}

/// Complete the part of a symmetric `m x m` matrix (at `sv`) whose upper triangle is computed
/// that lies in the block of `rows x cols` (at most [`BLOCK`] each) at `(r0, c0)`: a diagonal
/// block (`r0 == c0`, square) or one wholly above the diagonal (`r0 + rows <= c0`), together
/// with its mirror image below. `row(i, c0, seg)` first turns the upper row segment
/// `seg = s[i, c0..c0 + seg.len()]` into its final values in place (elements left of the
/// diagonal included on diagonal blocks, where they are overwritten next), then `emit(i, j0, v)`
/// receives every final row segment `v` of an upper element run `(i, j0..)`, `i <= j0`, and
/// every mirrored one, which the pass has already stored in `s` (so an `emit` that only
/// completes `s` does nothing). Off-diagonal blocks are buffered so that the mirrored block is
/// written in whole row segments.
///
/// # Safety
/// The block and its mirror lie in the matrix, and no other thread touches them meanwhile.
unsafe fn complete_block<A: Real>(
    sv: PartsPtr<A>,
    m: usize,
    (r0, c0, rows, cols): (usize, usize, usize, usize),
    row: &impl Fn(usize, usize, &mut [A]),
    emit: &impl Fn(usize, usize, &[A]),
) {
    if r0 == c0 {
        for i in 0..rows {
            // the diagonal block's row i from the diagonal on
            let seg = sv.slice((r0 + i) * m + c0 + i, cols - i);
            row(r0 + i, c0 + i, seg);
            emit(r0 + i, c0 + i, seg);
            for (j, &v) in seg.iter().enumerate().skip(1) {
                // (c0+i+j, r0+i) lies in the same diagonal block, below it
                let low = sv.slice((c0 + i + j) * m + r0 + i, 1);
                low[0] = v;
                emit(c0 + i + j, r0 + i, low);
            }
        }
        return;
    }
    let mut buf = [[A::default(); BLOCK]; BLOCK];
    for (i, b) in buf.iter_mut().enumerate().take(rows) {
        let seg = sv.slice((r0 + i) * m + c0, cols);
        row(r0 + i, c0, seg);
        emit(r0 + i, c0, seg);
        b[..cols].copy_from_slice(seg);
    }
    for j in 0..cols {
        // the mirrored block's row j
        let out = sv.slice((c0 + j) * m + r0, rows);
        for (o, b) in out.iter_mut().zip(&buf) {
            *o = b[j];
        }
        emit(c0 + j, r0, out);
    }
}

/// Complete the part of a symmetric matrix whose upper triangle is computed that lies in one
/// tile of that triangle (a square on the diagonal or a rectangle above it, as
/// [`super::newton_schulz::symmetric_tiles`] makes them; the whole matrix is the square tile
/// `0..m`), with its mirror image, in blocks of at most [`BLOCK`] from the tile's corner
/// ([`complete_block`]), on the calling thread. A block's values do not depend on the tiling, so
/// the plan's threads can each complete a tile they have just computed, while it is in their
/// cache, with the values of one sweep over the whole matrix.
///
/// # Safety
/// The tile lies on or above the diagonal of the matrix at `sv`, and no other thread touches
/// it or its mirror image meanwhile.
unsafe fn complete_tile<A: Real>(
    sv: PartsPtr<A>,
    m: usize,
    t: &Tile,
    row: &impl Fn(usize, usize, &mut [A]),
    emit: &impl Fn(usize, usize, &[A]),
) {
    let diagonal = t.r0 == t.c0;
    for r0 in (t.r0..t.r1).step_by(BLOCK) {
        let rows = BLOCK.min(t.r1 - r0);
        // on a diagonal tile, the blocks from the diagonal on
        let first = if diagonal { r0 } else { t.c0 };
        for c0 in (first..t.c1).step_by(BLOCK) {
            let cols = BLOCK.min(t.c1 - c0);
            complete_block(sv, m, (r0, c0, rows, cols), row, emit);
        }
    }
}

/// `CA <- c A` (`a * c` per element) for the segment `seg` of `A` at `(i, j0)`.
fn scale_into<A: Real>(ca: PartsPtr<A>, c: A, m: usize) -> impl Fn(usize, usize, &[A]) {
    move |i: usize, j0: usize, seg: &[A]| {
        // SAFETY: the segment (i, j0..) of CA mirrors one of A that the calling part alone
        // touches.
        let out = unsafe { ca.slice(i * m + j0, seg.len()) };
        for (o, &v) in out.iter_mut().zip(seg) {
            *o = v * c;
        }
    }
}

/// `B <- b A + B` (`a * b + b_ij` per element) on the segment `seg` of `B` at `(i, j0)`.
fn combine_with<A: Real>(a: &[A], b: A, m: usize) -> impl Fn(usize, usize, &mut [A]) + '_ {
    move |i: usize, j0: usize, seg: &mut [A]| {
        for (v, &w) in seg.iter_mut().zip(&a[i * m + j0..]) {
            *v = w * b + *v;
        }
    }
}

/// `A` (`m x m`, its upper triangle computed) made symmetric by mirroring, and `CA <- c A`
/// (`a * c` per element).
///
/// ```
/// use harness_reference::optim::muon::ns_passes::mirror_scale;
/// let mut a = vec![1.0f32, 2.0, f32::NAN, 3.0]; // the lower triangle is not read
/// let mut ca = vec![0.0; 4];
/// mirror_scale(&mut a, &mut ca, 2.0, 2);
/// assert_eq!((a, ca), (vec![1.0, 2.0, 2.0, 3.0], vec![2.0, 4.0, 4.0, 6.0]));
/// ```
pub fn mirror_scale<A: Real>(a: &mut [A], ca: &mut [A], c: A, m: usize) {
    assert!(a.len() == m * m && ca.len() == m * m, "mirror_scale: sizes");
    let (av, cv) = (
        PartsPtr::new(a.as_mut_ptr()),
        PartsPtr::new(ca.as_mut_ptr()),
    );
    // SAFETY: both hold m x m elements, borrowed mutably here for the whole call
    unsafe { mirror_scale_tile(av, cv, c, m, &whole(m)) };
}

/// [`mirror_scale`] over one tile of the upper triangle of `A` (at `a`) and its mirror image,
/// on the calling thread, with `CA` at `ca`.
///
/// # Safety
/// `a` and `ca` hold `m x m` matrices; the tile lies on or above the diagonal, and no other
/// thread touches it, its mirror image or the same elements of `CA` meanwhile.
pub(crate) unsafe fn mirror_scale_tile<A: Real>(
    a: PartsPtr<A>,
    ca: PartsPtr<A>,
    c: A,
    m: usize,
    t: &Tile,
) {
    complete_tile(a, m, t, &|_, _, _: &mut [A]| {}, &scale_into(ca, c, m));
}

/// `B <- b A + B` on the upper triangle (`a * b + b_ij` per element), then mirrored, for a
/// symmetric `A` and a `B` (`m x m`) whose upper triangle was computed.
///
/// ```
/// use harness_reference::optim::muon::ns_passes::mirror_combine;
/// let a = [1.0f64, 2.0, 2.0, 3.0];
/// let mut b = vec![10.0, 20.0, f64::NAN, 30.0]; // the lower triangle is not read
/// mirror_combine(&mut b, &a, 2.0, 2);
/// assert_eq!(b, [12.0, 24.0, 24.0, 36.0]);
/// ```
pub fn mirror_combine<A: Real>(bm: &mut [A], a: &[A], b: A, m: usize) {
    assert_eq!(bm.len(), m * m, "mirror_combine: B's size");
    // SAFETY: B holds m x m elements, borrowed mutably here for the whole call
    unsafe { mirror_combine_tile(PartsPtr::new(bm.as_mut_ptr()), a, b, m, &whole(m)) };
}

/// The whole `m x m` matrix as one diagonal tile.
fn whole(m: usize) -> Tile {
    Tile {
        r0: 0,
        r1: m,
        c0: 0,
        c1: m,
    }
}

/// [`mirror_combine`] over one tile of the upper triangle of `B` (at `bm`) and its mirror
/// image, on the calling thread.
///
/// # Safety
/// `bm` holds an `m x m` matrix and `a` is `m x m`; the tile lies on or above the diagonal, and
/// no other thread touches it or its mirror image meanwhile.
pub(crate) unsafe fn mirror_combine_tile<A: Real>(
    bm: PartsPtr<A>,
    a: &[A],
    b: A,
    m: usize,
    t: &Tile,
) {
    assert_eq!(a.len(), m * m, "mirror_combine_tile: A's size");
    complete_tile(bm, m, t, &combine_with(a, b, m), &|_, _, _: &[A]| {});
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| ((i as u32).wrapping_mul(2654435761) ^ seed) as f32 * 1e-9)
            .collect()
    }

    /// Upper triangle of a symmetric matrix, lower filled with noise.
    fn upper_only(m: usize, seed: u32) -> Vec<f32> {
        let mut a = data(m * m, seed);
        for i in 0..m {
            for j in 0..i {
                a[i * m + j] = a[j * m + i];
            }
        }
        a
    }

    #[test]
    fn tile_by_tile_passes_equal_the_whole_matrix_passes_bit_for_bit() {
        use crate::optim::muon::newton_schulz::symmetric_tiles;
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        // sides below, at and across block edges; leaves that cut tiles off the block grid
        for m in [1, 5, 32, 33, 70, 100] {
            for leaf in [1, 7, 16, 64] {
                let (b, c) = (-4.775f32, 2.0315f32);
                let sym = upper_only(m, 3);
                let mut a_in = sym.clone();
                for i in 0..m {
                    for j in 0..i {
                        a_in[i * m + j] = f32::NAN; // neither form may read the lower triangle
                    }
                }
                let braw = data(m * m, 4);
                let (mut want_a, mut want_ca) = (a_in.clone(), vec![0.0; m * m]);
                mirror_scale(&mut want_a, &mut want_ca, c, m);
                let mut want_b = braw.clone();
                mirror_combine(&mut want_b, &sym, b, m);
                let (mut a, mut ca, mut bm) = (a_in.clone(), vec![f32::NAN; m * m], braw.clone());
                // tiles in reverse order: a tile's pass must not depend on the others'
                for t in symmetric_tiles(m, leaf).iter().rev() {
                    let (av, cv) = (
                        PartsPtr::new(a.as_mut_ptr()),
                        PartsPtr::new(ca.as_mut_ptr()),
                    );
                    // SAFETY: one thread; the tiles lie on or above the diagonal of m x m
                    unsafe { mirror_scale_tile(av, cv, c, m, t) };
                    let bv = PartsPtr::new(bm.as_mut_ptr());
                    // SAFETY: as above
                    unsafe { mirror_combine_tile(bv, &sym, b, m, t) };
                }
                assert_eq!(bits(&a), bits(&want_a), "{m}, leaf {leaf}: A");
                assert_eq!(bits(&ca), bits(&want_ca), "{m}, leaf {leaf}: cA");
                assert_eq!(bits(&bm), bits(&want_b), "{m}, leaf {leaf}: B");
            }
        }
    }

    #[test]
    fn passes_equal_the_plain_loops_bit_for_bit_the_shared_ones_on_any_thread_count() {
        // sizes below, at and across block edges, and a non-square X
        for (m, n) in [(1, 1), (5, 3), (32, 32), (33, 70), (70, 33), (100, 100)] {
            let (a, b, c) = (3.4445f32, -4.775f32, 2.0315f32);
            let x0 = data(m * n, 1);
            let y = data(m * n, 2);
            // plain loops
            let mut want_x = x0.clone();
            want_x
                .iter_mut()
                .zip(&y)
                .for_each(|(v, &w)| *v = *v * a + w);
            let mut want_xt = vec![0.0; m * n];
            for i in 0..m {
                for j in 0..n {
                    want_xt[j * m + i] = want_x[i * n + j];
                }
            }
            let sym = upper_only(m, 3);
            let mut a_in = sym.clone();
            for i in 0..m {
                for j in 0..i {
                    a_in[i * m + j] = f32::NAN; // the pass must not read the lower triangle
                }
            }
            let want_ca: Vec<f32> = sym.iter().map(|&v| v * c).collect();
            let braw = data(m * m, 4);
            let mut want_b = braw.clone();
            for i in 0..m {
                for j in i..m {
                    want_b[i * m + j] = sym[i * m + j] * b + braw[i * m + j];
                }
            }
            for i in 0..m {
                for j in 0..i {
                    want_b[i * m + j] = want_b[j * m + i];
                }
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for threads in 1..=3 {
                let mut pool = Pool::new(threads);
                let (mut x, mut xt) = (x0.clone(), vec![0.0; m * n]);
                update_transpose(&mut pool, &mut x, Some((&y, a)), &mut xt, m, n);
                assert_eq!(bits(&x), bits(&want_x), "{m}x{n} X, {threads} threads");
                assert_eq!(bits(&xt), bits(&want_xt), "{m}x{n} XT, {threads} threads");
                let mut x2 = x0.clone();
                update(&mut pool, &mut x2, &y, a, n);
                assert_eq!(bits(&x2), bits(&want_x), "{m}x{n} update");
            }
            let (mut am, mut ca) = (a_in.clone(), vec![0.0; m * m]);
            mirror_scale(&mut am, &mut ca, c, m);
            assert_eq!(bits(&am), bits(&sym), "{m} mirrored A");
            assert_eq!(bits(&ca), bits(&want_ca), "{m} cA");
            let mut bm = braw.clone();
            mirror_combine(&mut bm, &sym, b, m);
            assert_eq!(bits(&bm), bits(&want_b), "{m} B");
        }
    }
}
