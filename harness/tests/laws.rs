//! Every pure law passes on the reference; every RAdam mutant is caught with a small
//! counterexample. (Memory laws and the memory mutant live in `memory.rs`, serialised.)

harness::install_counting_allocator!();

mod common;
use common::{assert_law_holds, planted_bug_caught};
use harness::laws;

#[test]
fn radam_where_matches_branch_bitwise() {
    assert_law_holds("radam_where_matches_branch_bitwise");
}

#[test]
fn forms_law_catches_a_branch_form_rectifying_late() {
    use harness::laws::radam::where_matches_branch_with;
    use harness::laws::strategies::opt_case;
    use harness::mutants::radam_forms::branch_rectifying_late;
    let c = planted_bug_caught("radam_where_matches_branch_bitwise", opt_case(12), |c| {
        where_matches_branch_with(c, &branch_rectifying_late)
    });
    assert!(c.contains("updates"), "{c}");
    println!("{c}");
}

#[test]
fn forms_law_catches_a_branch_form_whose_constructor_rejects_what_the_where_form_accepts() {
    use harness::laws::radam::where_matches_branch_with;
    use harness::laws::strategies::opt_case;
    use harness::optim::{self, RadamHyper, Selection};
    // the Branch form refuses every threshold below 1e9: a one-sided rejection, not a skip
    let refusing = |lr: f64, h: RadamHyper| {
        if h.threshold < 1e9 {
            Err(harness::reference::Error::InvalidHyper {
                name: "threshold",
                value: h.threshold.to_string(),
                expected: "at least 1e9 (planted)".into(),
            })
        } else {
            optim::radam(lr, h, Selection::Branch)
        }
    };
    let c = planted_bug_caught("radam_where_matches_branch_bitwise", opt_case(12), |c| {
        where_matches_branch_with(c, &refusing)
    });
    assert!(c.contains("constructors disagree"), "{c}");
}

#[test]
fn a_mutant_counts_as_caught_only_by_a_property_failure_not_by_an_aborted_run() {
    use harness::mutants::{run, Mutant};
    let mutant = |run: fn() -> Result<(), String>| Mutant {
        name: "planted",
        incident: "none",
        law: "planted",
        run,
    };
    // every case rejected: proptest aborts, and that error says nothing about the bug
    let aborted = run(&mutant(|| {
        laws::check_property(
            "planted",
            16,
            laws::DEFAULT_SEED,
            proptest::strategy::Strategy::prop_filter(
                proptest::prelude::any::<u8>(),
                "none",
                |_| false,
            ),
            |_| Ok(()),
        )
    }));
    assert!(!aborted.caught, "{:?}", aborted.counterexample);
    assert!(aborted.counterexample.unwrap().starts_with("aborted"));
    let setup = run(&mutant(|| Err("could not build the subject".into())));
    assert!(!setup.caught);
    let failed = run(&mutant(|| {
        laws::check_property("planted", 16, laws::DEFAULT_SEED, 0u8..=255, |&x| {
            if x < 100 {
                Ok(())
            } else {
                Err(format!("{x} >= 100"))
            }
        })
    }));
    assert!(failed.caught);
    assert!(failed
        .counterexample
        .unwrap()
        .contains("minimal input: 100"));
}

#[test]
fn schedule_law_catches_a_scaling_rectifying_late() {
    use harness::laws::radam::follows_schedule_with;
    use harness::laws::strategies::opt_case;
    use harness::mutants::radam_forms::scaling_rectifying_late;
    let c = planted_bug_caught("radam_follows_schedule", opt_case(16), |c| {
        follows_schedule_with(c, &scaling_rectifying_late)
    });
    assert!(c.contains("rectified"), "{c}");
    println!("{c}");
}

#[test]
fn radam_branches_are_finite_for_finite_inputs() {
    assert_law_holds("radam_branches_finite");
}

#[test]
fn radam_is_momentum_before_threshold_and_scaled_adam_after() {
    assert_law_holds("radam_follows_schedule");
}

#[test]
fn fused_adam_and_radam_match_composed_bitwise() {
    assert_law_holds("fused_matches_composed_bitwise");
}

