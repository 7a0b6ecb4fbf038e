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
//! The trainer is generic over the arithmetic type `A` (f32 or f64, f64 unless named): the
//! parameters, optimizer moments, batch, probes and every value of the loss and gradient are
//! `A` ([`Trainer::new`] is f64, [`Trainer::typed`] any `A`); the batch and probes are drawn in
//! f64 and rounded once to `A`.
//!
//! Guarantees: `N` steps trace once; live memory after the first step does not grow with `N`;
//! the same seed gives bit-identical losses and parameters. The upstream failure (diffrax #574)
//! was the opposite: the step counter passed as a Python int is static under `jax.jit`, so
//! every step re-traced and the cache, holding one executable per step, grew. The staging is
//! split from the step itself ([`Trainer::step_in`] on a [`StepWorkspace`]), so code that
//! stages the step differently — with the counter in the key, as the upstream loop did — can
//! be put under the same laws.
//!
//! # References
//! - diffrax #574 ("memory leak" in CNF training) and `eqx.debug.assert_max_traces`.
//! - I. Loshchilov, F. Hutter, "Decoupled weight decay regularization", ICLR 2019 (AdamW).
//!
//! ```
//! use harness_reference::cnf::{train::{Trainer, TrainConfig}, data::Dataset, CnfConfig};
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
//! // the same training in f32
//! let mut t32 = Trainer::<f32>::typed(cfg, tc, Dataset::TwoMoons)?;
//! let mut s32 = t32.init()?;
//! for _ in 0..3 {
//!     s32 = t32.step(&s32)?.0;
//! }
//! assert_eq!(t32.traces(), 1);
//! # Ok::<(), harness_reference::Error>(())
//! ```

use super::config::{CnfConfig, Probe, TraceEstimator};
use super::data::Dataset;
use super::flow::loss_and_grad_in;
use super::params::CnfParams;
use super::random::{key, normal, rademacher};
use super::taped::ScratchPool;
use crate::backend::{Array, DType, Real};
use crate::error::ensure;
use crate::ode::grad::GradMode;
use crate::optim::{adamw, AdamHyper, AdamW, Transform};
use crate::stage::{HasSignature, KeyHasher, LeafSig, Signature, Stage};
use crate::tree::{apply_updates, Tree};
use crate::Result;
use std::sync::Arc;

/// Stream purposes.
const DATA_STREAM: u64 = 0xDA7A;
const PROBE_STREAM: u64 = 0x9B0B;

/// Training settings (defaults: the diffrax example's AdamW(1e-3, weight_decay=1e-5), batch 500).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainConfig {
    /// Samples per step; `1..=MAX_BATCH`.
    pub batch: usize,
    /// AdamW learning rate (finite, `> 0`).
    pub learning_rate: f64,
    /// AdamW decoupled weight decay (finite, `>= 0`).
    pub weight_decay: f64,
    /// Seeds the initial weights, every mini-batch and every probe.
    pub seed: u64,
    /// How the gradient through each block's solve is taken (full tape or checkpointed).
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
    /// Every field in its range (batch `1..=`[`MAX_BATCH`], a finite positive learning rate, ...),
    /// else [`crate::Error::InvalidHyper`] naming the first field out of range.
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

/// Everything a step carries from one call to the next (parameters and moments in `A`).
#[derive(Debug, Clone)]
pub struct TrainState<A: Real = f64> {
    /// One leaf per block, `block{b}`, in [`super::Layout`] order.
    pub params: Tree<A>,
    /// The AdamW moments and count, one leaf per parameter block.
    pub opt: <AdamW as Transform<A>>::State,
    /// The step counter: a strong `int32[]` array (dynamic, as `jnp.asarray(step)`).
    pub step: Array<i32>,
}

impl<A: Real> HasSignature for TrainState<A> {
    fn signature(&self) -> Signature {
        let mut s = Signature::new()
            .with("params", self.params.signature())
            .with("opt_state", self.opt.signature());
        s.push("step", LeafSig::strong(self.step.shape(), DType::I32));
        s
    }
}

