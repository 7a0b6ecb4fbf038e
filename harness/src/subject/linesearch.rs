//! The backtracking line-search suite: laws every Armijo backtracking search must obey, run on
//! any [`BacktrackingSearch`] — the reference's optax-shaped search ([`ReferenceSearch`]), or one
//! written elsewhere behind an adapter. One search is one call: from `x0`, along a direction
//! `d`, try `alpha_0`, `alpha_1 = rho alpha_0`, `alpha_2 = rho alpha_1`, ... and stop at the
//! first candidate that satisfies Armijo's rule
//! `f(x0 + alpha d) <= f(x0) + c alpha grad f(x0) . d`, or when the trials allowed run out.
//! Every search runs on its own thread under a time limit, so a panic or a hang is a verdict.
//!
//! | law | what must hold |
//! |---|---|
//! | `ls_first_armijo_candidate` | an accepted answer is the point `x0 + alpha_k d` of one candidate of the sequence (recomputed), Armijo's rule holds there, it fails at every earlier candidate, and at most `k + 2` values were evaluated (the candidates, and `f(x0)` once if the search recomputes it) |
//! | `ls_trials_honoured` | with `m` trials allowed, at most `m + 1` values are evaluated, and an answer that claims acceptance satisfies the rule |
//! | `ls_convex_quadratic_decreases` | on a convex quadratic along `-grad f`, with trials enough for the rule to hold in exact arithmetic, the search accepts and the value decreases |
//! | `ls_bad_input_is_typed_error` | each bad hyperparameter ([`bad_inputs`]: `c` outside `[0, 1)`, `rho` outside `(0, 1)`, a non-positive or non-finite first step, no trial allowed) is an error; a NaN start or direction is an error or an answer that does not claim acceptance; never a panic or a hang |
//!
//! # References
//! - J. Nocedal, S. J. Wright, *Numerical Optimization*, 2nd ed., §3.1 (the sufficient
//!   decrease condition) and Algorithm 3.1 (backtracking).
//! - L. Armijo, "Minimization of functions having Lipschitz continuous first partial
//!   derivatives", *Pacific J. Math.* 16 (1966) 1–3.
//!
//! ```
//! use harness::subject::linesearch::{self, ReferenceSearch, SuiteOptions};
//! let opts = SuiteOptions { cases: 8, ..SuiteOptions::default() };
//! let report = linesearch::check(std::sync::Arc::new(ReferenceSearch), &opts);
//! assert!(report.passed(), "{}", report.summary());
//! ```

use super::suite_property;
use crate::laws::{timed, Family, DEFAULT_SEED};
use crate::optim::linesearch::{
    point, BacktrackingHyper, FastKernels, LineSearch, Objective, Quadratic, Rosenbrock, Scalar,
    ScaleByBacktrackingLinesearch,
};
use crate::reference::{Error, Result};
use crate::subject::optimizer::SuiteReport;
use crate::tree::Tree;
use proptest::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The objective of a search, with counters of the values and gradients evaluated.
pub struct SearchProblem {
    kind: ProblemKind,
    values: AtomicUsize,
    gradients: AtomicUsize,
}

#[derive(Debug, Clone)]
enum ProblemKind {
    Quadratic(Quadratic),
    Rosenbrock,
}

impl std::fmt::Debug for SearchProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            ProblemKind::Quadratic(q) => write!(f, "quadratic(A = {:?}, b = {:?})", q.a, q.b),
            ProblemKind::Rosenbrock => write!(f, "rosenbrock"),
        }
    }
}

impl SearchProblem {
    /// `f(x) = 1/2 x^T A x - b^T x` (`A` row-major `n x n`, `b` of length `n`).
    pub fn quadratic(a: Vec<f64>, b: Vec<f64>) -> Result<Self> {
        Ok(Self::of(ProblemKind::Quadratic(Quadratic::new(a, b)?)))
    }

    /// `f(x) = sum_i 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2`.
    pub fn rosenbrock() -> Self {
        Self::of(ProblemKind::Rosenbrock)
    }