#[test]
fn moment_state_signature_is_fixed_and_loop_traces_once() {
    assert_law_holds("moment_state_signature_fixed");
}

#[test]
fn every_registered_law_has_a_test_or_runs_in_memory_binary() {
    // Guards against registering a law that no test runs.
    let tested = [
        "radam_where_matches_branch_bitwise",
        "radam_branches_finite",
        "radam_follows_schedule",
        "fused_matches_composed_bitwise",
        "moment_state_signature_fixed",
        "radam_steps_trace_once_memory_flat",
        // harness/tests/ode.rs
        "ode_convergence_order",
        "ode_step_control",
        "ode_round_trip_and_reproducible",
        "ode_bad_input_is_typed_error",
        "ode_grad_backward_matches_finite_differences",
        // tests/linesearch.rs
        "linesearch_armijo_on_success",
        "linesearch_evaluations_bounded",
        "linesearch_convex_quadratic_monotone",
        "linesearch_trace_once",
        "linesearch_nonfinite_zero_step",
        "linesearch_value_along_matches_candidate",
        // tests/muon.rs
        "muon_state_fixed_traces_iterations",
        "muon_transpose_symmetry",
        "muon_planned_matches_composed",
        "muon_singular_value_band",
        "muon_zero_gradient_zero_update",
        "muon_sharding_and_order_invariant",
        // tests/stack.rs
        "stack_strategies_bitwise_identical",
        "stack_f16_init_is_cast_of_f32",
        "stack_scan_equals_unrolled",
        // tests/memory.rs
        "stack_peak_within_bound",
        "stack_chunked_within_one_percent",
        "stack_scan_memory_flat",
        "ode_grad_matches_finite_differences",
        "ode_grad_checkpointed_equals_full_tape",
        // harness/tests/memory.rs
        "ode_grad_checkpoint_memory_bound",
        "cnf_train_trace_once",
        // harness/tests/cnf.rs
        "cnf_linear_field_closed_form",
        "cnf_sample_then_evaluate",
        "cnf_density_normalised",
        "cnf_exact_trace_matches_fd",
        "cnf_hutchinson_unbiased",
        "cnf_loss_gradient_matches_fd",
        "cnf_hand_vjp_matches_tape",
        // harness/tests/faces.rs
        "ode_step_faces_agree",
        "linesearch_faces_agree",
        "stack_faces_agree",
        "cnf_field_faces_agree",
    ];
    for law in laws::registry() {
        assert!(
            tested.contains(&law.name),
            "law {} has no test (add it to a tests/*.rs file and to this list)",
            law.name
        );
    }
}

