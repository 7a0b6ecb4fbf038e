//! `harness upstream diff`: live differential testing of the reference against the real library.
//!
//! Cases are drawn from the laws' own strategy ([`crate::laws::strategies::opt_case`]: RAdam
//! hyperparameters over their legal ranges, thresholds included, gradients from zero to
//! `1e4`, empty leaves, up to 8 steps), written as golden-v1 inputs (no outputs) and sent to the
//! worker's `golden` op, which runs the real optax exactly as the golden generators do (x64 on,
//! `jax.jit(opt.update)` per step) and returns the complete case. That case is replayed through
//! the reference by [`crate::golden::replay`] at the case's golden tolerance. A case the
//! reference does not reproduce is shrunk with proptest's value tree (each candidate goes to the
//! worker again) and the smallest one is written as a golden-v1 file, ready to commit.
//!
//! Kinds implemented: `adam`, `radam`. A case the library itself rejects (an exception in
//! optax) is counted and listed, not a mismatch.

use super::worker::{Reply, Worker};
use crate::backend::DType;
use crate::error::{Error, Result};
use crate::golden::{self, Case};
use crate::laws::strategies::{opt_case, OptCase};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The kinds of case `upstream diff` draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiffKind {
    /// `optax.adam` over [`opt_case`] (the threshold is not used).
    Adam,
    /// `optax.radam` over [`opt_case`].
    Radam,
}

impl DiffKind {
    /// Every implemented kind.
    pub const ALL: [DiffKind; 2] = [DiffKind::Adam, DiffKind::Radam];

    /// The name used by `--kind` and in the report.
    pub fn name(self) -> &'static str {
        match self {
            DiffKind::Adam => "adam",
            DiffKind::Radam => "radam",
        }
    }

    /// The kind called `name`.
    pub fn parse(name: &str) -> Option<DiffKind> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// Most optimizer steps in a drawn case.
pub const MAX_STEPS: usize = 8;

/// The golden-v1 input of `case` for `kind` (float16 cases are sent as float32: golden-v1 has
/// no float16), named `name`, with the generators' tolerance for its dtype.
pub fn golden_input(kind: DiffKind, case: &OptCase, name: &str) -> Value {
    let dtype = if case.dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    // the value the case's dtype holds (what both sides start from)
    let round = |x: f64| {
        if dtype == DType::F32 {
            x as f32 as f64
        } else {
            x
        }
    };
    let tensor = |xs: &[f64]| json!({"shape": [xs.len()], "data": xs.iter().map(|&x| round(x)).collect::<Vec<_>>()});
    let h = &case.hyper.moments;
    let mut hyper = Map::new();
    hyper.insert("learning_rate".into(), json!(case.learning_rate));
    hyper.insert("b1".into(), json!(h.b1));
    hyper.insert("b2".into(), json!(h.b2));
    hyper.insert("eps".into(), json!(h.eps));
    hyper.insert("eps_root".into(), json!(h.eps_root));
    if kind == DiffKind::Radam {
        hyper.insert("threshold".into(), json!(case.hyper.threshold));
    }
    if h.nesterov {
        // only when set: releases before Nesterov RAdam do not know the keyword
        hyper.insert("nesterov".into(), json!(true));
    }
    let tol = crate::tolerance::conformance(dtype);
    json!({
        "format": "golden-v1",
        "name": name,
        "kind": "optimizer",
        "dtype": dtype.to_string(),
        "tolerance": {"rtol": tol.rtol, "atol": tol.atol},
        "optimizer": {"name": kind.name(), "hyper": Value::Object(hyper)},
        "params": {"w": tensor(&case.params)},
        "steps": case.grads.iter().map(|g| json!({"grads": {"w": tensor(g)}})).collect::<Vec<_>>(),
    })
}

/// What one case gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The reference reproduced the library within the tolerance.
    Match,
    /// It did not: the replay's detail and the library's complete case.
    Mismatch {
        /// [`golden::CaseResult::detail`] of the replay.
        detail: String,
        /// The case as the library filled it in.
        golden: Value,
    },
    /// The library raised (type and message).
    LibraryError(String),
}

/// Send `input` to the worker's `golden` op and replay the result through the reference.
/// `Err` only when the worker fails or returns something that is not a golden-v1 case.
pub fn compare(worker: &mut Worker, input: &Value, timeout: Duration) -> Result<Outcome> {
    let mut f = Map::new();
    f.insert("case".into(), input.clone());
    let result = match worker.request("golden", f, timeout)? {
        Reply::Failure { failure, .. } => return Ok(Outcome::LibraryError(failure.to_string())),
        Reply::Success { result, .. } => result,
    };
    let golden = result.get("case").cloned().ok_or_else(|| Error::Worker {
        profile: worker.profile().to_string(),
        kind: crate::WorkerErrorKind::BadResult,
        detail: "golden result without `case`".into(),
    })?;
    let name = golden
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("upstream")
        .to_string();
    let case = Case::parse(&format!("{name} (from the worker)"), &golden.to_string())?;
    let r = golden::replay(&case)?;
    Ok(if r.passed {
        Outcome::Match
    } else {
        Outcome::Mismatch {
            detail: r.detail,
            golden,
        }
    })
}