    fn of(kind: ProblemKind) -> Self {
        Self {
            kind,
            values: AtomicUsize::new(0),
            gradients: AtomicUsize::new(0),
        }
    }

    fn objective(&self) -> &dyn Objective<f64> {
        match &self.kind {
            ProblemKind::Quadratic(q) => q,
            ProblemKind::Rosenbrock => &Rosenbrock,
        }
    }

    /// `f(x)` (counted). A point of the wrong dimension is an error.
    pub fn value(&self, x: &[f64]) -> Result<f64> {
        self.values.fetch_add(1, Ordering::SeqCst);
        self.objective().value(&point(x))
    }

    /// `grad f(x)` (counted).
    pub fn gradient(&self, x: &[f64]) -> Result<Vec<f64>> {
        self.gradients.fetch_add(1, Ordering::SeqCst);
        let (_, g) = self.objective().value_and_grad(&point::<f64>(x))?;
        Ok(flat(&g))
    }

    /// Values evaluated so far.
    pub fn values_evaluated(&self) -> usize {
        self.values.load(Ordering::SeqCst)
    }

    /// `f` and `grad f` without counting (the laws' own recomputations).
    fn exact(&self, x: &[f64]) -> Result<(f64, Vec<f64>)> {
        let (v, g) = self.objective().value_and_grad(&point::<f64>(x))?;
        Ok((v, flat(&g)))
    }
}

fn flat(t: &Tree<f64>) -> Vec<f64> {
    t.iter()
        .flat_map(|(_, a)| a.data().iter().copied())
        .collect()
}

/// One search: from `x0` (where `f = value0`, `grad f = grad0`) along `direction`.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    /// The objective (counts its evaluations).
    pub problem: Arc<SearchProblem>,
    /// The start point.
    pub x0: Vec<f64>,
    /// `f(x0)`.
    pub value0: f64,
    /// `grad f(x0)`.
    pub grad0: Vec<f64>,
    /// The direction `d` (a descent direction: `grad0 . d < 0`).
    pub direction: Vec<f64>,
    /// The first candidate step `alpha_0` (finite, `> 0`).
    pub initial_step: f64,
    /// Armijo's constant `c`, in `[0, 1)` (some codes take only `(0, 1)`).
    pub slope_rtol: f64,
    /// The factor `rho` between candidates, in `(0, 1)`.
    pub decrease_factor: f64,
    /// Candidates the search may evaluate (at least 1).
    pub max_trials: usize,
}

/// What a search returned.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchReport {
    /// The point returned (the accepted candidate when `accepted`).
    pub x: Vec<f64>,
    /// `f(x)` as the search computed it.
    pub value: f64,
    /// Whether the search claims Armijo's rule holds at `x`.
    pub accepted: bool,
}

/// A backtracking line search under test.
pub trait BacktrackingSearch: Send + Sync {
    /// Name for reports (crate, method).
    fn name(&self) -> String;
    /// Whether it takes `c = 0` (any decrease): optax does, some codes require `c > 0`.
    fn accepts_zero_slope_rtol(&self) -> bool {
        true
    }
    /// Search; a request it cannot honour must be an `Err`.
    fn search(&self, request: &SearchRequest) -> Result<SearchReport>;
}

/// The reference: optax's `scale_by_backtracking_linesearch` round
/// ([`ScaleByBacktrackingLinesearch::search`], fast kernels) with `max_learning_rate = alpha_0`,
/// `increase_factor = 1` and a state holding `alpha_0` as its last learning rate (so the first
/// candidate is `alpha_0`), `atol = rtol = 0` and
/// `max_backtracking_steps = max_trials - 1`.
#[derive(Debug, Clone, Copy)]
pub struct ReferenceSearch;

/// [`SearchProblem`] as the reference's objective (counted like any subject's evaluations).
struct Counted<'a>(&'a SearchProblem);

