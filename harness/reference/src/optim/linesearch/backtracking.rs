//! Backtracking line search (`optax.scale_by_backtracking_linesearch`, optax 0.2.8 semantics).
//!
//! Used after a descent direction, typically `chain(sgd(1.0), linesearch)` so that `u = -grad`.
//! Each update starts from `eta0 = min(increase_factor * learning_rate, max_learning_rate)`
//! (`learning_rate` is 1 after `init`) and evaluates `f(w + eta u)` for
//! `eta = eta0, eta0 d, (eta0 d) d, ...` (repeated multiplication by `decrease_factor = d`,
//! never a power) until the [`Armijo`] error is within `atol` or `max_backtracking_steps + 1`
//! values have been evaluated. The output is `new_lr * u` with `new_lr` the last `eta`, or 0 when
//! the last error is `+inf` (every candidate NaN/`+inf`).
//!
//! Failure behaviour is upstream's by default: when the limit is hit with a finite error the step
//! is taken at the last `eta`; when every candidate was non-finite the step is zero and, since the
//! next `eta0` is `min(increase_factor * 0, max)`, the learning rate stays 0 forever.
//! [`BacktrackingHyper::recover_from_zero_lr`] (not in optax) restarts such a round from
//! `max_learning_rate` and stores `value = +inf`, so [`super::value_and_grad_from_state`]
//! recomputes instead of reusing a non-finite value.
//!
//! The state is `learning_rate`, `value`, `grad` (only with `store_grad`),
//! `info.num_linesearch_steps` (int32: the number of evaluations) and `info.decrease_error`, all
//! strong leaves in the parameters' dtype: its [`Signature`] is the same after `init` and after
//! every `update` (optax 0.2.8's `init` builds the counter weak, so its jitted update compiles
//! twice: optax #1171).
//!
//! Requirements on the problem: `f` defined on the parameter tree, `grad` its gradient at `w`;
//! `u` a descent direction (`<u, grad> < 0`) for the search to make progress.
//!
//! # References
//! - Nocedal & Wright, *Numerical Optimization*, 2nd ed., §3.1, Algorithm 3.1.
//! - optax #1171 and PR #1175 (the re-tracing update); `docs/ALGORITHMS.md` §4.
//!
//! # Example
//! ```
//! use harness_reference::optim::linesearch::{sgd_linesearch, BacktrackingHyper, LineSearch, Rosenbrock, point, Objective};
//! use harness_reference::tree::apply_updates;
//! let opt = sgd_linesearch(BacktrackingHyper::new(30)).unwrap();
//! let mut x = point::<f64>(&[-0.5, 0.5]);
//! let mut state = opt.init(&x).unwrap();
//! let (v, g) = Rosenbrock.value_and_grad(&x).unwrap();
//! let (u, s) = opt.update(&g, &state, &x, v, &g, &Rosenbrock).unwrap();
//! x = apply_updates(&x, &u).unwrap();
//! state = s;
//! assert!(Rosenbrock.value(&x).unwrap() < v);
//! assert_eq!(state.1.info.decrease_error.value, 0.0);
//! ```

use super::armijo::Armijo;
use super::dfdx_face::DfdxKernels;
use super::objective::Objective;
use super::LineSearch;
use crate::backend::{lane_dot, DType, Real};
use crate::error::ensure;
use crate::ode::numerics::nan_min;
use crate::stage::{HasSignature, KeyHasher, LeafSig, Signature};
use crate::tree::Tree;
use crate::{Face, Result};

/// Largest `max_backtracking_steps` accepted (the evaluation count must fit the int32 counter).
pub const MAX_BACKTRACKING_STEPS: u32 = 1_000_000;

