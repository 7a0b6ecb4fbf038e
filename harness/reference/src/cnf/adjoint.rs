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
use crate::backend::{gemm_into, vectorised, AlignedVec, Dest, Kernel, Operand, Product, Real};

/// Scratch buffers of the backward pass, in the arithmetic type `A` (f32 or f64).
#[derive(Default)]
pub struct BackScratch<A = f64> {
    ubar: AlignedVec<A>,
    hbar: AlignedVec<A>,
    w1bar: AlignedVec<A>,
    acc: Vec<A>,
}

#[cfg(test)]
impl<A: Real> BackScratch<A> {
    /// Every element of every buffer set to NaN (a stale read then shows in the results).
    pub(super) fn poison(&mut self) {
        let nan = A::of_f64(f64::NAN);
        for v in [&mut self.ubar, &mut self.hbar, &mut self.w1bar] {
            v.fill(nan);
        }
        self.acc.fill(nan);
    }
}

/// The backward pass of the evaluation kept in `kept` (made by [`super::field::forward`] with the
/// same weights `th`, whose sigmoids it reuses): with `bar = [fbar (n x d), trbar (n)]`, writes
/// `ybar = [(df/dy)^T fbar + (dtr/dy)^T trbar, 0]` (length `n (d + 1)`) and adds the parameter
/// cotangent into `thbar`. Its element-wise loops are compiled for the CPU's widest
/// vectors ([`vectorised`]; no fused multiply-add, sums in a fixed order: the bits of the
/// portable build). Generic over the arithmetic type `A` (f32 or f64): the same loops in each,
/// every value and every sum in `A`.
pub fn backward<A: Real>(pass: BackwardPass<'_, A>) {
    vectorised(pass)
}

/// The inputs and outputs of one [`backward`] pass.
pub struct BackwardPass<'a, A: Real> {
    /// The field's layers.
    pub layout: &'a Layout,
    /// The weights the kept evaluation was made with.
    pub th: &'a [A],
    /// Samples.
    pub n: usize,
    /// `None` for the exact trace, or the `n x d` Hutchinson probes of the evaluation.
    pub probes: Option<&'a [A]>,
    /// The evaluation's intermediate values ([`super::field::forward`]).
    pub kept: &'a Kept<A>,
    /// `[fbar (n x d), trbar (n)]`.
    pub bar: &'a [A],
    /// The state's cotangent, `n (d + 1)`, overwritten.
    pub ybar: &'a mut [A],
    /// The weights' cotangent, added to.
    pub thbar: &'a mut [A],
    /// Scratch buffers, kept between calls.
    pub sc: &'a mut BackScratch<A>,
}

impl<A: Real> Kernel for BackwardPass<'_, A> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        backward_body(self)
    }
}

