//! golden-v1: replay recorded optax/diffrax runs through the reference and compare.
//!
//! The format is `docs/GOLDEN-FORMAT.md`. Any file in that format is accepted; a kind this
//! build cannot replay yet fails with "not implemented" (it never passes).

mod cnf;
mod compare;
mod format;
mod linesearch;
mod ode;
mod optimizer;

pub use ode::GoldenProblem;

pub use compare::{error_over_tolerance, Comparator};
pub use format::{parse_tensor, parse_tree, Case};

use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// The outcome of one case (the `golden` JSON row of `docs/CLI.md`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct CaseResult {
    pub name: String,
    pub kind: String,
    pub passed: bool,
    pub max_abs_err: f64,
    pub max_rel_err: f64,
    pub detail: String,
    /// Every compared number's `|got - want| / (atol + rtol*|want|)` (not serialised: the
    /// report plots their distribution).
    #[serde(skip)]
    pub error_ratios: Vec<f64>,
}

/// Files named by `paths`: files as given, directories searched recursively for `*.json`
/// (sorted, so runs are deterministic). A missing path is an error naming it.
pub fn collect(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            walk(p, &mut out)?;
        } else if p.is_file() {
            out.push(p.clone());
        } else {
            return Err(Error::Golden {
                file: p.display().to_string(),
                msg: "no such file or directory".into(),
            });
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let io = |e: std::io::Error| Error::Golden {
        file: dir.display().to_string(),
        msg: e.to_string(),
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::result::Result<_, _>>()
        .map_err(io)?;
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out)?;
        } else if p.extension().is_some_and(|e| e == "json") {
            out.push(p);
        }
    }
    Ok(())
}

/// Read and parse one file (an unreadable or malformed file is an error naming it).
pub fn load(path: &Path) -> Result<Case> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Golden {
        file: path.display().to_string(),
        msg: e.to_string(),
    })?;
    Case::parse(&path.display().to_string(), &text)
}

/// Replay a parsed case. Errors of the *reference* (e.g. a hyperparameter it rejects) make the
/// case fail with the error as detail; only format errors are `Err`.
pub fn replay(case: &Case) -> Result<CaseResult> {
    let mut cmp = Comparator::new(case.tolerance);
    let outcome = match case.kind.as_str() {
        "optimizer" => optimizer::replay(case, &mut cmp),
        "ode" => ode::replay(case, &mut cmp),
        "linesearch" => linesearch::replay(case, &mut cmp),
        "cnf" => cnf::replay(case, &mut cmp),
        other => Err(case.err(format!("unknown kind `{other}`"))),
    };
    let detail = match outcome {
        Ok(()) => cmp.detail(),
        Err(e @ Error::Golden { .. }) => return Err(e),
        Err(e) => {
            cmp.fail(e.to_string());
            cmp.detail()
        }
    };
    Ok(CaseResult {
        name: case.name.clone(),
        kind: case.kind.clone(),
        passed: cmp.passed(),
        max_abs_err: cmp.max_abs_err(),
        max_rel_err: cmp.max_rel_err(),
        error_ratios: cmp.error_ratios().to_vec(),
        detail,
    })
}
