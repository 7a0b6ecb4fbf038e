//! # Densities, samples and the training loss of the flow
//!
//! - [`log_likelihood`]: `y(t1) = x`, `delta(t1) = 0`; each block, last to first, is solved from
//!   `t1` down to `t0` with the constant step `-dt0` (a backward solve) carrying `(y, delta)`;
//!   then `log p(x) = delta + log N(y; 0, I)` with `log N(y) = -(d log(2 pi) + |y|^2)/2`.
//! - [`sample`]: `z ~ N(0, I)` pushed forward through the blocks in order from `t0` to `t1`;
//!   the same augmented solve gives `log p(x) = log N(z) - delta(t1)`.
//! - [`loss_and_grad`]: `L = -(1/n) sum_i log p(x_i)` and `dL/dtheta` for every block, by
//!   discretise-then-optimise through [`crate::ode::grad`] (full tape or checkpointed), chaining
//!   the blocks' vector-Jacobian products: the cotangent of the final state is
//!   `dL/dy = y/n`, `dL/ddelta = -1/n`, and each block's `dL/dz(start)` is the next block's
//!   cotangent. Like the forward pass it computes in the parameters' type (f32 or f64).
//!
//! Guarantees: a batch whose length is not a multiple of `data_size` is a
//! [`crate::Error::ShapeMismatch`]; non-finite data or probes are
//! [`crate::Error::InvalidHyper`]; an empty batch gives an empty result (loss 0, zero
//! gradients); a non-finite log-density (overflow of a huge input) is
//! [`crate::Error::NonFinite`] naming the sample, never a NaN passed on.
//!
//! # References
//! - R. T. Q. Chen, Y. Rubanova, J. Bettencourt, D. Duvenaud, "Neural ordinary differential
//!   equations", NeurIPS 2018 (instantaneous change of variables).
//! - diffrax #574 (the training loop whose memory grew; see [`super::train`]).

use super::config::{CnfConfig, TraceEstimator};
use super::field::{BlockField, Tangents};
use super::params::CnfParams;
use super::taped::{ScratchPool, TrainBlock};
use crate::backend::{device, taped_leaf, taped_values, Real};
use crate::ode::grad::{gradient_of, DiffField, GradMode};
use crate::ode::Integration;
use crate::ode::{solve, Controller, SolveOptions, VectorField};
use crate::{Error, Face, Result};
use std::sync::Arc;

/// `log N(y; 0, I)` of one `d`-vector.
pub fn log_normal<A: Real>(y: &[A]) -> A {
    let d = A::of_f64(y.len() as f64);
    let sq: A = y.iter().map(|&v| v * v).sum();
    -(d * A::of_f64((2.0 * std::f64::consts::PI).ln()) + sq) * A::of_f64(0.5)
}

/// Check a batch `x` (`n x d` flat) and optional probes; returns `n`.
pub fn check_batch<A: Real>(cfg: &CnfConfig, x: &[A], probes: Option<&[A]>) -> Result<usize> {
    let d = cfg.data_size;
    if !x.len().is_multiple_of(d) {
        return Err(Error::ShapeMismatch {
            leaf: "x".into(),
            expected: vec![x.len() / d, d],
            got: vec![x.len()],
        });
    }
    let finite = |name: &'static str, v: &[A]| match v.iter().position(|a| !a.as_f64().is_finite())
    {
        Some(i) => Err(Error::InvalidHyper {
            name,
            value: format!("{:?} at index {i}", v[i]),
            expected: "every element must be finite".into(),
        }),
        None => Ok(()),
    };
    finite("x", x)?;
    match (cfg.trace, probes) {
        (TraceEstimator::Exact, None) => {}
        (TraceEstimator::Hutchinson(_), Some(p)) => {
            if p.len() != x.len() {
                return Err(Error::ShapeMismatch {
                    leaf: "probes".into(),
                    expected: vec![x.len() / d, d],
                    got: vec![p.len()],
                });
            }
            finite("probes", p)?;
        }
        (TraceEstimator::Exact, Some(_)) => {
            return Err(Error::InvalidHyper {
                name: "probes",
                value: "given".into(),
                expected: "no probes with the exact trace".into(),
            })
        }
        (TraceEstimator::Hutchinson(_), None) => {
            return Err(Error::InvalidHyper {
                name: "probes",
                value: "missing".into(),
                expected: "one probe per sample with the Hutchinson trace".into(),
            })
        }
    }
    Ok(x.len() / d)
}

