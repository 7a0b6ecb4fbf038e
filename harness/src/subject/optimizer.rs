//! The optimizer suite: the laws every Adam-family optimizer must obey, run on any
//! [`Optimizer`] — the reference, a re-created bug, a user's code, a crate written elsewhere.
//!
//! | law | family | what must hold |
//! |---|---|---|
//! | `optimizer_matches_reference` | numerics | step for step, updates equal the reference's within [`tolerance::conformance`] |
//! | `optimizer_updates_finite` | cond-vs-where | finite inputs in the finiteness domain give finite updates at every step |
//! | `optimizer_rejects_invalid_hyperparameters` | numerics | hyperparameters outside their ranges are an error from `make` or `init`, never a panic or an accepted run |
//! | `optimizer_state_signature_fixed` | fixed-state-shape | `init` and every `update` give one state signature (path, shape, dtype, weak flag per leaf) |
//! | `optimizer_one_trace` | trace-count | a staged update traces once over N steps (not applicable to a subject that does not stage) |
//! | `optimizer_live_bytes_flat` | trace-count | after two warm-up steps, no step ends above their live bytes and two windows do not grow them; allocations do not grow within one branch (needs the counting allocator) |
//!
//! A subject is built per case by a factory, `make(&OptimizerSpec)`, from the algorithm, dtype
//! and hyperparameters the case draws; a factory that does not implement an algorithm (or a
//! dtype) returns [`unsupported`] for it and those cases are skipped. A subject that runs in
//! f32 (or f64) only is judged through [`f32_only`] ([`f64_only`]). A passing law says how many cases reached the
//! subject; one that no case reached fails.
//!
//! A case ([`SuiteCase`], drawn by [`suite_case`]) asks for Adam or RAdam (half each) in f32 or
//! f64, lays its values out in one to three named tensors of one or two dimensions, and runs up
//! to 12 steps, or one time in eight those steps repeated to [`LONG_RUN_STEPS`] (past an 8-bit
//! counter's wrap): a step count bumped once per tensor, a mix-up of leaves or a narrow counter
//! fails `optimizer_matches_reference`.
//!
//! # References
//! - D. P. Kingma, J. Ba, "Adam: a method for stochastic optimization", ICLR 2015.
//! - L. Liu et al., "On the variance of the adaptive learning rate and beyond", ICLR 2020
//!   (RAdam); `docs/ALGORITHMS.md` sections 1-2 for the exact formulas and defaults.
//!
//! ```
//! use harness::subject::optimizer::{self, Algorithm, Staged, SuiteOptions};
//! use harness::optim;
//! // The reference itself, staged like `jax.jit(update)`.
//! let make = |spec: &optimizer::OptimizerSpec| -> harness::reference::Result<_> {
//!     match spec.algorithm {
//!         Algorithm::Adam => Ok(Staged::new(optim::adam(spec.learning_rate, spec.hyper.moments)?)),
//!         Algorithm::RAdam => Err(optimizer::unsupported(spec)),
//!     }
//! };
//! // A doctest does not install the counting allocator: the memory law would refuse to run.
//! let opts = SuiteOptions { cases: 8, memory: false, ..SuiteOptions::default() };
//! let report = optimizer::check("reference adam", &make, &opts);
//! assert!(report.passed(), "{}", report.summary());
//! ```

use super::suite_property;
use crate::backend::{Array, DType, Float};
use crate::laws::radam::{
    finiteness_domain, last_momentum_step, leaf, trace_once_memory_flat, MemCase, Stepper,
};
use crate::laws::strategies::{opt_case, OptCase};
use crate::laws::{by_dtype, timed, unsupported_dtype, Family, LawReport, DEFAULT_SEED};
use crate::optim::{self, Jit, RadamHyper, Selection, Transform};
use crate::reference::{Error, Result};
use crate::stage::{HasSignature, Signature};
use crate::tolerance;
use crate::tree::{apply_updates, Tree};
use proptest::prelude::*;

/// An optimizer under test, in optax's shape: `init(params) -> state` and
/// `update(grads, state, params) -> (updates, state)` over named tensors of dtype `E` (the
/// updates already include `-learning_rate`, so `params + updates` is the step).
pub trait Optimizer<E: Float> {
    /// The state. Its [`Signature`] (path, shape, dtype and weak flag of every leaf) is what a
    /// jitted update would be specialised on.
    type State: Clone + HasSignature;
    /// Fresh state for `params`.
    fn init(&mut self, params: &Tree<E>) -> Result<Self::State>;
    /// One step; `state` is left untouched.
    fn update(
        &mut self,
        grads: &Tree<E>,
        state: &Self::State,
        params: &Tree<E>,
    ) -> Result<(Tree<E>, Self::State)>;
    /// How many times the update has been specialised (traced, compiled) so far, for a subject
    /// that stages its update; `None` (the default) for one that does not.
    fn traces(&self) -> Option<usize> {
        None
    }
    /// Why each specialisation happened, in words (what changed), for the counterexample.
    fn trace_log(&self) -> Vec<String> {
        Vec::new()
    }
    /// Whether the updates are read back as `new - old` parameters (a subject that steps its
    /// parameters in place and never shows the step itself, when the step reads the
    /// parameters, as decoupled weight decay does). Such an update carries the roundings of the
    /// in-place step to the parameters' spacing, which [`compare_step_for_step`] allows for.
    /// `false` (the default): the updates are the subject's own.
    fn updates_read_through_params(&self) -> bool {
        false
    }
}

/// A [`Transform`] (the reference's optax-shaped trait, which a user's optimizer can implement
/// too) staged like `jax.jit(update)`: one trace per (static configuration, signature of the
/// inputs), counted by the reference's specialisation cache.
pub struct Staged<T> {
    jit: Jit<T>,
}

impl<T> Staged<T> {
    /// Stage `transform`: its `update` is traced once per state signature.
    pub fn new(transform: T) -> Self {
        Self {
            jit: Jit::new(transform),
        }
    }
    /// The transform staged.
    pub fn transform(&self) -> &T {
        &self.jit.transform
    }
}

