//! The ODE laws pass on the reference solvers; step sequences are snapshotted.

harness::install_counting_allocator!();

mod common;
use common::{assert_law_holds, planted_bug_caught};
use harness::laws;
use harness::ode::Integration;
use harness::ode::{
    fixtures::LotkaVolterra, solve, Controller, Pid, Solution, SolveOptions, Solver, Stats,
    StepEvent, Tableau,
};

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
fn convergence_law_fails_on_a_midpoint_with_wrong_weights() {
    // Mutant: midpoint's stages with weights b = [1/2, 1/2] still claiming order 2. Then
    // sum b_i c_i = 1/4 != 1/2, so the method is first order and e(h)/e(h/2) ~ 2^1.
    let broken = Tableau::new(
        "midpoint-wrong-b",
        vec![0.0, 0.5],
        vec![vec![], vec![0.5]],
        vec![0.5, 0.5],
        None,
        2,
        false,
    )
    .unwrap();
    let c = laws::ode::RotationCase {
        alpha: 0.1,
        omega: 1.0,
        y0: [1.0, 0.0],
        t1: 1.0,
    };
    assert!(laws::ode::convergence_order_of(&c, &[Solver::Midpoint.tableau()]).is_ok());
    let err = laws::ode::convergence_order_of(&c, &[broken]).unwrap_err();
    assert!(err.contains("midpoint-wrong-b: measured order 1."), "{err}");
}

fn event(t_start: f64, t_end: f64, accepted: bool, scaled_error: f64) -> StepEvent<f64> {
    StepEvent {
        t_start,
        t_end,
        accepted,
        scaled_error: Some(scaled_error),
    }
}

#[test]
fn step_control_law_fails_on_controllers_that_break_diffrax_rules() {
    let p = Pid::new(1e-6, 1e-8).unwrap();
    let ok = [
        event(0.0, 0.1, true, 0.5),
        event(0.1, 0.3, false, 2.0),
        event(0.1, 0.2, true, 0.5),
        event(0.2, 1.0, true, 0.1),
    ];
    laws::ode::check_step_events("ok", &ok, &p, 1.0, true).unwrap();
    // Mutant 1: an accepted step followed by a shorter one (factor clipped to [factormin, ..]
    // instead of [1, factormax] after acceptance).
    let shrink_after_accept = [
        event(0.0, 0.1, true, 0.5),
        event(0.1, 0.15, true, 0.5),
        event(0.15, 1.0, true, 0.5),
    ];
    let e = laws::ode::check_step_events("m1", &shrink_after_accept, &p, 1.0, true).unwrap_err();
    assert!(e.contains("followed by a shorter"), "{e}");
    // Mutant 2: a rejection that shrinks by 0.1 < factormin = 0.2.
    let over_shrink = [
        event(0.0, 0.1, false, 5.0),
        event(0.0, 0.01, true, 0.5),
        event(0.01, 1.0, true, 0.5),
    ];
    let e = laws::ode::check_step_events("m2", &over_shrink, &p, 1.0, true).unwrap_err();
    assert!(e.contains("rejected step shrank by"), "{e}");
    // Mutant 3: accepting a step whose scaled error is >= 1.
    let accept_bad = [event(0.0, 0.1, true, 1.5), event(0.1, 1.0, true, 0.5)];
    let e = laws::ode::check_step_events("m3", &accept_bad, &p, 1.0, true).unwrap_err();
    assert!(e.contains("accepted with scaled error"), "{e}");
}

#[test]
fn round_trip_law_fails_on_a_backward_solve_that_misses_y0() {
    let p = Pid::new(1e-6, 1e-8).unwrap();
    // 40 steps: bound = 1e3 * (1e-6 * 1 + 1e-8) * 40 = 4.04e-2
    laws::ode::check_round_trip("ok", &[1.0, 0.0], &[1.0 + 1e-3, 0.0], &p, 40).unwrap();
    // Mutant: a backward solve that lands 0.1 away (e.g. the field not negated under time reversal).
    let e = laws::ode::check_round_trip("m", &[1.0, 0.0], &[1.1, 0.0], &p, 40).unwrap_err();
    assert!(e.contains("round trip missed y0"), "{e}");
}

