//! Newton–Schulz orthogonalisation (optax `orthogonalize_via_newton_schulz`, "frobenius").
//!
//! For `X` of shape `(rows, cols)`: if `rows > cols`, work on `X^T` and transpose back (the
//! iteration satisfies `f(X^T) = f(X)^T`, and the small side keeps `A` small). Then
//!
//! ```text
//! X <- X / (||X||_F + eps)
//! per iteration i with (a, b, c) = coeffs[i]:
//!     A = X X^T          B = b A + (c A) A          X <- a X + B X
//! ```
//!
//! Two forms: [`orthogonalize_composed`] transcribes the formulas with dfdx matmuls; [`NsPlan`] is
//! the planned form, built once per matrix shape, which reuses its workspace buffers and exploits
//! the symmetry of `A = X X^T` and of `(cA) A`: it computes only tiles covering their upper
//! triangle ([`symmetric_tiles`], 0.53 of a full product at `m = 1024`) and mirrors them, so
//! both are exactly symmetric; `X^T` is materialised once per iteration so that every product
//! reads row-major operands (gemm 0.15 was measured to pack a transposed right operand more
//! slowly). The products go to `gemm` 0.19 with its AVX-512 kernels
//! ([`crate::backend::GemmKernel::Widest`], [`NsPlan::with_kernel`]): the iteration's bits need
//! not be dfdx's, and on an AVX-512 CPU that release runs them at about twice 0.15's rate. The
//! transposes, mirrors and element-wise steps between the products are fused into three
//! blocked passes per iteration ([`super::ns_passes`]); the two that complete the symmetric
//! products run tile by tile, each on the thread that computed the tile, right after it. After its
//! first call it allocates nothing of its own: the buffers and the tile list are sized once, and
//! the products run on the plan's own parked threads ([`crate::pool::Pool`], started once; one
//! thread for products below [`GEMM_PARALLEL_MIN`]) as single-threaded gemm calls — only gemm's
//! own per-call scratch remains, freed by each call: a few bytes for 0.15, its packed operand
//! panels for 0.19 (measured: 64 KiB a run at `64 x 200`, 768 KiB at `512 x 400`) — whole tiles
//! claimed in list
//! order from a counter for the symmetric products (`backend::gemm_tiles_pooled`; the
//! transpose pass's blocks are dealt round-robin), row blocks for `B X`
//! ([`crate::backend::gemm_into_pooled`]). Neither split changes any element's reduction
//! order, so results are bit-identical for every thread count. Both forms return the number of
//! iterations run, the observable behind the "`(k,3)` runs `k` iterations" law.
//!
//! Non-square transposition is exact (a copy), so `orth(X^T) == orth(X)^T` bit for bit whenever
//! `rows != cols`; for square matrices the two sides are different roundings of the same maths.
//!
//! # References
//! - K. Jordan, *Muon: An optimizer for hidden layers*, 2024 (quintic coefficients).
//! - optax 0.2.8 `optax/contrib/_muon.py`; `docs/ALGORITHMS.md` §3.

use super::{coeffs, ns_passes};
use crate::backend::{
    device, gemm_into_pooled, gemm_tiles_pooled, Array, Dest, GemmKernel, Mat, Operand, Product,
    Real, Tile, GEMM_PARALLEL_MIN,
};
use crate::pool::{PartsPtr, Pool};

/// Split `[rows, cols]` into `(small side m, large side n, transposed)`.
pub fn sides(rows: usize, cols: usize) -> (usize, usize, bool) {
    if rows > cols {
        (cols, rows, true)
    } else {
        (rows, cols, false)
    }
}

/// Composed form: `(orthogonalised X, iterations run)`. `coeffs` are the (already converted)
/// coefficient tensor, `[3]` or `[k,3]`.
pub fn orthogonalize_composed<A: Real>(
    x: &Array<A>,
    coeffs: &Array<f64>,
    ns_steps: usize,
    eps: A,
) -> (Array<A>, usize) {
    let (rows, cols) = (x.shape()[0], x.shape()[1]);
    let (m, n, transposed) = sides(rows, cols);
    let data = if transposed {
        transpose(x.data(), rows, cols)
    } else {
        x.data().to_vec()
    };
    let dev = device();
    let mut x = Mat::from_vec(&dev, m, n, data);
    let norm = x.sum_sq().sqrt();
    x = x / (norm + eps);
    let iters = coeffs::iterations(coeffs, ns_steps);
    for i in 0..iters {
        let [a, b, c] = coeffs::row(coeffs, i).map(A::of_f64);
        let am = x.matmul_t(&x);
        let bm = am.clone() * b + (am.clone() * c).matmul(&am);
        x = x.clone() * a + bm.matmul(&x);
    }
    let out = x.to_vec();
    let out = if transposed {
        transpose(&out, m, n)
    } else {
        out
    };
    (
        Array::new(vec![rows, cols], out).expect("shape preserved"),
        iters,
    )
}

