//! Laws of the continuous normalising flow: closed forms on linear fields, invertibility and
//! normalisation of the density, the trace estimators, loss gradients, and training that traces
//! once with flat memory. Each law is a run (`*_with`, taking the implementation under test) and
//! a verdict; the tests feed the runs re-created bugs (`crate::mutants::cnf_flow`: wrong block
//! order, a lost or flipped log-density change, a detached trace; biased probes; a static step
//! counter) and watch the verdicts fail.

use super::{check_property, Family, Law};
use crate::backend::Real;
use crate::cnf::data::Dataset;
use crate::cnf::field::{BlockField, Tangents};
use crate::cnf::flow::{self, TapedField};
use crate::cnf::train::{TrainConfig, TrainState, Trainer};
use crate::cnf::{CnfConfig, CnfParams, TraceEstimator};
use crate::ode::grad::GradMode;
use crate::ode::{Solver, VectorField};
use crate::tolerance;
use proptest::prelude::*;

/// A log-likelihood under test: `(params, points) -> log p` per point.
pub type Ll = fn(&CnfParams<f64>, &[f64]) -> crate::reference::Result<Vec<f64>>;

/// The implementation under test.
pub fn reference_ll(p: &CnfParams<f64>, x: &[f64]) -> crate::reference::Result<Vec<f64>> {
    flow::log_likelihood(p, x, None)
}

// ----------------------------------------------------------------------------------------------
// Linear field: closed form.

/// A depth-0 flow whose blocks are linear: `u = W1 y * sigmoid(b2)` with `b1 = w2 = w3 = 0`, so
/// block `b` is `f(z) = A_b z` with `A_b = sigmoid(b2) * W1` (row-wise scaling).
#[derive(Debug, Clone)]
pub struct LinearCase {
    /// Data dimension, 1 to 3.
    pub d: usize,
    /// Per block: `W1` (d x d) and `b2` (d).
    pub blocks: Vec<(Vec<f64>, Vec<f64>)>,
    /// Points, row-major `n x d` (two points).
    pub x: Vec<f64>,
    /// End time of every block (start 0, constant step `t1 / 10`), in `[0.2, 1)`.
    pub t1: f64,
}

/// Random [`LinearCase`]s: `d` in 1..=3, 1 or 2 blocks, `W1` entries in `[-1, 1)`, `b2` in `[-2,
/// 2)`.
pub fn linear_case() -> impl Strategy<Value = LinearCase> {
    (1usize..=3, 1usize..=2, 0.2f64..1.0).prop_flat_map(|(d, nb, t1)| {
        (
            prop::collection::vec(
                (
                    prop::collection::vec(-1.0f64..1.0, d * d),
                    prop::collection::vec(-2.0f64..2.0, d),
                ),
                nb,
            ),
            prop::collection::vec(-3.0f64..3.0, 2 * d),
        )
            .prop_map(move |(blocks, x)| LinearCase { d, blocks, x, t1 })
    })
}

impl LinearCase {
    /// The Tsit5, exact-trace CNF with these linear blocks (every other weight 0).
    pub fn params(&self) -> CnfParams<f64> {
        let cfg = CnfConfig {
            data_size: self.d,
            width: 1,
            depth: 0,
            blocks: self.blocks.len(),
            t0: 0.0,
            t1: self.t1,
            dt0: self.t1 / 10.0,
            solver: Solver::Tsit5,
            trace: TraceEstimator::Exact,
        };
        let layout = crate::cnf::Layout::new(&cfg);
        let l = layout.layers[0];
        let blocks = self
            .blocks
            .iter()
            .map(|(w1, b2)| {
                let mut th = vec![0.0; layout.len];
                th[l.w1..l.w1 + w1.len()].copy_from_slice(w1);
                th[l.b2..l.b2 + b2.len()].copy_from_slice(b2);
                th
            })
            .collect();
        CnfParams::from_blocks(cfg, blocks).expect("valid linear case")
    }
    /// `A_b = diag(sigmoid(b2)) W1`.
    pub fn matrix(&self, b: usize) -> Vec<f64> {
        let (w1, b2) = &self.blocks[b];
        let d = self.d;
        (0..d * d)
            .map(|k| w1[k] / (1.0 + (-b2[k / d]).exp()))
            .collect()
    }
}

fn matmul(a: &[f64], b: &[f64], d: usize) -> Vec<f64> {
    let mut c = vec![0.0; d * d];
    for i in 0..d {
        for k in 0..d {
            for j in 0..d {
                c[i * d + j] += a[i * d + k] * b[k * d + j];
            }
        }
    }
    c
}

