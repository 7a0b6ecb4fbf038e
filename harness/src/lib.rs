//! # harness
//!
//! A dfdx-based reference implementation of the pieces behind five JAX-ecosystem failures —
//! RAdam's `lax.cond` leak (optax #580/#969), Muon's captured coefficients (optax #1186), the
//! re-tracing line search (optax #1171), the CNF step counter (diffrax #574) and the f32 stacked
//! init (equinox #673) — and the verification harness that proves, with laws shown to fail on
//! re-creations of those bugs, that the reference has none of them.
//!
//! Reference modules (`optim`, `ode`, `stack`, `stage`, `tree`, `backend`) never import the verification modules
//! (`laws`, `probe`, `golden`, `mutants`, `report`).

pub mod backend;
pub mod bench;
pub mod cnf;
pub mod error;
pub mod golden;
pub mod laws;
#[cfg(feature = "mutants")]
pub mod mutants;
pub mod ode;
pub mod optim;
pub mod probe;
pub mod report;
pub mod stack;
pub mod stage;
pub mod tolerance;
pub mod tree;

pub use error::{Error, Result};

/// Every binary linking this crate (the CLI, tests, fuzz targets) counts its allocations.
#[global_allocator]
static ALLOC: probe::CountingAlloc = probe::CountingAlloc;