#[test]
fn bad_input_law_fails_when_a_nan_state_is_accepted() {
    let b = laws::ode::BadInput {
        y0: f64::NAN,
        t0: 0.0,
        t1: 1.0,
        dt0: 0.1,
        rtol: 1e-6,
        empty_state: false,
        constant: true,
    };
    assert!(laws::ode::check_bad_input(
        &b,
        &Err(harness::reference::Error::Structure("rejected".into()))
    )
    .is_ok());
    // Mutant: a solver that skips input validation and returns a (NaN) solution.
    let accepted = Ok(Solution {
        ts: vec![1.0],
        ys: vec![vec![f64::NAN, 1.0]],
        y_final: vec![f64::NAN, 1.0],
        stats: Stats {
            num_accepted_steps: 1,
            num_rejected_steps: 0,
            num_steps: 1,
        },
    });
    assert_eq!(
        laws::ode::check_bad_input(&b, &accepted).unwrap_err(),
        "bad input was accepted"
    );
}

#[test]
fn step_control_law_catches_a_controller_that_lets_a_step_shrink_after_acceptance() {
    use harness::mutants::ode_solvers::ShrinksAfterAccept;
    let c = planted_bug_caught("ode_step_control", laws::ode::pid_case(), |c| {
        laws::ode::step_control_with(c, &ShrinksAfterAccept)
    });
    // caught on the first embedded method, on a forward solve
    assert!(c.starts_with("heun step "), "{c}");
    assert!(c.contains("followed by a shorter"), "{c}");
    assert!(c.contains("backward: false"), "{c}");
}

#[test]
fn step_control_law_catches_a_solver_that_accepts_errors_below_one_over_safety() {
    use harness::mutants::ode_solvers::SafetyInTheAcceptanceTest;
    let c = planted_bug_caught("ode_step_control", laws::ode::pid_case(), |c| {
        laws::ode::step_control_with(c, &SafetyInTheAcceptanceTest)
    });
    let scaled_error: f64 = c
        .split("accepted with scaled error ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no accepted scaled error in: {c}"));
    // the shrunk case has safety 0.5: errors in [1, 2) pass the planted test
    assert!(c.contains("safety: 0.5"), "{c}");
    assert!((1.0..2.0).contains(&scaled_error), "{c}");
}

#[test]
fn round_trip_law_catches_a_backward_solve_run_forward_over_the_sorted_interval() {
    use harness::mutants::ode_solvers::BackwardWithoutTimeReversal;
    let c = planted_bug_caught(
        "ode_round_trip_and_reproducible",
        laws::ode::pid_case(),
        |c| laws::ode::round_trip_with(c, &BackwardWithoutTimeReversal),
    );
    assert!(c.contains("round trip missed y0 by"), "{c}");
}

#[test]
fn round_trip_law_catches_a_stage_sum_order_that_changes_from_one_call_to_the_next() {
    use harness::mutants::ode_solvers::StageSumOrderFromCallCount;
    let planted = StageSumOrderFromCallCount::default();
    let c = planted_bug_caught(
        "ode_round_trip_and_reproducible",
        laws::ode::pid_case(),
        |c| laws::ode::round_trip_with(c, &planted),
    );
    // the round trip itself holds (a reordered sum moves the state by rounding only): the
    // reproducibility half catches it
    assert!(
        c.contains("constant-step solve not bitwise reproducible"),
        "{c}"
    );
    assert!(c.contains("y_final["), "{c}");
}

#[test]
fn bad_input_law_catches_a_solver_that_skips_its_input_checks() {
    use harness::mutants::ode_solvers::SkipsInputValidation;
    let c = planted_bug_caught(
        "ode_bad_input_is_typed_error",
        laws::ode::bad_input(),
        |b| laws::ode::bad_input_is_typed_error_with(b, &SkipsInputValidation),
    );
    assert!(c.starts_with("bad input was accepted\n"), "{c}");
    assert!(c.contains("y0: NaN"), "{c}");
}