impl<E: Float, T: Transform<E>> Optimizer<E> for Staged<T> {
    type State = T::State;
    fn init(&mut self, params: &Tree<E>) -> Result<T::State> {
        self.jit.transform.init(params)
    }
    fn update(
        &mut self,
        grads: &Tree<E>,
        state: &T::State,
        params: &Tree<E>,
    ) -> Result<(Tree<E>, T::State)> {
        self.jit.update(grads, state, params)
    }
    fn traces(&self) -> Option<usize> {
        Some(self.jit.traces())
    }
    fn trace_log(&self) -> Vec<String> {
        self.jit
            .stage()
            .log()
            .iter()
            .map(|e| format!("trace {}: {}", e.index, e.reason))
            .collect()
    }
}

/// The algorithm a case asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Algorithm {
    /// `optax.adam`: `docs/ALGORITHMS.md` section 1.
    Adam,
    /// `optax.radam`: section 2.
    RAdam,
}

/// What a subject is built from for one case: the algorithm, the float type the case runs in,
/// the learning rate and the hyperparameters (`hyper.moments` for Adam; all of `hyper` for
/// RAdam). The default is Adam in f32 with learning rate `1e-3` and optax's defaults.
///
/// ```
/// use harness::backend::DType;
/// use harness::subject::optimizer::{Algorithm, OptimizerSpec};
/// let spec = OptimizerSpec { algorithm: Algorithm::RAdam, dtype: DType::F64, ..OptimizerSpec::default() };
/// assert_eq!((spec.learning_rate, spec.hyper.threshold), (1e-3, 5.0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OptimizerSpec {
    /// Adam or RAdam.
    pub algorithm: Algorithm,
    /// The float type of the case's parameters and gradients (f32 or f64): the subject is stepped
    /// as `Optimizer<f32>` or `Optimizer<f64>` accordingly. A subject that runs in one of them
    /// only returns [`unsupported`] for the other (see [`f32_only`], [`f64_only`]).
    pub dtype: DType,
    /// Learning rate (finite for a valid spec).
    pub learning_rate: f64,
    /// Moment hyperparameters (`hyper.moments`) and, for RAdam, the threshold.
    pub hyper: RadamHyper,
}

impl Default for OptimizerSpec {
    fn default() -> Self {
        Self {
            algorithm: Algorithm::Adam,
            dtype: DType::F32,
            learning_rate: 1e-3,
            hyper: RadamHyper::default(),
        }
    }
}

/// The error a factory returns for a spec it does not implement (its algorithm, or its dtype):
/// the suite skips the case, and does not count it as one that reached the subject. Only the
/// factory's answer decides that: a subject it built that returns this error from `init` or
/// `update` has reached the law, which judges the error as any other.
pub fn unsupported(spec: &OptimizerSpec) -> Error {
    Error::Unsupported(format!("{:?} in {}", spec.algorithm, spec.dtype))
}

/// Whether `e` is [`unsupported`]'s error ([`Error::Unsupported`]: a spec the subject does not
/// implement), which a law skips rather than fails.
pub fn is_unsupported(e: &Error) -> bool {
    matches!(e, Error::Unsupported(_))
}

/// A subject that runs in one float type `E` only, made ready for [`check`], whose subjects
/// implement both `Optimizer<f32>` and `Optimizer<f64>` (each case runs in one of them): it is
/// the subject in `E`, and refuses the other type. Only [`f32_only`] and [`f64_only`] build it,
/// and those factories return [`unsupported`] for a spec of the other type, so its cases are
/// skipped, not failed, and not counted as reaching the subject.
pub struct OneDtype<E, O> {
    subject: O,
    dtype: std::marker::PhantomData<E>,
}

/// A subject in f32 only ([`f32_only`]).
pub type F32Only<O> = OneDtype<f32, O>;
/// A subject in f64 only ([`f64_only`]).
pub type F64Only<O> = OneDtype<f64, O>;

impl<E, O> OneDtype<E, O> {
    /// The subject itself.
    pub fn inner(&self) -> &O {
        &self.subject
    }
}

/// The state of a [`OneDtype`] subject in the float type it does not run: it has no value,
/// since such a subject never starts a run in that type.
#[derive(Debug, Clone, Copy)]
pub enum NotRun {}

impl HasSignature for NotRun {
    fn signature(&self) -> Signature {
        match *self {}
    }
}

impl<E: Float, O: Optimizer<E>> Optimizer<E> for OneDtype<E, O> {
    type State = O::State;
    fn init(&mut self, params: &Tree<E>) -> Result<O::State> {
        self.subject.init(params)
    }
    fn update(
        &mut self,
        grads: &Tree<E>,
        state: &O::State,
        params: &Tree<E>,
    ) -> Result<(Tree<E>, O::State)> {
        self.subject.update(grads, state, params)
    }
    fn traces(&self) -> Option<usize> {
        self.subject.traces()
    }
    fn trace_log(&self) -> Vec<String> {
        self.subject.trace_log()
    }
    fn updates_read_through_params(&self) -> bool {
        self.subject.updates_read_through_params()
    }
}

/// The refusing side of a [`OneDtype`] subject: `init` in the type `E` it does not run is
/// [`Error::Unsupported`], and there is no state to update.
macro_rules! refuses {
    ($runs:ty, $refused:ty) => {
        impl<O> Optimizer<$refused> for OneDtype<$runs, O> {
            type State = NotRun;
            fn init(&mut self, _: &Tree<$refused>) -> Result<NotRun> {
                Err(Error::Unsupported(format!(
                    "{} (a subject in {} only)",
                    <$refused as Float>::DTYPE,
                    <$runs as Float>::DTYPE
                )))
            }
            fn update(
                &mut self,
                _: &Tree<$refused>,
                state: &NotRun,
                _: &Tree<$refused>,
            ) -> Result<(Tree<$refused>, NotRun)> {
                match *state {}
            }
        }
    };
}
refuses!(f32, f64);
refuses!(f64, f32);

/// `make` for every spec in `E`, [`unsupported`] for one in the other type.
fn one_dtype<E: Float, O: Optimizer<E>>(make: impl Factory<O>) -> impl Factory<OneDtype<E, O>> {
    move |spec: &OptimizerSpec| {
        if spec.dtype == E::DTYPE {
            make(spec).map(|subject| OneDtype {
                subject,
                dtype: std::marker::PhantomData,
            })
        } else {
            Err(unsupported(spec))
        }
    }
}

