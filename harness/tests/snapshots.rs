//! Reviewed numerics (`cargo insta review`; CI never writes snapshots): the RAdam branch
//! schedule for several b2, the first 12 updates of a fixed problem per optimizer and dtype
//! (rounded to 6 significant digits), the state signatures, and the line search's value,
//! learning-rate and evaluation sequences on each fixture problem.

harness::install_counting_allocator!();

use harness::backend::{Array, Float};
use harness::optim::{self, AdamHyper, RadamHyper, Selection, Transform};
use harness::stage::HasSignature;
use harness::tree::{apply_updates, Tree};

use harness::tolerance::snapshot_rounded;

#[derive(serde::Serialize)]
struct ScheduleRow {
    b2: f64,
    rho_inf: f64,
    rectified_steps: Vec<i32>,
    raw_rectifier_nan_steps: Vec<i32>,
    r_t: Vec<f64>,
}

#[test]
fn radam_branch_schedule_for_several_b2() {
    let rows: Vec<ScheduleRow> = [0.5, 0.7, 0.9, 0.99, 0.999]
        .into_iter()
        .map(|b2| {
            let h = RadamHyper {
                moments: AdamHyper {
                    b2,
                    ..Default::default()
                },
                threshold: 5.0,
            };
            let steps = 1..=12;
            ScheduleRow {
                b2,
                rho_inf: snapshot_rounded(h.rho_inf()),
                rectified_steps: steps
                    .clone()
                    .filter(|&t| h.rectification(t).rectified)
                    .collect(),
                raw_rectifier_nan_steps: steps
                    .clone()
                    .filter(|&t| h.rectification(t).r.is_nan())
                    .collect(),
                r_t: steps
                    .map(|t| snapshot_rounded(h.rectification(t).r_where()))
                    .collect(),
            }
        })
        .collect();
    insta::assert_json_snapshot!(rows);
}

/// The fixed problem: params `w = [0.5, -1, 2]`, gradient at step k `g_i = sin(1.3 k + i)`.
fn first_updates<E: Float, T: Transform<E>>(opt: T) -> Vec<Vec<f64>> {
    let mut p = Tree::from_leaves([(
        "w".to_string(),
        Array::vector([0.5, -1.0, 2.0].map(E::of_f64).to_vec()),
    )])
    .unwrap();
    let mut s = opt.init(&p).unwrap();
    (1..=12)
        .map(|k| {
            let g = p.map(|a| {
                Array::vector(
                    (0..a.len())
                        .map(|i| E::of_f64((1.3 * k as f64 + i as f64).sin()))
                        .collect(),
                )
            });
            let (u, ns) = opt.update(&g, &s, &p).unwrap();
            p = apply_updates(&p, &u).unwrap();
            s = ns;
            u.get("w")
                .unwrap()
                .data()
                .iter()
                .map(|x| snapshot_rounded(x.as_f64()))
                .collect()
        })
        .collect()
}

macro_rules! updates_snapshot {
    ($name:ident, $e:ty) => {
        #[test]
        fn $name() {
            let adam = first_updates::<$e, _>(optim::adam(1e-2, AdamHyper::default()).unwrap());
            let radam = first_updates::<$e, _>(optim::radam(1e-2, RadamHyper::default(), Selection::Where).unwrap());
            insta::assert_json_snapshot!(serde_json::json!({"adam": adam, "radam": radam}));
        }
    };
}
updates_snapshot!(first_12_updates_f16, half::f16);
updates_snapshot!(first_12_updates_f32, f32);
updates_snapshot!(first_12_updates_f64, f64);

#[test]
fn optimizer_state_signatures_match_the_reviewed_snapshot() {
    let p = Tree::from_leaves([
        ("b".to_string(), Array::vector(vec![half::f16::ZERO; 4])),
        (
            "w".to_string(),
            Array::new(vec![2, 3], vec![half::f16::ZERO; 6]).unwrap(),
        ),
    ])
    .unwrap();
    let adam = optim::adam(1e-3, AdamHyper::default()).unwrap();
    let radam = optim::radam(1e-3, RadamHyper::default(), Selection::Where).unwrap();
    insta::assert_snapshot!(
        "optimizer_state_signatures",
        format!(
            "adam f16: {}\nradam f16: {}",
            adam.init(&p).unwrap().signature(),
            radam.init(&p).unwrap().signature()
        )
    );
}

/// 15 steps of `sgd(1) + backtracking(max_backtracking_steps = 20)` from a fixed start: the
/// value before each step, the learning rate found and the evaluation count.
fn linesearch_run<O: harness::optim::linesearch::Objective<f64> + 'static>(
    f: &O,
    x0: &[f64],
) -> serde_json::Value {
    use harness::optim::linesearch::{point, sgd_linesearch, BacktrackingHyper, Staged};
    let opt = sgd_linesearch(BacktrackingHyper::new(20)).unwrap();
    let mut x = point::<f64>(x0);
    let mut state = harness::optim::linesearch::LineSearch::init(&opt, &x).unwrap();
    let mut staged = Staged::new(opt).with_max_traces(1);
    let (mut values, mut lrs, mut evals) = (vec![], vec![], vec![]);
    for _ in 0..15 {
        let (v, g) = f.value_and_grad(&x).unwrap();
        let (u, s) = staged.update(&g, &state, &x, v, &g, f).unwrap();
        x = apply_updates(&x, &u).unwrap();
        values.push(snapshot_rounded(v));
        lrs.push(snapshot_rounded(s.1.learning_rate.value));
        evals.push(s.1.info.num_linesearch_steps.value);
        state = s;
    }
    serde_json::json!({"value": values, "learning_rate": lrs, "num_linesearch_steps": evals})
}

#[test]
fn linesearch_sequences_on_fixture_problems_match_the_reviewed_snapshot() {
    use harness::optim::linesearch::{Himmelblau, Matyas, Quadratic, Rosenbrock};
    let q = Quadratic::new(
        vec![3.0, 0.5, 0.0, 0.5, 1.0, 0.2, 0.0, 0.2, 0.5],
        vec![1.0, -1.0, 0.5],
    )
    .unwrap();
    insta::assert_json_snapshot!(
        "linesearch_sequences_on_fixture_problems",
        serde_json::json!({
            "rosenbrock_2d": linesearch_run(&Rosenbrock, &[-1.2, 1.0]),
            "rosenbrock_10d": linesearch_run(&Rosenbrock, &[0.0; 10]),
            "quadratic_3d": linesearch_run(&q, &[1.0, 1.0, 1.0]),
            "himmelblau": linesearch_run(&Himmelblau, &[0.0, 0.0]),
            "matyas": linesearch_run(&Matyas, &[1.0, -0.5]),
        })
    );
}
