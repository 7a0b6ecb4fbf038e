//! The upstream bridge: the laws applied to the real JAX libraries (optax, diffrax, equinox),
//! observed by a Python worker per pinned profile (`harness/upstream/worker.py`, protocol v1 in
//! `harness/upstream/PROTOCOL.md`).
//!
//! | module | concern |
//! |---|---|
//! | [`profile`] | where the worker, the requirement files and the venvs are; the profiles |
//! | [`setup`] | `harness upstream setup`: one venv per profile, with pip |
//! | [`worker`] | the client of one long-lived worker process: requests, time limits, typed errors |
//! | [`observe`] | the worker's results as typed observations (state signatures as the reference's [`crate::stage::Signature`]) |
//! | [`check`] | `harness upstream check`: the subjects, the laws on the observations, the expected verdicts |
//! | [`against`] | `harness bench --against`: the real library timed on each figure's work |
//! | [`diff`] | `harness upstream diff`: cases from the laws' strategies through the real library and the reference, mismatches shrunk into golden-v1 files |
//!
//! Nothing here runs in `cargo test` with Python: the tests drive the client with stand-in
//! workers written in `/bin/sh` and the laws with hand-made observations.

pub mod against;
pub mod check;
pub mod diff;
pub mod observe;
pub mod profile;
pub mod setup;
pub mod worker;

pub use profile::{Locations, Profile, BUILTIN_PROFILES};
