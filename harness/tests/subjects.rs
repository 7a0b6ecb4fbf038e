//! The suites of `harness::subject` pass on the reference and fail, with a small
//! counterexample, on a subject with a planted bug — one per law.

harness::install_counting_allocator!();

use harness::backend::{DType, Float};
use harness::ode::{Solver, Tableau};
use harness::optim::{self, ChainState, MomentState, NoState, Selection, Transform};
use harness::reference::Result;
use harness::stage::{HasSignature, LeafSig, Signature};
use harness::subject::ode::{
    self as ode_suite, OdeSolver, ReferenceSolver, SolveReport, SolveRequest, Stepping,
};
use harness::subject::optimizer::{
    self, Algorithm, OptimizerSpec, Staged, SuiteOptions, SuiteReport,
};
use harness::tree::Tree;
use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// The suites measure memory process-wide: the tests of this binary run one at a time, so that
/// no other test allocates during a measurement.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The failing laws of a report, by name.
fn failed(r: &SuiteReport) -> Vec<&str> {
    r.laws
        .iter()
        .filter(|l| !l.passed)
        .map(|l| l.name.as_str())
        .collect()
}

fn counterexample<'a>(r: &'a SuiteReport, law: &str) -> &'a str {
    r.laws
        .iter()
        .find(|l| l.name == law)
        .and_then(|l| l.counterexample.as_deref())
        .unwrap_or_else(|| panic!("{law} has no counterexample:\n{}", r.summary()))
}

fn opts() -> SuiteOptions {
    SuiteOptions {
        cases: 48,
        ..SuiteOptions::default()
    }
}

type AdamChain = optim::Chain<optim::ScaleByAdam, optim::ScaleByLearningRate>;

/// The reference Adam of a spec (RAdam unsupported).
fn reference_adam(spec: &OptimizerSpec) -> Result<AdamChain> {
    match spec.algorithm {
        Algorithm::Adam => optim::adam(spec.learning_rate, spec.hyper.moments),
        Algorithm::RAdam => Err(optimizer::unsupported(spec)),
    }
}

#[test]
fn optimizer_suite_passes_on_the_reference_adam_and_both_radam_forms() {
    let _serial = serial();
    let adam = |s: &OptimizerSpec| reference_adam(s).map(Staged::new);
    let r = optimizer::check("reference adam", &adam, &opts());
    assert!(r.passed(), "{}", r.summary());
    for selection in [Selection::Where, Selection::Branch] {
        let radam = move |s: &OptimizerSpec| match s.algorithm {
            Algorithm::RAdam => optim::radam(s.learning_rate, s.hyper, selection).map(Staged::new),
            Algorithm::Adam => Err(optimizer::unsupported(s)),
        };
        let r = optimizer::check("reference radam", &radam, &opts());
        assert!(r.passed(), "{selection:?}: {}", r.summary());
    }
}

/// A planted bug around a reference transform.
#[derive(Clone, Copy, PartialEq)]
enum Bug {
    /// The step count joins the static key: a new trace every step.
    CounterInKey,
    /// Updates scaled by 1 + 1e-3: a numerical slip.
    Scaled,
    /// Hyperparameters never validated: the default Adam whatever was asked.
    NoValidation,
    /// The state carries a `count` leaf that is weak after `init` and strong after `update`.
    WeakInit,
    /// `0 / 0` where a gradient entry is exactly zero (an unguarded branch).
    NanOnZeroGrad,
    /// Keeps every update it returns (a buffer per step).
    Leak,
    /// The step count advances once per tensor instead of once per step (a counter bumped
    /// inside the loop over the leaves).
    CountPerTensor,
    /// The step count is kept in 8 bits: step 256 stores 0, so step 257 bias-corrects as step 1.
    EightBitCount,
}

struct Planted {
    inner: AdamChain,
    bug: Bug,
    steps: Cell<u64>,
    kept: RefCell<Vec<Vec<f64>>>,
}

#[derive(Clone, Debug)]
struct PlantedState<S> {
    inner: S,
    strong: bool,
}

impl<S: HasSignature> HasSignature for PlantedState<S> {
    fn signature(&self) -> Signature {
        let mut s = self.inner.signature();
        let leaf = if self.strong {
            LeafSig::strong(&[], DType::I32)
        } else {
            LeafSig::weak(&[], DType::I32)
        };
        s.push("extra_count", leaf);
        s
    }
}

