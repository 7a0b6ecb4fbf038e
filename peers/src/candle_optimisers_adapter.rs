//! `candle-optimisers` 0.10.2 (`Adam`, `Adam` with decoupled weight decay, that is AdamW,
//! `RAdam`, `NAdam`) on `candle-core` 0.10.2's CPU device behind [`Optimizer`].
//!
//! # What the adapter does
//! `init` makes one `candle_core::Var` per leaf of the parameters (same shape and dtype) and the
//! peer optimizer over them (`candle_nn::Optimizer::new`). `update` hands the gradients over in a
//! `GradStore` (one from a backward pass of a scalar, with each parameter's gradient inserted
//! exactly as given), runs one `step`, and reads the variables back as the update.
//!
//! The peer steps its variables in place (`theta <- theta - delta`) and never shows `delta`.
//! Read as `new - old`, the update would be rounded to the parameters' spacing (in f32, a
//! parameter near 3000 has spacing 2.4e-4: a step of 7e-3 comes back up to 1.2e-4, 1.7%, off).
//! Without weight decay the peer's step does not read `theta`'s value (the moments depend on the gradients
//! only), so `update` sets each variable to zero before the step: the peer's own subtraction
//! `0 - delta` is exact and the variable then holds the update, signed as optax's, unrounded.
//! With weight decay (the AdamW subject) the step reads `theta`: the variables then hold the
//! parameters, the update is read back as `new - old`, and the subject says so
//! ([`Optimizer::updates_read_through_params`]), so that the step-for-step comparison allows for
//! the parameters' spacing (`harness::tolerance::read_through_params`).
//!
//! The peer keeps its moments and step counter inside the optimizer, so a [`PeerState`] is a
//! ticket for the peer's current state: it names the number of steps taken and the signature
//! observed after them. Stepping any other than the latest state is an error (the suites only
//! ever thread states forward). The signature is what the peer shows of its state through its
//! public `Debug` output: shape and dtype of the moments `m` and `v` of every parameter, and the
//! host-side step counter `t` (an f64 scalar). A vector of fewer than 10 elements prints its
//! values, so its length is their count; a 0-D tensor prints like a 1-element vector and is told
//! apart by the parameter's rank.
//!
//! # The mapping from an [`OptimizerSpec`] (optax's convention) to the peer's parameters
//! The peer follows PyTorch (see [`crate::pytorch_convention`] for the formulas side by side):
//! - `Adam`: `ParamsAdam { lr, beta_1: b1, beta_2: b2, eps, weight_decay: None, amsgrad: false }`.
//!   The peer's step is `lr m_hat / (sqrt(v_hat) + eps)` with `1 - b^t` formed in f64: optax's
//!   with `eps_root = 0`. `eps_root != 0` and nesterov have no counterpart: unsupported.
//! - `RAdam`: `ParamsRAdam { lr, beta_1: b1, beta_2: b2, eps, weight_decay: None }`. The peer adds
//!   `eps` to `sqrt(v_t)`, not to `sqrt(v_hat)` (optax's `eps` is PyTorch's `eps sqrt(1 - b2^t)`,
//!   a different number at every step), and takes the rectified branch when `rho_t > 5` (optax:
//!   `rho_t >= threshold`); below it the step is `lr m_hat`, as optax's. So the peer's RAdam is
//!   compared with the PyTorch-convention reference
//!   ([`crate::pytorch_convention::reference_updates`]), not with optax's: [`make_radam`] takes
//!   the specs whose `threshold` is 5 (the peer's fixed rule) and reads `eps` as the peer's.
//!   `eps_root != 0`, nesterov and any other threshold are unsupported.
//! - `AdamW` ([`make_adamw`]): `ParamsAdam` as for Adam with
//!   `weight_decay: Some(Decay::DecoupledWeightDecay(1e-2))` (PyTorch's `AdamW` default), for the
//!   Adam specs [`adam_params`] takes.
//! - `NAdam` ([`make_nadam`]): `ParamsNAdam { lr, beta_1: b1, beta_2: b2, eps, weight_decay: None,
//!   momentum_decay: 4e-3 }` (PyTorch's default) for an Adam spec with nesterov set (the spec's
//!   way of asking for Nesterov momentum). The peer follows PyTorch's NAdam, whose momentum
//!   schedule `mu_t = b1 (1 - 0.96^(t psi) / 2)` optax's `nadam` does not have (optax's is its
//!   limit `mu_t = b1`): compared with [`crate::pytorch_convention::nadam_updates`].
//! - Weight decay (not part of an [`OptimizerSpec`]): `Decay::WeightDecay(wd)` adds `wd * p` to
//!   the gradient before the moments (PyTorch's `Adam(weight_decay)`, L2), and
//!   `Decay::DecoupledWeightDecay(wd)` scales `p` by `1 - lr wd` before the step (PyTorch's
//!   `AdamW`, optax's `adamw` up to where the decay enters: optax adds `wd * p` to the scaled step
//!   and multiplies the sum by `-lr`, the same first-order change).
//! - The peer validates no hyperparameter: what it is given it runs with.
//!
//! # References
//! - `candle-optimisers` 0.10.2 documentation (`adam`, `radam`, `nadam` modules: the algorithm
//!   boxes).
//! - PyTorch documentation, `torch.optim.Adam`, `torch.optim.AdamW`, `torch.optim.RAdam`,
//!   `torch.optim.NAdam`.
//! - `docs/ALGORITHMS.md` sections 1-2.
//!
//! ```
//! use harness::optim::RadamHyper;
//! use harness::subject::optimizer::{Algorithm, Optimizer, OptimizerSpec};
//! use harness::laws::radam::leaf;
//! let spec = OptimizerSpec { algorithm: Algorithm::Adam, dtype: harness::backend::DType::F64, learning_rate: 0.1, ..OptimizerSpec::default() };
//! let mut adam = peers::candle_optimisers_adapter::make_adam(&spec).unwrap();
//! let p = leaf::<f64>(&[1.0, -2.0]);
//! let s = adam.init(&p).unwrap();
//! let (u, _) = adam.update(&leaf(&[3.0, -1.0]), &s, &p).unwrap();
//! // Adam's first step is -lr * sign(g) up to eps
//! assert!((u.get("w").unwrap().data()[0] + 0.1).abs() < 1e-9);
//! ```

