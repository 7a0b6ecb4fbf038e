//! Typed observations: the `result` objects of the worker's replies (protocol v1,
//! `harness/upstream/PROTOCOL.md`), parsed into structs the laws of [`super::check`] read.
//!
//! Floats may arrive as the strings `"nan"`, `"inf"`, `"-inf"` (the worker writes no
//! non-finite JSON numbers); they parse to the corresponding `f64`. Per-leaf state signatures
//! convert to the reference's [`Signature`], so that [`Signature::diff`] names a changed leaf
//! of the real library exactly as it does for our own staged functions.

use crate::backend::DType;
use crate::error::{Error, Result, WorkerErrorKind};
use crate::stage::{LeafSig, Signature};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;

/// Parse a result object into `T`; a missing or mistyped field is
/// [`WorkerErrorKind::BadResult`] naming it.
pub fn parse<T: DeserializeOwned>(profile: &str, result: &serde_json::Value) -> Result<T> {
    T::deserialize(result).map_err(|e| Error::Worker {
        profile: profile.to_string(),
        kind: WorkerErrorKind::BadResult,
        detail: format!("{e} in {}", truncated_json(result)),
    })
}

fn truncated_json(v: &serde_json::Value) -> String {
    let s = v.to_string();
    if s.len() <= 300 {
        s
    } else {
        let mut end = 300;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    }
}

/// A float that may be written as `"nan"`, `"inf"` or `"-inf"`.
fn float<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum F {
        N(f64),
        S(String),
    }
    match F::deserialize(d)? {
        F::N(x) => Ok(x),
        F::S(s) => match s.as_str() {
            "nan" => Ok(f64::NAN),
            "inf" => Ok(f64::INFINITY),
            "-inf" => Ok(f64::NEG_INFINITY),
            other => Err(serde::de::Error::custom(format!(
                "expected a number, \"nan\", \"inf\" or \"-inf\", got {other:?}"
            ))),
        },
    }
}

fn floats<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Vec<f64>, D::Error> {
    #[derive(Deserialize)]
    struct W(#[serde(deserialize_with = "float")] f64);
    Ok(Vec::<W>::deserialize(d)?.into_iter().map(|w| w.0).collect())
}

fn opt_float<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<f64>, D::Error> {
    #[derive(Deserialize)]
    struct W(#[serde(deserialize_with = "float")] f64);
    Ok(Option::<W>::deserialize(d)?.map(|w| w.0))
}

/// The `hello` reply: who the worker is.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
pub struct Hello {
    /// The profile label the worker was started with.
    pub profile: String,
    /// The interpreter's version (`3.11.7`).
    pub python: String,
    /// Installed versions of jax, jaxlib, optax, diffrax, equinox, numpy, chex (`None`: absent).
    pub packages: BTreeMap<String, Option<String>>,
    /// CPU devices jax sees (2 with the worker's `XLA_FLAGS`).
    pub devices: u64,
    /// The protocol version the worker speaks.
    pub protocol: u64,
}

/// `adam`/`radam` × `eager-live-arrays`: live jax arrays after each eager (not jitted) step.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct LiveArrays {
    /// `len(jax.live_arrays())` after each step, after `gc.collect()`.
    pub live_arrays: Vec<u64>,
    /// The bytes of those arrays after each step.
    pub live_bytes: Vec<u64>,
    /// Live arrays before the probe allocated anything.
    pub baseline_live_arrays: u64,
    /// Live arrays after the probe dropped params, state and optimizer: leaked arrays.
    pub live_arrays_after_release: u64,
    /// The parameters' dtype.
    pub dtype: String,
}

/// One step of `update-gradients`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct GradientStep {
    /// The step (1-based).
    pub t: u64,
    /// RAdam's `rho_t` at this step (float64).
    #[serde(deserialize_with = "float")]
    pub rho_t: f64,
    /// NaN entries of d sum(update_t) / d g_t (reverse mode).
    pub grad_nan: u64,
    /// Entries of that gradient.
    pub grad_total: u64,
    /// d loss(params after t unrolled steps) / d learning rate.
    #[serde(deserialize_with = "float")]
    pub lr_grad: f64,
}