/// Laws shown failing on a planted bug by a test of another shape than
/// `planted_bug_caught("law", ..)` / `caught("law", ..)` or a row of `harness mutants`: the law,
/// the test file and the test function.
const FAILING_ELSEWHERE: &[(&str, &str, &str)] = &[
    (
        "cnf_linear_field_closed_form",
        "cnf.rs",
        "linear_law_catches_each_flow_mutation",
    ),
    (
        "cnf_sample_then_evaluate",
        "cnf.rs",
        "round_trip_law_fails_when_evaluation_does_not_reverse_the_blocks",
    ),
    (
        "cnf_density_normalised",
        "cnf.rs",
        "a_consistent_trace_sign_flip_passes_the_round_trip_but_not_normalisation",
    ),
    (
        "cnf_exact_trace_matches_fd",
        "cnf.rs",
        "exact_trace_law_fails_on_a_trace_that_reads_one_diagonal_entry",
    ),
    (
        "cnf_hutchinson_unbiased",
        "cnf.rs",
        "hutchinson_law_fails_on_probes_with_variance_one_third",
    ),
    (
        "cnf_loss_gradient_matches_fd",
        "cnf.rs",
        "gradient_law_fails_when_the_trace_is_detached_from_the_tape",
    ),
    (
        "cnf_hand_vjp_matches_tape",
        "cnf.rs",
        "hand_vjp_law_fails_when_the_hand_written_vjp_drops_the_trace_cotangent",
    ),
    (
        "linesearch_value_along_matches_candidate",
        "linesearch.rs",
        "a_value_along_that_rounds_the_candidate_differently_is_caught_with_a_small_case",
    ),
    (
        "ode_convergence_order",
        "ode.rs",
        "convergence_law_fails_on_a_midpoint_with_wrong_weights",
    ),
    (
        "ode_grad_matches_finite_differences",
        "ode.rs",
        "finite_difference_law_fails_when_a_stage_drops_its_theta_term",
    ),
    (
        "ode_grad_backward_matches_finite_differences",
        "ode.rs",
        "backward_finite_difference_law_fails_when_a_stage_drops_its_theta_term",
    ),
    (
        "ode_grad_checkpointed_equals_full_tape",
        "ode.rs",
        "bitwise_law_fails_on_checkpoints_rounded_to_f32",
    ),
    (
        "ode_grad_checkpoint_memory_bound",
        "memory.rs",
        "ode_gradient_memory_figures_and_store_every_state_mutant_fails_the_bound",
    ),
    (
        "stack_scan_memory_flat",
        "memory.rs",
        "stack_scan_memory_law_catches_a_scan_that_keeps_every_activation",
    ),
    (
        "stack_chunked_within_one_percent",
        "memory.rs",
        "stack_vmap_fp32_mutant_is_caught_and_prints_the_measured_ratio",
    ),
    (
        "moment_state_signature_fixed",
        "subjects.rs",
        "each_optimizer_law_fails_on_its_planted_bug_with_a_small_counterexample",
    ),
];

#[test]
fn every_registered_law_is_shown_failing_on_a_planted_bug() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let source = |file: &str| -> String {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        text.chars().filter(|c| !c.is_whitespace()).collect()
    };
    let mut all = String::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rs") {
            all += &source(p.file_name().unwrap().to_str().unwrap());
        }
    }
    let mutant_laws: Vec<&str> = harness::mutants::registry().iter().map(|m| m.law).collect();
    for (law, file, test) in FAILING_ELSEWHERE {
        assert!(
            source(file).contains(&format!("fn{test}(")),
            "{law}: no test `{test}` in tests/{file}"
        );
    }
    let missing: Vec<&str> = laws::registry()
        .iter()
        .map(|l| l.name)
        .filter(|name| {
            !all.contains(&format!("caught(\"{name}\""))
                && !mutant_laws.contains(name)
                && !FAILING_ELSEWHERE.iter().any(|(l, ..)| l == name)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "laws with no test showing them fail on a planted bug: {missing:?}"
    );
}

#[test]
fn radam_unsafe_where_mutant_is_caught_with_small_counterexample() {
    let reports = harness::mutants::run_all(Some("radam-unsafe-where"));
    let r = &reports[0];
    assert!(r.caught, "radam-unsafe-where was not caught");
    let c = r.counterexample.as_deref().unwrap();
    assert!(c.contains("branch is NaN"), "{c}");
    // shrunk to at most a few steps over one element
    assert!(
        c.contains("grads(1 steps)")
            || c.contains("grads(2 steps)")
            || c.contains("grads(3 steps)")
            || c.contains("grads(4 steps)"),
        "{c}"
    );
    assert!(
        c.contains("params=[0.0]"),
        "counterexample not shrunk to one element: {c}"
    );
}

#[test]
fn reference_rectifier_is_nan_exactly_where_optax_is() {
    // Closed form (`docs/ALGORITHMS.md` §2): with default b2 the square-root argument is negative
    // for 2 < rho_t < 4, i.e. steps 3 and 4; rho_1 = 1 for every b2.
    let h = harness::optim::RadamHyper::default();
    let nan_steps: Vec<i32> = (1..=10)
        .filter(|&t| h.rectification(t).r.is_nan())
        .collect();
    assert_eq!(nan_steps, vec![3, 4]);
    assert_eq!(h.rectification(1).rho_t, 1.0);
    assert!((1..=10).all(|t| h.rectification(t).r_where().is_finite()));
}