impl Objective<f64> for Counted<'_> {
    fn value(&self, x: &Tree<f64>) -> Result<f64> {
        self.0.value(&flat(x))
    }
    fn value_and_grad(&self, x: &Tree<f64>) -> Result<(f64, Tree<f64>)> {
        let v = self.0.value(&flat(x))?;
        let g = self.0.gradient(&flat(x))?;
        Ok((v, point(&g)))
    }
}

impl BacktrackingSearch for ReferenceSearch {
    fn name(&self) -> String {
        "harness-reference backtracking".into()
    }
    fn search(&self, r: &SearchRequest) -> Result<SearchReport> {
        let steps = r
            .max_trials
            .checked_sub(1)
            .and_then(|s| u32::try_from(s).ok())
            .ok_or_else(|| Error::InvalidHyper {
                name: "max_trials",
                value: r.max_trials.to_string(),
                expected: "at least 1 (and at most 2^32)".into(),
            })?;
        let hyper = BacktrackingHyper {
            slope_rtol: r.slope_rtol,
            decrease_factor: r.decrease_factor,
            increase_factor: 1.0,
            max_learning_rate: r.initial_step,
            ..BacktrackingHyper::new(steps)
        };
        let ls = ScaleByBacktrackingLinesearch::new(hyper)?;
        let (x0, d, g) = (point(&r.x0), point(&r.direction), point(&r.grad0));
        // a fresh state's learning rate is optax's 1; the round starts at
        // min(increase_factor lr, max_learning_rate) = alpha_0 from a state holding alpha_0
        let mut state = LineSearch::<f64>::init(&ls, &x0)?;
        state.learning_rate = Scalar::strong(r.initial_step);
        let (u, next) = ls.search(
            &FastKernels,
            (&d, &state, &x0, r.value0, &g),
            &Counted(&r.problem),
        )?;
        let x: Vec<f64> = r.x0.iter().zip(flat(&u)).map(|(a, b)| a + b).collect();
        Ok(SearchReport {
            x,
            value: next.value.value,
            accepted: next.info.decrease_error.value <= 0.0,
        })
    }
}

/// How a search under the time limit ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The search answered.
    Answered(SearchReport),
    /// The search returned an error.
    Refused(String),
    /// The search panicked (the payload's message).
    Panicked(String),
    /// No answer within the limit (the thread is left behind).
    TimedOut(Duration),
}

/// Run `request` on its own thread, waiting at most `limit`.
pub fn search_within(
    subject: &Arc<dyn BacktrackingSearch>,
    request: &SearchRequest,
    limit: Duration,
) -> Outcome {
    let (subject, request) = (Arc::clone(subject), request.clone());
    match super::call_within("linesearch-subject", limit, move || {
        subject.search(&request)
    }) {
        super::Ended::Returned(Ok(rep)) => Outcome::Answered(rep),
        super::Ended::Returned(Err(e)) => Outcome::Refused(e.to_string()),
        super::Ended::NotStarted(why) => Outcome::Refused(why),
        super::Ended::Panicked(m) => Outcome::Panicked(m),
        super::Ended::TimedOut(d) => Outcome::TimedOut(d),
    }
}

/// How the suite runs.
#[derive(Debug, Clone, Copy)]
pub struct SuiteOptions {
    /// Cases per law (default 32).
    pub cases: u32,
    /// Seed of the case generators (default [`DEFAULT_SEED`]).
    pub seed: u64,
    /// Time limit of one search (default 10 s).
    pub time_limit: Duration,
}

impl Default for SuiteOptions {
    fn default() -> Self {
        Self {
            cases: 32,
            seed: DEFAULT_SEED,
            time_limit: Duration::from_secs(10),
        }
    }
}

/// A generated search: the problem's data and the hyperparameters.
#[derive(Debug, Clone)]
pub struct SearchCase {
    /// `None`: Rosenbrock; `Some((A, b))`: the quadratic `1/2 x^T A x - b^T x`, `A = M M^T + I/2`
    /// (positive definite).
    pub quadratic: Option<(Vec<f64>, Vec<f64>)>,
    /// Start point.
    pub x0: Vec<f64>,
    /// `alpha_0`.
    pub initial_step: f64,
    /// `c`.
    pub slope_rtol: f64,
    /// `rho`.
    pub decrease_factor: f64,
}

