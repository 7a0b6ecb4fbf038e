//! `harness bench AREA --against PROFILE`: the real library timed on the work of each figure
//! that has an upstream equivalent, in the same invocation, beside our figure.
//!
//! The worker's `bench` op (`harness/upstream/harness_upstream/bench.py`) runs the same sizes,
//! dtype, start point, tolerances and evaluation counts as [`crate::bench`], written as a JAX
//! user would (one `jax.jit` function, donated inputs where a step replaces them), and returns
//! the median steady-state seconds and the first call (trace + compile + run) apart. Here the
//! seconds become the figure's unit with the figure's own formula (GB/s from the same byte
//! count), and the ratio is oriented so that **above 1 means ours is faster**:
//! `ours / upstream` for rates, `upstream / ours` for times.
//!
//! | figure | upstream work |
//! |---|---|
//! | `adam_fused_16m_gbps`, `radam_fused_16m_gbps` | `optax.adam` / `optax.radam(1e-3)`, update and `apply_updates` in one jit, params and state donated |
//! | `ns5_1024_ms` | `optax.contrib`'s `orthogonalize_via_newton_schulz`, 5 standard iterations, f32 |
//! | `linesearch_rosenbrock_65536_ms` | `sgd(1)` + `scale_by_backtracking_linesearch(15)` step, value and gradient included, f32 |
//! | `ode_lv_tsit5_1e-8_us` | `diffrax.diffeqsolve`, Tsit5, PID 1e-8/1e-10, f64 |
//! | `train_step_w64_d3_b500_ms` | the diffrax CNF example's model (width 64, depth 3, one block), loss and gradient through 10 backward Tsit5 steps with the exact trace, `optax.adamw`, one `eqx.filter_jit`, f64 |
//! | `init_chunked_16x1024x4096_ms` | 16 blocks of two `eqx.nn.Linear` built in f16 by `eqx.filter_vmap` inside `eqx.filter_jit` |
//!
//! Where a count the figure depends on differs (line-search evaluations, ODE steps), the note
//! says so. The limits and counts themselves have no upstream value.
//!
//! # References
//! - `docs/CLI.md`, `bench` (the JSON fields `upstream`, `upstream_compile_s`,
//!   `ratio_to_upstream`, `upstream_note`).

use super::worker::{Reply, Worker};
use crate::bench::{Figure, FUSED_BYTES_PER_PARAM, FUSED_PARAMS};
use crate::error::{Error, Result};
use crate::WorkerErrorKind;
use serde_json::{json, Map, Value};
use std::time::Duration;

/// The figures with an upstream equivalent, and the count each one is checked on: (figure,
/// our count figure, the worker's count key).
pub const UPSTREAM_FIGURES: [(&str, Option<(&str, &str)>); 7] = [
    ("adam_fused_16m_gbps", None),
    ("radam_fused_16m_gbps", None),
    ("ns5_1024_ms", None),
    (
        "linesearch_rosenbrock_65536_ms",
        Some(("linesearch_rosenbrock_65536_evals", "evaluations")),
    ),
    (
        "ode_lv_tsit5_1e-8_us",
        Some(("ode_lv_tsit5_1e-8_steps", "steps")),
    ),
    ("train_step_w64_d3_b500_ms", None),
    ("init_chunked_16x1024x4096_ms", None),
];

/// `seconds` of the upstream work in the unit of figure `name` (and whether the unit is a rate).
pub fn in_unit(name: &str, unit: &str, seconds: f64) -> Option<(f64, bool)> {
    match unit {
        "GB/s" if name.ends_with("_fused_16m_gbps") => Some((
            (FUSED_BYTES_PER_PARAM * FUSED_PARAMS) as f64 / seconds / 1e9,
            true,
        )),
        "ms" => Some((seconds * 1e3, false)),
        "us" => Some((seconds * 1e6, false)),
        _ => None,
    }
}

/// Fill `upstream`, `upstream_compile_s`, `ratio_to_upstream` and `upstream_note` of every
/// figure in `figures` that has an upstream equivalent, asking `worker` for `reps` steady-state
/// repetitions. `progress` gets the figure's name before each request. A figure the library
/// cannot run (an exception in the worker) gets the error as its note; a worker failure is `Err`.
pub fn attach(
    worker: &mut Worker,
    figures: &mut [Figure],
    reps: u32,
    timeout: Duration,
    progress: &mut dyn FnMut(&str),
) -> Result<()> {
    for (name, count) in UPSTREAM_FIGURES {
        let Some(at) = figures.iter().position(|f| f.name == name) else {
            continue;
        };
        progress(name);
        let mut fields = Map::new();
        fields.insert("args".into(), json!({"figure": name, "reps": reps}));
        let result = match worker.request("bench", fields, timeout)? {
            Reply::Failure { failure, .. } => {
                figures[at].upstream_note = Some(format!("upstream failed: {failure}"));
                continue;
            }
            Reply::Success { result, .. } => result,
        };
        let bad = |what: &str| Error::Worker {
            profile: worker.profile().to_string(),
            kind: WorkerErrorKind::BadResult,
            detail: format!("bench {name}: {what}"),
        };
        let seconds = result
            .get("seconds")
            .and_then(Value::as_f64)
            .filter(|s| s.is_finite() && *s > 0.0)
            .ok_or_else(|| bad("no positive `seconds`"))?;
        let first = result.get("first_call_seconds").and_then(Value::as_f64);
        let mut note = result
            .get("note")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if let Some((ours_name, key)) = count {
            let ours = figures
                .iter()
                .find(|f| f.name == ours_name)
                .map(|f| f.value);
            let theirs = result
                .get("counts")
                .and_then(|c| c.get(key))
                .and_then(Value::as_f64);
            if let (Some(o), Some(t)) = (ours, theirs) {
                if o == t {
                    note.push_str(&format!("; {key}: {t} both"));
                } else {
                    note.push_str(&format!("; {key} DIFFER: upstream {t}, ours {o}"));
                }
            }
        }
        let f = &mut figures[at];
        let (value, is_rate) =
            in_unit(&f.name, &f.unit, seconds).ok_or_else(|| bad("no conversion to the unit"))?;
        f.upstream = Some(value);
        f.upstream_compile_s = first.map(|t| (t - seconds).max(0.0));
        f.ratio_to_upstream = Some(if is_rate {
            f.value / value
        } else {
            value / f.value
        });
        f.upstream_note = Some(note);
    }
    Ok(())
}
