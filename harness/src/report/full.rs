//! `harness check --report DIR`: the laws, the mutants, the golden replays and the memory, trace
//! and init-peak measurements in one directory — `check.json`, `summary.md` and SVG plots.
//!
//! [`collect`] runs everything (laws first, then mutants and golden, then the memory
//! measurements, sequentially and under [`crate::probe::exclusive`]); [`write()`] renders a
//! [`Report`] into a directory. [`ReportConfig::full`] is what the CLI runs;
//! [`ReportConfig::tiny`] is small enough for a test.

use super::probes::{self, StepConfig, StepRun};
use super::svg::{bar_chart, line_chart, Bars, Scale, Series};
use crate::laws::stack::{measure_peaks, PeakRow, Reference};
use crate::laws::{self, LawReport, RunConfig};
use crate::mutants::{self, MutantReport, VmapFp32};
use crate::stack::StackConfig;
use indicatif::ProgressBar;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What the report runs, and how big.
#[derive(Debug, Clone)]
pub struct ReportConfig {
    /// Laws whose name contains this (all when `None`), as `check --law`.
    pub law: Option<String>,
    /// Cases per law (`check --cases`; `PROPTEST_CASES` otherwise).
    pub cases: Option<u32>,
    /// Seed (`check --seed`; `HARNESS_SEED` otherwise).
    pub seed: Option<u64>,
    /// Run the mutants (all of them, or the one named by `mutant_only`).
    pub mutants: bool,
    /// Run only the mutant of this name (with `mutants`), instead of all.
    pub mutant_only: Option<String>,
    /// Directory of golden-v1 cases to replay (none when `None`).
    pub golden: Option<PathBuf>,
    /// Sizes of the optimizer step runs.
    pub steps: StepConfig,
    /// The stacked model whose init peaks are measured (reference and `stack-vmap-fp32`).
    pub stack: StackConfig,
}

/// `fixtures/golden` of this workspace (found from the crate's directory at compile time).
pub const DEFAULT_GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/golden");

impl ReportConfig {
    /// The CLI's report: every law and mutant, `fixtures/golden`, 50 steps of 4,096 parameters
    /// (Muon: 64x64; line search: 1,024-dimensional Rosenbrock; CNF: width 16, batch 64), init
    /// of 8 layers of 256-1024-256 in f16.
    pub fn full() -> Self {
        Self {
            law: None,
            cases: None,
            seed: None,
            mutants: true,
            mutant_only: None,
            golden: Some(PathBuf::from(DEFAULT_GOLDEN)),
            steps: StepConfig {
                steps: 50,
                elements: 4096,
                muon_side: 64,
                linesearch_dim: 1024,
                cnf_width: 16,
                cnf_batch: 64,
            },
            stack: StackConfig::new(8, 256, 1024, crate::backend::DType::F16)
                .expect("valid stack size"),
        }
    }
    /// A quick report for tests: laws matching `law` with 4 cases, one mutant, the golden
    /// directory if given, 6 steps of small trees, a 2-layer 16-64-16 init.
    pub fn tiny(law: &str) -> Self {
        Self {
            law: Some(law.into()),
            cases: Some(4),
            mutants: true,
            mutant_only: Some("radam-cond-leak".into()),
            golden: None,
            steps: StepConfig {
                steps: 6,
                elements: 64,
                muon_side: 8,
                linesearch_dim: 4,
                cnf_width: 4,
                cnf_batch: 8,
            },
            stack: StackConfig::new(2, 16, 64, crate::backend::DType::F16)
                .expect("valid stack size"),
            ..Self::full()
        }
    }
}

/// One golden case: its result and its errors as multiples of the tolerance.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GoldenRow {
    #[serde(flatten)]
    /// The case's identity and verdict.
    pub result: crate::golden::CaseResult,
    /// Numbers compared (integer counts excluded).
    pub compared: usize,
    /// Largest `|got - want| / (atol + rtol*|want|)`.
    pub max_err_over_tol: f64,
}

