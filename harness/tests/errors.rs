//! Bad input never panics: invalid hyperparameters, mismatched shapes and dtype-specific
//! underflow are typed errors naming the problem, and a failed update leaves the state intact.

harness::install_counting_allocator!();

use harness::backend::Array;
use harness::optim::{self, AdamHyper, FusedMoments, RadamHyper, Selection, Transform};
use harness::reference::Error;
use harness::tree::Tree;

fn tree(n: usize) -> Tree<f32> {
    Tree::from_leaves([("w".to_string(), Array::vector(vec![1.0; n]))]).unwrap()
}

#[test]
fn out_of_range_hyperparameters_name_the_parameter_and_range() {
    let cases = [
        (
            AdamHyper {
                b1: 1.0,
                ..Default::default()
            },
            "b1",
        ),
        (
            AdamHyper {
                b2: -0.1,
                ..Default::default()
            },
            "b2",
        ),
        (
            AdamHyper {
                b2: f64::NAN,
                ..Default::default()
            },
            "b2",
        ),
        (
            AdamHyper {
                eps: -1e-8,
                ..Default::default()
            },
            "eps",
        ),
        (
            AdamHyper {
                eps_root: f64::INFINITY,
                ..Default::default()
            },
            "eps_root",
        ),
    ];
    for (h, name) in cases {
        let e = optim::adam(1e-3, h).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidHyper { name: n, .. } if *n == name),
            "{e}"
        );
        assert!(e.to_string().contains(name));
    }
    let e = optim::radam(f64::NAN, RadamHyper::default(), Selection::Where).unwrap_err();
    assert!(e.to_string().contains("learning_rate"), "{e}");
    let h = RadamHyper {
        threshold: f64::INFINITY,
        ..Default::default()
    };
    assert!(optim::radam(1e-3, h, Selection::Branch)
        .unwrap_err()
        .to_string()
        .contains("threshold"));
}

#[test]
fn eps_that_rounds_to_zero_in_the_arithmetic_dtype_is_rejected() {
    let h = AdamHyper {
        eps: 1e-50,
        ..Default::default()
    };
    let e = FusedMoments::adam(1e-3, h, &tree(2))
        .err()
        .expect("must reject");
    assert!(
        e.to_string().contains("must not round to 0 in float32"),
        "{e}"
    );
    // the same eps is fine in f64
    let p64 = Tree::from_leaves([("w".to_string(), Array::vector(vec![1.0f64]))]).unwrap();
    assert!(FusedMoments::adam(1e-3, h, &p64).is_ok());
}

#[test]
fn f16_params_keep_moments_in_f32_so_default_eps_is_safe() {
    // 1e-8 rounds to 0 in f16 (smallest subnormal 6e-8); moments and eps live in f32 instead,
    // so a zero gradient gives a zero update, not 0/0.
    let p = Tree::from_leaves([("w".to_string(), Array::vector(vec![half::f16::ONE; 3]))]).unwrap();
    let g = p.zeros_like::<half::f16>();
    let opt = optim::adam(1e-3, AdamHyper::default()).unwrap();
    let s = opt.init(&p).unwrap();
    let (u, _) = opt.update(&g, &s, &p).unwrap();
    assert!(u.get("w").unwrap().data().iter().all(|x| x.to_f32() == 0.0));
}

#[test]
fn mismatched_shapes_are_typed_errors_and_state_is_untouched() {
    let opt = optim::radam(1e-3, RadamHyper::default(), Selection::Where).unwrap();
    let p = tree(3);
    let s = opt.init(&p).unwrap();
    let e = opt.update(&tree(4), &s, &p).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let other = Tree::from_leaves([("v".to_string(), Array::vector(vec![1.0f32; 3]))]).unwrap();
    assert!(matches!(
        opt.update(&other, &s, &p).unwrap_err(),
        Error::Structure(_)
    ));

    let mut fused = FusedMoments::radam(1e-3, RadamHyper::default(), Selection::Where, &p).unwrap();
    let mut params = p.clone();
    assert!(fused.step(&mut params, &tree(5)).is_err());
    assert_eq!(
        fused.state().count,
        0,
        "a rejected step must not advance the state"
    );
    assert_eq!(params, p, "a rejected step must not touch the parameters");
}