impl SearchCase {
    /// The request along `-grad f(x0)` with `max_trials` trials, on a fresh counted problem.
    pub fn request(&self, max_trials: usize) -> Result<SearchRequest> {
        let problem = Arc::new(match &self.quadratic {
            Some((a, b)) => SearchProblem::quadratic(a.clone(), b.clone())?,
            None => SearchProblem::rosenbrock(),
        });
        let (value0, grad0) = problem.exact(&self.x0)?;
        Ok(SearchRequest {
            problem,
            x0: self.x0.clone(),
            value0,
            direction: grad0.iter().map(|g| -g).collect(),
            grad0,
            initial_step: self.initial_step,
            slope_rtol: self.slope_rtol,
            decrease_factor: self.decrease_factor,
            max_trials,
        })
    }
}

/// Random searches: dimension 2-6, a convex quadratic half of the time and Rosenbrock otherwise,
/// `x0` in `[-2, 2]^n`, `alpha_0` in `[0.05, 4]`, `c` in `[1e-4, 0.5]`, `rho` in `[0.1, 0.9]`.
pub fn search_case() -> impl Strategy<Value = SearchCase> {
    (2usize..=6)
        .prop_flat_map(|n| {
            (
                prop::option::weighted(
                    0.5,
                    (
                        prop::collection::vec(-1.0f64..1.0, n * n),
                        prop::collection::vec(-1.0f64..1.0, n),
                    ),
                ),
                prop::collection::vec(-2.0f64..2.0, n),
                0.05f64..4.0,
                1e-4f64..0.5,
                0.1f64..0.9,
            )
        })
        .prop_map(|(q, x0, initial_step, slope_rtol, decrease_factor)| {
            let n = x0.len();
            let quadratic = q.map(|(m, b)| {
                // A = M M^T + I/2: symmetric positive definite
                let mut a = vec![0.0; n * n];
                for i in 0..n {
                    for j in 0..n {
                        a[i * n + j] = (0..n).map(|k| m[i * n + k] * m[j * n + k]).sum::<f64>()
                            + if i == j { 0.5 } else { 0.0 };
                    }
                }
                (a, b)
            });
            SearchCase {
                quadratic,
                x0,
                initial_step,
                slope_rtol,
                decrease_factor,
            }
        })
}

/// Armijo's rule at step `alpha`, recomputed: `f(x0 + alpha d) <= f(x0) + c alpha slope`, with
/// `f(x0 + alpha d)` computed from the point itself. Rounding of the two sides is allowed for by
/// a relative slack of `64 eps` of the terms' magnitudes, so that a search whose own arithmetic
/// rounds differently is not failed by the last bits.
fn armijo_holds(value0: f64, value: f64, c: f64, alpha: f64, slope: f64) -> bool {
    let rhs = value0 + c * alpha * slope;
    let slack = 64.0 * f64::EPSILON * (value0.abs() + (c * alpha * slope).abs() + value.abs());
    value <= rhs + slack
}

