//! `harness upstream check`: the laws applied to what the real libraries do.
//!
//! Each *observation* is one request to a profile's worker (a subject and a probe, with fixed
//! arguments); each law is a function of Rust on the parsed observation ([`super::observe`])
//! that returns a [`Judgement`]: a verdict and its evidence. The worker only reports what
//! happened; it never decides a verdict.
//!
//! | law | observation | holds when |
//! |---|---|---|
//! | `live-buffers-flat` | eager live arrays per step | the count after the last step equals the count after step 1 |
//! | `where-gradients-finite` | gradients through the update | no NaN in d sum(update)/d grad and a finite learning-rate gradient at every step |
//! | `one-trace` | a jitted step called N times | the step traced once |
//! | `signatures-identical` | state leaves after init and each update | every state [`Signature`] equals init's |
//! | `coeffs-in-state` | Muon built under jit, updated outside | nothing raised, the coefficients are a state leaf, the update is finite |
//! | `sharded-equals-unsharded` | Muon on 1 and on 2 devices | max difference within the golden f32 tolerance scaled by the update |
//! | `peak-within-bound` | stacked init in a fresh process | peak above baseline within the bound of [`peak_bound`] |
//!
//! The subjects and the verdicts expected of them are data ([`EXPECTED`]); [`plan`] turns them
//! into observations for one profile. A verdict that differs from its expectation is a finding,
//! reported with its evidence. A worker that dies, hangs or answers garbage turns the rows of
//! its observation into `error` rows, and the run goes on (with a fresh worker).

use super::observe::{
    self, BuildUnderJit, Hello, InitPeak, JitSteps, LiveArrays, Sharded, UpdateGradients,
};
use super::profile::{Locations, Profile};
use super::worker::{Reply, Worker, WorkerCommand};
use crate::backend::DType;
use crate::laws::Family;
use crate::stack::{bounds, StackConfig, Strategy};
use crate::stage::Signature;
use crate::tolerance;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A law's verdict on one observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The law holds.
    Pass,
    /// The law fails; the evidence says where.
    Fail,
    /// No verdict: the worker failed, or the observation lacks what the law reads.
    Error,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Error => "error",
        })
    }
}

/// A verdict and the evidence for it (the leaf, the counts, the series, the exception).
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// The verdict.
    pub verdict: Verdict,
    /// What was seen, in one or a few sentences.
    pub evidence: String,
    /// Peak above baseline / final bytes, for the stacked-init law.
    pub peak_ratio: Option<f64>,
}

impl Judgement {
    fn new(verdict: Verdict, evidence: impl Into<String>) -> Self {
        Self {
            verdict,
            evidence: evidence.into(),
            peak_ratio: None,
        }
    }
    fn holds(ok: bool, evidence: impl Into<String>) -> Self {
        Self::new(if ok { Verdict::Pass } else { Verdict::Fail }, evidence)
    }
    fn error(evidence: impl Into<String>) -> Self {
        Self::new(Verdict::Error, evidence)
    }
}

/// The laws `upstream check` applies (the `law` field of its JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamLaw {
    /// `live-buffers-flat`.
    LiveBuffersFlat,
    /// `where-gradients-finite`.
    WhereGradientsFinite,
    /// `one-trace`.
    OneTrace,
    /// `signatures-identical`.
    SignaturesIdentical,
    /// `coeffs-in-state`.
    CoeffsInState,
    /// `sharded-equals-unsharded`.
    ShardedEqualsUnsharded,
    /// `peak-within-bound`.
    PeakWithinBound,
}

impl UpstreamLaw {
    /// The stable name (`docs/CLI.md`).
    pub fn name(self) -> &'static str {
        match self {
            UpstreamLaw::LiveBuffersFlat => "live-buffers-flat",
            UpstreamLaw::WhereGradientsFinite => "where-gradients-finite",
            UpstreamLaw::OneTrace => "one-trace",
            UpstreamLaw::SignaturesIdentical => "signatures-identical",
            UpstreamLaw::CoeffsInState => "coeffs-in-state",
            UpstreamLaw::ShardedEqualsUnsharded => "sharded-equals-unsharded",
            UpstreamLaw::PeakWithinBound => "peak-within-bound",
        }
    }

    /// The law family of `harness check` it belongs to.
    pub fn family(self) -> Family {
        match self {
            UpstreamLaw::LiveBuffersFlat | UpstreamLaw::WhereGradientsFinite => Family::CondVsWhere,
            UpstreamLaw::OneTrace => Family::TraceCount,
            UpstreamLaw::SignaturesIdentical
            | UpstreamLaw::CoeffsInState
            | UpstreamLaw::ShardedEqualsUnsharded => Family::FixedStateShape,
            UpstreamLaw::PeakWithinBound => Family::Fp16InitPeaks,
        }
    }
}

/// The worker's probes (`observe` requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// `eager-live-arrays`.
    EagerLiveArrays,
    /// `update-gradients`.
    UpdateGradients,
    /// `jit-steps`.
    JitSteps,
    /// `build-under-jit`.
    BuildUnderJit,
    /// `sharded`.
    Sharded,
    /// `peak`.
    Peak,
}

impl Probe {
    /// The protocol's name of the probe.
    pub fn name(self) -> &'static str {
        match self {
            Probe::EagerLiveArrays => "eager-live-arrays",
            Probe::UpdateGradients => "update-gradients",
            Probe::JitSteps => "jit-steps",
            Probe::BuildUnderJit => "build-under-jit",
            Probe::Sharded => "sharded",
            Probe::Peak => "peak",
        }
    }
}

