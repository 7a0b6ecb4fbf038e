//! The harness's law suites run on Rust crates written elsewhere: an adapter per peer implements
//! a subject trait of `harness::subject`, and [`run`] gives one conformance row per (crate,
//! subject, law) with its evidence.
//!
//! | crate | version | subjects |
//! |---|---|---|
//! | `ode_solvers` | 0.6.2 | `Dopri5`, `Dop853` (adaptive), `Rk4` (constant steps), through [`ode_solvers_adapter`] |
//! | `diffsol` | 0.18.0 | `ExplicitRk` with the `Tsit45` tableau (adaptive), through [`diffsol_adapter`] |
//! | `candle-optimisers` | 0.10.2 | `Adam` (the optimizer suite, optax's convention, and PyTorch's), `AdamW` (decoupled weight decay 1e-2), `RAdam` and `NAdam` (momentum decay 4e-3): the optimizer suite's laws with the reference in PyTorch's convention ([`pytorch_convention`]), on `candle-core` 0.10.2's CPU device, through [`candle_optimisers_adapter`] |
//! | `argmin` | 0.11.0 | `BacktrackingLineSearch` with `ArmijoCondition` (the line-search suite, `harness::subject::linesearch`), through [`argmin_adapter`] |
//! | `candle-nn` | 0.10.2 | a stack of linear layers built through `VarMap`/`VarBuilder` in f32 then cast to f16, or directly in f16: measured peaks against the reference's analytic bounds, through [`candle_nn_stack_adapter`] |
//!
//! A failing row is a finding about the peer, not a failure of the run: the adapters pass the
//! request through as the peer's documentation says to, and never work around a peer's
//! behaviour (a panic, a hang, a non-finite answer is what the row reports).
//!
//! # References
//! - `harness::subject::ode` (the ODE laws and their bounds); `harness::subject::optimizer` (the
//!   optimizer laws).
//! - `docs/findings/` (the write-ups of the failing rows).
//!
//! ```no_run
//! let rows = peers::run(&peers::RunOptions::default());
//! println!("{}", peers::markdown_table(&rows));
//! ```
#![warn(missing_docs)]

pub mod argmin_adapter;
pub mod candle_nn_stack_adapter;
pub mod candle_optimisers_adapter;
pub mod diffsol_adapter;
pub mod fuzz;
pub mod ode_solvers_adapter;
pub mod pytorch_convention;

use candle_optimisers_adapter::CandleOptimiser;
use harness::laws::{check_property_replayed_by, timed, Family, LawReport};
use harness::reference;
use harness::subject::linesearch::{self, BacktrackingSearch};
use harness::subject::ode::{self, OdeSolver, SuiteOptions};
use harness::subject::optimizer::{self, Factory, SuiteReport};
use pytorch_convention::{Compared, Torch};
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
    /// The optimizer suite's options (cases per law, seed, whether the memory law runs: it needs
    /// `harness::install_counting_allocator!` in the binary).
    pub optimizer: optimizer::SuiteOptions,
    /// The line-search suite's options.
    pub linesearch: linesearch::SuiteOptions,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            ode: SuiteOptions {
                cases: 16,
                ..SuiteOptions::default()
            },
            // 64 cases: the suite asks for Adam in about one case in ten
            optimizer: optimizer::SuiteOptions::default(),
            linesearch: linesearch::SuiteOptions::default(),
        }
    }
}

/// Every peer ODE solver with its crate name and version.
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
        .chain(std::iter::once((
            "diffsol",
            diffsol_adapter::VERSION,
            Arc::new(diffsol_adapter::Diffsol) as Arc<dyn OdeSolver>,
        )))
        .collect()
}