/// `exp(M)` by scaling and squaring with a degree-20 Taylor polynomial (`|M|/2^s <= 1/2`, series
/// remainder below `2^-20 / 20! ~ 4e-25`): the closed form's only approximation.
pub fn expm(m: &[f64], d: usize) -> Vec<f64> {
    let norm: f64 = m.iter().map(|v| v.abs()).sum();
    let s = if norm > 0.5 {
        (norm / 0.5).log2().ceil() as i32
    } else {
        0
    };
    let scaled: Vec<f64> = m.iter().map(|v| v / 2f64.powi(s)).collect();
    let mut term: Vec<f64> = (0..d * d).map(|k| f64::from(k % (d + 1) == 0)).collect();
    let mut sum = term.clone();
    for k in 1..=20 {
        term = matmul(&term, &scaled, d)
            .into_iter()
            .map(|v| v / k as f64)
            .collect();
        for (a, t) in sum.iter_mut().zip(&term) {
            *a += t;
        }
    }
    for _ in 0..s {
        sum = matmul(&sum, &sum, d);
    }
    sum
}

/// Solve `M y = x` by Gaussian elimination with partial pivoting.
fn solve_linear(m: &[f64], x: &[f64], d: usize) -> Vec<f64> {
    let mut a = m.to_vec();
    let mut b = x.to_vec();
    for c in 0..d {
        let p = (c..d)
            .max_by(|&i, &j| a[i * d + c].abs().total_cmp(&a[j * d + c].abs()))
            .unwrap_or(c);
        for k in 0..d {
            a.swap(c * d + k, p * d + k);
        }
        b.swap(c, p);
        for r in c + 1..d {
            let f = a[r * d + c] / a[c * d + c];
            for k in c..d {
                a[r * d + k] -= f * a[c * d + k];
            }
            b[r] -= f * b[c];
        }
    }
    let mut y = vec![0.0; d];
    for r in (0..d).rev() {
        let s: f64 = (r + 1..d).map(|k| a[r * d + k] * y[k]).sum();
        y[r] = (b[r] - s) / a[r * d + r];
    }
    y
}

/// Linear field: `log p(x) = log N(M^-1 x) - T sum_b tr(A_b)` with `M = e^{A_0 T} ... e^{A_{B-1} T}`
/// (sampling applies block 0 first), and the trace term alone is `-T sum_b tr(A_b)`.
pub fn linear_closed_form_with(c: &LinearCase, ll: Ll) -> Result<(), String> {
    let p = c.params();
    let d = c.d;
    let got = ll(&p, &c.x).map_err(|e| e.to_string())?;
    // M = E_{B-1} ... E_0 maps z to x (block 0 acts first)
    let mut m: Vec<f64> = (0..d * d).map(|k| f64::from(k % (d + 1) == 0)).collect();
    let mut trace = 0.0;
    for b in 0..c.blocks.len() {
        let a = c.matrix(b);
        trace += (0..d).map(|i| a[i * d + i]).sum::<f64>();
        let e = expm(&a.iter().map(|v| v * c.t1).collect::<Vec<_>>(), d);
        m = matmul(&e, &m, d);
    }
    let tol = tolerance::CNF_LINEAR;
    let points: Vec<&[f64]> = c.x.chunks(d).collect();
    for (i, (gi, xi)) in super::paired("log p per sample", &got, &points)?.enumerate() {
        let z = solve_linear(&m, xi, d);
        let want = flow::log_normal(&z) - c.t1 * trace;
        if !tol.close(*gi, want) {
            return Err(format!(
                "sample {i}: log p = {gi:.12e}, closed form {want:.12e} (trace term {:.6e})",
                -c.t1 * trace
            ));
        }
    }
    Ok(())
}

// ----------------------------------------------------------------------------------------------
// Random small models.

/// A small random model and points.
#[derive(Debug, Clone)]
pub struct ModelCase {
    /// Data dimension 1-3, width 1-8, depth 0-2, 1-2 blocks, other settings the defaults.
    pub cfg: CnfConfig,
    /// Seed of the initial weights.
    pub seed: u64,
    /// Multiplies the initial weights (1 = equinox's scale).
    pub scale: f64,
    /// Points, row-major `n x d`, coordinates in `[-2.5, 2.5)`.
    pub x: Vec<f64>,
}

/// Random [`ModelCase`]s with 1 to `max_points` points and weight scale in `[0.3, 1.5)`.
pub fn model_case(max_points: usize) -> impl Strategy<Value = ModelCase> {
    (
        1usize..=3,
        1usize..=8,
        0usize..=2,
        1usize..=2,
        any::<u64>(),
        0.3f64..1.5,
        1usize..=max_points,
    )
        .prop_flat_map(|(d, width, depth, blocks, seed, scale, n)| {
            prop::collection::vec(-2.5f64..2.5, n * d).prop_map(move |x| ModelCase {
                cfg: CnfConfig {
                    data_size: d,
                    width,
                    depth,
                    blocks,
                    ..CnfConfig::default()
                },
                seed,
                scale,
                x,
            })
        })
}

impl ModelCase {
    /// The weights: `CnfParams::init(cfg, seed)` multiplied by `scale`.
    pub fn params(&self) -> CnfParams<f64> {
        let mut p = CnfParams::<f64>::init(self.cfg, self.seed).expect("valid case");
        for b in &mut p.blocks {
            for v in b.iter_mut() {
                *v *= self.scale;
            }
        }
        p
    }
}

