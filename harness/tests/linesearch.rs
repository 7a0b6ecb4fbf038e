//! Backtracking line search: every law holds on the reference, both line-search mutants are
//! caught by the trace law with a small counterexample, and the behaviours the issue pins down
//! (staging by objective type, store_grad, failure and recovery, typed errors).

harness::install_counting_allocator!();

mod common;
use common::{assert_law_holds, planted_bug_caught};
use harness::mutants::linesearch_steps::{
    DoubledStep, LearningRateHalvedAfterTheSearch, StepsOnNonFinite,
};

use harness::backend::DType;
use harness::optim::linesearch::{
    point, sgd_linesearch, value_and_grad_from_state, BacktrackingHyper, LineSearch, Matyas,
    Objective, Quadratic, Rosenbrock, Scalar, Staged,
};
use harness::stage::LeafSig;
use harness::tree::{apply_updates, Tree};

#[test]
fn armijo_holds_at_the_returned_params_when_success_is_reported() {
    assert_law_holds("linesearch_armijo_on_success");
}

#[test]
fn evaluations_are_bounded_and_final_eta_is_repeated_multiplication() {
    assert_law_holds("linesearch_evaluations_bounded");
}

#[test]
fn value_never_increases_on_a_convex_quadratic() {
    assert_law_holds("linesearch_convex_quadratic_monotone");
}

#[test]
fn state_signature_is_fixed_and_n_updates_trace_once() {
    assert_law_holds("linesearch_trace_once");
}

#[test]
fn non_finite_objective_gives_zero_step_and_finite_state() {
    assert_law_holds("linesearch_nonfinite_zero_step");
}

fn caught(name: &str) -> String {
    let r = &harness::mutants::run_all(Some(name))[0];
    assert!(r.caught, "{name} was not caught");
    assert_eq!(r.law, "linesearch_trace_once");
    r.counterexample.clone().unwrap()
}

#[test]
fn armijo_law_catches_a_step_past_the_accepted_candidate() {
    use harness::laws::linesearch::{armijo_on_success_with, ls_case};
    let c = planted_bug_caught("linesearch_armijo_on_success", ls_case(), |c| {
        armijo_on_success_with(c, &DoubledStep)
    });
    assert!(c.contains("at the returned params"), "{c}");
    println!("{c}");
}

#[test]
fn evaluation_law_catches_one_decrease_too_many() {
    use harness::laws::linesearch::{evaluations_bounded_with, ls_case};
    let c = planted_bug_caught("linesearch_evaluations_bounded", ls_case(), |c| {
        evaluations_bounded_with(c, &LearningRateHalvedAfterTheSearch)
    });
    assert!(c.contains("learning_rate ="), "{c}");
    println!("{c}");
}

#[test]
fn monotone_law_catches_a_step_past_the_accepted_candidate() {
    use harness::laws::linesearch::{convex_case, convex_quadratic_monotone_with};
    let c = planted_bug_caught("linesearch_convex_quadratic_monotone", convex_case(), |c| {
        convex_quadratic_monotone_with(c, &DoubledStep)
    });
    assert!(c.contains("value rose"), "{c}");
    println!("{c}");
}

#[test]
fn nonfinite_law_catches_a_step_taken_without_a_finite_candidate() {
    use harness::laws::linesearch::{nonfinite_case, nonfinite_zero_step_with};
    let c = planted_bug_caught("linesearch_nonfinite_zero_step", nonfinite_case(), |c| {
        nonfinite_zero_step_with(c, &StepsOnNonFinite)
    });
    assert!(c.contains("want a zero step"), "{c}");
    println!("{c}");
}

#[test]
fn weak_init_mutant_traces_twice_and_the_leaf_is_named() {
    let c = caught("linesearch-weak-init");
    assert!(c.contains("2 updates traced 2 times"), "{c}");
    assert!(
        c.contains("leaf `state.1.info.num_linesearch_steps`: weak int32[] -> int32[]"),
        "{c}"
    );
    assert!(
        c.contains("x0=[0.0]") && c.contains("steps=2"),
        "not shrunk: {c}"
    );
}

