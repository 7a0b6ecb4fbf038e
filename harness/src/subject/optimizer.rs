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
//! A subject is built per case by a factory, `make(&OptimizerSpec)`, from the algorithm and
//! hyperparameters the case draws; a factory that does not implement an algorithm returns
//! [`Unsupported`](crate::reference::Error::External) for it and those cases are skipped (the
//! suite says how many it ran).
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
use crate::backend::{DType, Float};
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

/// What a subject is built from for one case: the algorithm, the learning rate and the
/// hyperparameters (`hyper.moments` for Adam; all of `hyper` for RAdam).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OptimizerSpec {
    /// Adam or RAdam.
    pub algorithm: Algorithm,
    /// Learning rate (finite for a valid spec).
    pub learning_rate: f64,
    /// Moment hyperparameters (`hyper.moments`) and, for RAdam, the threshold.
    pub hyper: RadamHyper,
}

/// The error a factory returns for an algorithm it does not implement: the suite skips the case.
pub fn unsupported(spec: &OptimizerSpec) -> Error {
    Error::External(format!("{UNSUPPORTED}: {:?}", spec.algorithm))
}

const UNSUPPORTED: &str = "unsupported by this subject";

fn is_unsupported(e: &Error) -> bool {
    matches!(e, Error::External(m) if m.starts_with(UNSUPPORTED))
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
pub fn check<O: BothDtypes>(
    name: &str,
    make: &impl Factory<O>,
    opts: &SuiteOptions,
) -> SuiteReport {
    let mut laws = Vec::new();
    let mut not_applicable = Vec::new();
    let (cases, seed) = (opts.cases, opts.seed);
    let property =
        |law: &'static str, family, f: &dyn Fn(&OptCase) -> std::result::Result<(), String>| {
            timed(law, family, cases, false, || {
                suite_property(law, cases, seed, suite_case(), f)
            })
        };
    laws.push(property(
        "optimizer_matches_reference",
        Family::Numerics,
        &|c| {
            by_dtype!(real c.dtype, matches_reference[O](c, make), else unsupported_dtype(c.dtype))
        },
    ));
    laws.push(property(
        "optimizer_updates_finite",
        Family::CondVsWhere,
        &|c| by_dtype!(real c.dtype, updates_finite[O](c, make), else unsupported_dtype(c.dtype)),
    ));
    laws.push(timed(
        "optimizer_rejects_invalid_hyperparameters",
        Family::Numerics,
        cases,
        false,
        || {
            suite_property(
                "optimizer_rejects_invalid_hyperparameters",
                cases,
                seed,
                invalid_case(),
                |c| rejects_invalid::<O>(c, make),
            )
        },
    ));
    laws.push(property(
        "optimizer_state_signature_fixed",
        Family::FixedStateShape,
        &|c| {
            by_dtype!(real c.dtype, state_signature_fixed[O](c, make), else unsupported_dtype(c.dtype))
        },
    ));
    match staged::<O>(make) {
        Ok(true) => laws.push(property(
            "optimizer_one_trace",
            Family::TraceCount,
            &|c| by_dtype!(real c.dtype, one_trace[O](c, make), else unsupported_dtype(c.dtype)),
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

/// The suite's cases: the RAdam/Adam strategy of the reference laws, in f32 and f64, each case
/// asking for Adam or RAdam.
pub fn suite_case() -> impl Strategy<Value = OptCase> {
    opt_case(12).prop_map(|c| OptCase {
        dtype: if c.dtype == DType::F16 {
            DType::F32
        } else {
            c.dtype
        },
        ..c
    })
}

/// The algorithm a case asks for (half of the cases each, by the threshold's bits).
pub fn algorithm_of(case: &OptCase) -> Algorithm {
    if case.hyper.threshold.to_bits().is_multiple_of(2) {
        Algorithm::RAdam
    } else {
        Algorithm::Adam
    }
}

/// The spec of a case.
pub fn spec_of(case: &OptCase) -> OptimizerSpec {
    OptimizerSpec {
        algorithm: algorithm_of(case),
        learning_rate: case.learning_rate,
        hyper: case.hyper,
    }
}

/// The subject of a case, or `None` when it does not implement the case's algorithm.
fn build<O>(case: &OptCase, make: &impl Factory<O>) -> std::result::Result<Option<O>, String> {
    match make(&spec_of(case)) {
        Ok(o) => Ok(Some(o)),
        Err(e) if is_unsupported(&e) => Ok(None),
        Err(e) => Err(format!("make({:?}) failed: {e}", spec_of(case))),
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
    case: &OptCase,
    make: &impl Factory<O>,
) -> std::result::Result<(), String> {
    if !finiteness_domain(case) {
        return Ok(());
    }
    let spec = spec_of(case);
    let params = leaf::<E>(&case.params);
    let grads: Vec<Tree<E>> = case.grads.iter().map(|g| leaf::<E>(g)).collect();
    let Ok(want) = reference_updates(&spec, &params, &grads) else {
        return Ok(()); // rejected by the reference for this dtype: the bad-input law's business
    };
    let Some(mut opt) = build(case, make)? else {
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
    case: &OptCase,
    make: &impl Factory<O>,
) -> std::result::Result<(), String> {
    if !finiteness_domain(case) {
        return Ok(());
    }
    let Some(mut opt) = build(case, make)? else {
        return Ok(());
    };
    let mut p = leaf::<E>(&case.params);
    let Ok(mut state) = opt.init(&p) else {
        return Ok(()); // a typed refusal (e.g. an eps that rounds to 0 in this dtype)
    };
    for (t, g) in case.grads.iter().enumerate() {
        let (u, next) = opt
            .update(&leaf::<E>(g), &state, &p)
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
    case: &OptCase,
    make: &impl Factory<O>,
) -> std::result::Result<(), String> {
    let Some(mut opt) = build(case, make)? else {
        return Ok(());
    };
    let mut p = leaf::<E>(&case.params);
    let Ok(mut state) = opt.init(&p) else {
        return Ok(());
    };
    let sig0: Signature = state.signature();
    for (t, g) in case.grads.iter().enumerate() {
        let Ok((u, next)) = opt.update(&leaf::<E>(g), &state, &p) else {
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

/// Whether the subject stages its update (asked of the default Adam spec).
fn staged<O: BothDtypes>(make: &impl Factory<O>) -> std::result::Result<bool, String> {
    let spec = OptimizerSpec {
        algorithm: Algorithm::Adam,
        learning_rate: 1e-3,
        hyper: RadamHyper::default(),
    };
    let spec_radam = OptimizerSpec {
        algorithm: Algorithm::RAdam,
        ..spec
    };
    let o = match make(&spec) {
        Err(e) if is_unsupported(&e) => make(&spec_radam),
        r => r,
    }
    .map_err(|e| format!("make(default spec) failed: {e}"))?;
    Ok(Optimizer::<f32>::traces(&o).is_some())
}

/// A staged update traces once over every step of the case.
pub fn one_trace<E: Float, O: Optimizer<E>>(
    case: &OptCase,
    make: &impl Factory<O>,
) -> std::result::Result<(), String> {
    let Some(mut opt) = build(case, make)? else {
        return Ok(());
    };
    let mut p = leaf::<E>(&case.params);
    let Ok(mut state) = opt.init(&p) else {
        return Ok(());
    };
    for g in &case.grads {
        let Ok((u, next)) = opt.update(&leaf::<E>(g), &state, &p) else {
            return Ok(());
        };
        p = apply_updates(&p, &u).map_err(|e| e.to_string())?;
        state = next;
    }
    match opt.traces() {
        Some(n) if n > 1 => Err(format!(
            "{} steps traced {n} times (want 1): {}",
            case.grads.len(),
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

/// Specs with exactly one hyperparameter outside its legal range.
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
        0usize..4,
        bad,
    )
        .prop_map(|(algorithm, which, v)| {
            let mut spec = OptimizerSpec {
                algorithm,
                learning_rate: 1e-3,
                hyper: RadamHyper::default(),
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
                _ => {
                    spec.learning_rate = if v.is_finite() { f64::NAN } else { v };
                    "learning_rate"
                }
            };
            InvalidCase { spec, field }
        })
}

/// An invalid spec is refused by `make` or by `init`, in f32 and in f64.
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
    let accepted32 = Optimizer::<f32>::init(&mut o, &leaf::<f32>(&[0.5, -1.0])).is_ok();
    let accepted64 = Optimizer::<f64>::init(&mut o, &params64).is_ok();
    if accepted32 || accepted64 {
        return Err(format!(
            "{} = {:?} accepted by make and init ({})",
            case.field,
            field_value(case),
            if accepted32 { "f32" } else { "f64" }
        ));
    }
    Ok(())
}

fn field_value(case: &InvalidCase) -> f64 {
    match case.field {
        "b1" => case.spec.hyper.moments.b1,
        "b2" => case.spec.hyper.moments.b2,
        "eps" => case.spec.hyper.moments.eps,
        _ => case.spec.learning_rate,
    }
}

/// An [`Optimizer`] holding its state, stepping parameters in place (the memory law's driver).
struct Holding<O: Optimizer<f32>> {
    opt: O,
    state: O::State,
}

impl<O: Optimizer<f32>> Stepper for Holding<O> {
    fn step(&mut self, params: &mut Tree<f32>, grads: &Tree<f32>) -> Result<()> {
        let (u, s) = self.opt.update(grads, &self.state, params)?;
        *params = apply_updates(params, &u)?;
        self.state = s;
        Ok(())
    }
    fn traces(&self) -> Option<usize> {
        self.opt.traces()
    }
}

/// [`trace_once_memory_flat`] on f32 steps of the first of Adam, RAdam and Nesterov Adam
/// (default hyperparameters, learning rate 1e-3) the subject supports: no step ends with more
/// live bytes than the two warm-up steps left, two windows of `case.steps` steps do not grow
/// them, the second window allocates no more than the first, and a staged subject traces once.
/// For RAdam the allocation windows start after its last momentum step
/// ([`last_momentum_step`]: 5), so that both run the rectified branch. Hold
/// [`crate::probe::exclusive`].
pub fn live_bytes_flat<O: BothDtypes>(
    case: &MemCase,
    make: &impl Factory<O>,
) -> std::result::Result<(), String> {
    let adam = OptimizerSpec {
        algorithm: Algorithm::Adam,
        learning_rate: 1e-3,
        hyper: RadamHyper::default(),
    };
    let mut nesterov = adam;
    nesterov.hyper.moments.nesterov = true;
    let radam = OptimizerSpec {
        algorithm: Algorithm::RAdam,
        ..adam
    };
    let mut chosen = adam;
    let mut built = make(&adam);
    let mut switch = 0;
    for spec in [radam, nesterov] {
        match built {
            Err(e) if is_unsupported(&e) => {
                chosen = spec;
                built = make(&spec);
                switch = match spec.algorithm {
                    Algorithm::RAdam => last_momentum_step(&spec.hyper),
                    _ => 0,
                };
            }
            _ => break,
        }
    }
    built.map_err(|e| e.to_string())?;
    // each run of the law (a failing one is run again) gets a fresh optimizer of that spec
    let stepper = |p: &Tree<f32>| -> Result<Box<dyn Stepper>> {
        let mut opt = make(&chosen)?;
        let state = opt.init(p)?;
        Ok(Box::new(Holding { opt, state }))
    };
    trace_once_memory_flat(case, &stepper, switch).map(|_| ())
}
