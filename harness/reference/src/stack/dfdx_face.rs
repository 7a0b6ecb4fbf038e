//! The dfdx face of stacked initialisation: the model built the way dfdx code would write it —
//! each layer's tensor sampled on the device in f32, scaled by its limit, converted to the
//! model's dtype with `to_dtype`, and the layers stacked with `stack` — with no regard for
//! memory. The fast strategies of [`super::init`] must give the same bits (law
//! `stack_faces_agree`).
//!
//! ```text
//! W[l] = to_dtype( U(key(seed, l, t)) * 1/sqrt(fan_in(t)) ),   U uniform in [-1, 1)
//! stacked[t] = stack([W[0], ..., W[N-1]])
//! ```
//!
//! The sampler is the workspace's counter-based generator ([`super::rng::uniform_at`]): element
//! `i` of a stream is a hash of `(key, i)`, so the same values come out whatever builds them.
//!
//! # References
//! - equinox #673 (why the fast strategies exist: this form holds every layer in f32 at once);
//!   `docs/ALGORITHMS.md` §5.
//!
//! ```
//! use harness_reference::backend::DType;
//! use harness_reference::stack::{build, dfdx_face, StackConfig, Strategy};
//! let cfg = StackConfig::new(3, 4, 6, DType::F16)?;
//! let face = dfdx_face::build::<half::f16>(&cfg, 7)?;
//! let fast = build::<half::f16>(&cfg, 7, Strategy::ChunkedDirect, &mut ())?.into_stacked()?;
//! assert_eq!(face.first_difference(&fast), None);
//! # Ok::<(), harness_reference::Error>(())
//! ```

use super::config::{StackConfig, TensorId};
use super::model::Stacked;
use super::rng::{limit, stream_key, uniform_at};
use crate::backend::{device, Array, DfdxFromF32, Float, Ten};
use crate::Result;
use dfdx::prelude::Cpu;

/// Layer `l`'s tensor `t` in f32: `U(key) * limit(fan_in(t))`, sampled on `dev`.
pub fn layer_values(dev: &Cpu, cfg: &StackConfig, seed: u64, l: usize, t: TensorId) -> Ten<f32> {
    let key = stream_key(seed, l as u64, t as u64);
    let draws = (0..cfg.layer_len(t) as u64)
        .map(|i| uniform_at(key, i))
        .collect();
    Ten::from_vec(dev, draws) * limit(cfg.fan_in(t))
}

/// `stack([to_dtype::<E>(x) for x in layers])`, row-major.
pub fn stack_cast<E: DfdxFromF32>(layers: Vec<Ten<f32>>) -> Vec<E> {
    E::stack_cast(layers.into_iter().map(|t| t.0).collect())
}

/// The model of `cfg` (whose dtype must be `E`'s) built by the dfdx face.
pub fn build<E: Float + DfdxFromF32>(cfg: &StackConfig, seed: u64) -> Result<Stacked<E>> {
    super::init::ensure_element_type::<E>(cfg)?;
    let dev = device();
    let [a, b, c, d] = TensorId::ALL.map(|t| {
        let layers = (0..cfg.layers())
            .map(|l| layer_values(&dev, cfg, seed, l, t))
            .collect();
        Array::new(cfg.stacked_shape(t), stack_cast::<E>(layers))
    });
    Stacked::new(*cfg, [a?, b?, c?, d?])
}
