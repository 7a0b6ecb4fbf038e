//! Muon: every law holds on the reference, the captured-coefficients mutant is caught with a
//! small counterexample, coefficients are validated by `init` with typed errors, and the golden
//! muon cases replay.

harness::install_counting_allocator!();

mod common;
use common::{assert_law_holds, planted_bug_caught as caught};

use harness::backend::Array;
use harness::optim::muon::{MuonStepper, Sharding};
use harness::optim::{CoeffSpec, Muon, MuonHyper, Transform};
use harness::reference::Error;
use harness::tree::Tree;

#[test]
fn state_signature_coeffs_traces_and_iterations() {
    assert_law_holds("muon_state_fixed_traces_iterations");
}

#[test]
fn orthogonalising_the_transpose_gives_the_transpose() {
    assert_law_holds("muon_transpose_symmetry");
}

#[test]
fn planned_newton_schulz_matches_composed() {
    assert_law_holds("muon_planned_matches_composed");
}

#[test]
fn singular_values_stay_in_the_preset_band() {
    assert_law_holds("muon_singular_value_band");
}

#[test]
fn transpose_law_catches_tall_inputs_taking_another_code_path() {
    use harness::laws::muon::{mat_case, transpose_symmetry_with};
    use harness::mutants::muon_ns::TallSideComposed;
    let c = caught("muon_transpose_symmetry", mat_case(24), |c| {
        transpose_symmetry_with(c, &TallSideComposed)
    });
    assert!(c.contains("orth(X^T)["), "{c}");
    println!("{c}");
}

#[test]
fn singular_value_law_catches_a_dropped_iteration() {
    use harness::laws::muon::{band_case, singular_value_band_with};
    use harness::mutants::muon_ns::OneIterationShort;
    let c = caught("muon_singular_value_band", band_case(), |c| {
        singular_value_band_with(c, &OneIterationShort)
    });
    assert!(c.contains("singular value"), "{c}");
    println!("{c}");
}

#[test]
fn zero_gradient_law_catches_a_normalisation_without_eps() {
    use harness::laws::muon::{muon_case, zero_gradient_zero_update_with};
    use harness::mutants::muon_ns::NormWithoutEps;
    let c = caught("muon_zero_gradient_zero_update", muon_case(), |c| {
        zero_gradient_zero_update_with(c, &|h| Muon::new(h).map(NormWithoutEps))
    });
    assert!(c.contains("NaN"), "{c}");
    println!("{c}");
}

#[test]
fn fixed_state_law_catches_coefficients_stored_back_through_f32() {
    use harness::laws::muon::{muon_case, state_fixed_traces_iterations_with};
    use harness::mutants::muon_ns::CoeffsThroughF32;
    let c = caught("muon_state_fixed_traces_iterations", muon_case(), |c| {
        state_fixed_traces_iterations_with(c, &|h| Muon::new(h).map(CoeffsThroughF32))
    });
    assert!(c.contains("ns_coeffs changed"), "{c}");
    println!("{c}");
}

#[test]
fn zero_gradient_gives_zero_update() {
    assert_law_holds("muon_zero_gradient_zero_update");
}

#[test]
fn sharded_and_reordered_runs_are_bit_identical() {
    assert_law_holds("muon_sharding_and_order_invariant");
}

#[test]
fn captured_coeffs_mutant_is_caught_with_small_counterexample() {
    let reports = harness::mutants::run_all(Some("muon-captured-coeffs"));
    let r = &reports[0];
    assert!(r.caught, "muon-captured-coeffs was not caught");
    let c = r.counterexample.as_deref().unwrap();
    // An f64 group updated after an f32/f16 one (whose arithmetic dtype captured the coefficients).
    assert!(c.contains("float64"), "{c}");
    assert!(c.contains("F32") || c.contains("F16"), "{c}");
    assert!(c.contains("steps: 1"), "not shrunk to one step: {c}");
}

