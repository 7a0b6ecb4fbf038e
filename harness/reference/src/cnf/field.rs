//! # The augmented vector field of one block, in plain arithmetic (f32 or f64)
//!
//! For a batch of `n` samples `y_i in R^d`, the state is `z = [y (n x d, row-major), delta (n)]`
//! and the field is `dz/dt = [f(t, y_i), tr(df/dy)(t, y_i)]`, where `f` is `depth + 1`
//! ConcatSquash layers
//!
//! ```text
//! u = (W1 h + b1) * sigmoid(w2 t + b2) + w3 t          (ConcatSquash, t a 1-vector)
//! h' = tanh(u)                                         (between layers, not after the last)
//! ```
//!
//! The trace comes from tangents pushed through each layer beside the forward pass (forward-mode
//! differentiation written out by hand): a tangent `dh` becomes
//!
//! ```text
//! du  = (W1 dh) * sigmoid(w2 t + b2)
//! dh' = (1 - h'^2) * du
//! ```
//!
//! so with `dh_0 = e_j` the last `du` is column `j` of the Jacobian and
//! `tr J = sum_j (J e_j)_j` ([`TraceEstimator::Exact`], `d` tangents), and with `dh_0 = eps_i`
//! the estimate is `eps_i^T J eps_i` ([`TraceEstimator::Hutchinson`], one tangent).
//!
//! [`forward`] stacks the primal rows `h` (`n x in`) and the `k` tangent blocks `dh_q` into one
//! `R x in` matrix `H = [h; dh_1; ..; dh_k]`, `R = (1 + k) n`, so each layer is one product
//! `P = H W1^T` (`R x out`; a general product, or for the last layer's few outputs one dot
//! product per element in the lane order, [`NARROW_OUT`]), then with `s = sigmoid(w2 t + b2)`
//! and `c = w3 t`:
//!
//! ```text
//! u    = (P_h + b1) * s + c        du_q = P_q * s
//! h'   = tanh(u)                   dh'_q = g * du_q,   g = 1 - h'^2     (not after the last)
//! f    = u_last                    tr = sum_j du_j[:, j]  (exact)  or  sum_j eps_j du[:, j]
//! ```
//!
//! It keeps `H` and `P` of every layer ([`Kept`]) for the hand-written backward pass of
//! [`super::adjoint`]; `tanh` is [`super::tanh::tanh_slice`] (call-free, in blocks of lanes; f32
//! in f32 arithmetic). The taped twin ([`super::taped`]) computes the
//! same maths on dfdx's tape.
//!
//! Guarantees: every element of `dz` is written; finite inputs and weights give finite outputs
//! (`tanh` and `sigmoid` are bounded); the field does not read `delta`; the buffers grow on the
//! first call and are reused after it.
//!
//! # References
//! - W. Grathwohl, R. T. Q. Chen, J. Bettencourt, I. Sutskever, D. Duvenaud, "FFJORD:
//!   Free-form continuous dynamics for scalable reversible generative models", ICLR 2019.
//! - P. Kidger, diffrax 0.7.2, `examples/continuous_normalising_flow.ipynb`.
//!
//! [`TraceEstimator::Exact`]: super::TraceEstimator::Exact
//! [`TraceEstimator::Hutchinson`]: super::TraceEstimator::Hutchinson

use super::config::{LayerLayout, Layout};
use super::tanh::tanh_slice;
use crate::backend::{
    gemm_into, hidden_layer_into, lane_dot_rows, vectorised, AlignedVec, Dest, HiddenLayer, Kernel,
    Operand, Product, Real, RowMap,
};
use crate::ode::VectorField;
use std::cell::RefCell;

/// Where the tangents start: the unit vectors (exact trace) or one probe per sample.
#[derive(Debug, Clone, Copy)]
pub enum Tangents<'a, A> {
    /// The `d` unit vectors: `tr(J) = sum_j e_j^T J e_j`, exact.
    Exact,
    /// `n x d`, row-major.
    Probes(&'a [A]),
}

