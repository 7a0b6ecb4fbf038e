//! Laws of the backtracking line search: Armijo at the returned point, the evaluation count and
//! the final step size, monotone descent on convex quadratics, one state signature and one trace
//! for N staged updates, the zero step on non-finite objectives, and an objective's value at a
//! candidate taken without building it.

use super::{check_property, first_bit_difference, unsupported_dtype, Family, Law};
use crate::backend::{Float, Real};
use crate::optim::linesearch::{
    self, point, sgd_linesearch, BacktrackingHyper, DfdxKernels, Himmelblau, LineSearch,
    LineSearchState, Matyas, Objective, Quadratic, Rosenbrock, SearchKernels, SgdLineSearch,
    Staged,
};
use crate::optim::{ChainState, NoState};
use crate::reference::Result;
use crate::stage::{HasSignature, Signature};
use crate::tree::{apply_updates, Tree};
use proptest::prelude::*;
use std::cell::Cell;

/// The fixture problem of a case.
#[derive(Clone, Debug, PartialEq)]
pub enum Problem {
    /// `(1 - x)^2 + 100 (y - x^2)^2`, 2-D.
    Rosenbrock,
    /// `(x^2 + y - 11)^2 + (x + y^2 - 7)^2`, 2-D.
    Himmelblau,
    /// `0.26 (x^2 + y^2) - 0.48 x y`, 2-D.
    Matyas,
    /// `0.5 x^T A x - b^T x` of any dimension.
    Quadratic(Quadratic),
}

/// Where the objective stops being finite: wherever `x[0] > above` it returns `value`
/// (NaN, `+inf` or `-inf`); `above = -inf` poisons every point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Poison {
    /// Threshold on `x[0]` beyond which the objective is poisoned (`-inf`: everywhere).
    pub above: f64,
    /// The value returned there: NaN, `+inf` or `-inf`.
    pub value: f64,
}

/// A run of `sgd(1) + backtracking` on one problem.
#[derive(Clone, PartialEq)]
pub struct LsCase {
    /// The objective.
    pub problem: Problem,
    /// Line-search hyperparameters (possibly invalid: the case then expects a typed error).
    pub hyper: BacktrackingHyper,
    /// Start point (its length is the problem's dimension).
    pub x0: Vec<f64>,
    /// Updates to run.
    pub steps: usize,
    /// Run in f32 (else f64).
    pub f32: bool,
    /// Where the objective stops being finite, if anywhere.
    pub poison: Option<Poison>,
}

impl LsCase {
    /// The dtype the case runs in.
    pub fn dtype(&self) -> crate::backend::DType {
        if self.f32 {
            crate::backend::DType::F32
        } else {
            crate::backend::DType::F64
        }
    }
}

impl std::fmt::Debug for LsCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let h = &self.hyper;
        write!(
            f,
            "LsCase {{ {} {:?}, x0={:?}, steps={}, max_backtracking_steps={} slope_rtol={} decrease_factor={} increase_factor={} max_learning_rate={} atol={} rtol={} store_grad={} recover={}, poison={:?} }}",
            if self.f32 { "f32" } else { "f64" },
            self.problem, self.x0, self.steps, h.max_backtracking_steps, h.slope_rtol,
            h.decrease_factor, h.increase_factor, h.max_learning_rate, h.atol, h.rtol,
            h.store_grad, h.recover_from_zero_lr, self.poison
        )
    }
}

/// The case's objective: the problem, the poison, and an evaluation counter. One type for every
/// case, so its identity in the staging key never changes.
pub struct CaseObjective {
    /// The objective.
    pub problem: Problem,
    /// Where it returns a non-finite value, if anywhere.
    pub poison: Option<Poison>,
    /// Evaluations so far (value or gradient); reset by the caller before each update.
    pub evals: Cell<usize>,
}

impl CaseObjective {
    /// The case's problem and poison, with the counter at 0.
    pub fn new(case: &LsCase) -> Self {
        Self {
            problem: case.problem.clone(),
            poison: case.poison,
            evals: Cell::new(0),
        }
    }
    fn poisoned<A: Real>(&self, x: &Tree<A>) -> Option<A> {
        let p = self.poison?;
        let x0 = x.iter().next().and_then(|(_, a)| a.data().first().copied());
        let hit = match x0 {
            Some(v) => v.as_f64() > p.above || (p.above == f64::NEG_INFINITY),
            None => p.above == f64::NEG_INFINITY,
        };
        hit.then(|| A::of_f64(p.value))
    }
}