#[inline(always)]
fn backward_body<A: Real>(pass: BackwardPass<'_, A>) {
    let BackwardPass {
        layout,
        th,
        n,
        probes,
        kept,
        bar,
        ybar,
        thbar,
        sc,
    } = pass;
    let (zero, one) = (A::zero(), A::one());
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
        // sbar_j, cbar_j, b1bar_j (column sums), then Pbar = Ubar * s in place; below the last
        // layer, Ubar is made in the same pass from Hbar of the layer above (through the
        // nonlinearity: `Tanh`)
        let acc = &mut sc.acc;
        acc.clear();
        acc.resize(3 * wo, zero);
        let sums = ColumnSums {
            ubar,
            p,
            s: sv,
            b1: bv,
            n,
            wo,
            out: acc,
        };
        if li + 1 == nl {
            sums.run(Written);
        } else {
            sums.run(Tanh {
                hbar: &sc.hbar[..rows * wo],
                h: &kept.h[li + 1],
                n,
                k,
            });
        }
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
            Product {
                m: wo,
                n: inp,
                k: rows,
                lhs: Operand {
                    data: pbar,
                    offset: 0,
                    rs: 1,
                    cs: wo,
                },
                rhs: Operand {
                    data: h,
                    offset: 0,
                    rs: inp,
                    cs: 1,
                },
            },
            Dest {
                data: w1bar,
                offset: 0,
                rs: inp,
            },
        );
        for (acc, &v) in thbar[l.w1..l.w1 + wo * inp].iter_mut().zip(w1bar.iter()) {
            *acc += v;
        }
        // Hbar = Pbar W1 (primal rows only at the first layer: the tangents there are constants)
        let hrows = if li == 0 { n } else { rows };
        gemm_into(
            Product {
                m: hrows,
                n: inp,
                k: wo,
                lhs: Operand {
                    data: pbar,
                    offset: 0,
                    rs: wo,
                    cs: 1,
                },
                rhs: Operand {
                    data: th,
                    offset: l.w1,
                    rs: inp,
                    cs: 1,
                },
            },
            Dest {
                data: &mut sc.hbar,
                offset: 0,
                rs: inp,
            },
        );
        if li == 0 {
            ybar[..n * d].copy_from_slice(&sc.hbar[..n * d]);
            ybar[n * d..n * (d + 1)].fill(zero);
            break;
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
/// `ubar <- U * s`. `U` is what `ubar` holds ([`Written`], the last layer) or is made row by row
/// in the same pass from the next layer's input cotangent ([`Tanh`], every other layer), so that
/// the pass through the nonlinearity does not write `U` for this pass to read back. Columns go
/// in blocks of [`SUM_COLUMNS`], then of [`SUM_COLUMNS_TAIL`], then one at a time, each block in
/// one pass over the rows: the same sums as a row-by-row pass over the whole width, without
/// reading and writing every running sum at every row.
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
    /// The sums and `U * s` of every column, with `U` from `from`.
    #[inline(always)]
    fn run<C: Cotangent<A>>(mut self, from: C) {
        let wo = self.wo;
        let mut j0 = 0;
        while j0 + SUM_COLUMNS <= wo {
            self.block::<SUM_COLUMNS, C>(j0, &from);
            j0 += SUM_COLUMNS;
        }
        while j0 + SUM_COLUMNS_TAIL <= wo {
            self.block::<SUM_COLUMNS_TAIL, C>(j0, &from);
            j0 += SUM_COLUMNS_TAIL;
        }
        for j in j0..wo {
            self.block::<1, C>(j, &from);
        }
    }

    /// The columns `j0..j0 + W`, in one pass over the rows.
    #[inline(always)]
    fn block<const W: usize, C: Cotangent<A>>(&mut self, j0: usize, from: &C) {
        let (n, wo) = (self.n, self.wo);
        let mut s = [A::zero(); W];
        let mut c = [A::zero(); W];
        let mut b = [A::zero(); W];
        let sw: [A; W] = self.s[j0..j0 + W].try_into().expect("W columns");
        let bw: [A; W] = self.b1[j0..j0 + W].try_into().expect("W columns");
        let rows = self.ubar.len() / wo;
        let (up, ut) = self.ubar.split_at_mut(n * wo);
        for i in 0..n {
            let at = i * wo + j0;
            let (ur, pr) = (&mut up[at..at + W], &self.p[at..at + W]);
            let u = from.primal::<W>(i, j0, ur, self.p, wo, &sw);
            for j in 0..W {
                s[j] += u[j] * (pr[j] + bw[j]);
                c[j] += u[j];
                let pb = u[j] * sw[j];
                ur[j] = pb;
                b[j] += pb;
            }
        }
        for r in n..rows {
            let at = r * wo + j0;
            let (ur, pr) = (&mut ut[at - n * wo..at - n * wo + W], &self.p[at..at + W]);
            let u = from.tangent::<W>(r, j0, ur, wo);
            for j in 0..W {
                s[j] += u[j] * pr[j];
                ur[j] = u[j] * sw[j];
            }
        }
        self.out[j0..j0 + W].copy_from_slice(&s);
        self.out[wo + j0..wo + j0 + W].copy_from_slice(&c);
        self.out[2 * wo + j0..2 * wo + j0 + W].copy_from_slice(&b);
    }
}

/// Where [`ColumnSums`] takes a layer's output cotangent `U` (`rows x wo`) from, a block of `W`
/// columns (from `j0`) of one row at a time.
trait Cotangent<A> {
    /// Primal row `i`, whose current values are `u`; `p` is the layer's product (every row),
    /// `s` its sigmoids at the block.
    fn primal<const W: usize>(
        &self,
        i: usize,
        j0: usize,
        u: &[A],
        p: &[A],
        wo: usize,
        s: &[A; W],
    ) -> [A; W];
    /// Tangent row `r` (counted over every row, so `r >= n`), whose current values are `u`.
    fn tangent<const W: usize>(&self, r: usize, j0: usize, u: &[A], wo: usize) -> [A; W];
}

/// `U` as the buffer holds it (the last layer's, written from the cotangents of `f` and the
/// trace).
struct Written;

impl<A: Real> Cotangent<A> for Written {
    #[inline(always)]
    fn primal<const W: usize>(
        &self,
        _: usize,
        _: usize,
        u: &[A],
        _: &[A],
        _: usize,
        _: &[A; W],
    ) -> [A; W] {
        u[..W].try_into().expect("W columns")
    }
    #[inline(always)]
    fn tangent<const W: usize>(&self, _: usize, _: usize, u: &[A], _: usize) -> [A; W] {
        u[..W].try_into().expect("W columns")
    }
}