impl<E: Float> Transform<E> for Planted {
    type State = PlantedState<ChainState<MomentState<E::Acc>, NoState>>;
    fn static_key(&self) -> u64 {
        let k = Transform::<E>::static_key(&self.inner);
        if self.bug == Bug::CounterInKey {
            k ^ self.steps.get()
        } else {
            k
        }
    }
    fn init(&self, params: &Tree<E>) -> Result<Self::State> {
        Ok(PlantedState {
            inner: self.inner.init(params)?,
            strong: self.bug != Bug::WeakInit,
        })
    }
    fn update(&self, g: &Tree<E>, s: &Self::State, p: &Tree<E>) -> Result<(Tree<E>, Self::State)> {
        self.steps.set(self.steps.get() + 1);
        let (mut u, inner) = self.inner.update(g, &s.inner, p)?;
        for (name, a) in u.iter_mut() {
            let grads = g.get(name).expect("same leaves").data().to_vec();
            for (x, gi) in a.data_mut().iter_mut().zip(grads) {
                *x = match self.bug {
                    Bug::Scaled => E::of_f64(x.as_f64() * (1.0 + 1e-3)),
                    Bug::NanOnZeroGrad if gi.as_f64() == 0.0 => E::of_f64(0.0 / gi.as_f64()),
                    _ => *x,
                };
            }
            if self.bug == Bug::Leak {
                self.kept
                    .borrow_mut()
                    .push(a.data().iter().map(|x| x.as_f64()).collect());
            }
        }
        let mut inner = inner;
        match self.bug {
            Bug::CountPerTensor => inner.0.count += g.iter().count() as i32 - 1,
            Bug::EightBitCount => inner.0.count = inner.0.count as u8 as i32,
            _ => {}
        }
        Ok((
            u,
            PlantedState {
                inner,
                strong: true,
            },
        ))
    }
}

/// The factory of the subject with `bug` planted.
fn planted(bug: Bug) -> impl Fn(&OptimizerSpec) -> Result<Staged<Planted>> {
    move |spec: &OptimizerSpec| {
        let spec = if bug == Bug::NoValidation {
            OptimizerSpec {
                hyper: Default::default(),
                learning_rate: 1e-3,
                ..*spec
            }
        } else {
            *spec
        };
        Ok(Staged::new(Planted {
            inner: reference_adam(&spec)?,
            bug,
            steps: Cell::new(0),
            kept: RefCell::new(Vec::new()),
        }))
    }
}

fn planted_suite(bug: Bug) -> SuiteReport {
    optimizer::check("planted", &planted(bug), &opts())
}

#[test]
fn each_optimizer_law_fails_on_its_planted_bug_with_a_small_counterexample() {
    let _serial = serial();
    let cases = [
        (Bug::CounterInKey, "optimizer_one_trace", "traced 2 times"),
        (Bug::Scaled, "optimizer_matches_reference", "step 1"),
        (
            Bug::NoValidation,
            "optimizer_rejects_invalid_hyperparameters",
            "accepted",
        ),
        (
            Bug::WeakInit,
            "optimizer_state_signature_fixed",
            "extra_count",
        ),
        (Bug::NanOnZeroGrad, "optimizer_updates_finite", "NaN"),
        (Bug::Leak, "optimizer_live_bytes_flat", "live bytes grew"),
        // found only on a tree of two tensors or more, from the second step on
        (Bug::CountPerTensor, "optimizer_matches_reference", "step 2"),
        // found only on a run past 256 steps
        (
            Bug::EightBitCount,
            "optimizer_matches_reference",
            "step 257",
        ),
    ];
    for (bug, law, needle) in cases {
        let r = planted_suite(bug);
        assert!(
            failed(&r).contains(&law),
            "{law} did not fail:\n{}",
            r.summary()
        );
        let c = counterexample(&r, law);
        assert!(c.contains(needle), "{law}: {c}");
        assert!(c.contains("minimal input"), "{law}: {c}");
        println!("{law} on its planted bug:\n{c}\n");
    }
}

#[test]
fn a_law_that_no_case_reaches_fails_and_a_passing_law_counts_the_cases_that_reached_the_subject() {
    let _serial = serial();
    // Adam's spec refused as RAdam's is: the factory builds nothing
    let nothing =
        |s: &OptimizerSpec| -> Result<Staged<AdamChain>> { Err(optimizer::unsupported(s)) };
    let r = optimizer::check(
        "builds nothing",
        &nothing,
        &SuiteOptions {
            memory: false,
            ..opts()
        },
    );
    let c = counterexample(&r, "optimizer_matches_reference");
    assert!(!r.passed());
    assert!(c.starts_with("no case reached the subject"), "{c}");
    // the memory law, which steps the first default spec the factory builds, says it built none
    let few = harness::laws::radam::MemCase {
        elements: 4,
        steps: 2,
    };
    let e = optimizer::live_bytes_flat(&few, &nothing).unwrap_err();
    assert!(e.starts_with("the factory builds no default spec"), "{e}");
    // the reference Adam is built for the Adam cases only, and the report says how many ran
    let adam = |s: &OptimizerSpec| reference_adam(s).map(Staged::new);
    let r = optimizer::check(
        "reference adam",
        &adam,
        &SuiteOptions {
            memory: false,
            ..opts()
        },
    );
    for law in &r.laws {
        // each invalid case draws one dtype, so that law runs twice the cases
        let drawn = match law.name.as_str() {
            "optimizer_rejects_invalid_hyperparameters" => optimizer::invalid_cases(opts().cases),
            _ => opts().cases,
        };
        assert!(
            law.passed && law.cases > 0 && law.cases < drawn,
            "{}",
            r.summary()
        );
        let evidence = law.counterexample.as_deref().unwrap_or_default();
        assert!(
            evidence.starts_with(&format!("{} of {drawn} cases", law.cases)),
            "{evidence}"
        );
    }
}