fn tangents<A>(probes: Option<&[A]>) -> Tangents<'_, A> {
    match probes {
        Some(p) => Tangents::Probes(p),
        None => Tangents::Exact,
    }
}

fn opts() -> SolveOptions {
    SolveOptions {
        max_steps: super::config::MAX_STEPS_PER_BLOCK,
        save_steps: false,
        ..Default::default()
    }
}

/// The interval one block's solve covers and its constant step: `from` to `to` by `dt` (negative
/// when `to < from`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    /// Start time.
    pub from: f64,
    /// End time.
    pub to: f64,
    /// The constant step, signed.
    pub dt: f64,
}

impl Span {
    /// `t1` down to `t0` by `-dt0`: from the data towards the base distribution (the
    /// log-likelihood's direction).
    ///
    /// ```
    /// use harness_reference::cnf::{flow::Span, CnfConfig};
    /// let cfg = CnfConfig::default();
    /// let s = Span::towards_base(&cfg);
    /// assert_eq!((s.from, s.to, s.dt), (cfg.t1, cfg.t0, -cfg.dt0));
    /// ```
    pub fn towards_base(cfg: &CnfConfig) -> Span {
        Span {
            from: cfg.t1,
            to: cfg.t0,
            dt: -cfg.dt0,
        }
    }

    /// `t0` up to `t1` by `dt0`: from base samples towards the data (sampling's direction).
    ///
    /// ```
    /// use harness_reference::cnf::{flow::Span, CnfConfig};
    /// let cfg = CnfConfig::default();
    /// let s = Span::towards_data(&cfg);
    /// assert_eq!((s.from, s.to, s.dt), (cfg.t0, cfg.t1, cfg.dt0));
    /// ```
    pub fn towards_data(cfg: &CnfConfig) -> Span {
        Span {
            from: cfg.t0,
            to: cfg.t1,
            dt: cfg.dt0,
        }
    }
}

/// Solve one block's augmented state `z` over `span` with its constant step.
pub fn block_solve<A: Real>(
    params: &CnfParams<A>,
    b: usize,
    n: usize,
    probes: Option<&[A]>,
    span: Span,
    z: &[A],
) -> Result<Vec<A>> {
    block_solve_with(params, b, n, probes, span, z, Face::Fast)
}

/// [`block_solve`] with the chosen face: [`Face::Dfdx`] evaluates the field on dfdx's tape
/// ([`TapedField`]) and steps with the dfdx Runge–Kutta face.
fn block_solve_with<A: Real>(
    params: &CnfParams<A>,
    b: usize,
    n: usize,
    probes: Option<&[A]>,
    Span { from, to, dt }: Span,
    z: &[A],
    face: Face,
) -> Result<Vec<A>> {
    let tab = params.cfg.solver.tableau();
    let ctl = Controller::constant(dt)?;
    let integration = Integration::new(&tab, &ctl, A::of_f64(from), A::of_f64(to))
        .with_options(opts())
        .face(face);
    let sol = match face {
        Face::Fast => {
            let field = BlockField::new(&params.layout, &params.blocks[b], n, tangents(probes));
            solve(&field, &integration, z)?
        }
        Face::Dfdx => solve(&TapedField::new(params, b, n, probes), &integration, z)?,
    };
    Ok(sol.y_final)
}

/// The dfdx face of a block's augmented field `[f; trace]`: [`TrainBlock::eval_taped`], the
/// ConcatSquash layers and their tangents written as dfdx operations, evaluated for its values.
/// The tape is f64; an f32 state is widened on the way in and each derivative rounded to f32 on
/// the way out.
pub struct TapedField {
    block: TrainBlock,
}

impl TapedField {
    /// Block `b` of `params` over a batch of `n` samples (`probes`: Hutchinson, else exact).
    pub fn new<A: Real>(params: &CnfParams<A>, b: usize, n: usize, probes: Option<&[A]>) -> Self {
        let wide = |v: &[A]| v.iter().map(|x| x.as_f64()).collect::<Vec<f64>>();
        TapedField {
            block: TrainBlock::new(
                params.layout.clone(),
                n,
                probes.map(wide),
                wide(&params.blocks[b]),
            ),
        }
    }
}