/// Hyperparameters with optax's defaults (`max_backtracking_steps` is required).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct BacktrackingHyper {
    /// Evaluations after the first before a round stops: at most `max_backtracking_steps + 1` per
    /// round; `<= MAX_BACKTRACKING_STEPS`.
    pub max_backtracking_steps: u32,
    /// Armijo constant `c` (see [`Armijo`]), in `[0, 1)`; default `1e-4`.
    pub slope_rtol: f64,
    /// Factor `d` each rejected candidate's `eta` is multiplied by, in `(0, 1)`; default `0.8`.
    pub decrease_factor: f64,
    /// Factor applied to the last learning rate to start a round (`> 0`, `+inf` allowed); default
    /// `1.5`.
    pub increase_factor: f64,
    /// Cap on a round's first candidate, finite and `> 0`; default `1`.
    pub max_learning_rate: f64,
    /// A candidate is accepted when its decrease error is `<= atol` (finite, `>= 0`); default `0`.
    pub atol: f64,
    /// Relative slack on `f(w)` in the Armijo rule (finite, `>= 0`); default `0`.
    pub rtol: f64,
    /// Keep `grad f` at the accepted candidate in the state (for reuse by the next step).
    pub store_grad: bool,
    /// Not in optax: start a round that follows a zero learning rate at `max_learning_rate`
    /// (instead of `increase_factor * 0 = 0`), and store `value = +inf` after a round whose every
    /// candidate was non-finite. Off by default (upstream behaviour).
    pub recover_from_zero_lr: bool,
}

impl BacktrackingHyper {
    /// optax's defaults: slope_rtol 1e-4, decrease_factor 0.8, increase_factor 1.5,
    /// max_learning_rate 1, atol 0, rtol 0, store_grad false.
    pub fn new(max_backtracking_steps: u32) -> Self {
        Self {
            max_backtracking_steps,
            slope_rtol: 1e-4,
            decrease_factor: 0.8,
            increase_factor: 1.5,
            max_learning_rate: 1.0,
            atol: 0.0,
            rtol: 0.0,
            store_grad: false,
            recover_from_zero_lr: false,
        }
    }

    /// Every range, with the parameter named in the error.
    ///
    /// ```
    /// use harness_reference::optim::linesearch::BacktrackingHyper;
    /// let h = BacktrackingHyper { decrease_factor: 1.0, ..BacktrackingHyper::new(10) };
    /// let e = h.validate().unwrap_err().to_string();
    /// assert!(e.contains("decrease_factor") && e.contains("(0, 1)"));
    /// ```
    pub fn validate(&self) -> Result<()> {
        ensure(
            self.max_backtracking_steps <= MAX_BACKTRACKING_STEPS,
            "max_backtracking_steps",
            self.max_backtracking_steps,
            "must be in [0, 1000000]",
        )?;
        self.armijo()?;
        ensure(
            self.decrease_factor > 0.0 && self.decrease_factor < 1.0,
            "decrease_factor",
            self.decrease_factor,
            "must be in (0, 1)",
        )?;
        ensure(
            self.increase_factor > 0.0,
            "increase_factor",
            self.increase_factor,
            "must be > 0 (+inf allowed: every round starts at max_learning_rate)",
        )?;
        ensure(
            self.max_learning_rate.is_finite() && self.max_learning_rate > 0.0,
            "max_learning_rate",
            self.max_learning_rate,
            "must be finite and > 0",
        )?;
        ensure(
            self.atol.is_finite() && self.atol >= 0.0,
            "atol",
            self.atol,
            "must be finite and >= 0",
        )
    }

    /// The acceptance rule these hyperparameters define.
    pub fn armijo(&self) -> Result<Armijo> {
        Armijo::new(self.slope_rtol, self.rtol)
    }

    pub(crate) fn hash_into(&self, h: KeyHasher) -> KeyHasher {
        h.val(self.max_backtracking_steps)
            .f64(self.slope_rtol)
            .f64(self.decrease_factor)
            .f64(self.increase_factor)
            .f64(self.max_learning_rate)
            .f64(self.atol)
            .f64(self.rtol)
            .val(self.store_grad)
            .val(self.recover_from_zero_lr)
    }
}

/// A scalar state leaf with JAX's weak flag (the reference only builds strong ones).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scalar<T> {
    /// The value.
    pub value: T,
    /// JAX's weak-type flag: `true` for a Python-scalar-like leaf whose dtype follows its operands.
    pub weak: bool,
}