/// The factory of an f32-only subject: `make` for every f32 spec, [`unsupported`] for an f64
/// one. [`check`] then judges the subject on the f32 half of its cases, and a passing law says
/// how many reached it.
///
/// ```
/// use harness::optim::{self, Transform};
/// use harness::reference::Result;
/// use harness::subject::optimizer::{self, Algorithm, Optimizer, OptimizerSpec, Staged, SuiteOptions};
/// use harness::tree::Tree;
/// // A subject with an `Optimizer<f32>` implementation only.
/// type Adam = optim::Chain<optim::ScaleByAdam, optim::ScaleByLearningRate>;
/// struct MineF32(Staged<Adam>);
/// impl Optimizer<f32> for MineF32 {
///     type State = <Adam as Transform<f32>>::State;
///     fn init(&mut self, p: &Tree<f32>) -> Result<Self::State> { self.0.init(p) }
///     fn update(&mut self, g: &Tree<f32>, s: &Self::State, p: &Tree<f32>) -> Result<(Tree<f32>, Self::State)> {
///         self.0.update(g, s, p)
///     }
/// }
/// let make = |s: &OptimizerSpec| match s.algorithm {
///     Algorithm::Adam => Ok(MineF32(Staged::new(optim::adam(s.learning_rate, s.hyper.moments)?))),
///     Algorithm::RAdam => Err(optimizer::unsupported(s)),
/// };
/// let opts = SuiteOptions { cases: 16, memory: false, ..SuiteOptions::default() };
/// let report = optimizer::check("mine, f32", &optimizer::f32_only(make), &opts);
/// assert!(report.passed(), "{}", report.summary());
/// ```
pub fn f32_only<O: Optimizer<f32>>(make: impl Factory<O>) -> impl Factory<F32Only<O>> {
    one_dtype(make)
}

/// The factory of an f64-only subject: `make` for every f64 spec, [`unsupported`] for an f32
/// one. [`check`] judges the subject on the f64 half of its cases; the memory law steps it in
/// f64.
///
/// ```
/// use harness::optim::{self, Selection, Transform};
/// use harness::reference::Result;
/// use harness::subject::optimizer::{self, Algorithm, Optimizer, OptimizerSpec, Staged, SuiteOptions};
/// use harness::tree::Tree;
/// // A subject with an `Optimizer<f64>` implementation only.
/// type RAdam = optim::Chain<optim::ScaleByRadam, optim::ScaleByLearningRate>;
/// struct MineF64(Staged<RAdam>);
/// impl Optimizer<f64> for MineF64 {
///     type State = <RAdam as Transform<f64>>::State;
///     fn init(&mut self, p: &Tree<f64>) -> Result<Self::State> { self.0.init(p) }
///     fn update(&mut self, g: &Tree<f64>, s: &Self::State, p: &Tree<f64>) -> Result<(Tree<f64>, Self::State)> {
///         self.0.update(g, s, p)
///     }
/// }
/// let make = |s: &OptimizerSpec| match s.algorithm {
///     Algorithm::RAdam => Ok(MineF64(Staged::new(optim::radam(s.learning_rate, s.hyper, Selection::Where)?))),
///     Algorithm::Adam => Err(optimizer::unsupported(s)),
/// };
/// let opts = SuiteOptions { cases: 16, memory: false, ..SuiteOptions::default() };
/// let report = optimizer::check("mine, f64", &optimizer::f64_only(make), &opts);
/// assert!(report.passed(), "{}", report.summary());
/// ```
pub fn f64_only<O: Optimizer<f64>>(make: impl Factory<O>) -> impl Factory<F64Only<O>> {
    one_dtype(make)
}

/// How the suite runs.
#[derive(Debug, Clone, Copy)]
pub struct SuiteOptions {
    /// Cases per property law (default 64).
    pub cases: u32,
    /// Seed of the case generator (default [`DEFAULT_SEED`]).
    pub seed: u64,
    /// Run the memory law (needs [`crate::install_counting_allocator!`] in the binary).
    pub memory: bool,
}

impl Default for SuiteOptions {
    fn default() -> Self {
        Self {
            cases: 64,
            seed: DEFAULT_SEED,
            memory: true,
        }
    }
}

/// The suite's verdicts on one subject.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SuiteReport {
    /// The subject's name.
    pub subject: String,
    /// One row per law that applied, in order.
    pub laws: Vec<LawReport>,
    /// Laws that do not apply to this subject, with the reason.
    pub not_applicable: Vec<(String, String)>,
}

impl SuiteReport {
    /// Every applicable law held.
    pub fn passed(&self) -> bool {
        self.laws.iter().all(|l| l.passed)
    }
    /// One line per law, then the counterexample of each failure.
    pub fn summary(&self) -> String {
        let mut out = format!("{}:\n", self.subject);
        for l in &self.laws {
            out += &format!(
                "  {:<44} {:<18} {:>4} cases  {}\n",
                l.name,
                l.family.to_string(),
                l.cases,
                if l.passed { "pass" } else { "FAIL" }
            );
        }
        for (law, why) in &self.not_applicable {
            out += &format!("  {law:<44} not applicable: {why}\n");
        }
        for l in self.laws.iter().filter(|l| !l.passed) {
            out += &format!(
                "\n{} — counterexample:\n{}\n",
                l.name,
                l.counterexample.as_deref().unwrap_or("")
            );
        }
        out
    }
}

/// Builds the subject of a case.
pub trait Factory<O>: Fn(&OptimizerSpec) -> Result<O> {}
impl<O, F: Fn(&OptimizerSpec) -> Result<O>> Factory<O> for F {}

/// A subject that runs in both f32 and f64 (and owns its data: the memory law keeps it in a box).
pub trait BothDtypes: Optimizer<f32> + Optimizer<f64> + 'static {}
impl<O: Optimizer<f32> + Optimizer<f64> + 'static> BothDtypes for O {}