/// A sampler under test: `(params, z)` to `(x, log p(x))` for base points `z` (row-major `n x d`).
pub type Sampler = fn(&CnfParams<f64>, &[f64]) -> crate::reference::Result<(Vec<f64>, Vec<f64>)>;

/// The implementation under test.
pub fn reference_sample(
    p: &CnfParams<f64>,
    z: &[f64],
) -> crate::reference::Result<(Vec<f64>, Vec<f64>)> {
    flow::sample(p, z, None)
}

/// Sampling then evaluating: `log p` from the forward solve equals the backward solve's at the
/// sample, within [`tolerance::CNF_ROUND_TRIP`] (the two constant-step solves are inverse only
/// up to the method's truncation error).
pub fn sample_then_evaluate_with(c: &ModelCase, sample: Sampler, ll: Ll) -> Result<(), String> {
    let p = c.params();
    let (x, lp_fwd) = sample(&p, &c.x).map_err(|e| e.to_string())?;
    let lp_bwd = ll(&p, &x).map_err(|e| e.to_string())?;
    let tol = tolerance::CNF_ROUND_TRIP;
    for (i, (a, b)) in super::paired("log p evaluated", &lp_bwd, &lp_fwd)?.enumerate() {
        if !tol.close(*b, *a) {
            return Err(format!(
                "sample {i}: log p at sampling {a:.12e}, evaluated {b:.12e} (diff {:.2e})",
                (a - b).abs()
            ));
        }
    }
    Ok(())
}

/// Half-width of the square over which the density is integrated, and the grid size.
pub const GRID_HALF_WIDTH: f64 = 7.0;
/// Cells per side of the integration grid (cell width `2 * GRID_HALF_WIDTH / GRID_CELLS`).
pub const GRID_CELLS: usize = 140;

/// The density of a small 2-D model sums to 1 over a grid on `[-7, 7]^2` within
/// [`tolerance::CNF_NORMALISATION`] (midpoint rule).
pub fn density_normalised_with(c: &ModelCase, ll: Ll) -> Result<(), String> {
    let cfg = CnfConfig {
        data_size: 2,
        ..c.cfg
    };
    let p = ModelCase { cfg, ..c.clone() }.params();
    let n = GRID_CELLS;
    let h = 2.0 * GRID_HALF_WIDTH / n as f64;
    let mut pts = Vec::with_capacity(2 * n * n);
    for r in 0..n {
        for k in 0..n {
            pts.push(-GRID_HALF_WIDTH + (k as f64 + 0.5) * h);
            pts.push(-GRID_HALF_WIDTH + (r as f64 + 0.5) * h);
        }
    }
    let lp = ll(&p, &pts).map_err(|e| e.to_string())?;
    let mass: f64 = lp.iter().map(|v| v.exp()).sum::<f64>() * h * h;
    if (mass - 1.0).abs() > tolerance::CNF_NORMALISATION {
        return Err(format!(
            "density integrates to {mass:.6} over [-{GRID_HALF_WIDTH}, {GRID_HALF_WIDTH}]^2"
        ));
    }
    Ok(())
}

// ----------------------------------------------------------------------------------------------
// Trace estimators.

/// `tr(df/dy)` of block 0 at every point, as [`BlockField`] computes it (exact tangents).
pub fn exact_trace(p: &CnfParams<f64>, t: f64, y: &[f64]) -> Vec<f64> {
    trace_with_tangents(p, t, y, Tangents::Exact)
}

fn trace_with_tangents(
    p: &CnfParams<f64>,
    t: f64,
    y: &[f64],
    tangents: Tangents<'_, f64>,
) -> Vec<f64> {
    let n = y.len() / p.cfg.data_size;
    let field = BlockField::new(&p.layout, &p.blocks[0], n, tangents);
    let mut f = vec![0.0; y.len()];
    let mut tr = vec![0.0; n];
    field.eval_parts(t, y, &mut f, &mut tr);
    tr
}

/// Central finite-difference trace of block 0's `f` at every point.
pub fn fd_trace(p: &CnfParams<f64>, t: f64, y: &[f64]) -> Vec<f64> {
    let d = p.cfg.data_size;
    let n = y.len() / d;
    let field = BlockField::new(&p.layout, &p.blocks[0], n, Tangents::Exact);
    let f_at = |yy: &[f64]| {
        let mut f = vec![0.0; yy.len()];
        let mut tr = vec![0.0; n];
        field.eval_parts(t, yy, &mut f, &mut tr);
        f
    };
    let mut tr = vec![0.0; n];
    for j in 0..d {
        let h = 1e-6;
        let mut yp = y.to_vec();
        let mut ym = y.to_vec();
        for i in 0..n {
            yp[i * d + j] += h;
            ym[i * d + j] -= h;
        }
        let (fp, fm) = (f_at(&yp), f_at(&ym));
        for i in 0..n {
            tr[i] += (fp[i * d + j] - fm[i * d + j]) / (2.0 * h);
        }
    }
    tr
}

