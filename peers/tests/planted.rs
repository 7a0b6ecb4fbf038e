//! Each law that passes on every peer subject, shown failing on the same peer with a bug planted
//! in its adapter: a law that never fails on a peer would otherwise prove nothing about it.

use harness::reference::Result;
use harness::subject::ode::{self, OdeSolver, SolveReport, SolveRequest, Stepping, SuiteOptions};
use peers::diffsol_adapter::Diffsol;
use peers::ode_solvers_adapter::{Method, OdeSolvers};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Bug {
    /// Ignores the tolerance asked: always `rtol 1e-2, atol 1e-4` (a hard-coded default).
    IgnoresTolerance,
    /// Stops backward solves 5% short of `t1`.
    ShortBackward,
    /// Moves the answer by one ulp on every other call.
    Jitter,
    /// Claims order 5 for Rk4.
    ClaimsOrder5,
    /// Solves past the step budget.
    OverrunsBudget,
    /// Passes the crate a step limit one above the budget.
    OneStepOverBudget,
}

/// A peer method behind its adapter, with `bug` planted in the adapter.
struct Planted {
    inner: Arc<dyn OdeSolver>,
    bug: Bug,
    calls: AtomicU64,
}

impl OdeSolver for Planted {
    fn name(&self) -> String {
        format!("{} with {:?}", self.inner.name(), self.bug)
    }
    fn order(&self) -> Option<u32> {
        match self.bug {
            Bug::ClaimsOrder5 => Some(5),
            _ => self.inner.order(),
        }
    }
    fn supports(&self, s: &Stepping) -> bool {
        self.inner.supports(s)
    }
    fn solve(&self, r: &SolveRequest) -> Result<SolveReport> {
        let mut r = r.clone();
        match (self.bug, r.stepping) {
            (Bug::IgnoresTolerance, Stepping::Adaptive { .. }) => {
                r.stepping = Stepping::Adaptive {
                    rtol: 1e-2,
                    atol: 1e-4,
                }
            }
            (Bug::ShortBackward, _) if r.t1 < r.t0 => r.t1 += 0.05 * (r.t0 - r.t1),
            (Bug::OverrunsBudget, _) => r.max_steps = 100_000,
            (Bug::OneStepOverBudget, _) => r.max_steps += 1,
            _ => {}
        }
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let mut s = self.inner.solve(&r)?;
        if self.bug == Bug::Jitter {
            s.y_final[0] = f64::from_bits(s.y_final[0].to_bits() + n % 2);
        }
        Ok(s)
    }
}

fn failing_law(inner: Arc<dyn OdeSolver>, bug: Bug) -> Vec<(String, String)> {
    let solver = Arc::new(Planted {
        inner,
        bug,
        calls: AtomicU64::new(0),
    });
    let report = ode::check(
        solver,
        &SuiteOptions {
            cases: 16,
            ..SuiteOptions::default()
        },
    );
    report
        .laws
        .iter()
        .filter(|l| !l.passed)
        .map(|l| (l.name.clone(), l.counterexample.clone().unwrap_or_default()))
        .collect()
}

#[test]
fn each_law_passing_on_the_peers_fails_on_a_bug_planted_in_their_adapter() {
    let cases = [
        (
            Method::Dopri5,
            Bug::IgnoresTolerance,
            "ode_tolerance_proportionality",
        ),
        (Method::Dop853, Bug::ShortBackward, "ode_round_trip"),
        (Method::Dopri5, Bug::Jitter, "ode_reproducible"),
        (Method::Rk4, Bug::ClaimsOrder5, "ode_convergence_order"),
        (
            Method::Dopri5,
            Bug::OverrunsBudget,
            "ode_bad_input_is_typed_error",
        ),
        (
            Method::Dop853,
            Bug::OneStepOverBudget,
            "ode_step_budget_honoured",
        ),
    ];
    for (method, bug, law) in cases {
        let failed = failing_law(Arc::new(OdeSolvers(method)), bug);
        let hit = failed.iter().find(|(name, _)| name == law);
        assert!(
            hit.is_some(),
            "{method:?} with {bug:?}: {law} held; failed: {failed:?}"
        );
        println!("{law} on {method:?} with {bug:?}:\n{}\n", hit.unwrap().1);
    }
}

