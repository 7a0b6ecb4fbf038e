//! # Training: maximum likelihood with AdamW, one staged step whose trace count stays 1
//!
//! A step draws a mini-batch (and Hutchinson probes) from counter-based streams keyed by the
//! **step counter held in the state** — a strong `int32[]` leaf, i.e. dynamic data — computes
//! `L = -mean log p(x)` and `dL/dtheta` ([`super::flow::loss_and_grad`], full tape or
//! checkpointed), and applies `optax.adamw(lr, weight_decay)`. The whole step goes through the
//! specialisation cache ([`Stage`]), keyed by the static configuration and the signature of
//! `(params, opt_state, step)`; the plan it builds owns the step's workspace (batch and probe
//! buffers), as a compiled executable owns its buffers.
//!
//! Guarantees: `N` steps trace once; live memory after the first step does not grow with `N`;
//! the same seed gives bit-identical losses and parameters. The upstream failure (diffrax #574)
//! was the opposite: the step counter passed as a Python int is static under `jax.jit`, so
//! every step re-traced and the cache, holding one executable per step, grew —
//! [`Mutation::StaticStep`] re-creates it.
//!
//! # References
//! - diffrax #574 ("memory leak" in CNF training) and `eqx.debug.assert_max_traces`.
//! - I. Loshchilov, F. Hutter, "Decoupled weight decay regularization", ICLR 2019 (AdamW).
//!
//! ```
//! use harness::cnf::{train::{Trainer, TrainConfig}, data::Dataset, CnfConfig};
//! let cfg = CnfConfig { width: 8, depth: 1, blocks: 1, ..CnfConfig::default() };
//! let tc = TrainConfig { batch: 16, ..TrainConfig::default() };
//! let mut trainer = Trainer::new(cfg, tc, Dataset::TwoMoons)?;
//! let mut state = trainer.init()?;
//! for _ in 0..3 {
//!     let (next, loss) = trainer.step(&state)?;
//!     assert!(loss.is_finite());
//!     state = next;
//! }
//! assert_eq!(trainer.traces(), 1);
//! assert_eq!(state.step.data(), &[3]);
//! # Ok::<(), harness::Error>(())
//! ```

use super::config::{CnfConfig, Probe, TraceEstimator};
use super::data::Dataset;
use super::flow::loss_and_grad;
use super::params::CnfParams;
use super::random::{key, normal, rademacher};
use crate::backend::{Array, DType};
use crate::error::ensure;
use crate::ode::grad::GradMode;
use crate::optim::{adamw, AdamHyper, AdamW, Transform};
use crate::stage::{HasSignature, KeyHasher, LeafSig, Signature, Stage};
use crate::tree::{apply_updates, Tree};
use crate::Result;

/// Stream purposes.
const DATA_STREAM: u64 = 0xDA7A;
const PROBE_STREAM: u64 = 0x9B0B;

/// Training settings (defaults: the diffrax example's AdamW(1e-3, weight_decay=1e-5), batch 500).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainConfig {
    pub batch: usize,
    pub learning_rate: f64,
    pub weight_decay: f64,
    pub seed: u64,
    pub grad: GradMode,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            batch: 500,
            learning_rate: 1e-3,
            weight_decay: 1e-5,
            seed: 0,
            grad: GradMode::FullTape,
        }
    }
}

/// Largest batch accepted.
pub const MAX_BATCH: usize = 1 << 20;

impl TrainConfig {
    pub fn validate(&self) -> Result<()> {
        ensure(
            (1..=MAX_BATCH).contains(&self.batch),
            "batch",
            self.batch,
            "must be in 1..=1048576",
        )?;
        ensure(
            self.learning_rate.is_finite() && self.learning_rate > 0.0,
            "learning_rate",
            self.learning_rate,
            "must be finite and > 0",
        )?;
        ensure(
            self.weight_decay.is_finite() && self.weight_decay >= 0.0,
            "weight_decay",
            self.weight_decay,
            "must be finite and >= 0",
        )?;
        if let GradMode::Checkpointed {
            checkpoints: Some(c),
        } = self.grad
        {
            ensure(c >= 1, "checkpoints", c, "must be >= 1")?;
        }
        Ok(())
    }
    fn static_key(&self) -> u64 {
        let grad = match self.grad {
            GradMode::FullTape => (0u8, 0usize),
            GradMode::Checkpointed { checkpoints } => (1, checkpoints.map_or(0, |c| c + 1)),
        };
        KeyHasher::default()
            .val(self.batch)
            .f64(self.learning_rate)
            .f64(self.weight_decay)
            .val(self.seed)
            .val(grad)
            .finish()
    }
}