type TraceFn = fn(&CnfParams<f64>, f64, &[f64]) -> Vec<f64>;

/// The exact trace equals the finite-difference trace of the Jacobian
/// ([`tolerance::GRAD_FD`]'s derivation: one difference quotient of an O(1) function).
pub fn exact_trace_matches_fd_with(c: &ModelCase, trace: TraceFn) -> Result<(), String> {
    let p = c.params();
    for t in [p.cfg.t0, 0.5 * (p.cfg.t0 + p.cfg.t1), p.cfg.t1] {
        let got = trace(&p, t, &c.x);
        let want = fd_trace(&p, t, &c.x);
        for (i, (g, w)) in super::paired("trace", &got, &want)?.enumerate() {
            if !tolerance::GRAD_FD.close(*g, *w) {
                return Err(format!(
                    "point {i} at t = {t}: trace {g:.12e}, finite differences {w:.12e}"
                ));
            }
        }
    }
    Ok(())
}

/// Probes per Hutchinson test and the number of standard errors allowed.
pub const HUTCHINSON_PROBES: usize = 4000;
pub use crate::tolerance::HUTCHINSON_SIGMAS;

/// A probe generator: `(seed, count, d) -> count x d` probes.
pub type ProbeGen = fn(u64, usize, usize) -> Vec<f64>;

/// Gaussian probes (the reference's).
pub fn gaussian_probes(seed: u64, count: usize, d: usize) -> Vec<f64> {
    let k = crate::cnf::random::key(seed, 0x9B0B, 0);
    (0..count * d)
        .map(|i| crate::cnf::random::normal(k, i as u64))
        .collect()
}

/// Rademacher probes (the reference's).
pub fn rademacher_probes(seed: u64, count: usize, d: usize) -> Vec<f64> {
    let k = crate::cnf::random::key(seed, 0x9B0B, 0);
    (0..count * d)
        .map(|i| crate::cnf::random::rademacher(k, i as u64))
        .collect()
}

/// Hutchinson is unbiased: at one point, the mean of `eps^T J eps` over
/// [`HUTCHINSON_PROBES`] probes is within [`HUTCHINSON_SIGMAS`] standard errors (sample standard
/// deviation / sqrt(M), plus 1e-9 for the zero-variance case of a diagonal `J`) of the exact
/// trace. Both probe kinds.
pub fn hutchinson_unbiased_with(c: &ModelCase, probes: [ProbeGen; 2]) -> Result<(), String> {
    let p = c.params();
    let d = p.cfg.data_size;
    let y0 = &c.x[..d];
    let exact = exact_trace(&p, 0.3, y0)[0];
    let m = HUTCHINSON_PROBES;
    let y: Vec<f64> = (0..m).flat_map(|_| y0.iter().copied()).collect();
    for (kind, gen) in ["gaussian", "rademacher"].iter().zip(probes) {
        let eps = gen(c.seed, m, d);
        let est = trace_with_tangents(&p, 0.3, &y, Tangents::Probes(&eps));
        let mean = est.iter().sum::<f64>() / m as f64;
        let var = est.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (m - 1) as f64;
        let se = (var / m as f64).sqrt();
        if (mean - exact).abs() > HUTCHINSON_SIGMAS * se + 1e-9 {
            return Err(format!(
                "{kind}: mean of {m} estimates {mean:.6e} vs exact {exact:.6e} ({:.1} standard errors of {se:.2e})",
                (mean - exact).abs() / se
            ));
        }
    }
    Ok(())
}

// ----------------------------------------------------------------------------------------------
// Loss gradients.

/// A loss-and-gradient under test computing in `A` (the signature of [`flow::loss_and_grad`]).
pub type TypedLossGradFn<A> =
    fn(&CnfParams<A>, &[A], Option<&[A]>, GradMode) -> crate::reference::Result<flow::LossGrad<A>>;

/// A loss-and-gradient under test in f64.
pub type LossGradFn = TypedLossGradFn<f64>;

/// Parameters checked per block (spread over every layer).
pub const FD_PARAMS_PER_BLOCK: usize = 24;

