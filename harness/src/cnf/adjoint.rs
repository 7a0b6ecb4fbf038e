//! # The block field's vector–Jacobian product, written out by hand
//!
//! Training differentiates the augmented field `F(t, z; theta) = [f(t, y), tr J(t, y)]` of one
//! block (see [`super::field`] for the maths of `f` and the tangents). dfdx's tape can do it
//! ([`super::taped`]), but at the price of one tensor per elementwise operation; this module
//! computes the same VJP with three matrix products per layer and fused loops, keeping the
//! forward pass's products for the backward pass.
//!
//! ## Forward, stacked
//! The primal rows `h` (`n x in`) and the `k` tangent blocks `dh_q` are stacked into one
//! `R x in` matrix `H = [h; dh_1; ..; dh_k]`, `R = (1 + k) n`, so each layer is one product
//! `P = H W1^T` (`R x out`), then with `s = sigmoid(w2 t + b2)` and `c = w3 t`:
//!
//! ```text
//! u    = (P_h + b1) * s + c        du_q = P_q * s
//! h'   = tanh(u)                   dh'_q = g * du_q,   g = 1 - h'^2     (not after the last)
//! f    = u_last                    tr = sum_j du_j[:, j]  (exact)  or  sum_j eps_j du[:, j]
//! ```
//!
//! `H` and `P` of every layer are kept (per stage slot: see [`ManualVjp`]).
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
//! Guarantees: the same maths as the taped form (a law compares the two within
//! [`crate::tolerance::CNF_MANUAL_VJP`]); finite weights and inputs give finite results; the
//! buffers grow on the first call and are reused after it.
//!
//! # References
//! - W. Grathwohl et al., "FFJORD", ICLR 2019 (the augmented field).
//! - A. Griewank, A. Walther, *Evaluating Derivatives*, 2nd ed., SIAM 2008, ch. 3–4 (reverse
//!   mode of a forward-mode tangent computation).

use super::config::{LayerLayout, Layout};
use super::tanh::tanh;
use crate::backend::{gemm_into, Operand};

/// What the backward pass of one evaluation needs: the time and, per layer, the stacked input
/// `H` and product `P = H W1^T`.
#[derive(Default)]
pub struct Kept {
    t: f64,
    h: Vec<Vec<f64>>,
    p: Vec<Vec<f64>>,
    sbc: Sbc,
}

/// One layer's per-unit vectors `s = sigmoid(w2 t + b2)`, `b1` and `c = w3 t`, stored as
/// `[s; b1; c]`.
#[derive(Default)]
pub struct Sbc(Vec<f64>);

impl Sbc {
    fn split3(&self, w: usize) -> (&[f64], &[f64], &[f64]) {
        let (s, rest) = self.0[..3 * w].split_at(w);
        let (b, c) = rest.split_at(w);
        (s, b, c)
    }
}

/// `[s; b1; c]` of layer `l` at time `t` into `out`.
fn squash_all(th: &[f64], l: &LayerLayout, t: f64, out: &mut Sbc) {
    let w = l.out;
    out.0.resize(3 * w, 0.0);
    for j in 0..w {
        out.0[j] = squash(th, l.w2, l.b2, j, t);
        out.0[w + j] = th[l.b1 + j];
        out.0[2 * w + j] = th[l.w3 + j] * t;
    }
}

/// Scratch buffers of the backward pass.
#[derive(Default)]
pub struct BackScratch {
    ubar: Vec<f64>,
    hbar: Vec<f64>,
    w1bar: Vec<f64>,
    sbc: Sbc,
    acc: Vec<f64>,
}

/// `sigmoid(w2 t + b2)` of one layer's unit `j`.
fn squash(th: &[f64], w2: usize, b2: usize, j: usize, t: f64) -> f64 {
    1.0 / (1.0 + (-(th[w2 + j] * t + th[b2 + j])).exp())
}