/// Jitted CNF training steps per observation: each takes a compile of about 10 s on a 2-core
/// machine when the step re-traces, so 4 steps show "one trace per step" in under a minute.
pub const CNF_STEPS: u64 = 4;
/// Stacked-init size: 16 blocks of 1024-4096-1024 (256 MiB in float16), the size of the
/// equinox report; at small sizes a fixed ~80 MiB of runtime memory hides the strategies'
/// difference.
pub const INIT_LAYERS: usize = 16;
/// Width `D` of the stacked-init blocks.
pub const INIT_WIDTH: usize = 1024;
/// Hidden size `H` of the stacked-init blocks.
pub const INIT_HIDDEN: usize = 4096;

/// The arguments sent for a worker subject and probe (the probes' defaults, written out so the
/// laws know them, with fewer CNF steps).
pub fn args(worker_subject: &str, probe: Probe) -> Value {
    match probe {
        Probe::EagerLiveArrays => json!({"steps": 30, "size": 1000, "lr": 1e-3, "seed": 0}),
        Probe::UpdateGradients => json!({"steps": 6, "size": 8, "lr": 1e-3, "seed": 0}),
        Probe::JitSteps if worker_subject.starts_with("cnf-") => {
            json!({"steps": CNF_STEPS, "seed": 0})
        }
        Probe::JitSteps if worker_subject.starts_with("linesearch") => {
            json!({"steps": 5, "dim": 3, "seed": 0})
        }
        Probe::JitSteps => json!({"steps": 5, "shape": [8, 6], "seed": 0}),
        Probe::BuildUnderJit => json!({"shape": [8, 6], "lr": 0.02, "seed": 0}),
        Probe::Sharded => json!({"shape": [16, 8], "steps": 3, "seed": 0}),
        Probe::Peak => json!({
            "layers": INIT_LAYERS, "width": INIT_WIDTH, "hidden": INIT_HIDDEN, "seed": 0
        }),
    }
}

/// The time limit of one observation: generous multiples of what it took on a loaded 2-core
/// machine (CNF steps ~12 s each, an init peak 10-20 s, the rest under 6 s).
pub fn time_limit(worker_subject: &str, probe: Probe) -> Duration {
    Duration::from_secs(match probe {
        Probe::JitSteps if worker_subject.starts_with("cnf-") => 120 + 60 * CNF_STEPS,
        Probe::Peak => 300,
        _ => 180,
    })
}

/// One expected verdict: a subject of a built-in profile, the probe observing it, a law.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Expectation {
    /// The built-in profile whose worker observes it.
    pub profile: &'static str,
    /// The subject as printed (`optax-0.2.2/radam`, `pre-fix/muon`).
    pub subject: &'static str,
    /// The worker's subject (`radam`, `muon-prefix`).
    pub worker_subject: &'static str,
    /// The probe.
    pub probe: Probe,
    /// The law.
    pub law: UpstreamLaw,
    /// The verdict the facts predict.
    pub expected: Verdict,
    /// The upstream incident the row is about.
    pub incident: &'static str,
}

const LEAK: &str = "optax #580/#969 (lax.cond re-staged per step)";
const WHERE: &str = "optax PR #974 (jnp.where without sanitising)";
const LINESEARCH: &str = "optax #1171 / PR #1175 (weak num_linesearch_steps after init)";
const MUON: &str = "optax #1186 / PR #1193 (coefficients captured outside the state)";
const CNF: &str = "diffrax #574 (CNF training re-traced every step)";
const INIT: &str = "equinox #673 (filter_vmap init in f32, then cast)";

macro_rules! expect {
    ($profile:literal, $subject:literal, $worker:literal, $probe:ident, $law:ident, $verdict:ident, $incident:expr) => {
        Expectation {
            profile: $profile,
            subject: $subject,
            worker_subject: $worker,
            probe: Probe::$probe,
            law: UpstreamLaw::$law,
            expected: Verdict::$verdict,
            incident: $incident,
        }
    };
}

