//! The `harness` command (contract: `docs/CLI.md`), callable in-process through [`run`] so that
//! tests and the command-line fuzz target drive exactly what the binary runs.
//!
//! Exit status: 0 when everything checked holds, 1 when something failed, 2 for bad usage or
//! unreadable input (one line on stderr naming the file or flag).

use crate::report::output::Outputs;
use crate::report::{num, write_json, Table};
pub mod fuzz;

use crate::reference::Face;
use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "harness",
    version,
    about = "Laws, golden replays, mutants and benchmarks of the dfdx reference implementation"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run every registered law (or those whose name contains PATTERN) through proptest.
    Check {
        /// Run only the laws whose name contains PATTERN.
        #[arg(long, value_name = "PATTERN")]
        law: Option<String>,
        /// Cases per law (default: each law's own, overridable by PROPTEST_CASES).
        #[arg(long)]
        cases: Option<u32>,
        /// Seed of the random runner (replays a reported failure).
        #[arg(long)]
        seed: Option<u64>,
        /// Also write the results as JSON to FILE (written atomically; never one of the inputs).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Also run the mutants, the golden cases and the memory, trace and init-peak
        /// measurements, and write check.json, summary.md and SVG plots into DIR.
        #[arg(long, value_name = "DIR")]
        report: Option<PathBuf>,
        /// Golden cases replayed by --report (default: this workspace's fixtures/golden).
        #[arg(long, value_name = "DIR", requires = "report")]
        golden: Option<PathBuf>,
    },
    /// Replay golden-v1 cases (files, or directories searched recursively for *.json).
    Golden {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Which form of the kernels replays the cases: `fast` (what runs everywhere else) or
        /// `dfdx` (the readable dfdx tensor form each fast kernel is proven equal to).
        #[arg(long, value_name = "FACE", default_value = "fast", value_parser = parse_face)]
        face: Face,
        /// Also write the results as JSON to FILE (written atomically; never one of the inputs).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Run each re-created upstream bug against the law meant to catch it.
    Mutants {
        /// Run only the mutant with this exact name (e.g. radam-cond-leak).
        #[arg(long, value_name = "NAME")]
        only: Option<String>,
        /// Also write the results as JSON to FILE (written atomically; never one of the inputs).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Time the reference against the physical limit measured in the same run.
    Bench {
        /// optim, muon, ode, cnf, stack, all; faces (each kernel in its fast form and its dfdx
        /// face); scaling (each kernel's time over a range of sizes, with a power-law fit)
        #[arg(value_parser = ["optim", "muon", "ode", "cnf", "stack", "faces", "scaling", "all"])]
        area: String,
        /// Fewer repetitions (a smoke run; figures are noisier).
        #[arg(long)]
        quick: bool,
        /// Also write the results as JSON to FILE (written atomically; never one of the inputs).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Area scaling only: write the log-log plot of time against size, one panel per
        /// kernel, to FILE (written atomically).
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
        /// Also time the real library of this upstream profile (e.g. current) on the same work,
        /// in the same run (needs `harness upstream setup`).
        #[arg(long, value_name = "PROFILE")]
        against: Option<String>,
        /// With --against: the longest wait, in seconds, for the worker to start and for each
        /// upstream figure (1 to 86400; default 120 to start, 600 a figure). A worker that does
        /// not answer in time is killed, and the figures measured so far are kept.
        #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
        timeout: Option<u64>,
        #[command(flatten)]
        dirs: UpstreamDirs,
    },
    /// Build the stacked model with every strategy and measure peak memory.
    InitPeaks {
        /// Number of stacked layers N.
        #[arg(long)]
        layers: usize,
        /// Model width D (each layer is D -> H -> D).
        #[arg(long)]
        width: usize,
        /// Hidden width H.
        #[arg(long)]
        hidden: usize,
        /// Element type of the built model: f16, f32 or f64.
        #[arg(long, default_value = "f16")]
        dtype: String,
        /// Memory budget in bytes (K/M/G/T suffixes); a larger estimate is refused before any
        /// allocation (default: HARNESS_MAX_MEMORY, else half of the available memory).
        #[arg(long, value_name = "BYTES")]
        max_memory: Option<String>,
        /// Seed of the counter-based generator (every strategy builds the same model).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Write a plot of live bytes over each build.
        #[arg(long)]
        svg: Option<PathBuf>,
        /// Also write the results as JSON to FILE (written atomically; never one of the inputs).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Train the continuous normalising flow on a built-in 2-D data set.
    TrainCnf {
        /// Training steps (at least 1).
        #[arg(long, default_value_t = 100)]
        steps: usize,
        /// two-moons, checkerboard, or a greyscale .pgm image
        #[arg(long, default_value = "two-moons")]
        data: String,
        /// Plot of the learned density (with data points) beside the loss curve.
        #[arg(long)]
        svg: Option<PathBuf>,
        /// Also write the results as JSON to FILE (written atomically; never one of the inputs).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Hidden width of the ConcatSquash field.
        #[arg(long, default_value_t = 64)]
        width: usize,
        /// Hidden layers of the field.
        #[arg(long, default_value_t = 3)]
        depth: usize,
        /// Flow blocks (each an ODE solve).
        #[arg(long, default_value_t = 2)]
        blocks: usize,
        /// Samples per training step.
        #[arg(long, default_value_t = 500)]
        batch: usize,
        /// AdamW learning rate.
        #[arg(long, default_value_t = 1e-3)]
        lr: f64,
        /// Seed of the weights, the data stream and the probes.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Hutchinson trace with Gaussian probes instead of the exact trace.
        #[arg(long)]
        hutchinson: bool,
        /// Checkpointed gradients (diffrax's default budget) instead of the full tape.
        #[arg(long)]
        checkpoint: bool,
        /// Float type the flow is trained in: f32 or f64.
        #[arg(long, default_value = "f64")]
        dtype: String,
        /// Memory budget in bytes (K/M/G/T suffixes); a larger estimate is refused before any
        /// allocation (default: HARNESS_MAX_MEMORY, else half of the available memory).
        #[arg(long, value_name = "BYTES")]
        max_memory: Option<String>,
    },
    /// The laws against the real JAX libraries, observed by a Python worker per pinned profile.
    Upstream {
        #[command(subcommand)]
        cmd: UpstreamCmd,
    },
}

#[derive(Subcommand)]
enum UpstreamCmd {
    /// Create each profile's virtual environment with pip, under the target directory.
    Setup {
        /// optax-0.2.2, optax-0.2.3, current, or a requirement file PATH.txt (repeatable;
        /// default: every built-in profile).
        #[arg(long)]
        profile: Vec<String>,
        /// Base interpreter for `-m venv` (default: HARNESS_PYTHON, else python3).
        #[arg(long)]
        python: Option<PathBuf>,
        #[command(flatten)]
        dirs: UpstreamDirs,
    },
    /// Apply the laws to the real libraries; one row per (subject, law).
    Check {
        /// optax-0.2.2, optax-0.2.3, current, or a requirement file PATH.txt (repeatable;
        /// default: every built-in profile).
        #[arg(long)]
        profile: Vec<String>,
        /// Also write the results as JSON to FILE (written atomically; never one of the inputs).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Cap every request's time limit at SECS (1 to 86400).
        #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
        timeout: Option<u64>,
        #[command(flatten)]
        dirs: UpstreamDirs,
    },
    /// Compare the reference with the real library on cases drawn from the laws' strategies;
    /// shrink each mismatch into a golden-v1 file.
    Diff {
        /// Cases per kind.
        #[arg(long, default_value_t = 20)]
        cases: u32,
        /// adam, radam, muon, linesearch, ode or cnf (repeatable; default: all).
        #[arg(long)]
        kind: Vec<String>,
        /// Also write the results as JSON to FILE (written atomically; never one of the inputs).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// The profile whose library is compared.
        #[arg(long, default_value = "current")]
        profile: String,
        /// Seed of the case generator (default: HARNESS_SEED, else a fixed value).
        #[arg(long)]
        seed: Option<u64>,
        /// Where shrunk mismatches are written (default: <target>/upstream-diff).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Time limit of one case, in seconds (1 to 86400).
        #[arg(long, value_name = "SECS", default_value_t = 120,
              value_parser = clap::value_parser!(u64).range(1..=86_400))]
        timeout: u64,
        #[command(flatten)]
        dirs: UpstreamDirs,
    },
}