/// Run every law of the suite on the subject `make` builds.
///
/// A property law that passes reports in [`LawReport::cases`] how many of its cases reached the
/// subject (the others are outside the law's domain or ask for an algorithm or dtype the factory
/// does not implement), and says so in [`LawReport::counterexample`] (`"41 of 64 cases reached the
/// subject"`); a law that no case reached fails, since it judged nothing.
pub fn check<O: BothDtypes>(
    name: &str,
    make: &impl Factory<O>,
    opts: &SuiteOptions,
) -> SuiteReport {
    let mut laws = Vec::new();
    let mut not_applicable = Vec::new();
    let (cases, seed) = (opts.cases, opts.seed);
    let property = |law: &'static str, family, f: &SuiteLaw<O>| {
        counted(cases, make, |make| {
            timed(law, family, cases, false, || {
                suite_property(law, cases, seed, suite_case(), |c| f(c, make))
            })
        })
    };
    laws.push(property(
        "optimizer_matches_reference",
        Family::Numerics,
        &|c, make| {
            by_dtype!(real c.run.dtype, matches_reference[O](c, &make), else unsupported_dtype(c.run.dtype))
        },
    ));
    laws.push(property(
        "optimizer_updates_finite",
        Family::CondVsWhere,
        &|c, make| {
            by_dtype!(real c.run.dtype, updates_finite[O](c, &make), else unsupported_dtype(c.run.dtype))
        },
    ));
    let invalid = invalid_cases(cases);
    laws.push(counted(invalid, make, |make| {
        timed(
            "optimizer_rejects_invalid_hyperparameters",
            Family::Numerics,
            invalid,
            false,
            || {
                suite_property(
                    "optimizer_rejects_invalid_hyperparameters",
                    invalid,
                    seed,
                    invalid_case(),
                    |c| rejects_invalid::<O>(c, &make),
                )
            },
        )
    }));
    laws.push(property(
        "optimizer_state_signature_fixed",
        Family::FixedStateShape,
        &|c, make| {
            by_dtype!(real c.run.dtype, state_signature_fixed[O](c, &make), else unsupported_dtype(c.run.dtype))
        },
    ));
    match staged::<O>(make) {
        Ok(true) => laws.push(property(
            "optimizer_one_trace",
            Family::TraceCount,
            &|c, make| {
                by_dtype!(real c.run.dtype, one_trace[O](c, &make), else unsupported_dtype(c.run.dtype))
            },
        )),
        Ok(false) => not_applicable.push((
            "optimizer_one_trace".to_string(),
            "the subject does not stage its update (traces() is None)".to_string(),
        )),
        Err(e) => laws.push(timed(
            "optimizer_one_trace",
            Family::TraceCount,
            0,
            false,
            || Err(e),
        )),
    }
    if opts.memory {
        laws.push(timed(
            "optimizer_live_bytes_flat",
            Family::TraceCount,
            cases.min(8),
            true,
            || {
                suite_property(
                    "optimizer_live_bytes_flat",
                    cases.min(8),
                    seed,
                    (1usize..64, prop_oneof![Just(2usize), Just(10), 2usize..100]),
                    |&(elements, steps)| live_bytes_flat::<O>(&MemCase { elements, steps }, make),
                )
            },
        ));
    } else {
        not_applicable.push((
            "optimizer_live_bytes_flat".to_string(),
            "memory not measured (SuiteOptions::memory is false)".to_string(),
        ));
    }
    SuiteReport {
        subject: name.to_string(),
        laws,
        not_applicable,
    }
}

/// A law of the suite on one case, given the factory it builds its subject with.
type SuiteLaw<O> = dyn Fn(&SuiteCase, &dyn Factory<O>) -> std::result::Result<(), String>;