/// The stacked forward pass at `(t, y)`: `f` (`n x d`) into `out[..n d]`, the trace into
/// `out[n d..]`, keeping each layer's `H` and `P` in `kept`. `probes` is `None` for the exact
/// trace (`k = d` unit tangents) or the `n x d` Hutchinson probes (`k = 1`).
#[allow(clippy::too_many_arguments)]
pub fn forward(
    layout: &Layout,
    th: &[f64],
    n: usize,
    probes: Option<&[f64]>,
    t: f64,
    y: &[f64],
    out: &mut [f64],
    kept: &mut Kept,
) {
    let d = layout.data_size;
    let k = probes.map_or(d, |_| 1);
    let rows = (1 + k) * n;
    let nl = layout.layers.len();
    kept.t = t;
    kept.h.resize_with(nl, Vec::new);
    kept.p.resize_with(nl, Vec::new);
    // H_0 = [y; e_1 ..; e_d] or [y; eps]
    let h0 = &mut kept.h[0];
    h0.resize(rows * d, 0.0);
    h0[..n * d].copy_from_slice(&y[..n * d]);
    match probes {
        None => {
            for q in 0..d {
                for row in h0[(1 + q) * n * d..(2 + q) * n * d].chunks_exact_mut(d) {
                    row.fill(0.0);
                    row[q] = 1.0;
                }
            }
        }
        Some(eps) => h0[n * d..2 * n * d].copy_from_slice(&eps[..n * d]),
    }
    let (f, tr) = out.split_at_mut(n * d);
    for (li, l) in layout.layers.iter().enumerate() {
        let (inp, wo) = (l.inp, l.out);
        // P = H W1^T; W1^T as a strided operand: (c, j) = W1[j, c] = th[w1 + j inp + c]
        let p = &mut kept.p[li];
        p.resize(rows * wo, 0.0);
        gemm_into(
            rows,
            wo,
            inp,
            p,
            0,
            wo,
            Operand {
                data: &kept.h[li],
                offset: 0,
                rs: inp,
                cs: 1,
            },
            Operand {
                data: th,
                offset: l.w1,
                rs: 1,
                cs: inp,
            },
        );
        let p = &kept.p[li];
        let last = li + 1 == nl;
        squash_all(th, l, t, &mut kept.sbc);
        let (sv, bv, cv) = kept.sbc.split3(wo);
        if last {
            // f = (P_h + b1) s + c; tr from du = P_q s
            for i in 0..n {
                let (pr, fr) = (&p[i * wo..(i + 1) * wo], &mut f[i * d..(i + 1) * d]);
                for j in 0..wo {
                    fr[j] = (pr[j] + bv[j]) * sv[j] + cv[j];
                }
            }
            for (i, tri) in tr[..n].iter_mut().enumerate() {
                *tri = match probes {
                    // sum_j (J e_j)_j: row i of tangent block j, column j
                    None => (0..d).map(|j| p[((1 + j) * n + i) * wo + j] * sv[j]).sum(),
                    // eps_i . (J eps_i)
                    Some(eps) => (0..d)
                        .map(|j| eps[i * d + j] * (p[(n + i) * wo + j] * sv[j]))
                        .sum(),
                };
            }
            break;
        }
        // H_{l+1} = [tanh(u); (1 - h'^2) du_q]
        let hn = &mut kept.h[li + 1];
        hn.resize(rows * wo, 0.0);
        let (hp, ht) = hn.split_at_mut(n * wo);
        for (hr, pr) in hp.chunks_exact_mut(wo).zip(p.chunks_exact(wo)) {
            for j in 0..wo {
                hr[j] = tanh((pr[j] + bv[j]) * sv[j] + cv[j]);
            }
        }
        for (r, (tr_, pr)) in ht
            .chunks_exact_mut(wo)
            .zip(p[n * wo..rows * wo].chunks_exact(wo))
            .enumerate()
        {
            let hr = &hp[(r % n) * wo..(r % n + 1) * wo];
            for j in 0..wo {
                tr_[j] = (1.0 - hr[j] * hr[j]) * (pr[j] * sv[j]);
            }
        }
    }
}