impl<A: Real> VectorField<A> for TapedField {
    fn eval(&self, t: A, y: &[A], dy: &mut [A]) {
        let dev = device();
        let y: Vec<f64> = y.iter().map(|v| v.as_f64()).collect();
        let theta = taped_leaf(&dev, &self.block.theta);
        let out = taped_values(
            &self
                .block
                .eval_taped(t.as_f64(), taped_leaf(&dev, &y), theta),
        );
        for (d, o) in dy.iter_mut().zip(out) {
            *d = A::of_f64(o);
        }
    }
    fn dim(&self) -> Option<usize> {
        Some(DiffField::dim(&self.block))
    }
}

fn finite_or_error<A: Real>(what: &str, v: &[A]) -> Result<()> {
    finite_or_error_from(what, 0, v)
}

/// As [`finite_or_error`] for `v` starting at index `first` of a larger vector.
fn finite_or_error_from<A: Real>(what: &str, first: usize, v: &[A]) -> Result<()> {
    match v.iter().position(|a| !a.as_f64().is_finite()) {
        Some(i) => Err(Error::NonFinite(format!(
            "{what} at index {} is not finite ({:?})",
            first + i,
            v[i]
        ))),
        None => Ok(()),
    }
}

/// `log p(x_i)` for every sample of `x` (`n x d` flat); see the module docs.
///
/// ```
/// use harness_reference::cnf::{flow::log_likelihood, CnfConfig, CnfParams};
/// let cfg = CnfConfig { width: 8, depth: 1, blocks: 1, ..CnfConfig::default() };
/// let params = CnfParams::<f64>::init(cfg, 0)?;
/// let lp = log_likelihood(&params, &[0.1, -0.2, 1.0, 0.5], None)?;
/// assert_eq!(lp.len(), 2);
/// assert!(lp.iter().all(|v| v.is_finite()));
/// # Ok::<(), harness_reference::Error>(())
/// ```
pub fn log_likelihood<A: Real>(
    params: &CnfParams<A>,
    x: &[A],
    probes: Option<&[A]>,
) -> Result<Vec<A>> {
    log_likelihood_with(params, x, probes, Face::Fast)
}

/// [`log_likelihood`] computed with the chosen face: [`Face::Dfdx`] integrates every block with
/// the dfdx Runge–Kutta face over the taped field ([`TapedField`]).
pub fn log_likelihood_with<A: Real>(
    params: &CnfParams<A>,
    x: &[A],
    probes: Option<&[A]>,
    face: Face,
) -> Result<Vec<A>> {
    let n = check_batch(&params.cfg, x, probes)?;
    if n <= GRAD_CHUNK {
        return log_likelihood_chunk(params, 0, x, probes, face);
    }
    let parts = by_chunks(params.cfg.data_size, x, probes, |i0, x, p| {
        log_likelihood_chunk(params, i0, x, p, face)
    })?;
    Ok(parts.concat())
}

/// Run `f` on the batch cut into `ceil(n / GRAD_CHUNK)` chunks of equal size within one sample
/// ([`GRAD_CHUNK`], [`chunk_bounds`]; on rayon's threads; every sample's flow is independent of
/// the others', and the cut depends on `n` only, not on the thread count), returning the chunks'
/// results in order, or the first chunk's error. `f` gets the index of the chunk's first sample
/// (for error messages naming a sample of the whole batch).
fn by_chunks<A: Real, R: Send>(
    d: usize,
    x: &[A],
    probes: Option<&[A]>,
    f: impl Fn(usize, &[A], Option<&[A]>) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    use rayon::prelude::*;
    let n = x.len() / d;
    let parts: Vec<Result<R>> = (0..n.div_ceil(GRAD_CHUNK))
        .into_par_iter()
        .map(|c| {
            let (i0, i1) = chunk_bounds(n, c);
            f(i0, &x[i0 * d..i1 * d], probes.map(|p| &p[i0 * d..i1 * d]))
        })
        .collect();
    parts.into_iter().collect()
}