use candle_core::{Device, Tensor, Var, WithDType};
use candle_nn::optim::Optimizer as _;
use candle_optimisers::adam::{Adam, ParamsAdam};
use candle_optimisers::nadam::{NAdam, ParamsNAdam};
use candle_optimisers::radam::{ParamsRAdam, RAdam};
use candle_optimisers::Decay;
use harness::backend::{DType, Real};
use harness::reference::{Error, Result};
use harness::stage::{HasSignature, LeafSig, Signature};
use harness::subject::optimizer::{unsupported, Algorithm, Optimizer, OptimizerSpec};
use harness::tree::Tree;

use crate::pytorch_convention::{PYTORCH_ADAMW_WEIGHT_DECAY, PYTORCH_NADAM_MOMENTUM_DECAY};

/// The crate version the adapter was written against (pinned in `Cargo.toml`).
pub const VERSION: &str = "0.10.2";

/// `ParamsAdam` for an Adam `spec`, or `None` when the spec asks for something the peer's Adam
/// cannot express (`eps_root != 0`, nesterov, another algorithm).
///
/// ```
/// use harness::optim::RadamHyper;
/// use harness::subject::optimizer::{Algorithm, OptimizerSpec};
/// let spec = OptimizerSpec { algorithm: Algorithm::Adam, learning_rate: 0.5, ..OptimizerSpec::default() };
/// let p = peers::candle_optimisers_adapter::adam_params(&spec).unwrap();
/// assert_eq!((p.lr, p.beta_1, p.beta_2, p.eps), (0.5, 0.9, 0.999, 1e-8));
/// ```
pub fn adam_params(spec: &OptimizerSpec) -> Option<ParamsAdam> {
    let m = &spec.hyper.moments;
    (spec.algorithm == Algorithm::Adam && m.eps_root == 0.0 && !m.nesterov).then_some(ParamsAdam {
        lr: spec.learning_rate,
        beta_1: m.b1,
        beta_2: m.b2,
        eps: m.eps,
        weight_decay: None,
        amsgrad: false,
    })
}

