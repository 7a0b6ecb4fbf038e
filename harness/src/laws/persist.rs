//! Property failures persist: a law that fails in any run whose environment names a failure
//! directory (`HARNESS_FAILURE_DIR`; the nightly runs set it to `fixtures/regressions/laws`)
//! leaves a record there — the law, the seed and the case count that reproduce the failure,
//! and the shrunk counterexample for people — and every later `cargo test` replays every
//! committed record (`tests/laws.rs`), failing until the law holds on it again.
//!
//! A record is one small text file, `<law>-<seed>.failure`:
//!
//! ```text
//! law radam_where_matches_branch_bitwise
//! seed 20261124
//! cases 1024
//! # counterexample (for people; the seed and the case count replay it)
//! # step 3 updates.w[0]: ...
//! ```
//!
//! ```
//! use harness::laws::persist::{parse, Record};
//! let r = parse("law x\nseed 7\ncases 3\n# why\n").unwrap();
//! assert_eq!(r, Record { law: "x".into(), seed: 7, cases: 3 });
//! ```

use super::{Law, LawReport, RunConfig};
use std::path::{Path, PathBuf};

/// Environment variable naming the directory failures are recorded in (unset: not recorded).
pub const FAILURE_DIR_ENV: &str = "HARNESS_FAILURE_DIR";

/// What replays a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The failing law's registry name.
    pub law: String,
    /// The seed of the failing run.
    pub seed: u64,
    /// The case count of the failing run (with the seed, it replays the same cases).
    pub cases: u32,
}

/// Write the record of a failed run of `report` (seed `seed`) into `dir`; returns its path.
pub fn record(dir: &Path, report: &LawReport, seed: u64) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(format!("{}-{seed}.failure", report.name));
    let mut text = format!(
        "law {}\nseed {seed}\ncases {}\n# counterexample (for people; the seed and the case count replay it)\n",
        report.name, report.cases
    );
    for line in report.counterexample.as_deref().unwrap_or("").lines() {
        text += &format!("# {}\n", crate::report::escape_control(line));
    }
    crate::report::output::write_atomic(&path, text.as_bytes())?;
    Ok(path)
}

/// Record `report` if it failed and the environment names a failure directory.
pub fn record_if_asked(report: &LawReport, cfg: RunConfig) {
    if report.passed {
        return;
    }
    if let Some(dir) = std::env::var_os(FAILURE_DIR_ENV).filter(|d| !d.is_empty()) {
        match record(Path::new(&dir), report, cfg.seed) {
            Ok(p) => eprintln!(
                "law {} failed: replay recorded in {}",
                report.name,
                p.display()
            ),
            Err(e) => eprintln!(
                "law {} failed; its replay could not be recorded: {e}",
                report.name
            ),
        }
    }
}

/// Parse a record's text.
pub fn parse(text: &str) -> Result<Record, String> {
    let field = |key: &str| -> Result<&str, String> {
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' ')))
            .map(str::trim)
            .ok_or_else(|| format!("missing `{key}` line"))
    };
    Ok(Record {
        law: field("law")?.to_string(),
        seed: field("seed")?
            .parse()
            .map_err(|_| "`seed` is not a u64".to_string())?,
        cases: field("cases")?
            .parse()
            .ok()
            .filter(|&c| c > 0)
            .ok_or_else(|| "`cases` is not a positive u32".to_string())?,
    })
}

/// Every record (`*.failure`) in `dir`, sorted by file name; an unreadable or malformed record
/// is an error naming it. A missing directory holds none.
pub fn load(dir: &Path) -> Result<Vec<(PathBuf, Record)>, String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "failure"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            let r = parse(&text).map_err(|e| format!("{}: {e}", p.display()))?;
            Ok((p, r))
        })
        .collect()
}

/// Run the law of `record` (found by `find`) with its seed and case count.
pub fn replay(record: &Record, find: impl Fn(&str) -> Option<Law>) -> Result<LawReport, String> {
    let law = find(&record.law).ok_or_else(|| format!("no law named `{}`", record.law))?;
    let cfg = RunConfig::new(Some(record.cases), Some(record.seed))?;
    Ok(super::run(&law, cfg))
}
