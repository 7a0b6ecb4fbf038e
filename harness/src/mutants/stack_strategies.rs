//! Wrong stacked initialisers, each an [`InitSubject`] of its own: the stack laws of
//! `laws::stack` must catch every one.
//!
//! - [`ListLayersReversed`]: the per-layer list built back to front (layer `l` given the random
//!   stream of layer `N - 1 - l`): the strategies law catches it, from two layers.
//! - [`F16ByTruncation`]: f16 weights made from the f32 ones by cutting the extra bits (rounding
//!   toward zero) instead of rounding to nearest: the cast law catches it.

use crate::backend::{Array, DType, Float};
use crate::laws::stack::InitSubject;
use crate::reference::Result;
use crate::stack::{
    build, build_any, AnyBuilt, Built, LayerList, Observer, StackConfig, Stacked, Strategy,
};

/// The reference, with `layerwise-list` returning its layers in reverse order.
///
/// ```
/// use harness::laws::stack::{stack_case, strategies_bitwise_identical_with};
/// use harness::laws::{check_property, DEFAULT_SEED};
/// use harness::mutants::stack_strategies::ListLayersReversed;
/// let r = check_property("strategies", 64, DEFAULT_SEED, stack_case(4, 8, 8), |c| {
///     strategies_bitwise_identical_with(c, &ListLayersReversed)
/// });
/// assert!(r.is_err());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ListLayersReversed;

/// The reference, with every f16 build made from the f32 build by rounding toward zero.
#[derive(Debug, Clone, Copy)]
pub struct F16ByTruncation;

fn reversed<E: Float>(b: Built<E>) -> Result<Built<E>> {
    let list = b.into_list()?;
    let layers = list.layers().iter().rev().cloned().collect();
    Ok(Built::List(LayerList::new(*list.config(), layers)?))
}

impl InitSubject for ListLayersReversed {
    fn build(
        &self,
        cfg: &StackConfig,
        seed: u64,
        strategy: Strategy,
        obs: &mut dyn Observer,
    ) -> Result<AnyBuilt> {
        let built = build_any(cfg, seed, strategy, obs)?;
        if strategy != Strategy::LayerwiseList {
            return Ok(built);
        }
        Ok(match built {
            AnyBuilt::F16(b) => AnyBuilt::F16(reversed(b)?),
            AnyBuilt::F32(b) => AnyBuilt::F32(reversed(b)?),
            AnyBuilt::F64(b) => AnyBuilt::F64(reversed(b)?),
        })
    }
}

/// `x` in f16, rounded toward zero: the nearest f16, moved one step toward zero when that is
/// farther from zero than `x`.
fn f16_toward_zero(x: f32) -> half::f16 {
    let near = half::f16::from_f32(x);
    if near.is_finite() && near.to_f32().abs() > x.abs() && near.to_f32() != 0.0 {
        half::f16::from_bits(near.to_bits() - 1)
    } else {
        near
    }
}

impl InitSubject for F16ByTruncation {
    fn build(
        &self,
        cfg: &StackConfig,
        seed: u64,
        strategy: Strategy,
        obs: &mut dyn Observer,
    ) -> Result<AnyBuilt> {
        if cfg.dtype() != DType::F16 {
            return build_any(cfg, seed, strategy, obs);
        }
        let wide =
            build::<f32>(&cfg.with_dtype(DType::F32)?, seed, strategy, obs)?.into_stacked()?;
        let tensors = wide.tensors.each_ref().map(|t| {
            Array::new(
                t.shape().to_vec(),
                t.data().iter().map(|&x| f16_toward_zero(x)).collect(),
            )
        });
        let [a, b, c, d] = tensors;
        Ok(AnyBuilt::F16(Built::Stacked(Stacked::new(
            *cfg,
            [a?, b?, c?, d?],
        )?)))
    }
}