/// One block's augmented field over a batch of `n` samples.
pub struct BlockField<'a, A> {
    /// Offsets of the block's layers inside `theta`.
    pub layout: &'a Layout,
    /// The block's flat parameters (`layout.len` values).
    pub theta: &'a [A],
    /// Samples in the batch; the state is `n x d` plus the `n` log-density terms.
    pub n: usize,
    /// The tangents whose Jacobian-vector products give the trace.
    pub tangents: Tangents<'a, A>,
    kept: RefCell<Kept<A>>,
    transposed: RefCell<Transposed<A>>,
}

impl<'a, A: Real> BlockField<'a, A> {
    /// A field over `n` samples of the block `theta` (laid out by `layout`), with empty scratch.
    pub fn new(layout: &'a Layout, theta: &'a [A], n: usize, tangents: Tangents<'a, A>) -> Self {
        Self {
            layout,
            theta,
            n,
            tangents,
            kept: RefCell::new(Kept::scratch()),
            transposed: RefCell::new(Transposed::default()),
        }
    }

    /// `f(t, y)` into `f` (`n x d`) and the trace into `tr` (`n`).
    pub fn eval_parts(&self, t: A, y: &[A], f: &mut [A], tr: &mut [A]) {
        let probes = match self.tangents {
            Tangents::Exact => None,
            Tangents::Probes(p) => Some(p),
        };
        forward(ForwardPass {
            layout: self.layout,
            th: self.theta,
            n: self.n,
            probes,
            t,
            y,
            f,
            tr,
            kept: &mut self.kept.borrow_mut(),
            transposed: &mut self.transposed.borrow_mut(),
        });
    }
}

/// One evaluation's intermediate values, kept for the backward pass of [`super::adjoint`]: the
/// time and, per layer, the stacked input `H`, the product `P = H W1^T` and the per-unit vectors
/// `[s; b1; c]` at that time (so the backward pass does not evaluate the sigmoids again); in
/// scratch buffers (`Kept::scratch`, which no backward pass reads) a hidden layer's `P` may be
/// left unwritten. Reused between calls.
pub struct Kept<A> {
    pub(super) t: A,
    pub(super) h: Vec<AlignedVec<A>>,
    pub(super) p: Vec<AlignedVec<A>>,
    pub(super) sbc: Vec<Sbc<A>>,
    /// Whether a backward pass will read `p`: if not, the hidden layers whose element-wise
    /// work runs on their product's tiles ([`hidden_layer_into`]) do not store it.
    pub(super) for_backward: bool,
}

impl<A: Real> Default for Kept<A> {
    fn default() -> Self {
        Kept {
            t: A::zero(),
            h: Vec::new(),
            p: Vec::new(),
            sbc: Vec::new(),
            for_backward: true,
        }
    }
}

impl<A: Real> Kept<A> {
    /// Buffers for evaluations no backward pass reads (a solve's own): a hidden layer's `P` may
    /// be left unwritten.
    pub(super) fn scratch() -> Self {
        Kept {
            for_backward: false,
            ..Kept::default()
        }
    }
}

#[cfg(test)]
impl<A: Real> Kept<A> {
    /// Every element of every buffer set to NaN (a stale read then shows in the results).
    pub(super) fn poison(&mut self) {
        let nan = A::of_f64(f64::NAN);
        self.t = nan;
        for v in self.h.iter_mut().chain(&mut self.p) {
            v.fill(nan);
        }
        for v in &mut self.sbc {
            v.0.fill(nan);
        }
    }
}

#[cfg(test)]
impl<A: Real> Transposed<A> {
    /// Every element of the transposition set to NaN, with the weights it claims to be of left
    /// as they are (a cache that trusted them would then give NaN).
    pub(super) fn poison(&mut self) {
        self.w1t.fill(A::of_f64(f64::NAN));
    }
}

/// Every wide layer's `W1^T` (`in x out`, row-major, at the layer's `w1` offset), the right
/// operand of the forward products, made from the weights it was last given and made again
/// only when they change (compared bit for bit on every use, a contiguous pass over the weights
/// that costs a fraction of the strided transposition). Within a training step the weights are
/// fixed, so one transposition serves every evaluation instead of one per layer and evaluation
/// (a `64 x 64` transposition takes about 1.2 us on one core of the benchmark machine with
/// everything in cache, and a step of the benchmark configuration made 484 of them on each
/// core: two wide layers in each of the 121 evaluations of its two chunks).
#[derive(Default)]
pub struct Transposed<A> {
    /// The weights `w1t` was made from.
    from: Vec<A>,
    w1t: AlignedVec<A>,
}