#[derive(clap::Args)]
struct UpstreamDirs {
    /// Directory holding worker.py and profiles/ (default: HARNESS_UPSTREAM_DIR, else this
    /// repository's harness/upstream).
    #[arg(long, value_name = "DIR")]
    upstream_dir: Option<PathBuf>,
    /// Directory of the venvs (default: HARNESS_UPSTREAM_VENVS, else
    /// <CARGO_TARGET_DIR or target>/upstream).
    #[arg(long, value_name = "DIR")]
    venvs: Option<PathBuf>,
}

/// Bad usage or unreadable input.
struct Usage(String);

type Outcome = Result<bool, Usage>;

/// The files and directories a command reads and writes, checked before any work: every output
/// writable, none an input, none named twice.
fn io_of(cmd: &Cmd) -> Outputs {
    match cmd {
        Cmd::Check {
            json,
            report,
            golden,
            ..
        } => {
            let mut io = Outputs::new().output_opt("--json", json.as_ref());
            if let Some(dir) = report {
                io = io.output_dir("--report", dir).input(
                    golden
                        .clone()
                        .unwrap_or_else(|| crate::report::full::DEFAULT_GOLDEN.into()),
                );
            }
            io
        }
        Cmd::Golden { paths, json, .. } => paths
            .iter()
            .fold(Outputs::new(), |io, p| io.input(p))
            .output_opt("--json", json.as_ref()),
        Cmd::Mutants { json, .. } => Outputs::new().output_opt("--json", json.as_ref()),
        Cmd::Bench { json, svg, .. } => Outputs::new()
            .output_opt("--json", json.as_ref())
            .output_opt("--svg", svg.as_ref()),
        Cmd::InitPeaks { svg, json, .. } => Outputs::new()
            .output_opt("--svg", svg.as_ref())
            .output_opt("--json", json.as_ref()),
        Cmd::TrainCnf {
            data, svg, json, ..
        } => Outputs::new()
            .input(data)
            .output_opt("--svg", svg.as_ref())
            .output_opt("--json", json.as_ref()),
        Cmd::Upstream { cmd } => match cmd {
            UpstreamCmd::Setup { .. } => Outputs::new(),
            UpstreamCmd::Check { json, .. } | UpstreamCmd::Diff { json, .. } => {
                Outputs::new().output_opt("--json", json.as_ref())
            }
        },
    }
}