/// `ParamsRAdam` for a RAdam `spec` read in PyTorch's convention (`eps` added to `sqrt(v_t)`),
/// or `None` when the peer's RAdam cannot express it (`eps_root != 0`, nesterov, a `threshold`
/// other than the peer's fixed 5, another algorithm).
///
/// ```
/// use harness::optim::RadamHyper;
/// use harness::subject::optimizer::{Algorithm, OptimizerSpec};
/// let mut spec = OptimizerSpec { algorithm: Algorithm::RAdam, learning_rate: 0.5, ..OptimizerSpec::default() };
/// assert!(peers::candle_optimisers_adapter::radam_params(&spec).is_some());
/// spec.hyper.threshold = 4.0;
/// assert!(peers::candle_optimisers_adapter::radam_params(&spec).is_none());
/// ```
pub fn radam_params(spec: &OptimizerSpec) -> Option<ParamsRAdam> {
    let m = &spec.hyper.moments;
    (spec.algorithm == Algorithm::RAdam
        && m.eps_root == 0.0
        && !m.nesterov
        && spec.hyper.threshold == 5.0)
        .then_some(ParamsRAdam {
            lr: spec.learning_rate,
            beta_1: m.b1,
            beta_2: m.b2,
            eps: m.eps,
            weight_decay: None,
        })
}

/// `ParamsAdam` with decoupled weight decay `weight_decay` (the peer's AdamW) for an Adam
/// `spec` [`adam_params`] takes, or `None`.
///
/// ```
/// use candle_optimisers::Decay;
/// use harness::optim::RadamHyper;
/// use harness::subject::optimizer::{Algorithm, OptimizerSpec};
/// let spec = OptimizerSpec { algorithm: Algorithm::Adam, learning_rate: 0.5, ..OptimizerSpec::default() };
/// let p = peers::candle_optimisers_adapter::adamw_params(&spec, 0.01).unwrap();
/// assert!(matches!(p.weight_decay, Some(Decay::DecoupledWeightDecay(d)) if d == 0.01));
/// ```
pub fn adamw_params(spec: &OptimizerSpec, weight_decay: f64) -> Option<ParamsAdam> {
    adam_params(spec).map(|p| ParamsAdam {
        weight_decay: Some(Decay::DecoupledWeightDecay(weight_decay)),
        ..p
    })
}

/// `ParamsNAdam` with `momentum_decay` for a nesterov Adam `spec` (`eps_root = 0`), or `None`.
/// The spec's nesterov flag is how it asks for Nesterov momentum; the peer's NAdam follows
/// PyTorch's schedule (`crate::pytorch_convention::nadam_updates`), not optax's `nadam`.
///
/// ```
/// use harness::optim::RadamHyper;
/// use harness::subject::optimizer::{Algorithm, OptimizerSpec};
/// let mut spec = OptimizerSpec { algorithm: Algorithm::Adam, learning_rate: 0.5, ..OptimizerSpec::default() };
/// assert!(peers::candle_optimisers_adapter::nadam_params(&spec, 4e-3).is_none());
/// spec.hyper.moments.nesterov = true;
/// assert_eq!(peers::candle_optimisers_adapter::nadam_params(&spec, 4e-3).unwrap().momentum_decay, 4e-3);
/// ```
pub fn nadam_params(spec: &OptimizerSpec, momentum_decay: f64) -> Option<ParamsNAdam> {
    let m = &spec.hyper.moments;
    (spec.algorithm == Algorithm::Adam && m.eps_root == 0.0 && m.nesterov).then_some(ParamsNAdam {
        lr: spec.learning_rate,
        beta_1: m.b1,
        beta_2: m.b2,
        eps: m.eps,
        weight_decay: None,
        momentum_decay,
    })
}

/// The peer's hyperparameters for one subject.
#[derive(Debug, Clone)]
pub enum PeerParams {
    /// `candle_optimisers::adam::Adam`'s settings (with AdamW's decoupled decay when set).
    Adam(ParamsAdam),
    /// `candle_optimisers::radam::RAdam`'s settings.
    RAdam(ParamsRAdam),
    /// `candle_optimisers::nadam::NAdam`'s settings, with its momentum-decay schedule.
    NAdam(ParamsNAdam),
}

impl PeerParams {
    /// Whether the peer's step reads the parameters' values (decoupled weight decay, or L2 weight
    /// decay added to the gradient): then the variables keep the parameters and the update is
    /// read back as `new - old`.
    pub fn reads_params(&self) -> bool {
        match self {
            PeerParams::Adam(p) => p.weight_decay.is_some(),
            PeerParams::RAdam(p) => p.weight_decay.is_some(),
            PeerParams::NAdam(p) => p.weight_decay.is_some(),
        }
    }
}

