//! Every property, written once, used by the tests, the fuzz targets and `harness check`.
//!
//! A law is a public function from an input (and, where a mutant must be able to stand in, a
//! *subject*: the implementation under test) to `Result<(), String>`; the error is a readable
//! statement of what broke. [`registry`] pairs each law with a proptest strategy, and [`run`]
//! drives it through proptest's runner, shrinking failures to a small counterexample.
//!
//! Configuration: cases per law default to each law's own count; `--cases` or the `PROPTEST_CASES`
//! environment variable overrides it (nightly runs raise it). The seed defaults to a fixed value
//! so that CI is deterministic; `--seed` or `HARNESS_SEED` changes it.

/// The one dtype dispatch of the laws: call a generic function with the element type a runtime
/// [`DType`](crate::backend::DType) names. `float` covers f16, f32 and f64 (any
/// [`Float`](crate::backend::Float)); `real` covers f32 and f64 (the arithmetic types). A dtype
/// outside the list evaluates the `else` expression — it is never silently run as another type.
///
/// Further generic arguments after the element type go in brackets: `f[O](args)` calls
/// `f::<E, O>(args)`.
///
/// ```ignore
/// by_dtype!(float case.dtype, check_e(case), else unsupported_dtype(case.dtype))
/// by_dtype!(real c.dtype, one_trace[O](c, make), else unsupported_dtype(c.dtype))
/// ```
macro_rules! by_dtype {
    (float $dtype:expr, $f:ident $([$($g:ty),*])? ( $($a:expr),* ), else $other:expr) => {
        match $dtype {
            $crate::backend::DType::F16 => $f::<half::f16 $($(, $g)*)?>($($a),*),
            $crate::backend::DType::F32 => $f::<f32 $($(, $g)*)?>($($a),*),
            $crate::backend::DType::F64 => $f::<f64 $($(, $g)*)?>($($a),*),
            $crate::backend::DType::I32 => $other,
        }
    };
    (real $dtype:expr, $f:ident $([$($g:ty),*])? ( $($a:expr),* ), else $other:expr) => {
        match $dtype {
            $crate::backend::DType::F32 => $f::<f32 $($(, $g)*)?>($($a),*),
            $crate::backend::DType::F64 => $f::<f64 $($(, $g)*)?>($($a),*),
            $crate::backend::DType::F16 | $crate::backend::DType::I32 => $other,
        }
    };
}
pub(crate) use by_dtype;

/// The `else` of [`by_dtype!`] in a law: a case whose dtype the law does not run in.
pub(crate) fn unsupported_dtype(dtype: crate::backend::DType) -> Result<(), String> {
    Err(format!(
        "the case's dtype {dtype} is not one this law runs in"
    ))
}

/// `got` and `want` element by element, or an error naming `what` when their lengths differ: a
/// subject that answers with too few values (or none) must fail a comparison, not pass it by
/// leaving nothing to compare.
///
/// ```
/// use harness::laws::paired;
/// let pairs: Vec<_> = paired("y", &[1.0, 2.0], &[1.0, 2.5]).unwrap().collect();
/// assert_eq!(pairs.len(), 2);
/// let short = paired("y", &[] as &[f64], &[1.0]).err().unwrap();
/// assert_eq!(short, "y: 0 values, want 1");
/// ```
pub fn paired<'a, A, B>(
    what: &str,
    got: &'a [A],
    want: &'a [B],
) -> Result<std::iter::Zip<std::slice::Iter<'a, A>, std::slice::Iter<'a, B>>, String> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} values, want {}", got.len(), want.len()));
    }
    Ok(got.iter().zip(want))
}

/// The largest `|got_i - want_i|`, NaN when any difference is NaN (where `f64::max` would drop
/// it and report a NaN answer as exact), or an error naming `what` when the lengths differ.
///
/// ```
/// use harness::laws::max_abs_difference;
/// assert_eq!(max_abs_difference("y", &[1.0, 2.0], &[1.5, 2.0]), Ok(0.5));
/// assert!(max_abs_difference("y", &[f64::NAN, 2.0], &[1.0, 2.0]).unwrap().is_nan());
/// assert!(max_abs_difference("y", &[1.0, f64::NAN], &[1.0, 2.0]).unwrap().is_nan());
/// assert!(max_abs_difference("y", &[], &[1.0]).is_err());
/// ```
pub fn max_abs_difference(what: &str, got: &[f64], want: &[f64]) -> Result<f64, String> {
    Ok(paired(what, got, want)?
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, |m: f64, d| {
            if m.is_nan() || d.is_nan() {
                f64::NAN
            } else {
                m.max(d)
            }
        }))
}

