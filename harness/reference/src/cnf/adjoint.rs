//! # The block field's vector–Jacobian product, written out by hand
//!
//! Training differentiates the augmented field `F(t, z; theta) = [f(t, y), tr J(t, y)]` of one
//! block (see [`super::field`] for the maths of `f`, the tangents and the stacked forward pass
//! `P = H W1^T` over `H = [h; dh_1; ..; dh_k]`). dfdx's tape can do it ([`super::taped`]), but
//! at the price of one tensor per elementwise operation; this module computes the same VJP with
//! two matrix products per layer and fused loops, from the `H` and `P` the forward pass kept
//! ([`super::field::Kept`], one per stage: see [`crate::ode::grad::ManualVjp`]).
//!
//! ## Backward
//! Given the cotangents `fbar` (`n x d`) and `trbar` (`n`), the last layer's `Ubar` has primal
//! rows `fbar` and tangent rows `trbar_i e_q` in column `q` of block `q` (exact), or
//! `trbar_i eps_i` (Hutchinson). Then, layer by layer from the last:
//!
//! ```text
//! sbar_j  = sum_primal ubar (P + b1) + sum_tangent ubar P      cbar_j = sum_primal ubar
//! Pbar    = Ubar * s                                           b1bar  = sum_primal Pbar
//! w2bar   = t sbar s (1 - s)     b2bar = sbar s (1 - s)        w3bar  = t cbar
//! W1bar  += Pbar^T H             Hbar   = Pbar W1
//! ```
//!
//! and through the nonlinearity below (`Hbar = [h'bar; dh'bar_q]`):
//!
//! ```text
//! gbar   = sum_q du_q * dh'bar_q
//! ubar   = g * (h'bar - 2 h' gbar)      dubar_q = g * dh'bar_q
//! ```
//!
//! At the first layer the tangent rows of `H` are constants, so only the primal rows of `Hbar`
//! (the cotangent of `y`) are computed. The cotangent of `delta` is zero: the field does not
//! read it.
//!
//! Guarantees: the same maths as the taped form (the `harness` crate's law
//! `cnf_hand_vjp_matches_tape` compares the two within its `tolerance::CNF_MANUAL_VJP`); finite weights and inputs give finite results; the
//! buffers grow on the first call and are reused after it.
//!
//! # References
//! - W. Grathwohl et al., "FFJORD", ICLR 2019 (the augmented field).
//! - A. Griewank, A. Walther, *Evaluating Derivatives*, 2nd ed., SIAM 2008, ch. 3–4 (reverse
//!   mode of a forward-mode tangent computation).

use super::config::Layout;
use super::field::Kept;
use crate::backend::{gemm_into, vectorised, Kernel, Operand, Real};

/// Scratch buffers of the backward pass, in the arithmetic type `A` (f32 or f64).
#[derive(Default)]
pub struct BackScratch<A = f64> {
    ubar: Vec<A>,
    hbar: Vec<A>,
    w1bar: Vec<A>,
    acc: Vec<A>,
}

#[cfg(test)]
impl<A: Real> BackScratch<A> {
    /// Every element of every buffer set to NaN (a stale read then shows in the results).
    pub(super) fn poison(&mut self) {
        for v in [
            &mut self.ubar,
            &mut self.hbar,
            &mut self.w1bar,
            &mut self.acc,
        ] {
            v.fill(A::of_f64(f64::NAN));
        }
    }
}