#[test]
fn rebuilt_objective_mutant_traces_once_per_update() {
    let c = caught("linesearch-rebuilt-objective");
    assert!(c.contains("2 updates traced 2 times"), "{c}");
    assert!(c.contains("new static configuration"), "{c}");
    assert!(
        c.contains("x0=[0.0]") && c.contains("steps=2"),
        "not shrunk: {c}"
    );
}

fn descend<O: Objective<f64> + 'static>(
    staged: &mut Staged<harness::optim::linesearch::SgdLineSearch>,
    x: &mut Tree<f64>,
    state: &mut <harness::optim::linesearch::SgdLineSearch as LineSearch<f64>>::State,
    f: &O,
) {
    let (v, g) = f.value_and_grad(x).unwrap();
    let (u, s) = staged.update(&g, state, x, v, &g, f).unwrap();
    *x = apply_updates(x, &u).unwrap();
    *state = s;
}

#[test]
fn recreating_the_same_objective_never_retraces_but_a_new_type_does() {
    let opt = sgd_linesearch(BacktrackingHyper::new(15)).unwrap();
    let mut x = point::<f64>(&[0.3, -0.2]);
    let mut state = opt.init(&x).unwrap();
    let mut staged = Staged::new(opt).with_max_traces(2);
    for k in 0..10 {
        // a fresh object each step, same type and data shapes
        let q = Quadratic::new(vec![2.0, 0.1, 0.1, 1.0 + k as f64], vec![1.0, -1.0]).unwrap();
        descend(&mut staged, &mut x, &mut state, &q);
    }
    assert_eq!(staged.traces(), 1);
    descend(&mut staged, &mut x, &mut state, &Matyas);
    assert_eq!(
        staged.traces(),
        2,
        "another objective type is another trace"
    );
}

/// The quadratic's `A` and `b` are arguments of the staged update, as arrays passed to (not
/// captured by) a jitted function: the trace records them by shape and dtype, never by value.
#[test]
fn staged_update_traces_a_quadratics_data_as_arguments_by_shape() {
    let opt = sgd_linesearch(BacktrackingHyper::new(15)).unwrap();
    let x = point::<f32>(&[0.3, -0.2, 0.1]);
    let state = opt.init(&x).unwrap();
    let mut staged = Staged::new(opt);
    let q = Quadratic::new(
        vec![2.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 3.0],
        vec![1.0; 3],
    )
    .unwrap();
    let (v, g) = q.value_and_grad(&x).unwrap();
    staged.update(&g, &state, &x, v, &g, &q).unwrap();
    let traced = &staged.stage().log()[0].signature;
    for (leaf, shape) in [("objective.A", &[3, 3][..]), ("objective.b", &[3][..])] {
        assert_eq!(
            traced.get(leaf),
            Some(&LeafSig::strong(shape, DType::F32)),
            "`{leaf}` in the traced signature {traced}"
        );
    }
}

#[test]
fn weak_counter_is_refused_by_max_traces_with_the_leaf_named() {
    let opt = sgd_linesearch(BacktrackingHyper::new(15)).unwrap();
    let mut x = point::<f64>(&[0.3, -0.2]);
    let mut state = opt.init(&x).unwrap();
    state.1.info.num_linesearch_steps = Scalar::weak(0);
    let mut staged = Staged::new(opt).with_max_traces(1);
    descend(&mut staged, &mut x, &mut state, &Rosenbrock);
    let (v, g) = Rosenbrock.value_and_grad(&x).unwrap();
    let err = staged
        .update(&g, &state, &x, v, &g, &Rosenbrock)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("info.num_linesearch_steps") && err.contains("weak"),
        "{err}"
    );
}