/// The factory of the Adam subject: [`CandleOptimiser`] over the peer's `Adam` for an Adam spec
/// [`adam_params`] takes, [`unsupported`] otherwise.
///
/// ```no_run
/// use harness::subject::optimizer::{check, SuiteOptions};
/// let opts = SuiteOptions { memory: false, ..SuiteOptions::default() };
/// let report = check("candle-optimisers Adam", &peers::candle_optimisers_adapter::make_adam, &opts);
/// println!("{}", report.summary());
/// ```
pub fn make_adam(spec: &OptimizerSpec) -> Result<CandleOptimiser> {
    adam_params(spec)
        .map(|p| CandleOptimiser::new(PeerParams::Adam(p)))
        .ok_or_else(|| unsupported(spec))
}

/// The factory of the RAdam subject: [`CandleOptimiser`] over the peer's `RAdam` for a RAdam
/// spec [`radam_params`] takes, [`unsupported`] otherwise.
///
/// ```no_run
/// use harness::subject::optimizer::SuiteOptions;
/// let opts = SuiteOptions { memory: false, ..SuiteOptions::default() };
/// let make = peers::candle_optimisers_adapter::make_radam;
/// let torch = [peers::pytorch_convention::Torch::RAdam];
/// println!("{}", peers::check_pytorch_convention("candle-optimisers RAdam", &make, &torch, &opts).summary());
/// ```
pub fn make_radam(spec: &OptimizerSpec) -> Result<CandleOptimiser> {
    radam_params(spec)
        .map(|p| CandleOptimiser::new(PeerParams::RAdam(p)))
        .ok_or_else(|| unsupported(spec))
}

/// The factory of the AdamW subject: [`CandleOptimiser`] over the peer's `Adam` with decoupled
/// weight decay [`PYTORCH_ADAMW_WEIGHT_DECAY`] (PyTorch's `AdamW` default) for an Adam spec
/// [`adam_params`] takes, [`unsupported`] otherwise.
///
/// ```no_run
/// use harness::subject::optimizer::SuiteOptions;
/// use peers::pytorch_convention::{Torch, PYTORCH_ADAMW_WEIGHT_DECAY};
/// let opts = SuiteOptions { memory: false, ..SuiteOptions::default() };
/// let make = peers::candle_optimisers_adapter::make_adamw;
/// let torch = [Torch::AdamW { weight_decay: PYTORCH_ADAMW_WEIGHT_DECAY }];
/// println!("{}", peers::check_pytorch_convention("candle-optimisers AdamW", &make, &torch, &opts).summary());
/// ```
pub fn make_adamw(spec: &OptimizerSpec) -> Result<CandleOptimiser> {
    adamw_params(spec, PYTORCH_ADAMW_WEIGHT_DECAY)
        .map(|p| CandleOptimiser::new(PeerParams::Adam(p)))
        .ok_or_else(|| unsupported(spec))
}

/// The factory of the NAdam subject: [`CandleOptimiser`] over the peer's `NAdam` with
/// `momentum_decay` [`PYTORCH_NADAM_MOMENTUM_DECAY`] (PyTorch's default) for a nesterov Adam
/// spec [`nadam_params`] takes, [`unsupported`] otherwise.
///
/// ```no_run
/// use harness::subject::optimizer::SuiteOptions;
/// use peers::pytorch_convention::{Torch, PYTORCH_NADAM_MOMENTUM_DECAY};
/// let opts = SuiteOptions { memory: false, ..SuiteOptions::default() };
/// let make = peers::candle_optimisers_adapter::make_nadam;
/// let torch = [Torch::NAdam { momentum_decay: PYTORCH_NADAM_MOMENTUM_DECAY }];
/// println!("{}", peers::check_pytorch_convention("candle-optimisers NAdam", &make, &torch, &opts).summary());
/// ```
pub fn make_nadam(spec: &OptimizerSpec) -> Result<CandleOptimiser> {
    nadam_params(spec, PYTORCH_NADAM_MOMENTUM_DECAY)
        .map(|p| CandleOptimiser::new(PeerParams::NAdam(p)))
        .ok_or_else(|| unsupported(spec))
}

/// The peer optimizer, built by `init`.
#[derive(Debug)]
enum PeerOpt {
    Adam(Adam),
    RAdam(RAdam),
    NAdam(NAdam),
}

/// The peer optimizer with the `Var`s it steps (leaf name, shape, variable) and its step count.
#[derive(Debug)]
struct Peer {
    opt: PeerOpt,
    vars: Vec<(String, Vec<usize>, Var)>,
    steps: u64,
}