/// Samples `[n c / chunks, n (c + 1) / chunks)` of a batch of `n`, `chunks = ceil(n / GRAD_CHUNK)`:
/// chunk `c`'s share, equal to the others' within one sample.
fn chunk_bounds(n: usize, c: usize) -> (usize, usize) {
    let chunks = n.div_ceil(GRAD_CHUNK);
    (n * c / chunks, n * (c + 1) / chunks)
}

fn log_likelihood_chunk<A: Real>(
    params: &CnfParams<A>,
    first: usize,
    x: &[A],
    probes: Option<&[A]>,
    face: Face,
) -> Result<Vec<A>> {
    let cfg = &params.cfg;
    let n = x.len() / cfg.data_size;
    if n == 0 {
        return Ok(Vec::new());
    }
    let d = cfg.data_size;
    let mut z = x.to_vec();
    z.resize(n * (d + 1), A::zero());
    // blocks last to first, each integrated from t1 down to t0; delta carried across blocks
    for b in (0..cfg.blocks).rev() {
        z = block_solve_with(params, b, n, probes, Span::towards_base(cfg), &z, face)?;
    }
    let lp: Vec<A> = (0..n)
        .map(|i| z[n * d + i] + log_normal(&z[i * d..(i + 1) * d]))
        .collect();
    finite_or_error_from("log-density", first, &lp)?;
    Ok(lp)
}

/// Push base samples `z` (`n x d`) forward: returns `(x, log p(x))`.
pub fn sample<A: Real>(
    params: &CnfParams<A>,
    z: &[A],
    probes: Option<&[A]>,
) -> Result<(Vec<A>, Vec<A>)> {
    let n = check_batch(&params.cfg, z, probes)?;
    if n <= GRAD_CHUNK {
        return sample_chunk(params, 0, z, probes);
    }
    let parts = by_chunks(params.cfg.data_size, z, probes, |i0, z, p| {
        sample_chunk(params, i0, z, p)
    })?;
    let (xs, lps): (Vec<Vec<A>>, Vec<Vec<A>>) = parts.into_iter().unzip();
    Ok((xs.concat(), lps.concat()))
}

fn sample_chunk<A: Real>(
    params: &CnfParams<A>,
    first: usize,
    z: &[A],
    probes: Option<&[A]>,
) -> Result<(Vec<A>, Vec<A>)> {
    let cfg = &params.cfg;
    let n = z.len() / cfg.data_size;
    if n == 0 {
        return Ok((Vec::new(), Vec::new()));
    }
    let d = cfg.data_size;
    let mut s = z.to_vec();
    s.resize(n * (d + 1), A::zero());
    for b in 0..cfg.blocks {
        s = block_solve(params, b, n, probes, Span::towards_data(cfg), &s)?;
    }
    finite_or_error_from("sample", first * d, &s[..n * d])?;
    let lp: Vec<A> = (0..n)
        .map(|i| log_normal(&z[i * d..(i + 1) * d]) - s[n * d + i])
        .collect();
    finite_or_error_from("log-density", first, &lp)?;
    s.truncate(n * d);
    Ok((s, lp))
}

/// The mean negative log-likelihood and its gradient per block, in the arithmetic type `A` of
/// the parameters (f32 or f64).
#[derive(Debug, Clone, PartialEq)]
pub struct LossGrad<A = f64> {
    /// `L = -(1/n) sum_i log p(x_i)`, the mean negative log-likelihood of the batch.
    pub loss: A,
    /// `dL/dtheta`, one vector per block.
    pub grads: Vec<Vec<A>>,
    /// Checkpoints used by the last block's reverse sweep.
    pub checkpoints: usize,
}