/// `adam`/`radam` × `update-gradients`: gradients through the update, step by step.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct UpdateGradients {
    /// Steps 1..=steps.
    pub steps: Vec<GradientStep>,
    /// The loss the learning-rate gradient differentiates (`sum(params**2)`).
    pub loss: String,
}

/// One state leaf as the worker reports it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LeafReport {
    /// `"s" + jax.tree_util.keystr(path)`, e.g. `s[1].info.num_linesearch_steps`.
    pub path: String,
    /// The leaf's shape.
    pub shape: Vec<usize>,
    /// numpy's name of its dtype (`float32`, `int32`, ...).
    pub dtype: String,
    /// jax's weak-type flag.
    pub weak_type: bool,
    /// For a leaf that is not a jax array: its Python type.
    #[serde(default)]
    pub python: Option<String>,
}

impl LeafReport {
    /// The reference's leaf signature of the leaf as `jax.jit` sees it. A leaf that is not a
    /// jax array (a Python scalar, reported weak, or a numpy array) is canonicalised as jit
    /// canonicalises it: without x64, `int64` becomes `int32` and `float64` becomes `float32`
    /// (a Python `0` in a state is a weak `int32` to jit). A dtype the reference has no name for
    /// (`int64` under x64, `bool`, key types) is an error naming the leaf.
    pub fn leaf_sig(&self, x64: bool) -> std::result::Result<LeafSig, String> {
        let dtype = match (self.python.is_some() && !x64, self.dtype.as_str()) {
            (true, "int64") => "int32",
            (true, "float64") => "float32",
            (_, d) => d,
        };
        let dtype = DType::parse(dtype).ok_or_else(|| {
            format!(
                "leaf `{}` has dtype {}, which a reference Signature cannot hold (float16/32/64, int32)",
                self.path, self.dtype
            )
        })?;
        Ok(LeafSig {
            shape: self.shape.clone(),
            dtype,
            weak: self.weak_type,
        })
    }
}

/// The reference [`Signature`] of a reported state (leaves keyed by their path), as jit sees it
/// with x64 on or off ([`LeafReport::leaf_sig`]).
pub fn signature(leaves: &[LeafReport], x64: bool) -> std::result::Result<Signature, String> {
    let mut sig = Signature::new();
    for l in leaves {
        sig.push(l.path.clone(), l.leaf_sig(x64)?);
    }
    Ok(sig)
}

/// `jit-steps` of the line search, Muon and CNF subjects: a jitted step called N times.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct JitSteps {
    /// Traces of the jitted function (a counter in its body), never `_cache_size()`.
    pub traces: u64,
    /// jax's cache-miss explanations naming the jitted function (the first one is its first
    /// compile).
    pub cache_misses: Vec<String>,
    /// Explanations about other functions (inner loops, library internals).
    pub other_cache_misses: u64,
    /// The optimizer state's leaves after `init`, then after each step (line search, Muon).
    #[serde(default)]
    pub signatures: Option<Vec<Vec<LeafReport>>>,
    /// What was passed as the step counter on each call (CNF): `"int"` or a dtype.
    #[serde(default)]
    pub step_args: Option<Vec<String>>,
    /// `linesearch-int32-counter`: whether the state had a counter leaf to replace.
    #[serde(default)]
    pub counter_leaf_replaced: Option<bool>,
    /// Whether the probe ran with x64 on.
    #[serde(default)]
    pub x64: bool,
}

impl JitSteps {
    /// The calls made (one per signature after init, or per step argument); `None` when the
    /// reply says neither.
    pub fn calls(&self) -> Option<usize> {
        self.signatures
            .as_ref()
            .map(|s| s.len().saturating_sub(1))
            .or_else(|| self.step_args.as_ref().map(Vec::len))
    }