#[test]
fn solve_half_of_the_face_law_catches_a_constant_step_solve_that_stops_at_the_last_whole_step() {
    use harness::mutants::ode_solvers::StopsAtTheLastWholeStep;
    let c = planted_bug_caught("ode_step_faces_agree", laws::ode::face_case(), |c| {
        laws::ode::solve_faces_agree_with(c, &StopsAtTheLastWholeStep)
    });
    // the step ends move: the shrunk case is one state of a constant-step solve
    assert!(c.contains(": ts["), "{c}");
    assert!(c.contains("rtol: None"), "{c}");
    assert!(c.contains("y0: [0.0]"), "{c}");
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
                &Integration::new(&s.tableau(), &ctl, 0.0, 2.0),
                &[1.0f64, 1.0],
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
fn backward_solve_gradients_match_finite_differences() {
    assert_law_holds("ode_grad_backward_matches_finite_differences");
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
        backward: false,
    }
}

#[test]
fn finite_difference_law_fails_when_a_stage_drops_its_theta_term() {
    use harness::laws::ode::ReferenceGradient;
    use harness::mutants::ode_gradient::DropThetaOfStage;
    use harness::ode::grad::GradMode;
    for steps in [Some(12), None] {
        let c = lv_case(steps);
        let good = c.gradient(GradMode::FullTape, &ReferenceGradient).unwrap();
        let err = c.compare_with_fd(&good).unwrap();
        // the reference sits well inside the law's bound (observed 1.1e-8: tolerance.rs)
        assert!(
            err < harness::tolerance::GRAD_FD.atol / 10.0,
            "reference FD error {err:e}"
        );
        for stage in 0..6 {
            let bad = c
                .gradient(GradMode::FullTape, &DropThetaOfStage(stage))
                .unwrap();
            // the y0 gradient does not involve the dropped term (the mutant takes each stage's
            // VJP on its own tape, so it may differ from the one-step graph in rounding only)
            for (b, g) in bad.d_y0.iter().zip(&good.d_y0) {
                assert!(
                    harness::tolerance::GRAD_FD.close(*b, *g),
                    "y0 gradient moved: {b} vs {g}"
                );
            }
            let r = c.compare_with_fd(&bad);
            assert!(r.is_err(), "stage {stage}: mutant passed the FD law: {r:?}");
        }
    }
}

#[test]
fn backward_finite_difference_law_fails_when_a_stage_drops_its_theta_term() {
    use harness::mutants::ode_gradient::DropThetaOfStage;
    for steps in [Some(12), None] {
        let c = lv_case(steps);
        laws::ode::grad_backward_matches_fd(&c).unwrap();
        for stage in 0..6 {
            let r = laws::ode::grad_backward_matches_fd_with(&c, &DropThetaOfStage(stage));
            let e = r.expect_err("mutant passed the backward FD law");
            assert!(e.contains("finite difference"), "stage {stage}: {e}");
        }
    }
    // and the property itself, over generated cases (every method has a stage 0)
    let r = laws::check_property(
        "ode_grad_backward_matches_finite_differences",
        8,
        laws::DEFAULT_SEED,
        laws::ode::backward_grad_case(),
        |c| laws::ode::grad_backward_matches_fd_with(c, &DropThetaOfStage(0)),
    );
    let e = r.expect_err("the law did not catch the dropped stage-0 theta term");
    assert!(e.contains("backward: true"), "{e}");
}