/// What a trace builds: the step's workspace (the mini-batch and probe buffers, and the
/// gradient's buffers, allocated in the first step and reused after: [`ScratchPool`]), as a
/// compiled executable owns its buffers.
pub struct StepWorkspace<A = f64> {
    batch: Vec<A>,
    probes: Vec<A>,
    blocks: Arc<ScratchPool<A>>,
}

/// A CNF trainer: configuration, data, optimizer and the staged step, training in `A` (f32 or
/// f64).
pub struct Trainer<A: Real = f64> {
    /// Model and solver settings (validated).
    pub cfg: CnfConfig,
    /// Batch, optimizer and seed settings (validated).
    pub train: TrainConfig,
    /// The density the batches are drawn from.
    pub data: Dataset,
    opt: AdamW,
    stage: Stage<StepWorkspace<A>>,
}

impl Trainer {
    /// Validated f64 trainer (the data set must be 2-D when `data_size = 2`; every built-in set
    /// is): [`Trainer::typed`] at f64.
    pub fn new(cfg: CnfConfig, train: TrainConfig, data: Dataset) -> Result<Self> {
        Self::typed(cfg, train, data)
    }
}

impl<A: Real> Trainer<A> {
    /// Validated trainer computing in `A` (f32 or f64); the same checks as [`Trainer::new`].
    ///
    /// ```
    /// use harness_reference::cnf::{train::{Trainer, TrainConfig}, data::Dataset, CnfConfig};
    /// let cfg = CnfConfig { width: 8, depth: 1, blocks: 1, ..CnfConfig::default() };
    /// let tc = TrainConfig { batch: 16, ..TrainConfig::default() };
    /// let mut trainer = Trainer::<f32>::typed(cfg, tc, Dataset::TwoMoons)?;
    /// let state = trainer.init()?;
    /// let (next, loss) = trainer.step(&state)?;
    /// assert!(loss.is_finite());
    /// let len = trainer.params_of(&state)?.layout.len;
    /// assert_eq!(next.params.get("block0").map(|a| a.data().len()), Some(len));
    /// assert!(Trainer::<f32>::typed(cfg, TrainConfig { batch: 0, ..tc }, Dataset::TwoMoons).is_err());
    /// # Ok::<(), harness_reference::Error>(())
    /// ```
    pub fn typed(cfg: CnfConfig, train: TrainConfig, data: Dataset) -> Result<Self> {
        cfg.validate()?;
        train.validate()?;
        ensure(
            cfg.data_size == 2,
            "data_size",
            cfg.data_size,
            "must be 2 for the built-in 2-D data sets",
        )?;
        // the step computes in `A`: a rate finite and positive in f64 may round to inf or 0 there
        let lr = A::of_f64(train.learning_rate).as_f64();
        ensure(
            lr.is_finite() && lr > 0.0,
            "learning_rate",
            format!("{:e}", train.learning_rate),
            &format!(
                "must be finite and > 0 once rounded to {} (it rounds to {lr})",
                A::DTYPE
            ),
        )?;
        let wd = A::of_f64(train.weight_decay).as_f64();
        ensure(
            wd.is_finite(),
            "weight_decay",
            format!("{:e}", train.weight_decay),
            &format!(
                "must be finite once rounded to {} (it rounds to {wd})",
                A::DTYPE
            ),
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
        })
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

    /// Fresh state: weights from the seed (drawn in f64, rounded once to `A`), AdamW state,
    /// step 0.
    pub fn init(&self) -> Result<TrainState<A>> {
        let p = CnfParams::<A>::init(self.cfg, self.train.seed)?;
        self.state_from(&p)
    }

