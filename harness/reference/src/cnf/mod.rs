//! # Continuous normalising flow (FFJORD), as the diffrax example, on dfdx
//!
//! A flow of `blocks` ODE blocks, each a ConcatSquash MLP vector field; densities by the
//! instantaneous change of variables `d log p(z(t))/dt = -tr(df/dz)`.
//!
//! One concern per file:
//! - `config.rs` — static settings ([`CnfConfig`]) and the flat parameter [`Layout`];
//! - `params.rs` — weights ([`CnfParams`]) and their initialisation;
//! - `random.rs` — counter-based draws (data, probes, weights);
//! - `field.rs` — the augmented field with hand-written tangents (plain f32/f64);
//! - `tanh.rs` — a call-free, vectorisable `tanh` (f64, and f32) for the training kernels;
//! - `adjoint.rs` — the field's vector–Jacobian product written by hand (what training uses;
//!   f32/f64 like the field);
//! - `taped.rs` — the same field on dfdx's tape ([`TrainBlock`], a [`crate::ode::grad::DiffField`]);
//! - `flow.rs` — log-likelihood, sampling, the loss and its gradient;
//! - `data.rs` — built-in 2-D data sets;
//! - `train.rs` — AdamW training with the step staged through the specialisation cache, in f32
//!   or f64 (the trainer's type parameter);

pub mod adjoint;
pub mod config;
pub mod data;
pub mod field;
pub mod flow;
pub mod params;
pub mod random;
pub mod tanh;
pub mod taped;
pub mod train;

pub use config::{CnfConfig, Layout, Probe, TraceEstimator};
pub use params::CnfParams;
pub use taped::{ScratchPool, TrainBlock};