/// The backward pass of the evaluation kept in `kept` (made by [`super::field::forward`] with the
/// same weights `th`, whose sigmoids it reuses): with `bar = [fbar (n x d), trbar (n)]`, writes
/// `ybar = [(df/dy)^T fbar + (dtr/dy)^T trbar, 0]` (length `n (d + 1)`) and adds the parameter
/// cotangent into `thbar`. Its element-wise loops are compiled for the CPU's widest
/// vectors ([`vectorised`]; no fused multiply-add, sums in a fixed order: the bits of the
/// portable build). Generic over the arithmetic type `A` (f32 or f64): the same loops in each,
/// every value and every sum in `A`.
#[allow(clippy::too_many_arguments)]
pub fn backward<A: Real>(
    layout: &Layout,
    th: &[A],
    n: usize,
    probes: Option<&[A]>,
    kept: &Kept<A>,
    bar: &[A],
    ybar: &mut [A],
    thbar: &mut [A],
    sc: &mut BackScratch<A>,
) {
    struct Backward<'a, A: Real> {
        layout: &'a Layout,
        th: &'a [A],
        n: usize,
        probes: Option<&'a [A]>,
        kept: &'a Kept<A>,
        bar: &'a [A],
        ybar: &'a mut [A],
        thbar: &'a mut [A],
        sc: &'a mut BackScratch<A>,
    }
    impl<A: Real> Kernel for Backward<'_, A> {
        type Output = ();
        #[inline(always)]
        fn run(self) {
            backward_body(
                self.layout,
                self.th,
                self.n,
                self.probes,
                self.kept,
                self.bar,
                self.ybar,
                self.thbar,
                self.sc,
            )
        }
    }
    vectorised(Backward {
        layout,
        th,
        n,
        probes,
        kept,
        bar,
        ybar,
        thbar,
        sc,
    })
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn backward_body<A: Real>(
    layout: &Layout,
    th: &[A],
    n: usize,
    probes: Option<&[A]>,
    kept: &Kept<A>,
    bar: &[A],
    ybar: &mut [A],
    thbar: &mut [A],
    sc: &mut BackScratch<A>,
) {
    let (zero, one, two) = (A::zero(), A::one(), A::of_f64(2.0));
    let d = layout.data_size;
    let k = probes.map_or(d, |_| 1);
    let rows = (1 + k) * n;
    let t = kept.t;
    let nl = layout.layers.len();
    let wmax = layout.max_width();
    sc.ubar.resize(rows * wmax, zero);
    sc.hbar.resize(rows * wmax, zero);
    sc.w1bar.resize(wmax * wmax, zero);
    // Ubar of the last layer (width d)
    let (fbar, trbar) = bar.split_at(n * d);
    sc.ubar[..n * d].copy_from_slice(fbar);
    let tangent = &mut sc.ubar[n * d..rows * d];
    tangent.fill(zero);
    match probes {
        None => {
            for q in 0..d {
                for i in 0..n {
                    tangent[(q * n + i) * d + q] = trbar[i];
                }
            }
        }
        Some(eps) => {
            for i in 0..n {
                for j in 0..d {
                    tangent[i * d + j] = eps[i * d + j] * trbar[i];
                }
            }
        }
    }
    for li in (0..nl).rev() {
        let l = &layout.layers[li];
        let (inp, wo) = (l.inp, l.out);
        let (h, p) = (&kept.h[li], &kept.p[li]);
        let ubar = &mut sc.ubar[..rows * wo];
        let (sv, bv, _) = kept.sbc[li].split3(wo);
        // sbar_j, cbar_j, b1bar_j (column sums), then Pbar = Ubar * s in place
        let acc = &mut sc.acc;
        acc.clear();
        acc.resize(3 * wo, zero);
        ColumnSums {
            ubar,
            p,
            s: sv,
            b1: bv,
            n,
            wo,
            out: acc,
        }
        .run();
        let (sbar, rest) = acc.split_at(wo);
        let (cbar, b1bar) = rest.split_at(wo);
        for j in 0..wo {
            let zbar = sbar[j] * sv[j] * (one - sv[j]);
            thbar[l.b1 + j] += b1bar[j];
            thbar[l.w2 + j] += t * zbar;
            thbar[l.b2 + j] += zbar;
            thbar[l.w3 + j] += t * cbar[j];
        }
        let pbar = &sc.ubar[..rows * wo];
        // W1bar = Pbar^T H (out x in)
        let w1bar = &mut sc.w1bar[..wo * inp];
        gemm_into(
            wo,
            inp,
            rows,
            w1bar,
            0,
            inp,
            Operand {
                data: pbar,
                offset: 0,
                rs: 1,
                cs: wo,
            },
            Operand {
                data: h,
                offset: 0,
                rs: inp,
                cs: 1,
            },
        );
        for (acc, &v) in thbar[l.w1..l.w1 + wo * inp].iter_mut().zip(w1bar.iter()) {
            *acc += v;
        }
        // Hbar = Pbar W1 (primal rows only at the first layer: the tangents there are constants)
        let hrows = if li == 0 { n } else { rows };
        gemm_into(
            hrows,
            inp,
            wo,
            &mut sc.hbar,
            0,
            inp,
            Operand {
                data: pbar,
                offset: 0,
                rs: wo,
                cs: 1,
            },
            Operand {
                data: th,
                offset: l.w1,
                rs: inp,
                cs: 1,
            },
        );
        if li == 0 {
            ybar[..n * d].copy_from_slice(&sc.hbar[..n * d]);
            ybar[n * d..n * (d + 1)].fill(zero);
            break;
        }
        // Through the nonlinearity of layer li - 1: H = [h'; g du_q], du_q = P_q s; one sample
        // at a time, its tangent rows (in block order) before its primal row
        let pb = &kept.p[li - 1];
        let sv = kept.sbc[li - 1].split3(inp).0;
        let ubar = &mut sc.ubar[..rows * inp];
        let hbar = &sc.hbar[..rows * inp];
        let gbar = &mut sc.acc;
        gbar.clear();
        gbar.resize(inp, zero);
        let (up, ut) = ubar.split_at_mut(n * inp);
        for i in 0..n {
            let (ur, hr, gr) = (
                &mut up[i * inp..(i + 1) * inp],
                &h[i * inp..(i + 1) * inp],
                &mut gbar[..inp],
            );
            gr.fill(zero);
            // tangent rows: dubar_q = g dh'bar_q; gbar += du_q dh'bar_q
            for q in 0..k {
                let r = (1 + q) * n + i;
                let (dr, hbr, pr) = (
                    &mut ut[(r - n) * inp..(r - n + 1) * inp],
                    &hbar[r * inp..(r + 1) * inp],
                    &pb[r * inp..(r + 1) * inp],
                );
                for j in 0..inp {
                    gr[j] += pr[j] * sv[j] * hbr[j];
                    dr[j] = (one - hr[j] * hr[j]) * hbr[j];
                }
            }
            // primal row: ubar = g (h'bar - 2 h' gbar)
            let hbr = &hbar[i * inp..(i + 1) * inp];
            for j in 0..inp {
                ur[j] = (one - hr[j] * hr[j]) * (hbr[j] - two * hr[j] * gr[j]);
            }
        }
    }
}