/// Run every law of every peer subject: the ODE solvers, the optimizers, then the stacked
/// initialisation of candle-nn.
pub fn run(opts: &RunOptions) -> Vec<Row> {
    let mut rows = Vec::new();
    for (krate, version, solver) in subjects() {
        let method = solver.name();
        let report = ode::check(solver, &opts.ode);
        push_rows(
            &mut rows,
            (krate, version, &method),
            &report.laws,
            &report.not_applicable,
        );
    }
    let candle = ("candle-optimisers", candle_optimisers_adapter::VERSION);
    let adam = "candle-optimisers Adam";
    let report = optimizer::check(adam, &candle_optimisers_adapter::make_adam, &opts.optimizer);
    let mut laws = report.laws;
    laws.push(pytorch_law(
        &candle_optimisers_adapter::make_adam,
        &[Torch::Adam],
        &opts.optimizer,
    ));
    laws.push(empty_parameter_law(
        &candle_optimisers_adapter::make_adam,
        &[Torch::Adam],
    ));
    push_rows(
        &mut rows,
        (candle.0, candle.1, adam),
        &laws,
        &report.not_applicable,
    );
    type Make = fn(&optimizer::OptimizerSpec) -> reference::Result<CandleOptimiser>;
    let by_convention: [(&str, Make, Torch); 3] = [
        (
            "candle-optimisers AdamW",
            candle_optimisers_adapter::make_adamw,
            Torch::AdamW {
                weight_decay: pytorch_convention::PYTORCH_ADAMW_WEIGHT_DECAY,
            },
        ),
        (
            "candle-optimisers RAdam",
            candle_optimisers_adapter::make_radam,
            Torch::RAdam,
        ),
        (
            "candle-optimisers NAdam",
            candle_optimisers_adapter::make_nadam,
            Torch::NAdam {
                momentum_decay: pytorch_convention::PYTORCH_NADAM_MOMENTUM_DECAY,
            },
        ),
    ];
    for (subject, make, torch) in by_convention {
        let report = check_pytorch_convention(subject, &make, &[torch], &opts.optimizer);
        push_rows(
            &mut rows,
            (candle.0, candle.1, subject),
            &report.laws,
            &report.not_applicable,
        );
    }
    let argmin = Arc::new(argmin_adapter::Argmin);
    let subject = argmin.name();
    let report = linesearch::check(argmin, &opts.linesearch);
    push_rows(
        &mut rows,
        ("argmin", argmin_adapter::VERSION, &subject),
        &report.laws,
        &report.not_applicable,
    );
    let cfg = candle_nn_stack_adapter::table_config();
    for (path, law, verdict) in
        candle_nn_stack_adapter::check(&cfg, &candle_nn_stack_adapter::build)
    {
        rows.push(Row {
            krate: "candle-nn".into(),
            version: candle_nn_stack_adapter::VERSION.into(),
            subject: path.subject().into(),
            law: law.into(),
            verdict: if verdict.is_ok() { "pass" } else { "fail" }.into(),
            evidence: one_line(verdict.as_ref().unwrap_or_else(|e| e)),
        });
    }
    rows
}

fn push_rows(
    rows: &mut Vec<Row>,
    (krate, version, subject): (&str, &str, &str),
    laws: &[LawReport],
    not_applicable: &[(String, String)],
) {
    for l in laws {
        rows.push(Row {
            krate: krate.into(),
            version: version.into(),
            subject: subject.into(),
            law: l.name.clone(),
            verdict: if l.passed { "pass" } else { "fail" }.into(),
            evidence: match &l.counterexample {
                Some(c) if !l.passed => one_line(c),
                Some(c) => one_line(c),
                None => format!("{} cases", l.cases),
            },
        });
    }
    for (law, why) in not_applicable {
        rows.push(Row {
            krate: krate.into(),
            version: version.into(),
            subject: subject.into(),
            law: law.clone(),
            verdict: "n/a".into(),
            evidence: one_line(why),
        });
    }
}