    /// State for given weights.
    pub fn state_from(&self, p: &CnfParams<A>) -> Result<TrainState<A>> {
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
    pub fn params_of(&self, state: &TrainState<A>) -> Result<CnfParams<A>> {
        params_from(self.cfg, state)
    }

    /// The mini-batch of step `k` (deterministic in `(seed, k)`).
    pub fn batch_of(&self, k: u64, out: &mut [A]) {
        self.data
            .sample_as(key(self.train.seed, DATA_STREAM, k), 0, out)
    }

    /// Hash of the static configuration the step is specialised on (model, training settings,
    /// optimizer); the step counter is not part of it.
    pub fn static_key(&self) -> u64 {
        KeyHasher::default()
            .val(self.cfg.static_key())
            .val(self.train.static_key())
            .val(<AdamW as Transform<A>>::static_key(&self.opt))
            .finish()
    }

    /// A fresh workspace for [`Trainer::step_in`], sized by the configuration.
    pub fn workspace(&self) -> StepWorkspace<A> {
        StepWorkspace::new(self.train.batch * self.cfg.data_size)
    }

    /// One training step: `(new state, loss before the update)`. The step is staged: one trace
    /// per (static configuration, signature of the state), whose workspace later steps reuse.
    /// The input state is untouched, so an error corrupts nothing. The loss is returned in f64
    /// (exact from `A`).
    pub fn step(&mut self, state: &TrainState<A>) -> Result<(TrainState<A>, f64)> {
        let key = self.static_key();
        let len = self.train.batch * self.cfg.data_size;
        let Trainer {
            cfg,
            train,
            data,
            opt,
            stage,
        } = self;
        let ws = stage.call(key, state, |_| Ok(StepWorkspace::new(len)))?;
        step_with(cfg, train, data, opt, ws, state)
    }

    /// The step itself, unstaged, in a caller-held workspace (from [`Trainer::workspace`]).
    pub fn step_in(
        &self,
        ws: &mut StepWorkspace<A>,
        state: &TrainState<A>,
    ) -> Result<(TrainState<A>, f64)> {
        step_with(&self.cfg, &self.train, &self.data, &self.opt, ws, state)
    }
}

impl<A: Real> StepWorkspace<A> {
    /// Buffers of `len` values each (batch size times data size).
    fn new(len: usize) -> Self {
        StepWorkspace {
            batch: vec![A::zero(); len],
            probes: vec![A::zero(); len],
            blocks: Arc::default(),
        }
    }
}

/// The weights held by a state, laid out for `cfg`.
fn params_from<A: Real>(cfg: CnfConfig, state: &TrainState<A>) -> Result<CnfParams<A>> {
    let blocks = (0..cfg.blocks)
        .map(|b| {
            state
                .params
                .get(&format!("block{b}"))
                .map(|a| a.data().to_vec())
                .ok_or_else(|| crate::Error::Structure(format!("missing leaf `block{b}`")))
        })
        .collect::<Result<Vec<_>>>()?;
    CnfParams::from_blocks(cfg, blocks)
}

/// One training step of [`Trainer::step_in`], on the trainer's parts.
fn step_with<A: Real>(
    cfg: &CnfConfig,
    train: &TrainConfig,
    data: &Dataset,
    opt: &AdamW,
    ws: &mut StepWorkspace<A>,
    state: &TrainState<A>,
) -> Result<(TrainState<A>, f64)> {
    let k = state.step.data().first().copied().unwrap_or(0);
    let params = params_from(*cfg, state)?;
    let StepWorkspace {
        batch,
        probes,
        blocks,
    } = ws;
    let k = u64::try_from(k).map_err(|_| crate::Error::InvalidHyper {
        name: "step",
        value: k.to_string(),
        expected: "a non-negative step counter".into(),
    })?;
    data.sample_as(key(train.seed, DATA_STREAM, k), 0, batch);
    let probes = match cfg.trace {
        TraceEstimator::Exact => None,
        TraceEstimator::Hutchinson(kind) => {
            let pk = key(train.seed, PROBE_STREAM, k);
            for (i, e) in probes.iter_mut().enumerate() {
                *e = A::of_f64(match kind {
                    Probe::Gaussian => normal(pk, i as u64),
                    Probe::Rademacher => rademacher(pk, i as u64),
                });
            }
            Some(&probes[..])
        }
    };
    let lg = loss_and_grad_in(&params, batch, probes, train.grad, blocks)?;
    let grads = Tree::from_leaves(
        lg.grads
            .into_iter()
            .enumerate()
            .map(|(b, g)| (format!("block{b}"), Array::vector(g))),
    )?;
    let (updates, opt) = opt.update(&grads, &state.opt, &state.params)?;
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
        lg.loss.as_f64(),
    ))
}