impl<A: Real> Transposed<A> {
    /// `W1^T` of every layer wider than [`NARROW_OUT`] for the weights `th`, at each layer's
    /// `w1` offset (the other elements are unspecified).
    #[inline(always)]
    fn of(&mut self, layout: &Layout, th: &[A]) -> &[A] {
        // every element compared, with no early exit, so that the loop vectorises
        let same = self.from.len() == th.len()
            && self
                .from
                .iter()
                .zip(th)
                .fold(true, |same, (a, b)| same & (a.bits() == b.bits()));
        if !same {
            self.from.clear();
            self.from.extend_from_slice(th);
            self.w1t.resize(th.len(), A::zero());
            for l in layout.layers.iter().filter(|l| l.out > NARROW_OUT) {
                let (inp, wo) = (l.inp, l.out);
                let w1 = &th[l.w1..l.w1 + wo * inp];
                // w1t[c, o] = W1[o, c]
                for (c, row) in self.w1t[l.w1..l.w1 + wo * inp]
                    .chunks_exact_mut(wo)
                    .enumerate()
                {
                    for (o, x) in row.iter_mut().enumerate() {
                        *x = w1[o * inp + c];
                    }
                }
            }
        }
        &self.w1t
    }
}

/// One layer's per-unit vectors `s = sigmoid(w2 t + b2)`, `b1` and `c = w3 t`, stored as
/// `[s; b1; c]`.
#[derive(Default)]
pub struct Sbc<A>(AlignedVec<A>);

impl<A: Real> Sbc<A> {
    pub(super) fn split3(&self, w: usize) -> (&[A], &[A], &[A]) {
        let (s, rest) = self.0[..3 * w].split_at(w);
        let (b, c) = rest.split_at(w);
        (s, b, c)
    }
}

/// Layers with at most this many outputs (the last, one per data dimension) compute
/// `P = H W1^T` as [`lane_dot_rows`] (each element one dot product of `H`'s row with a row of
/// `W1`, in the lane order) instead of a general product, which runs a two-column output through
/// mostly empty register tiles. For `384 x 2 x 64` (a chunk of 128 samples with
/// the exact trace in 2-D, the chunk size of the time), 7.7 against 3.0 us in f32 and 8.0 against 5.3 us in f64, on one core
/// of the benchmark machine (AVX-512).
pub const NARROW_OUT: usize = 4;

/// `tanh` over a row, as [`tanh_slice`] (the activation of [`hidden_layer_into`]).
struct Tanh;

impl<A: Real> RowMap<A> for Tanh {
    #[inline(always)]
    fn apply(&self, row: &mut [A]) {
        tanh_slice(row);
    }
}

/// `[s; b1; c]` of layer `l` at time `t` into `out`.
fn squash_all<A: Real>(th: &[A], l: &LayerLayout, t: A, out: &mut Sbc<A>) {
    let w = l.out;
    out.0.resize(3 * w, A::zero());
    for j in 0..w {
        // s_j = sigmoid(w2_j t + b2_j)
        out.0[j] = A::one() / (A::one() + (-(th[l.w2 + j] * t + th[l.b2 + j])).exp());
        out.0[w + j] = th[l.b1 + j];
        out.0[2 * w + j] = th[l.w3 + j] * t;
    }
}

/// The stacked forward pass at `(t, y)`: `f` (`n x d`) into `f`, the trace (`n`) into `tr`,
/// keeping each layer's `H` and `P` in `kept`, with the wide layers' `W1^T` from `transposed`
/// (made again only when `th` changes). `probes` is `None` for the exact
/// trace (`k = d` unit tangents) or the `n x d` Hutchinson probes (`k = 1`).
/// Its element-wise loops (the affine maps, `tanh`, the tangents) are compiled for the CPU's
/// widest vectors ([`vectorised`]); they make no fused multiply-add and sum in a fixed order, so
/// the bits are those of the portable build. Where the product runs as outer products in
/// AVX-512 registers, a hidden layer's loops run on each tile of it there
/// ([`hidden_layer_into`]), with the same operations in the same order, so the same bits.
pub fn forward<A: Real>(pass: ForwardPass<'_, A>) {
    vectorised(pass)
}