/// Columns whose sums [`ColumnSums`] accumulates together in one pass over the rows (three sums
/// each, in local arrays the compiler keeps in registers as far as the vector width allows).
const SUM_COLUMNS: usize = 64;
/// The block width [`ColumnSums`] uses for the columns left after the [`SUM_COLUMNS`] blocks,
/// before taking the last few one at a time.
const SUM_COLUMNS_TAIL: usize = 8;

/// The column sums of one layer's backward pass: for every column `j` of the layer's cotangent
/// `U` (`rows x wo`, primal rows then tangent rows; `rows = ubar.len() / wo`) and its product `P`,
///
/// ```text
/// sbar_j = sum_primal u (p + b1) + sum_tangent u p      cbar_j = sum_primal u
/// b1bar_j = sum_primal u s
/// ```
///
/// each in row order from zero (primal rows first), into `out = [sbar; cbar; b1bar]`, and
/// `U <- U * s` in place. Columns go in blocks of [`SUM_COLUMNS`], then of
/// [`SUM_COLUMNS_TAIL`], then one at a time, each block in one pass over the rows: the same sums
/// as a row-by-row pass over the whole width, without reading and writing every running sum at
/// every row.
struct ColumnSums<'a, A> {
    ubar: &'a mut [A],
    p: &'a [A],
    s: &'a [A],
    b1: &'a [A],
    /// Primal rows.
    n: usize,
    wo: usize,
    /// `3 wo` values, overwritten.
    out: &'a mut [A],
}