#[test]
fn static_key_changes_with_every_adam_and_radam_hyperparameter() {
    // The static key is what `jax.jit` would close over: two optimizers that differ in any
    // hyperparameter must not share a trace.
    use harness::optim::{adam, radam, AdamHyper, RadamHyper, Selection, Transform};
    let base = AdamHyper::default();
    let variants = [
        AdamHyper { b1: 0.5, ..base },
        AdamHyper { b2: 0.9, ..base },
        AdamHyper { eps: 1e-6, ..base },
        AdamHyper {
            eps_root: 1e-8,
            ..base
        },
        AdamHyper {
            nesterov: true,
            ..base
        },
    ];
    let adam_key = |h: AdamHyper| Transform::<f32>::static_key(&adam(0.1, h).unwrap());
    let radam_key = |h: AdamHyper| {
        let hyper = RadamHyper {
            moments: h,
            ..RadamHyper::default()
        };
        Transform::<f32>::static_key(&radam(0.1, hyper, Selection::Where).unwrap())
    };
    assert_eq!(adam_key(base), adam_key(AdamHyper::default()));
    for v in variants {
        assert_ne!(adam_key(v), adam_key(base), "adam {v:?}");
        assert_ne!(radam_key(v), radam_key(base), "radam {v:?}");
    }
}

/// The f16 case of the fuzz crash `radam/update-overflows-f16-when-v-forgets`, minimised by hand:
/// `b2 = 1e-300` makes `v` forget step 1's gradient at step 2 while `m` (b1 = 0.9) keeps 9% of it;
/// threshold 0 selects the rectifier (`rho_inf = rho_t = 1`, `r = 1`).
fn v_forgets_case() -> laws::strategies::OptCase {
    use harness::optim::{AdamHyper, RadamHyper};
    laws::strategies::OptCase {
        hyper: RadamHyper {
            moments: AdamHyper {
                b2: 1e-300,
                ..AdamHyper::default()
            },
            threshold: 0.0,
        },
        learning_rate: 1e-3,
        dtype: harness::backend::DType::F16,
        params: vec![0.0],
        grads: vec![vec![-0.0848], vec![0.0]],
    }
}

#[test]
fn radam_update_overflows_f16_when_v_forgets_and_the_domain_excludes_it() {
    let case = v_forgets_case();
    // Closed form at step 2: m_hat = 0.9 * 0.1 * g1 / (1 - 0.81) = -0.0402, v_hat = 1e-300 *
    // 0.0072 (sqrt 8.5e-152), so the update is m_hat / (8.5e-152 + 1e-8) = -4.0e6: beyond f16's
    // 65504, it rounds to -inf. The documented result, as in optax (the ratio is not bounded by
    // anything but eps when b2 < b1^2).
    let ([_, _, update], _) = measured_and_bounds::<half::f16>(&case)[1];
    assert_eq!(update, f64::INFINITY);
    let bound = laws::radam::update_bound::<half::f16>(&case);
    assert!(bound >= 4.0e6, "bound {bound:e} below the exact update");
    assert!(!laws::radam::finiteness_domain(&case));
    // The same case in f32 fits: the eps arm bounds the ratio by 0.0848 / 1e-8 = 8.5e6.
    let f32_case = laws::strategies::OptCase {
        dtype: harness::backend::DType::F32,
        ..case
    };
    assert!(laws::radam::finiteness_domain(&f32_case));
    laws::radam::branches_finite(&f32_case, &laws::radam::Reference).unwrap();
}

#[test]
fn default_f16_radam_with_unit_gradients_stays_in_the_finiteness_domain() {
    // The Cauchy-Schwarz arm of `update_bound` is what keeps realistic f16 cases covered: with
    // eps = 1e-8 the eps arm alone would allow only |g| < 8e-5.
    let mut case = v_forgets_case();
    case.hyper = harness::optim::RadamHyper::default();
    case.grads = (0..16)
        .map(|t| vec![if t % 3 == 0 { 3.0 } else { -1.0 }])
        .collect();
    let bound = laws::radam::update_bound::<half::f16>(&case);
    assert!(bound <= 6.0, "bound {bound} (the momentum arm alone is 3)");
    assert!(laws::radam::finiteness_domain(&case));
    laws::radam::branches_finite(&case, &laws::radam::Reference).unwrap();
}