/// Run the law `run` builds on a factory that counts the calls its subject answered (anything but
/// [`unsupported`]). When the law passed, the count becomes its [`LawReport::cases`] and its
/// evidence (`"12 of 64 cases reached the subject"`, `cases` being the law's case count); a count
/// of 0 fails it: no case reached the subject, so the law judged nothing. [`check`] runs each of
/// its property laws this way; a suite of its own (another reference's) can too.
///
/// ```
/// use harness::laws::{timed, Family};
/// use harness::optim;
/// use harness::subject::optimizer::{self, counted, Algorithm, OptimizerSpec, Staged};
/// let adam_only = |s: &OptimizerSpec| match s.algorithm {
///     Algorithm::Adam => optim::adam(s.learning_rate, s.hyper.moments).map(Staged::new),
///     Algorithm::RAdam => Err(optimizer::unsupported(s)),
/// };
/// let asks = [Algorithm::Adam, Algorithm::RAdam, Algorithm::Adam];
/// let report = counted(3, &adam_only, |make| {
///     timed("builds", Family::Numerics, 3, false, || {
///         for algorithm in asks {
///             let spec = OptimizerSpec { algorithm, ..OptimizerSpec::default() };
///             let _ = make(&spec);
///         }
///         Ok(())
///     })
/// });
/// assert!(report.passed);
/// assert_eq!(report.cases, 2);
/// assert_eq!(report.counterexample.as_deref(), Some("2 of 3 cases reached the subject"));
/// ```
pub fn counted<O>(
    cases: u32,
    make: &impl Factory<O>,
    run: impl FnOnce(&dyn Factory<O>) -> LawReport,
) -> LawReport {
    let answered = std::sync::atomic::AtomicU32::new(0);
    let counting = |spec: &OptimizerSpec| {
        let r = make(spec);
        if !matches!(&r, Err(e) if is_unsupported(e)) {
            answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        r
    };
    let mut report = run(&counting);
    let n = answered.into_inner();
    if report.passed {
        report.cases = n;
        report.counterexample = Some(if n == 0 {
            report.passed = false;
            format!(
                "no case reached the subject: of {cases} cases none was in the law's domain and \
                 asked for an algorithm and dtype the factory builds (it returned `unsupported` for every one)"
            )
        } else {
            format!("{n} of {cases} cases reached the subject")
        });
    }
    report
}

/// Steps of a long case of the suite: past 255, where an 8-bit step counter wraps.
pub const LONG_RUN_STEPS: usize = 300;

/// Names of the tensors a case lays its values out in (the first `k` for `k` tensors; a tree
/// holds them in name order, which is not this order).
const TENSOR_NAMES: [&str; 3] = ["w", "layer2.b", "layer10.w"];

/// A case of the optimizer suite: a run of steps ([`OptCase`]), the algorithm it asks for, and the
/// named tensors (one to three, 1-D or 2-D; empty only as the one tensor of a case with no
/// values) its values fill in order.
#[derive(Clone, PartialEq)]
pub struct SuiteCase {
    /// Hyperparameters, learning rate, dtype (f32 or f64), and the values of the parameters and of
    /// each step's gradients, flattened over [`SuiteCase::tensors`].
    pub run: OptCase,
    /// Adam or RAdam (half of the cases each).
    pub algorithm: Algorithm,
    /// Name and shape of each tensor; their sizes add up to `run.params.len()`.
    pub tensors: Vec<(String, Vec<usize>)>,
    /// For a long case, how many steps were drawn: `run.grads` repeats them up to
    /// [`LONG_RUN_STEPS`]. `None` for a case of its drawn steps alone.
    pub repeats: Option<usize>,
}

impl SuiteCase {
    /// `values` (one per element, in the order of [`SuiteCase::tensors`]) as a tree of `E`.
    /// [`Error::Structure`] when the tensors' sizes do not add up to `values.len()` or two
    /// tensors share a name, [`Error::Overflow`] when a size overflows `usize` (a case built by
    /// hand; [`suite_case`]'s always fit).
    pub fn tree<E: Float>(&self, values: &[f64]) -> Result<Tree<E>> {
        let sizes: Vec<usize> = self
            .tensors
            .iter()
            .map(|(_, shape)| shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)))
            .collect::<Option<_>>()
            .ok_or_else(|| Error::Overflow(format!("a size of the tensors {:?}", self.tensors)))?;
        let total = sizes.iter().try_fold(0usize, |a, &n| a.checked_add(n));
        if total != Some(values.len()) {
            return Err(Error::Structure(format!(
                "the case's tensors {:?} hold {} values, but it has {}",
                self.tensors,
                total.map_or("more than usize::MAX".to_string(), |t| t.to_string()),
                values.len()
            )));
        }
        let mut rest = values;
        let mut leaves = Vec::with_capacity(self.tensors.len());
        for ((name, shape), n) in self.tensors.iter().zip(sizes) {
            let (mine, others) = rest.split_at(n);
            rest = others;
            let data = mine.iter().map(|&x| E::of_f64(x)).collect();
            leaves.push((name.clone(), Array::new(shape.clone(), data)?));
        }
        Tree::from_leaves(leaves)
    }
    /// The initial parameters (an error as for [`SuiteCase::tree`]).
    pub fn params<E: Float>(&self) -> Result<Tree<E>> {
        self.tree(&self.run.params)
    }
    /// One gradient tree per step (an error as for [`SuiteCase::tree`]).
    pub fn grads<E: Float>(&self) -> Result<Vec<Tree<E>>> {
        self.run.grads.iter().map(|g| self.tree(g)).collect()
    }
    /// What the subject is built from.
    pub fn spec(&self) -> OptimizerSpec {
        OptimizerSpec {
            algorithm: self.algorithm,
            dtype: self.run.dtype,
            learning_rate: self.run.learning_rate,
            hyper: self.run.hyper,
        }
    }
    /// A case of one tensor `w` holding the run's values, asking for `algorithm`.
    pub fn one_tensor(run: OptCase, algorithm: Algorithm) -> Self {
        let tensors = vec![("w".to_string(), vec![run.params.len()])];
        Self {
            run,
            algorithm,
            tensors,
            repeats: None,
        }
    }
}

impl std::fmt::Debug for SuiteCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tensors: Vec<String> = self
            .tensors
            .iter()
            .map(|(n, s)| format!("{n}: {s:?}"))
            .collect();
        write!(f, "{:?} over {{{}}}, ", self.algorithm, tensors.join(", "))?;
        match self.repeats {
            None => write!(f, "{:?}", self.run),
            Some(k) => {
                let drawn = OptCase {
                    grads: self.run.grads.get(..k).unwrap_or(&self.run.grads).to_vec(),
                    ..self.run.clone()
                };
                write!(
                    f,
                    "the {k} steps of {drawn:?} repeated to {} steps",
                    self.run.grads.len()
                )
            }
        }
    }
}

/// The suite's cases: the RAdam/Adam runs of the reference laws (up to 12 steps, or with
/// probability 1/8 those steps repeated to [`LONG_RUN_STEPS`]) in f32 and f64, half asking for
/// Adam and half for RAdam, their values laid out in one to three tensors of one or two
/// dimensions. Shrinking goes towards one 1-D tensor and the drawn steps alone.
pub fn suite_case() -> impl Strategy<Value = SuiteCase> {
    // One tuple mapped, no `prop_flat_map` (whose shrinking regenerates the inner values and ran
    // out of its iterations here). A tuple shrinks its first element first: a long run becomes its
    // drawn steps alone before the steps are cut (a failure that needs two steps would otherwise
    // shrink to one step repeated, and stop there).
    (
        prop_oneof![7 => Just(false), 1 => Just(true)],
        prop_oneof![Just(Algorithm::Adam), Just(Algorithm::RAdam)],
        opt_case(12),
        // cut points, wrapped into 1..n for a case of n values (at most 5)
        prop::collection::vec(1usize..6, 0..TENSOR_NAMES.len()),
        prop::collection::vec(any::<bool>(), TENSOR_NAMES.len()),
    )
        .prop_map(|(long, algorithm, mut run, cuts, matrix)| {
            if run.dtype == DType::F16 {
                run.dtype = DType::F32;
            }
            // no tensor is empty unless the case has no values at all: a zero-element tensor
            // beside others is a case of its own (peers' `optimizer_steps_empty_parameter`),
            // which would otherwise stand in front of whatever else a law could find
            let n = run.params.len();
            let mut cuts: Vec<usize> = match n {
                0 | 1 => Vec::new(),
                _ => cuts.into_iter().map(|c| 1 + (c - 1) % (n - 1)).collect(),
            };
            cuts.sort_unstable();
            cuts.dedup();
            let bounds: Vec<usize> = std::iter::once(0)
                .chain(cuts)
                .chain(std::iter::once(run.params.len()))
                .collect();
            let tensors = bounds
                .windows(2)
                .zip(TENSOR_NAMES)
                .zip(matrix)
                .map(|((w, name), matrix)| {
                    let size = w[1] - w[0];
                    let shape = if matrix && size >= 2 && size % 2 == 0 {
                        vec![2, size / 2]
                    } else {
                        vec![size]
                    };
                    (name.to_string(), shape)
                })
                .collect();
            let drawn = run.grads.len();
            let repeats = long.then(|| {
                run.grads = run
                    .grads
                    .iter()
                    .cycle()
                    .take(LONG_RUN_STEPS)
                    .cloned()
                    .collect();
                drawn
            });
            SuiteCase {
                run,
                algorithm,
                tensors,
                repeats,
            }
        })
}