/// A subject with an `Optimizer<E>` implementation for one float type only: f32 (most Rust
/// training code) or f64 (much scientific code).
struct InOneDtype<E, T>(Staged<T>, PhantomData<E>);

fn in_one_dtype<E, T>(subject: Staged<T>) -> InOneDtype<E, T> {
    InOneDtype(subject, PhantomData)
}

impl<E: Float, T: Transform<E>> optimizer::Optimizer<E> for InOneDtype<E, T> {
    type State = T::State;
    fn init(&mut self, p: &Tree<E>) -> Result<T::State> {
        self.0.init(p)
    }
    fn update(&mut self, g: &Tree<E>, s: &T::State, p: &Tree<E>) -> Result<(Tree<E>, T::State)> {
        self.0.update(g, s, p)
    }
    fn traces(&self) -> Option<usize> {
        optimizer::Optimizer::<E>::traces(&self.0)
    }
}

/// The suite on the reference Adam and on each planted bug, in `$e` only through `$wrap`
/// (`optimizer::f32_only` or `optimizer::f64_only`): the reference passes every law, each
/// property law reaching some cases but fewer than the run in both dtypes, and each bug fails
/// its law with a counterexample in `$e`. The memory law steps the subject in `$e`.
macro_rules! judged_in_one_dtype {
    ($e:ty, $wrap:path) => {{
        let dtype = <$e as Float>::DTYPE;
        let both = optimizer::check(
            "reference adam",
            &|s: &OptimizerSpec| reference_adam(s).map(Staged::new),
            &opts(),
        );
        let only = optimizer::check(
            "reference adam, one dtype",
            &$wrap(|s: &OptimizerSpec| {
                reference_adam(s).map(|t| in_one_dtype::<$e, _>(Staged::new(t)))
            }),
            &opts(),
        );
        assert!(only.passed(), "{dtype}: {}", only.summary());
        let reached =
            |r: &SuiteReport, law: &str| r.laws.iter().find(|l| l.name == law).unwrap().cases;
        for law in [
            "optimizer_matches_reference",
            "optimizer_updates_finite",
            "optimizer_rejects_invalid_hyperparameters",
            "optimizer_state_signature_fixed",
            "optimizer_one_trace",
        ] {
            // the other dtype's cases are skipped, not failed, and not counted
            let (one, both) = (reached(&only, law), reached(&both, law));
            assert!(0 < one && one < both, "{dtype} {law}: {one} of {both}");
        }
        for (bug, law, needle) in [
            (Bug::Scaled, "optimizer_matches_reference", "step 1"),
            (Bug::NanOnZeroGrad, "optimizer_updates_finite", "NaN"),
            (Bug::CountPerTensor, "optimizer_matches_reference", "step 2"),
            (Bug::CounterInKey, "optimizer_one_trace", "traced 2 times"),
            (
                Bug::WeakInit,
                "optimizer_state_signature_fixed",
                "extra_count",
            ),
            (
                Bug::NoValidation,
                "optimizer_rejects_invalid_hyperparameters",
                "accepted",
            ),
            (Bug::Leak, "optimizer_live_bytes_flat", "live bytes grew"),
        ] {
            let make = move |spec: &OptimizerSpec| planted(bug)(spec).map(in_one_dtype::<$e, _>);
            let r = optimizer::check("planted, one dtype", &$wrap(make), &opts());
            assert!(
                failed(&r).contains(&law),
                "{dtype}: {law} did not fail:\n{}",
                r.summary()
            );
            let c = counterexample(&r, law);
            assert!(c.contains(needle), "{dtype} {law}: {c}");
            // the case shown is one in the subject's dtype (the memory law's case is a size)
            if law != "optimizer_live_bytes_flat" {
                assert!(
                    c.contains(&format!("OptCase {{ {dtype} ")) || c.contains(&format!("dtype: {dtype:?}")),
                    "{dtype} {law}: {c}"
                );
            }
        }
    }};
}

