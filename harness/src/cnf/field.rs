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
//! the estimate is `eps_i^T J eps_i` ([`TraceEstimator::Hutchinson`], one tangent). All `n`
//! samples (and all tangents, stacked as `k*n` rows) go through each layer as one matrix
//! product. The taped twin ([`super::taped`]) computes the same maths on dfdx's tape.
//!
//! Guarantees: every element of `dz` is written; finite inputs and weights give finite outputs
//! (`tanh` and `sigmoid` are bounded); the field does not read `delta`.
//!
//! # References
//! - W. Grathwohl, R. T. Q. Chen, J. Bettencourt, I. Sutskever, D. Duvenaud, "FFJORD:
//!   Free-form continuous dynamics for scalable reversible generative models", ICLR 2019.
//! - P. Kidger, diffrax 0.7.2, `examples/continuous_normalising_flow.ipynb`.
//!
//! [`TraceEstimator::Exact`]: super::TraceEstimator::Exact
//! [`TraceEstimator::Hutchinson`]: super::TraceEstimator::Hutchinson

use super::config::Layout;
use crate::backend::{gemm_into, Operand, Real};
use crate::ode::VectorField;
use std::cell::RefCell;

/// Where the tangents start: the unit vectors (exact trace) or one probe per sample.
#[derive(Debug, Clone, Copy)]
pub enum Tangents<'a, A> {
    Exact,
    /// `n x d`, row-major.
    Probes(&'a [A]),
}

/// One block's augmented field over a batch of `n` samples.
pub struct BlockField<'a, A> {
    pub layout: &'a Layout,
    pub theta: &'a [A],
    pub n: usize,
    pub tangents: Tangents<'a, A>,
    work: RefCell<Work<A>>,
}

/// Reusable buffers of [`eval_block`] (grown on first use, then reused).
#[derive(Default)]
pub struct Work<A> {
    h: Vec<A>,
    u: Vec<A>,
    dh: Vec<A>,
    du: Vec<A>,
}

impl<'a, A: Real> BlockField<'a, A> {
    pub fn new(layout: &'a Layout, theta: &'a [A], n: usize, tangents: Tangents<'a, A>) -> Self {
        Self {
            layout,
            theta,
            n,
            tangents,
            work: RefCell::new(Work::default()),
        }
    }

    /// `f(t, y)` into `f` (`n x d`) and the trace into `tr` (`n`).
    pub fn eval_parts(&self, t: A, y: &[A], f: &mut [A], tr: &mut [A]) {
        let mut w = self.work.borrow_mut();
        eval_block(
            self.layout,
            self.theta,
            self.n,
            self.tangents,
            &mut w,
            t,
            y,
            f,
            tr,
        );
    }
}

/// The field of one block: `f(t, y)` into `f` (`n x d`) and the trace into `tr` (`n`), with
/// parameters `th` in `layout` order (see the module docs for the maths).
#[allow(clippy::too_many_arguments)]
pub fn eval_block<A: Real>(
    layout: &Layout,
    th: &[A],
    n: usize,
    tangents: Tangents<'_, A>,
    w: &mut Work<A>,
    t: A,
    y: &[A],
    f: &mut [A],
    tr: &mut [A],
) {
    {
        let d = layout.data_size;
        let k = match tangents {
            Tangents::Exact => d,
            Tangents::Probes(_) => 1,
        };
        let wmax = layout.max_width();
        for buf in [&mut w.h, &mut w.u] {
            buf.resize(n * wmax, A::zero());
        }
        for buf in [&mut w.dh, &mut w.du] {
            buf.resize(k * n * wmax, A::zero());
        }
        // h = y, dh = e_j (block j) or eps
        w.h[..n * d].copy_from_slice(&y[..n * d]);
        match tangents {
            Tangents::Exact => {
                for j in 0..d {
                    for i in 0..n {
                        let row = &mut w.dh[(j * n + i) * d..(j * n + i + 1) * d];
                        row.fill(A::zero());
                        row[j] = A::one();
                    }
                }
            }
            Tangents::Probes(eps) => w.dh[..n * d].copy_from_slice(&eps[..n * d]),
        }
        let nl = layout.layers.len();
        for (li, l) in layout.layers.iter().enumerate() {
            let (inp, out) = (l.inp, l.out);
            // W1^T as a strided operand: element (c, j) = W1[j, c] = th[w1 + j*inp + c]
            let w1t = Operand {
                data: th,
                offset: l.w1,
                rs: 1,
                cs: inp,
            };
            let lhs = |data| Operand {
                data,
                offset: 0,
                rs: inp,
                cs: 1,
            };
            gemm_into(n, out, inp, &mut w.u, 0, out, lhs(&w.h), w1t);
            gemm_into(k * n, out, inp, &mut w.du, 0, out, lhs(&w.dh), w1t);
            let last = li + 1 == nl;
            for j in 0..out {
                // s_j = sigmoid(w2_j t + b2_j), c_j = w3_j t
                let s = A::one() / (A::one() + (-(th[l.w2 + j] * t + th[l.b2 + j])).exp());
                let c = th[l.w3 + j] * t;
                let b = th[l.b1 + j];
                for i in 0..n {
                    let u = &mut w.u[i * out + j];
                    *u = (*u + b) * s + c;
                }
                for r in 0..k * n {
                    w.du[r * out + j] *= s;
                }
            }
            if last {
                break;
            }
            // h' = tanh(u), dh' = (1 - h'^2) du (row r of tangent block q uses sample r % n)
            for i in 0..n * out {
                w.h[i] = w.u[i].tanh();
            }
            for q in 0..k {
                for i in 0..n {
                    for j in 0..out {
                        let h = w.h[i * out + j];
                        let r = (q * n + i) * out + j;
                        w.dh[r] = (A::one() - h * h) * w.du[r];
                    }
                }
            }
        }
        f[..n * d].copy_from_slice(&w.u[..n * d]);
        for (i, tri) in tr.iter_mut().enumerate().take(n) {
            *tri = match tangents {
                // sum_j (J e_j)_j: row i of tangent block j, column j
                Tangents::Exact => (0..d).map(|j| w.du[(j * n + i) * d + j]).sum(),
                // eps_i . (J eps_i)
                Tangents::Probes(eps) => (0..d).map(|j| eps[i * d + j] * w.du[i * d + j]).sum(),
            };
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
