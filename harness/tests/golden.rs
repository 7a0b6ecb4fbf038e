//! golden-v1 replay: every committed case passes, the format's examples among them; unimplemented
//! kinds fail (never pass); malformed files are typed errors naming the file.

harness::install_counting_allocator!();

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn replay_dir(dir: &Path) -> Vec<harness::golden::CaseResult> {
    let files = harness::golden::collect(&[dir.to_path_buf()]).unwrap();
    files
        .iter()
        .map(|f| harness::golden::replay(&harness::golden::load(f).unwrap()).unwrap())
        .collect()
}

#[test]
fn every_committed_golden_case_passes() {
    let results = replay_dir(&root().join("fixtures/golden"));
    assert!(results.len() >= 20, "only {} cases", results.len());
    for r in &results {
        assert!(r.passed, "{}: {}", r.name, r.detail);
    }
}

/// Every committed case also passes through the dfdx face of the kernels. Where a law proves the
/// faces bit-identical (ODE steps and error norm, the line search's kernels) the outputs are the
/// same bits; Muon's composed Newton–Schulz and the taped CNF field round differently, so their
/// bits differ somewhere (which shows the face really ran).
#[test]
fn every_committed_golden_case_passes_through_the_dfdx_face() {
    use harness::reference::Face;
    let files = harness::golden::collect(&[root().join("fixtures/golden")]).unwrap();
    let mut differing = std::collections::BTreeSet::new();
    for f in &files {
        let case = harness::golden::load(f).unwrap();
        let fast = harness::golden::replay_face(&case, Face::Fast).unwrap();
        let dfdx = harness::golden::replay_face(&case, Face::Dfdx).unwrap();
        assert!(dfdx.passed, "{} (dfdx face): {}", dfdx.name, dfdx.detail);
        let name = case.name.clone();
        match case.kind.as_str() {
            "ode" | "linesearch" => assert_eq!(fast.output_bits, dfdx.output_bits, "{name}"),
            kind if fast.output_bits != dfdx.output_bits => {
                differing.insert(
                    if name.starts_with("muon") {
                        "muon"
                    } else {
                        kind
                    }
                    .to_string(),
                );
            }
            _ => {}
        }
    }
    assert_eq!(
        differing.into_iter().collect::<Vec<_>>(),
        ["cnf", "muon"],
        "the faces of Muon and of the CNF field must both have run"
    );
}

/// The example cases of the golden format (one per kind and the ODE controllers) are committed
/// with the project's own cases and pass with them; each kind is represented.
#[test]
fn the_format_examples_are_committed_and_every_kind_is_covered() {
    let golden = root().join("fixtures/golden");
    for example in [
        "adam-default-f32.json",
        "adam-default-f64.json",
        "radam-default-f64.json",
        "radam-nesterov-f64.json",
        "muon-default-f64.json",
        "linesearch-quadratic.json",
        "linesearch-rosenbrock.json",
        "ode-linear-dopri5-pid.json",
        "ode-lv-tsit5-pid.json",
        "ode-vdp-heun-const.json",
        "cnf/cnf-2d-1block.json",
    ] {
        assert!(golden.join(example).is_file(), "{example} is missing");
    }
    let kinds: std::collections::BTreeSet<String> =
        replay_dir(&golden).into_iter().map(|r| r.kind).collect();
    for kind in ["optimizer", "linesearch", "ode", "cnf"] {
        assert!(kinds.contains(kind), "no {kind} case");
    }
}

#[test]
fn truncated_golden_file_is_a_typed_error_naming_the_file() {
    let text =
        std::fs::read_to_string(root().join("fixtures/golden/adam-default-f32.json")).unwrap();
    for cut in [0, 1, 10, text.len() / 2, text.len() - 2] {
        let err = harness::golden::Case::parse("cut.json", &text[..cut])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cut.json") && err.contains("invalid JSON"),
            "{err}"
        );
    }
}

#[test]
fn malformed_fields_are_named_in_the_error() {
    let bad = [
        (r#"{"format":"golden-v2"}"#, "golden-v1"),
        (
            r#"{"format":"golden-v1","name":"x","kind":"optimizer","dtype":"float16","tolerance":{"rtol":0,"atol":0}}"#,
            "float16",
        ),
        (
            r#"{"format":"golden-v1","name":"x","kind":"optimizer","dtype":"float32","tolerance":{"rtol":-1,"atol":0}}"#,
            "tolerance.rtol",
        ),
    ];
    for (json, needle) in bad {
        let err = harness::golden::Case::parse("bad.json", json)
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{err}");
    }
    // a structurally valid case with a shape/data mismatch fails with the field named
    let case = harness::golden::Case::parse(
        "m.json",
        r#"{"format":"golden-v1","name":"m","kind":"optimizer","dtype":"float64","tolerance":{"rtol":0,"atol":0},
           "optimizer":{"name":"adam","hyper":{"learning_rate":0.1}},"params":{"w":{"shape":[2],"data":[1.0]}},"steps":[]}"#,
    )
    .unwrap();
    let err = harness::golden::replay(&case).unwrap_err().to_string();
    assert!(err.contains("params.w") && err.contains("shape"), "{err}");
}