/// `L = -(1/n) sum log p(x_i)` and `dL/dtheta`, computed in the parameters' type `A` (f32 or
/// f64: every state, stage, cotangent and sum in `A`); see the module docs.
///
/// ```
/// use harness_reference::cnf::{flow::loss_and_grad, CnfConfig, CnfParams};
/// use harness_reference::ode::grad::GradMode;
/// let cfg = CnfConfig { width: 8, depth: 1, blocks: 1, ..CnfConfig::default() };
/// let p64 = CnfParams::<f64>::init(cfg, 0)?;
/// let x = [0.1, -0.2, 1.0, 0.5];
/// let g64 = loss_and_grad(&p64, &x, None, GradMode::FullTape)?;
/// let x32 = x.map(|v| v as f32);
/// let g32 = loss_and_grad(&p64.cast::<f32>(), &x32, None, GradMode::FullTape)?;
/// assert!((g32.loss as f64 - g64.loss).abs() < 1e-4 * g64.loss.abs().max(1.0));
/// # Ok::<(), harness_reference::Error>(())
/// ```
pub fn loss_and_grad<A: Real>(
    params: &CnfParams<A>,
    x: &[A],
    probes: Option<&[A]>,
    mode: GradMode,
) -> Result<LossGrad<A>> {
    loss_and_grad_with(params, x, probes, mode, |block| block)
}

/// [`loss_and_grad`] with the training blocks' buffers taken from `pool` and given back to it
/// ([`TrainBlock::with_pool`]): the same results, bit for bit, whatever the pool holds (buffers
/// of another batch size, width or type of trace included); a training loop that passes the same
/// pool to every step allocates them once.
///
/// ```
/// use harness_reference::cnf::{flow::{loss_and_grad, loss_and_grad_in}, CnfConfig, CnfParams};
/// use harness_reference::cnf::ScratchPool;
/// use harness_reference::ode::grad::GradMode;
/// use std::sync::Arc;
/// let cfg = CnfConfig { width: 8, depth: 1, blocks: 1, ..CnfConfig::default() };
/// let p = CnfParams::<f64>::init(cfg, 0)?;
/// let x = [0.1, -0.2, 1.0, 0.5];
/// let pool = Arc::new(ScratchPool::default());
/// let pooled = loss_and_grad_in(&p, &x, None, GradMode::FullTape, &pool)?;
/// assert_eq!(pooled.grads, loss_and_grad(&p, &x, None, GradMode::FullTape)?.grads);
/// assert_eq!(pool.len(), 1);
/// # Ok::<(), harness_reference::Error>(())
/// ```
pub fn loss_and_grad_in<A: Real>(
    params: &CnfParams<A>,
    x: &[A],
    probes: Option<&[A]>,
    mode: GradMode,
    pool: &Arc<ScratchPool<A>>,
) -> Result<LossGrad<A>> {
    loss_and_grad_with(params, x, probes, mode, |block| block.with_pool(pool))
}

/// [`loss_and_grad`] with each step differentiated on dfdx's tape ([`super::taped`]) instead of
/// by the hand-written VJP ([`super::adjoint`]): the reference the hand-written one is checked
/// against. The tape is f64: for `A = f32` each step's cotangents are computed in f64 from the
/// f32 states and rounded to f32.
pub fn loss_and_grad_on_tape<A: Real>(
    params: &CnfParams<A>,
    x: &[A],
    probes: Option<&[A]>,
    mode: GradMode,
) -> Result<LossGrad<A>> {
    loss_and_grad_with(params, x, probes, mode, |mut block| {
        block.on_tape = true;
        block
    })
}

/// [`loss_and_grad`] with every block's field passed through `field` before it is
/// differentiated: the identity gives [`loss_and_grad`]; a wrapper can change how a block's
/// field or its vector–Jacobian product is computed (another implementation of the same field
/// under test). Called once per block and chunk, from rayon's threads.
pub fn loss_and_grad_with<A: Real, W, F>(
    params: &CnfParams<A>,
    x: &[A],
    probes: Option<&[A]>,
    mode: GradMode,
    field: W,
) -> Result<LossGrad<A>>
where
    W: Fn(TrainBlock<A>) -> F + Sync,
    F: DiffField<A>,
{
    let cfg = &params.cfg;
    let n = check_batch(cfg, x, probes)?;
    let d = cfg.data_size;
    let mut grads = vec![vec![A::zero(); params.layout.len]; cfg.blocks];
    let mut loss = A::zero();
    let mut checkpoints = 0;
    let parts = by_chunks(d, x, probes, |i0, x, p| {
        chunk_loss_and_grad(params, i0, x, p, n, mode, &field)
    })?;
    for part in parts {
        loss += part.loss;
        checkpoints = part.checkpoints;
        for (acc, g) in grads.iter_mut().zip(&part.grads) {
            for (a, &v) in acc.iter_mut().zip(g) {
                *a += v;
            }
        }
    }
    finite_or_error("loss", &[loss])?;
    for (b, g) in grads.iter().enumerate() {
        finite_or_error(&format!("gradient of block {b}"), g)?;
    }
    Ok(LossGrad {
        loss,
        grads,
        checkpoints,
    })
}

