//! Every pure law passes on the reference; every RAdam mutant is caught with a small
//! counterexample. (Memory laws and the memory mutant live in `memory.rs`, serialised.)

mod common;
use common::assert_law_holds;
use harness::laws;

#[test]
fn radam_where_matches_branch_bitwise() {
    assert_law_holds("radam_where_matches_branch_bitwise");
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
    ];
    for law in laws::registry() {
        assert!(
            tested.contains(&law.name),
            "law {} has no test (add it to a tests/*.rs file and to this list)",
            law.name
        );
    }
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
    // Closed form (ALGORITHMS.md §2): with default b2 the square-root argument is negative for
    // 2 < rho_t < 4, i.e. steps 3 and 4; rho_1 = 1 for every b2.
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