#[test]
fn a_subject_in_f32_only_or_in_f64_only_is_judged_on_its_own_cases_and_its_planted_bugs_fail() {
    let _serial = serial();
    judged_in_one_dtype!(f32, optimizer::f32_only);
    judged_in_one_dtype!(f64, optimizer::f64_only);
}

#[test]
fn a_one_dtype_subject_refuses_the_other_dtype_with_an_unsupported_error() {
    use optimizer::Optimizer;
    let spec = OptimizerSpec::default();
    let f32_factory = optimizer::f32_only(|s: &OptimizerSpec| {
        reference_adam(s).map(|t| in_one_dtype::<f32, _>(Staged::new(t)))
    });
    let mut subject = f32_factory(&spec).expect("an f32 spec builds");
    let e = Optimizer::<f64>::init(&mut subject, &harness::laws::radam::leaf::<f64>(&[0.5]))
        .unwrap_err();
    assert!(optimizer::is_unsupported(&e), "{e}");
    assert_eq!(
        e.to_string(),
        "unsupported by this implementation: float64 (a subject in float32 only)"
    );
    let e = f32_factory(&OptimizerSpec {
        dtype: DType::F64,
        ..spec
    })
    .err()
    .unwrap();
    assert!(optimizer::is_unsupported(&e), "{e}");
    // any other error is not "unsupported": a law reports it
    assert!(!optimizer::is_unsupported(
        &harness::reference::Error::External("unsupported".into())
    ));
}

#[test]
fn a_hand_built_case_whose_tensors_do_not_fit_its_values_is_an_error_not_a_panic() {
    let run = harness::laws::strategies::OptCase {
        hyper: Default::default(),
        learning_rate: 1e-3,
        dtype: DType::F64,
        params: vec![0.5, -1.0],
        grads: vec![vec![0.1, 0.2]],
    };
    let mut case = optimizer::SuiteCase::one_tensor(run, Algorithm::Adam);
    assert!(case.params::<f64>().is_ok());
    case.tensors = vec![("w".into(), vec![3])];
    let e = case.params::<f64>().unwrap_err().to_string();
    assert!(e.contains("hold 3 values, but it has 2"), "{e}");
    case.tensors = vec![("w".into(), vec![1]), ("w".into(), vec![1])];
    let e = case.grads::<f32>().unwrap_err();
    assert!(matches!(e, harness::reference::Error::Structure(_)), "{e}");
    case.tensors = vec![("w".into(), vec![usize::MAX, 2])];
    let e = case.params::<f32>().unwrap_err();
    assert!(matches!(e, harness::reference::Error::Overflow(_)), "{e}");
    let make = |s: &OptimizerSpec| reference_adam(s).map(Staged::new);
    let law = optimizer::matches_reference::<f64, _>(&case, &make).unwrap_err();
    assert!(law.starts_with("a malformed case"), "{law}");
}

#[test]
fn the_suite_draws_both_algorithms_several_tensors_matrices_and_long_runs() {
    use proptest::strategy::{Strategy, ValueTree};
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let cases: Vec<_> = (0..400)
        .map(|_| {
            optimizer::suite_case()
                .new_tree(&mut runner)
                .unwrap()
                .current()
        })
        .collect();
    let share = |f: &dyn Fn(&optimizer::SuiteCase) -> bool| {
        cases.iter().filter(|c| f(c)).count() as f64 / cases.len() as f64
    };
    let adam = share(&|c| c.algorithm == Algorithm::Adam);
    assert!((0.4..0.6).contains(&adam), "Adam in {adam} of the cases");
    assert!(share(&|c| c.tensors.len() >= 2) > 0.3);
    assert!(share(&|c| c.tensors.iter().any(|(_, s)| s.len() == 2)) > 0.1);
    let long = share(&|c| c.run.grads.len() == optimizer::LONG_RUN_STEPS);
    assert!((0.05..0.25).contains(&long), "long runs: {long}");
    for c in &cases {
        let sizes: usize = c
            .tensors
            .iter()
            .map(|(_, s)| s.iter().product::<usize>())
            .sum();
        assert_eq!(sizes, c.run.params.len(), "{c:?}");
        let empty = c.tensors.iter().any(|(_, s)| s.contains(&0));
        assert!(
            !empty || c.tensors.len() == 1,
            "an empty tensor beside others: {c:?}"
        );
        assert!(matches!(c.run.dtype, DType::F32 | DType::F64), "{c:?}");
        let p = c.params::<f32>().unwrap();
        assert_eq!(p.iter().count(), c.tensors.len());
        assert!(
            c.grads::<f64>()
                .unwrap()
                .iter()
                .all(|g| g.check_like(&p, "grads").is_ok()),
            "{c:?}"
        );
    }
}