    /// The `* at ...` lines of jax's explanations after the first compile: which input changed
    /// (the documentation link jax appends is cut off, and a line longer than 200 characters,
    /// such as one printing a whole static pytree, keeps its beginning and end).
    pub fn retrace_reasons(&self) -> Vec<String> {
        self.cache_misses
            .iter()
            .skip(1)
            .flat_map(|m| {
                let lines: Vec<String> = m
                    .lines()
                    .map(str::trim)
                    .filter(|l| l.starts_with("* "))
                    .map(|l| shorten(l.split("https://").next().unwrap_or(l).trim()))
                    .collect();
                if lines.is_empty() {
                    // no input-type line: keep the explanation's last line
                    m.lines()
                        .last()
                        .map(|l| l.trim().to_string())
                        .into_iter()
                        .collect()
                } else {
                    lines
                }
            })
            .collect()
    }
}

/// `s` itself up to 200 characters, else its first 120 and last 60 joined by ` ... `.
fn shorten(s: &str) -> String {
    let n = s.chars().count();
    if n <= 200 {
        return s.to_string();
    }
    let head: String = s.chars().take(120).collect();
    let tail: String = s.chars().skip(n - 60).collect();
    format!("{head} ... {tail}")
}

/// The exception a `build-under-jit` run raised.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Raised {
    /// The exception's class name.
    #[serde(rename = "type")]
    pub error_type: String,
    /// Its message.
    pub message: String,
    /// `build_and_init` or `update`.
    #[serde(rename = "where")]
    pub at: String,
}

/// Muon × `build-under-jit`: the transform built inside a jitted function, updated outside.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BuildUnderJit {
    /// The exception, if any.
    pub raised: Option<Raised>,
    /// The state returned by the jitted `init`.
    pub state_leaves: Vec<LeafReport>,
    /// Whether a state leaf's path contains `ns_coeffs`.
    pub coeffs_in_state: bool,
    /// Whether the update outside jit was finite (`None` when something raised).
    pub update_finite: Option<bool>,
    /// Whether the probe ran with x64 on.
    #[serde(default)]
    pub x64: bool,
}

/// Muon × `sharded`: the same jitted updates on one device and split over two.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Sharded {
    /// Largest |difference| over every step's update and the final params.
    #[serde(deserialize_with = "float")]
    pub max_abs_diff: f64,
    /// Whether every compared array was bit-identical.
    pub bitwise_equal: bool,
    /// Devices the sharded run used.
    pub devices: u64,
    /// Largest |difference| of each step's update.
    #[serde(deserialize_with = "floats")]
    pub per_step_max_abs_diff: Vec<f64>,
    /// Largest |difference| of the final params.
    #[serde(deserialize_with = "float")]
    pub final_params_max_abs_diff: f64,
    /// The sharding of the last sharded update.
    pub update_sharding: String,
    /// How the run was sharded.
    pub method: String,
    /// Largest |update| of the unsharded run (the scale of the tolerance), when reported.
    #[serde(default, deserialize_with = "opt_float")]
    pub max_abs_update: Option<f64>,
    /// Largest |final param| of the unsharded run, when reported.
    #[serde(default, deserialize_with = "opt_float")]
    pub max_abs_params: Option<f64>,
}

/// Stacked init × `peak`: one build in a fresh process, its RSS high-water mark.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InitPeak {
    /// VmHWM after the build minus VmRSS before it.
    pub peak_bytes_above_baseline: i64,
    /// Exact bytes of the float16 model.
    pub final_bytes: u64,
    /// VmRSS before the build.
    pub baseline_bytes: u64,
    /// `peak_bytes_above_baseline / final_bytes`.
    #[serde(deserialize_with = "float")]
    pub ratio: f64,
    /// VmRSS after the build.
    pub rss_after_bytes: u64,
    /// Whether the high-water mark could be reset before the build.
    pub hwm_reset: bool,
    /// The strategy's short name.
    pub strategy: String,
    /// `list of blocks` or `stacked: leading axis = layers`.
    pub layout: String,
    /// Seconds of the build.
    #[serde(deserialize_with = "float")]
    pub build_seconds: f64,
}