/// Row-major transpose of an `r x c` buffer.
pub fn transpose<A: Copy>(x: &[A], r: usize, c: usize) -> Vec<A> {
    let mut out = Vec::with_capacity(x.len());
    for j in 0..c {
        out.extend((0..r).map(|i| x[i * c + j]));
    }
    out
}

/// Largest diagonal block of the symmetric products computed whole (see [`symmetric_tiles`]).
/// Measured at `m = 1024` (f32, 2 threads, one product of 1024^2 x 1024): 7.9 ms with diagonal
/// blocks of 64, 8.5 ms with 128, 8.7 ms with 32; uniform 128 x 128 tiles of the upper
/// triangle took 8.9 ms, 64 x 64 ones 8.4 ms, against 14.3 ms for the full product.
pub const SYM_BLOCK: usize = 64;

/// Off-diagonal rectangles of the symmetric products taller than this are cut into two row
/// halves, so that two threads share them (see [`symmetric_tiles`]).
pub const SYM_SPLIT: usize = 256;

/// The tiles covering the upper triangle (`i <= j`) of an `m x m` symmetric product, by
/// recursive halving: a diagonal block of side `s > leaf` contributes its off-diagonal
/// rectangle (rows of its first half, columns of its second; two row halves when taller than
/// [`SYM_SPLIT`]) and recurses into its two diagonal halves; a diagonal block of side
/// `s <= leaf` is one tile, computed whole. Tiles come level by level, largest first, so that
/// threads claiming them in order end with similar shares. The covered area is
/// `m^2 / 2 + m s / 2` for diagonal blocks of side `s`, 0.53 of the square at `m = 1024`,
/// `s = 64`; most of it lies in a few large products, which gemm runs near its full-product
/// rate.
///
/// ```
/// use harness_reference::optim::muon::newton_schulz::symmetric_tiles;
/// let tiles = symmetric_tiles(8, 2);
/// // the off-diagonal 4 x 4 block first, then two 2 x 2 blocks, then four diagonal 2 x 2 blocks
/// assert_eq!((tiles[0].r0, tiles[0].r1, tiles[0].c0, tiles[0].c1), (0, 4, 4, 8));
/// assert_eq!(tiles.len(), 1 + 2 + 4);
/// let area: usize = tiles.iter().map(|t| (t.r1 - t.r0) * (t.c1 - t.c0)).sum();
/// assert_eq!(area, 8 * 8 / 2 + 8 * 2 / 2);
/// ```
pub fn symmetric_tiles(m: usize, leaf: usize) -> Vec<Tile> {
    fn walk(r0: usize, side: usize, leaf: usize, depth: usize, levels: &mut Vec<Vec<Tile>>) {
        if side == 0 {
            return;
        }
        if levels.len() <= depth {
            levels.push(Vec::new());
        }
        if side <= leaf {
            levels[depth].push(Tile {
                r0,
                r1: r0 + side,
                c0: r0,
                c1: r0 + side,
            });
            return;
        }
        let half = side / 2;
        let (c0, c1) = (r0 + half, r0 + side);
        let cuts: &[(usize, usize)] = if half > SYM_SPLIT {
            &[(0, half / 2), (half / 2, half)]
        } else {
            &[(0, half)]
        };
        for &(a, b) in cuts {
            levels[depth].push(Tile {
                r0: r0 + a,
                r1: r0 + b,
                c0,
                c1,
            });
        }
        walk(r0, half, leaf, depth + 1, levels);
        walk(r0 + half, side - half, leaf, depth + 1, levels);
    }
    let mut levels = Vec::new();
    walk(0, m, leaf.max(1), 0, &mut levels);
    levels.concat()
}

/// Fraction of a full `m x m` product that one symmetric product computes
/// ([`symmetric_tiles`] with [`SYM_BLOCK`]): the tiles' area over `m^2`.
///
/// ```
/// use harness_reference::optim::muon::newton_schulz::symmetric_fraction;
/// assert_eq!(symmetric_fraction(1024), 0.5 + 32.0 / 1024.0);
/// ```
pub fn symmetric_fraction(m: usize) -> f64 {
    let area: usize = symmetric_tiles(m, SYM_BLOCK)
        .iter()
        .map(|t| (t.r1 - t.r0) * (t.c1 - t.c0))
        .sum();
    area as f64 / (m.max(1) * m.max(1)) as f64
}