/// The first element whose bits differ between `got` and `want`, any NaN equal to any NaN:
/// IEEE 754 leaves the sign and payload of a NaN result unspecified when both operands are NaN
/// (x86 keeps the first operand's), so `a * b` and `b * a` may differ there and only there.
pub fn first_bit_difference<A: crate::backend::Float>(got: &[A], want: &[A]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} elements, want {}", got.len(), want.len()));
    }
    got.iter()
        .zip(want)
        .position(|(g, w)| {
            g.bits() != w.bits()
                && !(crate::backend::Float::is_nan(*g) && crate::backend::Float::is_nan(*w))
        })
        .map(|i| format!("[{i}] = {:?}, want {:?}", got[i], want[i]))
}

pub mod cnf;
pub mod fuzz;
pub mod linesearch;
pub mod muon;
pub mod ode;
pub mod persist;
pub mod radam;
pub mod stack;
pub mod strategies;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngAlgorithm, TestError, TestRng, TestRunner};
use std::fmt::Debug;
use std::time::Instant;

/// The four law families (the `family` field of `harness check`, `docs/CLI.md`), plus plain
/// numerics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// RAdam's `lax.cond`-versus-`jnp.where` selection (optax #580/#969).
    CondVsWhere,
    /// Optimizer states whose signature must stay fixed across updates (Muon's coefficients,
    /// optax #1186; the Adam/RAdam moment states).
    FixedStateShape,
    /// Staged steps that must trace once and keep memory flat (line search, optax #1171; CNF
    /// training, diffrax #574; the RAdam step).
    TraceCount,
    /// Peak memory of the stacked low-precision initialisation (equinox #673).
    Fp16InitPeaks,
    /// Numerical accuracy laws outside the four families (solvers, gradients, densities).
    Numerics,
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Family::CondVsWhere => "cond-vs-where",
            Family::FixedStateShape => "fixed-state-shape",
            Family::TraceCount => "trace-count",
            Family::Fp16InitPeaks => "fp16-init-peaks",
            Family::Numerics => "numerics",
        })
    }
}

/// How to run a law.
#[derive(Debug, Clone, Copy)]
pub struct RunConfig {
    /// Cases per law, or `None` for each law's own default.
    pub cases: Option<u32>,
    /// Seed of every law's case generator.
    pub seed: u64,
}

/// Default seed: fixed, so CI runs are reproducible.
pub const DEFAULT_SEED: u64 = 0x5eed_1a75;

impl RunConfig {
    /// From explicit values, falling back to the `PROPTEST_CASES` / `HARNESS_SEED` environment
    /// variables, then to each law's own case count and [`DEFAULT_SEED`]. Zero cases, or a value
    /// that is not a number in range (flag or variable), is an error naming it: a law run with
    /// no case would pass without checking anything.
    pub fn new(cases: Option<u32>, seed: Option<u64>) -> Result<Self, String> {
        Self::from_sources(cases, seed, |k| std::env::var(k).ok())
    }

    /// [`RunConfig::new`] reading variables through `var` (tests pass their own).
    pub fn from_sources(
        cases: Option<u32>,
        seed: Option<u64>,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let cases = match cases {
            Some(c) => Some(c),
            None => match var("PROPTEST_CASES") {
                None => None,
                Some(v) => Some(v.trim().parse::<u32>().map_err(|_| {
                    format!(
                        "PROPTEST_CASES={v:?} is not a case count (1 to {})",
                        u32::MAX
                    )
                })?),
            },
        };
        if cases == Some(0) {
            return Err(
                "0 cases would check nothing: give at least 1 (--cases or PROPTEST_CASES)".into(),
            );
        }
        let seed = match seed {
            Some(s) => s,
            None => match var("HARNESS_SEED") {
                None => DEFAULT_SEED,
                Some(v) => v.trim().parse::<u64>().map_err(|_| {
                    format!(
                        "HARNESS_SEED={v:?} is not a seed (an integer 0 to {})",
                        u64::MAX
                    )
                })?,
            },
        };
        Ok(Self { cases, seed })
    }
}

