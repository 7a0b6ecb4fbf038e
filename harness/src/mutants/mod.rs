//! The upstream bugs, re-created. Each must be caught by the law meant to guard against it, with
//! a small counterexample; `harness mutants` prints the table and the tests assert it.
//!
//! Names are those of `docs/CLI.md` and stable: other tools look for them.
//!
//! Beside them, planted bugs that re-create no upstream incident, one module per family: wrong
//! subjects that a law must catch all the same (`ode_gradient`, `ode_solvers`,
//! `linesearch_steps`, `muon_ns`, `radam_forms`, `stack_init_and_scan`). They are not rows of
//! `harness mutants`; the tests show each caught, with its shrunk counterexample.

pub mod cnf_flow;
pub mod cnf_static_step;
pub mod linesearch_rebuilt_objective;
pub mod linesearch_steps;
pub mod linesearch_weak_init;
mod muon_captured_coeffs;
pub mod muon_ns;
pub mod muon_plan_per_call;
pub mod ode_gradient;
pub mod ode_solvers;
mod radam_cond_leak;
pub mod radam_forms;
mod radam_unsafe_where;
pub mod stack_init_and_scan;
mod stack_vmap_fp32;

pub use radam_cond_leak::CondLeak;
pub use stack_vmap_fp32::VmapFp32;

use std::time::Instant;

/// A re-created bug and the law that must catch it.
pub struct Mutant {
    /// Unique name (`harness mutants --only` selects it by this exact name).
    pub name: &'static str,
    /// Upstream issue it re-creates.
    pub incident: &'static str,
    /// The law (registry name) run against it.
    pub law: &'static str,
    /// Run the law on the mutant: `Err(counterexample)` means caught.
    pub run: fn() -> Result<(), String>,
}

/// One row of `harness mutants`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MutantReport {
    /// The mutant's name.
    pub name: String,
    /// The upstream issue it re-creates.
    pub incident: String,
    /// The law run against it.
    pub law: String,
    /// Whether the law failed on it with a shrunk counterexample (the expected outcome); an
    /// aborted run or another error is not a catch.
    pub caught: bool,
    /// The law's counterexample, when caught.
    pub counterexample: Option<String>,
    /// Wall time of the run, in seconds.
    pub seconds: f64,
}

pub use muon_captured_coeffs::CapturedCoeffs;

/// Every mutant.
pub fn registry() -> Vec<Mutant> {
    vec![
        radam_cond_leak::mutant(),
        radam_unsafe_where::mutant(),
        linesearch_weak_init::mutant(),
        linesearch_rebuilt_objective::mutant(),
        muon_captured_coeffs::mutant(),
        stack_vmap_fp32::mutant(),
        cnf_static_step::mutant(),
    ]
}

/// Run one mutant against its law.
pub fn run(m: &Mutant) -> MutantReport {
    let start = Instant::now();
    let outcome = (m.run)();
    MutantReport {
        name: m.name.into(),
        incident: m.incident.into(),
        law: m.law.into(),
        // a run aborted or refused before any case failed has not caught the bug
        caught: outcome
            .as_ref()
            .err()
            .is_some_and(|e| crate::laws::is_property_failure(e)),
        counterexample: outcome.err(),
        seconds: start.elapsed().as_secs_f64(),
    }
}

/// Run every mutant whose name is `only` (all when `None`).
pub fn run_all(only: Option<&str>) -> Vec<MutantReport> {
    registry()
        .iter()
        .filter(|m| only.is_none_or(|o| m.name == o))
        .map(run)
        .collect()
}