/// One mismatch, shrunk (the `mismatches` rows of the `--json` document).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Mismatch {
    /// `adam` or `radam`.
    pub kind: String,
    /// The name of the shrunk case.
    pub case: String,
    /// The replay's detail on the shrunk case (first mismatch and count).
    pub detail: String,
    /// The golden-v1 file written, when it could be written.
    pub golden_file: Option<String>,
    /// The case as drawn before shrinking (its `Debug` form).
    pub drawn: String,
    /// Candidates sent while shrinking.
    pub shrink_steps: u32,
}

/// The whole run (the `--json` document: `{"cases", "mismatches", ...}`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DiffReport {
    /// Cases drawn and compared (not counting shrinking).
    pub cases: u32,
    /// Cases per kind.
    pub per_kind: Vec<(String, u32)>,
    /// The mismatches, shrunk.
    pub mismatches: Vec<Mismatch>,
    /// Cases the library rejected (`kind: type: message`), at most 20 listed.
    pub library_errors: Vec<String>,
    /// How many cases the library rejected.
    pub library_error_count: u32,
    /// Wall seconds.
    pub seconds: f64,
}

/// Settings of a diff run.
#[derive(Debug, Clone, PartialEq)]
pub struct DiffOptions {
    /// Cases per kind.
    pub cases: u32,
    /// The kinds, in order.
    pub kinds: Vec<DiffKind>,
    /// Seed of the case generator (fixed by default: runs are reproducible).
    pub seed: u64,
    /// Where shrunk cases are written.
    pub out_dir: PathBuf,
    /// Time limit of one `golden` request.
    pub timeout: Duration,
    /// Most candidates sent while shrinking one mismatch.
    pub max_shrink: u32,
}

fn write_case(dir: &Path, golden: &Value) -> std::result::Result<PathBuf, String> {
    let name = golden
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("upstream-diff");
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(format!("{name}.json"));
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    serde::Serialize::serialize(golden, &mut ser).map_err(|e| e.to_string())?;
    buf.push(b'\n');
    std::fs::write(&path, buf).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Draw, compare and shrink (module docs). `progress` receives a line before each drawn case.
/// A worker failure ends the run with `Err`.
pub fn run(
    worker: &mut Worker,
    opts: &DiffOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<DiffReport> {
    let started = Instant::now();
    let mut report = DiffReport {
        cases: 0,
        per_kind: Vec::new(),
        mismatches: Vec::new(),
        library_errors: Vec::new(),
        library_error_count: 0,
        seconds: 0.0,
    };
    for &kind in &opts.kinds {
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&opts.seed.to_le_bytes());
        seed[8] = kind as u8;
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed);
        let mut runner = TestRunner::new_with_rng(Config::default(), rng);
        // a replay that compares nothing never passes: at least one parameter
        let strategy = opt_case(MAX_STEPS)
            .prop_filter("an empty leaf compares nothing", |c| !c.params.is_empty());
        for i in 0..opts.cases {
            progress(&format!("{} case {}/{}", kind.name(), i + 1, opts.cases));
            let mut tree = strategy
                .new_tree(&mut runner)
                .map_err(|e| Error::NotImplemented(format!("case generation: {e}")))?;
            let drawn = tree.current();
            let name = format!("upstream-diff-{}-{}-{i}", kind.name(), opts.seed);
            report.cases += 1;
            match compare(worker, &golden_input(kind, &drawn, &name), opts.timeout)? {
                Outcome::Match => {}
                Outcome::LibraryError(e) => {
                    report.library_error_count += 1;
                    if report.library_errors.len() < 20 {
                        report
                            .library_errors
                            .push(format!("{} {name}: {e}", kind.name()));
                    }
                }
                Outcome::Mismatch { detail, golden } => {
                    let (detail, golden, steps) =
                        shrink(worker, kind, &mut tree, &name, detail, golden, opts)?;
                    let golden_file = write_case(&opts.out_dir, &golden)
                        .map(|p| p.display().to_string())
                        .map_err(|e| progress(&format!("could not write the case: {e}")))
                        .ok();
                    report.mismatches.push(Mismatch {
                        kind: kind.name().to_string(),
                        case: name.clone(),
                        detail,
                        golden_file,
                        drawn: format!("{drawn:?}"),
                        shrink_steps: steps,
                    });
                }
            }
        }
        report.per_kind.push((kind.name().to_string(), opts.cases));
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// proptest's shrinking loop over the value tree: simplify while the candidate still
/// mismatches, complicate when it matches; returns the smallest mismatch's detail and case.
fn shrink(
    worker: &mut Worker,
    kind: DiffKind,
    tree: &mut impl ValueTree<Value = OptCase>,
    name: &str,
    mut detail: String,
    mut golden: Value,
    opts: &DiffOptions,
) -> Result<(String, Value, u32)> {
    let mut steps = 0;
    if !tree.simplify() {
        return Ok((detail, golden, steps));
    }
    while steps < opts.max_shrink {
        steps += 1;
        let candidate = golden_input(kind, &tree.current(), name);
        match compare(worker, &candidate, opts.timeout)? {
            Outcome::Mismatch {
                detail: d,
                golden: g,
            } => {
                detail = d;
                golden = g;
                if !tree.simplify() {
                    break;
                }
            }
            Outcome::Match | Outcome::LibraryError(_) => {
                if !tree.complicate() {
                    break;
                }
            }
        }
    }
    Ok((detail, golden, steps))
}