/// A case's parameters and gradients in `E`; a case whose tensors do not fit its values is
/// reported, not run.
pub fn case_trees<E: Float>(
    case: &SuiteCase,
) -> std::result::Result<(Tree<E>, Vec<Tree<E>>), String> {
    let bad = |e: Error| format!("a malformed case: {e}");
    Ok((case.params().map_err(bad)?, case.grads().map_err(bad)?))
}

/// The subject of a case, or `None` when it does not implement the case's algorithm.
/// It is built for `E`, the dtype it is stepped in.
fn build<E: Float, O>(
    case: &SuiteCase,
    make: &impl Factory<O>,
) -> std::result::Result<Option<O>, String> {
    let spec = OptimizerSpec {
        dtype: E::DTYPE,
        ..case.spec()
    };
    match make(&spec) {
        Ok(o) => Ok(Some(o)),
        Err(e) if is_unsupported(&e) => Ok(None),
        Err(e) => Err(format!("make({spec:?}) failed: {e}")),
    }
}

/// The reference transform of a spec (RAdam in its `Where` form, as optax).
fn reference_updates<E: Float>(
    spec: &OptimizerSpec,
    params: &Tree<E>,
    grads: &[Tree<E>],
) -> Result<Vec<Tree<E>>> {
    fn run<E: Float, T: Transform<E>>(t: T, p: &Tree<E>, gs: &[Tree<E>]) -> Result<Vec<Tree<E>>> {
        let (mut p, mut s) = (p.clone(), t.init(p)?);
        let mut out = Vec::with_capacity(gs.len());
        for g in gs {
            let (u, next) = t.update(g, &s, &p)?;
            p = apply_updates(&p, &u)?;
            s = next;
            out.push(u);
        }
        Ok(out)
    }
    match spec.algorithm {
        Algorithm::Adam => run(
            optim::adam(spec.learning_rate, spec.hyper.moments)?,
            params,
            grads,
        ),
        Algorithm::RAdam => run(
            optim::radam(spec.learning_rate, spec.hyper, Selection::Where)?,
            params,
            grads,
        ),
    }
}

/// Step for step, the subject's updates equal the reference's within
/// [`tolerance::conformance`], on cases in the finiteness domain.
pub fn matches_reference<E: Float, O: Optimizer<E>>(
    case: &SuiteCase,
    make: &impl Factory<O>,
) -> std::result::Result<(), String> {
    if !finiteness_domain(&case.run) {
        return Ok(());
    }
    let spec = case.spec();
    let (params, grads) = case_trees::<E>(case)?;
    let Ok(want) = reference_updates(&spec, &params, &grads) else {
        return Ok(()); // rejected by the reference for this dtype: the bad-input law's business
    };
    let Some(mut opt) = build::<E, O>(case, make)? else {
        return Ok(());
    };
    compare_step_for_step(
        &mut opt,
        params,
        &grads,
        &want,
        |at| format!("{:?} step {at}", spec.algorithm),
        "reference",
    )
}

/// Run `opt` from `params` over `grads`, each update applied before the next step, and compare
/// every update with `want` (one tree per step) within [`tolerance::conformance`] of `E`.
/// `Err` names the step (`at(step)`, 1-based; `at(0)` for `init`), the leaf and element, the two values, and the
/// comparison's name (`reference` in the messages), or the subject's own error.
///
/// # References
/// - [`matches_reference`] (the law built on it, against optax's convention).
///
/// ```
/// use harness::laws::radam::leaf;
/// use harness::optim::{self, AdamHyper};
/// use harness::subject::optimizer::{compare_step_for_step, Staged};
/// let hyper = AdamHyper { eps: 0.0, ..AdamHyper::default() };
/// let make = || Staged::new(optim::adam(0.1, hyper).unwrap());
/// let (p, g) = (leaf::<f64>(&[1.0]), vec![leaf::<f64>(&[0.5]); 2]);
/// // with eps = 0 and a constant gradient, every Adam step is -lr * sign(g) up to rounding
/// let want = vec![leaf::<f64>(&[-0.1]); 2];
/// assert!(compare_step_for_step(&mut make(), p.clone(), &g, &want, |t| format!("step {t}"), "reference").is_ok());
/// let wrong = vec![leaf::<f64>(&[-0.2]); 2];
/// let e = compare_step_for_step(&mut make(), p, &g, &wrong, |t| format!("step {t}"), "reference");
/// assert!(e.unwrap_err().starts_with("step 1: updates.w[0]"));
/// ```
pub fn compare_step_for_step<E: Float, O: Optimizer<E>>(
    opt: &mut O,
    params: Tree<E>,
    grads: &[Tree<E>],
    want: &[Tree<E>],
    at: impl Fn(usize) -> String,
    reference: &str,
) -> std::result::Result<(), String> {
    let tol = tolerance::conformance(E::DTYPE);
    let through_params = opt.updates_read_through_params();
    let mut p = params;
    let mut state = opt.init(&p).map_err(|e| format!("{}: init: {e}", at(0)))?;
    for (t, (g, w)) in grads.iter().zip(want).enumerate() {
        let (u, next) = opt
            .update(g, &state, &p)
            .map_err(|e| format!("{}: {e}", at(t + 1)))?;
        u.check_like(w, "updates")
            .map_err(|e| format!("{}: {e}", at(t + 1)))?;
        for (name, got) in u.iter() {
            let expected = w.get(name).expect("same leaves");
            let old = p.get(name).expect("same leaves");
            for (i, ((a, b), q)) in got
                .data()
                .iter()
                .zip(expected.data())
                .zip(old.data())
                .enumerate()
            {
                let (a, b, q) = (a.as_f64(), b.as_f64(), q.as_f64());
                let tol = if through_params {
                    tolerance::read_through_params(tol, E::DTYPE, q, b)
                } else {
                    tol
                };
                if !tol.close(a, b) {
                    return Err(format!(
                        "{}: updates.{name}[{i}] = {a:e}, {reference} {b:e} (|diff| {:e} > {:e} = atol + rtol |reference|)",
                        at(t + 1),
                        (a - b).abs(),
                        tol.atol + tol.rtol * b.abs()
                    ));
                }
            }
        }
        p = apply_updates(&p, &u).map_err(|e| e.to_string())?;
        state = next;
    }
    Ok(())
}