/// Every row of the built-in profiles with the verdict the upstream facts predict (optax
/// 0.2.2's RAdam leaks a buffer per eager step and has finite gradients; from 0.2.3 on it is
/// flat and its gradients are NaN at steps 3 and 4; optax 0.2.8's line search compiles twice,
/// and once with its counter created as `jnp.asarray(0, dtype=jnp.int32)`; Muon as released is
/// fine, the pattern before its fix raises; the CNF step counter as a Python int re-traces
/// every step, the docs example twice, an array once; vmap-in-f32-then-cast exceeds its bound,
/// a layer-by-layer build does not).
pub const EXPECTED: &[Expectation] = &[
    expect!(
        "optax-0.2.2",
        "optax-0.2.2/radam",
        "radam",
        EagerLiveArrays,
        LiveBuffersFlat,
        Fail,
        LEAK
    ),
    expect!(
        "optax-0.2.2",
        "optax-0.2.2/radam",
        "radam",
        UpdateGradients,
        WhereGradientsFinite,
        Pass,
        WHERE
    ),
    expect!(
        "optax-0.2.2",
        "optax-0.2.2/adam",
        "adam",
        EagerLiveArrays,
        LiveBuffersFlat,
        Pass,
        LEAK
    ),
    expect!(
        "optax-0.2.3",
        "optax-0.2.3/radam",
        "radam",
        EagerLiveArrays,
        LiveBuffersFlat,
        Pass,
        LEAK
    ),
    expect!(
        "optax-0.2.3",
        "optax-0.2.3/radam",
        "radam",
        UpdateGradients,
        WhereGradientsFinite,
        Fail,
        WHERE
    ),
    expect!(
        "current",
        "current/radam",
        "radam",
        EagerLiveArrays,
        LiveBuffersFlat,
        Pass,
        LEAK
    ),
    expect!(
        "current",
        "current/radam",
        "radam",
        UpdateGradients,
        WhereGradientsFinite,
        Fail,
        WHERE
    ),
    expect!(
        "current",
        "current/linesearch",
        "linesearch",
        JitSteps,
        OneTrace,
        Fail,
        LINESEARCH
    ),
    expect!(
        "current",
        "current/linesearch",
        "linesearch",
        JitSteps,
        SignaturesIdentical,
        Fail,
        LINESEARCH
    ),
    expect!(
        "current",
        "current/linesearch-int32-counter",
        "linesearch-int32-counter",
        JitSteps,
        OneTrace,
        Pass,
        LINESEARCH
    ),
    expect!(
        "current",
        "current/linesearch-int32-counter",
        "linesearch-int32-counter",
        JitSteps,
        SignaturesIdentical,
        Pass,
        LINESEARCH
    ),
    expect!(
        "current",
        "current/muon",
        "muon",
        BuildUnderJit,
        CoeffsInState,
        Pass,
        MUON
    ),
    expect!(
        "current",
        "current/muon",
        "muon",
        Sharded,
        ShardedEqualsUnsharded,
        Pass,
        MUON
    ),
    expect!(
        "current",
        "current/muon",
        "muon",
        JitSteps,
        OneTrace,
        Pass,
        MUON
    ),
    expect!(
        "current",
        "pre-fix/muon",
        "muon-prefix",
        BuildUnderJit,
        CoeffsInState,
        Fail,
        MUON
    ),
    expect!(
        "current",
        "current/cnf-int-step",
        "cnf-int-step",
        JitSteps,
        OneTrace,
        Fail,
        CNF
    ),
    expect!(
        "current",
        "current/cnf-docs-example",
        "cnf-docs-example",
        JitSteps,
        OneTrace,
        Fail,
        CNF
    ),
    expect!(
        "current",
        "current/cnf-array-step",
        "cnf-array-step",
        JitSteps,
        OneTrace,
        Pass,
        CNF
    ),
    expect!(
        "current",
        "current/init-vmap-f32-then-cast",
        "init-vmap-f32-then-cast",
        Peak,
        PeakWithinBound,
        Fail,
        INIT
    ),
    expect!(
        "current",
        "current/init-layerwise",
        "init-layerwise",
        Peak,
        PeakWithinBound,
        Pass,
        INIT
    ),
];

/// Worker subjects that are user code written as upstream wrote it before a fix (not a
/// library release): in a user's own profile they keep the verdicts of [`EXPECTED`].
const PATTERNS: &[&str] = &[
    "muon-prefix",
    "cnf-int-step",
    "cnf-docs-example",
    "cnf-array-step",
    "init-vmap-f32-then-cast",
    "init-layerwise",
];

/// One observation to make and the laws to judge on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// The subject as printed.
    pub subject: String,
    /// The worker's subject.
    pub worker_subject: String,
    /// The probe.
    pub probe: Probe,
    /// The request's `args`.
    pub args: Value,
    /// The incident.
    pub incident: String,
    /// Each law with its expected verdict (`None`: no expectation).
    pub laws: Vec<(UpstreamLaw, Option<Verdict>)>,
}

/// The observations of `profile`: for a built-in profile its rows of [`EXPECTED`]; for a
/// user's requirement file every subject, named `<profile>/<worker subject>`, expected to pass
/// where it is a library (a release without the bugs passes every law) and to keep its
/// verdict where it is a pre-fix pattern of user code.
pub fn plan(profile: &Profile) -> Vec<Planned> {
    let mut out: Vec<Planned> = Vec::new();
    let rows: Vec<(String, Expectation)> = if profile.builtin {
        EXPECTED
            .iter()
            .filter(|e| e.profile == profile.name)
            .map(|e| (e.subject.to_string(), *e))
            .collect()
    } else {
        let mut rows: Vec<(String, Expectation)> = Vec::new();
        // one row per (worker subject, probe, law), first occurrence wins (adam from optax-0.2.2)
        for e in EXPECTED {
            let dup = rows.iter().any(|(_, r)| {
                r.worker_subject == e.worker_subject && r.probe == e.probe && r.law == e.law
            });
            if dup {
                continue;
            }
            let mut e = *e;
            if !PATTERNS.contains(&e.worker_subject) {
                e.expected = Verdict::Pass;
            }
            rows.push((format!("{}/{}", profile.name, e.worker_subject), e));
        }
        rows
    };
    for (subject, e) in rows {
        match out
            .iter_mut()
            .find(|p| p.subject == subject && p.probe == e.probe)
        {
            Some(p) => p.laws.push((e.law, Some(e.expected))),
            None => out.push(Planned {
                subject,
                worker_subject: e.worker_subject.to_string(),
                probe: e.probe,
                args: args(e.worker_subject, e.probe),
                incident: e.incident.to_string(),
                laws: vec![(e.law, Some(e.expected))],
            }),
        }
    }
    out
}

// ------------------------------------------------------------------------------------ laws