/// Threads for an `m x n` plan (small side `m`): the machine's parallelism when its products
/// (`m x m x n` multiply-adds) reach [`GEMM_PARALLEL_MIN`], else 1 (no thread started).
fn default_threads(m: usize, n: usize) -> usize {
    if m.saturating_mul(m).saturating_mul(n) >= GEMM_PARALLEL_MIN {
        std::thread::available_parallelism().map_or(1, |t| t.get())
    } else {
        1
    }
}

/// The planned form: workspace for one matrix shape.
pub struct NsPlan<A> {
    rows: usize,
    cols: usize,
    m: usize,
    n: usize,
    transposed: bool,
    /// `X`, `m x n`
    x: Vec<A>,
    /// `X^T`, `n x m` (the right operand of `X X^T`, row-major)
    xt: Vec<A>,
    /// `B X`, `m x n`
    y: Vec<A>,
    /// `A`, `m x m`
    a: Vec<A>,
    /// `c A`, `m x m`
    ca: Vec<A>,
    /// `B`, `m x m`
    b: Vec<A>,
    /// Largest diagonal block of the symmetric products computed whole.
    block: usize,
    /// The tiles covering the upper triangle of an `m x m` symmetric product.
    tiles: Vec<Tile>,
    /// Threads the products' rows are split across (one part per thread, the caller's
    /// included); started once, here.
    pool: Pool,
    /// The release of `gemm` the products are issued to.
    kernel: GemmKernel,
}

impl<A: Real> NsPlan<A> {
    /// Buffers for `rows x cols` matrices (the trace: everything sized here, once).
    pub fn new(rows: usize, cols: usize) -> Self {
        let (m, n, transposed) = sides(rows, cols);
        let z = A::default();
        Self {
            rows,
            cols,
            m,
            n,
            transposed,
            x: vec![z; m * n],
            xt: vec![z; m * n],
            y: vec![z; m * n],
            a: vec![z; m * m],
            ca: vec![z; m * m],
            b: vec![z; m * m],
            block: SYM_BLOCK,
            tiles: symmetric_tiles(m, SYM_BLOCK),
            pool: Pool::new(default_threads(m, n)),
            kernel: GemmKernel::Widest,
        }
    }

    /// Issue the products to `kernel` (default [`GemmKernel::Widest`]: the iteration's bits
    /// need not be dfdx's, and on an AVX-512 CPU it runs the products at about twice
    /// [`GemmKernel::Dfdx`]'s rate, allocating and freeing its packed operand panels at every
    /// call, where 0.15 allocates a few bytes). Each kernel's result is bit-identical for every
    /// thread count.
    ///
    /// ```
    /// use harness_reference::backend::GemmKernel;
    /// use harness_reference::optim::muon::{coeffs::STANDARD, NsPlan};
    /// let c = harness_reference::backend::Array::new(vec![3], STANDARD.to_vec()).unwrap();
    /// let x: Vec<f32> = (0..12).map(|i| (i as f32 * 0.7).sin()).collect();
    /// let (mut dfdx_bits, mut widest) = ([0f32; 12], [0f32; 12]);
    /// NsPlan::new(3, 4).with_kernel(GemmKernel::Dfdx).run(&x, &c, 5, 1e-8, &mut dfdx_bits);
    /// NsPlan::new(3, 4).run(&x, &c, 5, 1e-8, &mut widest);
    /// for (a, b) in dfdx_bits.iter().zip(&widest) {
    ///     assert!((a - b).abs() < 1e-5); // the same iteration, other roundings
    /// }
    /// ```
    pub fn with_kernel(mut self, kernel: GemmKernel) -> Self {
        self.kernel = kernel;
        self
    }