/// The most samples in one chunk of [`loss_and_grad`], [`log_likelihood`] and [`sample`]: a batch
/// of `n` samples is cut into `ceil(n / GRAD_CHUNK)` consecutive chunks of equal size (chunk `c`
/// is samples `n c / chunks .. n (c + 1) / chunks`), whose losses and gradients are computed
/// independently — on rayon's threads — and summed in chunk order. The cut depends on the batch
/// size only, never on the number of threads, so results are bit-identical whatever the thread
/// count. Chunks are of equal size, so two cores get an even share of the default batch of 500
/// (six chunks of 83 or 84; with unequal chunks of 128, 128, 128 and 116 one core had 256 samples
/// and the other 244, and the step waited for the first, about 2% of its time). At most 84
/// samples: one evaluation's kept `H` and `P` (`(1 + d) 84` rows of every layer, 774 KB in f64 at
/// width 64 and `d = 2`) then fit a core's 1 MiB second-level cache. Measured on the training step
/// of `bench cnf` (batch 500, two cores), five alternations with chunks of at most 128 (four of
/// 125): f64 74.4-78.9 ms against 75.6-81.3, f32 36.7-37.1 ms against 37.1-38.2; at most 63
/// (eight chunks) no faster than 128, at most 256 (two) 94-101 ms (f64) and 42-44 ms (f32).
pub const GRAD_CHUNK: usize = 84;