impl<T> Scalar<T> {
    /// A strong scalar (fixed dtype).
    pub fn strong(value: T) -> Self {
        Self { value, weak: false }
    }
    /// A weak scalar (dtype follows its operands, like a Python literal in JAX).
    pub fn weak(value: T) -> Self {
        Self { value, weak: true }
    }
    fn sig(&self, dtype: DType) -> LeafSig {
        if self.weak {
            LeafSig::weak(&[], dtype)
        } else {
            LeafSig::strong(&[], dtype)
        }
    }
}

/// `info` of the state.
#[derive(Clone, Debug, PartialEq)]
pub struct LineSearchInfo<A> {
    /// Number of evaluations of the objective in the last update (int32).
    pub num_linesearch_steps: Scalar<i32>,
    /// The [`Armijo`] decrease error of the last candidate evaluated (`+inf` when it was
    /// NaN/`+inf`).
    pub decrease_error: Scalar<A>,
}

/// State of [`ScaleByBacktrackingLinesearch`].
#[derive(Clone, Debug, PartialEq)]
pub struct LineSearchState<A> {
    /// The step size of the last update: its round's last `eta` (1 after `init`; 0 when every
    /// candidate of the round was NaN or `+inf`).
    pub learning_rate: Scalar<A>,
    /// `f` at the last candidate (`+inf` after `init`).
    pub value: Scalar<A>,
    /// `grad f` at the last candidate when `store_grad` (zeros after `init`), else absent.
    pub grad: Option<Tree<A>>,
    /// Evaluation count and decrease error of the last round.
    pub info: LineSearchInfo<A>,
}

impl<A: Real> HasSignature for LineSearchState<A> {
    fn signature(&self) -> Signature {
        let mut s = Signature::new();
        s.push("learning_rate", self.learning_rate.sig(A::DTYPE));
        s.push("value", self.value.sig(A::DTYPE));
        s.push(
            "info.num_linesearch_steps",
            self.info.num_linesearch_steps.sig(DType::I32),
        );
        s.push(
            "info.decrease_error",
            self.info.decrease_error.sig(A::DTYPE),
        );
        if let Some(g) = &self.grad {
            s.nest("grad", g.signature());
        }
        s
    }
}

impl<A: Real> LineSearchState<A> {
    /// The state `init` builds: learning_rate 1, value `+inf`, grad zeros (if stored), 0
    /// evaluations, decrease_error `+inf`; every leaf strong.
    pub fn initial(params: &Tree<A>, store_grad: bool) -> Self {
        Self {
            learning_rate: Scalar::strong(A::one()),
            value: Scalar::strong(A::infinity()),
            grad: store_grad.then(|| params.zeros_like()),
            info: LineSearchInfo {
                num_linesearch_steps: Scalar::strong(0),
                decrease_error: Scalar::strong(A::infinity()),
            },
        }
    }
}

/// `scale_by_backtracking_linesearch` with validated hyperparameters, run with either face of
/// its kernels ([`SearchKernels`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleByBacktrackingLinesearch {
    hyper: BacktrackingHyper,
    armijo: Armijo,
    face: Face,
}

/// The three computations a backtracking round is made of; the round itself
/// ([`ScaleByBacktrackingLinesearch::search`]) is written once over them.
///
/// - `candidate(w, eta, u) = w + eta u`, leaf by leaf, and `value_at`, the objective's value
///   there;
/// - `slope(u, g) = <u, g>` over every element in leaf order, summed in the lane order
///   ([`crate::backend::lanes`]);
/// - `decrease_error(eta, slope, f, f_new) = max(f_new - (1 + rtol) f - eta c slope, 0)` with a
///   NaN counting as `+inf` (`c` = `slope_rtol`): the Armijo test accepts when it is `<= atol`.
///
/// [`FastKernels`] are plain loops; [`super::dfdx_face::DfdxKernels`] write the same formulas as
/// dfdx tensor operations. Law `linesearch_faces_agree` holds them bit for bit equal.
pub trait SearchKernels {
    /// `w + eta u`.
    fn candidate<A: Real>(&self, params: &Tree<A>, eta: A, u: &Tree<A>) -> Tree<A>;
    /// `f(w + eta u)`; by default the objective's [`Objective::value`] of [`Self::candidate`].
    fn value_at<A: Real, O: Objective<A> + ?Sized>(
        &self,
        objective: &O,
        params: &Tree<A>,
        eta: A,
        u: &Tree<A>,
    ) -> Result<A> {
        objective.value(&self.candidate(params, eta, u))
    }
    /// `<u, g>`.
    fn slope<A: Real>(&self, u: &Tree<A>, g: &Tree<A>) -> A;
    /// The Armijo decrease error of `f_new = f(w + eta u)` against `f = f(w)`.
    fn decrease_error<A: Real>(
        &self,
        armijo: &Armijo,
        eta: A,
        slope: A,
        value: A,
        new_value: A,
    ) -> A;
}

