use harness::laws::ode::{order_problems, RotationCase};
use harness::ode::Solver;
use harness::subject::ode::{OdeSolver, ReferenceSolver, SolveRequest, Stepping};
use std::sync::Arc;
fn main() {
    let mut subjects: Vec<Arc<dyn OdeSolver>> = Solver::ALL
        .iter()
        .skip(1)
        .map(|s| Arc::new(ReferenceSolver(*s)) as Arc<dyn OdeSolver>)
        .collect();
    subjects.push(Arc::new(peers::ode_solvers_adapter::OdeSolvers(
        peers::ode_solvers_adapter::Method::Dopri5,
    )));
    subjects.push(Arc::new(peers::ode_solvers_adapter::OdeSolvers(
        peers::ode_solvers_adapter::Method::Dop853,
    )));
    subjects.push(Arc::new(peers::diffsol_adapter::Diffsol));
    let mut seed = 12345u64;
    let mut rnd = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 11) as f64 / (1u64 << 53) as f64
    };
    let cases: Vec<RotationCase> = (0..200)
        .map(|_| RotationCase {
            alpha: rnd(),
            omega: 0.2 + 1.8 * rnd(),
            y0: [4.0 * rnd() - 2.0, 4.0 * rnd() - 2.0],
            t1: 0.5 + 1.5 * rnd(),
        })
        .collect();
    for s in &subjects {
        let p = s.order().unwrap() as f64;
        let mut worst: f64 = 0.0;
        let mut worst_case = String::new();
        for c in &cases {
            for prob in order_problems(c).unwrap() {
                let n = |rtol: f64| {
                    let r = SolveRequest {
                        field: Arc::clone(&prob.field),
                        t0: 0.0,
                        t1: c.t1,
                        y0: c.y0.to_vec(),
                        stepping: Stepping::Adaptive {
                            rtol,
                            atol: rtol * 1e-2,
                        },
                        max_steps: 1_000_000,
                    };
                    s.solve(&r).map(|x| x.accepted).unwrap_or(usize::MAX)
                };
                let (n1, n2) = (n(1e-4), n(1e-8));
                let ratio = n2 as f64 / n1 as f64;
                let rel = ratio / 1e4f64.powf(1.0 / p);
                if rel > worst {
                    worst = rel;
                    worst_case = format!("{} n1 {n1} n2 {n2}", prob.name);
                }
            }
        }
        println!(
            "{:30} p {p} worst ratio/(1e4^(1/p)) = {worst:.3} ({worst_case})",
            s.name()
        );
    }
}