/// The result of running one law (the `check` JSON row of `docs/CLI.md`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct LawReport {
    /// The law's name.
    pub name: String,
    /// Its family.
    pub family: Family,
    /// Cases run.
    pub cases: u32,
    /// Whether every case held.
    pub passed: bool,
    /// Wall time of the run, in seconds.
    pub seconds: f64,
    /// The shrunk failing case and the failure message, when it failed; for a law of a subject
    /// suite that passed, its evidence (how many cases reached the subject), where it has one.
    pub counterexample: Option<String>,
}

/// A registered law.
pub struct Law {
    /// Unique name (`harness check --law` matches on it).
    pub name: &'static str,
    /// Its family.
    pub family: Family,
    /// One line: what must hold.
    pub summary: &'static str,
    /// Cases run when the configuration does not say.
    pub default_cases: u32,
    /// Measures process-wide memory: run serialised (the memory test binary, or the CLI).
    pub measures_memory: bool,
    /// Runs `cases` cases; `Err` is the shrunk counterexample.
    pub run: fn(cases: u32, seed: u64) -> Result<(), String>,
}

/// Every law of the workspace.
pub fn registry() -> Vec<Law> {
    let mut v = Vec::new();
    v.extend(radam::laws());
    v.extend(ode::laws());
    v.extend(linesearch::laws());
    v.extend(muon::laws());
    v.extend(stack::laws());
    v.extend(cnf::laws());
    v
}

/// Run one law with `cfg`. A failure is recorded for replay when the environment asks
/// ([`persist::FAILURE_DIR_ENV`]).
pub fn run(law: &Law, cfg: RunConfig) -> LawReport {
    let cases = cfg.cases.unwrap_or(law.default_cases);
    let report = timed(law.name, law.family, cases, law.measures_memory, || {
        (law.run)(cases, cfg.seed)
    });
    persist::record_if_asked(&report, cfg);
    report
}

/// Run `law` (`cases` cases) and time it into a [`LawReport`]. A law that measures memory runs
/// holding [`crate::probe::exclusive`], and fails without running when the binary did not
/// install the counting allocator.
pub fn timed(
    name: &str,
    family: Family,
    cases: u32,
    measures_memory: bool,
    law: impl FnOnce() -> Result<(), String>,
) -> LawReport {
    let start = Instant::now();
    let outcome = if measures_memory {
        let _g = crate::probe::exclusive();
        crate::probe::require_installed()
            .map_err(|e| e.to_string())
            .and_then(|()| law())
    } else {
        law()
    };
    LawReport {
        name: name.to_string(),
        family,
        cases,
        passed: outcome.is_ok(),
        seconds: start.elapsed().as_secs_f64(),
        counterexample: outcome.err(),
    }
}

/// Run every law whose name contains `pattern`.
pub fn run_all(
    pattern: Option<&str>,
    cases: Option<u32>,
    seed: Option<u64>,
) -> Result<Vec<LawReport>, String> {
    let cfg = RunConfig::new(cases, seed)?;
    Ok(registry()
        .iter()
        .filter(|l| pattern.is_none_or(|p| l.name.contains(p)))
        .map(|l| run(l, cfg))
        .collect())
}

/// Look a law up by exact name.
pub fn find(name: &str) -> Option<Law> {
    registry().into_iter().find(|l| l.name == name)
}

/// Drive `property` over `strategy` with proptest's runner; on failure return the reason and the
/// shrunk input, with the command that replays it (`harness check --law NAME --seed S`).
pub fn check_property<S>(
    name: &str,
    cases: u32,
    seed: u64,
    strategy: S,
    property: impl Fn(&S::Value) -> Result<(), String>,
) -> Result<(), String>
where
    S: Strategy,
    S::Value: Debug,
{
    let replay = format!("harness check --law {name} --seed {seed}");
    check_property_replayed_by(&replay, cases, seed, strategy, property)
}