/// Histogram bins of error/tolerance: exactly zero, then decades `[10^k, 10^(k+1))` from
/// `10^GOLDEN_MIN_DECADE`, with everything below in the first decade bin and everything at or
/// above 1 (a failure) in the last.
pub const GOLDEN_MIN_DECADE: i32 = -8;

/// Labels of the histogram's bins.
pub fn golden_bins() -> Vec<String> {
    let mut v = vec!["0 (exact)".to_string()];
    v.push(format!("< 1e{}", GOLDEN_MIN_DECADE + 1));
    for k in GOLDEN_MIN_DECADE + 1..0 {
        v.push(format!("[1e{k}, 1e{})", k + 1));
    }
    v.push(">= 1 (fail)".into());
    v
}

/// The bin of one ratio (see [`golden_bins`]).
pub fn golden_bin(r: f64) -> usize {
    let last = (-GOLDEN_MIN_DECADE + 1) as usize;
    if r == 0.0 {
        0
    } else if r >= 1.0 || r.is_nan() {
        last
    } else {
        let k = r.log10().floor() as i32;
        ((k - GOLDEN_MIN_DECADE).max(0) + 1) as usize
    }
}

/// The init-peak measurement at the report's size.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InitPeaks {
    /// Layer count `N`.
    pub layers: usize,
    /// Width `D`.
    pub width: usize,
    /// Hidden size `H`.
    pub hidden: usize,
    /// Parameter dtype.
    pub dtype: crate::backend::DType,
    /// Bytes of the finished stack, `N*P*s`.
    pub final_bytes: usize,
    /// One row per strategy of the reference build.
    pub strategies: Vec<PeakRow>,
    /// The same measurement with `stack-vmap-fp32` standing in for the reference.
    pub mutant: Vec<PeakRow>,
    /// Live bytes during each reference build (MiB, sampled at the builder's observation points).
    #[serde(skip)]
    pub timelines: Vec<(String, Vec<f64>)>,
}

/// Everything the report shows (serialised as `check.json`; `laws` is `check --json`'s array).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// One row per law run.
    pub laws: Vec<LawReport>,
    /// One row per mutant run (empty unless the report ran the mutants).
    pub mutants: Vec<MutantReport>,
    /// One row per golden case replayed.
    pub golden: Vec<GoldenRow>,
    /// Counts per bin of [`golden_bins`], per golden kind.
    pub golden_histogram: Vec<(String, Vec<usize>)>,
    /// Sizes of the optimizer step runs.
    pub step_config: StepConfig,
    /// Memory and time of each optimizer step run.
    pub memory: Vec<StepRun>,
    /// The init-peak measurement, when it ran.
    pub init_peaks: Option<InitPeaks>,
    /// Problems met while measuring (an optimizer that errored, an unreadable golden file).
    pub errors: Vec<String>,
}

impl Report {
    /// Every law passed, every mutant was caught, every golden case passed, nothing errored.
    pub fn all_held(&self) -> bool {
        self.laws.iter().all(|l| l.passed)
            && self.mutants.iter().all(|m| m.caught)
            && self.golden.iter().all(|g| g.result.passed)
            && self.errors.is_empty()
    }
}