/// The inputs and outputs of one [`forward`] pass.
pub struct ForwardPass<'a, A: Real> {
    /// The field's layers.
    pub layout: &'a Layout,
    /// The weights, laid out by `layout`.
    pub th: &'a [A],
    /// Samples.
    pub n: usize,
    /// `None` for the exact trace, or the `n x d` Hutchinson probes.
    pub probes: Option<&'a [A]>,
    /// Time.
    pub t: A,
    /// The state, `n x d`.
    pub y: &'a [A],
    /// The field's value, `n x d`, overwritten.
    pub f: &'a mut [A],
    /// The trace, `n`, overwritten.
    pub tr: &'a mut [A],
    /// Each layer's `H` and `P`, overwritten.
    pub kept: &'a mut Kept<A>,
    /// The wide layers' `W1^T`, made again when `th` changed.
    pub transposed: &'a mut Transposed<A>,
}

impl<A: Real> Kernel for ForwardPass<'_, A> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        forward_body(self)
    }
}

#[inline(always)]
fn forward_body<A: Real>(pass: ForwardPass<'_, A>) {
    let ForwardPass {
        layout,
        th,
        n,
        probes,
        t,
        y,
        f,
        tr,
        kept,
        transposed,
    } = pass;
    let d = layout.data_size;
    let k = probes.map_or(d, |_| 1);
    let rows = (1 + k) * n;
    let nl = layout.layers.len();
    kept.t = t;
    kept.h.resize_with(nl, AlignedVec::default);
    kept.p.resize_with(nl, AlignedVec::default);
    kept.sbc.resize_with(nl, Sbc::default);
    // H_0 = [y; e_1 ..; e_d] or [y; eps]
    let h0 = &mut kept.h[0];
    h0.resize(rows * d, A::zero());
    h0[..n * d].copy_from_slice(&y[..n * d]);
    match probes {
        None => {
            for q in 0..d {
                for row in h0[(1 + q) * n * d..(2 + q) * n * d].chunks_exact_mut(d) {
                    row.fill(A::zero());
                    row[q] = A::one();
                }
            }
        }
        Some(eps) => h0[n * d..2 * n * d].copy_from_slice(&eps[..n * d]),
    }
    let w1t = transposed.of(layout, th);
    for (li, l) in layout.layers.iter().enumerate() {
        let (inp, wo) = (l.inp, l.out);
        let last = li + 1 == nl;
        squash_all(th, l, t, &mut kept.sbc[li]);
        // P = H W1^T, W1[j, c] = th[w1 + j inp + c]
        let p = &mut kept.p[li];
        p.resize(rows * wo, A::zero());
        if !last && wo > NARROW_OUT {
            // a hidden layer: the product and the element-wise part below in one pass, where
            // the product is summed as outer products in registers
            kept.h[li + 1].resize(rows * wo, A::zero());
            let (below, above) = kept.h.split_at_mut(li + 1);
            let (sv, bv, cv) = kept.sbc[li].split3(wo);
            if hidden_layer_into(
                HiddenLayer {
                    n,
                    rows,
                    inp,
                    out: wo,
                    h_in: &below[li],
                    wt: &w1t[l.w1..l.w1 + inp * wo],
                    b: bv,
                    s: sv,
                    c: cv,
                    p: kept.for_backward.then_some(p),
                    h_out: &mut above[0],
                },
                &Tanh,
            ) {
                continue;
            }
        }
        let p = &mut kept.p[li];
        if wo <= NARROW_OUT {
            // the last layer's few outputs: P = H W1^T as dot products in the lane order
            lane_dot_rows(
                &kept.h[li][..rows * inp],
                &th[l.w1..l.w1 + wo * inp],
                inp,
                p,
            );
        } else {
            // W1^T row-major (in x out), so that both operands are read by rows: the product
            // is then a sum of outer products in registers (`gemm_into`'s path for such
            // operands), with the bits of the strided call
            gemm_into(
                Product {
                    m: rows,
                    n: wo,
                    k: inp,
                    lhs: Operand {
                        data: &kept.h[li],
                        offset: 0,
                        rs: inp,
                        cs: 1,
                    },
                    rhs: Operand {
                        data: w1t,
                        offset: l.w1,
                        rs: wo,
                        cs: 1,
                    },
                },
                Dest {
                    data: p,
                    offset: 0,
                    rs: wo,
                },
            );
        }
        let p = &kept.p[li];
        let (sv, bv, cv) = kept.sbc[li].split3(wo);
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
        hn.resize(rows * wo, A::zero());
        let (hp, ht) = hn.split_at_mut(n * wo);
        for (hr, pr) in hp.chunks_exact_mut(wo).zip(p.chunks_exact(wo)) {
            for j in 0..wo {
                hr[j] = (pr[j] + bv[j]) * sv[j] + cv[j];
            }
            tanh_slice(hr);
        }
        for (r, (tr_, pr)) in ht
            .chunks_exact_mut(wo)
            .zip(p[n * wo..rows * wo].chunks_exact(wo))
            .enumerate()
        {
            let hr = &hp[(r % n) * wo..(r % n + 1) * wo];
            for j in 0..wo {
                tr_[j] = (A::one() - hr[j] * hr[j]) * (pr[j] * sv[j]);
            }
        }
    }
}