impl<A: Real> ColumnSums<'_, A> {
    #[inline(always)]
    fn run(mut self) {
        let wo = self.wo;
        let mut j0 = 0;
        while j0 + SUM_COLUMNS <= wo {
            self.block::<SUM_COLUMNS>(j0);
            j0 += SUM_COLUMNS;
        }
        while j0 + SUM_COLUMNS_TAIL <= wo {
            self.block::<SUM_COLUMNS_TAIL>(j0);
            j0 += SUM_COLUMNS_TAIL;
        }
        for j in j0..wo {
            self.block::<1>(j);
        }
    }

    /// The columns `j0..j0 + W`, in one pass over the rows.
    #[inline(always)]
    fn block<const W: usize>(&mut self, j0: usize) {
        let (n, wo) = (self.n, self.wo);
        let mut s = [A::zero(); W];
        let mut c = [A::zero(); W];
        let mut b = [A::zero(); W];
        let sw: [A; W] = self.s[j0..j0 + W].try_into().expect("W columns");
        let bw: [A; W] = self.b1[j0..j0 + W].try_into().expect("W columns");
        let (up, ut) = self.ubar.split_at_mut(n * wo);
        for (ur, pr) in up.chunks_exact_mut(wo).zip(self.p.chunks_exact(wo)) {
            let (ur, pr) = (&mut ur[j0..j0 + W], &pr[j0..j0 + W]);
            for j in 0..W {
                let ub = ur[j];
                s[j] += ub * (pr[j] + bw[j]);
                c[j] += ub;
                let pb = ub * sw[j];
                ur[j] = pb;
                b[j] += pb;
            }
        }
        for (ur, pr) in ut
            .chunks_exact_mut(wo)
            .zip(self.p[n * wo..].chunks_exact(wo))
        {
            let (ur, pr) = (&mut ur[j0..j0 + W], &pr[j0..j0 + W]);
            for j in 0..W {
                s[j] += ur[j] * pr[j];
                ur[j] *= sw[j];
            }
        }
        self.out[j0..j0 + W].copy_from_slice(&s);
        self.out[wo + j0..wo + j0 + W].copy_from_slice(&c);
        self.out[2 * wo + j0..2 * wo + j0 + W].copy_from_slice(&b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vectors(wo: usize) -> (Vec<f64>, Vec<f64>) {
        let sv = (0..wo).map(|j| 0.3 + 0.01 * j as f64).collect();
        let bv = (0..wo).map(|j| (j as f64).cos()).collect();
        (sv, bv)
    }

    /// [`ColumnSums`] over every column of a `rows x wo` cotangent, as the backward pass runs it:
    /// `(sbar, cbar, b1bar, U * s)`.
    fn blocked(n: usize, wo: usize, u: &[f64], p: &[f64]) -> Vec<u64> {
        let (sv, bv) = vectors(wo);
        let mut out = vec![0.0; 3 * wo];
        let mut u = u.to_vec();
        ColumnSums {
            ubar: &mut u,
            p,
            s: &sv,
            b1: &bv,
            n,
            wo,
            out: &mut out,
        }
        .run();
        [out, u].concat().iter().map(|v| v.to_bits()).collect()
    }

    /// The same sums written out element by element, row by row over the whole width.
    fn plain(n: usize, wo: usize, u: &[f64], p: &[f64]) -> Vec<u64> {
        let (sv, bv) = vectors(wo);
        let (mut s, mut c, mut b) = (vec![0.0; wo], vec![0.0; wo], vec![0.0; wo]);
        let mut u = u.to_vec();
        for r in 0..u.len() / wo {
            for j in 0..wo {
                let (ub, pv) = (u[r * wo + j], p[r * wo + j]);
                if r < n {
                    s[j] += ub * (pv + bv[j]);
                    c[j] += ub;
                    b[j] += ub * sv[j];
                } else {
                    s[j] += ub * pv;
                }
                u[r * wo + j] = ub * sv[j];
            }
        }
        [s, c, b, u].concat().iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn column_sums_in_blocks_give_the_bits_of_the_plain_row_by_row_sums() {
        // widths below, at and past the block, with a tail; values of mixed sign and scale, so
        // that a different summation order would change the rounding
        for (n, wo) in [
            (5, 3),
            (2, SUM_COLUMNS_TAIL),
            (6, 3 * SUM_COLUMNS_TAIL + 5),
            (7, SUM_COLUMNS),
            (4, SUM_COLUMNS + SUM_COLUMNS_TAIL + 5),
            (3, 2 * SUM_COLUMNS + 1),
        ] {
            let rows = 3 * n;
            let u: Vec<f64> = (0..rows * wo)
                .map(|i| (i as f64 * 0.7).sin() * 10f64.powi((i % 7) as i32 - 3))
                .collect();
            let p: Vec<f64> = (0..rows * wo).map(|i| (i as f64 * 1.3).cos()).collect();
            assert_eq!(blocked(n, wo, &u, &p), plain(n, wo, &u, &p), "{n} x {wo}");
        }
    }
}