#[test]
fn a_subject_that_does_not_stage_has_the_trace_law_marked_not_applicable() {
    let _serial = serial();
    struct Eager(AdamChain);
    impl<E: Float> harness::subject::Optimizer<E> for Eager {
        type State = ChainState<MomentState<E::Acc>, NoState>;
        fn init(&mut self, p: &Tree<E>) -> Result<Self::State> {
            self.0.init(p)
        }
        fn update(
            &mut self,
            g: &Tree<E>,
            s: &Self::State,
            p: &Tree<E>,
        ) -> Result<(Tree<E>, Self::State)> {
            self.0.update(g, s, p)
        }
    }
    let make = |s: &OptimizerSpec| reference_adam(s).map(Eager);
    let r = optimizer::check("eager", &make, &opts());
    assert!(r.passed(), "{}", r.summary());
    assert!(r.laws.iter().all(|l| l.name != "optimizer_one_trace"));
    assert!(r
        .not_applicable
        .iter()
        .any(|(l, _)| l == "optimizer_one_trace"));
}

// ---------------------------------------------------------------------------------------------
// ODE solvers

fn ode_opts() -> ode_suite::SuiteOptions {
    ode_suite::SuiteOptions {
        cases: 12,
        time_limit: Duration::from_secs(5),
        ..Default::default()
    }
}

#[test]
fn ode_suite_passes_on_every_reference_method() {
    let _serial = serial();
    for s in Solver::ALL {
        let r = ode_suite::check(Arc::new(ReferenceSolver::new(s)), &ode_opts());
        assert!(r.passed(), "{}", r.summary());
        let adaptive = s.tableau().b_err().is_some();
        assert_eq!(
            r.laws.len(),
            if adaptive { 8 } else { 4 },
            "{}",
            r.summary()
        );
    }
}