impl<A: Real> Objective<A> for CaseObjective {
    fn value(&self, x: &Tree<A>) -> Result<A> {
        self.evals.set(self.evals.get() + 1);
        if let Some(v) = self.poisoned(x) {
            return Ok(v);
        }
        match &self.problem {
            Problem::Rosenbrock => Rosenbrock.value(x),
            Problem::Himmelblau => Himmelblau.value(x),
            Problem::Matyas => Matyas.value(x),
            Problem::Quadratic(q) => q.value(x),
        }
    }
    fn value_and_grad(&self, x: &Tree<A>) -> Result<(A, Tree<A>)> {
        self.evals.set(self.evals.get() + 1);
        let (v, g) = match &self.problem {
            Problem::Rosenbrock => Rosenbrock.value_and_grad(x),
            Problem::Himmelblau => Himmelblau.value_and_grad(x),
            Problem::Matyas => Matyas.value_and_grad(x),
            Problem::Quadratic(q) => q.value_and_grad(x),
        }?;
        Ok((self.poisoned(x).unwrap_or(v), g))
    }
    fn value_along(&self, w: &Tree<A>, eta: A, u: &Tree<A>) -> Result<A> {
        if self.poison.is_some() {
            // the poison is decided at the candidate: build it
            w.check_like(u, "direction")?;
            return self.value(&linesearch::add_scale(w, eta, u));
        }
        self.evals.set(self.evals.get() + 1);
        match &self.problem {
            Problem::Rosenbrock => Rosenbrock.value_along(w, eta, u),
            Problem::Himmelblau => Himmelblau.value_along(w, eta, u),
            Problem::Matyas => Matyas.value_along(w, eta, u),
            Problem::Quadratic(q) => q.value_along(w, eta, u),
        }
    }
    fn data_signature(&self) -> Signature {
        match &self.problem {
            Problem::Quadratic(q) => <Quadratic as Objective<A>>::data_signature(q),
            _ => Signature::new(),
        }
    }
}

type State<A> = ChainState<NoState, LineSearchState<A>>;

/// `a <= b`; false when either is NaN (so `!le` flags NaN as a violation).
fn le(a: f64, b: f64) -> bool {
    a <= b
}

/// The implementation whose `init` and staged `update` the trace law checks (reference or mutant).
pub trait TraceSubject {
    /// The line search's initial state for `params`.
    fn init<A: Real>(&self, opt: &SgdLineSearch, params: &Tree<A>) -> Result<State<A>>;
    /// One staged update: `grad` is both the direction input and the gradient at `params`, `value`
    /// is `f(params)`.
    fn update<A: Real>(
        &self,
        staged: &mut Staged<SgdLineSearch>,
        grad: &Tree<A>,
        state: &State<A>,
        params: &Tree<A>,
        value: A,
        objective: &CaseObjective,
    ) -> Result<(Tree<A>, State<A>)>;
}

/// The reference: `init`, and the staged update keyed by the objective's type.
pub struct Reference;

impl TraceSubject for Reference {
    fn init<A: Real>(&self, opt: &SgdLineSearch, params: &Tree<A>) -> Result<State<A>> {
        opt.init(params)
    }
    fn update<A: Real>(
        &self,
        staged: &mut Staged<SgdLineSearch>,
        grad: &Tree<A>,
        state: &State<A>,
        params: &Tree<A>,
        value: A,
        objective: &CaseObjective,
    ) -> Result<(Tree<A>, State<A>)> {
        staged.update(grad, state, params, value, grad, objective)
    }
}

/// One recorded step.
#[derive(Clone, Debug)]
pub struct StepRecord<A> {
    /// Parameters before the step.
    pub x: Tree<A>,
    /// `f(x)`.
    pub value: A,
    /// `grad f(x)`.
    pub grad: Tree<A>,
    /// The update returned (`new_lr * -grad`).
    pub update: Tree<A>,
    /// `x + update`.
    pub x_next: Tree<A>,
    /// The learning rate in the state before the step.
    pub prev_lr: A,
    /// The state after the step.
    pub state: State<A>,
    /// Objective evaluations made by the update.
    pub evals: usize,
}

/// What a run produced.
pub struct Run<A> {
    /// Signature of the state `init` built.
    pub init_signature: Signature,
    /// Every step, in order.
    pub steps: Vec<StepRecord<A>>,
    /// The staged line search after the run (its trace count and log).
    pub staged: Staged<SgdLineSearch>,
    /// The objective with its evaluation counter after the last update.
    pub objective: CaseObjective,
}

/// Run the case through `subject`; `Ok(None)` when a constructor or the problem rejected it with
/// a typed error (invalid hyperparameters, wrong dimension).
pub fn run_case<A: Real, S: TraceSubject>(
    case: &LsCase,
    subject: &S,
) -> std::result::Result<Option<Run<A>>, String> {
    let Ok(opt) = sgd_linesearch(case.hyper) else {
        return Ok(None);
    };
    let obj = CaseObjective::new(case);
    let mut x = point::<A>(&case.x0);
    if obj.value_and_grad(&x).is_err() {
        return Ok(None);
    }
    let mut state = subject.init(&opt, &x).map_err(|e| e.to_string())?;
    let init_signature = state.signature();
    let mut staged = Staged::new(opt);
    let mut steps = Vec::new();
    for _ in 0..case.steps {
        let (value, grad) = obj.value_and_grad(&x).map_err(|e| e.to_string())?;
        obj.evals.set(0);
        let (u, next) = subject
            .update(&mut staged, &grad, &state, &x, value, &obj)
            .map_err(|e| e.to_string())?;
        let x_next = apply_updates(&x, &u).map_err(|e| e.to_string())?;
        steps.push(StepRecord {
            x: x.clone(),
            value,
            grad,
            update: u,
            x_next: x_next.clone(),
            prev_lr: state.1.learning_rate.value,
            state: next.clone(),
            evals: obj.evals.get(),
        });
        x = x_next;
        state = next;
    }
    Ok(Some(Run {
        init_signature,
        steps,
        staged,
        objective: obj,
    }))
}