/// `update_bound` really bounds what the kernels compute: every branch (arithmetic dtype) and
/// every update (params dtype) of the reference, for cases inside the domain, including tiny `b2`
/// (where only the eps arm is finite). Deterministic: the harness's fixed seed, `PROPTEST_CASES`
/// raises the count at night.
#[test]
fn update_bound_bounds_every_branch_and_update_of_the_reference() {
    use harness::backend::DType;
    use proptest::prelude::*;
    let run = laws::RunConfig::new(None, None).unwrap();
    let strategy = (
        laws::strategies::opt_case(16),
        proptest::option::of(-300i32..-1),
    )
        .prop_map(|(mut case, tiny_b2)| {
            if let Some(e) = tiny_b2 {
                case.hyper.moments.b2 = 10f64.powi(e);
            }
            case
        });
    // cases inside the domain per dtype (f16, f32, f64), and those with b2 < 1e-6
    let inside = std::cell::Cell::new([0usize; 4]);
    let result = laws::check_property(
        "update_bound",
        run.cases.unwrap_or(512),
        run.seed,
        strategy,
        |case| {
            if !laws::radam::finiteness_domain(case) {
                return Ok(());
            }
            let mut n = inside.get();
            n[match case.dtype {
                DType::F16 => 0,
                DType::F32 => 1,
                _ => 2,
            }] += 1;
            n[3] += usize::from(case.hyper.moments.b2 < 1e-6);
            inside.set(n);
            let steps = match case.dtype {
                DType::F16 => measured_and_bounds::<half::f16>(case),
                DType::F32 => measured_and_bounds::<f32>(case),
                _ => measured_and_bounds::<f64>(case),
            };
            // f16 output rounding is 2^-11 relative; the arithmetic dtype adds a few f32 ULPs.
            let within = |x: f64, b: f64| x <= b * (1.0 + 1e-3);
            for (t, ([m, r, u], [bm, br])) in steps.into_iter().enumerate() {
                let step = t + 1;
                if !within(m, bm) {
                    return Err(format!("step {step}: |m_hat| = {m:e} > bound {bm:e}"));
                }
                if !within(r, br) {
                    return Err(format!(
                        "step {step}: rectified branch {r:e} > bound {br:e}"
                    ));
                }
                if !within(u, bm.max(br)) {
                    return Err(format!(
                        "step {step}: update {u:e} > both bounds {bm:e}, {br:e}"
                    ));
                }
            }
            Ok(())
        },
    );
    result.unwrap();
    let n = inside.get();
    assert!(
        n.iter().all(|&k| k >= 20),
        "too few cases inside the domain to test the bound (f16, f32, f64, tiny b2): {n:?}"
    );
}

/// Per step, the largest magnitude in the momentum branch, the rectified branch and the update,
/// beside `laws::radam::branch_bounds` for the same step.
fn measured_and_bounds<E: harness::backend::Float>(
    case: &laws::strategies::OptCase,
) -> Vec<([f64; 3], [f64; 2])> {
    use harness::optim::{ScaleByRadam, Selection, Transform};
    let opt = ScaleByRadam::new(case.hyper, Selection::Where).unwrap();
    let params = laws::radam::leaf::<E>(&case.params);
    let Ok(mut state) = opt.init(&params) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for g in &case.grads {
        let g = laws::radam::leaf::<E>(g);
        let br = opt.branches(&g, &state, &params).unwrap();
        let (u, next) = opt.update(&g, &state, &params).unwrap();
        out.push([
            max_abs(br.momentum.get("w").unwrap().data()),
            max_abs(br.rectified.get("w").unwrap().data()),
            max_abs(u.get("w").unwrap().data()),
        ]);
        state = next;
    }
    out.into_iter()
        .zip(laws::radam::branch_bounds::<E>(case))
        .collect()
}