/// The law `optimizer_matches_pytorch_convention`: on the optimizer suite's cases, the subject
/// equals [`pytorch_convention::reference_updates`] step for step within the conformance
/// tolerance. A passing report's counterexample field says how many cases were compared (the
/// others are outside the finiteness domain or not expressible in the subject).
///
/// # References
/// - [`pytorch_convention`] (the convention and the law per case).
///
/// ```no_run
/// use harness::subject::optimizer::SuiteOptions;
/// let make = peers::candle_optimisers_adapter::make_radam;
/// let torch = [peers::pytorch_convention::Torch::RAdam];
/// let report = peers::pytorch_law(&make, &torch, &SuiteOptions::default());
/// println!("{:?}", report.counterexample);
/// ```
pub fn pytorch_law<O: optimizer::BothDtypes>(
    make: &impl Factory<O>,
    torches: &[Torch],
    opts: &optimizer::SuiteOptions,
) -> LawReport {
    let compared = std::sync::atomic::AtomicU32::new(0);
    let law = "optimizer_matches_pytorch_convention";
    let mut report = timed(law, Family::Numerics, opts.cases, false, || {
        check_property_replayed_by(
            &format!(
                "the suite again with SuiteOptions {{ seed: {}, .. }} ({law})",
                opts.seed
            ),
            opts.cases,
            opts.seed,
            optimizer::suite_case(),
            |c| {
                let r = pytorch_convention::matches_pytorch_convention_any(c, make, torches)?;
                if r == Compared::Yes {
                    compared.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(())
            },
        )
    });
    if report.passed {
        report.counterexample = Some(format!(
            "{} cases, {} compared step for step",
            opts.cases,
            compared.into_inner()
        ));
    }
    report
}

/// The law `optimizer_steps_empty_parameter`
/// ([`pytorch_convention::steps_empty_parameter`]): a zero-element parameter beside a
/// one-element one is stepped as a no-op, and the other parameter as the reference steps it.
/// One fixed case per (optimizer, dtype): its evidence is the number stepped.
///
/// ```
/// use harness::subject::optimizer::Staged;
/// use peers::pytorch_convention::Torch;
/// let make = |s: &harness::subject::optimizer::OptimizerSpec| Ok(Staged::new(harness::optim::adam(s.learning_rate, s.hyper.moments)?));
/// assert!(peers::empty_parameter_law(&make, &[Torch::Adam]).passed);
/// ```
pub fn empty_parameter_law<O: optimizer::BothDtypes>(
    make: &impl Factory<O>,
    torches: &[Torch],
) -> LawReport {
    let law = "optimizer_steps_empty_parameter";
    let mut stepped = 0;
    let mut report = timed(
        law,
        Family::Numerics,
        2 * torches.len() as u32,
        false,
        || pytorch_convention::steps_empty_parameter(make, torches).map(|n| stepped = n),
    );
    if report.passed {
        report.counterexample = Some(format!("{stepped} (optimizer, dtype) pairs stepped"));
        if stepped == 0 {
            // every pair was unsupported: the law judged nothing
            report.passed = false;
            report.counterexample = Some(format!(
                "no (optimizer, dtype) pair reached the subject: its factory returned \
                 `unsupported` for all {} of them",
                2 * torches.len()
            ));
        }
    }
    report
}

/// The optimizer suite for a subject whose reference is PyTorch's convention rather than
/// optax's: `optimizer_matches_pytorch_convention` in place of `optimizer_matches_reference`
/// (reported not applicable, with the reason), then the suite's convention-free laws
/// (`optimizer_updates_finite`, `optimizer_rejects_invalid_hyperparameters`,
/// `optimizer_state_signature_fixed`, `optimizer_one_trace` when the subject stages,
/// `optimizer_live_bytes_flat` when `opts.memory`), each as `harness::subject::optimizer` runs it.
///
/// # References
/// - `harness::subject::optimizer::check` (the same laws, with optax's reference).
///
/// ```no_run
/// use harness::subject::optimizer::SuiteOptions;
/// let make = peers::candle_optimisers_adapter::make_radam;
/// let opts = SuiteOptions { memory: false, ..SuiteOptions::default() };
/// let torch = [peers::pytorch_convention::Torch::RAdam];
/// let report = peers::check_pytorch_convention("candle-optimisers RAdam", &make, &torch, &opts);
/// println!("{}", report.summary());
/// ```
pub fn check_pytorch_convention<O: optimizer::BothDtypes>(
    name: &str,
    make: &impl Factory<O>,
    torches: &[Torch],
    opts: &optimizer::SuiteOptions,
) -> SuiteReport {
    let (cases, seed) = (opts.cases, opts.seed);
    let replay =
        |law: &str| format!("the suite again with SuiteOptions {{ seed: {seed}, .. }} ({law})");
    let mut laws = vec![
        pytorch_law(make, torches, opts),
        empty_parameter_law(make, torches),
    ];
    let mut not_applicable: Vec<(String, String)> = torches
        .iter()
        .map(|t| {
            (
                "optimizer_matches_reference".to_string(),
                t.why_not_optax().to_string(),
            )
        })
        .collect();
    let by_dtype =
        |c: &optimizer::SuiteCase,
         f32_law: &dyn Fn(&optimizer::SuiteCase) -> Result<(), String>,
         f64_law: &dyn Fn(&optimizer::SuiteCase) -> Result<(), String>| {
            match c.run.dtype {
                harness::backend::DType::F32 => f32_law(c),
                harness::backend::DType::F64 => f64_law(c),
                _ => Ok(()),
            }
        };
    // each property law reports how many of its cases reached the subject
    let law = "optimizer_updates_finite";
    laws.push(optimizer::counted(cases, make, |make| {
        timed(law, Family::CondVsWhere, cases, false, || {
            check_property_replayed_by(&replay(law), cases, seed, optimizer::suite_case(), |c| {
                by_dtype(
                    c,
                    &|c| optimizer::updates_finite::<f32, O>(c, &make),
                    &|c| optimizer::updates_finite::<f64, O>(c, &make),
                )
            })
        })
    }));
    let law = "optimizer_rejects_invalid_hyperparameters";
    let invalid = optimizer::invalid_cases(cases);
    laws.push(optimizer::counted(invalid, make, |make| {
        timed(law, Family::Numerics, invalid, false, || {
            check_property_replayed_by(
                &replay(law),
                invalid,
                seed,
                optimizer::invalid_case(),
                |c| optimizer::rejects_invalid::<O>(c, &make),
            )
        })
    }));
    let law = "optimizer_state_signature_fixed";
    laws.push(optimizer::counted(cases, make, |make| {
        timed(law, Family::FixedStateShape, cases, false, || {
            check_property_replayed_by(&replay(law), cases, seed, optimizer::suite_case(), |c| {
                by_dtype(
                    c,
                    &|c| optimizer::state_signature_fixed::<f32, O>(c, &make),
                    &|c| optimizer::state_signature_fixed::<f64, O>(c, &make),
                )
            })
        })
    }));
    let stages = match optimizer::staged(make) {
        Ok(stages) => Some(stages),
        Err(e) => {
            laws.push(timed(
                "optimizer_one_trace",
                Family::TraceCount,
                0,
                false,
                || Err(e),
            ));
            None
        }
    };
    if stages == Some(true) {
        let law = "optimizer_one_trace";
        laws.push(optimizer::counted(cases, make, |make| {
            timed(law, Family::TraceCount, cases, false, || {
                check_property_replayed_by(
                    &replay(law),
                    cases,
                    seed,
                    optimizer::suite_case(),
                    |c| {
                        by_dtype(c, &|c| optimizer::one_trace::<f32, O>(c, &make), &|c| {
                            optimizer::one_trace::<f64, O>(c, &make)
                        })
                    },
                )
            })
        }));
    } else if stages == Some(false) {
        not_applicable.push((
            "optimizer_one_trace".to_string(),
            "the subject does not stage its update (traces() is None)".to_string(),
        ));
    }
    if opts.memory {
        let law = "optimizer_live_bytes_flat";
        let n = cases.min(8);
        laws.push(timed(law, Family::TraceCount, n, true, || {
            use proptest::prelude::*;
            check_property_replayed_by(
                &replay(law),
                n,
                seed,
                (1usize..64, prop_oneof![Just(2usize), Just(10), 2usize..100]),
                |&(elements, steps)| {
                    optimizer::live_bytes_flat::<O>(
                        &harness::laws::radam::MemCase { elements, steps },
                        make,
                    )
                },
            )
        }));
    } else {
        not_applicable.push((
            "optimizer_live_bytes_flat".to_string(),
            "memory not measured (SuiteOptions::memory is false)".to_string(),
        ));
    }
    SuiteReport {
        subject: name.to_string(),
        laws,
        not_applicable,
    }
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