#[test]
fn store_grad_state_gives_the_value_and_gradient_at_the_new_point() {
    let h = BacktrackingHyper {
        store_grad: true,
        ..BacktrackingHyper::new(20)
    };
    let opt = sgd_linesearch(h).unwrap();
    let mut x = point::<f64>(&[-0.5, 0.8, 0.1]);
    let mut state = opt.init(&x).unwrap();
    for _ in 0..6 {
        let (v, g) = value_and_grad_from_state(&Rosenbrock, &x, &state.1).unwrap();
        let (fv, fg) = Rosenbrock.value_and_grad(&x).unwrap();
        assert_eq!(v, fv);
        assert_eq!(g, fg);
        let (u, s) = opt.update(&g, &state, &x, v, &g, &Rosenbrock).unwrap();
        x = apply_updates(&x, &u).unwrap();
        state = s;
    }
    let plain = sgd_linesearch(BacktrackingHyper::new(20)).unwrap();
    let s = plain.init(&x).unwrap();
    let e = value_and_grad_from_state(&Rosenbrock, &x, &s.1).unwrap_err();
    assert!(e.to_string().contains("store_grad"), "{e}");
}

/// NaN on the half-plane `x[0] > 0.5`, a unit quadratic centred at (2, 2) elsewhere.
struct NanWall;
impl Objective<f64> for NanWall {
    fn value(&self, x: &Tree<f64>) -> harness::reference::Result<f64> {
        let d = x.get("x").unwrap().data();
        Ok(if d[0] > 0.5 {
            f64::NAN
        } else {
            0.5 * ((d[0] - 2.0).powi(2) + (d[1] - 2.0).powi(2))
        })
    }
    fn value_and_grad(&self, x: &Tree<f64>) -> harness::reference::Result<(f64, Tree<f64>)> {
        let d = x.get("x").unwrap().data();
        Ok((self.value(x)?, point(&[d[0] - 2.0, d[1] - 2.0])))
    }
}

#[test]
fn nan_candidates_backtrack_and_all_nan_rounds_keep_lr_zero_unless_recovering() {
    // max 2 steps from the origin: eta 1, 0.8, 0.64 all land in the NaN region: zero step
    for recover in [false, true] {
        let h = BacktrackingHyper {
            recover_from_zero_lr: recover,
            ..BacktrackingHyper::new(2)
        };
        let opt = sgd_linesearch(h).unwrap();
        let mut x = point::<f64>(&[0.0, 0.0]);
        let mut state = opt.init(&x).unwrap();
        let mut staged = Staged::new(opt);
        descend(&mut staged, &mut x, &mut state, &NanWall);
        assert_eq!(x, point(&[0.0, 0.0]));
        assert_eq!(state.1.learning_rate.value, 0.0);
        assert_eq!(state.1.info.decrease_error.value, f64::INFINITY);
        // with more room the next round would succeed, but without recovery eta0 = 1.5 * 0 = 0
        let h = BacktrackingHyper {
            recover_from_zero_lr: recover,
            ..BacktrackingHyper::new(30)
        };
        let opt = sgd_linesearch(h).unwrap();
        let (v, g) = NanWall.value_and_grad(&x).unwrap();
        let (u, s) = opt.update(&g, &state, &x, v, &g, &NanWall).unwrap();
        if recover {
            assert!(s.1.learning_rate.value > 0.0 && s.1.info.decrease_error.value == 0.0);
            assert!(NanWall.value(&apply_updates(&x, &u).unwrap()).unwrap() < v);
        } else {
            assert_eq!(s.1.learning_rate.value, 0.0, "upstream: stuck at 0 forever");
        }
    }
}