/// `dL/dtheta` (full tape and checkpointed, bit-identical) matches central finite differences
/// of `L = -mean log p` within [`tolerance::GRAD_FD`].
pub fn loss_gradient_matches_fd_with(c: &ModelCase, lg: LossGradFn) -> Result<(), String> {
    let p = c.params();
    let n = (c.x.len() / p.cfg.data_size) as f64;
    let full = lg(&p, &c.x, None, GradMode::FullTape).map_err(|e| e.to_string())?;
    let ckpt = lg(
        &p,
        &c.x,
        None,
        GradMode::Checkpointed {
            checkpoints: Some(3),
        },
    )
    .map_err(|e| e.to_string())?;
    if full.grads != ckpt.grads {
        return Err("checkpointed gradient differs from the full tape's".into());
    }
    let loss = |q: &CnfParams<f64>| -> Result<f64, String> {
        let lp = flow::log_likelihood(q, &c.x, None).map_err(|e| e.to_string())?;
        Ok(-lp.iter().sum::<f64>() / n)
    };
    for b in 0..p.cfg.blocks {
        let len = p.layout.len;
        let stride = len.div_ceil(FD_PARAMS_PER_BLOCK).max(1);
        for i in (0..len).step_by(stride) {
            let h = 1e-6 * p.blocks[b][i].abs().max(1.0);
            let mut pp = p.clone();
            pp.blocks[b][i] += h;
            let mut pm = p.clone();
            pm.blocks[b][i] -= h;
            let fd = (loss(&pp)? - loss(&pm)?) / (2.0 * h);
            let g = full.grads[b][i];
            if !tolerance::GRAD_FD.close(g, fd) {
                return Err(format!(
                    "block {b} parameter {i}: gradient {g:.10e}, finite differences {fd:.10e}"
                ));
            }
        }
    }
    Ok(())
}

/// A model case for comparing two ways of differentiating the loss: with `tiles > 1` the batch
/// is the case's points repeated (shifted) past [`flow::GRAD_CHUNK`], so several chunks are summed;
/// `hutchinson` switches to the Hutchinson trace with Gaussian probes.
#[derive(Debug, Clone)]
pub struct VjpCase {
    /// The model and its points.
    pub model: ModelCase,
    /// 1: the case's points as they are; 2: repeated (shifted) past [`flow::GRAD_CHUNK`] points.
    pub tiles: usize,
    /// Use the Hutchinson trace with Gaussian probes (else the exact trace).
    pub hutchinson: bool,
}

/// Random [`VjpCase`]s of up to 6 points.
pub fn vjp_case() -> impl Strategy<Value = VjpCase> {
    (
        model_case(6),
        prop::sample::select(vec![1usize, 2]),
        any::<bool>(),
    )
        .prop_map(|(model, tiles, hutchinson)| VjpCase {
            model,
            tiles,
            hutchinson,
        })
}

impl VjpCase {
    /// The parameters, the batch and the probes (if Hutchinson).
    pub fn inputs(&self) -> (CnfParams<f64>, Vec<f64>, Option<Vec<f64>>) {
        let mut p = self.model.params();
        let d = p.cfg.data_size;
        let mut x = self.model.x.clone();
        if self.tiles > 1 {
            let n0 = x.len() / d;
            let reps = (flow::GRAD_CHUNK + 1).div_ceil(n0) + 1;
            x = (0..reps * n0 * d)
                .map(|i| self.model.x[i % (n0 * d)] + 0.01 * (i / (n0 * d)) as f64)
                .collect();
        }
        let probes = if self.hutchinson {
            p.cfg.trace = TraceEstimator::Hutchinson(crate::cnf::Probe::Gaussian);
            Some(gaussian_probes(self.model.seed, x.len() / d, d))
        } else {
            None
        };
        (p, x, probes)
    }
}

/// The hand-written VJP ([`crate::cnf::adjoint`]) and the tape ([`crate::cnf::taped`]) give the
/// same loss and `dL/dtheta` within [`tolerance::CNF_MANUAL_VJP`], exact and Hutchinson traces,
/// one chunk and several.
pub fn hand_vjp_matches_tape_with(c: &VjpCase, hand: LossGradFn) -> Result<(), String> {
    let (p, x, probes) = c.inputs();
    let mode = GradMode::FullTape;
    let got = hand(&p, &x, probes.as_deref(), mode).map_err(|e| e.to_string())?;
    let want =
        flow::loss_and_grad_on_tape(&p, &x, probes.as_deref(), mode).map_err(|e| e.to_string())?;
    loss_grad_close(
        &got,
        &want,
        tolerance::CNF_MANUAL_VJP,
        ("hand-written VJP", "on the tape"),
    )
}

/// `got` is within `tol` of `want`: the loss by [`tolerance::Tol::close`], each gradient entry
/// scale-aware, `|g - w| <= atol + rtol max(s_b, |w|)` with `s_b` the largest `|w|` of its block
/// (a gradient entry's rounding error follows the block's scale, not its own size). `names`
/// label the two sides in the message.
fn loss_grad_close<A: Real>(
    got: &flow::LossGrad<A>,
    want: &flow::LossGrad<f64>,
    tol: tolerance::Tol,
    (gname, wname): (&str, &str),
) -> Result<(), String> {
    let loss = got.loss.as_f64();
    if !tol.close(loss, want.loss) {
        return Err(format!("loss {loss:.15e}, {wname} {:.15e}", want.loss));
    }
    for (b, (g, w)) in
        super::paired(&format!("{gname} gradient blocks"), &got.grads, &want.grads)?.enumerate()
    {
        let scale = w.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for (i, (gi, &wi)) in super::paired(&format!("{gname} block {b}"), g, w)?.enumerate() {
            let gi = gi.as_f64();
            if (gi - wi).abs() > tol.atol + tol.rtol * scale.max(wi.abs()) {
                return Err(format!(
                    "block {b} parameter {i}: {gname} {gi:.15e}, {wname} {wi:.15e}"
                ));
            }
        }
    }
    Ok(())
}

