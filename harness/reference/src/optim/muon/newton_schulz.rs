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
//! the symmetry of `A = X X^T` and of `(cA) A`: it computes only their upper-triangle tiles
//! ([`SYM_BLOCK`]` x `[`SYM_BLOCK`], about 0.56 of a full product at `m = 1024`) and mirrors them,
//! so both are exactly symmetric; `X^T` is materialised once per iteration so that every product
//! reads row-major operands (gemm 0.15 packs a transposed right operand more slowly). After its
//! first call it allocates nothing of its own: the buffers and the tile list are sized once, and
//! the products run on the plan's own parked threads ([`crate::pool::Pool`], started once; one
//! thread for products below [`GEMM_PARALLEL_MIN`]) as single-threaded gemm calls — only gemm's
//! own per-call scratch (a few bytes, freed by the call) remains — whole tiles dealt
//! round-robin for the symmetric products
//! ([`crate::backend::gemm_tiles_pooled`]), row blocks for `B X`
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

use super::coeffs;
use crate::backend::{
    device, gemm_into_pooled, gemm_tiles_pooled, Array, Mat, Operand, Real, Tile, GEMM_PARALLEL_MIN,
};
use crate::pool::Pool;

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

/// Tile size of the symmetric products: the upper-triangle tiles (`i <= j`) of `T x T` are one
/// single-threaded GEMM each, dealt round-robin to the plan's threads, so `A = X X^T` and
/// `(cA) A` cost `(t + 1) / (2 t)` of a full product for `t = ceil(m / T)` tiles per side
/// (0.56 at `m = 1024`). Measured (bench area `muon`, 1024^2 f32, 2 threads): 128 beat 256 and
/// the earlier recursive halving with its rows split across threads (285 vs 298 ms).
pub const SYM_BLOCK: usize = 128;

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
    /// Tile size of the symmetric products.
    block: usize,
    /// The upper-triangle tiles of an `m x m` symmetric product.
    tiles: Vec<Tile>,
    /// Threads the products' rows are split across (one part per thread, the caller's
    /// included); started once, here.
    pool: Pool,
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
            tiles: upper_tiles(m, SYM_BLOCK),
            pool: Pool::new(default_threads(m, n)),
        }
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

    /// Use tiles of `block x block` (at least 1) in the symmetric products (tests use small
    /// tiles to exercise the tiling on small matrices).
    pub fn with_sym_block(mut self, block: usize) -> Self {
        self.block = block.max(1);
        self.tiles = upper_tiles(self.m, self.block);
        self
    }

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
        for i in 0..iters {
            let [a, b, c] = coeffs::row(coeffs, i).map(A::of_f64);
            // A = X X^T (upper triangle, mirrored), with X^T materialised so that every product
            // reads a row-major right operand
            transpose_into(&self.x, m, n, &mut self.xt);
            sym_product(
                &mut self.pool,
                &self.tiles,
                &mut self.a,
                &self.x,
                &self.xt,
                m,
                n,
            );
            // B = b A + (c A) A
            for (ca, &av) in self.ca.iter_mut().zip(&self.a) {
                *ca = av * c;
            }
            // (c A) A = (c A) A^T: A is its own transpose
            sym_product(
                &mut self.pool,
                &self.tiles,
                &mut self.b,
                &self.ca,
                &self.a,
                m,
                m,
            );
            for (bv, &av) in self.b.iter_mut().zip(&self.a) {
                *bv = av * b + *bv;
            }
            // X <- a X + B X
            gemm_into_pooled(
                &mut self.pool,
                m,
                n,
                m,
                &mut self.y,
                0,
                n,
                Operand {
                    data: &self.b,
                    offset: 0,
                    rs: m,
                    cs: 1,
                },
                Operand {
                    data: &self.x,
                    offset: 0,
                    rs: n,
                    cs: 1,
                },
            );
            for (xv, &yv) in self.x.iter_mut().zip(&self.y) {
                *xv = *xv * a + yv;
            }
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

/// The tiles `(i, j)`, `i <= j`, of a `T x T` tiling of an `m x m` matrix (edge tiles shorter).
fn upper_tiles(m: usize, t: usize) -> Vec<Tile> {
    let starts = (0..m).step_by(t.max(1));
    let mut tiles = Vec::new();
    for r0 in starts.clone() {
        for c0 in starts.clone().filter(|&c0| c0 >= r0) {
            tiles.push(Tile {
                r0,
                r1: (r0 + t).min(m),
                c0,
                c1: (c0 + t).min(m),
            });
        }
    }
    tiles
}

/// `dst (m x m) = L R^T` for row-major `L` (`m x k`), given `rt = R^T` row-major (`k x m`), when
/// the product is known to be symmetric (`X X^T`, or `(cA) A` with `A` symmetric): only the
/// upper-triangle `tiles` are computed, then the strict lower triangle is mirrored from the
/// upper one, so the result is exactly symmetric.
#[allow(clippy::too_many_arguments)]
fn sym_product<A: Real>(
    pool: &mut Pool,
    tiles: &[Tile],
    dst: &mut [A],
    l: &[A],
    rt: &[A],
    m: usize,
    k: usize,
) {
    gemm_tiles_pooled(
        pool,
        tiles,
        m,
        m,
        k,
        dst,
        m,
        Operand {
            data: l,
            offset: 0,
            rs: k,
            cs: 1,
        },
        Operand {
            data: rt,
            offset: 0,
            rs: m,
            cs: 1,
        },
    );
    // mirror in 32x32 tiles: a row-by-row mirror reads a column per row, one cache line per element
    const TILE: usize = 32;
    for ib in (0..m).step_by(TILE) {
        for jb in (0..=ib).step_by(TILE) {
            for i in ib..(ib + TILE).min(m) {
                for j in jb..(jb + TILE).min(i) {
                    dst[i * m + j] = dst[j * m + i];
                }
            }
        }
    }
}

/// `out (c x r) = x^T` for row-major `x` (`r x c`), in 32x32 tiles.
fn transpose_into<A: Copy>(x: &[A], r: usize, c: usize, out: &mut [A]) {
    const TILE: usize = 32;
    for ib in (0..r).step_by(TILE) {
        for jb in (0..c).step_by(TILE) {
            for i in ib..(ib + TILE).min(r) {
                for j in jb..(jb + TILE).min(c) {
                    out[j * r + i] = x[i * c + j];
                }
            }
        }
    }
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
            let mut plan = NsPlan::new(r, cl).with_sym_block(16);
            let mut out = vec![0.0; r * cl];
            assert_eq!(plan.run(x.data(), &c, 5, 1e-8, &mut out), k);
            for (p, q) in out.iter().zip(want.data()) {
                assert!((p - q).abs() < 1e-12, "{r}x{cl}: {p} vs {q}");
            }
        }
    }

    #[test]
    fn planned_result_is_bit_identical_for_every_thread_count() {
        let c = coeffs::build(&coeffs::CoeffSpec::default(), 5).unwrap();
        // products of 256^2*300 and 300^2*700 multiply-adds: above GEMM_PARALLEL_MIN, so split
        for (r, cl) in [(256, 300), (700, 300)] {
            let x: Vec<f32> = gauss(r * cl, 3).iter().map(|&v| v as f32).collect();
            let run = |threads| {
                let mut plan = NsPlan::<f32>::new(r, cl)
                    .with_sym_block(128)
                    .with_threads(threads);
                let mut out = vec![0.0f32; r * cl];
                plan.run(&x, &c, 5, 1e-8, &mut out);
                out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            };
            let one = run(1);
            for threads in 2..=4 {
                assert_eq!(run(threads), one, "{r}x{cl} on {threads} threads");
            }
        }
    }

    #[test]
    fn zero_input_gives_zero() {
        let c = coeffs::build(&coeffs::CoeffSpec::default(), 5).unwrap();
        let x = Array::new(vec![3, 4], vec![0.0f32; 12]).unwrap();
        let (y, _) = orthogonalize_composed(&x, &c, 5, 1e-8);
        assert!(y.data().iter().all(|&v| v == 0.0));
    }
}