/// Run everything `cfg` asks for, advancing `bar` (length and message are set here).
pub fn collect(cfg: &ReportConfig, bar: &ProgressBar) -> Report {
    let mut errors = Vec::new();
    // An invalid case count or seed runs no law (the CLI refuses it before getting here).
    let run_cfg = RunConfig::new(cfg.cases, cfg.seed).map_err(|e| errors.push(e));
    let registry: Vec<_> = laws::registry()
        .into_iter()
        .filter(|l| cfg.law.as_deref().is_none_or(|p| l.name.contains(p)))
        .filter(|_| run_cfg.is_ok())
        .collect();
    let muts: Vec<_> = if cfg.mutants {
        mutants::registry()
            .into_iter()
            .filter(|m| cfg.mutant_only.as_deref().is_none_or(|o| m.name == o))
            .collect()
    } else {
        vec![]
    };
    let golden_files = match &cfg.golden {
        Some(dir) => crate::golden::collect(std::slice::from_ref(dir)).unwrap_or_else(|e| {
            errors.push(e.to_string());
            vec![]
        }),
        None => vec![],
    };
    let total = registry.len() + muts.len() + golden_files.len() + probes::RUNS.len() + 2;
    bar.set_length(total as u64);
    let mut report = Report {
        laws: Vec::new(),
        mutants: Vec::new(),
        golden: Vec::new(),
        golden_histogram: Vec::new(),
        step_config: cfg.steps,
        memory: Vec::new(),
        init_peaks: None,
        errors,
    };
    for law in &registry {
        bar.set_message(format!("law {}", law.name));
        if let Ok(run_cfg) = run_cfg {
            report.laws.push(laws::run(law, run_cfg));
        }
        bar.inc(1);
    }
    for m in &muts {
        bar.set_message(format!("mutant {}", m.name));
        report.mutants.push(mutants::run(m));
        bar.inc(1);
    }
    let mut hist: Vec<(String, Vec<usize>)> = Vec::new();
    for f in &golden_files {
        let short = f.file_name().map_or(f.display().to_string(), |n| {
            n.to_string_lossy().into_owned()
        });
        bar.set_message(format!("golden {short}"));
        match crate::golden::load(f).and_then(|c| crate::golden::replay(&c)) {
            Ok(r) => {
                let pos = match hist.iter().position(|(k, _)| *k == r.kind) {
                    Some(p) => p,
                    None => {
                        hist.push((r.kind.clone(), vec![0; golden_bins().len()]));
                        hist.len() - 1
                    }
                };
                for &x in &r.error_ratios {
                    hist[pos].1[golden_bin(x)] += 1;
                }
                report.golden.push(GoldenRow {
                    compared: r.error_ratios.len(),
                    max_err_over_tol: r.error_ratios.iter().copied().fold(0.0, f64::max),
                    result: r,
                });
            }
            Err(e) => report.errors.push(e.to_string()),
        }
        bar.inc(1);
    }
    report.golden_histogram = hist;
    // Memory: nothing else runs from here on.
    let _g = crate::probe::exclusive();
    match probes::run_all(&cfg.steps, |name| {
        bar.set_message(format!("memory {name}"));
        bar.inc(1);
    }) {
        Ok(runs) => report.memory = runs,
        Err(e) => report.errors.push(format!("memory runs: {e}")),
    }
    bar.set_message("init peaks");
    let mut timelines = Vec::new();
    let peaks = measure_peaks(&Reference, &cfg.stack, 0, Some(&mut timelines));
    bar.inc(1);
    bar.set_message("init peaks (stack-vmap-fp32)");
    let mutant = measure_peaks(&VmapFp32, &cfg.stack, 0, None);
    bar.inc(1);
    match (peaks, mutant) {
        (Ok(strategies), Ok(mutant)) => {
            let s = &cfg.stack;
            report.init_peaks = Some(InitPeaks {
                layers: s.layers(),
                width: s.width(),
                hidden: s.hidden(),
                dtype: s.dtype(),
                final_bytes: s.final_bytes(),
                strategies,
                mutant,
                timelines: timelines
                    .iter()
                    .map(|(st, tl)| {
                        let mib = tl
                            .samples()
                            .iter()
                            .map(|x| x.live_bytes as f64 / (1 << 20) as f64)
                            .collect();
                        (st.name().to_string(), mib)
                    })
                    .collect(),
            })
        }
        (Err(e), _) | (_, Err(e)) => report.errors.push(format!("init peaks: {e}")),
    }
    bar.finish_and_clear();
    report
}

/// Files [`write()`] produces besides the memory charts (one `memory-<family>.svg` per family).
pub const FILES: [&str; 6] = [
    "check.json",
    "summary.md",
    "traces.svg",
    "init-peaks.svg",
    "init-live.svg",
    "golden-errors.svg",
];

fn kib(b: f64) -> f64 {
    b / 1024.0
}

fn families(report: &Report) -> Vec<&'static str> {
    let mut f: Vec<&'static str> = report.memory.iter().map(|r| r.family).collect();
    f.dedup();
    f
}

fn save(dir: &Path, name: &str, text: &str, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let p = dir.join(name);
    super::output::write_atomic(&p, text.as_bytes())?;
    out.push(p);
    Ok(())
}