/// One optimizer of `candle-optimisers` as a subject of the optimizer suite (f32 and f64).
#[derive(Debug)]
pub struct CandleOptimiser {
    params: PeerParams,
    peer: Option<Peer>,
}

impl CandleOptimiser {
    /// A subject over the peer optimizer `params` selects; the peer is built by `init`.
    pub fn new(params: PeerParams) -> Self {
        Self { params, peer: None }
    }
    /// The peer's hyperparameters.
    pub fn params(&self) -> &PeerParams {
        &self.params
    }
}

/// A ticket for the peer's state after `steps` steps, with the signature observed then.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerState {
    /// Steps the peer had taken when this state was current.
    pub steps: u64,
    signature: Signature,
}

impl HasSignature for PeerState {
    fn signature(&self) -> Signature {
        self.signature.clone()
    }
}

/// A dtype both the reference and candle compute in (f32, f64).
pub trait PeerFloat: Real + WithDType {}
impl PeerFloat for f32 {}
impl PeerFloat for f64 {}

/// The peer's error, its first line (candle appends a backtrace when `RUST_BACKTRACE` is set).
fn peer_error(e: impl std::fmt::Display) -> Error {
    let text = e.to_string();
    Error::External(format!(
        "candle-optimisers: {}",
        text.lines().next().unwrap_or_default().trim()
    ))
}

fn tensor<E: PeerFloat>(data: &[E], shape: &[usize]) -> Result<Tensor> {
    Tensor::from_slice(data, shape.to_vec(), &Device::Cpu).map_err(peer_error)
}

/// The dtype named in candle's `Debug` output.
fn dtype_named(name: &str) -> Option<DType> {
    match name {
        "f32" => Some(DType::F32),
        "f64" => Some(DType::F64),
        "f16" => Some(DType::F16),
        _ => None,
    }
}

/// Shape and dtype of the tensor printed as `Tensor[BODY; DTYPE]` (`BODY`: `dims a, b, ...` or
/// the values of a vector shorter than 10; a 0-D tensor prints one value, like a 1-element
/// vector: `rank0` tells which).
fn printed_leaf(inside: &str, rank0: bool) -> Option<LeafSig> {
    let (body, dtype) = inside.rsplit_once("; ")?;
    let dtype = dtype_named(dtype.trim())?;
    let shape = if let Some(dims) = body.strip_prefix("dims ") {
        dims.split(", ")
            .map(|d| d.trim().parse().ok())
            .collect::<Option<Vec<usize>>>()?
    } else if body.is_empty() {
        vec![0]
    } else {
        let n = body.split(", ").count();
        if n == 1 && rank0 {
            vec![]
        } else {
            vec![n]
        }
    };
    Some(LeafSig::strong(&shape, dtype))
}

/// The peer's state as its `Debug` output shows it: `NAME.m`, `NAME.v` per parameter (in the
/// order the peer was given them) and the host-side f64 scalars `host` (the step counter `t`;
/// NAdam's momentum schedule and its products too).
fn observed_signature(
    debug: &str,
    vars: &[(String, Vec<usize>, Var)],
    host: &[&str],
) -> Result<Signature> {
    let mut sig = Signature::new();
    for key in ["m", "v"] {
        let marker = format!(", {key}: Var(Tensor[");
        let mut rest = debug;
        for (name, shape, _) in vars {
            let at = rest.find(&marker).ok_or_else(|| {
                peer_error(format!(
                    "no moment `{key}` of `{name}` in the peer's Debug output"
                ))
            })? + marker.len();
            let end = rest[at..]
                .find(']')
                .ok_or_else(|| peer_error("unterminated tensor in the peer's Debug output"))?
                + at;
            let leaf = printed_leaf(&rest[at..end], shape.is_empty())
                .ok_or_else(|| peer_error(format!("unreadable tensor `{}`", &rest[at..end])))?;
            sig.push(format!("{name}.{key}"), leaf);
            rest = &rest[end..];
        }
    }
    for name in host {
        if debug.rfind(&format!(", {name}: ")).is_none() {
            return Err(peer_error(format!(
                "no host scalar `{name}` in the peer's Debug output"
            )));
        }
        sig.push(*name, LeafSig::strong(&[], DType::F64));
    }
    Ok(sig)
}