/// `U` of a layer followed by `tanh`, from the cotangent `Hbar = [h'bar; dh'bar_q]` of the
/// next layer's input `H = [h'; g du_q]` (`g = 1 - h'^2`, `du_q = P_q s`):
///
/// ```text
/// gbar    = sum_q du_q * dh'bar_q                  (from zero, q in order)
/// ubar    = g * (h'bar - 2 h' gbar)               (primal rows)
/// dubar_q = g * dh'bar_q                           (tangent rows)
/// ```
struct Tanh<'a, A> {
    /// `Hbar`, `rows x wo`.
    hbar: &'a [A],
    /// `H` of the next layer, `rows x wo` (its primal rows are `h'`).
    h: &'a [A],
    /// Primal rows.
    n: usize,
    /// Tangent blocks.
    k: usize,
}

impl<A: Real> Cotangent<A> for Tanh<'_, A> {
    #[inline(always)]
    fn primal<const W: usize>(
        &self,
        i: usize,
        j0: usize,
        _: &[A],
        p: &[A],
        wo: usize,
        s: &[A; W],
    ) -> [A; W] {
        let (one, two) = (A::one(), A::of_f64(2.0));
        let at = i * wo + j0;
        let (hr, hbr) = (&self.h[at..at + W], &self.hbar[at..at + W]);
        let mut g = [A::zero(); W];
        for q in 0..self.k {
            let at = ((1 + q) * self.n + i) * wo + j0;
            let (pr, tr) = (&p[at..at + W], &self.hbar[at..at + W]);
            for j in 0..W {
                g[j] += pr[j] * s[j] * tr[j];
            }
        }
        let mut u = [A::zero(); W];
        for j in 0..W {
            u[j] = (one - hr[j] * hr[j]) * (hbr[j] - two * hr[j] * g[j]);
        }
        u
    }
    #[inline(always)]
    fn tangent<const W: usize>(&self, r: usize, j0: usize, _: &[A], wo: usize) -> [A; W] {
        let one = A::one();
        let (at, ah) = (r * wo + j0, (r % self.n) * wo + j0);
        let (hr, tr) = (&self.h[ah..ah + W], &self.hbar[at..at + W]);
        let mut u = [A::zero(); W];
        for j in 0..W {
            u[j] = (one - hr[j] * hr[j]) * tr[j];
        }
        u
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

    /// [`ColumnSums`] over every column of a `rows x wo` buffer `u`, with the cotangent from
    /// `from`, as the backward pass runs it: `(sbar, cbar, b1bar, U * s)`.
    fn blocked<C: Cotangent<f64>>(n: usize, wo: usize, u: &[f64], p: &[f64], from: C) -> Vec<u64> {
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
        .run(from);
        [out, u].concat().iter().map(|v| v.to_bits()).collect()
    }

    /// `U` through the nonlinearity written out element by element (see [`Tanh`]), for `k`
    /// tangent blocks.
    fn plain_tanh(n: usize, k: usize, wo: usize, hbar: &[f64], h: &[f64], p: &[f64]) -> Vec<f64> {
        let (sv, _) = vectors(wo);
        let mut u = vec![0.0; (1 + k) * n * wo];
        for i in 0..n {
            for j in 0..wo {
                let hv = h[i * wo + j];
                let mut g = 0.0;
                for q in 0..k {
                    let r = (1 + q) * n + i;
                    g += p[r * wo + j] * sv[j] * hbar[r * wo + j];
                    u[r * wo + j] = (1.0 - hv * hv) * hbar[r * wo + j];
                }
                u[i * wo + j] = (1.0 - hv * hv) * (hbar[i * wo + j] - 2.0 * hv * g);
            }
        }
        u
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
            assert_eq!(
                blocked(n, wo, &u, &p, Written),
                plain(n, wo, &u, &p),
                "{n} x {wo}"
            );
        }
    }

    #[test]
    fn column_sums_through_the_nonlinearity_give_the_bits_of_the_plain_pass_then_sums() {
        // one and two tangent blocks (Hutchinson, the exact trace in 2-D), widths around the
        // blocks; the buffer starts as NaN, so a read of it instead of the cotangent shows
        for k in [1, 2] {
            for (n, wo) in [
                (5, 3),
                (7, SUM_COLUMNS),
                (4, SUM_COLUMNS + SUM_COLUMNS_TAIL + 5),
            ] {
                let rows = (1 + k) * n;
                let wave = |a: f64, b: f64| -> Vec<f64> {
                    (0..rows * wo)
                        .map(|i| (i as f64 * a).sin() * 10f64.powi((i % 5) as i32 - 2) + b)
                        .collect()
                };
                let (hbar, p) = (wave(0.7, 0.0), wave(1.3, 0.1));
                let h: Vec<f64> = wave(0.37, 0.0).iter().map(|v| v.tanh()).collect();
                let u = plain_tanh(n, k, wo, &hbar, &h, &p);
                let from = Tanh {
                    hbar: &hbar,
                    h: &h,
                    n,
                    k,
                };
                assert_eq!(
                    blocked(n, wo, &vec![f64::NAN; rows * wo], &p, from),
                    plain(n, wo, &u, &p),
                    "k {k}, {n} x {wo}"
                );
            }
        }
    }
}