fn max_abs<F: harness::backend::Float>(xs: &[F]) -> f64 {
    xs.iter().map(|x| x.as_f64().abs()).fold(0.0, f64::max)
}

#[test]
fn branch_bounds_drop_the_cauchy_schwarz_arm_where_v_underflows() {
    // f32, eps = 1e-30, b2 = 0.3: v_1 = 0.7 * 1e-40 is subnormal and shrinks by 0.3 a step to 0
    // by step 16 (0.3^15 * 7e-41 < 1.4e-45), while m_16 = 0.1 * 0.9^15 * 1e-20 = 2.1e-22 stays
    // normal. The kernel's ratio is then m_hat / eps = 2.5e8, although in exact arithmetic
    // Cauchy-Schwarz bounds it by c sqrt(S_16 / (1 - b2)) / (1 - b1^16) = 318 (q = 0.81 / 0.3).
    let mut case = v_forgets_case();
    case.dtype = harness::backend::DType::F32;
    case.hyper.moments.b2 = 0.3;
    case.hyper.moments.eps = 1e-30;
    case.grads = std::iter::once(vec![1e-20])
        .chain(std::iter::repeat_n(vec![0.0], 15))
        .collect();
    let ([_, rectified, _], [_, bound]) = measured_and_bounds::<f32>(&case)[15];
    assert!(rectified > 1e8, "v did not underflow: {rectified:e}");
    assert!(rectified <= bound, "{rectified:e} > {bound:e}");
}

/// Every committed failure record (fixtures/regressions/laws/, written by runs with
/// HARNESS_FAILURE_DIR set, as the nightly runs) is replayed: the law must hold on it.
#[test]
fn every_recorded_law_failure_replays_and_holds_now() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/regressions/laws");
    // `load` reads a missing directory as holding no records: the directory must be there, and
    // hold nothing but records and its README, so that no record is skipped unread
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(files.iter().any(|f| f == "README.md"), "{files:?}");
    let records = laws::persist::load(&dir).unwrap();
    assert_eq!(records.len(), files.len() - 1, "not a record: {files:?}");
    for (path, record) in records {
        let r = laws::persist::replay(&record, laws::find).unwrap();
        assert!(
            r.passed,
            "{} (recorded in {}) fails again:\n{}",
            record.law,
            path.display(),
            r.counterexample.unwrap_or_default()
        );
    }
}

/// A failure planted on purpose is recorded, and replaying the record reproduces the same
/// shrunk counterexample (the next `cargo test` would fail on it until the law holds).
#[test]
fn a_planted_property_failure_is_recorded_and_replayed() {
    use laws::{Family, Law};
    fn planted() -> Law {
        Law {
            name: "planted_sum_below_ten",
            family: Family::Numerics,
            summary: "a deliberately false property: a + b < 10 for a, b in 0..100",
            default_cases: 64,
            measures_memory: false,
            run: |c, s| {
                laws::check_property(
                    "planted_sum_below_ten",
                    c,
                    s,
                    (0u32..100, 0u32..100),
                    |(a, b)| {
                        if a + b < 10 {
                            Ok(())
                        } else {
                            Err(format!("{a} + {b} >= 10"))
                        }
                    },
                )
            },
        }
    }
    let find = |name: &str| (name == "planted_sum_below_ten").then(planted);
    let dir = std::env::temp_dir().join(format!("harness-persist-{}", std::process::id()));
    let cfg = laws::RunConfig::new(Some(32), Some(20261124)).unwrap();
    let first = laws::run(&planted(), cfg);
    assert!(!first.passed);
    let path = laws::persist::record(&dir, &first, cfg.seed).unwrap();
    let records = laws::persist::load(&dir).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].0, path);
    let again = laws::persist::replay(&records[0].1, find).unwrap();
    assert!(!again.passed, "the replay did not fail");
    assert_eq!(
        again.counterexample, first.counterexample,
        "the replay shrank elsewhere"
    );
    assert!(
        first
            .counterexample
            .as_deref()
            .unwrap()
            .contains("minimal input: (0, 10)"),
        "{:?}",
        first.counterexample
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
