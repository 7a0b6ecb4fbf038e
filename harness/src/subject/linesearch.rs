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
//! | `ls_first_armijo_candidate` | with trials enough, the search accepts the first candidate where Armijo's rule holds (the law finds it itself, from the points), answers `f` there, and evaluated exactly the candidates up to it in order (and `f(x0)` at most once): none skipped, none looked ahead at, no giving up |
//! | `ls_trials_honoured` | with `m` trials allowed (1 to 4), only the first `m` candidates are evaluated; the search accepts the first where the rule holds if it is among them, else evaluates all `m` and claims nothing |
//! | `ls_convex_quadratic_decreases` | on a convex quadratic along a descent direction, with trials enough for the rule to hold in exact arithmetic, the search accepts and the value decreases |
//! | `ls_bad_input_is_typed_error` | each bad hyperparameter ([`bad_inputs`]: `c` outside `[0, 1)`, `rho` outside `(0, 1)` (infinite included), a non-positive or non-finite first step, no trial allowed) is an error; a NaN start or direction is an error or an answer that does not claim acceptance; never a panic or a hang |
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
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The objective of a search, recording every point its value is evaluated at, in order.
pub struct SearchProblem {
    kind: ProblemKind,
    points: Mutex<Vec<Vec<f64>>>,
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
            points: Mutex::new(Vec::new()),
        }
    }

    fn objective(&self) -> &dyn Objective<f64> {
        match &self.kind {
            ProblemKind::Quadratic(q) => q,
            ProblemKind::Rosenbrock => &Rosenbrock,
        }
    }

    /// `f(x)` (recorded). A point of the wrong dimension is an error.
    pub fn value(&self, x: &[f64]) -> Result<f64> {
        self.points
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(x.to_vec());
        self.objective().value(&point(x))
    }

    /// `grad f(x)` (not recorded: the laws judge the values a search evaluates).
    pub fn gradient(&self, x: &[f64]) -> Result<Vec<f64>> {
        let (_, g) = self.objective().value_and_grad(&point::<f64>(x))?;
        Ok(flat(&g))
    }

    /// Values evaluated so far.
    pub fn values_evaluated(&self) -> usize {
        self.points_evaluated().len()
    }

    /// The points whose value was evaluated, in order.
    pub fn points_evaluated(&self) -> Vec<Vec<f64>> {
        self.points
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
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

/// A generated search: the problem's data, the direction's scaling and the hyperparameters.
#[derive(Debug, Clone)]
pub struct SearchCase {
    /// `None`: Rosenbrock; `Some((A, b))`: the quadratic `1/2 x^T A x - b^T x`, `A = M M^T + I/2`
    /// (positive definite).
    pub quadratic: Option<(Vec<f64>, Vec<f64>)>,
    /// Start point.
    pub x0: Vec<f64>,
    /// The direction is `d_i = -s_i (grad f(x0))_i` with these `s_i > 0` (a descent direction
    /// that is not the gradient's; all ones: steepest descent).
    pub direction_scale: Vec<f64>,
    /// `alpha_0`.
    pub initial_step: f64,
    /// `c`.
    pub slope_rtol: f64,
    /// `rho`.
    pub decrease_factor: f64,
}

impl SearchCase {
    /// The request along `d = -s * grad f(x0)` with `max_trials` trials, on a fresh recording
    /// problem.
    pub fn request(&self, max_trials: usize) -> Result<SearchRequest> {
        let problem = Arc::new(match &self.quadratic {
            Some((a, b)) => SearchProblem::quadratic(a.clone(), b.clone())?,
            None => SearchProblem::rosenbrock(),
        });
        let (value0, grad0) = problem.exact(&self.x0)?;
        let scale = |i: usize| self.direction_scale.get(i).copied().unwrap_or(1.0);
        Ok(SearchRequest {
            problem,
            x0: self.x0.clone(),
            value0,
            direction: grad0
                .iter()
                .enumerate()
                .map(|(i, g)| -scale(i) * g)
                .collect(),
            grad0,
            initial_step: self.initial_step,
            slope_rtol: self.slope_rtol,
            decrease_factor: self.decrease_factor,
            max_trials,
        })
    }
}

/// Random searches: dimension 2-6, a convex quadratic half of the time and Rosenbrock otherwise,
/// `x0` in `[-2, 2]^n`, the direction `-s * grad f` with `s_i` in `[0.1, 10]` (steepest descent
/// one time in four), `alpha_0` in `[0.05, 4]`, `c` in `[1e-4, 0.5]`, `rho` in `[0.1, 0.9]`.
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
                prop::option::weighted(0.75, prop::collection::vec(0.1f64..10.0, n)),
                0.05f64..4.0,
                1e-4f64..0.5,
                0.1f64..0.9,
            )
        })
        .prop_map(
            |(q, x0, scale, initial_step, slope_rtol, decrease_factor)| {
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
                    direction_scale: scale.unwrap_or_else(|| vec![1.0; n]),
                    initial_step,
                    slope_rtol,
                    decrease_factor,
                }
            },
        )
}

