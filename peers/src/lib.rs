//! The harness's law suites run on Rust crates written elsewhere: an adapter per peer implements
//! a subject trait of `harness::subject`, and [`run`] gives one conformance row per (crate,
//! subject, law) with its evidence.
//!
//! | crate | version | subjects |
//! |---|---|---|
//! | `ode_solvers` | 0.6.2 | `Dopri5`, `Dop853` (adaptive), `Rk4` (constant steps), through [`ode_solvers_adapter`] |
//!
//! A failing row is a finding about the peer, not a failure of the run: the adapters pass the
//! request through as the peer's documentation says to, and never work around a peer's
//! behaviour (a panic, a hang, a non-finite answer is what the row reports).
//!
//! # References
//! - `harness::subject::ode` (the ODE laws and their bounds).
//! - `docs/findings/` (the write-ups of the failing rows).
//!
//! ```no_run
//! let rows = peers::run(&peers::RunOptions::default());
//! println!("{}", peers::markdown_table(&rows));
//! ```

pub mod fuzz;
pub mod ode_solvers_adapter;

use harness::subject::ode::{self, OdeSolver, SuiteOptions};
use std::sync::Arc;

/// One row of the conformance table.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Row {
    /// The crate under test (`"crate"` in JSON).
    #[serde(rename = "crate")]
    pub krate: String,
    /// Its exact version.
    pub version: String,
    /// The method (a solver of the crate).
    pub subject: String,
    /// The law (`harness::subject::ode`'s names).
    pub law: String,
    /// `pass`, `fail` or `n/a`.
    pub verdict: String,
    /// The counterexample of a failure, the reason a law does not apply, or the cases run.
    pub evidence: String,
}

/// How [`run`] runs the suites.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// The ODE suite's options (cases per law, seed, time limit per solve).
    pub ode: SuiteOptions,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            ode: SuiteOptions {
                cases: 16,
                ..SuiteOptions::default()
            },
        }
    }
}

/// Every peer subject with its crate name and version.
pub fn subjects() -> Vec<(&'static str, &'static str, Arc<dyn OdeSolver>)> {
    ode_solvers_adapter::Method::ALL
        .into_iter()
        .map(|m| {
            (
                "ode_solvers",
                ode_solvers_adapter::VERSION,
                Arc::new(ode_solvers_adapter::OdeSolvers(m)) as Arc<dyn OdeSolver>,
            )
        })
        .collect()
}

/// Run every law of every peer subject.
pub fn run(opts: &RunOptions) -> Vec<Row> {
    let mut rows = Vec::new();
    for (krate, version, solver) in subjects() {
        let method = solver.name();
        let report = ode::check(solver, &opts.ode);
        for l in &report.laws {
            rows.push(Row {
                krate: krate.into(),
                version: version.into(),
                subject: method.clone(),
                law: l.name.clone(),
                verdict: if l.passed { "pass" } else { "fail" }.into(),
                evidence: match &l.counterexample {
                    Some(c) if !l.passed => one_line(c),
                    _ => format!("{} cases", l.cases),
                },
            });
        }
        for (law, why) in &report.not_applicable {
            rows.push(Row {
                krate: krate.into(),
                version: version.into(),
                subject: method.clone(),
                law: law.clone(),
                verdict: "n/a".into(),
                evidence: one_line(why),
            });
        }
    }
    rows
}

/// `text` on one line (a table cell), at most 300 characters.
fn one_line(text: &str) -> String {
    let flat: String = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|");
    if flat.chars().count() > 300 {
        flat.chars().take(297).collect::<String>() + "..."
    } else {
        flat
    }
}

/// The rows as a markdown table (the README's "Peer conformance" table).
pub fn markdown_table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| crate | version | subject | law | verdict | evidence |\n|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out += &format!(
            "| `{}` | {} | {} | `{}` | {} | {} |\n",
            r.krate, r.version, r.subject, r.law, r.verdict, r.evidence
        );
    }
    out
}