/// A reference method with a planted bug.
struct PlantedSolver {
    method: Solver,
    bug: SolverBug,
    calls: std::sync::atomic::AtomicU64,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum SolverBug {
    /// Claims order 5 while stepping Heun (order 2).
    WrongOrder,
    /// The same, and steps adaptively only (no constant steps for the convergence-order law).
    AdaptiveOnlyWrongOrder,
    /// Ignores the tolerance asked: always rtol 1e-2.
    IgnoresTolerance,
    /// Backward solves stop one step short (the last step dropped).
    DropsLastBackwardStep,
    /// Adds the call count times 1 ULP to the answer.
    NotReproducible,
    /// Asserts that `y0` is finite (a panic instead of an error).
    PanicsOnNan,
    /// Never returns when a time is non-finite.
    HangsOnInfiniteTime,
    /// Never returns when asked for constant steps of 0 (one input in one stepping mode).
    HangsOnZeroStep,
    /// Ignores the step budget: answers after as many steps as it likes.
    OverrunsBudget,
    /// Takes one step more than its budget (a `>` where `>=` belongs).
    OneStepOverBudget,
    /// Answers with an empty final state (an adapter that forgot to copy it out).
    EmptyAnswer,
    /// Answers with a final state of NaN.
    NanAnswer,
    /// Reports no rejected step (its budget still counts them).
    HidesRejections,
}

impl OdeSolver for PlantedSolver {
    fn name(&self) -> String {
        format!("planted {:?}", self.bug)
    }
    fn order(&self) -> Option<u32> {
        match self.bug {
            SolverBug::WrongOrder | SolverBug::AdaptiveOnlyWrongOrder => Some(5),
            _ => Some(self.method.tableau().order()),
        }
    }
    fn evaluations(&self, s: &Stepping) -> Option<ode_suite::Evaluations> {
        ReferenceSolver(self.method).evaluations(s)
    }
    fn supports(&self, s: &Stepping) -> bool {
        let constant = matches!(s, Stepping::Constant { .. });
        ReferenceSolver(self.method).supports(s)
            && !(constant && self.bug == SolverBug::AdaptiveOnlyWrongOrder)
    }
    fn solve(&self, r: &SolveRequest) -> Result<SolveReport> {
        let reference = ReferenceSolver(self.method);
        let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        match self.bug {
            SolverBug::IgnoresTolerance => {
                let mut r = r.clone();
                if let Stepping::Adaptive { .. } = r.stepping {
                    r.stepping = Stepping::Adaptive {
                        rtol: 1e-2,
                        atol: 1e-4,
                    };
                }
                reference.solve(&r)
            }
            SolverBug::DropsLastBackwardStep if r.t1 < r.t0 => {
                let mut short = r.clone();
                short.t1 = r.t1 + 0.05 * (r.t0 - r.t1);
                reference.solve(&short)
            }
            SolverBug::NotReproducible => reference.solve(r).map(|mut s| {
                s.y_final[0] = f64::from_bits(s.y_final[0].to_bits() + (n % 2));
                s
            }),
            SolverBug::PanicsOnNan => {
                assert!(r.y0.iter().all(|v| v.is_finite()), "y0 must be finite");
                reference.solve(r)
            }
            SolverBug::HangsOnZeroStep if r.stepping == (Stepping::Constant { dt: 0.0 }) => loop {
                std::thread::sleep(Duration::from_millis(50));
            },
            SolverBug::HangsOnInfiniteTime if !(r.t0.is_finite() && r.t1.is_finite()) => loop {
                std::thread::sleep(Duration::from_millis(50));
            },
            SolverBug::OverrunsBudget => {
                let mut r = r.clone();
                r.max_steps = 100_000;
                reference.solve(&r)
            }
            SolverBug::OneStepOverBudget => {
                let mut r = r.clone();
                r.max_steps += 1;
                reference.solve(&r)
            }
            SolverBug::EmptyAnswer => reference.solve(r).map(|mut s| {
                s.y_final.clear();
                s
            }),
            SolverBug::NanAnswer => reference.solve(r).map(|mut s| {
                s.y_final.fill(f64::NAN);
                s
            }),
            SolverBug::HidesRejections => reference.solve(r).map(|mut s| {
                s.rejected = 0;
                s
            }),
            _ => reference.solve(r),
        }
    }
}

#[test]
fn each_ode_law_fails_on_its_planted_bug_with_a_small_counterexample() {
    let _serial = serial();
    let cases = [
        (
            Solver::Heun,
            SolverBug::WrongOrder,
            "ode_convergence_order",
            "measured order",
        ),
        (
            Solver::Heun,
            SolverBug::AdaptiveOnlyWrongOrder,
            "ode_adaptive_order",
            "the growth is that of order",
        ),
        (
            Solver::Tsit5,
            SolverBug::IgnoresTolerance,
            "ode_tolerance_proportionality",
            "rtol",
        ),
        (
            Solver::Dopri5,
            SolverBug::DropsLastBackwardStep,
            "ode_round_trip",
            "round trip missed",
        ),
        (
            Solver::Tsit5,
            SolverBug::NotReproducible,
            "ode_reproducible",
            "then",
        ),
        (
            Solver::Tsit5,
            SolverBug::PanicsOnNan,
            "ode_bad_input_is_typed_error",
            "panicked",
        ),
        (
            Solver::Bosh3,
            SolverBug::HangsOnInfiniteTime,
            "ode_bad_input_is_typed_error",
            "no answer within",
        ),
        (
            Solver::Tsit5,
            SolverBug::HangsOnZeroStep,
            "ode_bad_input_is_typed_error",
            "Tolerance(0.0), constant steps",
        ),
        (
            Solver::Tsit5,
            SolverBug::OverrunsBudget,
            "ode_bad_input_is_typed_error",
            "MaxSteps accepted",
        ),
        (
            Solver::Dopri5,
            SolverBug::OneStepOverBudget,
            "ode_step_budget_honoured",
            "with a budget of",
        ),
        (
            Solver::Bosh3,
            SolverBug::HidesRejections,
            "ode_evaluations_accounted",
            "attempted steps unreported",
        ),
    ];
    for (method, bug, law, needle) in cases {
        let solver = Arc::new(PlantedSolver {
            method,
            bug,
            calls: Default::default(),
        });
        let opts = ode_suite::SuiteOptions {
            time_limit: Duration::from_millis(
                if matches!(
                    bug,
                    SolverBug::HangsOnInfiniteTime | SolverBug::HangsOnZeroStep
                ) {
                    300
                } else {
                    5000
                },
            ),
            ..ode_opts()
        };
        let r = ode_suite::check(solver, &opts);
        assert!(
            failed(&r).contains(&law),
            "{bug:?}: {law} did not fail:\n{}",
            r.summary()
        );
        let c = counterexample(&r, law);
        assert!(c.contains(needle), "{law}: {c}");
        println!("{law} on {bug:?}:\n{c}\n");
    }
}

#[test]
fn an_answer_of_the_wrong_length_or_of_nan_fails_every_law_that_reads_it() {
    let _serial = serial();
    let run = |bug| {
        let solver = Arc::new(PlantedSolver {
            method: Solver::Tsit5,
            bug,
            calls: Default::default(),
        });
        ode_suite::check(solver, &ode_opts())
    };
    // every law but the bad-input one reads the final state, and refuses one of 0 values
    let empty = run(SolverBug::EmptyAnswer);
    for law in [
        "ode_convergence_order",
        "ode_tolerance_proportionality",
        "ode_adaptive_order",
        "ode_round_trip",
        "ode_reproducible",
        "ode_step_budget_honoured",
        "ode_evaluations_accounted",
    ] {
        assert!(failed(&empty).contains(&law), "{law}:\n{}", empty.summary());
        let c = counterexample(&empty, law);
        assert!(
            c.contains("final state of 0 values for a state of 2"),
            "{law}: {c}"
        );
    }
    // the laws that measure an error against a closed form find a NaN one (a bitwise-
    // reproducible NaN is still reproducible; the round trip's backward solve refuses a NaN `y0`)
    let nan = run(SolverBug::NanAnswer);
    for (law, needle) in [
        ("ode_convergence_order", "measured order NaN"),
        ("ode_tolerance_proportionality", "error NaN"),
        ("ode_round_trip", "y0: [NaN, NaN]"),
    ] {
        assert!(failed(&nan).contains(&law), "{law}:\n{}", nan.summary());
        let c = counterexample(&nan, law);
        assert!(c.contains(needle), "{law}: {c}");
    }
}

/// Classical Runge–Kutta (order 4), constant steps only, written here as a black box: its second
/// and third stages at `t + node h` (`node = 1/2` is the method; another value evaluates them at
/// the wrong time). `frozen`: the field evaluated at `t0` whatever the time.
struct Rk4 {
    node: f64,
    frozen: bool,
}

impl OdeSolver for Rk4 {
    fn name(&self) -> String {
        format!("rk4 (node {}, frozen time {})", self.node, self.frozen)
    }
    fn order(&self) -> Option<u32> {
        Some(4)
    }
    fn supports(&self, s: &Stepping) -> bool {
        matches!(s, Stepping::Constant { .. })
    }
    fn solve(&self, r: &SolveRequest) -> Result<SolveReport> {
        let Stepping::Constant { dt } = r.stepping else {
            return Err(harness::reference::Error::Unsupported(
                "adaptive steps".into(),
            ));
        };
        let finite = r.y0.iter().all(|v| v.is_finite()) && r.t0.is_finite() && r.t1.is_finite();
        if !(finite && dt.is_finite() && dt != 0.0 && dt.signum() == (r.t1 - r.t0).signum()) {
            return Err(harness::reference::Error::External(format!(
                "bad request {r:?}"
            )));
        }
        let f = |t: f64, y: &[f64]| {
            let mut d = vec![0.0; y.len()];
            r.field.eval(if self.frozen { r.t0 } else { t }, y, &mut d);
            d
        };
        let axpy = |y: &[f64], k: &[f64], h: f64| -> Vec<f64> {
            y.iter().zip(k).map(|(a, b)| a + h * b).collect()
        };
        let (mut t, mut y, mut accepted) = (r.t0, r.y0.clone(), 0);
        while (r.t1 - t) * dt.signum() > 0.0 {
            if accepted >= r.max_steps {
                return Err(harness::reference::Error::MaxStepsExceeded {
                    max_steps: r.max_steps,
                    t,
                    t_end: r.t1,
                });
            }
            let h = if (r.t1 - t).abs() < dt.abs() {
                r.t1 - t
            } else {
                dt
            };
            let k1 = f(t, &y);
            let k2 = f(t + self.node * h, &axpy(&y, &k1, h / 2.0));
            let k3 = f(t + self.node * h, &axpy(&y, &k2, h / 2.0));
            let k4 = f(t + h, &axpy(&y, &k3, h));
            for (i, v) in y.iter_mut().enumerate() {
                *v += h / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]);
            }
            t += h;
            accepted += 1;
        }
        Ok(SolveReport {
            y_final: y,
            accepted,
            rejected: 0,
        })
    }
}