fn list<T: std::fmt::Display>(xs: impl IntoIterator<Item = T>) -> String {
    xs.into_iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `live-buffers-flat`: the live array count after the last eager step equals the count after
/// step 1 (a buffer kept per step, like `lax.cond` re-staged on every eager call, fails).
pub fn live_buffers_flat(o: &LiveArrays) -> Judgement {
    let n = o.live_arrays.len();
    let (Some(&first), Some(&last)) = (o.live_arrays.first(), o.live_arrays.last()) else {
        return Judgement::error("no eager step was observed");
    };
    let mut at: Vec<usize> = vec![1, 10, n];
    at.retain(|&t| t <= n);
    at.dedup();
    let counts = list(at.iter().map(|&t| o.live_arrays[t - 1]));
    let bytes = match (o.live_bytes.first(), o.live_bytes.last()) {
        (Some(a), Some(b)) => format!("; live bytes {a} -> {b}"),
        _ => String::new(),
    };
    let released = format!(
        "{} still alive after the probe released params, state and optimizer",
        o.live_arrays_after_release
    );
    if last == first {
        Judgement::holds(
            true,
            format!(
                "live arrays after eager steps {}: {counts} (flat){bytes}; {released}",
                list(&at)
            ),
        )
    } else {
        let grew = last as i64 - first as i64;
        Judgement::holds(
            false,
            format!(
                "live arrays after eager steps {}: {counts} ({grew:+} over {} steps, {:+.2} per step){bytes}; {released}",
                list(&at),
                n - 1,
                grew as f64 / (n - 1) as f64
            ),
        )
    }
}

/// `where-gradients-finite`: at every step, no NaN in d sum(update)/d grad (reverse mode
/// through the update) and a finite gradient of the unrolled loss with respect to the learning
/// rate. A `where` whose unselected branch is NaN (RAdam's `sqrt` of a negative `rho` term at
/// steps 3 and 4) passes NaN cotangents back and fails.
pub fn where_gradients_finite(o: &UpdateGradients) -> Judgement {
    if o.steps.is_empty() {
        return Judgement::error("no step was observed");
    }
    let nan_steps: Vec<String> = o
        .steps
        .iter()
        .filter(|s| s.grad_nan > 0)
        .map(|s| {
            format!(
                "t = {} ({}/{} NaN, rho_t = {:.4})",
                s.t, s.grad_nan, s.grad_total, s.rho_t
            )
        })
        .collect();
    let lr: Vec<String> = o
        .steps
        .iter()
        .map(|s| format!("{:.4}", s.lr_grad))
        .collect();
    let bad_lr: Vec<u64> = o
        .steps
        .iter()
        .filter(|s| !s.lr_grad.is_finite())
        .map(|s| s.t)
        .collect();
    let ts = format!(
        "t = {}..{}",
        o.steps[0].t,
        o.steps.last().map_or(0, |s| s.t)
    );
    let lr_text = format!(
        "d loss/d lr after t unrolled steps (loss {}): {}",
        o.loss,
        lr.join(", ")
    );
    if nan_steps.is_empty() && bad_lr.is_empty() {
        return Judgement::holds(
            true,
            format!("no NaN in d sum(update)/d grad at {ts}; {lr_text}"),
        );
    }
    let mut parts = Vec::new();
    if !nan_steps.is_empty() {
        parts.push(format!(
            "NaN in d sum(update)/d grad at {}",
            nan_steps.join(", ")
        ));
    }
    if !bad_lr.is_empty() {
        parts.push(format!(
            "non-finite learning-rate gradient at t = {}",
            list(&bad_lr)
        ));
    }
    Judgement::holds(false, format!("{}; {lr_text}", parts.join("; ")))
}

fn runs(xs: &[String]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < xs.len() {
        let j = (i..xs.len()).find(|&j| xs[j] != xs[i]).unwrap_or(xs.len());
        out.push(if j - i > 1 {
            format!("{} x{}", xs[i], j - i)
        } else {
            xs[i].clone()
        });
        i = j;
    }
    out.join(", then ")
}

/// `one-trace`: the jitted step traced exactly once over its calls (counted by a side effect in
/// its body). The evidence quotes jax's explanation of each re-trace (which input changed).
pub fn one_trace(o: &JitSteps) -> Judgement {
    let calls = o
        .calls()
        .map_or_else(String::new, |c| format!(" over {c} jitted calls"));
    let args = o.step_args.as_ref().map_or_else(String::new, |a| {
        format!("; step counter passed as: {}", runs(a))
    });
    if o.traces == 0 {
        return Judgement::error(format!("the step never traced{calls}"));
    }
    if o.traces == 1 {
        return Judgement::holds(true, format!("1 trace{calls}{args}"));
    }
    let reasons = o.retrace_reasons();
    let mut shown: Vec<String> = reasons.iter().take(2).cloned().collect();
    if reasons.len() > 2 {
        shown.push(format!("... ({} explanations in all)", reasons.len()));
    }
    let why = if shown.is_empty() {
        String::new()
    } else {
        format!("; jax's cache miss: {}", shown.join(" | "))
    };
    Judgement::holds(false, format!("{} traces{calls}{args}{why}", o.traces))
}

/// `signatures-identical`: the state's [`Signature`] (each leaf's path, shape, dtype and weak
/// flag) after init equals the one after every update. The evidence is [`Signature::diff`] of
/// the first change, naming the leaf.
pub fn signatures_identical(o: &JitSteps) -> Judgement {
    let Some(reported) = &o.signatures else {
        return Judgement::error("the observation has no state signatures");
    };
    let sigs: Result<Vec<Signature>, String> = reported
        .iter()
        .map(|l| observe::signature(l, o.x64))
        .collect();
    let sigs = match sigs {
        Ok(s) if !s.is_empty() => s,
        Ok(_) => return Judgement::error("no state signature was reported"),
        Err(e) => return Judgement::error(e),
    };
    let init = &sigs[0];
    let changed: Vec<usize> = (1..sigs.len()).filter(|&i| sigs[i] != *init).collect();
    match changed.first() {
        None => Judgement::holds(
            true,
            format!(
                "init and all {} updates: the same {} leaves {}",
                sigs.len() - 1,
                init.leaves().len(),
                init
            ),
        ),
        Some(&i) => {
            let stable_after = (i + 1..sigs.len()).all(|j| sigs[j] == sigs[i]);
            Judgement::holds(
                false,
                format!(
                    "state after init vs after update {i}: {}{}",
                    init.diff(&sigs[i]),
                    if stable_after {
                        format!(
                            " (updates {i}..{} all have the new signature)",
                            sigs.len() - 1
                        )
                    } else {
                        String::new()
                    }
                ),
            )
        }
    }
}

fn first_line(s: &str, n: usize) -> String {
    let line = s
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if line.chars().count() > n {
        format!("{}...", line.chars().take(n).collect::<String>())
    } else {
        line.to_string()
    }
}

/// `coeffs-in-state`: a transform built inside a jitted function and updated outside it raises
/// nothing, keeps its Newton-Schulz coefficients as a state leaf, and gives a finite update.
pub fn coeffs_in_state(o: &BuildUnderJit) -> Judgement {
    let leaves: Vec<String> = o
        .state_leaves
        .iter()
        .filter(|l| l.path.contains("ns_coeffs"))
        .map(|l| match l.leaf_sig(o.x64) {
            Ok(s) => format!("`{}` {s}", l.path),
            Err(_) => format!("`{}` {}", l.path, l.dtype),
        })
        .collect();
    let state = if o.coeffs_in_state {
        format!("coefficients in the state: {}", leaves.join(", "))
    } else {
        format!(
            "no state leaf holds the coefficients (state leaves: {})",
            list(o.state_leaves.iter().map(|l| format!("`{}`", l.path)))
        )
    };
    if let Some(r) = &o.raised {
        return Judgement::holds(
            false,
            format!(
                "{} raised at {} (built under jit, updated outside): {}; {state}",
                r.error_type,
                r.at,
                first_line(&r.message, 200)
            ),
        );
    }
    let finite = match o.update_finite {
        Some(true) => "update finite",
        Some(false) => "update NOT finite",
        None => "update not observed",
    };
    Judgement::holds(
        o.coeffs_in_state && o.update_finite == Some(true),
        format!("nothing raised; {state}; {finite}"),
    )
}

/// `sharded-equals-unsharded`: Muon's jitted updates with params and gradients split by rows
/// over two devices equal the single-device ones within the golden float32 tolerance
/// ([`tolerance::conformance`]: `rtol 2e-4, atol 1e-6`) scaled by the update magnitude: every
/// step's `max |difference| <= atol + rtol * max |update|`, and the final params' within
/// `atol + rtol * max |params|`. Bitwise equality is not required: the partitioned products
/// sum in another order (measured: never bitwise equal, for optax's Muon and the pre-fix
/// pattern alike). Without reported magnitudes, `atol` alone is the bound.
pub fn sharded_equals_unsharded(o: &Sharded) -> Judgement {
    if o.devices < 2 {
        return Judgement::error(format!("only {} device(s) were used", o.devices));
    }
    let tol = tolerance::conformance(DType::F32);
    let scale_u = o.max_abs_update.unwrap_or(0.0);
    let scale_p = o.max_abs_params.unwrap_or(0.0);
    let bound_u = tol.atol + tol.rtol * scale_u;
    let bound_p = tol.atol + tol.rtol * scale_p;
    let steps_ok = o
        .per_step_max_abs_diff
        .iter()
        .all(|d| d.is_finite() && *d <= bound_u);
    let final_ok =
        o.final_params_max_abs_diff.is_finite() && o.final_params_max_abs_diff <= bound_p;
    let max_step = o
        .per_step_max_abs_diff
        .iter()
        .copied()
        .fold(0.0_f64, f64::max);
    let scale = match o.max_abs_update {
        Some(u) => format!(
            "atol + rtol * max|update| = {:.0e} + {:.0e} * {u:.3e} = {bound_u:.3e}",
            tol.atol, tol.rtol
        ),
        None => format!(
            "atol = {:.0e} (the worker reported no update magnitude)",
            tol.atol
        ),
    };
    let bitwise = if o.bitwise_equal {
        "bitwise equal".to_string()
    } else {
        "not bitwise equal (the split products sum in another order)".to_string()
    };
    Judgement::holds(
        steps_ok && final_ok,
        format!(
            "max |sharded - unsharded| over {} updates {max_step:.3e}, final params {:.3e} (bound {bound_p:.3e}); update bound {scale} (golden f32 tolerance); {bitwise}; {} devices, {}",
            o.per_step_max_abs_diff.len(),
            o.final_params_max_abs_diff,
            o.devices,
            o.method
        ),
    )
}

/// The bound a stacked-init subject's peak is held to, with its formula and where it comes
/// from.
#[derive(Debug, Clone, PartialEq)]
pub struct PeakBound {
    /// Bytes above the baseline.
    pub bytes: u64,
    /// The formula in `N`, `P`, `s` (as [`bounds::formula`] writes them).
    pub formula: String,
    /// Where the bound comes from.
    pub source: String,
}

/// The bound of a stacked-init worker subject on `cfg` (`N` layers of `D-H-D`, final dtype
/// size `s`, `P = 2DH + H + D` parameters per layer, `meta = 1024 + 512N`):
///
/// * `init-vmap-f32-then-cast` (and its jitted form): the reference's bound of the same
///   strategy, [`bounds::peak_bound`] of [`Strategy::VmapF32ThenCast`], `N*P*(4+s) + meta`:
///   every layer in f32 and its cast at once is all this strategy needs to hold.
/// * `init-layerwise` (a list of blocks, each built in f32 and cast): `N*P*4 + meta`, the model
///   in f32. The reference's own `layerwise-list` bound `N*P*s + P*4 + meta` (1.125x for the
///   default f16 size) counts the buffers of an allocator it controls; an RSS high-water mark
///   of a JAX process also holds a fixed amount of runtime memory (XLA's compile of the new
///   shapes, the random generator's bits, allocator slack) that does not depend on `N`: 78, 83
///   and 84 MiB above the final bytes at N = 1, 4, 16 (1024-4096-1024). What a layer-by-layer
///   build guarantees, and vmap-then-cast cannot, is that the model is never held in f32: its
///   peak stays below `N*P*4` whenever the fixed part is below `N*P*(4-s)` (537 MiB here),
///   while vmap-then-cast holds at least `N*P*(4+s)`.
/// * `init-layerwise-stack`: the reference's `list-then-stack` bound, `N*P*s + max(N*P*s,
///   P*4) + meta` (the list and its stacked copy).
///
/// `None` for another subject.
pub fn peak_bound(worker_subject: &str, cfg: &StackConfig) -> Option<PeakBound> {
    let reference = |s: Strategy| PeakBound {
        bytes: bounds::peak_bound(cfg, s) as u64,
        formula: bounds::formula(s).to_string(),
        source: format!("the reference's bound of {}", s.name()),
    };
    match worker_subject {
        "init-vmap-f32-then-cast" | "init-vmap-f32-then-cast-jit" => {
            Some(reference(Strategy::VmapF32ThenCast))
        }
        "init-layerwise-stack" => Some(reference(Strategy::ListThenStack)),
        "init-layerwise" => Some(PeakBound {
            bytes: (cfg.params() * 4 + bounds::meta_bytes(cfg)) as u64,
            formula: "N*P*4 + meta".to_string(),
            source: "the model in f32, never held by a layer-by-layer build".to_string(),
        }),
        _ => None,
    }
}

fn mib(b: f64) -> String {
    format!("{:.1} MiB", b / (1u64 << 20) as f64)
}

/// `peak-within-bound`: the build's peak above baseline (RSS high-water mark in a fresh
/// process) within `bound` ([`peak_bound`]). The evidence gives the peak as a ratio of the
/// final bytes next to the bound's ratio.
pub fn peak_within_bound(o: &InitPeak, cfg: &StackConfig, bound: &PeakBound) -> Judgement {
    let fin = cfg.final_bytes() as f64;
    if o.final_bytes as f64 != fin {
        return Judgement::error(format!(
            "the worker built {} bytes, the configuration's final bytes are {fin}",
            o.final_bytes
        ));
    }
    let peak = o.peak_bytes_above_baseline as f64;
    let reset = if o.hwm_reset {
        ""
    } else {
        " (the high-water mark could not be reset: the peak may include earlier ones)"
    };
    let ok = o.peak_bytes_above_baseline <= bound.bytes as i64;
    let vs = if ok {
        "within".to_string()
    } else {
        format!(
            "exceeded by {:.2}x final",
            (peak - bound.bytes as f64) / fin
        )
    };
    let mut j = Judgement::holds(
        ok,
        format!(
            "peak {} above baseline = {:.2}x the final {} ({} x {}-{}-{} {}, {}){reset}; bound {} = {:.3}x ({}): {vs}",
            mib(peak),
            peak / fin,
            mib(fin),
            cfg.layers(),
            cfg.width(),
            cfg.hidden(),
            cfg.width(),
            cfg.dtype(),
            o.layout,
            bound.formula,
            bound.bytes as f64 / fin,
            bound.source,
        ),
    );
    j.peak_ratio = Some(peak / fin);
    j
}

/// Judge `laws` on the success `result` of an observation of `worker_subject` by `probe` with
/// request `args` (one judgement per law, in order).
pub fn judge(
    profile: &str,
    worker_subject: &str,
    probe: Probe,
    args: &Value,
    laws: &[UpstreamLaw],
    result: &Value,
) -> Vec<Judgement> {
    let all = |j: Judgement| vec![j; laws.len()];
    macro_rules! parsed {
        ($t:ty) => {
            match observe::parse::<$t>(profile, result) {
                Ok(o) => o,
                Err(e) => return all(Judgement::error(e.to_string())),
            }
        };
    }
    let mismatch = |law: UpstreamLaw| {
        Judgement::error(format!("{} is not judged on {}", law.name(), probe.name()))
    };
    match probe {
        Probe::EagerLiveArrays => {
            let o = parsed!(LiveArrays);
            laws.iter()
                .map(|&l| match l {
                    UpstreamLaw::LiveBuffersFlat => live_buffers_flat(&o),
                    _ => mismatch(l),
                })
                .collect()
        }
        Probe::UpdateGradients => {
            let o = parsed!(UpdateGradients);
            laws.iter()
                .map(|&l| match l {
                    UpstreamLaw::WhereGradientsFinite => where_gradients_finite(&o),
                    _ => mismatch(l),
                })
                .collect()
        }
        Probe::JitSteps => {
            let o = parsed!(JitSteps);
            laws.iter()
                .map(|&l| match l {
                    UpstreamLaw::OneTrace => one_trace(&o),
                    UpstreamLaw::SignaturesIdentical => signatures_identical(&o),
                    _ => mismatch(l),
                })
                .collect()
        }
        Probe::BuildUnderJit => {
            let o = parsed!(BuildUnderJit);
            laws.iter()
                .map(|&l| match l {
                    UpstreamLaw::CoeffsInState => coeffs_in_state(&o),
                    _ => mismatch(l),
                })
                .collect()
        }
        Probe::Sharded => {
            let o = parsed!(Sharded);
            laws.iter()
                .map(|&l| match l {
                    UpstreamLaw::ShardedEqualsUnsharded => sharded_equals_unsharded(&o),
                    _ => mismatch(l),
                })
                .collect()
        }
        Probe::Peak => {
            let o = parsed!(InitPeak);
            let get = |k: &str| args.get(k).and_then(Value::as_u64).map(|v| v as usize);
            let cfg = match (get("layers"), get("width"), get("hidden")) {
                (Some(n), Some(d), Some(h)) => StackConfig::new(n, d, h, DType::F16),
                _ => return all(Judgement::error("the request named no layers/width/hidden")),
            };
            let cfg = match cfg {
                Ok(c) => c,
                Err(e) => return all(Judgement::error(e.to_string())),
            };
            let Some(bound) = peak_bound(worker_subject, &cfg) else {
                return all(Judgement::error(format!(
                    "no peak bound for {worker_subject}"
                )));
            };
            laws.iter()
                .map(|&l| match l {
                    UpstreamLaw::PeakWithinBound => peak_within_bound(&o, &cfg, &bound),
                    _ => mismatch(l),
                })
                .collect()
        }
    }
}

// ---------------------------------------------------------------------------------- runner

/// One row of the result: a law judged on a subject.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ResultRow {
    /// The subject as printed (`current/linesearch`).
    pub subject: String,
    /// The upstream incident.
    pub incident: String,
    /// The law's name.
    pub law: String,
    /// The verdict.
    pub verdict: Verdict,
    /// The evidence.
    pub evidence: String,
    /// Wall seconds of the observation (shared by the laws judged on it).
    pub seconds: f64,
    /// The expected verdict (`null`: none).
    pub expected: Option<Verdict>,
    /// Whether the verdict is the expected one (`true` when nothing was expected and no error).
    pub as_expected: bool,
    /// The profile whose worker observed it.
    pub profile: String,
    /// The worker's subject.
    pub worker_subject: String,
    /// The probe.
    pub probe: String,
    /// The law family.
    pub family: Family,
    /// Peak above baseline / final bytes, for stacked-init rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_ratio: Option<f64>,
}