#[test]
fn every_invalid_hyperparameter_is_a_typed_error_naming_it_and_its_range() {
    let base = BacktrackingHyper::new(10);
    let cases: Vec<(BacktrackingHyper, &str, &str)> = vec![
        (
            BacktrackingHyper {
                max_backtracking_steps: 2_000_000,
                ..base
            },
            "max_backtracking_steps",
            "[0, 1000000]",
        ),
        (
            BacktrackingHyper {
                slope_rtol: 1.0,
                ..base
            },
            "slope_rtol",
            "[0, 1)",
        ),
        (
            BacktrackingHyper {
                slope_rtol: f64::NAN,
                ..base
            },
            "slope_rtol",
            "[0, 1)",
        ),
        (
            BacktrackingHyper {
                decrease_factor: 0.0,
                ..base
            },
            "decrease_factor",
            "(0, 1)",
        ),
        (
            BacktrackingHyper {
                increase_factor: -1.0,
                ..base
            },
            "increase_factor",
            "> 0",
        ),
        (
            BacktrackingHyper {
                increase_factor: f64::NAN,
                ..base
            },
            "increase_factor",
            "> 0",
        ),
        (
            BacktrackingHyper {
                max_learning_rate: f64::INFINITY,
                ..base
            },
            "max_learning_rate",
            "finite and > 0",
        ),
        (
            BacktrackingHyper {
                atol: -1e-3,
                ..base
            },
            "atol",
            ">= 0",
        ),
        (
            BacktrackingHyper {
                rtol: f64::INFINITY,
                ..base
            },
            "rtol",
            ">= 0",
        ),
    ];
    for (h, name, range) in cases {
        let e = sgd_linesearch(h).unwrap_err();
        assert!(
            matches!(e, harness::reference::Error::InvalidHyper { .. }),
            "{e}"
        );
        let msg = e.to_string();
        assert!(msg.contains(name) && msg.contains(range), "{msg}");
    }
    let inf = BacktrackingHyper {
        increase_factor: f64::INFINITY,
        ..base
    };
    assert!(
        sgd_linesearch(inf).is_ok(),
        "+inf increase_factor is legal (start at max_learning_rate)"
    );
}

#[test]
fn an_objectives_value_along_a_direction_equals_its_value_at_the_built_candidate() {
    assert_law_holds("linesearch_value_along_matches_candidate");
}

/// Rosenbrock whose `value_along` departs from its `value` at the built candidate in one of two
/// ways: the candidate's coordinates rounded once from f64 (`w + eta u` exact, then rounded) instead
/// of rounding the product and the sum, or the terms summed by one running sum instead of the
/// workspace's lane order.
struct PlantedAlong {
    wide_candidate: bool,
}

impl<A: harness::backend::Real> Objective<A> for PlantedAlong {
    fn value(&self, x: &Tree<A>) -> harness::reference::Result<A> {
        Rosenbrock.value(x)
    }
    fn value_and_grad(&self, x: &Tree<A>) -> harness::reference::Result<(A, Tree<A>)> {
        Rosenbrock.value_and_grad(x)
    }
    fn value_along(&self, w: &Tree<A>, eta: A, u: &Tree<A>) -> harness::reference::Result<A> {
        let (w, u) = (w.get("x").unwrap().data(), u.get("x").unwrap().data());
        let x: Vec<A> = w
            .iter()
            .zip(u)
            .map(|(&w, &u)| match self.wide_candidate {
                true => A::of_f64(w.as_f64() + eta.as_f64() * u.as_f64()),
                false => w + eta * u,
            })
            .collect();
        if self.wide_candidate {
            return Rosenbrock.value(&point::<A>(
                &x.iter().map(|v| v.as_f64()).collect::<Vec<_>>(),
            ));
        }
        let term = |a: A, b: A| {
            let d = b - a * a;
            let e = A::of_f64(1.0) - a;
            A::of_f64(100.0) * (d * d) + e * e
        };
        Ok(x.windows(2).fold(A::zero(), |s, p| s + term(p[0], p[1])))
    }
}

#[test]
fn a_value_along_that_rounds_the_candidate_differently_is_caught_with_a_small_case() {
    use harness::laws::linesearch::{along_case, value_along_matches_candidate};
    for (planted, what) in [(true, "wide candidate"), (false, "running sum")] {
        let subject = PlantedAlong {
            wide_candidate: planted,
        };
        let e = harness::laws::check_property("planted", 256, 1, along_case(), |c| {
            value_along_matches_candidate(&subject, c)
        })
        .expect_err(what);
        assert!(e.contains("value_along"), "{what}: {e}");
        println!("{what}: {e}");
    }
}