/// Run the command line `args` (the program name first, as in `std::env::args_os`) and return
/// its exit status. Never exits the process: a parse error prints clap's message and gives 2,
/// `--help` and `--version` print and give 0. Memory figures need the counting allocator, which
/// the calling binary installs ([`crate::install_counting_allocator!`]).
///
/// ```
/// use std::process::ExitCode;
/// assert_eq!(harness::cli::run(["harness", "--version"]), ExitCode::SUCCESS);
/// assert_eq!(harness::cli::run(["harness", "train-cnf", "--steps", "0"]), ExitCode::from(2));
/// ```
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    if let Err(msg) = io_of(&cli.cmd).check() {
        eprintln!("harness: {}", crate::report::escape_control(&msg));
        return ExitCode::from(2);
    }
    let result = match cli.cmd {
        Cmd::Check {
            law,
            cases,
            seed,
            json,
            report: Some(dir),
            golden,
        } => check_report(
            law,
            cases,
            seed,
            json,
            &dir,
            golden.unwrap_or_else(|| crate::report::full::DEFAULT_GOLDEN.into()),
        ),
        Cmd::Check {
            law,
            cases,
            seed,
            json,
            report: None,
            ..
        } => check(law, cases, seed, json),
        Cmd::Golden { paths, face, json } => golden(paths, face, json),
        Cmd::Mutants { only, json } => mutants(only, json),
        Cmd::Bench {
            area,
            quick,
            json,
            svg,
            against,
            timeout,
            dirs,
        } => match (area.as_str(), svg, against) {
            (_, _, None) if dirs.upstream_dir.is_some() || dirs.venvs.is_some() => Err(Usage(
                "--upstream-dir and --venvs locate the worker of --against; \
                     without --against nothing reads them"
                    .into(),
            )),
            (_, _, None) if timeout.is_some() => Err(Usage(
                "--timeout bounds the waits for the worker of --against; \
                     without --against there is no worker"
                    .into(),
            )),
            ("scaling", svg, None) => bench_scaling(quick, json, svg),
            ("scaling", _, Some(_)) => Err(Usage(
                "--against: `bench scaling` has no upstream equivalent; time an area instead"
                    .into(),
            )),
            (_, Some(_), _) => Err(Usage(format!(
                "--svg: only `bench scaling` draws a figure, not `bench {area}`"
            ))),
            (_, None, against) => bench(
                &area,
                quick,
                json,
                against.map(|p| Against {
                    profile: p,
                    dirs,
                    timeout: timeout.map(std::time::Duration::from_secs),
                }),
            ),
        },
        Cmd::InitPeaks {
            layers,
            width,
            hidden,
            dtype,
            seed,
            svg,
            json,
            max_memory,
        } => init_peaks(InitArgs {
            layers,
            width,
            hidden,
            dtype,
            seed,
            svg,
            json,
            max_memory,
        }),
        Cmd::TrainCnf {
            steps,
            data,
            svg,
            json,
            width,
            depth,
            blocks,
            batch,
            lr,
            seed,
            hutchinson,
            checkpoint,
            dtype,
            max_memory,
        } => train_cnf(TrainArgs {
            steps,
            data,
            svg,
            json,
            width,
            depth,
            blocks,
            batch,
            lr,
            seed,
            hutchinson,
            checkpoint,
            dtype,
            max_memory,
        }),
        Cmd::Upstream {
            cmd:
                UpstreamCmd::Setup {
                    profile,
                    python,
                    dirs,
                },
        } => upstream_setup(&profile, python, dirs),
        Cmd::Upstream {
            cmd:
                UpstreamCmd::Check {
                    profile,
                    json,
                    timeout,
                    dirs,
                },
        } => upstream_check(&profile, json, timeout, dirs),
        Cmd::Upstream {
            cmd:
                UpstreamCmd::Diff {
                    cases,
                    kind,
                    json,
                    profile,
                    seed,
                    out,
                    timeout,
                    dirs,
                },
        } => upstream_diff(DiffArgs {
            cases,
            kinds: kind,
            json,
            profile,
            seed,
            out,
            timeout,
            dirs,
        }),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(Usage(msg)) => {
            eprintln!("harness: {}", crate::report::escape_control(&msg));
            ExitCode::from(2)
        }
    }
}

fn save(json: Option<PathBuf>, value: &impl serde::Serialize) -> Result<(), Usage> {
    match json {
        Some(p) => write_json(&p, value).map_err(|e| Usage(format!("--json {e}"))),
        None => Ok(()),
    }
}

/// `--face`: `fast` or `dfdx`.
fn parse_face(s: &str) -> std::result::Result<Face, String> {
    Face::parse(s).ok_or_else(|| format!("`{s}`: the faces are `fast` and `dfdx`"))
}