// ---------------------------------------------------------------------------------------------
// Armijo, evaluation count

/// When a step reports success (`decrease_error <= atol`), the Armijo rule holds at the returned
/// parameters: recomputed from `f(x + u)`, the error is within `atol`.
pub fn armijo_on_success(case: &LsCase) -> std::result::Result<(), String> {
    armijo_on_success_with(case, &Reference)
}

/// [`armijo_on_success`] on `subject`.
pub fn armijo_on_success_with<S: TraceSubject>(
    case: &LsCase,
    subject: &S,
) -> std::result::Result<(), String> {
    by_dtype!(real case.dtype(), armijo_on_success_e[S](case, subject), else unsupported_dtype(case.dtype()))
}

fn armijo_on_success_e<A: Real, S: TraceSubject>(
    case: &LsCase,
    subject: &S,
) -> std::result::Result<(), String> {
    let Some(run) = run_case::<A, _>(case, subject)? else {
        return Ok(());
    };
    let rule = case.hyper.armijo().map_err(|e| e.to_string())?;
    for (t, s) in run.steps.iter().enumerate() {
        let ls = &s.state.1;
        if !linesearch::Armijo::accepts(ls.info.decrease_error.value, case.hyper.atol) {
            continue;
        }
        let u: Tree<A> = s.grad.map(|a| a.map(|g| -g));
        let slope = linesearch::slope(&u, &s.grad);
        let f_new = run.objective.value(&s.x_next).map_err(|e| e.to_string())?;
        let err = rule.decrease_error(ls.learning_rate.value, slope, s.value, f_new);
        if !le(err.as_f64(), case.hyper.atol) {
            return Err(format!(
                "step {}: reported decrease_error {:?} <= atol, but at the returned params f = {f_new:?} (f(w) = {:?}, eta = {:?}, slope = {slope:?}) gives error {err:?}",
                t + 1, ls.info.decrease_error.value, s.value, ls.learning_rate.value
            ));
        }
    }
    Ok(())
}

/// `evals == num_linesearch_steps <= max_backtracking_steps + 1`, and the final `eta` is
/// `eta0` multiplied by `decrease_factor` `evals - 1` times (bitwise), or 0 when the error is inf.
pub fn evaluations_bounded(case: &LsCase) -> std::result::Result<(), String> {
    evaluations_bounded_with(case, &Reference)
}

/// [`evaluations_bounded`] on `subject`.
pub fn evaluations_bounded_with<S: TraceSubject>(
    case: &LsCase,
    subject: &S,
) -> std::result::Result<(), String> {
    by_dtype!(real case.dtype(), evaluations_bounded_e[S](case, subject), else unsupported_dtype(case.dtype()))
}