/// Write the report into `dir` (created if missing); returns the files written.
pub fn write(dir: &Path, report: &Report) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut out = Vec::new();
    let json = dir.join("check.json");
    super::write_json(&json, report)?;
    out.push(json);
    let mut charts = Vec::new();
    for fam in families(report) {
        let series: Vec<Series> = report
            .memory
            .iter()
            .filter(|r| r.family == fam)
            .map(|r| Series {
                name: format!(
                    "{}{}: {:.1} KiB, {:+.0} B/step",
                    r.name,
                    if r.mutant.is_some() { " (mutant)" } else { "" },
                    kib(r.live_bytes.last().copied().unwrap_or(0) as f64),
                    r.growth_per_step
                ),
                points: r
                    .live_bytes
                    .iter()
                    .enumerate()
                    .map(|(i, &b)| ((i + 1) as f64, kib(b as f64)))
                    .collect(),
            })
            .collect();
        let name = format!("memory-{fam}.svg");
        let doc = line_chart(
            &format!("{fam}: live memory after each step"),
            "step",
            "KiB live above the baseline before step 1",
            &series,
        );
        save(dir, &name, &doc, &mut out)?;
        charts.push(name);
    }
    let names: Vec<String> = report.memory.iter().map(|r| r.name.clone()).collect();
    let traces = bar_chart(
        &format!(
            "traces per staged function over {} steps",
            report.step_config.steps
        ),
        "traces",
        &names,
        &[
            Bars {
                name: "reference".into(),
                values: report
                    .memory
                    .iter()
                    .map(|r| match r.mutant {
                        None => r.traces as f64,
                        Some(_) => f64::NAN,
                    })
                    .collect(),
            },
            Bars {
                name: "mutant".into(),
                values: report
                    .memory
                    .iter()
                    .map(|r| match r.mutant {
                        Some(_) => r.traces as f64,
                        None => f64::NAN,
                    })
                    .collect(),
            },
        ],
        Scale::Linear,
    );
    save(dir, "traces.svg", &traces, &mut out)?;
    if let Some(p) = &report.init_peaks {
        let cats: Vec<String> = p.strategies.iter().map(|r| r.name.clone()).collect();
        let doc = bar_chart(
            &format!(
                "init peak / final bytes: {} x {}-{}-{} {}",
                p.layers, p.width, p.hidden, p.width, p.dtype
            ),
            "peak above baseline / final bytes",
            &cats,
            &[
                Bars {
                    name: "measured".into(),
                    values: p.strategies.iter().map(|r| r.ratio).collect(),
                },
                Bars {
                    name: "analytic bound".into(),
                    values: p.strategies.iter().map(|r| r.bound_ratio).collect(),
                },
                Bars {
                    name: "stack-vmap-fp32 (mutant)".into(),
                    values: p.mutant.iter().map(|r| r.ratio).collect(),
                },
            ],
            Scale::Linear,
        );
        save(dir, "init-peaks.svg", &doc, &mut out)?;
        let series: Vec<Series> = p
            .timelines
            .iter()
            .map(|(name, mib)| {
                let n = mib.len().max(2) - 1;
                Series {
                    name: name.clone(),
                    points: mib
                        .iter()
                        .enumerate()
                        .map(|(i, &y)| (i as f64 / n as f64, y))
                        .collect(),
                }
            })
            .collect();
        let doc = line_chart(
            &format!(
                "live bytes during init: {} x {}-{}-{} {} (final {:.1} MiB)",
                p.layers,
                p.width,
                p.hidden,
                p.width,
                p.dtype,
                p.final_bytes as f64 / (1 << 20) as f64
            ),
            "build progress (fraction of sample points)",
            "MiB above baseline",
            &series,
        );
        save(dir, "init-live.svg", &doc, &mut out)?;
    }
    let hist: Vec<Bars> = report
        .golden_histogram
        .iter()
        .map(|(kind, counts)| Bars {
            name: kind.clone(),
            values: counts.iter().map(|&c| c as f64).collect(),
        })
        .collect();
    let doc = bar_chart(
        "golden cases: |got - want| / (atol + rtol |want|) per compared number",
        "numbers (log scale)",
        &golden_bins(),
        &hist,
        Scale::Log,
    );
    save(dir, "golden-errors.svg", &doc, &mut out)?;
    save(dir, "summary.md", &summary(report, &charts), &mut out)?;
    Ok(out)
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', "<br>")
}