fn params() -> Tree<f64> {
    Tree::from_leaves([
        (
            "w".to_string(),
            Array::new(vec![3, 2], vec![0.1, -0.2, 0.3, 0.4, -0.5, 0.6]).unwrap(),
        ),
        ("b".to_string(), Array::vector(vec![0.5, -0.5])),
    ])
    .unwrap()
}

#[test]
fn invalid_coefficients_are_typed_errors_from_init() {
    for (spec, steps) in [
        (CoeffSpec::single([1.0, f64::INFINITY, 0.0]), 5),
        (CoeffSpec::rows(&[[1.0, 0.0, 0.0]; 6]), 5),
        (
            CoeffSpec::Raw {
                shape: vec![2, 2],
                data: vec![0.0; 4],
            },
            5,
        ),
        (CoeffSpec::Preset("polar".into()), 5),
        (CoeffSpec::Preset("dion".into()), 3),
    ] {
        let opt = Muon::new(MuonHyper {
            ns_coeffs: spec.clone(),
            ns_steps: steps,
            ..MuonHyper::new(0.02)
        })
        .unwrap();
        let e = Transform::<f64>::init(&opt, &params()).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidHyper {
                    name: "ns_coeffs",
                    ..
                }
            ),
            "{spec:?}: {e}"
        );
    }
}

#[test]
fn dion_preset_values_are_optax_values() {
    // optax 0.2.8 _DION_NS_COEFFS (`docs/ALGORITHMS.md` §3), first and last rows.
    let opt = Muon::new(MuonHyper {
        ns_coeffs: CoeffSpec::Preset("dion".into()),
        ..MuonHyper::new(0.02)
    })
    .unwrap();
    let s = Transform::<f64>::init(&opt, &params()).unwrap();
    assert_eq!(s.ns_coeffs.shape(), &[5, 3]);
    assert_eq!(&s.ns_coeffs.data()[..3], &[4.0848, -6.8946, 2.9270]);
    assert_eq!(&s.ns_coeffs.data()[12..], &[2.8366, -3.0525, 1.2012]);
}

#[test]
fn sharded_stepper_matches_transform_update_for_every_k() {
    let opt = Muon::new(MuonHyper::new(0.02)).unwrap();
    let p0 = params();
    let g = p0.clone();
    let (want, _) = opt.update(&g, &opt.init(&p0).unwrap(), &p0).unwrap();
    for k in 1..=3 {
        let mut p = p0.clone();
        let mut st = MuonStepper::new(&opt, &p, Sharding::round_robin(k)).unwrap();
        let got = st.step(&mut p, &g).unwrap();
        assert_eq!(got, want, "K = {k}");
    }
}

#[test]
fn update_sharded_without_a_plan_cache_per_shard_is_a_typed_error() {
    // Two shards with one plan cache, and zero shards: each a typed `shards` error, before any
    // leaf is touched (no index past the caches, no `i % 0`).
    use harness::optim::muon::shard::fresh_plans;
    let opt = Muon::new(MuonHyper::new(0.02)).unwrap();
    let p = params();
    let state = opt.init(&p).unwrap();
    for (shards, caches) in [(2, 1), (0, 0), (3, 2)] {
        let mut plans = fresh_plans(caches);
        let e = opt
            .update_sharded(&p, &state, &p, &Sharding::round_robin(shards), &mut plans)
            .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidHyper { name: "shards", .. }),
            "{shards} shards, {caches} caches: {e}"
        );
    }
}

#[test]
fn golden_muon_cases_pass() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/golden");
    let mut n = 0;
    for f in harness::golden::collect(&[root]).unwrap() {
        if !f
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("muon-")
        {
            continue;
        }
        let r = harness::golden::replay(&harness::golden::load(&f).unwrap()).unwrap();
        assert!(r.passed, "{}: {}", r.name, r.detail);
        n += 1;
    }
    assert!(n >= 10, "only {n} muon cases");
}