#[test]
fn a_black_box_solver_that_evaluates_its_stages_at_the_wrong_time_fails_the_order_law() {
    let _serial = serial();
    let run = |node, frozen| ode_suite::check(Arc::new(Rk4 { node, frozen }), &ode_opts());
    let good = run(0.5, false);
    assert!(good.passed(), "{}", good.summary());
    // on the autonomous rotation the stage times are never read: only y' = (1 + t) A y sees them
    for (node, frozen) in [(1.0 / 3.0, false), (0.5, true)] {
        let r = run(node, frozen);
        assert_eq!(failed(&r), ["ode_convergence_order"], "{}", r.summary());
        let c = counterexample(&r, "ode_convergence_order");
        assert!(
            c.starts_with("y' = (1 + t) A y: rk4") && c.contains("measured order"),
            "{c}"
        );
    }
}

#[test]
fn a_custom_tableau_runs_through_the_reference_stepper_and_is_judged_by_its_claimed_order() {
    let _serial = serial();
    // Heun's weights with one perturbed: still consistent (weights sum to 1) but only first
    // order; the convergence law catches the claimed order 2.
    let heun = Solver::Heun.tableau();
    let bad = Tableau::new(
        "heun-perturbed",
        heun.c().to_vec(),
        (0..heun.stages()).map(|i| heun.a(i).to_vec()).collect(),
        vec![0.6, 0.4],
        heun.b_err().map(|e| e.to_vec()),
        heun.order(),
        heun.fsal(),
    )
    .unwrap();
    let c = harness::laws::ode::RotationCase {
        alpha: 0.5,
        omega: 1.0,
        y0: [1.0, 0.0],
        t1: 2.0,
    };
    let e = harness::laws::ode::convergence_order_of(&c, &[bad]).unwrap_err();
    assert!(e.contains("measured order"), "{e}");
}