/// The Markdown summary.
pub fn summary(report: &Report, memory_charts: &[String]) -> String {
    let mut o = String::new();
    let failed = report.laws.iter().filter(|l| !l.passed).count();
    let _ = writeln!(o, "# harness check report\n");
    let _ = writeln!(
        o,
        "{} laws: {} passed, {} failed. {} mutants: {} caught. {} golden cases: {} passed. \
         Overall: **{}**.\n",
        report.laws.len(),
        report.laws.len() - failed,
        failed,
        report.mutants.len(),
        report.mutants.iter().filter(|m| m.caught).count(),
        report.golden.len(),
        report.golden.iter().filter(|g| g.result.passed).count(),
        if report.all_held() {
            "everything held"
        } else {
            "SOMETHING FAILED"
        }
    );
    if !report.errors.is_empty() {
        let _ = writeln!(o, "## Errors\n");
        for e in &report.errors {
            let _ = writeln!(o, "- {}", md_escape(e));
        }
        o.push('\n');
    }
    let _ = writeln!(o, "## Laws\n");
    let _ = writeln!(o, "| law | family | cases | result | seconds |");
    let _ = writeln!(o, "|---|---|---:|---|---:|");
    for l in &report.laws {
        let _ = writeln!(
            o,
            "| `{}` | {} | {} | {} | {:.2} |",
            l.name,
            l.family,
            l.cases,
            if l.passed { "pass" } else { "**FAIL**" },
            l.seconds
        );
    }
    for l in report.laws.iter().filter(|l| !l.passed) {
        let _ = writeln!(
            o,
            "\n`{}` counterexample:\n\n```\n{}\n```",
            l.name,
            l.counterexample.as_deref().unwrap_or("")
        );
    }
    if !report.mutants.is_empty() {
        let _ = writeln!(o, "\n## Mutants\n");
        let _ = writeln!(
            o,
            "| mutant | incident | law | caught | seconds | counterexample |"
        );
        let _ = writeln!(o, "|---|---|---|---|---:|---|");
        for m in &report.mutants {
            let _ = writeln!(
                o,
                "| `{}` | {} | `{}` | {} | {:.2} | {} |",
                m.name,
                md_escape(&m.incident),
                m.law,
                if m.caught { "caught" } else { "**MISSED**" },
                m.seconds,
                md_escape(m.counterexample.as_deref().unwrap_or("—"))
            );
        }
    }
    let sc = &report.step_config;
    let _ = writeln!(
        o,
        "\n## Memory and traces over {} steps\n\nLive bytes after each step, above the live bytes \
         before the first (counting allocator, measured sequentially with nothing else running). \
         Adam/RAdam: one f32 leaf of {} parameters; Muon: a {}x{} f32 matrix and a {}-vector; \
         line search: `sgd(1) + backtracking` on a {}-dimensional f64 Rosenbrock; CNF: training \
         steps of width {}, depth 2, one block, batch {} on two-moons.\n",
        sc.steps,
        sc.elements,
        sc.muon_side,
        sc.muon_side,
        sc.muon_side,
        sc.linesearch_dim,
        sc.cnf_width,
        sc.cnf_batch
    );
    let _ = writeln!(
        o,
        "| run | mutant of | staged function | traces | live after step 1 (B) | live after step {} (B) | retained per step after step 2 (B) |",
        sc.steps
    );
    let _ = writeln!(o, "|---|---|---|---:|---:|---:|---:|");
    for r in &report.memory {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {:.1} |",
            r.name,
            r.mutant.unwrap_or("—"),
            r.staged,
            r.traces,
            r.live_bytes.first().copied().unwrap_or(0),
            r.live_bytes.last().copied().unwrap_or(0),
            r.growth_per_step
        );
    }
    o.push('\n');
    for c in memory_charts {
        let _ = writeln!(o, "![{c}]({c})");
    }
    let _ = writeln!(o, "\n![traces per staged function](traces.svg)");
    if let Some(p) = &report.init_peaks {
        let _ = writeln!(
            o,
            "\n## Init peaks\n\n{} layers of {}-{}-{} in {}: final N*P*s = {} bytes. Peak above \
             the baseline before the build (counting allocator), reference strategies and the \
             `stack-vmap-fp32` mutant standing in for them.\n",
            p.layers, p.width, p.hidden, p.width, p.dtype, p.final_bytes
        );
        let _ = writeln!(
            o,
            "| strategy | peak bytes | peak / final | bound | bound / final | within | mutant peak / final |"
        );
        let _ = writeln!(o, "|---|---:|---:|---|---:|---|---:|");
        for (r, m) in p.strategies.iter().zip(&p.mutant) {
            let _ = writeln!(
                o,
                "| `{}` | {} | {:.4} | `{}` | {:.4} | {} | {:.4} |",
                r.name,
                r.peak_bytes,
                r.ratio,
                r.formula,
                r.bound_ratio,
                if r.within_bound { "yes" } else { "**NO**" },
                m.ratio
            );
        }
        let _ = writeln!(
            o,
            "\n![init peaks](init-peaks.svg)\n\n![live bytes during init](init-live.svg)"
        );
    }
    if !report.golden.is_empty() {
        let passed = report.golden.iter().filter(|g| g.result.passed).count();
        let numbers: usize = report.golden.iter().map(|g| g.compared).sum();
        let _ = writeln!(
            o,
            "\n## Golden cases\n\n{passed} of {} cases passed; {numbers} numbers compared. \
             Error of each number as a multiple of its tolerance, `|got - want| / (atol + rtol \
             |want|)` (below 1 passes):\n",
            report.golden.len()
        );
        let bins = golden_bins();
        let _ = writeln!(o, "| kind | {} |", bins.join(" | "));
        let _ = writeln!(o, "|---|{}", "---:|".repeat(bins.len()));
        for (kind, counts) in &report.golden_histogram {
            let cells: Vec<String> = counts.iter().map(|c| c.to_string()).collect();
            let _ = writeln!(o, "| {kind} | {} |", cells.join(" | "));
        }
        let mut worst: Vec<&GoldenRow> = report.golden.iter().collect();
        worst.sort_by(|a, b| b.max_err_over_tol.total_cmp(&a.max_err_over_tol));
        let _ = writeln!(o, "\nWorst cases:\n");
        let _ = writeln!(
            o,
            "| case | kind | result | max err / tol | max abs err | max rel err |"
        );
        let _ = writeln!(o, "|---|---|---|---:|---:|---:|");
        for g in worst.iter().take(8) {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {:.3e} | {:.3e} | {:.3e} |",
                g.result.name,
                g.result.kind,
                if g.result.passed { "pass" } else { "**FAIL**" },
                g.max_err_over_tol,
                g.result.max_abs_err,
                g.result.max_rel_err
            );
        }
        for g in report.golden.iter().filter(|g| !g.result.passed) {
            let _ = writeln!(
                o,
                "\n`{}` failed: {}",
                g.result.name,
                md_escape(&g.result.detail)
            );
        }
        let _ = writeln!(o, "\n![golden error distribution](golden-errors.svg)");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_bins_are_decades_with_zero_and_failure_bins() {
        let bins = golden_bins();
        assert_eq!(bins.len(), 10);
        assert_eq!(golden_bin(0.0), 0);
        assert_eq!(golden_bin(1e-12), 1);
        assert_eq!(golden_bin(5e-8), 1);
        assert_eq!(bins[1], "< 1e-7");
        assert_eq!(golden_bin(5e-7), 2);
        assert_eq!(bins[2], "[1e-7, 1e-6)");
        assert_eq!(golden_bin(0.5), 9 - 1);
        assert_eq!(bins[8], "[1e-1, 1e0)");
        assert_eq!(golden_bin(1.0), 9);
        assert_eq!(golden_bin(f64::INFINITY), 9);
        assert_eq!(golden_bin(f64::NAN), 9);
    }
}