/// Where a candidate stands against Armijo's rule `f(x0 + alpha d) <= f(x0) + c alpha slope`,
/// recomputed from the point: the two sides are compared with a slack of `64 eps` of the
/// finite terms' magnitudes, so that a search whose arithmetic rounds differently is judged by
/// neither side of that band.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rule {
    /// Below the bound by more than the slack.
    Holds,
    /// Within the slack of the bound: either answer is right.
    Unclear,
    /// Above the bound by more than the slack, or a non-finite value.
    Fails,
}

fn rule_at(r: &SearchRequest, value: f64, alpha: f64) -> Rule {
    let slope = dot(&r.grad0, &r.direction);
    let decrease = r.slope_rtol * alpha * slope;
    let rhs = r.value0 + decrease;
    if !value.is_finite() || !rhs.is_finite() {
        return Rule::Fails;
    }
    let slack = 64.0 * f64::EPSILON * (r.value0.abs() + decrease.abs() + value.abs());
    if value <= rhs - slack {
        Rule::Holds
    } else if value <= rhs + slack {
        Rule::Unclear
    } else {
        Rule::Fails
    }
}

/// The point `x0 + alpha d`.
fn candidate_point(r: &SearchRequest, alpha: f64) -> Vec<f64> {
    r.x0.iter()
        .zip(&r.direction)
        .map(|(x, d)| x + alpha * d)
        .collect()
}

/// [`Rule`] at the candidate of step `alpha`.
fn rule_at_candidate(r: &SearchRequest, alpha: f64) -> std::result::Result<Rule, String> {
    let (v, _) = r
        .problem
        .exact(&candidate_point(r, alpha))
        .map_err(|e| e.to_string())?;
    Ok(rule_at(r, v, alpha))
}