impl Peer {
    fn signature(&self) -> Result<Signature> {
        let debug = match &self.opt {
            PeerOpt::Adam(o) => format!("{o:?}"),
            PeerOpt::RAdam(o) => format!("{o:?}"),
            PeerOpt::NAdam(o) => format!("{o:?}"),
        };
        let host: &[&str] = match &self.opt {
            PeerOpt::NAdam(_) => &["t", "mu_t", "mu_t2", "prod", "prod2"],
            _ => &["t"],
        };
        observed_signature(&debug, &self.vars, host)
    }
}

impl<E: PeerFloat> Optimizer<E> for CandleOptimiser {
    type State = PeerState;

    fn updates_read_through_params(&self) -> bool {
        self.params.reads_params()
    }

    fn init(&mut self, params: &Tree<E>) -> Result<PeerState> {
        let vars = params
            .iter()
            .map(|(name, a)| {
                let t = tensor(a.data(), a.shape())?;
                Ok((
                    name.clone(),
                    a.shape().to_vec(),
                    Var::from_tensor(&t).map_err(peer_error)?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let handed: Vec<Var> = vars.iter().map(|(_, _, v)| v.clone()).collect();
        let opt = match &self.params {
            PeerParams::Adam(p) => PeerOpt::Adam(Adam::new(handed, p.clone()).map_err(peer_error)?),
            PeerParams::RAdam(p) => {
                PeerOpt::RAdam(RAdam::new(handed, p.clone()).map_err(peer_error)?)
            }
            PeerParams::NAdam(p) => {
                PeerOpt::NAdam(NAdam::new(handed, p.clone()).map_err(peer_error)?)
            }
        };
        let peer = Peer {
            opt,
            vars,
            steps: 0,
        };
        let signature = peer.signature()?;
        self.peer = Some(peer);
        Ok(PeerState {
            steps: 0,
            signature,
        })
    }

    fn update(
        &mut self,
        grads: &Tree<E>,
        state: &PeerState,
        params: &Tree<E>,
    ) -> Result<(Tree<E>, PeerState)> {
        let peer = self
            .peer
            .as_mut()
            .ok_or_else(|| peer_error("update before init"))?;
        if state.steps != peer.steps {
            return Err(peer_error(format!(
                "the peer keeps its state inside the optimizer: only its latest state (after {} steps) can be stepped, not the one after {}",
                peer.steps, state.steps
            )));
        }
        params.check_like(grads, "grads")?;
        let reads_params = self.params.reads_params();
        // A gradient store (its constructor is private): one from a scalar's backward pass,
        // then each parameter's gradient exactly as given.
        let seed = Var::zeros((), candle_core::DType::F32, &Device::Cpu).map_err(peer_error)?;
        let mut store = seed.as_tensor().backward().map_err(peer_error)?;
        store.remove(seed.as_tensor());
        for (name, shape, var) in &peer.vars {
            let (p, g) = match (params.get(name), grads.get(name)) {
                (Some(p), Some(g)) if p.shape() == shape.as_slice() => (p, g),
                _ => {
                    return Err(peer_error(format!(
                        "leaf `{name}` of shape {shape:?} missing or reshaped"
                    )))
                }
            };
            if reads_params {
                // the parameters themselves: the update is read back as `new - old`
                var.set(&tensor(p.data(), shape)?).map_err(peer_error)?;
            } else {
                // zero: the step leaves `0 - delta` in the variable (module documentation)
                let zeros = vec![E::of_f64(0.0); g.data().len()];
                var.set(&tensor(&zeros, shape)?).map_err(peer_error)?;
            }
            store.insert(var.as_tensor(), tensor(g.data(), shape)?);
        }
        match &mut peer.opt {
            PeerOpt::Adam(o) => o.step(&store),
            PeerOpt::RAdam(o) => o.step(&store),
            PeerOpt::NAdam(o) => o.step(&store),
        }
        .map_err(peer_error)?;
        peer.steps += 1;
        let mut updates = Vec::with_capacity(peer.vars.len());
        for (name, shape, var) in &peer.vars {
            let mut data: Vec<E> = var
                .as_tensor()
                .flatten_all()
                .and_then(|t| t.to_vec1::<E>())
                .map_err(peer_error)?;
            if reads_params {
                let old = params.get(name).expect("checked above").data();
                data = data.iter().zip(old).map(|(&x, &q)| x - q).collect();
            }
            updates.push((
                name.clone(),
                harness::backend::Array::new(shape.clone(), data)?,
            ));
        }
        let signature = peer.signature()?;
        Ok((
            Tree::from_leaves(updates)?,
            PeerState {
                steps: peer.steps,
                signature,
            },
        ))
    }
}