#[test]
fn each_law_passing_on_diffsol_fails_on_a_bug_planted_in_its_adapter() {
    let cases = [
        (Bug::IgnoresTolerance, "ode_tolerance_proportionality"),
        (Bug::ShortBackward, "ode_round_trip"),
        (Bug::Jitter, "ode_reproducible"),
        (Bug::OneStepOverBudget, "ode_step_budget_honoured"),
    ];
    for (bug, law) in cases {
        let failed = failing_law(Arc::new(Diffsol), bug);
        let hit = failed.iter().find(|(name, _)| name == law);
        assert!(
            hit.is_some(),
            "diffsol with {bug:?}: {law} held; failed: {failed:?}"
        );
        println!("{law} on diffsol with {bug:?}:\n{}\n", hit.unwrap().1);
    }
}

/// The reference's Adam steps a zero-element parameter (its update is empty, the other leaf's is
/// the reference's); a subject that drops the empty leaf from its updates, and candle's Adam
/// (which errs: `docs/findings/candle-optimisers-empty-parameter.md`), fail the law with a
/// message naming the optimizer, the dtype and what went wrong.
#[test]
fn the_empty_parameter_law_holds_on_the_reference_and_fails_on_a_dropped_leaf_and_on_candle() {
    use harness::optim;
    use harness::subject::optimizer::{Optimizer, OptimizerSpec, Staged};
    use harness::tree::Tree;
    use peers::pytorch_convention::{steps_empty_parameter, Torch};

    let reference =
        |s: &OptimizerSpec| Ok(Staged::new(optim::adam(s.learning_rate, s.hyper.moments)?));
    assert_eq!(steps_empty_parameter(&reference, &[Torch::Adam]), Ok(2));

    /// The reference's Adam, with every zero-element leaf left out of its updates.
    struct DropsEmpty<T>(T);
    impl<E: harness::backend::Float, T: Optimizer<E>> Optimizer<E> for DropsEmpty<T> {
        type State = T::State;
        fn init(&mut self, p: &Tree<E>) -> Result<T::State> {
            self.0.init(p)
        }
        fn update(
            &mut self,
            g: &Tree<E>,
            s: &T::State,
            p: &Tree<E>,
        ) -> Result<(Tree<E>, T::State)> {
            let (u, next) = self.0.update(g, s, p)?;
            let kept = u
                .iter()
                .filter(|(_, a)| !a.is_empty())
                .map(|(n, a)| (n.clone(), a.clone()));
            Ok((Tree::from_leaves(kept)?, next))
        }
    }
    let dropping = |s: &OptimizerSpec| Ok(DropsEmpty(reference(s)?));
    let e = steps_empty_parameter(&dropping, &[Torch::Adam]).unwrap_err();
    assert!(e.contains("Adam float32"), "{e}");
    println!("dropped leaf: {e}");

    let e = steps_empty_parameter(&peers::candle_optimisers_adapter::make_adam, &[Torch::Adam])
        .unwrap_err();
    assert!(e.contains("derived from its value"), "{e}");
    println!("candle Adam: {e}");

    // an f32-only subject is stepped in f32 only, from an f32 spec
    let asked = std::cell::RefCell::new(Vec::new());
    let only = harness::subject::optimizer::f32_only(|s: &OptimizerSpec| {
        asked.borrow_mut().push(s.dtype);
        reference(s)
    });
    assert_eq!(steps_empty_parameter(&only, &[Torch::Adam]), Ok(1));
    assert_eq!(*asked.borrow(), [harness::backend::DType::F32]);
    // a factory that builds nothing fails the law rather than passing it on nothing
    let nothing = |s: &OptimizerSpec| -> Result<Staged<optim::AdamW>> {
        Err(harness::subject::optimizer::unsupported(s))
    };
    let r = peers::empty_parameter_law(&nothing, &[Torch::Adam]);
    let c = r.counterexample.unwrap_or_default();
    assert!(
        !r.passed && c.starts_with("no (optimizer, dtype) pair reached"),
        "{c}"
    );
}
