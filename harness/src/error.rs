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
    Golden { file: String, msg: String },
    /// A feature of the format or CLI that this build does not implement yet.
    #[error("not implemented: {0}")]
    NotImplemented(String),
    /// A memory law ran in a binary that did not install the counting allocator.
    #[error("memory is not measured: install harness::probe::CountingAlloc as the global allocator (harness::install_counting_allocator!())")]
    ProbeNotInstalled,
}

/// Crate-wide result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
