//! The specialisation cache: the workspace's analogue of `jax.jit` tracing.
//!
//! A staged function receives *static* configuration (hashed into the cache key) and *dynamic*
//! data, of which only the [`Signature`] — shape, dtype and weak flag of every leaf — enters the
//! key. A miss builds a plan and counts one trace; a hit reuses the plan. A changed signature is a
//! retrace, exactly the failure class of optax #1171 and diffrax #574.

mod cache;
mod signature;

pub use cache::{static_key, KeyHasher, Stage, TraceEvent, TRACE_LOG_ENV};
pub use signature::{HasSignature, LeafChange, LeafSig, Signature, SignatureDiff};