/// Everything a step carries from one call to the next.
#[derive(Debug, Clone)]
pub struct TrainState {
    /// One leaf per block, `block{b}`, in [`super::Layout`] order.
    pub params: Tree<f64>,
    pub opt: <AdamW as Transform<f64>>::State,
    /// The step counter: a strong `int32[]` array (dynamic, as `jnp.asarray(step)`).
    pub step: Array<i32>,
}

impl HasSignature for TrainState {
    fn signature(&self) -> Signature {
        let mut s = Signature::new()
            .with("params", self.params.signature())
            .with("opt_state", self.opt.signature());
        s.push("step", LeafSig::strong(self.step.shape(), DType::I32));
        s
    }
}

/// Deliberately wrong variants, for showing the training laws can fail.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// The step counter is static configuration (part of the cache key), as a Python int under
    /// `jax.jit`: a new trace every step, and the cache keeps every plan.
    StaticStep,
}

/// What a trace builds: the step's workspace.
struct StepPlan {
    batch: Vec<f64>,
    probes: Vec<f64>,
}

/// A CNF trainer: configuration, data, optimizer and the staged step.
pub struct Trainer {
    pub cfg: CnfConfig,
    pub train: TrainConfig,
    pub data: Dataset,
    opt: AdamW,
    stage: Stage<StepPlan>,
    mutation: Option<Mutation>,
}

impl Trainer {
    /// Validated trainer (the data set must be 2-D when `data_size = 2`; every built-in set is).
    pub fn new(cfg: CnfConfig, train: TrainConfig, data: Dataset) -> Result<Self> {
        cfg.validate()?;
        train.validate()?;
        ensure(
            cfg.data_size == 2,
            "data_size",
            cfg.data_size,
            "must be 2 for the built-in 2-D data sets",
        )?;
        Ok(Trainer {
            cfg,
            train,
            data,
            opt: adamw(
                train.learning_rate,
                AdamHyper::default(),
                train.weight_decay,
            )?,
            stage: Stage::new("cnf_train_step"),
            mutation: None,
        })
    }

    /// [`Trainer::new`] with a [`Mutation`].
    #[doc(hidden)]
    pub fn mutant(
        cfg: CnfConfig,
        train: TrainConfig,
        data: Dataset,
        mutation: Mutation,
    ) -> Result<Self> {
        let mut t = Self::new(cfg, train, data)?;
        t.mutation = Some(mutation);
        Ok(t)
    }

    /// Refuse more than `n` traces ([`crate::Error::TooManyTraces`] names what changed).
    pub fn with_max_traces(mut self, n: usize) -> Self {
        self.stage = self.stage.with_max_traces(n);
        self
    }

    /// Traces so far.
    pub fn traces(&self) -> usize {
        self.stage.traces()
    }

    /// Plans held by the cache.
    pub fn plans(&self) -> usize {
        self.stage.plans()
    }

    /// Fresh state: weights from the seed, AdamW state, step 0.
    pub fn init(&self) -> Result<TrainState> {
        let p = CnfParams::<f64>::init(self.cfg, self.train.seed)?;
        self.state_from(&p)
    }

    /// State for given weights.
    pub fn state_from(&self, p: &CnfParams<f64>) -> Result<TrainState> {
        let params = Tree::from_leaves(
            p.blocks
                .iter()
                .enumerate()
                .map(|(b, th)| (format!("block{b}"), Array::vector(th.clone()))),
        )?;
        let opt = self.opt.init(&params)?;
        Ok(TrainState {
            params,
            opt,
            step: Array::scalar(0),
        })
    }

    /// The weights held by a state.
    pub fn params_of(&self, state: &TrainState) -> Result<CnfParams<f64>> {
        let blocks = (0..self.cfg.blocks)
            .map(|b| {
                state
                    .params
                    .get(&format!("block{b}"))
                    .map(|a| a.data().to_vec())
                    .ok_or_else(|| crate::Error::Structure(format!("missing leaf `block{b}`")))
            })
            .collect::<Result<Vec<_>>>()?;
        CnfParams::from_blocks(self.cfg, blocks)
    }

    /// The mini-batch of step `k` (deterministic in `(seed, k)`).
    pub fn batch_of(&self, k: u64, out: &mut [f64]) {
        self.data
            .sample_into(key(self.train.seed, DATA_STREAM, k), 0, out)
    }