fn golden(paths: Vec<PathBuf>, face: Face, json: Option<PathBuf>) -> Outcome {
    let files = crate::golden::collect(&paths).map_err(|e| Usage(e.to_string()))?;
    if files.is_empty() {
        return Err(Usage(format!(
            "no golden case (*.json) under {}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let bar = progress();
    bar.set_length(files.len() as u64);
    let mut cases = Vec::new();
    for f in &files {
        bar.set_message(f.display().to_string());
        let case = crate::golden::load(f).map_err(|e| Usage(e.to_string()))?;
        cases.push(crate::golden::replay_face(&case, face).map_err(|e| Usage(e.to_string()))?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let mut t = Table::new(&[
        "case",
        "kind",
        "result",
        "max_abs_err",
        "max_rel_err",
        "detail",
    ]);
    for c in &cases {
        t.row(vec![
            c.name.clone(),
            c.kind.clone(),
            if c.passed { "pass" } else { "FAIL" }.into(),
            num(c.max_abs_err),
            num(c.max_rel_err),
            c.detail.clone(),
        ]);
    }
    print!("{}", t.render());
    let passed = cases.iter().filter(|c| c.passed).count();
    let failed = cases.len() - passed;
    println!("{passed} passed, {failed} failed ({face} face)");
    save(
        json,
        &serde_json::json!({"face": face, "passed": passed, "failed": failed, "cases": cases}),
    )?;
    Ok(failed == 0 && !cases.is_empty())
}

/// A progress bar on stderr when stderr is a terminal, hidden otherwise. It redraws only when
/// advanced (no ticker thread allocating while memory is measured).
fn progress() -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(0);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} [{elapsed}] {wide_msg}")
    {
        bar.set_style(style);
    }
    bar
}

fn law_table(reports: &[crate::laws::LawReport]) {
    let mut t = Table::new(&["law", "family", "cases", "result", "seconds"]);
    for r in reports {
        t.row(vec![
            r.name.clone(),
            r.family.to_string(),
            r.cases.to_string(),
            if r.passed { "pass" } else { "FAIL" }.into(),
            format!("{:.2}", r.seconds),
        ]);
    }
    print!("{}", t.render());
    for r in reports.iter().filter(|r| !r.passed) {
        println!(
            "\n{} failed:\n{}",
            r.name,
            r.counterexample.as_deref().unwrap_or("")
        );
    }
}

fn check_report(
    law: Option<String>,
    cases: Option<u32>,
    seed: Option<u64>,
    json: Option<PathBuf>,
    dir: &std::path::Path,
    golden: PathBuf,
) -> Outcome {
    use crate::report::full::{collect, write, ReportConfig};
    if let Some(p) = &law {
        if !crate::laws::registry()
            .iter()
            .any(|l| l.name.contains(p.as_str()))
        {
            return Err(Usage(format!("--law {p:?}: no law matches")));
        }
    }
    if !golden.is_dir() {
        return Err(Usage(format!(
            "--golden {}: not a directory",
            golden.display()
        )));
    }
    crate::laws::RunConfig::new(cases, seed).map_err(Usage)?;
    let cfg = ReportConfig {
        law,
        cases,
        seed,
        golden: Some(golden),
        ..ReportConfig::full()
    };
    let report = collect(&cfg, &progress());
    law_table(&report.laws);
    let failed = report.laws.iter().filter(|r| !r.passed).count();
    println!("{} passed, {} failed", report.laws.len() - failed, failed);
    let missed = report.mutants.iter().filter(|m| !m.caught).count();
    let gfail = report.golden.iter().filter(|g| !g.result.passed).count();
    println!(
        "mutants: {} caught, {missed} missed; golden: {} passed, {gfail} failed",
        report.mutants.len() - missed,
        report.golden.len() - gfail
    );
    for e in &report.errors {
        println!("error: {e}");
    }
    let files = write(dir, &report).map_err(Usage)?;
    println!("report: {} files in {}", files.len(), dir.display());
    save(json, &serde_json::json!({ "laws": report.laws }))?;
    Ok(report.all_held())
}

fn check(
    law: Option<String>,
    cases: Option<u32>,
    seed: Option<u64>,
    json: Option<PathBuf>,
) -> Outcome {
    let reports = crate::laws::run_all(law.as_deref(), cases, seed).map_err(Usage)?;
    if reports.is_empty() {
        return Err(Usage(format!(
            "--law {:?}: no law matches",
            law.unwrap_or_default()
        )));
    }
    law_table(&reports);
    let failed = reports.iter().filter(|r| !r.passed).count();
    println!("{} passed, {} failed", reports.len() - failed, failed);
    save(json, &serde_json::json!({ "laws": reports }))?;
    Ok(failed == 0)
}

fn mutants(only: Option<String>, json: Option<PathBuf>) -> Outcome {
    let reports = crate::mutants::run_all(only.as_deref());
    if reports.is_empty() {
        return Err(Usage(format!(
            "--only {:?}: no such mutant",
            only.unwrap_or_default()
        )));
    }
    let mut t = Table::new(&["mutant", "incident", "law", "caught", "seconds"]);
    for r in &reports {
        t.row(vec![
            r.name.clone(),
            r.incident.clone(),
            r.law.clone(),
            if r.caught { "caught" } else { "MISSED" }.into(),
            format!("{:.2}", r.seconds),
        ]);
    }
    print!("{}", t.render());
    for r in &reports {
        if let Some(c) = &r.counterexample {
            println!("\n{} — counterexample:\n{c}", r.name);
        }
    }
    let missed = reports.iter().filter(|r| !r.caught).count();
    println!("{} caught, {} missed", reports.len() - missed, missed);
    save(json, &serde_json::json!({ "mutants": reports }))?;
    Ok(missed == 0)
}

/// `bench --against`: the profile whose worker times the upstream figures, where it lives, and
/// the longest wait for it (`None`: [`AGAINST_START_WAIT`] to start, [`AGAINST_FIGURE_WAIT`] a
/// figure).
struct Against {
    profile: String,
    dirs: UpstreamDirs,
    timeout: Option<std::time::Duration>,
}

/// How long `bench --against` waits for its worker to start, without `--timeout` (JAX's import
/// takes seconds, a first run on a cold disk longer).
const AGAINST_START_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// How long `bench --against` waits for one upstream figure, without `--timeout` (a figure
/// includes its compilations: diffrax's CNF step compiles for about 14 s on 2 cores).
const AGAINST_FIGURE_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

fn bench(area: &str, quick: bool, json: Option<PathBuf>, against: Option<Against>) -> Outcome {
    // the profile is resolved before any timing: a wrong name costs nothing
    let timeout = against.as_ref().and_then(|a| a.timeout);
    let against = match against {
        Some(Against {
            profile: name,
            dirs,
            ..
        }) => {
            let loc = crate::upstream::Locations::new(dirs.upstream_dir, dirs.venvs);
            let prof = crate::upstream::Profile::resolve(&name, &loc)
                .map_err(|e| Usage(e.replacen("--profile", "--against", 1)))?;
            // a venv that was never set up is found now, not after minutes of timing
            crate::upstream::worker::WorkerCommand::for_profile(&loc, &prof)
                .check_interpreter()
                .map_err(|e| Usage(format!("--against {name}: {e}")))?;
            Some((loc, prof))
        }
        None => None,
    };
    // what else the machine does while the figures are measured (the upstream worker of
    // `--against`, a child process, would count as another process: read before it starts)
    let mark = crate::bench::LoadMark::now();
    let (mut figures, skipped) = if area == "all" {
        let bar = progress();
        bar.set_length(crate::bench::AREAS.len() as u64);
        let mut started = false;
        let all = crate::bench::all(quick, |area| {
            if started {
                bar.inc(1);
            }
            started = true;
            bar.set_message(format!("bench {area}"));
        });
        bar.finish_and_clear();
        let all = all.map_err(|e| Usage(e.to_string()))?;
        (all.figures, Some(all.skipped))
    } else {
        let figures = crate::bench::run(area, quick).map_err(|e| Usage(e.to_string()))?;
        (figures, None)
    };
    let load = mark.and_then(|m| m.load());
    let mut upstream_ok = true;
    if let Some((loc, prof)) = &against {
        upstream_ok = bench_against(loc, prof, quick, timeout, &mut figures);
    }
    match &skipped {
        Some(_) => print_bench_all(&figures),
        None => {
            let mut t = Table::new(&["figure", "value", "unit"]);
            for f in &figures {
                t.row(vec![f.name.clone(), num(f.value), f.unit.clone()]);
            }
            print!("{}", t.render());
        }
    }
    for s in skipped.iter().flatten() {
        println!("note: {s}");
    }
    let host = crate::bench::Host::this();
    let moved = crate::bench::moved_limits(&figures);
    let bracketed = figures.iter().filter(|f| f.bracket.is_some()).count();
    print_host(&host, load.as_ref(), bracketed, &moved);
    if against.is_some() {
        print_against(&figures);
    }
    let mut doc = serde_json::json!({"area": area, "host": host, "host_load": load,
        "figures": figures, "moved_limits": moved});
    if let Some(s) = &skipped {
        doc["skipped"] = serde_json::json!(s);
    }
    save(json, &doc)?;
    Ok(upstream_ok)
}

/// `bench scaling`: every kernel over its sizes, the table on stdout, then `--json` and `--svg`.
fn bench_scaling(quick: bool, json: Option<PathBuf>, svg: Option<PathBuf>) -> Outcome {
    use crate::bench::scaling::{self, seconds_label, size_label};
    let bar = progress();
    let started = std::time::Instant::now();
    let s = scaling::run(quick, |k| bar.set_message(format!("bench scaling: {k}")));
    bar.finish_and_clear();
    let s = s.map_err(|e| Usage(e.to_string()))?;
    let mut t = Table::new(&["kernel", "size", "unit", "time", "limit time", "ratio"]);
    for k in &s.kernels {
        for p in &k.points {
            t.row(vec![
                k.name.clone(),
                size_label(p.size),
                k.size_unit.clone(),
                seconds_label(p.seconds),
                p.limit_seconds
                    .map(seconds_label)
                    .unwrap_or_else(|| "-".into()),
                p.ratio
                    .map(|r| format!("{r:.3}"))
                    .unwrap_or_else(|| "-".into()),
            ]);
        }
    }
    print!("{}", t.render());
    let mut f = Table::new(&[
        "kernel",
        "exponent (all sizes)",
        "exponent (top half)",
        "limit",
    ]);
    for k in &s.kernels {
        let fit = |p: Option<scaling::PowerFit>| {
            p.map_or("-".into(), |p| {
                format!(
                    "{:.3} over {}..{}",
                    p.exponent,
                    size_label(p.size_min),
                    size_label(p.size_max)
                )
            })
        };
        f.row(vec![
            k.name.clone(),
            fit(k.fit_full),
            fit(k.fit_top_half),
            k.limit_source.clone(),
        ]);
    }
    print!("{}", f.render());
    println!(
        "time: median seconds per call; ratio: limit time / time (above 1: faster than the \
         limit measured at the largest size, e.g. in cache); exponent b of time = a size^b, \
         least squares on log-log; {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let bracketed = s
        .kernels
        .iter()
        .filter(|k| k.limit_bracket.is_some())
        .count();
    print_host(&s.host, s.host_load.as_ref(), bracketed, &s.moved_limits);
    save(json, &s)?;
    if let Some(path) = &svg {
        crate::report::output::write_atomic(path, scaling::svg(&s).as_bytes())
            .map_err(|e| Usage(format!("--svg {}: {e}", path.display())))?;
        println!("wrote {}", path.display());
    }
    Ok(true)
}

/// Time the upstream equivalents of `figures` with the worker of `prof`, waiting at most
/// `timeout` for it to start and for each figure (false when the worker could not be started,
/// failed or did not answer in time; the figures measured so far are kept).
fn bench_against(
    loc: &crate::upstream::Locations,
    prof: &crate::upstream::Profile,
    quick: bool,
    timeout: Option<std::time::Duration>,
    figures: &mut [crate::bench::Figure],
) -> bool {
    use crate::upstream::worker::{Worker, WorkerCommand};
    use std::time::Duration;
    let cmd = WorkerCommand::for_profile(loc, prof);
    let mut worker = match Worker::spawn(&cmd).and_then(|mut w| {
        w.hello(timeout.unwrap_or(AGAINST_START_WAIT))?;
        Ok(w)
    }) {
        Ok(w) => w,
        Err(e) => {
            println!("bench --against {}: {e}", prof.name);
            return false;
        }
    };
    let bar = progress();
    let reps = if quick { 3 } else { 11 };
    let r = crate::upstream::against::attach(
        &mut worker,
        figures,
        reps,
        timeout.unwrap_or(AGAINST_FIGURE_WAIT),
        &mut |name| bar.set_message(format!("{} {name}", prof.name)),
    );
    bar.finish_and_clear();
    let _ = worker.shutdown(Duration::from_secs(10));
    match r {
        Ok(()) => true,
        Err(e) => {
            println!("bench --against {}: {e}", prof.name);
            false
        }
    }
}

/// The side-by-side table of `--against`.
fn print_against(figures: &[crate::bench::Figure]) {
    let mut t = Table::new(&[
        "figure",
        "ours",
        "upstream",
        "unit",
        "upstream compile s",
        "ours vs upstream",
        "upstream work",
    ]);
    for f in figures.iter().filter(|f| f.upstream_note.is_some()) {
        t.row(vec![
            f.name.clone(),
            num(f.value),
            f.upstream.map(num).unwrap_or_else(|| "-".into()),
            f.unit.clone(),
            f.upstream_compile_s
                .map(|s| format!("{s:.2}"))
                .unwrap_or_else(|| "-".into()),
            f.ratio_to_upstream
                .map(|r| format!("{r:.2}"))
                .unwrap_or_else(|| "-".into()),
            f.upstream_note.clone().unwrap_or_default(),
        ]);
    }
    print!("{}", t.render());
    println!("ours vs upstream: above 1 means ours is faster (rates: ours / upstream; times: upstream / ours)");
}

/// The machine the figures were measured on, what else it did meanwhile, and whether the limits
/// read on both sides of their figures held still.
fn print_host(
    host: &crate::bench::Host,
    load: Option<&crate::bench::HostLoad>,
    bracketed: usize,
    moved: &[crate::bench::MovedLimit],
) {
    println!("host: {host}");
    if let Some(load) = load {
        println!("{load}");
    }
    if let Some(line) = crate::bench::moved_summary(bracketed, moved) {
        println!("{line}");
    }
}

/// Every area in one table, each figure against the limit measured in the same run.
fn print_bench_all(figures: &[crate::bench::Figure]) {
    let mut t = Table::new(&[
        "area",
        "figure",
        "value",
        "unit",
        "limit",
        "ratio",
        "limit from",
    ]);
    for f in figures {
        t.row(vec![
            f.area.clone().unwrap_or_default(),
            f.name.clone(),
            num(f.value),
            f.unit.clone(),
            f.limit.map(num).unwrap_or_else(|| "-".into()),
            f.ratio
                .map(|r| format!("{r:.3}"))
                .unwrap_or_else(|| "-".into()),
            f.limit_source.clone().unwrap_or_default(),
        ]);
    }
    print!("{}", t.render());
    println!(
        "ratio: fraction of the limit reached (rate / limit, or ideal time / time); above {} \
         the limit does not bound and is reported as BROKEN LIMIT",
        crate::bench::BROKEN_LIMIT_RATIO
    );
}

/// The arguments of `init-peaks`.
struct InitArgs {
    layers: usize,
    width: usize,
    hidden: usize,
    dtype: String,
    seed: u64,
    svg: Option<PathBuf>,
    json: Option<PathBuf>,
    max_memory: Option<String>,
}

fn init_peaks(a: InitArgs) -> Outcome {
    let InitArgs {
        layers,
        width,
        hidden,
        dtype,
        seed,
        svg,
        json,
        max_memory,
    } = a;
    let dtype = dtype.as_str();
    use crate::backend::DType;
    use crate::laws::stack::{measure_peaks, Reference};
    use crate::report::svg::{line_chart, Series};
    use crate::stack::StackConfig;
    let dt = DType::parse(dtype)
        .filter(|d| *d != DType::I32)
        .ok_or_else(|| Usage(format!("--dtype {dtype:?}: expected f16, f32 or f64")))?;
    let cfg = StackConfig::new(layers, width, hidden, dt)
        .map_err(|e| Usage(format!("--layers/--width/--hidden: {e}")))?;
    let budget = crate::budget::Budget::resolve(max_memory.as_deref()).map_err(Usage)?;
    crate::budget::admit_init_peaks(&budget, &cfg).map_err(Usage)?;
    let mut timelines = Vec::new();
    let rows = {
        let _g = crate::probe::exclusive();
        measure_peaks(
            &Reference,
            &cfg,
            seed,
            svg.is_some().then_some(&mut timelines),
        )
    };
    let rows = match rows {
        Ok(r) => r,
        Err(e) => {
            println!("init-peaks failed: {e}");
            return Ok(false);
        }
    };
    let fin = cfg.final_bytes();
    println!(
        "{layers} layers of {width}-{hidden}-{width} in {dt}: P = {} parameters per layer, final N*P*s = {fin} bytes ({:.1} MiB)",
        cfg.params_per_layer(),
        fin as f64 / (1 << 20) as f64
    );
    let mut t = Table::new(&[
        "strategy",
        "peak_bytes",
        "ratio",
        "bound_bytes",
        "bound_ratio",
        "bound",
        "within",
        "checksum",
    ]);
    for r in &rows {
        t.row(vec![
            r.name.clone(),
            r.peak_bytes.to_string(),
            format!("{:.4}", r.ratio),
            r.bound_bytes.to_string(),
            format!("{:.4}", r.bound_ratio),
            r.formula.clone(),
            if r.within_bound { "yes" } else { "NO" }.into(),
            r.checksum.clone(),
        ]);
    }
    print!("{}", t.render());
    let identical = rows.iter().all(|r| r.checksum == rows[0].checksum);
    println!(
        "models {}",
        if identical {
            "bit-identical across strategies"
        } else {
            "DIFFER across strategies"
        }
    );
    if let Some(path) = &svg {
        let series: Vec<Series> = timelines
            .iter()
            .map(|(s, tl)| {
                let n = tl.samples().len().max(2) - 1;
                Series {
                    name: s.name().to_string(),
                    points: tl
                        .samples()
                        .iter()
                        .enumerate()
                        .map(|(i, x)| (i as f64 / n as f64, x.live_bytes as f64 / (1 << 20) as f64))
                        .collect(),
                }
            })
            .collect();
        let title = format!(
            "live bytes during init: {layers} x {width}-{hidden}-{width} {dt} (final {:.0} MiB)",
            fin as f64 / (1 << 20) as f64
        );
        let doc = line_chart(
            &title,
            "build progress (sample points)",
            "MiB above baseline",
            &series,
        );
        std::fs::write(path, doc).map_err(|e| Usage(format!("{}: {e}", path.display())))?;
    }
    save(
        json,
        &serde_json::json!({
            "layers": layers, "width": width, "hidden": hidden, "dtype": dt,
            "final_bytes": fin, "strategies": rows, "bit_identical": identical,
        }),
    )?;
    Ok(identical && rows.iter().all(|r| r.within_bound))
}

struct TrainArgs {
    steps: usize,
    data: String,
    svg: Option<PathBuf>,
    json: Option<PathBuf>,
    width: usize,
    depth: usize,
    blocks: usize,
    batch: usize,
    lr: f64,
    seed: u64,
    hutchinson: bool,
    checkpoint: bool,
    dtype: String,
    max_memory: Option<String>,
}

/// `train-cnf`: the one place its `--dtype` picks the float type the trainer computes in.
fn train_cnf(a: TrainArgs) -> Outcome {
    use crate::backend::DType;
    match DType::parse(&a.dtype) {
        Some(DType::F32) => train_cnf_in::<f32>(a),
        Some(DType::F64) => train_cnf_in::<f64>(a),
        _ => Err(Usage(format!("--dtype {:?}: expected f32 or f64", a.dtype))),
    }
}

fn train_cnf_in<A: crate::backend::Real>(a: TrainArgs) -> Outcome {
    use crate::cnf::data::Dataset;
    use crate::cnf::train::{TrainConfig, Trainer};
    use crate::cnf::{CnfConfig, Probe, TraceEstimator};
    use crate::ode::grad::GradMode;
    use crate::report::svg::{heatmap, line_chart, side_by_side, Series};
    use crate::train::{density_grid, train_for};
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    if a.steps == 0 {
        return Err(Usage(
            "--steps 0: nothing would be trained; give at least 1".into(),
        ));
    }
    if a.steps > i32::MAX as usize {
        return Err(Usage(format!(
            "--steps {}: the step counter is int32 (as diffrax's example), at most {}",
            a.steps,
            i32::MAX
        )));
    }
    let cfg = CnfConfig {
        width: a.width,
        depth: a.depth,
        blocks: a.blocks,
        trace: if a.hutchinson {
            TraceEstimator::Hutchinson(Probe::Gaussian)
        } else {
            TraceEstimator::Exact
        },
        ..CnfConfig::default()
    };
    let tc = TrainConfig {
        batch: a.batch,
        learning_rate: a.lr,
        seed: a.seed,
        grad: if a.checkpoint {
            GradMode::Checkpointed { checkpoints: None }
        } else {
            GradMode::FullTape
        },
        ..TrainConfig::default()
    };
    cfg.validate()
        .and_then(|()| tc.validate())
        .map_err(|e| Usage(format!("train-cnf: {e}")))?;
    let budget = crate::budget::Budget::resolve(a.max_memory.as_deref()).map_err(Usage)?;
    // the image (if any) is weighed from its header before it is read
    let image = Dataset::footprint(&a.data).map_err(|e| Usage(format!("--data: {e}")))?;
    budget
        .admit(
            &format!(
                "training width {} depth {} with {} blocks on batches of {}{}",
                a.width,
                a.depth,
                a.blocks,
                a.batch,
                if image > 0 { " on that image" } else { "" }
            ),
            crate::budget::train_estimate(&cfg, a.batch) + image,
        )
        .map_err(Usage)?;
    let data = Dataset::parse(&a.data).map_err(|e| Usage(format!("--data: {e}")))?;
    let mut trainer =
        Trainer::<A>::typed(cfg, tc, data).map_err(|e| Usage(format!("train-cnf: {e}")))?;
    let state = trainer
        .init()
        .map_err(|e| Usage(format!("train-cnf: {e}")))?;
    let bar = ProgressBar::new(a.steps as u64);
    bar.set_draw_target(ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} steps, {per_sec}, eta {eta} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let outcome = train_for(&mut trainer, state, a.steps, |_, loss| {
        bar.set_message(format!("loss {loss:.4}"));
        bar.inc(1);
    });
    bar.finish_and_clear();
    let (report, state) = match outcome {
        Ok(r) => r,
        Err(e) => {
            println!("train-cnf failed: {e}");
            return Ok(false);
        }
    };
    println!(
        "trained {} steps on {} ({} blocks, width {}, depth {}, batch {}): loss {} -> {}, {} trace(s), live bytes {} after step 1, {} after step {}, {:.3} s/step",
        report.steps,
        trainer.data.name(),
        cfg.blocks,
        cfg.width,
        cfg.depth,
        tc.batch,
        report.loss.first().map_or("-".into(), |l| format!("{l:.4}")),
        report.loss.last().map_or("-".into(), |l| format!("{l:.4}")),
        report.traces,
        report.live_bytes_first,
        report.live_bytes_last,
        report.steps,
        report.seconds_per_step
    );
    if let Some(path) = &a.svg {
        // the plot in f64: the trained weights and the data points widened (exact)
        let params = trainer
            .params_of(&state)
            .map_err(|e| Usage(format!("train-cnf: {e}")))?
            .cast::<f64>();
        let mut drawn = vec![A::zero(); 2 * 1000];
        trainer.batch_of(u64::MAX, &mut drawn);
        let pts: Vec<f64> = drawn.iter().map(|v| v.as_f64()).collect();
        let pairs: Vec<(f64, f64)> = pts.chunks(2).map(|p| (p[0], p[1])).collect();
        // a square window around the data with a 15% margin
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in &pts {
            lo = lo.min(*v);
            hi = hi.max(*v);
        }
        let m = 0.15 * (hi - lo);
        let extent = (lo - m, hi + m, lo - m, hi + m);
        let grid =
            density_grid(&params, extent, 48, 768).map_err(|e| Usage(format!("train-cnf: {e}")))?;
        let loss: Vec<(f64, f64)> = report
            .loss
            .iter()
            .enumerate()
            .map(|(i, &l)| ((i + 1) as f64, l))
            .collect();
        let doc = side_by_side(&[
            heatmap(
                &format!("learned density, {} (data in white)", trainer.data.name()),
                &grid,
                &pairs,
                440.0,
            ),
            line_chart(
                "training loss (mean negative log-likelihood)",
                "step",
                "loss",
                &[Series {
                    name: "loss".into(),
                    points: loss,
                }],
            ),
        ]);
        std::fs::write(path, doc).map_err(|e| Usage(format!("--svg {}: {e}", path.display())))?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = &a.json {
        write_json(path, &report).map_err(|e| Usage(format!("--json {e}")))?;
    }
    Ok(true)
}

fn upstream_setup(profiles: &[String], python: Option<PathBuf>, dirs: UpstreamDirs) -> Outcome {
    use crate::upstream::{setup, Locations, Profile};
    let loc = Locations::new(dirs.upstream_dir, dirs.venvs);
    let profiles = Profile::resolve_all(profiles, &loc).map_err(Usage)?;
    let python = setup::base_python(python);
    if profiles
        .iter()
        .any(|p| !setup::is_current(&loc.venv(p), &p.requirements))
    {
        setup::python_version(&python).map_err(Usage)?;
    }
    let mut ok = true;
    for p in &profiles {
        match setup::setup(p, &loc, &python, true) {
            Ok(o) => {
                if let Some(w) = &o.warning {
                    eprintln!("harness: warning: {w}");
                }
                if o.skipped {
                    println!(
                        "{}: up to date ({}, installed from {})",
                        o.profile,
                        o.venv.display(),
                        p.requirements.display()
                    );
                } else {
                    println!(
                        "{}: installed in {:.1} s into {} (pip check passed)",
                        o.profile,
                        o.seconds,
                        o.venv.display()
                    );
                }
            }
            Err(e) => {
                eprintln!("harness: {e}");
                ok = false;
            }
        }
    }
    Ok(ok)
}

fn upstream_check(
    profiles: &[String],
    json: Option<PathBuf>,
    timeout: Option<u64>,
    dirs: UpstreamDirs,
) -> Outcome {
    use crate::upstream::check::{self, CheckOptions};
    use crate::upstream::{Locations, Profile};
    let loc = Locations::new(dirs.upstream_dir, dirs.venvs);
    let profiles = Profile::resolve_all(profiles, &loc).map_err(Usage)?;
    let opts = CheckOptions {
        timeout: timeout.map(std::time::Duration::from_secs),
        ..CheckOptions::default()
    };
    let bar = progress();
    let planned: usize = profiles.iter().map(|p| check::plan(p).len()).sum();
    bar.set_length(planned as u64);
    let mut first = true;
    let report = check::run(&profiles, &loc, &opts, &mut |what| {
        if !first {
            bar.inc(1);
        }
        first = false;
        bar.set_message(what.to_string());
    });
    bar.finish_and_clear();
    for p in &report.profiles {
        let versions = p.hello.as_ref().map_or_else(
            || "worker did not start".to_string(),
            |h| {
                let v = |k: &str| {
                    h.packages
                        .get(k)
                        .cloned()
                        .flatten()
                        .unwrap_or_else(|| "-".into())
                };
                format!(
                    "Python {}, jax {}, optax {}, diffrax {}, equinox {}, {} CPU devices",
                    h.python,
                    v("jax"),
                    v("optax"),
                    v("diffrax"),
                    v("equinox"),
                    h.devices
                )
            },
        );
        println!(
            "profile {}: {versions}; worker up in {}; {:.1} s in all",
            p.name,
            p.startup_seconds
                .map_or_else(|| "-".into(), |s| format!("{s:.1} s")),
            p.seconds
        );
        for n in &p.notes {
            println!("  note: {n}");
        }
    }
    let mut t = Table::new(&["subject", "law", "verdict", "expected", "seconds"]);
    for r in &report.results {
        t.row(vec![
            r.subject.clone(),
            r.law.clone(),
            r.verdict.to_string(),
            r.expected.map_or_else(|| "-".into(), |e| e.to_string()),
            format!("{:.1}", r.seconds),
        ]);
    }
    print!("{}", t.render());
    println!("\nevidence:");
    for r in &report.results {
        println!("  {} {} ({}): {}", r.subject, r.law, r.verdict, r.evidence);
    }
    let differing = report.differing();
    for r in &differing {
        println!(
            "differs from expectation: {} {}: expected {}, got {} ({})",
            r.subject,
            r.law,
            r.expected
                .map_or_else(|| "no error".into(), |e| e.to_string()),
            r.verdict,
            r.incident
        );
    }
    let errors = report
        .results
        .iter()
        .filter(|r| r.verdict == crate::upstream::check::Verdict::Error)
        .count();
    println!(
        "{} rows: {} as expected, {} differ ({} errors); {:.1} s",
        report.results.len(),
        report.results.len() - differing.len(),
        differing.len(),
        errors,
        report.seconds
    );
    save(json, &report)?;
    Ok(report.all_as_expected())
}

struct DiffArgs {
    cases: u32,
    kinds: Vec<String>,
    json: Option<PathBuf>,
    profile: String,
    seed: Option<u64>,
    out: Option<PathBuf>,
    timeout: u64,
    dirs: UpstreamDirs,
}

fn upstream_diff(a: DiffArgs) -> Outcome {
    use crate::upstream::diff::{self, DiffKind, DiffOptions};
    use crate::upstream::worker::{Worker, WorkerCommand};
    use crate::upstream::{profile, Locations, Profile};
    use std::time::Duration;
    if a.cases == 0 {
        return Err(Usage("--cases 0: must be at least 1 case per kind".into()));
    }
    let loc = Locations::new(a.dirs.upstream_dir, a.dirs.venvs);
    let prof = Profile::resolve(&a.profile, &loc).map_err(Usage)?;
    let kinds = if a.kinds.is_empty() {
        DiffKind::ALL.to_vec()
    } else {
        a.kinds
            .iter()
            .map(|k| {
                DiffKind::parse(k).ok_or_else(|| {
                    let names: Vec<_> = DiffKind::ALL.iter().map(|k| k.name()).collect();
                    Usage(format!("--kind {k}: the kinds are {}", names.join(", ")))
                })
            })
            .collect::<Result<Vec<_>, _>>()?
    };
    let opts = DiffOptions {
        cases: a.cases,
        kinds,
        seed: crate::laws::RunConfig::new(None, a.seed)
            .map_err(Usage)?
            .seed,
        out_dir: a
            .out
            .unwrap_or_else(|| profile::target_dir().join("upstream-diff")),
        timeout: Duration::from_secs(a.timeout),
        max_shrink: 200,
    };
    let cmd = WorkerCommand::for_profile(&loc, &prof);
    let started = (|| {
        let mut w = Worker::spawn(&cmd)?;
        let hello = w.hello(Duration::from_secs(120))?;
        Ok::<_, crate::Error>((w, hello))
    })();
    let (mut worker, hello) = match started {
        Ok(x) => x,
        Err(e) => {
            println!("upstream diff: {e}");
            return Ok(false);
        }
    };
    let v = |k: &str| {
        hello
            .packages
            .get(k)
            .cloned()
            .flatten()
            .unwrap_or_else(|| "-".into())
    };
    println!(
        "profile {}: jax {}, optax {}; seed {}",
        prof.name,
        v("jax"),
        v("optax"),
        opts.seed
    );
    let bar = progress();
    bar.set_length(opts.cases as u64 * opts.kinds.len() as u64);
    let mut first = true;
    let report = diff::run(&mut worker, &opts, &mut |what| {
        if !first {
            bar.inc(1);
        }
        first = false;
        bar.set_message(what.to_string());
    });
    bar.finish_and_clear();
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            println!("upstream diff stopped: {e}");
            return Ok(false);
        }
    };
    for m in &report.mismatches {
        println!(
            "{} {} {} (shrunk in {} candidates): {}\n  drawn: {}\n  written: {}",
            if m.explained.is_some() {
                "explained mismatch"
            } else {
                "MISMATCH"
            },
            m.kind,
            m.case,
            m.shrink_steps,
            m.detail,
            m.drawn,
            m.golden_file.as_deref().unwrap_or("(not written)")
        );
        if let Some(why) = &m.explained {
            println!("  {why}");
        }
    }
    let explained = report
        .mismatches
        .iter()
        .filter(|m| m.explained.is_some())
        .count();
    for e in &report.library_errors {
        println!("library error: {e}");
    }
    println!(
        "{} cases ({}): {} mismatches ({} explained by the library's own rounding), {} rejected by the library; {:.1} s",
        report.cases,
        report
            .per_kind
            .iter()
            .map(|(k, n, rejected)| format!("{k} {n}, {rejected} rejected"))
            .collect::<Vec<_>>()
            .join("; "),
        report.mismatches.len(),
        explained,
        report.library_error_count,
        report.seconds
    );
    let uncompared = report.uncompared_kinds();
    if !uncompared.is_empty() {
        println!(
            "nothing compared for {}: the library rejected every case",
            uncompared.join(", ")
        );
    }
    save(a.json, &report)?;
    Ok(report.passed())
}