/// The loop kernels ([`add_scale`], [`Objective::value_along`], [`slope`],
/// [`Armijo::decrease_error`]): the candidate's value is taken without building the candidate
/// when the objective can.
#[derive(Clone, Copy, Debug, Default)]
pub struct FastKernels;

impl SearchKernels for FastKernels {
    fn candidate<A: Real>(&self, params: &Tree<A>, eta: A, u: &Tree<A>) -> Tree<A> {
        add_scale(params, eta, u)
    }
    fn value_at<A: Real, O: Objective<A> + ?Sized>(
        &self,
        objective: &O,
        params: &Tree<A>,
        eta: A,
        u: &Tree<A>,
    ) -> Result<A> {
        objective.value_along(params, eta, u)
    }
    fn slope<A: Real>(&self, u: &Tree<A>, g: &Tree<A>) -> A {
        slope(u, g)
    }
    fn decrease_error<A: Real>(
        &self,
        armijo: &Armijo,
        eta: A,
        slope: A,
        value: A,
        new_value: A,
    ) -> A {
        armijo.decrease_error(eta, slope, value, new_value)
    }
}

/// `<u, g>` over every leaf, in leaf order, summed in the lane order
/// ([`crate::backend::lane_dot`]).
pub fn slope<A: Real>(u: &Tree<A>, g: &Tree<A>) -> A {
    if u.len() == 1 && g.len() == 1 {
        let (a, b) = (u.iter().next(), g.iter().next());
        let (a, b) = (a.expect("one leaf").1, b.expect("one leaf").1);
        return lane_dot(a.data(), b.data());
    }
    let flat = |t: &Tree<A>| -> Vec<A> { t.iter().flat_map(|(_, a)| a.data().to_vec()).collect() };
    lane_dot(&flat(u), &flat(g))
}

/// `params + eta * u` (optax's `tree.add_scale`), leaf by leaf.
///
/// # Panics
/// When a leaf of `u` has another length than `params`' leaf in the same place (callers check
/// the structure first, [`Tree::check_like`]).
pub fn add_scale<A: Real>(params: &Tree<A>, eta: A, u: &Tree<A>) -> Tree<A> {
    Tree(
        params
            .iter()
            .zip(u.iter())
            .map(|((k, p), (_, d))| (k.clone(), p.zip_map_vectorised(d, |p, d| p + eta * d)))
            .collect(),
    )
}

impl ScaleByBacktrackingLinesearch {
    /// Validates every hyperparameter ([`BacktrackingHyper::validate`]).
    ///
    /// ```
    /// use harness_reference::optim::linesearch::{BacktrackingHyper, ScaleByBacktrackingLinesearch};
    /// assert!(ScaleByBacktrackingLinesearch::new(BacktrackingHyper::new(15)).is_ok());
    /// let bad = BacktrackingHyper { atol: -1.0, ..BacktrackingHyper::new(15) };
    /// assert!(ScaleByBacktrackingLinesearch::new(bad).unwrap_err().to_string().contains("atol"));
    /// ```
    pub fn new(hyper: BacktrackingHyper) -> Result<Self> {
        hyper.validate()?;
        Ok(Self {
            armijo: hyper.armijo()?,
            hyper,
            face: Face::Fast,
        })
    }
    /// Run the rounds with this face of the kernels.
    pub fn with_face(mut self, face: Face) -> Self {
        self.face = face;
        self
    }
    /// Which face of the kernels the rounds run.
    pub fn face(&self) -> Face {
        self.face
    }
    /// The validated hyperparameters.
    pub fn hyper(&self) -> &BacktrackingHyper {
        &self.hyper
    }
    /// The acceptance rule built from `hyper().slope_rtol` and `hyper().rtol`.
    pub fn armijo(&self) -> &Armijo {
        &self.armijo
    }