fn evaluations_bounded_e<A: Real, S: TraceSubject>(
    case: &LsCase,
    subject: &S,
) -> std::result::Result<(), String> {
    let Some(run) = run_case::<A, _>(case, subject)? else {
        return Ok(());
    };
    let h = &case.hyper;
    for (t, s) in run.steps.iter().enumerate() {
        let ls = &s.state.1;
        let n = ls.info.num_linesearch_steps.value;
        let at = format!("step {}", t + 1);
        if n as usize != s.evals {
            return Err(format!(
                "{at}: num_linesearch_steps = {n}, but {} evaluations",
                s.evals
            ));
        }
        if n < 1 || n as u64 > h.max_backtracking_steps as u64 + 1 {
            return Err(format!(
                "{at}: {n} evaluations, allowed 1..={}",
                h.max_backtracking_steps + 1
            ));
        }
        let lr = ls.learning_rate.value;
        if ls.info.decrease_error.value.is_infinite() {
            if lr != A::zero() {
                return Err(format!(
                    "{at}: decrease_error is inf but learning_rate = {lr:?}"
                ));
            }
            continue;
        }
        // eta0 = min(increase_factor * lr, max_learning_rate) (NaN-propagating), written out
        let prev = s.prev_lr;
        let mut eta = if h.recover_from_zero_lr && prev == A::zero() {
            A::of_f64(h.max_learning_rate)
        } else {
            let a = A::of_f64(h.increase_factor) * prev;
            let b = A::of_f64(h.max_learning_rate);
            if Float::is_nan(a) {
                a
            } else if b < a {
                b
            } else {
                a
            }
        };
        for _ in 1..n {
            eta = A::of_f64(h.decrease_factor) * eta;
        }
        if eta.bits() != lr.bits() {
            return Err(format!(
                "{at}: learning_rate = {lr:?}, but eta0 * decrease_factor repeated {} times = {eta:?}",
                n - 1
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// convex quadratic

/// Largest absolute row sum of `A`: a bound on its largest eigenvalue (Gershgorin).
pub fn gershgorin(q: &Quadratic) -> f64 {
    let n = q.dim();
    (0..n)
        .map(|i| (0..n).map(|j| q.a[i * n + j].abs()).sum::<f64>())
        .fold(0.0, f64::max)
}

/// Largest magnitude of `A`, `b` and `x0` in the monotone law's domain: every dtype holds the
/// value and its terms without overflow (f32 overflows near 3.4e38).
pub const MONOTONE_DATA_BOUND: f64 = 1e4;

/// Whether the symmetric part of `A` is positive definite (Cholesky pivots all > 0).
pub fn positive_definite(q: &Quadratic) -> bool {
    let n = q.dim();
    let mut l = vec![0.0f64; n * n];
    for j in 0..n {
        let s = |i: usize, k: usize| 0.5 * (q.a[i * n + k] + q.a[k * n + i]);
        let d = s(j, j) - (0..j).map(|k| l[j * n + k] * l[j * n + k]).sum::<f64>();
        if d.is_nan() || d <= 0.0 {
            return false;
        }
        l[j * n + j] = d.sqrt();
        for i in j + 1..n {
            let v = s(i, j) - (0..j).map(|k| l[i * n + k] * l[j * n + k]).sum::<f64>();
            l[i * n + j] = v / l[j * n + j];
        }
    }
    true
}

/// The monotone law's domain: a convex (positive definite) quadratic with data bounded by
/// [`MONOTONE_DATA_BOUND`], `rtol = atol = 0`, no poison, and a smallest candidate
/// `max_learning_rate * decrease_factor^max_backtracking_steps` short enough for the Armijo
/// rule (`<= 2 (1 - slope_rtol) / L`, `L` bounded by Gershgorin), so that some candidate is
/// accepted in exact arithmetic.
pub fn monotone_domain(case: &LsCase) -> bool {
    let Problem::Quadratic(q) = &case.problem else {
        return false;
    };
    let h = &case.hyper;
    let l = gershgorin(q);
    let bounded = |v: &[f64]| v.iter().all(|x| x.abs() <= MONOTONE_DATA_BOUND);
    bounded(&q.a)
        && bounded(&q.b)
        && bounded(&case.x0)
        && positive_definite(q)
        && h.validate().is_ok()
        && h.atol == 0.0
        && h.rtol == 0.0
        && case.poison.is_none()
        && l > 0.0
        && h.max_learning_rate * h.decrease_factor.powi(h.max_backtracking_steps as i32)
            <= 2.0 * (1.0 - h.slope_rtol) / l
}

/// On a convex quadratic the value never increases: exactly (`f_new <= f_old`) at accepted
/// steps; at a step that hit the limit (rounding near the minimum can defeat the rule), within
/// 64 ulps of the terms of `f`.
pub fn convex_quadratic_monotone(case: &LsCase) -> std::result::Result<(), String> {
    convex_quadratic_monotone_with(case, &Reference)
}

/// [`convex_quadratic_monotone`] on `subject`.
pub fn convex_quadratic_monotone_with<S: TraceSubject>(
    case: &LsCase,
    subject: &S,
) -> std::result::Result<(), String> {
    if !monotone_domain(case) {
        return Ok(());
    }
    by_dtype!(real case.dtype(), convex_quadratic_monotone_e[S](case, subject), else unsupported_dtype(case.dtype()))
}

fn convex_quadratic_monotone_e<A: Real, S: TraceSubject>(
    case: &LsCase,
    subject: &S,
) -> std::result::Result<(), String> {
    let Some(run) = run_case::<A, _>(case, subject)? else {
        return Ok(());
    };
    let Problem::Quadratic(q) = &case.problem else {
        return Ok(());
    };
    let eps = A::epsilon().as_f64();
    for (t, s) in run.steps.iter().enumerate() {
        let f_new = run.objective.value(&s.x_next).map_err(|e| e.to_string())?;
        let (old, new) = (s.value.as_f64(), f_new.as_f64());
        let accepted = s.state.1.info.decrease_error.value == A::zero();
        let x: Vec<f64> = linesearch::objective::flatten(&s.x_next)
            .iter()
            .map(|v| v.as_f64())
            .collect();
        let n = q.dim();
        let terms: f64 = (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| (0.5 * x[i] * q.a[i * n + j] * x[j]).abs())
                    .sum::<f64>()
                    + (q.b[i] * x[i]).abs()
            })
            .sum();
        let slack = if accepted {
            0.0
        } else {
            64.0 * eps * (terms + old.abs())
        };
        if !le(new, old + slack) {
            return Err(format!(
                "step {}: value rose from {old:e} to {new:e} ({} step, lr = {:?}, {} evaluations)",
                t + 1,
                if accepted { "accepted" } else { "limit-hit" },
                s.state.1.learning_rate.value,
                s.state.1.info.num_linesearch_steps.value
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// state signature and traces

/// `init` and every `update` give the same state signature (weak flags included), and `steps`
/// staged updates of one objective trace exactly once (the first update after `init` included).
pub fn trace_once<S: TraceSubject>(case: &LsCase, subject: &S) -> std::result::Result<(), String> {
    if case.f32 {
        trace_once_e::<f32, S>(case, subject)
    } else {
        trace_once_e::<f64, S>(case, subject)
    }
}

fn trace_once_e<A: Real, S: TraceSubject>(
    case: &LsCase,
    subject: &S,
) -> std::result::Result<(), String> {
    let Some(run) = run_case::<A, _>(case, subject)? else {
        return Ok(());
    };
    let traces = run.staged.traces();
    if traces != 1 {
        let why: Vec<String> = run
            .staged
            .stage()
            .log()
            .iter()
            .skip(1)
            .map(|e| format!("trace #{}: {}", e.index, e.reason))
            .collect();
        return Err(format!(
            "{} updates traced {traces} times (want 1); {}",
            case.steps,
            why.join("; ")
        ));
    }
    for (t, s) in run.steps.iter().enumerate() {
        let d = run.init_signature.diff(&s.state.signature());
        if !d.is_empty() {
            return Err(format!(
                "state after update {} differs from init: {d}",
                t + 1
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// non-finite objectives

/// The zero-step law's domain (checked on the params and on the gradient): finite values. A
/// non-finite gradient (a start point whose gradient overflows, or is NaN) makes the output
/// `0 * u` NaN, exactly as upstream's `tree.scale(0.0, updates)`; no line search can repair its
/// input direction, and NaN params stay NaN.
pub fn nonfinite_domain<A: Real>(tree: &Tree<A>) -> bool {
    tree.iter()
        .all(|(_, a)| a.data().iter().all(|g| Float::is_finite(*g)))
}

/// An objective that is NaN or `+inf` at every point (the current one included), with a finite
/// gradient ([`nonfinite_domain`]): every update is a zero step, `learning_rate` is 0 (finite),
/// `decrease_error` is `+inf`, every allowed evaluation was made, and the parameters never move.
pub fn nonfinite_zero_step(case: &LsCase) -> std::result::Result<(), String> {
    nonfinite_zero_step_with(case, &Reference)
}

/// [`nonfinite_zero_step`] on `subject`.
pub fn nonfinite_zero_step_with<S: TraceSubject>(
    case: &LsCase,
    subject: &S,
) -> std::result::Result<(), String> {
    by_dtype!(real case.dtype(), nonfinite_zero_step_e[S](case, subject), else unsupported_dtype(case.dtype()))
}

fn nonfinite_zero_step_e<A: Real, S: TraceSubject>(
    case: &LsCase,
    subject: &S,
) -> std::result::Result<(), String> {
    let Some(p) = case.poison else {
        return Ok(());
    };
    if p.above != f64::NEG_INFINITY || p.value == f64::NEG_INFINITY {
        return Ok(());
    }
    let Some(run) = run_case::<A, _>(case, subject)? else {
        return Ok(());
    };
    let x0 = point::<A>(&case.x0);
    let max = case.hyper.max_backtracking_steps as i32 + 1;
    for (t, s) in run.steps.iter().enumerate() {
        if !nonfinite_domain(&s.grad) || !nonfinite_domain(&s.x) {
            return Ok(());
        }
        let ls = &s.state.1;
        let at = format!("step {}", t + 1);
        if let Some(u) = linesearch::objective::flatten(&s.update)
            .into_iter()
            .find(|u| *u != A::zero())
        {
            return Err(format!("{at}: update {u:?}, want a zero step"));
        }
        if ls.learning_rate.value != A::zero() {
            return Err(format!(
                "{at}: learning_rate {:?}, want 0",
                ls.learning_rate.value
            ));
        }
        if ls.info.decrease_error.value != A::infinity() {
            return Err(format!(
                "{at}: decrease_error {:?}, want inf",
                ls.info.decrease_error.value
            ));
        }
        if ls.info.num_linesearch_steps.value != max {
            return Err(format!(
                "{at}: {} evaluations, want all {max}",
                ls.info.num_linesearch_steps.value
            ));
        }
        // equal as numbers: a zero step turns -0.0 into +0.0 (IEEE: -0 + +0 = +0), as upstream
        let moved = linesearch::objective::flatten(&s.x_next)
            .iter()
            .zip(linesearch::objective::flatten(&x0))
            .any(|(a, b)| *a != b);
        if moved {
            return Err(format!("{at}: params moved to {:?}", s.x_next));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// strategies

/// Hyperparameters over their legal ranges (defaults weighted up).
pub fn hyper() -> impl Strategy<Value = BacktrackingHyper> {
    (
        (
            prop_oneof![0u32..4, 4u32..40],
            prop_oneof![Just(1e-4), 0.0f64..0.9],
            prop_oneof![Just(0.8), Just(0.5), 0.05f64..0.95],
            prop_oneof![Just(1.5), 1.0f64..3.0, Just(f64::INFINITY)],
        ),
        (
            prop_oneof![Just(1.0), 0.01f64..10.0],
            prop_oneof![3 => Just(0.0), 1 => 0.0f64..1.0],
            prop_oneof![3 => Just(0.0), 1 => 0.0f64..0.1],
            any::<bool>(),
            prop_oneof![3 => Just(false), 1 => Just(true)],
        ),
    )
        .prop_map(
            |((m, s, d, i), (lr, atol, rtol, store_grad, recover))| BacktrackingHyper {
                max_backtracking_steps: m,
                slope_rtol: s,
                decrease_factor: d,
                increase_factor: i,
                max_learning_rate: lr,
                atol,
                rtol,
                store_grad,
                recover_from_zero_lr: recover,
            },
        )
}

/// A quadratic of dimension `n`: `A = M M^T + shift I` (convex) or any `M` (indefinite).
pub fn quadratic(n: usize, convex: bool) -> impl Strategy<Value = Quadratic> {
    (
        prop::collection::vec(-1.0f64..1.0, n * n),
        prop::collection::vec(-2.0f64..2.0, n),
        0.0f64..1.0,
    )
        .prop_map(move |(m, b, shift)| {
            let a = if convex {
                let mut a = vec![0.0; n * n];
                for i in 0..n {
                    for j in 0..n {
                        a[i * n + j] = (0..n).map(|k| m[i * n + k] * m[j * n + k]).sum::<f64>()
                            + if i == j { shift } else { 0.0 };
                    }
                }
                a
            } else {
                m
            };
            Quadratic::new(a, b).expect("n x n")
        })
}

fn problem() -> impl Strategy<Value = (Problem, usize)> {
    prop_oneof![
        (1usize..6).prop_map(|n| (Problem::Rosenbrock, n)),
        Just((Problem::Himmelblau, 2)),
        Just((Problem::Matyas, 2)),
        (1usize..5)
            .prop_flat_map(|n| (quadratic(n, false), Just(n)))
            .prop_map(|(q, n)| (Problem::Quadratic(q), n)),
        (1usize..5)
            .prop_flat_map(|n| (quadratic(n, true), Just(n)))
            .prop_map(|(q, n)| (Problem::Quadratic(q), n)),
    ]
}

/// Any case: a fixture problem, a start point, 1-8 steps, either dtype, sometimes poisoned.
pub fn ls_case() -> impl Strategy<Value = LsCase> {
    (
        problem(),
        hyper(),
        1usize..8,
        any::<bool>(),
        prop::option::weighted(0.2, poison()),
    )
        .prop_flat_map(|((problem, n), hyper, steps, f32, poison)| {
            (
                Just(problem),
                Just(hyper),
                prop::collection::vec(-2.0f64..2.0, n),
                Just(steps),
                Just(f32),
                Just(poison),
            )
        })
        .prop_map(|(problem, hyper, x0, steps, f32, poison)| LsCase {
            problem,
            hyper,
            x0,
            steps,
            f32,
            poison,
        })
}

fn poison() -> impl Strategy<Value = Poison> {
    (
        prop_oneof![Just(f64::NEG_INFINITY), -2.0f64..2.0],
        prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(f64::NEG_INFINITY)],
    )
        .prop_map(|(above, value)| Poison { above, value })
}

/// Convex quadratics in the monotone law's domain (mostly).
pub fn convex_case() -> impl Strategy<Value = LsCase> {
    (
        1usize..5,
        1usize..10,
        any::<bool>(),
        0.3f64..0.8,
        0.0f64..0.5,
        0.1f64..2.0,
    )
        .prop_flat_map(|(n, steps, f32, d, c, lr)| {
            (
                quadratic(n, true),
                prop::collection::vec(-2.0f64..2.0, n),
                Just((steps, f32, d, c, lr)),
            )
        })
        .prop_map(|(q, x0, (steps, f32, d, c, lr))| LsCase {
            problem: Problem::Quadratic(q),
            hyper: BacktrackingHyper {
                slope_rtol: c,
                decrease_factor: d,
                max_learning_rate: lr,
                ..BacktrackingHyper::new(30)
            },
            x0,
            steps,
            f32,
            poison: None,
        })
}

/// Objectives non-finite everywhere (NaN or `+inf`), any hyperparameters.
pub fn nonfinite_case() -> impl Strategy<Value = LsCase> {
    (ls_case(), prop_oneof![Just(f64::NAN), Just(f64::INFINITY)]).prop_map(|(mut c, v)| {
        c.poison = Some(Poison {
            above: f64::NEG_INFINITY,
            value: v,
        });
        c
    })
}

/// Small cases for the trace law: a quadratic or rosenbrock, 2-6 steps.
pub fn trace_case() -> impl Strategy<Value = LsCase> {
    (ls_case(), 2usize..6).prop_map(|(mut c, steps)| {
        c.steps = steps;
        c
    })
}

// ---------------------------------------------------------------------------------------------
// registry

/// Every line-search law on one case, invalid hyperparameters included: what the `linesearch`
/// fuzz target calls. Invalid hyperparameters must be typed errors naming the parameter.
pub fn check_case(case: &LsCase) -> std::result::Result<(), String> {
    if let Err(e) = case.hyper.validate() {
        return match sgd_linesearch(case.hyper) {
            Err(crate::reference::Error::InvalidHyper { .. }) => Ok(()),
            Err(other) => Err(format!(
                "invalid hyperparameters gave a non-hyper error: {other}"
            )),
            Ok(_) => Err(format!("invalid hyperparameters were accepted ({e})")),
        };
    }
    armijo_on_success(case)?;
    evaluations_bounded(case)?;
    convex_quadratic_monotone(case)?;
    trace_once(case, &Reference)?;
    nonfinite_zero_step(case)?;
    faces_agree_with(case, &Reference)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The fast kernels equal the dfdx face

/// The search with its rounds computed by `K` ([`search`](crate::optim::linesearch::ScaleByBacktrackingLinesearch::search)),
/// unstaged: the dfdx face is `KernelSubject(DfdxKernels)`.
pub struct KernelSubject<K>(pub K);

impl<K: SearchKernels> TraceSubject for KernelSubject<K> {
    fn init<A: Real>(&self, opt: &SgdLineSearch, params: &Tree<A>) -> Result<State<A>> {
        opt.init(params)
    }
    fn update<A: Real>(
        &self,
        staged: &mut Staged<SgdLineSearch>,
        grad: &Tree<A>,
        state: &State<A>,
        params: &Tree<A>,
        value: A,
        objective: &CaseObjective,
    ) -> Result<(Tree<A>, State<A>)> {
        let opt = &staged.search;
        let (u, s0) = crate::optim::Transform::update(&opt.0, grad, &state.0, params)?;
        let (u, s1) = opt
            .1
            .search(&self.0, (&u, &state.1, params, value, grad), objective)?;
        Ok((u, ChainState(s0, s1)))
    }
}

/// `subject`'s search equals the dfdx face's bit for bit (any NaN equal to any NaN) on every step
/// of the case: the update, the next point, the stored learning rate, value, gradient, decrease
/// error and evaluation count.
pub fn faces_agree_with<S: TraceSubject>(
    case: &LsCase,
    subject: &S,
) -> std::result::Result<(), String> {
    by_dtype!(real case.dtype(), faces_agree_e[S](case, subject), else unsupported_dtype(case.dtype()))
}

fn faces_agree_e<A: Real, S: TraceSubject>(
    case: &LsCase,
    subject: &S,
) -> std::result::Result<(), String> {
    let (Some(got), Some(want)) = (
        run_case::<A, S>(case, subject)?,
        run_case::<A, _>(case, &KernelSubject(DfdxKernels))?,
    ) else {
        return Ok(()); // rejected by a constructor or the problem, the same way for both
    };
    let leaves = |t: &Tree<A>| {
        t.iter()
            .flat_map(|(_, a)| a.data().to_vec())
            .collect::<Vec<A>>()
    };
    for (i, (g, w)) in got.steps.iter().zip(&want.steps).enumerate() {
        let (gs, ws) = (&g.state.1, &w.state.1);
        let pairs: [(&str, Vec<A>, Vec<A>); 5] = [
            ("update", leaves(&g.update), leaves(&w.update)),
            ("next point", leaves(&g.x_next), leaves(&w.x_next)),
            (
                "learning_rate, value, decrease_error",
                vec![
                    gs.learning_rate.value,
                    gs.value.value,
                    gs.info.decrease_error.value,
                ],
                vec![
                    ws.learning_rate.value,
                    ws.value.value,
                    ws.info.decrease_error.value,
                ],
            ),
            (
                "stored grad",
                gs.grad.as_ref().map_or(vec![], leaves),
                ws.grad.as_ref().map_or(vec![], leaves),
            ),
            (
                "evaluations",
                vec![A::of_f64(g.evals as f64)],
                vec![A::of_f64(w.evals as f64)],
            ),
        ];
        for (what, a, b) in pairs {
            if let Some(d) = first_bit_difference(&a, &b) {
                return Err(format!("step {i}: {what}{d} (dfdx face)"));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// An objective's value at a candidate equals its value at the built candidate

/// A point, a direction and a step for [`value_along_matches_candidate`]: coordinates drawn from
/// `seed` (a counter hash, so that long vectors cost no shrinking), `dim` up to several blocks
/// of the workspace's summation order ([`crate::backend::BLOCK`]).
#[derive(Clone, Debug, PartialEq)]
pub struct AlongCase {
    /// Dimension: small (`0..40`) or around multiples of [`crate::backend::BLOCK`].
    pub dim: usize,
    /// Seed of the coordinates.
    pub seed: u64,
    /// Magnitude of `w`'s coordinates (1 or `[1e-3, 1e3)`).
    pub scale: f64,
    /// The step `eta` (0, 1 or `[-2, 2)`).
    pub eta: f64,
    /// Run in f32 (else f64).
    pub f32: bool,
}

impl AlongCase {
    /// `(w, u)`: `w_i` in `[-scale, scale]`, `u_i` in `[-1, 1]`.
    pub fn vectors(&self) -> (Vec<f64>, Vec<f64>) {
        let unit = |i: u64| {
            // splitmix64 of (seed, i), top 53 bits as a uniform in [-1, 1)
            let mut z = self.seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        };
        let w = (0..self.dim as u64)
            .map(|i| self.scale * unit(2 * i))
            .collect();
        let u = (0..self.dim as u64).map(|i| unit(2 * i + 1)).collect();
        (w, u)
    }
}

/// Dimensions around the summation order's boundaries, and small ones.
pub fn along_case() -> impl Strategy<Value = AlongCase> {
    use crate::backend::BLOCK;
    let dim = prop_oneof![
        3 => 0usize..40,
        1 => prop::sample::select(vec![
            BLOCK - 1,
            BLOCK,
            BLOCK + 1,
            2 * BLOCK + 17,
            4 * BLOCK,
            5 * BLOCK + 3,
        ]),
    ];
    (
        dim,
        any::<u64>(),
        prop_oneof![Just(1.0), 1e-3f64..1e3],
        prop_oneof![Just(0.0), Just(1.0), -2.0f64..2.0],
        any::<bool>(),
    )
        .prop_map(|(dim, seed, scale, eta, f32)| AlongCase {
            dim,
            seed,
            scale,
            eta,
            f32,
        })
}

/// `objective.value_along(w, eta, u)` equals `objective.value(add_scale(w, eta, u))` bit for bit
/// (any NaN equal to any NaN), in the case's dtype. An objective that rejects the dimension must
/// reject it both ways.
pub fn value_along_matches_candidate<O: Objective<f32> + Objective<f64>>(
    objective: &O,
    case: &AlongCase,
) -> std::result::Result<(), String> {
    fn run<A: Real, O: Objective<A>>(o: &O, case: &AlongCase) -> std::result::Result<(), String> {
        let (w, u) = case.vectors();
        let (w, u, eta) = (point::<A>(&w), point::<A>(&u), A::of_f64(case.eta));
        let along = o.value_along(&w, eta, &u);
        let built = o.value(&linesearch::add_scale(&w, eta, &u));
        match (along, built) {
            (Ok(a), Ok(b)) => match first_bit_difference(&[a], &[b]) {
                Some(d) => Err(format!("value_along{d} (value at the built candidate)")),
                None => Ok(()),
            },
            (Err(_), Err(_)) => Ok(()),
            (a, b) => Err(format!(
                "value_along gave {:?}, the built candidate {:?}",
                a.map(|v| v.as_f64()),
                b.map(|v| v.as_f64())
            )),
        }
    }
    if case.f32 {
        run::<f32, O>(objective, case)
    } else {
        run::<f64, O>(objective, case)
    }
}

/// [`value_along_matches_candidate`] for every fixture objective.
pub fn fixtures_value_along(case: &AlongCase) -> std::result::Result<(), String> {
    let q = Quadratic::new(vec![2.0, 0.5, 0.5, 1.0], vec![1.0, -1.0]).expect("2 x 2");
    value_along_matches_candidate(&Rosenbrock, case).map_err(|e| format!("rosenbrock: {e}"))?;
    value_along_matches_candidate(&Himmelblau, case).map_err(|e| format!("himmelblau: {e}"))?;
    value_along_matches_candidate(&Matyas, case).map_err(|e| format!("matyas: {e}"))?;
    value_along_matches_candidate(&q, case).map_err(|e| format!("quadratic: {e}"))
}

pub(crate) fn laws() -> Vec<Law> {
    vec![
        Law {
            name: "linesearch_value_along_matches_candidate",
            family: Family::Numerics,
            summary: "an objective's value at w + eta u without building it equals its value at the built candidate, bit for bit (dimensions across the summation blocks)",
            default_cases: 64,
            measures_memory: false,
            run: |c, s| {
                check_property(
                    "linesearch_value_along_matches_candidate",
                    c,
                    s,
                    along_case(),
                    fixtures_value_along,
                )
            },
        },
        Law {
            name: "linesearch_armijo_on_success",
            family: Family::Numerics,
            summary: "decrease_error <= atol implies the Armijo inequality at the returned params",
            default_cases: 256,
            measures_memory: false,
            run: |c, s| {
                check_property(
                    "linesearch_armijo_on_success",
                    c,
                    s,
                    ls_case(),
                    armijo_on_success,
                )
            },
        },
        Law {
            name: "linesearch_evaluations_bounded",
            family: Family::Numerics,
            summary:
                "evaluations <= max_backtracking_steps + 1; final eta = eta0 * d*...*d bitwise",
            default_cases: 256,
            measures_memory: false,
            run: |c, s| {
                check_property(
                    "linesearch_evaluations_bounded",
                    c,
                    s,
                    ls_case(),
                    evaluations_bounded,
                )
            },
        },
        Law {
            name: "linesearch_convex_quadratic_monotone",
            family: Family::Numerics,
            summary: "on a convex quadratic the value never increases",
            default_cases: 256,
            measures_memory: false,
            run: |c, s| {
                check_property(
                    "linesearch_convex_quadratic_monotone",
                    c,
                    s,
                    convex_case(),
                    convex_quadratic_monotone,
                )
            },
        },
        Law {
            name: "linesearch_trace_once",
            family: Family::TraceCount,
            summary:
                "init/update state signatures identical (weak flags too); N updates trace once",
            default_cases: 128,
            measures_memory: false,
            run: |c, s| {
                check_property("linesearch_trace_once", c, s, trace_case(), |x| {
                    trace_once(x, &Reference)
                })
            },
        },
        Law {
            name: "linesearch_faces_agree",
            family: Family::Numerics,
            summary: "the staged fast search equals the dfdx face bit for bit: updates, state, evaluations (f32/f64, finite and poisoned objectives)",
            default_cases: 128,
            measures_memory: false,
            run: |c, s| {
                check_property(
                    "linesearch_faces_agree",
                    c,
                    s,
                    prop_oneof![ls_case(), nonfinite_case()],
                    |x| faces_agree_with(x, &Reference),
                )
            },
        },
        Law {
            name: "linesearch_nonfinite_zero_step",
            family: Family::Numerics,
            summary:
                "an objective NaN/inf everywhere gives zero steps, learning_rate 0, finite params",
            default_cases: 128,
            measures_memory: false,
            run: |c, s| {
                check_property(
                    "linesearch_nonfinite_zero_step",
                    c,
                    s,
                    nonfinite_case(),
                    nonfinite_zero_step,
                )
            },
        },
    ]
}
