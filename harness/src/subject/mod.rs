//! Putting code under the laws: the traits an implementation under test (a *subject*) provides,
//! one per law family, and the suites that run every law of a family on a subject.
//!
//! The reference implementation is one subject, each re-created upstream bug
//! ([`crate::mutants`]) is another, and so is a user's own code, a Rust crate written elsewhere
//! (through an adapter) or the real JAX library observed through the upstream worker. The laws
//! are written once, against these traits.
//!
//! | family | trait | suite |
//! |---|---|---|
//! | Adam-family optimizers | [`Optimizer`] (init/update over named f32/f64 tensors; state signature; trace count) | [`optimizer::check`] |
//! | line search | [`LineSearchSubject`] (init and the staged update of `sgd + backtracking`) | `laws::linesearch::trace_once` |
//! | a backtracking line search, one search a call | [`linesearch::BacktrackingSearch`] (a black box: start, direction, `alpha_0`, `c`, `rho`, trials; answers the point) | [`linesearch::check`] |
//! | ODE solvers | [`OdeSolver`] (a black-box solver reporting its steps) or a tableau ([`crate::ode::Tableau`]) through the reference stepper | [`ode::check`] |
//! | gradients through a solve | [`GradientSubject`] (full tape and checkpointed) | `laws::ode::*_with` |
//! | a whole solve, observed step by step | [`SolveSubject`] (the reference's `solve_observed` interface: any tableau, controller, face, f32/f64) | `laws::ode::{step_control, round_trip, bad_input_is_typed_error, solve_faces_agree}_with` |
//! | stacked initialisation | [`InitSubject`] (builds N stacked layers; peaks measured by the probe) | `laws::stack::peaks_within_bounds` |
//! | CNF training | [`TrainSubject`] (steps a trainer; trace count) | `laws::cnf::train_trace_once_with` |
//!
//! A runnable example, a user-written Adam put under the optimizer suite, is
//! `harness/examples/custom_optimizer.rs`:
//! `cargo run --release -p harness --example custom_optimizer -- good` (every law passes) or
//! `-- buggy` (a step counter hashed into the staging key; `optimizer_one_trace` fails and
//! prints the counterexample). For an ODE solver, `harness/examples/custom_solver.rs` puts a
//! user-written Bogacki–Shampine 3(2) under [`ode::check`]: `-- good` passes every law, and
//! `-- buggy-node`, `-- buggy-budget` and `-- buggy-tol` each fail one.

pub mod linesearch;
pub mod ode;
pub mod optimizer;

/// The error and result types the subject traits return: the reference crate's
/// ([`crate::reference::Error`]), re-exported here beside the traits. `harness::Error` is another
/// type, the harness's own (golden files, workers, reports); a subject never returns it.
pub use crate::reference::{Error, Result};

pub use crate::laws::cnf::TrainSubject;
pub use crate::laws::linesearch::TraceSubject as LineSearchSubject;
pub use crate::laws::ode::{GradProblem, GradientSubject, SolveSubject};
pub use crate::laws::stack::InitSubject;
pub use ode::OdeSolver;
pub use optimizer::{Optimizer, Staged};

/// A suite law over `strategy`: proptest's runner, with the seed that replays it in the message.
pub(crate) fn suite_property<S>(
    law: &str,
    cases: u32,
    seed: u64,
    strategy: S,
    property: impl Fn(&S::Value) -> Result<(), String>,
) -> Result<(), String>
where
    S: proptest::strategy::Strategy,
    S::Value: std::fmt::Debug,
{
    let replay = format!("the suite again with SuiteOptions {{ seed: {seed}, .. }} ({law})");
    crate::laws::check_property_replayed_by(&replay, cases, seed, strategy, property)
}

/// How a call made by [`call_within`] ended.
pub(crate) enum Ended<T> {
    /// The call returned (its answer or its error).
    Returned(crate::reference::Result<T>),
    /// The call panicked (the payload's message).
    Panicked(String),
    /// No answer within the limit (the thread is left behind).
    TimedOut(std::time::Duration),
    /// The thread could not be started.
    NotStarted(String),
}

/// Run `f` on a thread named `thread`, waiting at most `limit`: a subject that panics or never
/// returns is a verdict, not a crash or a hang of the harness. The panic hook stays silent on
/// that thread ([`crate::laws::quiet_panics`]): the message is the verdict's.
pub(crate) fn call_within<T: Send + 'static>(
    thread: &str,
    limit: std::time::Duration,
    f: impl FnOnce() -> crate::reference::Result<T> + Send + 'static,
) -> Ended<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || {
            let r = crate::laws::quiet_panics(|| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            });
            let _ = tx.send(match r {
                Ok(answer) => Ended::Returned(answer),
                Err(p) => Ended::Panicked(panic_message(&*p)),
            });
        });
    if let Err(e) = spawned {
        return Ended::NotStarted(format!("could not start the {thread} thread: {e}"));
    }
    rx.recv_timeout(limit).unwrap_or(Ended::TimedOut(limit))
}

/// The message of a panic payload.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}