impl<A: Real> VectorField<A> for BlockField<'_, A> {
    fn eval(&self, t: A, z: &[A], dz: &mut [A]) {
        let nd = self.n * self.layout.data_size;
        let (f, tr) = dz.split_at_mut(nd);
        self.eval_parts(t, &z[..nd], f, tr);
    }
    fn dim(&self) -> Option<usize> {
        Some(self.n * (self.layout.data_size + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cnf::{CnfConfig, CnfParams};

    /// `[f; tr]` of one forward pass with the weights `th`, as bits.
    fn eval(p: &CnfParams<f64>, th: &[f64], transposed: &mut Transposed<f64>) -> Vec<u64> {
        let (n, d) = (3, p.layout.data_size);
        let y: Vec<f64> = (0..n * d).map(|i| 0.3 * i as f64 - 0.7).collect();
        let (mut f, mut tr) = (vec![0.0; n * d], vec![0.0; n]);
        let mut kept = Kept::default();
        forward(ForwardPass {
            layout: &p.layout,
            th,
            n,
            probes: None,
            t: 0.2,
            y: &y,
            f: &mut f,
            tr: &mut tr,
            kept: &mut kept,
            transposed,
        });
        f.iter().chain(&tr).map(|v| v.to_bits()).collect()
    }

    #[test]
    fn the_transposed_weights_are_made_again_when_any_weight_changes() {
        let cfg = CnfConfig {
            width: 8,
            depth: 2,
            ..CnfConfig::default()
        };
        let p = CnfParams::<f64>::init(cfg, 3).unwrap();
        let before = p.blocks[0].clone();
        // a weight of the last wide layer (a cache keyed on the length, or on the first
        // layer's weights only, would keep the stale transposition)
        let wide = p
            .layout
            .layers
            .iter()
            .rfind(|l| l.out > NARROW_OUT)
            .unwrap();
        let mut after = before.clone();
        after[wide.w1 + wide.inp * wide.out - 1] += 0.25;
        // one cache through both weights, against a fresh cache for each
        let mut cache = Transposed::default();
        let first = eval(&p, &before, &mut cache);
        let second = eval(&p, &after, &mut cache);
        let again = eval(&p, &before, &mut cache);
        assert_eq!(first, eval(&p, &before, &mut Transposed::default()));
        assert_eq!(second, eval(&p, &after, &mut Transposed::default()));
        assert_eq!(again, first);
        assert_ne!(first, second, "the changed weight must change the field");
    }
}