/// Finite inputs in the finiteness domain give finite updates at every step.
pub fn updates_finite<E: Float, O: Optimizer<E>>(
    case: &SuiteCase,
    make: &impl Factory<O>,
) -> std::result::Result<(), String> {
    if !finiteness_domain(&case.run) {
        return Ok(());
    }
    let Some(mut opt) = build::<E, O>(case, make)? else {
        return Ok(());
    };
    let (mut p, grads) = case_trees::<E>(case)?;
    let Ok(mut state) = opt.init(&p) else {
        return Ok(()); // a typed refusal (e.g. an eps that rounds to 0 in this dtype)
    };
    for (t, g) in grads.iter().enumerate() {
        let (u, next) = opt
            .update(g, &state, &p)
            .map_err(|e| format!("step {}: {e}", t + 1))?;
        if let Some((name, i, x)) = u.iter().find_map(|(n, a)| {
            a.data()
                .iter()
                .position(|x| !x.is_finite())
                .map(|i| (n.clone(), i, a.data()[i]))
        }) {
            return Err(format!("step {}: updates.{name}[{i}] = {x:?}", t + 1));
        }
        p = apply_updates(&p, &u).map_err(|e| e.to_string())?;
        state = next;
    }
    Ok(())
}

/// `init` and every `update` produce the same state signature.
pub fn state_signature_fixed<E: Float, O: Optimizer<E>>(
    case: &SuiteCase,
    make: &impl Factory<O>,
) -> std::result::Result<(), String> {
    let Some(mut opt) = build::<E, O>(case, make)? else {
        return Ok(());
    };
    let (mut p, grads) = case_trees::<E>(case)?;
    let Ok(mut state) = opt.init(&p) else {
        return Ok(());
    };
    let sig0: Signature = state.signature();
    for (t, g) in grads.iter().enumerate() {
        let Ok((u, next)) = opt.update(g, &state, &p) else {
            return Ok(()); // a refused step is the finiteness law's business
        };
        let d = sig0.diff(&next.signature());
        if !d.is_empty() {
            return Err(format!("step {}: state signature changed: {d}", t + 1));
        }
        p = apply_updates(&p, &u).map_err(|e| e.to_string())?;
        state = next;
    }
    Ok(())
}

/// Whether the subject stages its update ([`Optimizer::traces`] is `Some`), asked of the first
/// default spec (Adam, RAdam or Nesterov Adam; f32 or f64) its factory builds; `Err` when it
/// builds none.
pub fn staged<O: BothDtypes>(make: &impl Factory<O>) -> std::result::Result<bool, String> {
    let (spec, subject) = first_built(make)?;
    Ok(match spec.dtype {
        DType::F32 => Optimizer::<f32>::traces(&subject),
        _ => Optimizer::<f64>::traces(&subject),
    }
    .is_some())
}

/// The specs the suite tries where it needs one subject rather than a case's: Adam, RAdam and
/// Nesterov Adam (learning rate 1e-3, optax's defaults), in f32, then the same in f64.
fn default_specs() -> impl Iterator<Item = OptimizerSpec> {
    [DType::F32, DType::F64].into_iter().flat_map(|dtype| {
        [
            (Algorithm::Adam, false),
            (Algorithm::RAdam, false),
            (Algorithm::Adam, true),
        ]
        .map(|(algorithm, nesterov)| {
            let mut spec = OptimizerSpec {
                algorithm,
                dtype,
                ..OptimizerSpec::default()
            };
            spec.hyper.moments.nesterov = nesterov;
            spec
        })
    })
}

/// The first of the default specs (Adam, RAdam, Nesterov Adam; f32 then f64) that `make`
/// builds, with the subject built. Only the factory's answer counts, as for a case: an error
/// when `make` fails on one with anything but [`unsupported`], or builds none.
fn first_built<O>(make: &impl Factory<O>) -> std::result::Result<(OptimizerSpec, O), String> {
    let mut last = None;
    for spec in default_specs() {
        match make(&spec) {
            Ok(subject) => return Ok((spec, subject)),
            Err(e) if is_unsupported(&e) => last = Some(e),
            Err(e) => return Err(format!("make({spec:?}) failed: {e}")),
        }
    }
    Err(format!(
        "the factory builds no default spec (Adam, RAdam or Nesterov Adam; f32 or f64): {}",
        last.map_or_else(String::new, |e| e.to_string())
    ))
}

/// A staged update traces once over every step of the case.
pub fn one_trace<E: Float, O: Optimizer<E>>(
    case: &SuiteCase,
    make: &impl Factory<O>,
) -> std::result::Result<(), String> {
    let Some(mut opt) = build::<E, O>(case, make)? else {
        return Ok(());
    };
    let (mut p, grads) = case_trees::<E>(case)?;
    let Ok(mut state) = opt.init(&p) else {
        return Ok(());
    };
    for g in &grads {
        let Ok((u, next)) = opt.update(g, &state, &p) else {
            return Ok(());
        };
        p = apply_updates(&p, &u).map_err(|e| e.to_string())?;
        state = next;
    }
    match opt.traces() {
        Some(n) if n > 1 => Err(format!(
            "{} steps traced {n} times (want 1): {}",
            case.run.grads.len(),
            opt.trace_log().join("; ")
        )),
        _ => Ok(()),
    }
}

/// Invalid hyperparameters (one field out of its range) for an algorithm.
#[derive(Debug, Clone, Copy)]
pub struct InvalidCase {
    /// The spec, valid except for `field`.
    pub spec: OptimizerSpec,
    /// Which field is out of range.
    pub field: &'static str,
}