    /// Split the products across `threads` threads (at least 1; the default is the machine's
    /// parallelism for matrices whose products reach [`GEMM_PARALLEL_MIN`] multiply-adds, else
    /// 1). The result is bit-identical for every thread count.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.pool = Pool::new(threads);
        self
    }

    /// Threads the products are split across.
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// Compute diagonal blocks of at most `block x block` (at least 1) whole in the symmetric
    /// products ([`symmetric_tiles`]; tests use small blocks to exercise the recursion on small
    /// matrices).
    pub fn with_sym_block(mut self, block: usize) -> Self {
        self.block = block.max(1);
        self.tiles = symmetric_tiles(self.m, self.block);
        self
    }

    /// `(rows, cols)` of the matrices this plan orthogonalises.
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// Orthogonalise `input` (row-major `rows x cols`) into `out`; returns the iterations run.
    pub fn run(
        &mut self,
        input: &[A],
        coeffs: &Array<f64>,
        ns_steps: usize,
        eps: A,
        out: &mut [A],
    ) -> usize {
        let (m, n) = (self.m, self.n);
        assert_eq!(input.len(), m * n, "NsPlan::run: input length");
        assert_eq!(out.len(), m * n, "NsPlan::run: output length");
        if self.transposed {
            for i in 0..m {
                for j in 0..n {
                    self.x[i * n + j] = input[j * m + i];
                }
            }
        } else {
            self.x.copy_from_slice(input);
        }
        let sum_sq = self.x.iter().fold(A::default(), |s, &v| s + v * v);
        let denom = sum_sq.sqrt() + eps;
        self.x.iter_mut().for_each(|v| *v /= denom);
        let iters = coeffs::iterations(coeffs, ns_steps);
        // the previous iteration's `a`: its `X <- a X + B X` is finished by the next pass
        let mut pending: Option<A> = None;
        for i in 0..iters {
            let [a, b, c] = coeffs::row(coeffs, i).map(A::of_f64);
            // X <- a' X + Y (the previous iteration's), X^T materialised so that every product
            // reads a row-major right operand
            ns_passes::update_transpose(
                &mut self.pool,
                &mut self.x,
                pending.map(|a| (&self.y[..], a)),
                &mut self.xt,
                m,
                n,
            );
            // A = X X^T (upper triangle), each tile mirrored and scaled into cA by the thread
            // that computed it, while it is in that thread's cache
            let ca = PartsPtr::new(self.ca.as_mut_ptr());
            let gram = Symmetric {
                l: &self.x,
                rt: &self.xt,
                m,
                k: n,
            };
            sym_product(
                &mut self.pool,
                self.kernel,
                &self.tiles,
                gram,
                &mut self.a,
                // SAFETY: tiles and their mirror images are disjoint (the tiles cover the upper
                // triangle once), so each call alone touches its tile's elements of A and CA
                // and their mirror images
                &|t, a| unsafe { ns_passes::mirror_scale_tile(a, ca, c, m, t) },
            );
            // B = b A + (c A) A, with (c A) A = (c A) A^T: A is its own transpose; each tile
            // combined with b A and mirrored likewise
            let am = &self.a[..];
            let square = Symmetric {
                l: &self.ca,
                rt: am,
                m,
                k: m,
            };
            sym_product(
                &mut self.pool,
                self.kernel,
                &self.tiles,
                square,
                &mut self.b,
                // SAFETY: as above, for B; A is only read
                &|t, bm| unsafe { ns_passes::mirror_combine_tile(bm, am, b, m, t) },
            );
            // Y = B X; X <- a X + Y on the next pass
            gemm_into_pooled(
                &mut self.pool,
                self.kernel,
                Product {
                    m,
                    n,
                    k: m,
                    lhs: Operand {
                        data: &self.b,
                        offset: 0,
                        rs: m,
                        cs: 1,
                    },
                    rhs: Operand {
                        data: &self.x,
                        offset: 0,
                        rs: n,
                        cs: 1,
                    },
                },
                Dest {
                    data: &mut self.y,
                    offset: 0,
                    rs: n,
                },
            );
            pending = Some(a);
        }
        if let Some(a) = pending {
            ns_passes::update(&mut self.pool, &mut self.x, &self.y, a, n);
        }
        if self.transposed {
            for i in 0..m {
                for j in 0..n {
                    out[j * m + i] = self.x[i * n + j];
                }
            }
        } else {
            out.copy_from_slice(&self.x);
        }
        iters
    }
}

/// The operands of a product `L R^T` known to be symmetric (`X X^T`, or `(cA) A` with `A`
/// symmetric): `l` row-major `m x k`, and `rt = R^T` row-major `k x m`.
#[derive(Clone, Copy)]
struct Symmetric<'a, A> {
    l: &'a [A],
    rt: &'a [A],
    m: usize,
    k: usize,
}