/// The values of `v` rounded to f32 and widened back (exact), so that an f32 and an f64
/// computation start from the same numbers.
fn f32_grid(v: &[f64]) -> Vec<f64> {
    v.iter().map(|&x| x as f32 as f64).collect()
}

/// The loss and `dL/dtheta` computed in f32 (`lg32`) match [`flow::loss_and_grad`] in f64 on
/// the same weights, batch and probes (the case's, rounded to f32 so that both sides start
/// from the same numbers: only the arithmetic differs) within
/// [`tolerance::cnf_loss_grad`]`(F32)`, exact and Hutchinson traces, one chunk and several.
pub fn f32_loss_grad_matches_f64_with(
    c: &VjpCase,
    lg32: TypedLossGradFn<f32>,
) -> Result<(), String> {
    let (p, x, probes) = c.inputs();
    let p32 = p.cast::<f32>();
    let (x, probes) = (f32_grid(&x), probes.as_deref().map(f32_grid));
    let narrow = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
    let mode = GradMode::FullTape;
    let want = flow::loss_and_grad(&p32.cast::<f64>(), &x, probes.as_deref(), mode)
        .map_err(|e| e.to_string())?;
    let got = lg32(
        &p32,
        &narrow(&x),
        probes.as_deref().map(narrow).as_deref(),
        mode,
    )
    .map_err(|e| e.to_string())?;
    loss_grad_close(
        &got,
        &want,
        tolerance::cnf_loss_grad(crate::backend::DType::F32),
        ("f32", "f64"),
    )
}

// ----------------------------------------------------------------------------------------------
// Training: trace once, flat memory.

/// A small training run.
#[derive(Debug, Clone, Copy)]
pub struct TrainCase {
    /// Training steps, 2 to 5.
    pub steps: usize,
    /// Seed of weights, batches and probes.
    pub seed: u64,
    /// Hidden width, 1 to 6 (depth 1, one block, two-moons data).
    pub width: usize,
    /// Batch size, 1 to 24.
    pub batch: usize,
    /// Rademacher Hutchinson trace instead of the exact trace.
    pub hutchinson: bool,
    /// Checkpointed gradients (default budget) instead of the full tape.
    pub checkpointed: bool,
}

/// Random [`TrainCase`]s.
pub fn train_case() -> impl Strategy<Value = TrainCase> {
    (
        2usize..=5,
        any::<u64>(),
        1usize..=6,
        1usize..=24,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(steps, seed, width, batch, hutchinson, checkpointed)| TrainCase {
                steps,
                seed,
                width,
                batch,
                hutchinson,
                checkpointed,
            },
        )
}

/// What the training laws step: the reference [`Trainer`], or code that stages the same step
/// differently, training in `A` (f32 or f64; f64 unless named).
pub trait TrainSubject<A: Real = f64> {
    /// Fresh state.
    fn init(&self) -> crate::reference::Result<TrainState<A>>;
    /// One step: `(new state, loss before the update)`.
    fn step(&mut self, state: &TrainState<A>) -> crate::reference::Result<(TrainState<A>, f64)>;
    /// Traces (specialisations) so far.
    fn traces(&self) -> usize;
    /// Plans (compiled steps) the subject holds now.
    fn plans(&self) -> usize;
}

impl<A: Real> TrainSubject<A> for Trainer<A> {
    fn init(&self) -> crate::reference::Result<TrainState<A>> {
        Trainer::init(self)
    }
    fn step(&mut self, state: &TrainState<A>) -> crate::reference::Result<(TrainState<A>, f64)> {
        Trainer::step(self, state)
    }
    fn traces(&self) -> usize {
        Trainer::traces(self)
    }
    fn plans(&self) -> usize {
        Trainer::plans(self)
    }
}

/// Makes the training subject of a case from the reference trainer of the case (in `A`).
pub type MakeTrainSubject<'a, A = f64> =
    &'a (dyn Fn(Trainer<A>) -> Box<dyn TrainSubject<A>> + Sync);

/// The reference f64 trainer as it is ([`typed_reference_trainer`] at f64).
pub fn reference_trainer(t: Trainer) -> Box<dyn TrainSubject> {
    typed_reference_trainer(t)
}

/// The reference trainer in `A` as it is.
pub fn typed_reference_trainer<A: Real>(t: Trainer<A>) -> Box<dyn TrainSubject<A>> {
    Box::new(t)
}

/// Build the reference f64 trainer of a case ([`typed_trainer_for`] at f64).
pub fn trainer_for(c: &TrainCase) -> crate::reference::Result<Trainer> {
    typed_trainer_for(c)
}

