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
//! the symmetry of `A` and `B`. It allocates nothing after its first call: the buffers are sized
//! once, each product's rows are split across the plan's own parked threads
//! ([`crate::pool::Pool`], started once; one thread for products below
//! [`GEMM_PARALLEL_MIN`]), each block a single-threaded gemm call reusing its thread's scratch
//! ([`crate::backend::gemm_into_pooled`]); the split does not change any element's reduction
//! order, so results are bit-identical for every thread count. It computes
//! only their upper triangles (a recursive block product, half the flops of a full product) and
//! mirrors them, so `A` and `B` are exactly symmetric. Both return the number of iterations run,
//! the observable behind the "`(k,3)` runs `k` iterations" law.
//!
//! Non-square transposition is exact (a copy), so `orth(X^T) == orth(X)^T` bit for bit whenever
//! `rows != cols`; for square matrices the two sides are different roundings of the same maths.
//!
//! # References
//! - K. Jordan, *Muon: An optimizer for hidden layers*, 2024 (quintic coefficients).
//! - optax 0.2.8 `optax/contrib/_muon.py`; ALGORITHMS.md §3.

use super::coeffs;
use crate::backend::{device, gemm_into_pooled, Array, Mat, Operand, Real, GEMM_PARALLEL_MIN};
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

/// Below this many rows a diagonal block of a symmetric product is one full GEMM. gemm 0.15 runs
/// products with a transposed right operand (`L R^T`) about half as fast as plain ones (bench
/// area `muon`, 1024^3 f32: 554 ms for 5 iterations of full `X X^T` products vs 252 ms for 15 plain
/// products), which eats most of the halved flops; one level of splitting at 1024 measured best
/// (258 ms vs 271 ms with 128-row blocks).
pub const SYM_BLOCK: usize = 512;

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
    /// `B X`, `m x n`
    y: Vec<A>,
    /// `A`, `m x m`
    a: Vec<A>,
    /// `c A`, `m x m`
    ca: Vec<A>,
    /// `B`, `m x m`
    b: Vec<A>,
    /// Diagonal block size of the symmetric products.
    block: usize,
    /// Threads the products' rows are split across (one part per thread, the caller's
    /// included); started once, here.
    pool: Pool,
    /// Mutation: reallocate every buffer at each call (what a plan-less form does).
    fresh_workspace: bool,
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
            y: vec![z; m * n],
            a: vec![z; m * m],
            ca: vec![z; m * m],
            b: vec![z; m * m],
            block: SYM_BLOCK,
            pool: Pool::new(default_threads(m, n)),
            fresh_workspace: false,
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

    /// Mutation for the memory law: every call allocates a fresh workspace, as a form without a
    /// plan would.
    #[doc(hidden)]
    pub fn with_fresh_workspace_per_call(mut self) -> Self {
        self.fresh_workspace = true;
        self
    }

    /// Use diagonal blocks of `block` rows (at least 1) in the symmetric products (tests use
    /// small blocks to exercise the recursion on small matrices).
    pub fn with_sym_block(mut self, block: usize) -> Self {
        self.block = block.max(1);
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
        if self.fresh_workspace {
            let z = A::default();
            (self.x, self.y) = (vec![z; m * n], vec![z; m * n]);
            (self.a, self.ca, self.b) = (vec![z; m * m], vec![z; m * m], vec![z; m * m]);
        }
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
            // A = X X^T (upper triangle, mirrored)
            sym_product(
                &mut self.pool,
                &mut self.a,
                &self.x,
                &self.x,
                m,
                n,
                self.block,
            );
            // B = b A + (c A) A
            for (ca, &av) in self.ca.iter_mut().zip(&self.a) {
                *ca = av * c;
            }
            sym_product(
                &mut self.pool,
                &mut self.b,
                &self.ca,
                &self.a,
                m,
                m,
                self.block,
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

/// `dst (m x m) = L R^T` for row-major `L, R` of shape `m x k`, when the product is known to be
/// symmetric (`X X^T`, or `(cA) A` with `A` symmetric): only the upper triangle is computed, by
/// recursive halving (off-diagonal blocks are one GEMM each), then mirrored.
fn sym_product<A: Real>(
    pool: &mut Pool,
    dst: &mut [A],
    l: &[A],
    r: &[A],
    m: usize,
    k: usize,
    bs: usize,
) {
    upper(pool, dst, l, r, m, k, 0, m, bs);
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

#[allow(clippy::too_many_arguments)]
fn upper<A: Real>(
    pool: &mut Pool,
    dst: &mut [A],
    l: &[A],
    r: &[A],
    m: usize,
    k: usize,
    lo: usize,
    hi: usize,
    bs: usize,
) {
    if hi - lo <= bs {
        block(pool, dst, l, r, m, k, lo, hi, lo, hi);
        return;
    }
    let mid = lo + (hi - lo) / 2;
    upper(pool, dst, l, r, m, k, lo, mid, bs);
    upper(pool, dst, l, r, m, k, mid, hi, bs);
    block(pool, dst, l, r, m, k, lo, mid, mid, hi);
}

/// `dst[r0..r1, c0..c1] = L[r0..r1] R[c0..c1]^T`
#[allow(clippy::too_many_arguments)]
fn block<A: Real>(
    pool: &mut Pool,
    dst: &mut [A],
    l: &[A],
    r: &[A],
    m: usize,
    k: usize,
    r0: usize,
    r1: usize,
    c0: usize,
    c1: usize,
) {
    gemm_into_pooled(
        pool,
        r1 - r0,
        c1 - c0,
        k,
        dst,
        r0 * m + c0,
        m,
        Operand {
            data: l,
            offset: r0 * k,
            rs: k,
            cs: 1,
        },
        Operand {
            data: r,
            offset: c0 * k,
            rs: 1,
            cs: k,
        },
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
