//! # harness
//!
//! Laws that judge implementations of the pieces behind five JAX-ecosystem failures — RAdam's
//! `lax.cond` leak (optax #580/#969), Muon's captured coefficients (optax #1186), the re-tracing
//! line search (optax #1171), the CNF step counter (diffrax #574) and the f32 stacked init
//! (equinox #673) — run as property tests, fuzz targets, golden comparisons against the real
//! optax/diffrax and reviewed snapshots.
//!
//! The implementations judged are *subjects*: the reference implementation of the
//! `harness-reference` crate (re-exported here as [`optim`], [`ode`], [`cnf`], [`stack`], ...),
//! each re-created upstream bug ([`mutants`]), and any user's code that implements a subject
//! trait. Every law is shown failing on the mutant that re-creates its bug.
//!
//! Memory laws read a counting allocator ([`probe::CountingAlloc`]) that a *binary* installs
//! ([`install_counting_allocator!`]); this library installs none, and a memory law run in a
//! binary without it is an error, never a silent pass.
//!
//! ```
//! // Every law registered with `harness check`, each with its family and default case count.
//! let laws = harness::laws::registry();
//! assert!(laws.iter().any(|l| l.name == "radam_where_matches_branch_bitwise"));
//! ```

#![warn(missing_docs)]

/// The reference implementation crate, whole (its [`Error`](reference::Error) is the error of
/// every reference call).
pub use harness_reference as reference;
pub use harness_reference::{backend, cnf, help, ode, optim, pool, stack, stage, tree};

pub mod bench;
pub mod budget;
// The command line reports on the mutants, so it is built with them.
#[cfg(feature = "mutants")]
pub mod cli;
pub mod error;
pub mod golden;
pub mod laws;
#[cfg(feature = "mutants")]
pub mod mutants;
pub mod probe;
pub mod report;
pub mod subject;
pub mod tolerance;
pub mod train;
pub mod upstream;

pub use error::{Error, Result, WorkerErrorKind};
