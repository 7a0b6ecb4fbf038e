//! The command line refuses work that cannot succeed, before doing any: exit status 2, a
//! one-line message naming the flag, and every input file left untouched.

use std::path::{Path, PathBuf};
use std::process::Command;

fn harness() -> Command {
    Command::new(env!("CARGO_BIN_EXE_harness"))
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("harness-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// Runs `cmd` in `dir`: exit 2 within 1.5 s, and stderr (one line) contains `needle`.
fn refused(dir: &Path, args: &[&str], env: &[(&str, &str)], needle: &str) {
    let start = std::time::Instant::now();
    let out = harness()
        .current_dir(dir)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let secs = start.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    assert!(secs < 1.5, "{args:?} took {secs} s");
}

#[test]
fn an_output_naming_an_input_is_refused_and_the_input_is_untouched() {
    let d = scratch("inputs");
    std::fs::copy(fixture("fixtures/cnf/ring-h.pgm"), d.join("r.pgm")).unwrap();
    std::fs::copy(
        fixture("fixtures/golden/adam-default-f32.json"),
        d.join("case.json"),
    )
    .unwrap();
    std::fs::create_dir(d.join("cases")).unwrap();
    std::fs::copy(d.join("case.json"), d.join("cases/case.json")).unwrap();
    let (pgm, case) = (
        std::fs::read(d.join("r.pgm")).unwrap(),
        std::fs::read(d.join("case.json")).unwrap(),
    );
    let train = [
        "train-cnf",
        "--steps",
        "2",
        "--width",
        "8",
        "--depth",
        "1",
        "--blocks",
        "1",
        "--batch",
        "16",
    ];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        train.iter().copied().chain(extra.iter().copied()).collect()
    };
    refused(
        &d,
        &with(&["--data", "r.pgm", "--svg", "r.pgm"]),
        &[],
        "--svg r.pgm: is also an input",
    );
    refused(
        &d,
        &with(&["--json", "same.out", "--svg", "same.out"]),
        &[],
        "is also the output of",
    );
    refused(
        &d,
        &["golden", "case.json", "--json", "case.json"],
        &[],
        "is also an input",
    );
    refused(
        &d,
        &["golden", "cases", "--json", "cases/results.json"],
        &[],
        "inside the input directory",
    );
    refused(
        &d,
        &["mutants", "--json", "no/such/dir/m.json"],
        &[],
        "does not exist",
    );
    // a file the report writes into its directory, named again by --json
    refused(
        &d,
        &["check", "--report", "rep", "--json", "rep/check.json"],
        &[],
        "--json rep/check.json: lies inside the --report directory",
    );
    // the report's directory is the golden corpus it replays (the default one)
    let golden = fixture("fixtures/golden");
    refused(
        &d,
        &["check", "--report", golden.to_str().unwrap()],
        &[],
        "is an input or inside one",
    );
    // a refused report leaves no directory behind, whichever check refuses it
    refused(
        &d,
        &["check", "--law", "no-such-law", "--report", "fresh/rep"],
        &[],
        "no law matches",
    );
    std::fs::write(d.join("plain"), b"x").unwrap();
    refused(
        &d,
        &["check", "--report", "plain/rep"],
        &[],
        "--report plain/rep:",
    );
    assert!(!d.join("rep").exists() && !d.join("fresh").exists());
    assert_eq!(std::fs::read(d.join("r.pgm")).unwrap(), pgm);
    assert_eq!(std::fs::read(d.join("case.json")).unwrap(), case);
    assert!(!d.join("same.out").exists() && !d.join("cases/results.json").exists());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn zero_steps_zero_cases_and_unreadable_variables_are_usage_errors() {
    let d = scratch("counts");
    refused(&d, &["train-cnf", "--steps", "0"], &[], "--steps 0");
    refused(
        &d,
        &["check", "--law", "radam", "--cases", "0"],
        &[],
        "0 cases",
    );
    refused(
        &d,
        &["check", "--law", "radam"],
        &[("PROPTEST_CASES", "0")],
        "0 cases",
    );
    refused(&d, &["upstream", "diff", "--cases", "0"], &[], "--cases 0");
    // a learning rate finite and positive in f64 that rounds to inf or 0 in f32
    for lr in ["1e39", "1e-320"] {
        refused(
            &d,
            &["train-cnf", "--steps", "1", "--dtype", "f32", "--lr", lr],
            &[],
            "`learning_rate`",
        );
    }
    // a time limit past any deadline `Instant` can hold (it panicked adding it to now)
    for cmd in ["diff", "check"] {
        for secs in ["0", "86401", "18446744073709551615"] {
            let out = harness()
                .current_dir(&d)
                .args(["upstream", cmd, "--timeout", secs])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{cmd} --timeout {secs}: {err}");
            assert!(
                err.contains("--timeout") && err.contains("1..=86400"),
                "{err}"
            );
        }
    }
    refused(
        &d,
        &["check", "--law", "radam"],
        &[("PROPTEST_CASES", "4294967296")],
        "PROPTEST_CASES",
    );
    refused(
        &d,
        &["check", "--law", "radam"],
        &[("HARNESS_SEED", "abc")],
        "HARNESS_SEED",
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// Under an address-space limit (`ulimit -v`) an allocation past it fails and Rust aborts; the
/// budget is capped by the limit, so a model that fits the given budget but not the limit is
/// refused before it is built, even with a larger `HARNESS_MAX_MEMORY`. (Without the cap this
/// run aborted with status 134 at 1.3 GB: the stack's list-then-stack build peaks at 2 GiB.)
#[test]
fn a_process_memory_limit_caps_the_budget_instead_of_aborting() {
    let d = scratch("ulimit");
    let out = Command::new("/bin/sh")
        .current_dir(&d)
        .args([
            "-c",
            "ulimit -v 1300000 && exec \"$0\" \"$@\"",
            env!("CARGO_BIN_EXE_harness"),
            "init-peaks",
            "--layers",
            "8",
            "--width",
            "2048",
            "--hidden",
            "8192",
        ])
        .env("HARNESS_MAX_MEMORY", "8G")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("ulimit -v (RLIMIT_AS)"), "{err}");
    assert!(err.contains("run under a higher limit"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn sizes_that_cannot_fit_are_refused_before_any_allocation() {
    let d = scratch("sizes");
    let budget = [("HARNESS_MAX_MEMORY", "8G")];
    // the largest image a header may declare (16384 x 16384, 16 bit): weighed from its header
    // alone (this file has no pixels at all) against the budget with the model
    std::fs::write(d.join("huge.pgm"), b"P5\n16384 16384\n65535\n").unwrap();
    refused(
        &d,
        &["train-cnf", "--steps", "1", "--data", "huge.pgm"],
        &[("HARNESS_MAX_MEMORY", "2G")],
        "on that image needs about 4.5 GiB",
    );
    refused(
        &d,
        &[
            "init-peaks",
            "--layers",
            "2",
            "--width",
            "16",
            "--hidden",
            "1000000000",
        ],
        &budget,
        "memory budget",
    );
    refused(
        &d,
        &[
            "init-peaks",
            "--layers",
            "16",
            "--width",
            "1024",
            "--hidden",
            "1000000000",
        ],
        &budget,
        "memory budget",
    );
    refused(
        &d,
        &[
            "init-peaks",
            "--layers",
            "64",
            "--width",
            "8192",
            "--hidden",
            "32768",
            "--dtype",
            "f32",
        ],
        &budget,
        "memory budget",
    );
    let train = |w: &'static str, depth: &'static str, batch: &'static str| {
        [
            "train-cnf",
            "--steps",
            "1",
            "--width",
            w,
            "--depth",
            depth,
            "--blocks",
            "1",
            "--batch",
            batch,
        ]
    };
    refused(&d, &train("16384", "256", "16"), &budget, "memory budget");
    refused(
        &d,
        &train("16384", "8", "1048576"),
        &budget,
        "memory budget",
    );
    refused(&d, &["train-cnf", "--steps", "1000000000000"], &[], "int32");
    refused(
        &d,
        &[
            "init-peaks",
            "--layers",
            "2",
            "--width",
            "16",
            "--hidden",
            "64",
            "--max-memory",
            "1K",
        ],
        &[],
        "memory budget",
    );
    refused(
        &d,
        &[
            "init-peaks",
            "--layers",
            "2",
            "--width",
            "16",
            "--hidden",
            "64",
            "--max-memory",
            "lots",
        ],
        &[],
        "--max-memory",
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn hostile_golden_inputs_are_refused_or_read_once() {
    let d = scratch("golden");
    let case = std::fs::read_to_string(fixture("fixtures/golden/adam-default-f32.json")).unwrap();
    std::fs::create_dir_all(d.join("dir/sub")).unwrap();
    std::fs::write(d.join("dir/sub/case.json"), &case).unwrap();
    // a link back to the parent: the case is replayed once, the walk does not loop
    std::os::unix::fs::symlink("..", d.join("dir/sub/back")).unwrap();
    let out = harness()
        .current_dir(&d)
        .args(["golden", "dir"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed, 0 failed"), "{text}");
    let out = harness()
        .current_dir(&d)
        .args(["golden", "--face", "tape", "dir"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("the faces are `fast` and `dfdx`"), "{err}");
    std::fs::create_dir(d.join("empty")).unwrap();
    refused(&d, &["golden", "empty"], &[], "no golden case");
    std::fs::write(
        d.join("dup.json"),
        case.replacen("\"name\"", "\"name\": \"x\", \"name\"", 1),
    )
    .unwrap();
    refused(&d, &["golden", "dup.json"], &[], "duplicate key `name`");
    let big = std::fs::File::create(d.join("big.json")).unwrap();
    big.set_len(harness::golden::MAX_CASE_BYTES + 1).unwrap();
    refused(&d, &["golden", "big.json"], &[], "byte limit");
    refused(&d, &["golden", "/dev/null"], &[], "not a regular file");
    refused(&d, &["golden", "no-such.json"], &[], "no such file");
    let escaped = case.replacen("\"adam-default-f32\"", "\"evil\\u001b[2J\\nFAKE ROW\"", 1);
    std::fs::write(d.join("esc.json"), escaped).unwrap();
    let out = harness()
        .current_dir(&d)
        .args(["golden", "esc.json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains('\u{1b}') && !text.contains("\nFAKE ROW"),
        "{text}"
    );
    assert!(text.contains("\\u{1b}[2J\\nFAKE ROW"), "{text}");
    // a name too long to pad with a format width (above 65535) is cut in the table, whole in
    // the JSON results
    let long_name = "n".repeat(70_000);
    let long = case.replacen("\"adam-default-f32\"", &format!("\"{long_name}\""), 1);
    std::fs::write(d.join("long.json"), long).unwrap();
    let out = harness()
        .current_dir(&d)
        .args(["golden", "long.json", "--json", "long-results.json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("(69760 more characters)"), "{text}");
    assert!(text.lines().all(|l| l.chars().count() < 400), "{text}");
    let results = std::fs::read_to_string(d.join("long-results.json")).unwrap();
    assert!(results.contains(&long_name));
    let muon = std::fs::read_to_string(fixture("fixtures/golden/muon-default-f64.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&muon).unwrap();
    let mut v = v;
    v["optimizer"]["hyper"]["ns_steps"] = serde_json::json!(1_000_000);
    std::fs::write(d.join("ns.json"), v.to_string()).unwrap();
    refused(&d, &["golden", "ns.json"], &[], "ns_steps");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn an_image_that_is_not_a_regular_pgm_file_is_refused_without_reading_it_through() {
    let d = scratch("image");
    std::os::unix::fs::symlink("/dev/zero", d.join("z.pgm")).unwrap();
    std::fs::write(d.join("zeros.pgm"), [0u8; 100]).unwrap();
    let train = |data: &'static str| {
        [
            "train-cnf",
            "--steps",
            "1",
            "--width",
            "8",
            "--depth",
            "1",
            "--blocks",
            "1",
            "--batch",
            "16",
            "--data",
            data,
        ]
    };
    refused(&d, &train("image:/dev/zero"), &[], "not a regular file");
    refused(&d, &train("z.pgm"), &[], "not a regular file");
    refused(&d, &train("zeros.pgm"), &[], "is not P2 or P5");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn every_option_is_described_and_there_is_a_version() {
    let v = harness().arg("--version").output().unwrap();
    assert!(v.status.success() && String::from_utf8_lossy(&v.stdout).starts_with("harness "));
    for sub in [
        "check",
        "golden",
        "mutants",
        "bench",
        "init-peaks",
        "train-cnf",
    ] {
        let out = harness().args([sub, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        let mut in_options = false;
        for line in help.lines() {
            if line.starts_with("Options:") {
                in_options = true;
                continue;
            }
            let flag = line.trim_start();
            if in_options && flag.starts_with("--") {
                // `--flag <VALUE>  description`: something after the flag and its value
                let described = flag
                    .split_once("  ")
                    .is_some_and(|(_, d)| !d.trim().is_empty());
                assert!(described, "{sub}: `{flag}` has no description");
            }
        }
        assert!(
            !help.contains(env!("CARGO_MANIFEST_DIR")),
            "{sub} --help shows a build path"
        );
    }
}

#[test]
fn bench_json_records_the_host_and_the_limits_that_moved() {
    let d = scratch("bench-host");
    let out = harness()
        .current_dir(&d)
        .args(["bench", "muon", "--quick", "--json", "m.json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("m.json")).unwrap()).unwrap();
    let host = harness::bench::Host::this();
    assert_eq!(v["host"], serde_json::to_value(&host).unwrap());
    assert!(stdout.contains(&format!("host: {host}\n")), "{stdout}");
    // where the machine's counters can be read (Linux's /proc/stat), its other load over the
    // run, in the JSON and as a line
    if harness::bench::LoadMark::now().is_some() {
        let load = &v["host_load"];
        for share in ["steal_pct", "others_pct"] {
            let pct = load[share].as_f64().unwrap();
            assert!((0.0..=100.0).contains(&pct), "{share}: {load}");
        }
        assert!(load["seconds"].as_f64().unwrap() > 0.0, "{load}");
        assert!(stdout.contains("\nhost load over "), "{stdout}");
    }
    // muon reads one limit on both sides of its figures; it is listed exactly when it moved
    let gemm = v["figures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "gemm_1024_gflops")
        .unwrap();
    let (before, after) = (
        gemm["bracket"]["before"].as_f64().unwrap(),
        gemm["bracket"]["after"].as_f64().unwrap(),
    );
    // a quick run reads one bracket, steady or not
    assert_eq!(gemm["bracket"]["rounds"], 1, "{gemm}");
    let moved = before.max(after) / before.min(after) > harness::bench::HOST_DRIFT_RATIO;
    let listed = v["moved_limits"].as_array().unwrap();
    assert_eq!(listed.len(), usize::from(moved), "{v}");
    assert!(stdout.contains("limits read before and after their figures: 1, "));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bench_refuses_an_unknown_area_stray_upstream_dirs_and_a_venv_never_set_up_before_timing() {
    let d = scratch("bench-args");
    // clap's own error (exit 2) lists the areas
    let out = harness()
        .current_dir(&d)
        .args(["bench", "bogus"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("possible values: optim, muon"), "{err}");
    refused(
        &d,
        &["bench", "optim", "--upstream-dir", "."],
        &[],
        "without --against nothing reads them",
    );
    refused(
        &d,
        &["bench", "scaling", "--venvs", "."],
        &[],
        "without --against nothing reads them",
    );
    // the worker's interpreter is looked for before the minutes of timing, not after
    refused(
        &d,
        &[
            "bench",
            "all",
            "--against",
            "current",
            "--venvs",
            "no-venvs",
        ],
        &[],
        "no interpreter at no-venvs/current/bin/python",
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// A venv directory whose `current/bin/python` is `script` (sh), standing in for the worker.
fn stand_in_venv(dir: &Path, script: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("venvs/current/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let python = bin.join("python");
    std::fs::write(&python, format!("#!/bin/sh\n{script}\n")).unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir.join("venvs")
}

#[test]
fn bench_against_a_worker_that_hangs_gives_up_after_timeout_and_keeps_its_own_figures() {
    let d = scratch("bench-timeout");
    refused(
        &d,
        &["bench", "ode", "--timeout", "5"],
        &[],
        "without --against there is no worker",
    );
    // a worker that never says hello, then one that says hello and never answers a figure
    let hello = r#"printf '{"protocol":1,"id":%s,"ok":true,"result":{"profile":"current","python":"3.11.7","packages":{"jax":"0.4.30"},"devices":1,"protocol":1},"seconds":0.01}\n' "$(sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p' | head -n 1)""#;
    for (script, needle) in [
        (
            "read -r l; sleep 60".to_string(),
            "no reply to `hello` within 1.0 s",
        ),
        (
            format!("head -n 1 | {{ {hello}; }}; sleep 60"),
            "within 1.0 s",
        ),
    ] {
        let venvs = stand_in_venv(&d, &script);
        let start = std::time::Instant::now();
        let out = harness()
            .current_dir(&d)
            .args([
                "bench",
                "ode",
                "--quick",
                "--against",
                "current",
                "--timeout",
                "1",
            ])
            .arg("--venvs")
            .arg(&venvs)
            .output()
            .unwrap();
        let secs = start.elapsed().as_secs_f64();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(text.contains(needle), "{text}");
        assert!(text.contains("the process was killed"), "{text}");
        // our own figures are kept
        assert!(text.contains("ode_lv_tsit5_1e-8_us"), "{text}");
        // the bench's own timing takes a few seconds; the worker's 60 s sleep is not waited for
        assert!(secs < 40.0, "{secs} s");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bench_scaling_quick_writes_its_json_and_svg_and_refuses_bad_outputs() {
    let d = scratch("scaling");
    // an unwritable --svg, and --svg on an area that draws nothing: refused before any timing
    refused(
        &d,
        &["bench", "scaling", "--quick", "--svg", "no/such/dir/s.svg"],
        &[],
        "--svg no/such/dir/s.svg",
    );
    refused(
        &d,
        &["bench", "optim", "--svg", "s.svg"],
        &[],
        "only `bench scaling` draws a figure",
    );
    refused(
        &d,
        &["bench", "scaling", "--json", "same", "--svg", "same"],
        &[],
        "same",
    );
    assert!(!d.join("s.svg").exists());
    let out = harness()
        .current_dir(&d)
        .args([
            "bench", "scaling", "--quick", "--json", "s.json", "--svg", "s.svg",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("limit time") && stdout.contains("exponent (top half)"));
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("s.json")).unwrap()).unwrap();
    assert_eq!(v["area"], "scaling");
    let host = harness::bench::Host::this();
    assert_eq!(v["host"], serde_json::to_value(&host).unwrap());
    assert!(stdout.contains(&format!("host: {host}\n")), "{stdout}");
    let kernels = v["kernels"].as_array().unwrap();
    let names: Vec<&str> = kernels
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "adam_fused",
            "radam_fused",
            "newton_schulz5",
            "cnf_loglik",
            "ode_lv_tsit5_constant",
            "stacked_init_chunked"
        ]
    );
    // every limit is read around its kernel's largest size, once in a quick run, and listed as
    // moved exactly when its readings are more than 5% apart; the ODE kernel has no limit
    let expected = [
        ("adam_fused", Some(("adam_fused_own_arrays_gbps", "GB/s"))),
        ("radam_fused", Some(("radam_fused_own_arrays_gbps", "GB/s"))),
        ("newton_schulz5", Some(("gemm_256_gflops", "GFLOP/s"))),
        (
            "cnf_loglik",
            Some(("gemm_f64_384x64x64_all_cores_gflops", "GFLOP/s")),
        ),
        ("ode_lv_tsit5_constant", None),
        (
            "stacked_init_chunked",
            Some(("fresh_write_64mib_gbps", "GB/s")),
        ),
    ];
    let mut moved = Vec::new();
    for (k, (name, limit)) in kernels.iter().zip(expected) {
        assert_eq!(k["name"], name);
        let b = &k["limit_bracket"];
        let Some((limit, unit)) = limit else {
            assert!(b.is_null(), "{k}");
            continue;
        };
        assert_eq!(
            (&b["name"], &b["unit"]),
            (&limit.into(), &unit.into()),
            "{b}"
        );
        assert_eq!(b["rounds"], 1, "{b}");
        let (before, after) = (b["before"].as_f64().unwrap(), b["after"].as_f64().unwrap());
        assert!(before > 0.0 && after > 0.0, "{b}");
        if before.max(after) / before.min(after) > harness::bench::HOST_DRIFT_RATIO {
            moved.push(b["name"].clone());
        }
    }
    let listed: Vec<_> = v["moved_limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].clone())
        .collect();
    assert_eq!(listed, moved);
    assert!(
        stdout.contains("\nlimits read before and after their figures: 5, "),
        "{stdout}"
    );
    if harness::bench::LoadMark::now().is_some() {
        assert!(
            v["host_load"]["seconds"].as_f64().unwrap() > 0.0,
            "{}",
            v["host_load"]
        );
        assert!(stdout.contains("\nhost load over "), "{stdout}");
    }
    for k in kernels {
        let points = k["points"].as_array().unwrap();
        assert!(points.len() >= 3, "{k}");
        assert!(points.iter().all(|p| p["seconds"].as_f64().unwrap() > 0.0));
        assert!(k["fit_full"]["exponent"].as_f64().unwrap().is_finite());
        assert!(k["fit_top_half"]["exponent"].as_f64().unwrap().is_finite());
        // every kernel but the scalar ODE solve has a limit at every size
        let limited = points.iter().all(|p| p["limit_seconds"].as_f64().is_some());
        assert_eq!(limited, k["name"] != "ode_lv_tsit5_constant", "{k}");
    }
    let svg = std::fs::read_to_string(d.join("s.svg")).unwrap();
    roxmltree::Document::parse(&svg).expect("the SVG is well-formed XML");
    assert_eq!(svg.matches("<svg").count(), 1 + kernels.len());
    std::fs::remove_dir_all(&d).unwrap();
}