/// The backward pass of the evaluation kept in `kept`: with `bar = [fbar (n x d), trbar (n)]`,
/// writes `ybar = [(df/dy)^T fbar + (dtr/dy)^T trbar, 0]` (length `n (d + 1)`) and adds the
/// parameter cotangent into `thbar`. `detach_trace` drops the trace's cotangent (the mutation
/// of [`super::flow::loss_and_grad_detached_trace`]).
#[allow(clippy::too_many_arguments)]
pub fn backward(
    layout: &Layout,
    th: &[f64],
    n: usize,
    probes: Option<&[f64]>,
    kept: &Kept,
    bar: &[f64],
    ybar: &mut [f64],
    thbar: &mut [f64],
    detach_trace: bool,
    sc: &mut BackScratch,
) {
    let d = layout.data_size;
    let k = probes.map_or(d, |_| 1);
    let rows = (1 + k) * n;
    let t = kept.t;
    let nl = layout.layers.len();
    let wmax = layout.max_width();
    sc.ubar.resize(rows * wmax, 0.0);
    sc.hbar.resize(rows * wmax, 0.0);
    sc.w1bar.resize(wmax * wmax, 0.0);
    // Ubar of the last layer (width d)
    let (fbar, trbar) = bar.split_at(n * d);
    sc.ubar[..n * d].copy_from_slice(fbar);
    let tangent = &mut sc.ubar[n * d..rows * d];
    tangent.fill(0.0);
    if !detach_trace {
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
    }
    for li in (0..nl).rev() {
        let l = &layout.layers[li];
        let (inp, wo) = (l.inp, l.out);
        let (h, p) = (&kept.h[li], &kept.p[li]);
        let ubar = &mut sc.ubar[..rows * wo];
        squash_all(th, l, t, &mut sc.sbc);
        let (sv, bv, _) = sc.sbc.split3(wo);
        // sbar_j, cbar_j, b1bar_j (column sums), then Pbar = Ubar * s in place
        let acc = &mut sc.acc;
        acc.clear();
        acc.resize(3 * wo, 0.0);
        let (sbar, rest) = acc.split_at_mut(wo);
        let (cbar, b1bar) = rest.split_at_mut(wo);
        let (up, ut) = ubar.split_at_mut(n * wo);
        for (ur, pr) in up.chunks_exact_mut(wo).zip(p.chunks_exact(wo)) {
            for j in 0..wo {
                let ub = ur[j];
                sbar[j] += ub * (pr[j] + bv[j]);
                cbar[j] += ub;
                let pb = ub * sv[j];
                ur[j] = pb;
                b1bar[j] += pb;
            }
        }
        for (ur, pr) in ut
            .chunks_exact_mut(wo)
            .zip(p[n * wo..rows * wo].chunks_exact(wo))
        {
            for j in 0..wo {
                sbar[j] += ur[j] * pr[j];
                ur[j] *= sv[j];
            }
        }
        for j in 0..wo {
            let zbar = sbar[j] * sv[j] * (1.0 - sv[j]);
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
        for (acc, v) in thbar[l.w1..l.w1 + wo * inp].iter_mut().zip(w1bar.iter()) {
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
            ybar[n * d..n * (d + 1)].fill(0.0);
            break;
        }
        // Through the nonlinearity of layer li - 1: H = [h'; g du_q], du_q = P_q s
        let lb = &layout.layers[li - 1];
        let pb = &kept.p[li - 1];
        squash_all(th, lb, t, &mut sc.sbc);
        let sv = sc.sbc.split3(inp).0;
        let ubar = &mut sc.ubar[..rows * inp];
        let hbar = &sc.hbar[..rows * inp];
        let gbar = &mut sc.acc;
        gbar.clear();
        gbar.resize(n * inp, 0.0);
        // tangent rows: dubar_q = g dh'bar_q; gbar += du_q dh'bar_q
        for r in n..rows {
            let i = r % n;
            let (hr, gr) = (
                &h[i * inp..(i + 1) * inp],
                &mut gbar[i * inp..(i + 1) * inp],
            );
            let (ur, hbr, pr) = (
                &mut ubar[r * inp..(r + 1) * inp],
                &hbar[r * inp..(r + 1) * inp],
                &pb[r * inp..(r + 1) * inp],
            );
            for j in 0..inp {
                gr[j] += pr[j] * sv[j] * hbr[j];
                ur[j] = (1.0 - hr[j] * hr[j]) * hbr[j];
            }
        }
        // primal rows: ubar = g (h'bar - 2 h' gbar)
        for i in 0..n {
            let (hr, gr) = (&h[i * inp..(i + 1) * inp], &gbar[i * inp..(i + 1) * inp]);
            let (ur, hbr) = (
                &mut ubar[i * inp..(i + 1) * inp],
                &hbar[i * inp..(i + 1) * inp],
            );
            for j in 0..inp {
                ur[j] = (1.0 - hr[j] * hr[j]) * (hbr[j] - 2.0 * hr[j] * gr[j]);
            }
        }
    }
}