/// Armijo's rule fails at step `alpha` by more than the rounding slack of [`armijo_holds`].
fn armijo_fails(value0: f64, value: f64, c: f64, alpha: f64, slope: f64) -> bool {
    let rhs = value0 + c * alpha * slope;
    let slack = 64.0 * f64::EPSILON * (value0.abs() + (c * alpha * slope).abs() + value.abs());
    value.is_nan() || value > rhs + slack
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The candidate steps `alpha_0, rho alpha_0, rho (rho alpha_0), ...` (each the product of the
/// last, as a search computes them), `count` of them.
fn candidates(r: &SearchRequest, count: usize) -> Vec<f64> {
    std::iter::successors(Some(r.initial_step), |a| Some(a * r.decrease_factor))
        .take(count)
        .collect()
}

/// The index of the candidate whose point `x0 + alpha_k d` is `x` (each coordinate within
/// `4 eps` of its magnitude, so that `x0 + alpha d` computed as a fused or unfused operation
/// matches), among the first `count`.
fn candidate_index(r: &SearchRequest, x: &[f64], count: usize) -> Option<usize> {
    candidates(r, count).iter().position(|&alpha| {
        x.len() == r.x0.len()
            && r.x0.iter().zip(&r.direction).zip(x).all(|((x0, d), got)| {
                let want = x0 + alpha * d;
                (got - want).abs() <= 4.0 * f64::EPSILON * (x0.abs() + (alpha * d).abs())
            })
    })
}

fn answered(
    subject: &Arc<dyn BacktrackingSearch>,
    r: &SearchRequest,
    limit: Duration,
) -> std::result::Result<SearchReport, String> {
    match search_within(subject, r, limit) {
        Outcome::Answered(s) => Ok(s),
        other => Err(format!("{}: {r:?} -> {other:?}", subject.name())),
    }
}

/// Trials enough for any generated case to reach acceptance: `rho^200 <= 0.9^200 ~ 7e-10`.
const AMPLE_TRIALS: usize = 200;

/// An accepted answer is the first candidate of the sequence that satisfies Armijo's rule, found
/// with at most one value evaluation beyond the candidates up to it.
pub fn first_armijo_candidate(
    subject: &Arc<dyn BacktrackingSearch>,
    c: &SearchCase,
    limit: Duration,
) -> std::result::Result<(), String> {
    let r = c.request(AMPLE_TRIALS).map_err(|e| e.to_string())?;
    let s = answered(subject, &r, limit)?;
    if !s.accepted {
        return Ok(()); // judged by the other laws (a convex case must accept)
    }
    let name = subject.name();
    let slope = dot(&r.grad0, &r.direction);
    let k = candidate_index(&r, &s.x, AMPLE_TRIALS).ok_or_else(|| {
        format!(
            "{name}: the accepted point {:?} is no candidate x0 + alpha_k d ({r:?})",
            s.x
        )
    })?;
    let alphas = candidates(&r, k + 1);
    let (v, _) = r.problem.exact(&s.x).map_err(|e| e.to_string())?;
    if !armijo_holds(r.value0, v, r.slope_rtol, alphas[k], slope) {
        return Err(format!(
            "{name}: accepted alpha_{k} = {} where f = {v:e} > f(x0) + c alpha slope = {:e} \
             ({r:?})",
            alphas[k],
            r.value0 + r.slope_rtol * alphas[k] * slope
        ));
    }
    for (j, &alpha) in alphas[..k].iter().enumerate() {
        let xj: Vec<f64> =
            r.x0.iter()
                .zip(&r.direction)
                .map(|(x, d)| x + alpha * d)
                .collect();
        let (vj, _) = r.problem.exact(&xj).map_err(|e| e.to_string())?;
        if !armijo_fails(r.value0, vj, r.slope_rtol, alpha, slope) {
            return Err(format!(
                "{name}: accepted alpha_{k} = {}, but alpha_{j} = {alpha} already satisfies \
                 Armijo's rule (f = {vj:e}, bound {:e}): not the first candidate ({r:?})",
                alphas[k],
                r.value0 + r.slope_rtol * alpha * slope
            ));
        }
    }
    let evals = r.problem.values_evaluated();
    if evals > k + 2 {
        return Err(format!(
            "{name}: accepted alpha_{k} after {evals} value evaluations; the candidates up to it \
             and f(x0) are {} ({r:?})",
            k + 2
        ));
    }
    Ok(())
}

/// With `m` trials allowed (1 to 4, on cases where the first candidate fails), at most `m + 1`
/// values are evaluated, and a claimed acceptance satisfies the rule.
pub fn trials_honoured(
    subject: &Arc<dyn BacktrackingSearch>,
    c: &SearchCase,
    limit: Duration,
) -> std::result::Result<(), String> {
    let name = subject.name();
    for m in 1..=4 {
        // a first step far too long, so the budget is what ends the search
        let long = SearchCase {
            initial_step: c.initial_step * 1e3,
            ..c.clone()
        };
        let r = long.request(m).map_err(|e| e.to_string())?;
        let s = answered(subject, &r, limit)?;
        let evals = r.problem.values_evaluated();
        if evals > m + 1 {
            return Err(format!(
                "{name}: {evals} value evaluations with {m} trials allowed ({r:?})"
            ));
        }
        if s.accepted {
            let slope = dot(&r.grad0, &r.direction);
            let k = candidate_index(&r, &s.x, m).ok_or_else(|| {
                format!(
                    "{name}: accepted {:?}, none of the {m} candidates allowed ({r:?})",
                    s.x
                )
            })?;
            let alpha = candidates(&r, k + 1)[k];
            let (v, _) = r.problem.exact(&s.x).map_err(|e| e.to_string())?;
            if !armijo_holds(r.value0, v, r.slope_rtol, alpha, slope) {
                return Err(format!(
                    "{name}: with {m} trials allowed, claims acceptance at alpha_{k} = {alpha} \
                     where Armijo's rule fails (f = {v:e}) ({r:?})"
                ));
            }
        }
    }
    Ok(())
}

/// On a convex quadratic along `-grad f`, with the candidates reaching below `2 (1 - c) / L`
/// (`L` bounded by the largest row sum of `A`), the rule holds in exact arithmetic at some
/// candidate: the search must accept, and the value must decrease.
pub fn convex_quadratic_decreases(
    subject: &Arc<dyn BacktrackingSearch>,
    c: &SearchCase,
    limit: Duration,
) -> std::result::Result<(), String> {
    let Some((a, _)) = &c.quadratic else {
        return Ok(());
    };
    let r = c.request(AMPLE_TRIALS).map_err(|e| e.to_string())?;
    if dot(&r.grad0, &r.grad0) < 1e-20 {
        return Ok(()); // at the minimum: nothing to decrease
    }
    let n = r.x0.len();
    let lipschitz = (0..n)
        .map(|i| a[i * n..(i + 1) * n].iter().map(|v| v.abs()).sum::<f64>())
        .fold(0.0, f64::max);
    let smallest = *candidates(&r, AMPLE_TRIALS)
        .last()
        .unwrap_or(&r.initial_step);
    if smallest > 2.0 * (1.0 - r.slope_rtol) / lipschitz {
        return Ok(());
    }
    let s = answered(subject, &r, limit)?;
    let decreased = s.value < r.value0; // false for NaN
    if !s.accepted || !decreased {
        return Err(format!(
            "{}: on a convex quadratic along -grad f: accepted {}, f {:e} -> {:e} ({r:?})",
            subject.name(),
            s.accepted,
            r.value0,
            s.value
        ));
    }
    Ok(())
}

/// One way of making a request invalid.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BadInput {
    /// Armijo's constant outside `[0, 1)` (or `(0, 1)` for a search that says so).
    SlopeRtol(f64),
    /// The factor between candidates outside `(0, 1)`.
    DecreaseFactor(f64),
    /// A first step that is not finite and positive.
    InitialStep(f64),
    /// No trial allowed.
    NoTrials,
    /// A NaN in the start point (`value0` and `grad0` NaN with it).
    NanStart,
    /// A NaN in the direction.
    NanDirection,
}

/// Every bad input the law tries.
///
/// ```
/// use harness::subject::linesearch::{bad_inputs, BadInput};
/// assert_eq!(bad_inputs().len(), 16);
/// assert!(bad_inputs().contains(&BadInput::NoTrials));
/// ```
pub fn bad_inputs() -> Vec<BadInput> {
    let mut all = Vec::new();
    all.extend([-0.5, 1.0, 2.0, f64::NAN].map(BadInput::SlopeRtol));
    all.extend([0.0, 1.0, -0.5, f64::NAN].map(BadInput::DecreaseFactor));
    all.extend([0.0, -1.0, f64::NAN, f64::INFINITY].map(BadInput::InitialStep));
    all.extend([
        BadInput::NoTrials,
        BadInput::NanStart,
        BadInput::NanDirection,
    ]);
    all.push(BadInput::SlopeRtol(f64::NEG_INFINITY));
    all
}

/// `b` in a request on the 2-d Rosenbrock function from `(-1.2, 1)`: a bad hyperparameter must
/// be an error; a NaN start or direction an error or an answer that does not claim acceptance;
/// never a panic or a hang.
pub fn bad_input_is_typed_error(
    subject: &Arc<dyn BacktrackingSearch>,
    b: &BadInput,
    limit: Duration,
) -> std::result::Result<(), String> {
    let case = SearchCase {
        quadratic: None,
        x0: vec![-1.2, 1.0],
        initial_step: 1e-3,
        slope_rtol: 1e-4,
        decrease_factor: 0.5,
    };
    let mut r = case.request(20).map_err(|e| e.to_string())?;
    let mut data_only = false;
    match *b {
        BadInput::SlopeRtol(v) => r.slope_rtol = v,
        BadInput::DecreaseFactor(v) => r.decrease_factor = v,
        BadInput::InitialStep(v) => r.initial_step = v,
        BadInput::NoTrials => r.max_trials = 0,
        BadInput::NanStart => {
            data_only = true;
            r.x0[0] = f64::NAN;
            r.value0 = f64::NAN;
            r.grad0 = vec![f64::NAN; 2];
        }
        BadInput::NanDirection => {
            data_only = true;
            r.direction[1] = f64::NAN;
        }
    }
    let name = subject.name();
    match search_within(subject, &r, limit) {
        Outcome::Refused(_) => Ok(()),
        Outcome::Answered(s) if data_only && !s.accepted => Ok(()),
        Outcome::Answered(s) => Err(format!("{name}: {b:?} accepted: {r:?} -> {s:?}")),
        Outcome::Panicked(m) => Err(format!("{name}: {b:?} panicked: {m} ({r:?})")),
        Outcome::TimedOut(d) => Err(format!("{name}: {b:?} gave no answer within {d:?} ({r:?})")),
    }
}

/// Run every law on `subject`.
pub fn check(subject: Arc<dyn BacktrackingSearch>, opts: &SuiteOptions) -> SuiteReport {
    let (cases, seed, limit) = (opts.cases, opts.seed, opts.time_limit);
    let on_cases = |law: &'static str,
                    f: &dyn Fn(&SearchCase) -> std::result::Result<(), String>| {
        timed(law, Family::Numerics, cases, false, || {
            suite_property(law, cases, seed, search_case(), f)
        })
    };
    let mut laws = vec![
        on_cases("ls_first_armijo_candidate", &|c| {
            first_armijo_candidate(&subject, c, limit)
        }),
        on_cases("ls_trials_honoured", &|c| {
            trials_honoured(&subject, c, limit)
        }),
        on_cases("ls_convex_quadratic_decreases", &|c| {
            convex_quadratic_decreases(&subject, c, limit)
        }),
    ];
    let inputs: Vec<BadInput> = bad_inputs()
        .into_iter()
        .filter(|b| !(subject.accepts_zero_slope_rtol() && *b == BadInput::SlopeRtol(0.0)))
        .chain((!subject.accepts_zero_slope_rtol()).then_some(BadInput::SlopeRtol(0.0)))
        .collect();
    let total = inputs.len() as u32;
    laws.push(timed(
        "ls_bad_input_is_typed_error",
        Family::Numerics,
        total,
        false,
        || {
            for b in &inputs {
                bad_input_is_typed_error(&subject, b, limit)
                    .map_err(|e| format!("{e}\ninput: {b:?}"))?;
            }
            Ok(())
        },
    ));
    SuiteReport {
        subject: subject.name(),
        laws,
        not_applicable: Vec::new(),
    }
}