/// `dst (m x m) = L R^T` for a [`Symmetric`] product: only the upper-triangle `tiles` are
/// computed, each followed on its thread by `then` (which mirrors it: [`ns_passes`]), so the
/// result is exactly symmetric.
fn sym_product<A: Real>(
    pool: &mut Pool,
    kernel: GemmKernel,
    tiles: &[Tile],
    p: Symmetric<'_, A>,
    dst: &mut [A],
    then: &(dyn Fn(&Tile, PartsPtr<A>) + Sync),
) {
    let Symmetric { l, rt, m, k } = p;
    gemm_tiles_pooled(
        pool,
        kernel,
        tiles,
        Product {
            m,
            n: m,
            k,
            lhs: Operand {
                data: l,
                offset: 0,
                rs: k,
                cs: 1,
            },
            rhs: Operand {
                data: rt,
                offset: 0,
                rs: m,
                cs: 1,
            },
        },
        dst,
        m,
        then,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauss(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 11) as f64 / (1u64 << 53) as f64) - 0.5
            })
            .collect()
    }

    #[test]
    fn planned_matches_composed_closely() {
        let c = coeffs::build(&coeffs::CoeffSpec::default(), 5).unwrap();
        for (r, cl) in [(3, 5), (7, 2), (4, 4), (200, 150)] {
            let x = Array::new(vec![r, cl], gauss(r * cl, 7)).unwrap();
            let (want, k) = orthogonalize_composed(&x, &c, 5, 1e-8);
            for kernel in [GemmKernel::Dfdx, GemmKernel::Widest] {
                let mut plan = NsPlan::new(r, cl).with_sym_block(16).with_kernel(kernel);
                let mut out = vec![0.0; r * cl];
                assert_eq!(plan.run(x.data(), &c, 5, 1e-8, &mut out), k);
                for (p, q) in out.iter().zip(want.data()) {
                    assert!((p - q).abs() < 1e-12, "{kernel:?} {r}x{cl}: {p} vs {q}");
                }
            }
        }
    }

    #[test]
    fn planned_result_is_bit_identical_for_every_thread_count_on_either_kernel() {
        let c = coeffs::build(&coeffs::CoeffSpec::default(), 5).unwrap();
        // products of 256^2*300 and 300^2*700 multiply-adds: above GEMM_PARALLEL_MIN, so split
        for (r, cl) in [(256, 300), (700, 300)] {
            let x: Vec<f32> = gauss(r * cl, 3).iter().map(|&v| v as f32).collect();
            for kernel in [GemmKernel::Dfdx, GemmKernel::Widest] {
                let run = |threads| {
                    let mut plan = NsPlan::<f32>::new(r, cl)
                        .with_sym_block(128)
                        .with_threads(threads)
                        .with_kernel(kernel);
                    let mut out = vec![0.0f32; r * cl];
                    plan.run(&x, &c, 5, 1e-8, &mut out);
                    out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                };
                let one = run(1);
                for threads in 2..=4 {
                    assert_eq!(
                        run(threads),
                        one,
                        "{kernel:?} {r}x{cl} on {threads} threads"
                    );
                }
            }
        }
    }

    #[test]
    fn symmetric_tiles_cover_the_upper_triangle_once_and_only_diagonal_blocks_below_it() {
        for (m, leaf) in [
            (1, 64),
            (7, 1),
            (64, 64),
            (65, 64),
            (100, 7),
            (1024, 64),
            (1000, 33),
        ] {
            let mut hits = vec![0u8; m * m];
            for t in symmetric_tiles(m, leaf) {
                assert!(
                    t.r1 <= m && t.c1 <= m && t.r0 < t.r1 && t.c0 < t.c1,
                    "{m}: {t:?}"
                );
                // a tile is either above the diagonal or a diagonal block of side <= leaf
                let diagonal = t.r0 == t.c0 && t.r1 == t.c1;
                assert!(
                    t.r1 <= t.c0 || (diagonal && t.r1 - t.r0 <= leaf),
                    "{m}: {t:?}"
                );
                for i in t.r0..t.r1 {
                    for j in t.c0..t.c1 {
                        hits[i * m + j] += 1;
                    }
                }
            }
            for i in 0..m {
                for j in i..m {
                    assert_eq!(hits[i * m + j], 1, "{m}, leaf {leaf}: ({i}, {j})");
                }
            }
        }
        // closed form at m = 1024, diagonal blocks of 64: (m^2 / 2 + m 64 / 2) / m^2
        assert!((symmetric_fraction(1024) - (0.5 + 32.0 / 1024.0)).abs() < 1e-12);
    }

    #[test]
    fn zero_input_gives_zero() {
        let c = coeffs::build(&coeffs::CoeffSpec::default(), 5).unwrap();
        let x = Array::new(vec![3, 4], vec![0.0f32; 12]).unwrap();
        let (y, _) = orthogonalize_composed(&x, &c, 5, 1e-8);
        assert!(y.data().iter().all(|&v| v == 0.0));
    }
}
