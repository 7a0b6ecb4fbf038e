//! The ODE laws pass on the reference solvers; step sequences are snapshotted.

mod common;
use common::assert_law_holds;
use harness::laws;
use harness::ode::{fixtures::LotkaVolterra, solve, Controller, SolveOptions, Solver};

#[test]
fn every_method_converges_at_its_order() {
    assert_law_holds("ode_convergence_order");
}

#[test]
fn pid_accepts_below_one_never_shrinks_after_accept_and_shrinks_within_bounds_after_reject() {
    assert_law_holds("ode_step_control");
}

#[test]
fn forward_backward_returns_to_y0_and_constant_steps_are_reproducible() {
    assert_law_holds("ode_round_trip_and_reproducible");
}

#[test]
fn bad_solve_input_is_a_typed_error() {
    assert_law_holds("ode_bad_input_is_typed_error");
}

#[test]
fn convergence_law_fails_on_a_first_order_method_claiming_fifth_order() {
    // The law must be able to fail: Euler's error ratio measures ~2^1, far outside [4.75, 6.25].
    let c = laws::ode::RotationCase {
        alpha: 0.1,
        omega: 1.0,
        y0: [1.0, 0.0],
        t1: 1.0,
    };
    assert!(laws::ode::convergence_order(&c).is_ok());
    let field = harness::ode::fixtures::Linear::damped_rotation(0.1, 1.0).unwrap();
    let exact = harness::ode::fixtures::Linear::damped_rotation_exact(0.1, 1.0, [1.0, 0.0], 1.0);
    let err = |n: f64| {
        let s = solve(
            &field,
            &Solver::Euler.tableau(),
            &Controller::constant(1.0 / n).unwrap(),
            0.0,
            1.0,
            &[1.0, 0.0],
            &SolveOptions::default(),
        )
        .unwrap();
        (s.y_final[0] - exact[0]).hypot(s.y_final[1] - exact[1])
    };
    let p_hat = (err(16.0) / err(32.0)).log2();
    assert!(
        !(5.0 - laws::ode::ORDER_BAND.0..=5.0 + laws::ode::ORDER_BAND.1).contains(&p_hat),
        "{p_hat}"
    );
}

#[derive(serde::Serialize)]
struct StepSequence {
    solver: String,
    accepted: usize,
    rejected: usize,
    first_ts: Vec<f64>,
    y_final: Vec<f64>,
}

#[test]
fn step_sequences_for_each_solver_on_lotka_volterra() {
    let lv = LotkaVolterra::new(1.5, 1.0, 3.0, 1.0).unwrap();
    let r8 = |x: f64| (x * 1e8).round() / 1e8;
    let rows: Vec<StepSequence> = Solver::ALL
        .into_iter()
        .map(|s| {
            let ctl = if s == Solver::Euler {
                Controller::constant(0.01).unwrap()
            } else {
                Controller::pid(1e-6, 1e-8).unwrap()
            };
            let sol = solve(
                &lv,
                &s.tableau(),
                &ctl,
                0.0,
                2.0,
                &[1.0f64, 1.0],
                &SolveOptions::default(),
            )
            .unwrap();
            StepSequence {
                solver: s.to_string(),
                accepted: sol.stats.num_accepted_steps,
                rejected: sol.stats.num_rejected_steps,
                first_ts: sol.ts.iter().take(8).map(|&t| r8(t)).collect(),
                y_final: sol.y_final.iter().map(|&y| r8(y)).collect(),
            }
        })
        .collect();
    insta::assert_json_snapshot!(rows);
}

#[test]
fn solve_gradients_match_finite_differences() {
    assert_law_holds("ode_grad_matches_finite_differences");
}

#[test]
fn checkpointed_gradients_equal_the_full_tape_bitwise() {
    assert_law_holds("ode_grad_checkpointed_equals_full_tape");
}

fn lv_case(steps: Option<u32>) -> laws::ode::GradCase {
    laws::ode::GradCase {
        lv: Some([1.5, 1.0, 3.0, 1.0]),
        rotation: laws::ode::RotationCase {
            alpha: 0.0,
            omega: 1.0,
            y0: [1.0, 1.2],
            t1: 1.5,
        },
        solver: 5, // Tsit5
        steps,
        rtol: 1e-6,
        w: [0.7, -0.3],
    }
}

