//! # harness-reference
//!
//! Reference implementations, built on [dfdx](https://docs.rs/dfdx/0.13) tensors, of the pieces
//! behind five JAX-ecosystem failures:
//!
//! - [`optim`]: optax-shaped gradient transformations — Adam, RAdam (branch and branch-free
//!   selection), Muon with its Newton–Schulz iteration, AdamW, and the backtracking line search —
//!   each with a composed dfdx form and, where speed matters, a fused form over planned buffers;
//! - [`ode`]: explicit Runge–Kutta solvers whose tableaus are data, constant and PID step-size
//!   control reproducing diffrax, and gradients through a solve (full tape or binomial
//!   checkpointing);
//! - [`cnf`]: the continuous normalising flow of diffrax's example (log-likelihood, sampling,
//!   exact and Hutchinson traces, a hand-written adjoint) and its staged AdamW training;
//! - [`stack`]: stacked low-precision layer initialisation with five strategies and their
//!   analytic memory bounds;
//! - [`stage`]: the specialisation cache (the analogue of `jax.jit`'s trace cache), and
//!   [`tree`], [`backend`], [`pool`], [`help`]: the tensor trees, the dfdx and GEMM plumbing,
//!   and the threads the kernels share (a fork-join pool, and helpers for microsecond jobs).
//!
//! Every kernel has a dfdx face — its formulas as dfdx tensor operations, the form to read — and
//! most a fast form that runs by default; [`Face`] selects one where both can run (the ODE solve,
//! the line search, Muon's Newton–Schulz, the CNF log-density), and the stacked init's face is
//! [`stack::dfdx_face`].
//!
//! This crate knows nothing of verification: the laws that judge it (and any other
//! implementation of the same algorithms) live in the `harness` crate.
//!
//! # References
//! - The formulas each module implements are written out in the repository's
//!   `docs/ALGORITHMS.md`.
//!
//! ```
//! use harness_reference::optim::{adam, AdamHyper, Transform};
//! use harness_reference::tree::{apply_updates, Tree};
//! use harness_reference::backend::Array;
//! let opt = adam(1e-3, AdamHyper::default())?;
//! let params = Tree::from_leaves([("w".to_string(), Array::vector(vec![1.0f32, -2.0]))])?;
//! let state = opt.init(&params)?;
//! let (updates, _state) = opt.update(&params, &state, &params)?;
//! let params = apply_updates(&params, &updates)?;
//! assert!(params.get("w").unwrap().data()[0] < 1.0);
//! # Ok::<(), harness_reference::Error>(())
//! ```

#![warn(missing_docs)]

pub mod backend;
pub mod cnf;
pub mod error;
pub mod face;
pub mod help;
pub mod ode;
pub mod optim;
pub mod pool;
pub mod stack;
pub mod stage;
pub mod tree;

pub use error::{Error, Result};
pub use face::Face;