/// Whether `message`, the `Err` of [`check_property`], is a failure of the property with its
/// shrunk counterexample, rather than a run that was aborted (every case rejected) or any other
/// error: only the first shows a law catching a bug.
///
/// ```
/// use harness::laws::{check_property, is_property_failure, DEFAULT_SEED};
/// let failed = check_property("below_ten", 64, DEFAULT_SEED, 0u32..100, |&x| {
///     if x < 10 { Ok(()) } else { Err(format!("{x} >= 10")) }
/// });
/// assert!(is_property_failure(&failed.unwrap_err()));
/// assert!(!is_property_failure("aborted: Too many local rejects"));
/// ```
pub fn is_property_failure(message: &str) -> bool {
    message.contains(COUNTEREXAMPLE_LINE)
}

/// The line of a [`check_property`] failure that holds the shrunk counterexample.
const COUNTEREXAMPLE_LINE: &str = "\nminimal input: ";

/// [`check_property`] for a law run outside `harness check` (a suite on a user's subject):
/// `replay` says how to run it again.
pub fn check_property_replayed_by<S>(
    replay: &str,
    cases: u32,
    seed: u64,
    strategy: S,
    property: impl Fn(&S::Value) -> Result<(), String>,
) -> Result<(), String>
where
    S: Strategy,
    S::Value: Debug,
{
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2048,
        ..Config::default()
    };
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
    let mut runner = TestRunner::new_with_rng(config, rng);
    // a subject that panics does so again at every shrinking step: the runner turns each panic
    // into a failing case with its message, so the default hook's report of it is noise
    let outcome = quiet_panics(|| {
        runner.run(&strategy, |v| {
            property(&v).map_err(proptest::test_runner::TestCaseError::fail)
        })
    });
    match outcome {
        Ok(()) => Ok(()),
        Err(TestError::Fail(reason, value)) => Err(format!(
            "{reason}{COUNTEREXAMPLE_LINE}{value:?}\nreplay: {replay}"
        )),
        Err(TestError::Abort(reason)) => Err(format!("aborted: {reason}")),
    }
}

thread_local! {
    /// Whether [`quiet_panics`] is running on this thread.
    static QUIET_PANICS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f` with the panic hook silent on this thread: a panic inside `f` unwinds as usual (and is
/// caught or propagated as usual) but prints nothing, for callers that catch panics and report
/// the message themselves (the property runner; the ODE suite's solver threads). On every other
/// thread, and after `f`, the hook that was installed before (the default, or the program's own)
/// runs as before.
///
/// ```
/// let caught = harness::laws::quiet_panics(|| std::panic::catch_unwind(|| panic!("boom")));
/// assert!(caught.is_err()); // and nothing was printed
/// ```
pub fn quiet_panics<R>(f: impl FnOnce() -> R) -> R {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET_PANICS.with(std::cell::Cell::get) {
                previous(info)
            }
        }));
    });
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            QUIET_PANICS.with(|q| q.set(self.0));
        }
    }
    let _restore = Restore(QUIET_PANICS.with(|q| q.replace(true)));
    f()
}

/// `Ok` when the two trees are bit-identical (same names, shapes and element bits; any two NaNs
/// count as equal, because IEEE 754 leaves the payload and sign of a propagated NaN to the
/// hardware and to operand order); otherwise the first element that differs.
pub fn bitwise_equal<A: crate::backend::Float>(
    what: &str,
    a: &crate::tree::Tree<A>,
    b: &crate::tree::Tree<A>,
) -> Result<(), String> {
    a.check_like(b, what).map_err(|e| e.to_string())?;
    for ((k, x), y) in a.iter().zip(b.0.values()) {
        for (i, (p, q)) in x.data().iter().zip(y.data()).enumerate() {
            if p.bits() != q.bits() && !(p.is_nan() && q.is_nan()) {
                return Err(format!("{what}.{k}[{i}]: {p:?} != {q:?} (bits differ)"));
            }
        }
    }
    Ok(())
}