#[test]
fn bitwise_law_fails_on_checkpoints_rounded_to_f32() {
    use harness::laws::ode::ReferenceGradient;
    use harness::mutants::ode_gradient::CompressedCheckpoints;
    let c = lv_case(Some(12));
    assert!(laws::ode::checkpointed_equals_full_with(&c, &ReferenceGradient).is_ok());
    let r = laws::ode::checkpointed_equals_full_with(&c, &CompressedCheckpoints);
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
    let run = |y0: &[f64], w: &[f64]| {
        gradient(
            &lin,
            &Integration::new(&tab, &ctl, 0.0, 1.0).with_options(o),
            y0,
            w,
            GradMode::FullTape,
        )
    };
    assert!(matches!(
        run(&[1.0], &[1.0, 0.0]),
        Err(harness::reference::Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        run(&[1.0, 0.0], &[1.0]),
        Err(harness::reference::Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        run(&[f64::NAN, 0.0], &[1.0, 0.0]),
        Err(harness::reference::Error::InvalidHyper { .. })
    ));
    assert!(matches!(
        run(&[1.0, 0.0], &[f64::INFINITY, 0.0]),
        Err(harness::reference::Error::InvalidHyper { .. })
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
            &Integration::new(&tab, &ctl, 0.0, 1.0).with_options(o),
            &[1.0, 1.0],
            &[1.0, 0.0],
            GradMode::FullTape
        ),
        Err(harness::reference::Error::InvalidHyper { .. })
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
        let sol = solve(
            &lv,
            &Integration::new(&s.tableau(), &ctl, 0.0, 2.0).with_options(o),
            &[1.0, 1.0],
        )
        .unwrap();
        let g = gradient(
            &lv,
            &Integration::new(&s.tableau(), &ctl, 0.0, 2.0).with_options(o),
            &[1.0, 1.0],
            &[1.0, 1.0],
            GradMode::Checkpointed { checkpoints: None },
        )
        .unwrap();
        assert_eq!(g.ts[1..], sol.ts[..], "{s}");
        assert_eq!(g.y_final, sol.y_final, "{s}");
        assert_eq!(g.checkpoints, 90.min(g.ts.len() - 1), "{s}");
    }
}

mod hand_written_vjp {
    use harness::backend::Taped;
    use harness::ode::fixtures::LotkaVolterra;
    use harness::ode::grad::{gradient, DiffField, GradMode, ManualVjp};
    use harness::ode::{Controller, Integration, SolveOptions, Solver};

    /// Lotka–Volterra with its VJP written by hand, to check [`step_vjp_manual`] against the
    /// taped step on every tableau (FSAL and not).
    struct HandLv {
        lv: LotkaVolterra,
        kept: std::cell::RefCell<Vec<[f64; 2]>>,
    }

    impl DiffField for HandLv {
        fn dim(&self) -> usize {
            2
        }
        fn theta(&self) -> Vec<f64> {
            self.lv.theta()
        }
        fn eval(&self, t: f64, y: &[f64], th: &[f64], dy: &mut [f64]) {
            DiffField::eval(&self.lv, t, y, th, dy)
        }
        fn eval_taped(&self, t: f64, y: Taped, theta: Taped) -> Taped {
            self.lv.eval_taped(t, y, theta)
        }
        fn manual_vjp(&self) -> Option<&dyn ManualVjp> {
            Some(self)
        }
    }

    impl ManualVjp for HandLv {
        fn eval_kept(&self, slot: usize, t: f64, y: &[f64], th: &[f64], dy: &mut [f64]) {
            let mut kept = self.kept.borrow_mut();
            if kept.len() <= slot {
                kept.resize(slot + 1, [0.0; 2]);
            }
            kept[slot] = [y[0], y[1]];
            DiffField::eval(&self.lv, t, y, th, dy)
        }
        fn vjp_kept(&self, slot: usize, th: &[f64], fb: &[f64], yb: &mut [f64], tb: &mut [f64]) {
            // f = [a x - b x p, d x p - g p], th = [a, b, g, d]
            let [x, p] = self.kept.borrow()[slot];
            let (a, b, g, d) = (th[0], th[1], th[2], th[3]);
            yb[0] = fb[0] * (a - b * p) + fb[1] * (d * p);
            yb[1] = fb[0] * (-b * x) + fb[1] * (d * x - g);
            tb[0] += fb[0] * x;
            tb[1] -= fb[0] * x * p;
            tb[2] -= fb[1] * p;
            tb[3] += fb[1] * x * p;
        }
    }

    #[test]
    fn hand_written_step_vjp_matches_the_taped_step_on_every_tableau() {
        let lv = LotkaVolterra::new(1.5, 1.0, 3.0, 1.0).unwrap();
        let hand = HandLv {
            lv: LotkaVolterra::new(1.5, 1.0, 3.0, 1.0).unwrap(),
            kept: Default::default(),
        };
        let opts = SolveOptions::default();
        let tol = harness::tolerance::for_dtype(harness::backend::DType::F64);
        for solver in Solver::ALL {
            let tab = solver.tableau();
            let mut controllers = vec![Controller::constant(0.1).unwrap()];
            if tab.b_err().is_some() {
                controllers.push(Controller::pid(1e-6, 1e-8).unwrap());
            }
            for ctl in controllers {
                let run = |f: &dyn DiffField, mode| {
                    gradient(
                        f,
                        &Integration::new(&tab, &ctl, 0.0, 1.0).with_options(opts),
                        &[1.0, 1.0],
                        &[0.3, -0.7],
                        mode,
                    )
                    .unwrap()
                };
                let taped = run(&lv, GradMode::FullTape);
                let manual = run(&hand, GradMode::FullTape);
                for (g, w) in manual
                    .d_y0
                    .iter()
                    .chain(&manual.d_theta)
                    .zip(taped.d_y0.iter().chain(&taped.d_theta))
                {
                    assert!(tol.close(*g, *w), "{solver:?}: hand {g:e}, tape {w:e}");
                }
                let ckpt = run(
                    &hand,
                    GradMode::Checkpointed {
                        checkpoints: Some(2),
                    },
                );
                assert_eq!((&ckpt.d_y0, &ckpt.d_theta), (&manual.d_y0, &manual.d_theta));
            }
        }
    }
}

/// A solve subject that answers without taking (or reporting) the steps it claims: `Silent`
/// solves correctly and never calls the observer; `OutOfBudgetAtOnce` says it ran out of its
/// step budget before taking a step.
enum NoStepsReported {
    Silent,
    OutOfBudgetAtOnce,
}

impl laws::ode::SolveSubject for NoStepsReported {
    fn solve<A: harness::backend::Real>(
        &self,
        field: &dyn harness::ode::VectorField<A>,
        integration: &Integration<'_, A>,
        y0: &[A],
        _observer: &mut dyn FnMut(&StepEvent<A>),
    ) -> harness::reference::Result<Solution<A>> {
        match self {
            NoStepsReported::Silent => solve(field, integration, y0),
            NoStepsReported::OutOfBudgetAtOnce => {
                Err(harness::reference::Error::MaxStepsExceeded {
                    max_steps: integration.options.max_steps,
                    t: harness::backend::Float::as_f64(integration.t0),
                    t_end: harness::backend::Float::as_f64(integration.t1),
                })
            }
        }
    }
}

#[test]
fn step_control_and_round_trip_fail_a_subject_that_reports_no_steps_or_runs_out_at_once() {
    let c = planted_bug_caught("ode_step_control", laws::ode::pid_case(), |c| {
        laws::ode::step_control_with(c, &NoStepsReported::Silent)
    });
    assert!(c.contains("reporting no step"), "{c}");
    let c = planted_bug_caught("ode_step_control", laws::ode::pid_case(), |c| {
        laws::ode::step_control_with(c, &NoStepsReported::OutOfBudgetAtOnce)
    });
    assert!(
        c.contains("out of its budget of 4096 steps after reporting 0"),
        "{c}"
    );
    let c = planted_bug_caught(
        "ode_round_trip_and_reproducible",
        laws::ode::pid_case(),
        |c| laws::ode::round_trip_with(c, &NoStepsReported::OutOfBudgetAtOnce),
    );
    assert!(
        c.contains("out of its budget of 4096 steps after reporting 0"),
        "{c}"
    );
}

/// A gradient subject that always says it ran out of its step budget.
struct GradientOutOfBudget;

impl laws::ode::GradientSubject for GradientOutOfBudget {
    fn gradient(
        &self,
        _field: &dyn harness::ode::grad::DiffField,
        p: &laws::ode::GradProblem<'_>,
        _mode: harness::ode::grad::GradMode,
    ) -> harness::reference::Result<harness::ode::grad::Gradient> {
        Err(harness::reference::Error::MaxStepsExceeded {
            max_steps: p.integration.options.max_steps,
            t: p.integration.t0,
            t_end: p.integration.t1,
        })
    }
}

#[test]
fn gradient_laws_fail_a_subject_out_of_budget_where_the_reference_finishes() {
    let c = lv_case(None);
    for r in [
        laws::ode::grad_matches_fd_with(&c, &GradientOutOfBudget),
        laws::ode::grad_backward_matches_fd_with(&c, &GradientOutOfBudget),
        laws::ode::checkpointed_equals_full_with(&c, &GradientOutOfBudget),
    ] {
        let e = r.expect_err("running out where the reference finishes is a failure");
        assert!(
            e.contains("max_steps = 4096") && e.contains("reference finishes"),
            "{e}"
        );
    }
}