/// The first candidate (among `count`) where the rule clearly holds, and whether one before it
/// was unclear (then an acceptance anywhere from that one to it is right).
fn first_holding(
    r: &SearchRequest,
    count: usize,
) -> std::result::Result<(Option<usize>, Option<usize>), String> {
    let mut unclear = None;
    for (k, alpha) in candidates(r, count).into_iter().enumerate() {
        match rule_at_candidate(r, alpha)? {
            Rule::Holds => return Ok((Some(k), unclear)),
            Rule::Unclear => {
                unclear.get_or_insert(k);
            }
            Rule::Fails => {}
        }
    }
    Ok((None, unclear))
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

/// The index of the candidate (among the first `count`) whose point is `x`, however the search
/// computed it (`x0 + alpha d` at once, or step by step from the last candidate): the step
/// `alpha = (x - x0) . d / d . d` read from the point within `1e-9` of a candidate's (candidates
/// are at least 10% apart), and `x` on the line through `x0` along `d` within `1e-9` of the
/// point's scale.
fn candidate_index(r: &SearchRequest, x: &[f64], count: usize) -> Option<usize> {
    if x.len() != r.x0.len() {
        return None;
    }
    let dd = dot(&r.direction, &r.direction);
    let offset: Vec<f64> = x.iter().zip(&r.x0).map(|(a, b)| a - b).collect();
    let alpha = dot(&offset, &r.direction) / dd;
    let k = candidates(r, count)
        .iter()
        .position(|&a| (alpha - a).abs() <= 1e-9 * a)?;
    let a = candidates(r, k + 1)[k];
    let scale =
        r.x0.iter()
            .zip(&r.direction)
            .map(|(x, d)| x.abs() + (a * d).abs())
            .fold(0.0, f64::max);
    let on_line = x
        .iter()
        .zip(candidate_point(r, a))
        .all(|(got, want)| (got - want).abs() <= 1e-9 * scale);
    on_line.then_some(k)
}

/// The candidates whose values the search evaluated, in order (evaluations at `x0` itself, a
/// recomputation of `f(x0)`, left out: at most one is allowed); `Err` for a point that is no
/// candidate among the first `count`, or for a second evaluation at `x0`.
fn evaluated_candidates(
    r: &SearchRequest,
    count: usize,
) -> std::result::Result<Vec<usize>, String> {
    let mut at_start = 0;
    let mut ks = Vec::new();
    for p in r.problem.points_evaluated() {
        if p == r.x0 {
            at_start += 1;
            if at_start > 1 {
                return Err("evaluated f(x0) twice".into());
            }
            continue;
        }
        ks.push(candidate_index(r, &p, count).ok_or_else(|| {
            format!("evaluated f at {p:?}, none of the {count} candidates allowed")
        })?);
    }
    Ok(ks)
}

/// A start where the gradient vanishes (the direction is zero): every candidate is `x0`, and
/// which evaluation is which cannot be told apart; the laws that read the evaluations skip it.
fn degenerate(r: &SearchRequest) -> bool {
    r.direction.iter().all(|d| *d == 0.0)
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

/// Whether the laws can judge an answer to `r` within its first `trials` candidates: the
/// hyperparameters in range (`c` in `[0, 1)`, `rho` in `(0, 1)`, a finite positive first step),
/// a finite start value and gradient, a finite negative slope, a direction whose length is
/// within `[1e-150, 1e150]` (its square neither underflows nor overflows), and every candidate
/// finite, with a finite value, and at least `1e-6` of the start's scale (and `1e-140`) away from it (so that
/// which candidate a point is can be read from it: [`accepted_answer_holds`]). The generated
/// cases always are; raw inputs (the `peer_linesearch` fuzz target) often are not.
pub fn judgeable(r: &SearchRequest, trials: usize) -> bool {
    let norm = |v: &[f64]| v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let slope = dot(&r.grad0, &r.direction);
    let (dn, xn) = (norm(&r.direction), norm(&r.x0));
    let hyper = (0.0..1.0).contains(&r.slope_rtol)
        && r.decrease_factor > 0.0
        && r.decrease_factor < 1.0
        && r.initial_step.is_finite()
        && r.initial_step > 0.0;
    let start = r.value0.is_finite()
        && r.grad0.iter().all(|g| g.is_finite())
        && r.x0.iter().all(|x| x.is_finite())
        && slope.is_finite()
        && slope < 0.0
        && (1e-150..=1e150).contains(&dn);
    hyper
        && start
        && candidates(r, trials).into_iter().all(|alpha| {
            let p = candidate_point(r, alpha);
            alpha * dn >= (1e-6 * xn).max(1e-140)
                && p.iter().all(|x| x.is_finite())
                && r.problem.exact(&p).is_ok_and(|(v, _)| v.is_finite())
        })
}

/// An answer that claims acceptance, judged against the request: its point is `x0 + alpha_k d`
/// for one of the first `trials` candidates (returned: `k`), the rule does not fail there
/// (recomputed from the point), and the value it reports is `f` there. `Ok(None)` for an answer
/// that does not claim acceptance.
pub fn accepted_answer_holds(
    r: &SearchRequest,
    s: &SearchReport,
    trials: usize,
) -> std::result::Result<Option<usize>, String> {
    if !s.accepted {
        return Ok(None);
    }
    let k = candidate_index(r, &s.x, trials).ok_or_else(|| {
        format!(
            "the accepted point {:?} is none of the {trials} candidates x0 + alpha_k d allowed",
            s.x
        )
    })?;
    let alpha = candidates(r, k + 1)[k];
    let (v, _) = r.problem.exact(&s.x).map_err(|e| e.to_string())?;
    if rule_at(r, v, alpha) == Rule::Fails {
        return Err(format!(
            "accepted alpha_{k} = {alpha} where f = {v:e} > f(x0) + c alpha slope = {:e}",
            r.value0 + r.slope_rtol * alpha * dot(&r.grad0, &r.direction)
        ));
    }
    if (s.value - v).abs() > 64.0 * f64::EPSILON * (v.abs() + 1.0) || s.value.is_nan() {
        return Err(format!(
            "accepted alpha_{k} and reports f = {:e} there, where f = {v:e}",
            s.value
        ));
    }
    Ok(Some(k))
}

/// With trials enough, the search accepts the first candidate where Armijo's rule holds (the
/// law finds it itself), having evaluated exactly the candidates up to it (and `f(x0)` at most
/// once): no candidate skipped, none looked ahead at, no giving up early.
pub fn first_armijo_candidate(
    subject: &Arc<dyn BacktrackingSearch>,
    c: &SearchCase,
    limit: Duration,
) -> std::result::Result<(), String> {
    let r = c.request(AMPLE_TRIALS).map_err(|e| e.to_string())?;
    if degenerate(&r) {
        return Ok(());
    }
    let s = answered(subject, &r, limit)?;
    let name = subject.name();
    let (first, unclear) = first_holding(&r, AMPLE_TRIALS)?;
    let Some(first) = first else {
        return Ok(()); // no candidate clearly holds within the trials: nothing to demand
    };
    let k = accepted_answer_holds(&r, &s, AMPLE_TRIALS)
        .map_err(|e| format!("{name}: {e} ({r:?})"))?
        .ok_or_else(|| {
            format!(
                "{name}: gave up, where the rule holds at alpha_{first} = {} ({r:?})",
                candidates(&r, first + 1)[first]
            )
        })?;
    let earliest = unclear.unwrap_or(first).min(first);
    if k < earliest || k > first {
        return Err(format!(
            "{name}: accepted alpha_{k}; the first candidate where the rule holds is alpha_{first}              = {}: not the first candidate ({r:?})",
            candidates(&r, first + 1)[first]
        ));
    }
    let evaluated =
        evaluated_candidates(&r, AMPLE_TRIALS).map_err(|e| format!("{name}: {e} ({r:?})"))?;
    if evaluated != (0..=k).collect::<Vec<_>>() {
        return Err(format!(
            "{name}: accepted alpha_{k} after evaluating candidates {evaluated:?}, not exactly              0..={k} in order ({r:?})"
        ));
    }
    Ok(())
}

/// With `m` trials allowed (1 to 4, from a first step 1000 times the case's, so that the budget
/// is often what ends the search): only the first `m` candidates are evaluated, in order; the
/// search accepts the first where the rule holds if that is among them, and otherwise evaluates
/// all `m` and does not claim acceptance.
pub fn trials_honoured(
    subject: &Arc<dyn BacktrackingSearch>,
    c: &SearchCase,
    limit: Duration,
) -> std::result::Result<(), String> {
    let name = subject.name();
    for m in 1..=4 {
        let long = SearchCase {
            initial_step: c.initial_step * 1e3,
            ..c.clone()
        };
        let r = long.request(m).map_err(|e| e.to_string())?;
        if degenerate(&r) {
            return Ok(());
        }
        let s = answered(subject, &r, limit)?;
        let fail = |e: String| format!("{name}: with {m} trials allowed: {e} ({r:?})");
        let evaluated = evaluated_candidates(&r, m).map_err(fail)?;
        let accepted = accepted_answer_holds(&r, &s, m).map_err(fail)?;
        let (first, unclear) = first_holding(&r, m)?;
        match (accepted, first) {
            (Some(k), Some(first))
                if (unclear.unwrap_or(first).min(first)..=first).contains(&k) =>
            {
                if evaluated != (0..=k).collect::<Vec<_>>() {
                    return Err(fail(format!(
                        "accepted alpha_{k} after evaluating candidates {evaluated:?}"
                    )));
                }
            }
            (Some(k), _) => {
                return Err(fail(format!(
                    "accepted alpha_{k}, not the first candidate where the rule holds ({first:?})"
                )))
            }
            (None, Some(first)) if unclear.is_none() => {
                return Err(fail(format!(
                    "gave up, where the rule holds at alpha_{first}"
                )))
            }
            (None, _) if unclear.is_none() && evaluated != (0..m).collect::<Vec<_>>() => {
                return Err(fail(format!(
                    "gave up after evaluating candidates {evaluated:?}, not all {m}"
                )))
            }
            (None, _) => {}
        }
    }
    Ok(())
}

/// On a convex quadratic along a descent direction, with the candidates reaching below
/// `2 (1 - c) / (L |d|^2 / |slope|)` (`L` bounded by the largest row sum of `A`), the rule holds
/// in exact arithmetic at some candidate: the search must accept, and the value must decrease.
pub fn convex_quadratic_decreases(
    subject: &Arc<dyn BacktrackingSearch>,
    c: &SearchCase,
    limit: Duration,
) -> std::result::Result<(), String> {
    let Some((a, _)) = &c.quadratic else {
        return Ok(());
    };
    let r = c.request(AMPLE_TRIALS).map_err(|e| e.to_string())?;
    let slope = dot(&r.grad0, &r.direction);
    if slope > -1e-20 {
        return Ok(()); // at the minimum: nothing to decrease
    }
    let n = r.x0.len();
    let lipschitz = (0..n)
        .map(|i| a[i * n..(i + 1) * n].iter().map(|v| v.abs()).sum::<f64>())
        .fold(0.0, f64::max);
    // f(x0 + t d) <= f0 + t slope + t^2 L |d|^2 / 2 <= f0 + c t slope when
    // t <= 2 (1 - c) |slope| / (L |d|^2)
    let smallest = *candidates(&r, AMPLE_TRIALS)
        .last()
        .unwrap_or(&r.initial_step);
    let dd = dot(&r.direction, &r.direction);
    if smallest > 2.0 * (1.0 - r.slope_rtol) * slope.abs() / (lipschitz * dd) {
        return Ok(());
    }
    let s = answered(subject, &r, limit)?;
    let decreased = s.value < r.value0; // false for NaN
    if !s.accepted || !decreased {
        return Err(format!(
            "{}: on a convex quadratic along a descent direction: accepted {}, f {:e} -> {:e} \
             ({r:?})",
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
/// assert_eq!(bad_inputs().len(), 18);
/// assert!(bad_inputs().contains(&BadInput::NoTrials));
/// ```
pub fn bad_inputs() -> Vec<BadInput> {
    let mut all = Vec::new();
    all.extend([-0.5, 1.0, 2.0, f64::NAN].map(BadInput::SlopeRtol));
    all.extend([0.0, 1.0, -0.5, 1.5, f64::INFINITY, f64::NAN].map(BadInput::DecreaseFactor));
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
        direction_scale: vec![1.0, 1.0],
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
