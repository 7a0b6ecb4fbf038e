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