/// One chunk's share of [`loss_and_grad`]: `-(1/n_total) sum_{i in chunk} log p(x_i)` and its
/// gradient (each sample's flow is independent of the others').
fn chunk_loss_and_grad<A: Real, F: DiffField<A>>(
    params: &CnfParams<A>,
    first: usize,
    x: &[A],
    probes: Option<&[A]>,
    n_total: usize,
    mode: GradMode,
    wrap: &(impl Fn(TrainBlock<A>) -> F + Sync),
) -> Result<LossGrad<A>> {
    let cfg = &params.cfg;
    let d = cfg.data_size;
    let n = x.len() / d;
    let mut grads = vec![vec![A::zero(); params.layout.len]; cfg.blocks];
    if n == 0 {
        return Ok(LossGrad {
            loss: A::zero(),
            grads,
            checkpoints: 0,
        });
    }
    // Forward through blocks B-1 .. 1, keeping each block's input; block 0 ends the solve.
    let mut inputs: Vec<Vec<A>> = Vec::with_capacity(cfg.blocks);
    let mut z = x.to_vec();
    z.resize(n * (d + 1), A::zero());
    for b in (1..cfg.blocks).rev() {
        let next = block_solve(params, b, n, probes, Span::towards_base(cfg), &z)?;
        inputs.push(std::mem::replace(&mut z, next));
    }
    inputs.push(z);
    inputs.reverse(); // inputs[b] = the state entering block b
    let tab = cfg.solver.tableau();
    let ctrl = Controller::constant(-cfg.dt0)?;
    let (t0, t1) = (A::of_f64(cfg.t0), A::of_f64(cfg.t1));
    let mut loss = A::zero();
    let mut cot: Option<Vec<A>> = None;
    let mut checkpoints = 0;
    for b in 0..cfg.blocks {
        let field = wrap(TrainBlock::new(
            params.layout.clone(),
            n,
            probes.map(|p| p.to_vec()),
            params.blocks[b].clone(),
        ));
        let g = match cot.take() {
            None => gradient_of(
                &field,
                &Integration::new(&tab, &ctrl, t1, t0).with_options(opts()),
                &inputs[b],
                |zf| {
                    // L = -(1/n) sum_i [delta_i + log N(y_i)]
                    let inv = A::of_f64(1.0 / n_total as f64);
                    let lp: Vec<A> = (0..n)
                        .map(|i| zf[n * d + i] + log_normal(&zf[i * d..(i + 1) * d]))
                        .collect();
                    finite_or_error_from("log-density", first, &lp)?;
                    // the mean of the terms, each scaled first: a sum of n log-densities near
                    // -f64::MAX would overflow where their mean does not
                    loss = -lp.iter().map(|&v| v * inv).sum::<A>();
                    let mut w = vec![-inv; n * (d + 1)];
                    for (wi, &yi) in w[..n * d].iter_mut().zip(&zf[..n * d]) {
                        *wi = yi * inv;
                    }
                    Ok(w)
                },
                mode,
            )?,
            Some(w) => gradient_of(
                &field,
                &Integration::new(&tab, &ctrl, t1, t0).with_options(opts()),
                &inputs[b],
                move |_| Ok(w),
                mode,
            )?,
        };
        checkpoints = g.checkpoints;
        grads[b] = g.d_theta;
        cot = Some(g.d_y0);
    }
    Ok(LossGrad {
        loss,
        grads,
        checkpoints,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cnf::taped::BlockScratch;

    /// Loss and gradients of `params` on `x` (exact trace, full tape), as bits, through `pool`.
    fn pooled_bits(params: &CnfParams<f64>, x: &[f64], pool: &Arc<ScratchPool<f64>>) -> Vec<u64> {
        let lg = loss_and_grad_in(params, x, None, GradMode::FullTape, pool).unwrap();
        std::iter::once(lg.loss)
            .chain(lg.grads.concat())
            .map(f64::to_bits)
            .collect()
    }

    #[test]
    fn pooled_buffers_left_by_other_problems_and_poisoned_do_not_change_a_bit() {
        let cfg = |width| CnfConfig {
            width,
            depth: 2,
            blocks: 2,
            ..CnfConfig::default()
        };
        let p = CnfParams::<f64>::init(cfg(8), 5).unwrap();
        let x: Vec<f64> = (0..2 * 150)
            .map(|i| (i as f64 * 0.37).sin() * 1.5)
            .collect();
        let fresh = pooled_bits(&p, &x, &Arc::default());
        // a pool filled by a wider field on a larger batch (with the Hutchinson trace), then by
        // this one, every buffer then set to NaN
        let pool = Arc::default();
        let wide = CnfParams::<f64>::init(cfg(12), 6).unwrap();
        let y: Vec<f64> = (0..2 * 300).map(|i| (i as f64 * 0.11).cos()).collect();
        let eps: Vec<f64> = y.iter().map(|v| v.signum()).collect();
        let mut hutchinson = wide.clone();
        hutchinson.cfg.trace = TraceEstimator::Hutchinson(crate::cnf::Probe::Rademacher);
        loss_and_grad_in(&hutchinson, &y, Some(&eps), GradMode::FullTape, &pool).unwrap();
        assert_eq!(pooled_bits(&p, &x, &pool), fresh);
        assert!(
            pool.len() >= 2,
            "the chunks' blocks gave their buffers back"
        );
        pool.each(BlockScratch::poison);
        assert_eq!(pooled_bits(&p, &x, &pool), fresh);
    }

    #[test]
    fn chunks_cover_the_batch_in_order_and_differ_in_size_by_at_most_one_sample() {
        // the benchmark's batch: six chunks of 83 or 84, three for each of two cores
        assert_eq!(
            (0..6).map(|c| chunk_bounds(500, c)).collect::<Vec<_>>(),
            [
                (0, 83),
                (83, 166),
                (166, 250),
                (250, 333),
                (333, 416),
                (416, 500)
            ]
        );
        for n in 1..=4 * GRAD_CHUNK + 3 {
            let chunks = n.div_ceil(GRAD_CHUNK);
            let sizes: Vec<usize> = (0..chunks)
                .map(|c| {
                    let (i0, i1) = chunk_bounds(n, c);
                    assert_eq!(i0, if c == 0 { 0 } else { chunk_bounds(n, c - 1).1 });
                    i1 - i0
                })
                .collect();
            assert_eq!(chunk_bounds(n, chunks - 1).1, n);
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(
                hi - lo <= 1 && *hi <= GRAD_CHUNK && *lo > 0,
                "n = {n}: {sizes:?}"
            );
        }
    }
}