#[test]
fn finite_difference_law_fails_when_a_stage_drops_its_theta_term() {
    use harness::ode::grad::{GradMode, Mutation};
    for steps in [Some(12), None] {
        let c = lv_case(steps);
        let good = c.gradient(GradMode::FullTape, None).unwrap();
        let err = c.compare_with_fd(&good).unwrap();
        assert!(err < 1e-7, "reference FD error {err:e}");
        for stage in 0..6 {
            let bad = c
                .gradient(GradMode::FullTape, Some(Mutation::DropThetaOfStage(stage)))
                .unwrap();
            assert_eq!(
                bad.d_y0, good.d_y0,
                "y0 gradient does not involve the mutation"
            );
            let r = c.compare_with_fd(&bad);
            assert!(r.is_err(), "stage {stage}: mutant passed the FD law: {r:?}");
        }
    }
}

#[test]
fn bitwise_law_fails_on_checkpoints_rounded_to_f32() {
    use harness::ode::grad::Mutation;
    let c = lv_case(Some(12));
    assert!(laws::ode::checkpointed_equals_full_with(&c, None).is_ok());
    let r = laws::ode::checkpointed_equals_full_with(&c, Some(Mutation::RoundCheckpointsToF32));
    assert!(r.is_err(), "rounded checkpoints were not caught");
}

#[test]
fn gradient_rejects_mismatched_and_non_finite_input() {
    use harness::ode::fixtures::Linear;
    use harness::ode::grad::{gradient, GradMode};
    let lin = Linear::damped_rotation(0.1, 1.0).unwrap();
    let tab = Solver::Tsit5.tableau();
    let ctl = Controller::constant(0.1).unwrap();
    let o = SolveOptions::default();
    let run =
        |y0: &[f64], w: &[f64]| gradient(&lin, &tab, &ctl, 0.0, 1.0, y0, w, GradMode::FullTape, &o);
    assert!(matches!(
        run(&[1.0], &[1.0, 0.0]),
        Err(harness::Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        run(&[1.0, 0.0], &[1.0]),
        Err(harness::Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        run(&[f64::NAN, 0.0], &[1.0, 0.0]),
        Err(harness::Error::InvalidHyper { .. })
    ));
    assert!(matches!(
        run(&[1.0, 0.0], &[f64::INFINITY, 0.0]),
        Err(harness::Error::InvalidHyper { .. })
    ));
    let lv = LotkaVolterra {
        alpha: f64::NAN,
        beta: 1.0,
        gamma: 1.0,
        delta: 1.0,
    };
    assert!(matches!(
        gradient(
            &lv,
            &tab,
            &ctl,
            0.0,
            1.0,
            &[1.0, 1.0],
            &[1.0, 0.0],
            GradMode::FullTape,
            &o
        ),
        Err(harness::Error::InvalidHyper { .. })
    ));
}

#[test]
fn recomputed_final_state_equals_the_solve_bitwise_and_default_budget_is_diffrax() {
    use harness::ode::grad::{default_checkpoints, gradient, GradMode};
    assert_eq!(default_checkpoints(4096), 90);
    assert_eq!(default_checkpoints(1), 1);
    let lv = LotkaVolterra::new(1.5, 1.0, 3.0, 1.0).unwrap();
    for s in Solver::ALL {
        let ctl = if s.tableau().b_err().is_some() {
            Controller::pid(1e-6, 1e-8).unwrap()
        } else {
            Controller::constant(0.01).unwrap()
        };
        let o = SolveOptions::default();
        let sol = solve(&lv, &s.tableau(), &ctl, 0.0, 2.0, &[1.0, 1.0], &o).unwrap();
        let g = gradient(
            &lv,
            &s.tableau(),
            &ctl,
            0.0,
            2.0,
            &[1.0, 1.0],
            &[1.0, 1.0],
            GradMode::Checkpointed { checkpoints: None },
            &o,
        )
        .unwrap();
        assert_eq!(g.ts[1..], sol.ts[..], "{s}");
        assert_eq!(g.y_final, sol.y_final, "{s}");
        assert_eq!(g.checkpoints, 90.min(g.ts.len() - 1), "{s}");
    }
}