/// Build the reference trainer of a case, training in `A` (f32 or f64).
pub fn typed_trainer_for<A: Real>(c: &TrainCase) -> crate::reference::Result<Trainer<A>> {
    let cfg = CnfConfig {
        width: c.width,
        depth: 1,
        blocks: 1,
        trace: if c.hutchinson {
            TraceEstimator::Hutchinson(crate::cnf::Probe::Rademacher)
        } else {
            TraceEstimator::Exact
        },
        ..CnfConfig::default()
    };
    let tc = TrainConfig {
        batch: c.batch,
        seed: c.seed,
        grad: if c.checkpointed {
            GradMode::Checkpointed { checkpoints: None }
        } else {
            GradMode::FullTape
        },
        ..TrainConfig::default()
    };
    Trainer::typed(cfg, tc, Dataset::TwoMoons)
}

/// `steps` training steps trace once, and live bytes after the last step equal those after
/// the first (warm-up) step: nothing accumulates per step.
///
/// The steps run on a dedicated one-thread rayon pool: gemm keeps per-thread scratch that a
/// worker allocates the first time it takes part in a product, and on a loaded machine a worker
/// may first take part at any step — a one-time cost per thread, not growth per step, that would
/// otherwise make the measurement flaky. (Results do not depend on the thread count: tested.)
///
/// Generic over the subject's arithmetic type `A`: the same law on the f32 and the f64 trainer.
pub fn train_trace_once_with<A: Real>(
    c: &TrainCase,
    subject: MakeTrainSubject<'_, A>,
) -> Result<(), String> {
    measurement_pool().install(|| train_trace_once_on_this_pool(c, subject))
}

/// The one-thread rayon pool memory measurements of training run on. It lives for the whole
/// process: a pool that is dropped lets its thread exit (and free its scratch) at some later
/// moment, in the middle of another measurement.
pub fn measurement_pool() -> &'static rayon::ThreadPool {
    static POOL: std::sync::OnceLock<rayon::ThreadPool> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a one-thread pool")
    })
}

fn train_trace_once_on_this_pool<A: Real>(
    c: &TrainCase,
    subject: MakeTrainSubject<'_, A>,
) -> Result<(), String> {
    let mut trainer = subject(typed_trainer_for(c).map_err(|e| e.to_string())?);
    let mut state: TrainState<A> = trainer.init().map_err(|e| e.to_string())?;
    let mut live_first = 0;
    for i in 0..c.steps {
        let (next, loss) = trainer.step(&state).map_err(|e| e.to_string())?;
        if !loss.is_finite() {
            return Err(format!("step {i}: loss {loss}"));
        }
        state = next;
        if i == 0 {
            live_first = crate::probe::counters().live_bytes;
        }
    }
    let live_last = crate::probe::counters().live_bytes;
    if trainer.traces() != 1 {
        return Err(format!(
            "{} steps traced {} times (want 1); {} plans held",
            c.steps,
            trainer.traces(),
            trainer.plans()
        ));
    }
    if live_last > live_first {
        return Err(format!(
            "live bytes grew from {live_first} after step 1 to {live_last} after step {}",
            c.steps
        ));
    }
    Ok(())
}

// ----------------------------------------------------------------------------------------------
// The fast field equals its dfdx face

/// A block field under test: `[f; trace]` of block `b` of `params` over `n` samples.
pub type FieldFn = fn(&CnfParams<f64>, usize, usize, Option<&[f64]>, f64, &[f64], &mut [f64]);

/// The fast field ([`BlockField`], the hand-written forward and tangents).
pub fn fast_field(
    p: &CnfParams<f64>,
    b: usize,
    n: usize,
    probes: Option<&[f64]>,
    t: f64,
    y: &[f64],
    out: &mut [f64],
) {
    let tangents = probes.map_or(Tangents::Exact, Tangents::Probes);
    BlockField::new(&p.layout, &p.blocks[b], n, tangents).eval(t, y, out);
}

/// `field` gives every block's `[f; trace]` of the dfdx face ([`TapedField`], the ConcatSquash
/// layers and their tangents on dfdx's tape) within [`tolerance::CNF_FIELD_FACES`], at `t` in
/// `{0, 0.3, 1}` and the case's points (trace slots holding `0.5`), exact and Hutchinson traces.
pub fn field_faces_agree_with(c: &(ModelCase, bool), field: FieldFn) -> Result<(), String> {
    let (model, hutchinson) = c;
    let mut p = model.params();
    let d = p.cfg.data_size;
    let n = model.x.len() / d;
    let probes = hutchinson.then(|| {
        p.cfg.trace = TraceEstimator::Hutchinson(crate::cnf::Probe::Gaussian);
        gaussian_probes(model.seed, n, d)
    });
    let mut y = model.x.clone();
    y.resize(n * (d + 1), 0.5);
    let tol = tolerance::CNF_FIELD_FACES;
    for b in 0..p.cfg.blocks {
        let face = TapedField::new(&p, b, n, probes.as_deref());
        for t in [0.0, 0.3, 1.0] {
            let (mut got, mut want) = (vec![0.0; y.len()], vec![0.0; y.len()]);
            field(&p, b, n, probes.as_deref(), t, &y, &mut got);
            face.eval(t, &y, &mut want);
            if let Some(i) = (0..y.len()).find(|&i| !tol.close(got[i], want[i])) {
                let what = if i < n * d { "f" } else { "trace" };
                return Err(format!(
                    "block {b}, t = {t}: {what}[{i}] = {:.15e}, dfdx face {:.15e}",
                    got[i], want[i]
                ));
            }
        }
    }
    Ok(())
}

