//! `harness check --report DIR`: the report writer on a tiny configuration produces every file,
//! SVGs that parse as XML and carry data, a summary naming every law run, and a `check.json`
//! that round-trips. Its own test binary: the report measures process-wide live bytes.

harness::install_counting_allocator!();

use harness::report::full::{collect, golden_bins, write, ReportConfig, DEFAULT_GOLDEN, FILES};
use indicatif::ProgressBar;
use std::path::{Path, PathBuf};

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("harness-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Data elements: a polyline with points, or a bar (`<rect>` with a `<title>`; the background
/// rect has none).
fn data_elements(path: &Path) -> usize {
    let text = std::fs::read_to_string(path).expect("svg readable");
    let doc = roxmltree::Document::parse(&text)
        .unwrap_or_else(|e| panic!("{} is not XML: {e}", path.display()));
    assert_eq!(
        doc.root_element().tag_name().name(),
        "svg",
        "{}",
        path.display()
    );
    doc.descendants()
        .filter(|n| match n.tag_name().name() {
            "polyline" => n.attribute("points").is_some_and(|p| p.contains(',')),
            "rect" => n.children().any(|c| c.tag_name().name() == "title"),
            _ => false,
        })
        .count()
}

#[test]
fn tiny_report_writes_every_file_with_data() {
    let golden = TempDir::new("report-golden");
    // One case of each kind: optimizer, line search, ODE.
    for f in [
        "adam-default-f32.json",
        "linesearch-quadratic-6d-f64.json",
        "ode-lv-tsit5-pid.json",
    ] {
        std::fs::copy(Path::new(DEFAULT_GOLDEN).join(f), golden.0.join(f)).expect("golden copy");
    }
    let cfg = ReportConfig {
        golden: Some(golden.0.clone()),
        ..ReportConfig::tiny("radam_")
    };
    let report = collect(&cfg, &ProgressBar::hidden());
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let ran: Vec<&str> = report.laws.iter().map(|l| l.name.as_str()).collect();
    let want: Vec<&str> = harness::laws::registry()
        .iter()
        .filter(|l| l.name.contains("radam_"))
        .map(|l| l.name)
        .collect();
    assert_eq!(ran, want);
    assert!(report.laws.iter().all(|l| l.passed && l.cases == 4));
    assert_eq!(report.mutants.len(), 1);
    assert!(report.mutants[0].caught);
    assert_eq!(report.golden.len(), 3);
    assert!(report.golden.iter().all(|g| g.result.passed));

    // traces: every reference form traces once; the cond-leak mutant once per step and retains
    // memory every step
    let steps = cfg.steps.steps;
    for r in &report.memory {
        assert_eq!(r.live_bytes.len(), steps, "{}", r.name);
        match r.name.as_str() {
            "radam-cond-leak" | "linesearch-rebuilt-objective" | "cnf-static-step" => {
                assert_eq!(r.traces, steps, "{}", r.name)
            }
            "linesearch-weak-init" => assert_eq!(r.traces, 2),
            _ => assert_eq!(r.traces, 1, "{}", r.name),
        }
    }
    let leak = report
        .memory
        .iter()
        .find(|r| r.name == "radam-cond-leak")
        .expect("cond-leak run");
    // each retained trace keeps a copy of the moments: 64 f32 at least
    assert!(leak.growth_per_step >= 256.0, "{}", leak.growth_per_step);

    let dir = TempDir::new("report-out");
    let files = write(&dir.0, &report).expect("report written");
    for name in FILES
        .iter()
        .map(|s| s.to_string())
        .chain(["adam", "radam", "muon", "linesearch", "cnf"].map(|f| format!("memory-{f}.svg")))
    {
        let p = dir.0.join(&name);
        assert!(p.is_file(), "{name} missing");
        assert!(files.contains(&p), "{name} not listed");
        if name.ends_with(".svg") {
            assert!(data_elements(&p) >= 1, "{name} has no data element");
        }
    }
    // the trace chart has one bar per run; the histogram one per kind and non-empty bin
    assert_eq!(
        data_elements(&dir.0.join("traces.svg")),
        report.memory.len()
    );
    let nonempty: usize = report
        .golden_histogram
        .iter()
        .map(|(_, c)| c.iter().filter(|&&n| n > 0).count())
        .sum();
    assert_eq!(data_elements(&dir.0.join("golden-errors.svg")), nonempty);
    for (_, counts) in &report.golden_histogram {
        assert_eq!(counts.len(), golden_bins().len());
    }
    let counted: usize = report.golden_histogram.iter().flat_map(|(_, c)| c).sum();
    assert_eq!(
        counted,
        report.golden.iter().map(|g| g.compared).sum::<usize>()
    );

    let summary = std::fs::read_to_string(dir.0.join("summary.md")).expect("summary");
    for l in &report.laws {
        assert!(
            summary.contains(&format!("`{}`", l.name)),
            "{} not in summary",
            l.name
        );
    }
    for m in &report.mutants {
        assert!(summary.contains(&format!("`{}`", m.name)));
    }
    for f in [
        "traces.svg",
        "init-peaks.svg",
        "golden-errors.svg",
        "memory-radam.svg",
    ] {
        assert!(
            summary.contains(&format!("({f})")),
            "summary does not link {f}"
        );
    }

    let text = std::fs::read_to_string(dir.0.join("check.json")).expect("check.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("check.json parses");
    let laws = v["laws"].as_array().expect("laws array");
    assert_eq!(laws.len(), report.laws.len());
    for l in laws {
        for k in [
            "name",
            "family",
            "cases",
            "passed",
            "seconds",
            "counterexample",
        ] {
            assert!(l.get(k).is_some(), "law row lacks {k}: {l}");
        }
    }
    assert_eq!(v["mutants"][0]["name"], "radam-cond-leak");
    assert_eq!(
        v["memory"].as_array().map(Vec::len),
        Some(report.memory.len())
    );
    assert_eq!(
        v["init_peaks"]["strategies"].as_array().map(Vec::len),
        Some(5)
    );
}