#[test]
fn array_data_length_must_match_shape() {
    let e = Array::new(vec![2, 3], vec![0.0f32; 5]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DataLength {
                expected: 6,
                got: 5,
                ..
            }
        ),
        "{e}"
    );
    assert!(matches!(
        Array::<f32>::zeros(&[usize::MAX, 2]).unwrap_err(),
        Error::Overflow(_)
    ));
}

#[test]
fn count_saturates_at_int32_max() {
    assert_eq!(optim::moments::safe_increment(i32::MAX), i32::MAX);
}

#[test]
fn zero_cases_and_unreadable_environment_values_are_usage_errors_not_silent_defaults() {
    use harness::laws::RunConfig;
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    assert!(RunConfig::from_sources(Some(0), None, env(&[]))
        .unwrap_err()
        .contains("0 cases"));
    for (var, value, needle) in [
        ("PROPTEST_CASES", "0", "0 cases"),
        ("PROPTEST_CASES", "4294967296", "PROPTEST_CASES"),
        ("PROPTEST_CASES", "abc", "PROPTEST_CASES"),
        ("HARNESS_SEED", "abc", "HARNESS_SEED"),
        ("HARNESS_SEED", "-1", "HARNESS_SEED"),
    ] {
        let pairs: &'static [(&'static str, &'static str)] = Box::leak(Box::new([(var, value)]));
        let e = RunConfig::from_sources(None, None, env(pairs)).unwrap_err();
        assert!(e.contains(needle), "{var}={value}: {e}");
    }
    let ok = RunConfig::from_sources(
        None,
        None,
        env(&[("PROPTEST_CASES", "7"), ("HARNESS_SEED", "9")]),
    )
    .unwrap();
    assert_eq!((ok.cases, ok.seed), (Some(7), 9));
    // an explicit flag wins over the variable
    let flag =
        RunConfig::from_sources(Some(3), Some(4), env(&[("PROPTEST_CASES", "abc")])).unwrap();
    assert_eq!((flag.cases, flag.seed), (Some(3), 4));
}

#[test]
fn an_output_that_is_an_input_another_output_or_inside_an_input_directory_is_refused() {
    use harness::report::output::Outputs;
    let dir = std::env::temp_dir().join(format!("harness-outputs-{}", std::process::id()));
    let cases = dir.join("cases");
    std::fs::create_dir_all(&cases).unwrap();
    let image = dir.join("ring.pgm");
    std::fs::write(&image, b"P5").unwrap();
    let same = |a: &std::path::Path| Outputs::new().input(&image).output("--svg", a).check();
    assert!(same(&image).unwrap_err().contains("is also an input"));
    // the same file through a different spelling
    let dotted = dir.join(".").join("ring.pgm");
    assert!(same(&dotted).unwrap_err().contains("is also an input"));
    let two = Outputs::new()
        .output("--json", dir.join("same.out"))
        .output("--svg", dir.join("same.out"))
        .check()
        .unwrap_err();
    assert!(two.contains("is also the output of --json"), "{two}");
    let inside = Outputs::new()
        .input(&cases)
        .output("--json", cases.join("results.json"))
        .check()
        .unwrap_err();
    assert!(inside.contains("inside the input directory"), "{inside}");
    let missing = Outputs::new()
        .output("--json", dir.join("no/such/dir/out.json"))
        .check()
        .unwrap_err();
    assert!(missing.contains("does not exist"), "{missing}");
    assert_eq!(
        std::fs::read(&image).unwrap(),
        b"P5",
        "the input is untouched"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