/// [`field_faces_agree_with`] on the fast field.
pub fn field_faces_agree(c: &(ModelCase, bool)) -> Result<(), String> {
    field_faces_agree_with(c, fast_field)
}

pub(crate) fn laws() -> Vec<Law> {
    vec![
        Law {
            name: "cnf_linear_field_closed_form",
            family: Family::Numerics,
            summary: "f(z) = A z: trace term = -(t1-t0) tr(A) per block and log p = the closed-form Gaussian",
            default_cases: 64,
            measures_memory: false,
            run: |c, s| {
                check_property("cnf_linear_field_closed_form", c, s, linear_case(), |x| {
                    linear_closed_form_with(x, reference_ll)
                })
            },
        },
        Law {
            name: "cnf_sample_then_evaluate",
            family: Family::Numerics,
            summary: "log p from sampling equals log p evaluated at the sample (CNF_ROUND_TRIP)",
            default_cases: 32,
            measures_memory: false,
            run: |c, s| {
                check_property("cnf_sample_then_evaluate", c, s, model_case(6), |x| {
                    sample_then_evaluate_with(x, reference_sample, reference_ll)
                })
            },
        },
        Law {
            name: "cnf_density_normalised",
            family: Family::Numerics,
            summary: "the density of a small random 2-D model integrates to 1 over [-7,7]^2 (CNF_NORMALISATION)",
            default_cases: 3,
            measures_memory: false,
            run: |c, s| {
                check_property("cnf_density_normalised", c, s, model_case(1), |x| {
                    density_normalised_with(x, reference_ll)
                })
            },
        },
        Law {
            name: "cnf_exact_trace_matches_fd",
            family: Family::Numerics,
            summary: "the tangent-propagated trace equals the finite-difference Jacobian trace",
            default_cases: 64,
            measures_memory: false,
            run: |c, s| {
                check_property("cnf_exact_trace_matches_fd", c, s, model_case(6), |x| {
                    exact_trace_matches_fd_with(x, exact_trace)
                })
            },
        },
        Law {
            name: "cnf_hutchinson_unbiased",
            family: Family::Numerics,
            summary: "mean of eps^T J eps over 4000 probes is within 5 standard errors of tr J (Gaussian and Rademacher)",
            default_cases: 16,
            measures_memory: false,
            run: |c, s| {
                check_property("cnf_hutchinson_unbiased", c, s, model_case(1), |x| {
                    hutchinson_unbiased_with(x, [gaussian_probes, rademacher_probes])
                })
            },
        },
        Law {
            name: "cnf_loss_gradient_matches_fd",
            family: Family::Numerics,
            summary: "dL/dtheta (full tape == checkpointed, bitwise) matches central finite differences in f64",
            default_cases: 12,
            measures_memory: false,
            run: |c, s| {
                check_property("cnf_loss_gradient_matches_fd", c, s, model_case(4), |x| {
                    loss_gradient_matches_fd_with(x, flow::loss_and_grad)
                })
            },
        },
        Law {
            name: "cnf_hand_vjp_matches_tape",
            family: Family::Numerics,
            summary: "the hand-written VJP's loss and dL/dtheta equal dfdx's tape's (CNF_MANUAL_VJP), exact and Hutchinson, over chunks",
            default_cases: 12,
            measures_memory: false,
            run: |c, s| {
                check_property("cnf_hand_vjp_matches_tape", c, s, vjp_case(), |x| {
                    hand_vjp_matches_tape_with(x, flow::loss_and_grad)
                })
            },
        },
        Law {
            name: "cnf_field_faces_agree",
            family: Family::Numerics,
            summary: "the hand-written block field [f; trace] equals its dfdx face on the tape within CNF_FIELD_FACES, exact and Hutchinson",
            default_cases: 64,
            measures_memory: false,
            run: |c, s| {
                check_property(
                    "cnf_field_faces_agree",
                    c,
                    s,
                    (model_case(6), any::<bool>()),
                    field_faces_agree,
                )
            },
        },
        Law {
            name: "cnf_train_trace_once",
            family: Family::TraceCount,
            summary: "N training steps trace once and live bytes after step N equal those after step 1",
            default_cases: 16,
            measures_memory: true,
            run: |c, s| {
                check_property("cnf_train_trace_once", c, s, train_case(), |x| {
                    train_trace_once_with(x, &reference_trainer)
                })
            },
        },
    ]
}
