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
pub use format::{parse_number, parse_tensor, parse_tree, Case};
pub use linesearch::{parse_hyper as linesearch_hyper, MAX_GOLDEN_BACKTRACKING_STEPS};

use crate::reference::Face;
use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// The outcome of one case (the `golden` JSON row of `docs/CLI.md`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct CaseResult {
    /// The case's `name` field.
    pub name: String,
    /// The case's `kind`: `optimizer`, `ode`, `linesearch` or `cnf`.
    pub kind: String,
    /// Every compared value within tolerance, and at least one compared.
    pub passed: bool,
    /// Largest `|got - want|` over finite pairs.
    pub max_abs_err: f64,
    /// Largest `|got - want| / |want|` over finite pairs with `want != 0`.
    pub max_rel_err: f64,
    /// [`Comparator::output_bits`] in hex: the same on every build that computes the same bits.
    pub output_bits: String,
    /// One line: the first failure and the failure count, or the number of values compared.
    pub detail: String,
    /// Every compared number's `|got - want| / (atol + rtol*|want|)` (not serialised: the
    /// report plots their distribution).
    #[serde(skip)]
    pub error_ratios: Vec<f64>,
}

/// Largest golden file read (bytes): the committed cases are at most a few hundred KiB, and
/// parsing holds several times the text in memory. Larger files are refused before reading.
pub const MAX_CASE_BYTES: u64 = 64 << 20;

/// Most arithmetic one golden case may ask its replay for (floating-point operations, as
/// estimated from the case's sizes before any of it is done). The cases a file can hold are
/// otherwise bounded only by [`MAX_CASE_BYTES`], and a `cnf` case's cost grows with its steps,
/// width and points far faster than its text: a case of 1000 two-dimensional points through a
/// width-64, depth-3 block at 4096 steps is 100 KB and 1.5e12 operations. `1e12` is about a
/// minute of the CNF kernels on the two-core machines the workspace is measured on (the CNF
/// training step reaches 70-110 GFLOP/s in f64 there, `docs/PERFORMANCE.md`), and 10^5 times
/// the largest committed case (`cnf-2d-2block-w32-d2`: 7.7e6). A larger case is refused with
/// its estimate; split its points over several cases.
pub const MAX_REPLAY_FLOPS: f64 = 1e12;

/// Files named by `paths`: files as given, directories searched recursively for `*.json`
/// (sorted, so runs are deterministic). Each file is listed once, however many paths or
/// symbolic links lead to it, and a directory reached again through a link is not walked again
/// (no loop). A missing path is an error naming it; so is a path that is neither a regular file
/// nor a directory (a FIFO, a device).
pub fn collect(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut seen_files = std::collections::BTreeSet::new();
    let mut seen_dirs = std::collections::BTreeSet::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| Error::Golden {
            file: p.display().to_string(),
            msg: describe_io(&e),
        })?;
        if meta.is_dir() {
            walk(p, &mut out, &mut seen_files, &mut seen_dirs)?;
        } else if meta.is_file() {
            if seen_files.insert(canonical(p)) {
                out.push(p.clone());
            }
        } else {
            return Err(Error::Golden {
                file: p.display().to_string(),
                msg: "not a regular file or a directory".into(),
            });
        }
    }
    Ok(out)
}

fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

/// An I/O error in words that say what was wrong with the path.
fn describe_io(e: &std::io::Error) -> String {
    use std::io::ErrorKind::*;
    match e.kind() {
        NotFound => "no such file or directory".into(),
        PermissionDenied => "permission denied".into(),
        _ if e.raw_os_error() == Some(36) => "file name too long".into(),
        _ => e.to_string(),
    }
}

fn walk(
    dir: &Path,
    out: &mut Vec<PathBuf>,
    seen_files: &mut std::collections::BTreeSet<PathBuf>,
    seen_dirs: &mut std::collections::BTreeSet<PathBuf>,
) -> Result<()> {
    if !seen_dirs.insert(canonical(dir)) {
        return Ok(()); // reached again through a link: already walked
    }
    let io = |e: std::io::Error| Error::Golden {
        file: dir.display().to_string(),
        msg: describe_io(&e),
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::result::Result<_, _>>()
        .map_err(io)?;
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out, seen_files, seen_dirs)?;
        } else if p.extension().is_some_and(|e| e == "json")
            && p.is_file()
            && seen_files.insert(canonical(&p))
        {
            out.push(p);
        }
    }
    Ok(())
}

/// Read and parse one file: a regular file of at most [`MAX_CASE_BYTES`] (checked before
/// reading, and the read stops there), whose JSON has no duplicate key. An unreadable or
/// malformed file is an error naming it.
pub fn load(path: &Path) -> Result<Case> {
    use std::io::Read;
    let name = path.display().to_string();
    let err = |msg: String| Error::Golden {
        file: name.clone(),
        msg,
    };
    let meta = std::fs::metadata(path).map_err(|e| err(describe_io(&e)))?;
    if !meta.is_file() {
        return Err(err("not a regular file".into()));
    }
    if meta.len() > MAX_CASE_BYTES {
        return Err(err(format!(
            "{} bytes, more than the {MAX_CASE_BYTES}-byte limit of a golden case",
            meta.len()
        )));
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_CASE_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| err(describe_io(&e)))?;
    if text.len() as u64 > MAX_CASE_BYTES {
        return Err(err(format!(
            "more than the {MAX_CASE_BYTES}-byte limit of a golden case"
        )));
    }
    Case::parse(&name, &text)
}

/// Replay a parsed case through the fast kernels. Errors of the *reference* (e.g. a
/// hyperparameter it rejects) make the case fail with the error as detail; only format errors
/// are `Err`.
pub fn replay(case: &Case) -> Result<CaseResult> {
    replay_face(case, Face::Fast)
}

/// [`replay`] through the chosen face of the kernels: with [`Face::Dfdx`], the ODE steps and
/// error norm, the line search's kernels, Muon's Newton–Schulz and the CNF field run in their
/// dfdx forms (Adam and RAdam replay through their composed dfdx form under both faces).
pub fn replay_face(case: &Case, face: Face) -> Result<CaseResult> {
    let mut cmp = Comparator::new(case.tolerance);
    let outcome = match case.kind.as_str() {
        "optimizer" => optimizer::replay(case, &mut cmp, face),
        "ode" => ode::replay(case, &mut cmp, face),
        "linesearch" => linesearch::replay(case, &mut cmp, face),
        "cnf" => cnf::replay(case, &mut cmp, face),
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
        output_bits: format!("{:016x}", cmp.output_bits()),
        error_ratios: cmp.error_ratios().to_vec(),
        detail,
    })
}