/// What a profile's worker said about itself, and what went wrong with it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ProfileReport {
    /// The profile.
    pub name: String,
    /// The requirement file.
    pub requirements: String,
    /// The worker's `hello` (interpreter and package versions), when it answered.
    pub hello: Option<Hello>,
    /// Seconds from spawning the worker to its `hello` reply.
    pub startup_seconds: Option<f64>,
    /// Worker errors (each also made its rows `error`).
    pub errors: Vec<String>,
    /// Subjects skipped because the profile lacks the library (user profiles only).
    pub notes: Vec<String>,
    /// Wall seconds of the profile's whole run.
    pub seconds: f64,
}

/// The whole check: the `--json` document (`{"profiles": [...], "results": [...]}`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CheckReport {
    /// One entry per profile run.
    pub profiles: Vec<ProfileReport>,
    /// One row per (subject, law).
    pub results: Vec<ResultRow>,
    /// Wall seconds of the whole run.
    pub seconds: f64,
}

impl CheckReport {
    /// The rows whose verdict differs from the expected one (errors included).
    pub fn differing(&self) -> Vec<&ResultRow> {
        self.results.iter().filter(|r| !r.as_expected).collect()
    }

    /// Exit status 0: every row has its expected verdict and none is an error.
    pub fn all_as_expected(&self) -> bool {
        self.results.iter().all(|r| r.as_expected)
    }
}