    /// The first candidate of a round that starts from `learning_rate`.
    pub fn initial_eta<A: Real>(&self, learning_rate: A) -> A {
        let h = &self.hyper;
        if h.recover_from_zero_lr && learning_rate == A::zero() {
            return A::of_f64(h.max_learning_rate);
        }
        nan_min(
            A::of_f64(h.increase_factor) * learning_rate,
            A::of_f64(h.max_learning_rate),
        )
    }
}

impl<A: Real> LineSearch<A> for ScaleByBacktrackingLinesearch {
    type State = LineSearchState<A>;
    fn static_key(&self) -> u64 {
        self.hyper
            .hash_into(KeyHasher::default().val("scale_by_backtracking_linesearch"))
            .val(self.face.name())
            .finish()
    }
    fn init(&self, params: &Tree<A>) -> Result<Self::State> {
        Ok(LineSearchState::initial(params, self.hyper.store_grad))
    }
    fn update<O: Objective<A> + ?Sized>(
        &self,
        updates: &Tree<A>,
        state: &Self::State,
        params: &Tree<A>,
        value: A,
        grad: &Tree<A>,
        objective: &O,
    ) -> Result<(Tree<A>, Self::State)> {
        let args = (updates, state, params, value, grad);
        match self.face {
            Face::Fast => self.search(&FastKernels, args, objective),
            Face::Dfdx => self.search(&DfdxKernels, args, objective),
        }
    }
}

/// The arguments of one round: `(updates, state, params, value, grad)`.
pub type RoundArgs<'a, A> = (
    &'a Tree<A>,
    &'a LineSearchState<A>,
    &'a Tree<A>,
    A,
    &'a Tree<A>,
);

impl ScaleByBacktrackingLinesearch {
    /// One round of the search (the [`LineSearch::update`]) computed with `kernels`.
    pub fn search<A: Real, K: SearchKernels, O: Objective<A> + ?Sized>(
        &self,
        kernels: &K,
        (updates, state, params, value, grad): RoundArgs<'_, A>,
        objective: &O,
    ) -> Result<(Tree<A>, LineSearchState<A>)> {
        params.check_like(updates, "updates")?;
        params.check_like(grad, "grad")?;
        let h = &self.hyper;
        let slope = kernels.slope(updates, grad);
        let decrease = A::of_f64(h.decrease_factor);
        let mut eta = self.initial_eta(state.learning_rate.value);
        let mut n: u32 = 0;
        let mut error = A::infinity();
        let mut new_value = value;
        let mut new_grad = h.store_grad.then(|| params.zeros_like());
        while !Armijo::accepts(error, h.atol) && n <= h.max_backtracking_steps {
            if n > 0 {
                eta = decrease * eta;
            }
            if h.store_grad {
                let candidate = kernels.candidate(params, eta, updates);
                let (v, g) = objective.value_and_grad(&candidate)?;
                new_value = v;
                error = kernels.decrease_error(&self.armijo, eta, slope, value, v);
                if error <= A::of_f64(h.atol) || n == h.max_backtracking_steps {
                    new_grad = Some(g);
                }
            } else {
                new_value = kernels.value_at(objective, params, eta, updates)?;
                error = kernels.decrease_error(&self.armijo, eta, slope, value, new_value);
            }
            n += 1;
        }
        let failed = error.is_infinite();
        let new_lr = if failed { A::zero() } else { eta };
        if failed && h.recover_from_zero_lr {
            new_value = A::infinity();
        }
        let out = updates.map(|a| a.map_vectorised(|x| new_lr * x));
        let next = LineSearchState {
            learning_rate: Scalar::strong(new_lr),
            value: Scalar::strong(new_value),
            grad: new_grad,
            info: LineSearchInfo {
                num_linesearch_steps: Scalar::strong(n as i32),
                decrease_error: Scalar::strong(error),
            },
        };
        Ok((out, next))
    }
}

#[cfg(test)]
mod tests {
    use super::super::objective::{point, Quadratic};
    use super::*;

    fn q() -> Quadratic {
        Quadratic::new(vec![1.0, 0.0, 0.0, 1.0], vec![0.0, 0.0]).unwrap()
    }