#[test]
fn unknown_hyperparameter_fails_instead_of_being_ignored() {
    let case = harness::golden::Case::parse(
        "u.json",
        r#"{"format":"golden-v1","name":"u","kind":"optimizer","dtype":"float64","tolerance":{"rtol":0,"atol":0},
           "optimizer":{"name":"adam","hyper":{"learning_rate":0.1,"mu_dtype":"bfloat16"}},"params":{"w":{"shape":[1],"data":[1.0]}},
           "steps":[{"grads":{"w":{"shape":[1],"data":[1.0]}},"updates":{"w":{"shape":[1],"data":[-0.1]}}}]}"#,
    )
    .unwrap();
    let r = harness::golden::replay(&case).unwrap();
    assert!(!r.passed && r.detail.contains("mu_dtype"), "{}", r.detail);
}

#[test]
fn explained_upstream_mismatches_stay_within_the_librarys_own_rounding() {
    // fixtures/upstream-diff: diffrax's jitted and op-by-op runs of each case differ by
    // `library_self_rel` (measured by `harness upstream diff`); the reference may differ from
    // the jitted run as much, not more (4x: the three measured ratios are 0.8 to 2.0).
    let dir = root().join("fixtures/upstream-diff");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("explained.json")).unwrap())
            .unwrap();
    let rows = doc["explained"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for row in rows {
        let name = row["case"].as_str().unwrap();
        let library = row["library_self_rel"].as_f64().unwrap();
        let case = harness::golden::load(&dir.join(format!("{name}.json"))).unwrap();
        let r = harness::golden::replay(&case).unwrap();
        assert!(!r.passed, "{name} now passes: move it to fixtures/golden");
        assert!(
            r.max_rel_err <= 4.0 * library,
            "{name}: the reference is {:.2e} from diffrax, diffrax {library:.1e} from itself",
            r.max_rel_err
        );
    }
}

/// A case's work is weighed from its sizes before any of it is done: a `cnf` case whose
/// configuration asks for more than `MAX_REPLAY_FLOPS` is refused (before its weights are even
/// read: this one has the weights of a width-8 model), and a line search may not ask for more
/// than `MAX_GOLDEN_BACKTRACKING_STEPS` evaluations per update.
#[test]
fn a_case_asking_for_unbounded_work_is_refused_with_its_estimate() {
    let edited = |rel: &str, edit: &dyn Fn(&mut serde_json::Value)| {
        let path = root().join("fixtures/golden").join(rel);
        let mut doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        edit(&mut doc);
        let text = serde_json::to_string(&doc).unwrap();
        let case = harness::golden::Case::parse("edited", &text).unwrap();
        harness::golden::replay(&case).map(|r| (r.passed, r.detail))
    };
    let start = std::time::Instant::now();
    let err = edited("cnf/cnf-2d-1block.json", &|c| {
        c["model"]["width"] = serde_json::json!(4096);
        c["model"]["depth"] = serde_json::json!(64);
        c["model"]["blocks"] = serde_json::json!(16);
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("floating-point operations") && err.contains("MAX_REPLAY_FLOPS"),
        "{err}"
    );
    // the committed case itself is well inside the bound and passes
    let (passed, detail) = edited("cnf/cnf-2d-1block.json", &|_| {}).unwrap();
    assert!(passed, "{detail}");
    let err = edited("linesearch-rosenbrock-10d-f64.json", &|c| {
        c["hyper"]["max_backtracking_steps"] = serde_json::json!(1_000_000);
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("max_backtracking_steps = 1000000"), "{err}");
    let (passed, detail) = edited("linesearch-rosenbrock-10d-f64.json", &|c| {
        c["hyper"]["max_backtracking_steps"] =
            serde_json::json!(harness::golden::MAX_GOLDEN_BACKTRACKING_STEPS);
    })
    .unwrap();
    assert!(passed, "{detail}");
    assert!(start.elapsed().as_secs() < 60);
}
