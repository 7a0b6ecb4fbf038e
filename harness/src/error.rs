//! The harness's typed error: the reference implementation's errors, plus what can go wrong in
//! reading golden cases and in running the harness itself.

/// Everything that can go wrong in the harness; every variant names the input that was wrong.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// An error of the reference implementation (bad hyperparameters, shapes, sizes, ...).
    #[error(transparent)]
    Reference(#[from] harness_reference::Error),
    /// A golden-v1 file could not be read or does not follow the format.
    #[error("golden case {file}: {msg}")]
    Golden {
        /// The file (or path) concerned, as given.
        file: String,
        /// What is wrong with it.
        msg: String,
    },
    /// A feature of the format or CLI that this build does not implement yet.
    #[error("not implemented: {0}")]
    NotImplemented(String),
    /// A memory law ran in a binary that did not install the counting allocator.
    #[error("memory is not measured: install harness::probe::CountingAlloc as the global allocator (harness::install_counting_allocator!())")]
    ProbeNotInstalled,
    /// The worker process of an upstream profile failed ([`crate::upstream::worker`]): it could
    /// not be started, died, hung, or answered something that is not a protocol-v1 reply.
    #[error("upstream worker {profile}: {kind}: {detail}")]
    Worker {
        /// The profile the worker runs (`current`, `optax-0.2.2`, ...).
        profile: String,
        /// What went wrong.
        kind: WorkerErrorKind,
        /// The specifics: the path, the exit status and stderr tail, the offending line, ...
        detail: String,
    },
    /// Creating the virtual environment of an upstream profile failed
    /// ([`crate::upstream::setup`]).
    #[error("upstream setup {profile}: {detail}")]
    Setup {
        /// The profile being set up.
        profile: String,
        /// One line naming the missing interpreter, module or package.
        detail: String,
    },
}

/// The ways an upstream worker can fail (the `kind` of [`Error::Worker`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkerErrorKind {
    /// The interpreter to run the worker does not exist (the profile is not set up).
    InterpreterMissing,
    /// The process could not be started.
    SpawnFailed,
    /// The process exited (or closed its stdout) before replying.
    Died,
    /// No reply within the request's time limit; the process was killed.
    TimedOut,
    /// A line on stdout that is not a JSON reply to the request sent.
    Garbage,
    /// A reply of another protocol version than the one this build speaks.
    ProtocolMismatch,
    /// A well-formed success reply whose result lacks what the observation needs.
    BadResult,
    /// The worker's processes held more resident memory than the memory budget; they were
    /// killed.
    OverMemory,
}

impl std::fmt::Display for WorkerErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WorkerErrorKind::InterpreterMissing => "interpreter missing",
            WorkerErrorKind::SpawnFailed => "could not start",
            WorkerErrorKind::Died => "died",
            WorkerErrorKind::TimedOut => "timed out",
            WorkerErrorKind::Garbage => "garbage reply",
            WorkerErrorKind::ProtocolMismatch => "protocol version mismatch",
            WorkerErrorKind::BadResult => "unexpected result",
            WorkerErrorKind::OverMemory => "over the memory budget",
        })
    }
}

/// Crate-wide result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