    #[test]
    fn init_state_is_one_inf_zero_inf_all_strong() {
        let ls = ScaleByBacktrackingLinesearch::new(BacktrackingHyper::new(3)).unwrap();
        let s: LineSearchState<f64> = ls.init(&point(&[1.0, 2.0])).unwrap();
        assert_eq!(s.learning_rate.value, 1.0);
        assert_eq!(s.value.value, f64::INFINITY);
        assert_eq!(s.info.num_linesearch_steps.value, 0);
        assert!(s.signature().leaves().iter().all(|(_, l)| !l.weak));
        assert!(s.grad.is_none());
    }

    #[test]
    fn unit_quadratic_accepts_the_full_step_at_once() {
        let ls = ScaleByBacktrackingLinesearch::new(BacktrackingHyper::new(3)).unwrap();
        let x = point::<f64>(&[1.0, 2.0]);
        let s = ls.init(&x).unwrap();
        let (v, g) = q().value_and_grad(&x).unwrap();
        let u = g.map(|a| a.map(|x| -x));
        let (out, s) = ls.update(&u, &s, &x, v, &g, &q()).unwrap();
        // eta0 = min(1.5, 1) = 1; x - grad = 0 exactly
        assert_eq!(out.get("x").unwrap().data(), &[-1.0, -2.0]);
        assert_eq!(s.info.num_linesearch_steps.value, 1);
        assert_eq!(s.info.decrease_error.value, 0.0);
        assert_eq!(s.value.value, 0.0);
    }

    #[test]
    fn every_candidate_nan_gives_zero_step_and_lr_stays_zero() {
        struct Nan;
        impl Objective<f64> for Nan {
            fn value(&self, _: &Tree<f64>) -> Result<f64> {
                Ok(f64::NAN)
            }
            fn value_and_grad(&self, x: &Tree<f64>) -> Result<(f64, Tree<f64>)> {
                Ok((f64::NAN, x.clone()))
            }
        }
        let ls = ScaleByBacktrackingLinesearch::new(BacktrackingHyper::new(2)).unwrap();
        let x = point::<f64>(&[1.0]);
        let g = point::<f64>(&[1.0]);
        let u = point::<f64>(&[-1.0]);
        let mut s = ls.init(&x).unwrap();
        for _ in 0..3 {
            let (out, next) = ls.update(&u, &s, &x, 1.0, &g, &Nan).unwrap();
            assert_eq!(out.get("x").unwrap().data(), &[-0.0]);
            assert_eq!(next.learning_rate.value, 0.0);
            assert_eq!(next.info.num_linesearch_steps.value, 3);
            assert_eq!(next.info.decrease_error.value, f64::INFINITY);
            s = next;
        }
        // the recovery option restarts at max_learning_rate
        let h = BacktrackingHyper {
            recover_from_zero_lr: true,
            ..BacktrackingHyper::new(2)
        };
        let rec = ScaleByBacktrackingLinesearch::new(h).unwrap();
        assert_eq!(rec.initial_eta(0.0f64), 1.0);
    }

    #[test]
    fn limit_hit_takes_the_step_at_the_last_eta() {
        // f = 0.5 * 100 x^2 from x = 1: eta must be < ~0.02; two evaluations are not enough
        let steep = Quadratic::new(vec![100.0], vec![0.0]).unwrap();
        let ls = ScaleByBacktrackingLinesearch::new(BacktrackingHyper {
            decrease_factor: 0.5,
            ..BacktrackingHyper::new(1)
        })
        .unwrap();
        let x = point::<f64>(&[1.0]);
        let (v, g) = steep.value_and_grad(&x).unwrap();
        let u = g.map(|a| a.map(|x| -x));
        let (out, s) = ls
            .update(&u, &ls.init(&x).unwrap(), &x, v, &g, &steep)
            .unwrap();
        assert_eq!(s.info.num_linesearch_steps.value, 2);
        assert_eq!(s.learning_rate.value, 0.5);
        assert!(s.info.decrease_error.value > 0.0 && s.info.decrease_error.value.is_finite());
        assert_eq!(out.get("x").unwrap().data(), &[-50.0]);
    }
}