/// Settings of a check run.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckOptions {
    /// Caps every observation's time limit ([`time_limit`]) at this, when set.
    pub timeout: Option<Duration>,
    /// Time limit of the worker's start-up (`hello`, which imports jax).
    pub hello_timeout: Duration,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            timeout: None,
            hello_timeout: Duration::from_secs(120),
        }
    }
}

fn start(cmd: &WorkerCommand, opts: &CheckOptions) -> crate::Result<(Worker, Hello, f64)> {
    let t = Instant::now();
    let mut w = Worker::spawn(cmd)?;
    let limit = opts
        .timeout
        .map_or(opts.hello_timeout, |t| t.min(opts.hello_timeout));
    let hello = w.hello(limit)?;
    Ok((w, hello, t.elapsed().as_secs_f64()))
}

/// Run `plan` on the worker started by `cmd`. A worker error makes the rows of its
/// observation `error` and the next observation starts a fresh worker; when the worker cannot
/// be started at all, every remaining row is `error` with the reason. With `skip_unavailable`,
/// a `SubjectUnavailable` reply drops the observation with a note instead.
pub fn run_plan(
    profile: &Profile,
    cmd: &WorkerCommand,
    plan: &[Planned],
    opts: &CheckOptions,
    skip_unavailable: bool,
    progress: &mut dyn FnMut(&str),
) -> (ProfileReport, Vec<ResultRow>) {
    let started = Instant::now();
    let mut report = ProfileReport {
        name: profile.name.clone(),
        requirements: profile.requirements.display().to_string(),
        hello: None,
        startup_seconds: None,
        errors: Vec::new(),
        notes: Vec::new(),
        seconds: 0.0,
    };
    let mut rows = Vec::new();
    let mut worker: Option<Worker> = None;
    let mut cannot_start: Option<String> = None;
    'plan: for p in plan {
        progress(&format!("{} {}", p.subject, p.probe.name()));
        let t = Instant::now();
        let judgements: Vec<Judgement> = 'obs: {
            if let Some(why) = &cannot_start {
                break 'obs vec![Judgement::error(why.clone()); p.laws.len()];
            }
            if worker.as_ref().is_none_or(Worker::is_broken) {
                worker = None;
                match start(cmd, opts) {
                    Ok((w, hello, secs)) => {
                        if report.hello.is_none() {
                            report.hello = Some(hello);
                            report.startup_seconds = Some(secs);
                        }
                        worker = Some(w);
                    }
                    Err(e) => {
                        let why = e.to_string();
                        report.errors.push(why.clone());
                        cannot_start = Some(why.clone());
                        break 'obs vec![Judgement::error(why); p.laws.len()];
                    }
                }
            }
            let Some(w) = worker.as_mut() else {
                break 'obs vec![Judgement::error("no worker"); p.laws.len()];
            };
            let limit = time_limit(&p.worker_subject, p.probe);
            let limit = opts.timeout.map_or(limit, |t| t.min(limit));
            match w.observe(&p.worker_subject, p.probe.name(), &p.args, false, limit) {
                Err(e) => {
                    let why = e.to_string();
                    report.errors.push(why.clone());
                    vec![Judgement::error(why); p.laws.len()]
                }
                Ok(Reply::Failure { failure, .. })
                    if skip_unavailable && failure.error_type == "SubjectUnavailable" =>
                {
                    report.notes.push(format!(
                        "{} {}: skipped, {}",
                        p.subject,
                        p.probe.name(),
                        first_line(&failure.message, 200)
                    ));
                    continue 'plan;
                }
                Ok(Reply::Failure { failure, .. }) => vec![
                    Judgement::error(format!(
                        "the worker answered {}: {}",
                        failure.error_type,
                        first_line(&failure.message, 300)
                    ));
                    p.laws.len()
                ],
                Ok(Reply::Success { result, .. }) => {
                    let laws: Vec<UpstreamLaw> = p.laws.iter().map(|l| l.0).collect();
                    judge(
                        &profile.name,
                        &p.worker_subject,
                        p.probe,
                        &p.args,
                        &laws,
                        &result,
                    )
                }
            }
        };
        let seconds = t.elapsed().as_secs_f64();
        for (&(law, expected), j) in p.laws.iter().zip(judgements) {
            let as_expected =
                j.verdict != Verdict::Error && expected.is_none_or(|e| e == j.verdict);
            rows.push(ResultRow {
                subject: p.subject.clone(),
                incident: p.incident.clone(),
                law: law.name().to_string(),
                verdict: j.verdict,
                evidence: j.evidence,
                seconds,
                expected,
                as_expected,
                profile: profile.name.clone(),
                worker_subject: p.worker_subject.clone(),
                probe: p.probe.name().to_string(),
                family: law.family(),
                peak_ratio: j.peak_ratio,
            });
        }
    }
    if let Some(w) = worker {
        if !w.is_broken() {
            if let Err(e) = w.shutdown(Duration::from_secs(30)) {
                report.errors.push(e.to_string());
            }
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    (report, rows)
}

/// Add to both the vmap-then-cast and the layerwise row
/// of a profile the ratio of their peaks (equinox #673 reports vmap-then-cast well above twice a
/// layer-by-layer build).
fn relate_peaks(rows: &mut [ResultRow]) {
    let ratio = |rows: &[ResultRow], profile: &str, subject: &str| {
        rows.iter()
            .find(|r| r.profile == profile && r.worker_subject == subject)
            .and_then(|r| r.peak_ratio)
    };
    let profiles: Vec<String> = rows.iter().map(|r| r.profile.clone()).collect();
    for profile in profiles {
        let (Some(v), Some(l)) = (
            ratio(rows, &profile, "init-vmap-f32-then-cast"),
            ratio(rows, &profile, "init-layerwise"),
        ) else {
            continue;
        };
        let note = format!(
            "; vmap-f32-then-cast / layerwise peak = {:.2} ({} 2)",
            v / l,
            if v / l > 2.0 { ">" } else { "NOT >" }
        );
        for r in rows.iter_mut().filter(|r| {
            r.profile == profile
                && (r.worker_subject == "init-vmap-f32-then-cast"
                    || r.worker_subject == "init-layerwise")
                && !r.evidence.contains("vmap-f32-then-cast / layerwise")
        }) {
            r.evidence.push_str(&note);
        }
    }
}

/// Run the check of every profile in turn, each with its own worker
/// ([`WorkerCommand::for_profile`]). `progress` receives `"<profile>: <subject> <probe>"`
/// before each observation.
pub fn run(
    profiles: &[Profile],
    loc: &Locations,
    opts: &CheckOptions,
    progress: &mut dyn FnMut(&str),
) -> CheckReport {
    let started = Instant::now();
    let mut out = CheckReport {
        profiles: Vec::new(),
        results: Vec::new(),
        seconds: 0.0,
    };
    for profile in profiles {
        let cmd = WorkerCommand::for_profile(loc, profile);
        let planned = plan(profile);
        let name = profile.name.clone();
        let (report, rows) = run_plan(
            profile,
            &cmd,
            &planned,
            opts,
            !profile.builtin,
            &mut |what| progress(&format!("{name}: {what}")),
        );
        out.profiles.push(report);
        out.results.extend(rows);
    }
    relate_peaks(&mut out.results);
    out.seconds = started.elapsed().as_secs_f64();
    out
}