/// Classical Runge–Kutta with adaptive steps, its local error estimated by the difference from
/// the Euler step (`h k1`): a correct solver whose estimate is of order 1, not `4 - 1`.
/// `declares`: whether it says so through `error_estimate_order`.
struct Rk4AgainstEuler {
    declares: bool,
}

impl OdeSolver for Rk4AgainstEuler {
    fn name(&self) -> String {
        format!(
            "rk4 against euler (declares its estimate: {})",
            self.declares
        )
    }
    fn order(&self) -> Option<u32> {
        Some(4)
    }
    fn error_estimate_order(&self) -> Option<u32> {
        Some(if self.declares { 1 } else { 3 })
    }
    fn supports(&self, s: &Stepping) -> bool {
        matches!(s, Stepping::Adaptive { .. })
    }
    fn backward(&self) -> bool {
        false
    }
    fn solve(&self, r: &SolveRequest) -> Result<SolveReport> {
        let bad = || harness::reference::Error::External(format!("bad request {r:?}"));
        let Stepping::Adaptive { rtol, atol } = r.stepping else {
            return Err(bad());
        };
        let finite = r.y0.iter().all(|v| v.is_finite()) && r.t0.is_finite() && r.t1.is_finite();
        if !(finite && rtol > 0.0 && rtol.is_finite() && atol >= 0.0 && r.t1 >= r.t0) {
            return Err(bad());
        }
        let f = |t: f64, y: &[f64]| {
            let mut d = vec![0.0; y.len()];
            r.field.eval(t, y, &mut d);
            d
        };
        let axpy = |y: &[f64], k: &[f64], h: f64| -> Vec<f64> {
            y.iter().zip(k).map(|(a, b)| a + h * b).collect()
        };
        let (mut t, mut y) = (r.t0, r.y0.clone());
        let (mut h, mut accepted, mut rejected) = (0.01 * (r.t1 - r.t0), 0, 0);
        while t < r.t1 {
            if accepted + rejected >= r.max_steps {
                return Err(harness::reference::Error::MaxStepsExceeded {
                    max_steps: r.max_steps,
                    t,
                    t_end: r.t1,
                });
            }
            let h_step = h.min(r.t1 - t);
            let k1 = f(t, &y);
            let k2 = f(t + h_step / 2.0, &axpy(&y, &k1, h_step / 2.0));
            let k3 = f(t + h_step / 2.0, &axpy(&y, &k2, h_step / 2.0));
            let k4 = f(t + h_step, &axpy(&y, &k3, h_step));
            let y1: Vec<f64> = (0..y.len())
                .map(|i| y[i] + h_step / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]))
                .collect();
            // y1 - (y + h k1), scaled
            let err = (0..y.len())
                .map(|i| {
                    let e = y1[i] - (y[i] + h_step * k1[i]);
                    (e / (atol + rtol * y[i].abs().max(y1[i].abs()))).abs()
                })
                .fold(0.0, f64::max);
            if err <= 1.0 {
                t = if h_step == r.t1 - t { r.t1 } else { t + h_step };
                y = y1;
                accepted += 1;
            } else {
                rejected += 1;
            }
            // an order-1 estimate: h^2
            h = h_step * (0.9 * err.max(1e-10).powf(-0.5)).clamp(0.2, 5.0);
        }
        Ok(SolveReport {
            y_final: y,
            accepted,
            rejected,
        })
    }
}

#[test]
fn a_correct_pair_with_a_low_order_estimate_passes_the_adaptive_order_law_once_it_declares_it() {
    let _serial = serial();
    let run = |declares| ode_suite::check(Arc::new(Rk4AgainstEuler { declares }), &ode_opts());
    let honest = run(true);
    assert!(honest.passed(), "{}", honest.summary());
    assert!(honest
        .laws
        .iter()
        .any(|l| l.name == "ode_adaptive_order" && l.passed));
    // taken for the usual pair (an order-3 estimate), its work grows too fast
    let usual = run(false);
    assert_eq!(
        failed(&usual),
        ["ode_adaptive_order"],
        "{}",
        usual.summary()
    );
    let c = counterexample(&usual, "ode_adaptive_order");
    assert!(c.contains("an error estimate of order 3"), "{c}");
}