/// How many cases [`check`] runs of the invalid-hyperparameter law when its property laws run
/// `cases`: twice as many, since each case draws one dtype (f32 or f64), so that every
/// (algorithm, field, dtype) is drawn about as often as every (algorithm, field) was when a case
/// checked both dtypes.
pub fn invalid_cases(cases: u32) -> u32 {
    cases.saturating_mul(2)
}

/// Specs with exactly one hyperparameter outside its legal range, in f32 or f64.
pub fn invalid_case() -> impl Strategy<Value = InvalidCase> {
    let bad = prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(-1.0),
        Just(1.0),
        Just(1.5),
        -10.0f64..-1e-9
    ];
    (
        prop_oneof![Just(Algorithm::Adam), Just(Algorithm::RAdam)],
        prop_oneof![Just(DType::F32), Just(DType::F64)],
        0usize..5,
        bad,
    )
        .prop_map(|(algorithm, dtype, which, v)| {
            let mut spec = OptimizerSpec {
                algorithm,
                dtype,
                ..OptimizerSpec::default()
            };
            let field = match which {
                0 => {
                    spec.hyper.moments.b1 = v;
                    "b1"
                }
                1 => {
                    spec.hyper.moments.b2 = v;
                    "b2"
                }
                2 => {
                    spec.hyper.moments.eps = if v >= 0.0 { f64::NAN } else { v };
                    "eps"
                }
                3 => {
                    spec.hyper.moments.eps_root = if v >= 0.0 { f64::NAN } else { v };
                    "eps_root"
                }
                _ => {
                    spec.learning_rate = if v.is_finite() { f64::NAN } else { v };
                    "learning_rate"
                }
            };
            InvalidCase { spec, field }
        })
}

/// An invalid spec is refused by `make` or by `init` in the spec's dtype. (Each case checks one
/// dtype; [`check`] runs [`invalid_cases`] of them.)
pub fn rejects_invalid<O: BothDtypes>(
    case: &InvalidCase,
    make: &impl Factory<O>,
) -> std::result::Result<(), String> {
    // the reference rejects it: the case really is invalid
    let params64 = leaf::<f64>(&[0.5, -1.0]);
    if reference_updates(&case.spec, &params64, &[]).is_ok() {
        return Err(format!("not an invalid case: {case:?}"));
    }
    // an Adam case is also asked for with Nesterov momentum when the subject (a NAdam) takes
    // only that; any other refusal by `make` is a rejection
    let mut nesterov = case.spec;
    nesterov.hyper.moments.nesterov = !nesterov.hyper.moments.nesterov;
    let built = match make(&case.spec) {
        Err(e) if is_unsupported(&e) && case.spec.algorithm == Algorithm::Adam => make(&nesterov),
        r => r,
    };
    let mut o = match built {
        Err(_) => return Ok(()),
        Ok(o) => o,
    };
    let accepted = match case.spec.dtype {
        DType::F32 => Optimizer::<f32>::init(&mut o, &leaf::<f32>(&[0.5, -1.0])).is_ok(),
        DType::F64 => Optimizer::<f64>::init(&mut o, &params64).is_ok(),
        other => return Err(format!("the suite runs f32 and f64, not {other}: {case:?}")),
    };
    if accepted {
        return Err(format!(
            "{} = {:?} accepted by make and init ({})",
            case.field,
            field_value(case),
            case.spec.dtype
        ));
    }
    Ok(())
}

fn field_value(case: &InvalidCase) -> f64 {
    match case.field {
        "b1" => case.spec.hyper.moments.b1,
        "b2" => case.spec.hyper.moments.b2,
        "eps" => case.spec.hyper.moments.eps,
        "eps_root" => case.spec.hyper.moments.eps_root,
        _ => case.spec.learning_rate,
    }
}

/// An [`Optimizer`] holding its state, stepping parameters in place (the memory law's driver).
struct Holding<E: Float, O: Optimizer<E>> {
    opt: O,
    state: O::State,
}

impl<E: Float, O: Optimizer<E>> Stepper<E> for Holding<E, O> {
    fn step(&mut self, params: &mut Tree<E>, grads: &Tree<E>) -> Result<()> {
        let (u, s) = self.opt.update(grads, &self.state, params)?;
        *params = apply_updates(params, &u)?;
        self.state = s;
        Ok(())
    }
    fn traces(&self) -> Option<usize> {
        self.opt.traces()
    }
}

/// [`trace_once_memory_flat`] on steps of the first of Adam, RAdam and Nesterov Adam in f32,
/// then the same in f64 (default hyperparameters, learning rate 1e-3), that the factory builds
/// (as [`staged`] picks it), in that spec's dtype: no step ends with more live bytes than the
/// two warm-up steps left, two windows of `case.steps` steps do not grow them, the second
/// window allocates no more than the first, and a staged subject traces once. For RAdam the allocation windows start after its last momentum
/// step ([`last_momentum_step`]: 5), so that both run the rectified branch. Hold
/// [`crate::probe::exclusive`].
pub fn live_bytes_flat<O: BothDtypes>(
    case: &MemCase,
    make: &impl Factory<O>,
) -> std::result::Result<(), String> {
    let (spec, _) = first_built(make)?;
    let switch = match spec.algorithm {
        Algorithm::RAdam => last_momentum_step(&spec.hyper),
        Algorithm::Adam => 0,
    };
    by_dtype!(real spec.dtype, memory_flat_in[O](case, &spec, make, switch), else unsupported_dtype(spec.dtype))
}

/// The memory run of `live_bytes_flat` in `E`, on a fresh subject of `spec` per run (a failing
/// run is run again).
fn memory_flat_in<E: Float, O: Optimizer<E> + 'static>(
    case: &MemCase,
    spec: &OptimizerSpec,
    make: &impl Factory<O>,
    switch: usize,
) -> std::result::Result<(), String> {
    let stepper = |p: &Tree<E>| -> Result<Box<dyn Stepper<E>>> {
        let mut opt = make(spec)?;
        let state = opt.init(p)?;
        Ok(Box::new(Holding { opt, state }))
    };
    trace_once_memory_flat(case, &stepper, switch).map(|_| ())
}