    /// One training step: `(new state, loss before the update)`. The input state is untouched,
    /// so an error corrupts nothing.
    pub fn step(&mut self, state: &TrainState) -> Result<(TrainState, f64)> {
        let mut skey = KeyHasher::default()
            .val(self.cfg.static_key())
            .val(self.train.static_key())
            .val(<AdamW as Transform<f64>>::static_key(&self.opt));
        let k = state.step.data().first().copied().unwrap_or(0);
        if self.mutation == Some(Mutation::StaticStep) {
            skey = skey.val(k); // the Python int baked into the trace
        }
        let (n, d) = (self.train.batch, self.cfg.data_size);
        let params = self.params_of(state)?;
        let plan = self.stage.call(skey.finish(), state, |_| {
            Ok(StepPlan {
                batch: vec![0.0; n * d],
                probes: vec![0.0; n * d],
            })
        })?;
        let StepPlan { batch, probes } = plan;
        let k = u64::try_from(k).map_err(|_| crate::Error::InvalidHyper {
            name: "step",
            value: k.to_string(),
            expected: "a non-negative step counter".into(),
        })?;
        self.data
            .sample_into(key(self.train.seed, DATA_STREAM, k), 0, batch);
        let probes = match self.cfg.trace {
            TraceEstimator::Exact => None,
            TraceEstimator::Hutchinson(kind) => {
                let pk = key(self.train.seed, PROBE_STREAM, k);
                for (i, e) in probes.iter_mut().enumerate() {
                    *e = match kind {
                        Probe::Gaussian => normal(pk, i as u64),
                        Probe::Rademacher => rademacher(pk, i as u64),
                    };
                }
                Some(&probes[..])
            }
        };
        let lg = loss_and_grad(&params, batch, probes, self.train.grad)?;
        let grads = Tree::from_leaves(
            lg.grads
                .into_iter()
                .enumerate()
                .map(|(b, g)| (format!("block{b}"), Array::vector(g))),
        )?;
        let (updates, opt) = self.opt.update(&grads, &state.opt, &state.params)?;
        let params = apply_updates(&state.params, &updates)?;
        let next = k
            .checked_add(1)
            .and_then(|v| i32::try_from(v).ok())
            .ok_or_else(|| crate::Error::Overflow("step counter exceeds int32".into()))?;
        Ok((
            TrainState {
                params,
                opt,
                step: Array::scalar(next),
            },
            lg.loss,
        ))
    }
}

/// What `harness train-cnf` reports (CLI.md's JSON fields).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TrainReport {
    pub steps: usize,
    pub traces: usize,
    /// Live bytes after the first step (warm-up) and after the last.
    pub live_bytes_first: usize,
    pub live_bytes_last: usize,
    pub loss: Vec<f64>,
    pub seconds_per_step: f64,
}

/// Train for `steps` steps from `state`, calling `progress(step, loss)` after each; returns the
/// report and the final state.
pub fn train_for(
    trainer: &mut Trainer,
    mut state: TrainState,
    steps: usize,
    mut progress: impl FnMut(usize, f64),
) -> Result<(TrainReport, TrainState)> {
    let mut loss = Vec::with_capacity(steps);
    let mut live_first = 0;
    let start = std::time::Instant::now();
    for i in 0..steps {
        let (next, l) = trainer.step(&state)?;
        state = next;
        loss.push(l);
        if i == 0 {
            live_first = crate::probe::counters().live_bytes;
        }
        progress(i, l);
    }
    let secs = start.elapsed().as_secs_f64();
    Ok((
        TrainReport {
            steps,
            traces: trainer.traces(),
            live_bytes_first: live_first,
            live_bytes_last: crate::probe::counters().live_bytes,
            loss,
            seconds_per_step: if steps > 0 { secs / steps as f64 } else { 0.0 },
        },
        state,
    ))
}

/// The model's density `exp(log p)` on an `n x n` grid over `extent = (x0, x1, y0, y1)`
/// (cell centres; row 0 at `y0`), evaluated in chunks of `chunk` points.
pub fn density_grid(
    params: &CnfParams<f64>,
    extent: (f64, f64, f64, f64),
    n: usize,
    chunk: usize,
) -> Result<crate::report::svg::Grid> {
    let (x0, x1, y0, y1) = extent;
    let mut pts = Vec::with_capacity(2 * n * n);
    for r in 0..n {
        for c in 0..n {
            pts.push(x0 + (c as f64 + 0.5) / n as f64 * (x1 - x0));
            pts.push(y0 + (r as f64 + 0.5) / n as f64 * (y1 - y0));
        }
    }
    let exact = CnfParams {
        cfg: CnfConfig {
            trace: TraceEstimator::Exact,
            ..params.cfg
        },
        ..params.clone()
    };
    let mut values = Vec::with_capacity(n * n);
    for part in pts.chunks(2 * chunk.max(1)) {
        match super::flow::log_likelihood(&exact, part, None) {
            Ok(lp) => values.extend(lp.into_iter().map(f64::exp)),
            Err(_) => values.extend(std::iter::repeat_n(f64::NAN, part.len() / 2)),
        }
    }
    Ok(crate::report::svg::Grid {
        nx: n,
        ny: n,
        extent,
        values,
    })
}
