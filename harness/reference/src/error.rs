//! One typed error for the whole crate: every bad input names what was wrong.

use crate::stage::SignatureDiff;

/// Everything that can go wrong in the reference implementation; every variant names the input
/// that was wrong.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// A hyperparameter outside its legal range; the message names the parameter and the range.
    #[error("invalid hyperparameter `{name}` = {value}: {expected}")]
    InvalidHyper {
        /// The parameter's name as the constructor spells it.
        name: &'static str,
        /// The rejected value, formatted.
        value: String,
        /// The legal range, in words.
        expected: String,
    },
    /// Two trees or tensors that must agree in shape do not.
    #[error("shape mismatch at `{leaf}`: expected {expected:?}, got {got:?}")]
    ShapeMismatch {
        /// The leaf (tree path) or tensor at which the shapes differ.
        leaf: String,
        /// The shape required there.
        expected: Vec<usize>,
        /// The shape found.
        got: Vec<usize>,
    },
    /// Two trees that must have the same leaf names do not.
    #[error("tree structure mismatch: {0}")]
    Structure(String),
    /// Data length does not equal the product of the shape.
    #[error("tensor data has {got} elements but shape {shape:?} needs {expected}")]
    DataLength {
        /// The shape given.
        shape: Vec<usize>,
        /// Elements the shape needs (its product).
        expected: usize,
        /// Elements the data has.
        got: usize,
    },
    /// A byte or element count overflowed `usize`, or a counter its integer type.
    #[error("size overflow: {0}")]
    Overflow(String),
    /// A computed value is not finite (it overflowed, or became NaN): a result the reference
    /// refuses to pass on, naming where it appeared.
    #[error("not finite: {0}")]
    NonFinite(String),
    /// The specialisation cache traced more often than allowed.
    #[error("`{name}` traced {traces} times, more than max_traces = {max}; {reason}")]
    TooManyTraces {
        /// The staged function's name.
        name: String,
        /// Traces made so far, including the one refused.
        traces: usize,
        /// The configured `max_traces`.
        max: usize,
        /// Why the refused trace was needed.
        reason: TraceReason,
    },
    /// An error raised by code outside this crate behind one of its traits (a user's
    /// transform, vector field or objective), in its own words.
    #[error("{0}")]
    External(String),
    /// A configuration (an algorithm, a float type, an option) that an implementation behind one
    /// of this crate's traits does not provide, naming it. A caller that tries several
    /// configurations skips this one, where it would report any other error.
    #[error("unsupported by this implementation: {0}")]
    Unsupported(String),
    /// An ODE solve used `max_steps` steps (accepted + rejected) without reaching its end time.
    #[error("ODE solve reached max_steps = {max_steps} at t = {t} before the end time {t_end}")]
    MaxStepsExceeded {
        /// The step budget that ran out.
        max_steps: usize,
        /// The time reached (the start of the step that would have exceeded the budget).
        t: f64,
        /// The end time the solve was heading for.
        t_end: f64,
    },
}

/// Why a specialisation was traced again: the cache-miss explanation (`jax_explain_cache_misses`).
#[derive(Debug, Clone, PartialEq)]
pub enum TraceReason {
    /// Nothing had been traced under this name before.
    FirstTrace,
    /// The static configuration (hashed into the key) differs from every earlier trace.
    NewStatic {
        /// The hash of the new static configuration.
        key: u64,
    },
    /// Same static configuration, but the dynamic signature changed relative to the last trace.
    NewSignature(SignatureDiff),
}

impl std::fmt::Display for TraceReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TraceReason::FirstTrace => write!(f, "first trace"),
            TraceReason::NewStatic { key } => {
                write!(f, "new static configuration (key {key:#018x})")
            }
            TraceReason::NewSignature(d) => write!(f, "signature changed: {d}"),
        }
    }
}

/// Crate-wide result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Helper for validated constructors: `ensure(cond, "b1", b1, "must be in [0, 1)")`.
pub fn ensure(
    ok: bool,
    name: &'static str,
    value: impl std::fmt::Display,
    expected: &str,
) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidHyper {
            name,
            value: value.to_string(),
            expected: expected.to_string(),
        })
    }
}
