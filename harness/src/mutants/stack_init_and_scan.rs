//! Wrong stacked initialisers, each an [`InitSubject`] of its own: the stack laws of
//! `laws::stack` must catch every one.
//!
//! - [`ListLayersReversed`]: the per-layer list built back to front (layer `l` given the random
//!   stream of layer `N - 1 - l`): the strategies law catches it, from two layers.
//! - [`F16ByTruncation`]: f16 weights made from the f32 ones by cutting the extra bits (rounding
//!   toward zero) instead of rounding to nearest: the cast law catches it.
//! - [`ScanBackToFront`] (a [`ScanSubject`]): the scan walks the layers from the last: the
//!   scan-equals-unrolled law catches it, from two layers.
//! - [`ScanKeepingEveryActivation`]: a scan whose buffers grow with the depth: the scan memory
//!   law catches it.

use crate::backend::{Array, DType, Float};
use crate::laws::stack::{InitSubject, ScanSubject};
use crate::reference::Result;
use crate::stack::forward::block;
use crate::stack::{
    build, build_any, AnyBuilt, Built, LayerList, Observer, StackConfig, Stacked, Strategy,
};

/// The reference, with `layerwise-list` returning its layers in reverse order.
///
/// ```
/// use harness::laws::stack::{stack_case, strategies_bitwise_identical_with};
/// use harness::laws::{check_property, DEFAULT_SEED};
/// use harness::mutants::stack_init_and_scan::ListLayersReversed;
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

/// A scan that walks the stack from its last layer to its first (an index written `N - 1 - l`).
///
/// ```
/// use harness::laws::stack::{scan_equals_unrolled_with, stack_case};
/// use harness::laws::{check_property, DEFAULT_SEED};
/// use harness::mutants::stack_init_and_scan::ScanBackToFront;
/// let r = check_property("scan", 64, DEFAULT_SEED, stack_case(4, 8, 8), |c| {
///     scan_equals_unrolled_with(c, 1, &ScanBackToFront)
/// });
/// assert!(r.is_err());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ScanBackToFront;

/// A scan that gives every layer fresh buffers and keeps them all until the end (the values are
/// right; the memory grows with the depth).
#[derive(Debug, Clone, Copy)]
pub struct ScanKeepingEveryActivation;

/// The scan of `stack` over `x`, layers in the order `order`, each layer's output in a fresh
/// buffer; the buffers are dropped at the end when `keep`, else as soon as the next layer ran.
fn scan_in<E: Float>(
    stack: &Stacked<E>,
    x: &Array<E>,
    order: impl Iterator<Item = usize>,
    keep: bool,
) -> Result<Array<E>> {
    let cfg = stack.config();
    let (d, h) = (cfg.width(), cfg.hidden());
    let batch = x.data().len() / d.max(1);
    let mut kept: Vec<Vec<E>> = Vec::new();
    let mut cur = x.data().to_vec();
    let mut hidden = vec![<E::Acc as Float>::of_f64(0.0); batch * h];
    for l in order {
        let mut out = vec![E::default(); batch * d];
        block(stack.layer(l), d, h, &cur, &mut hidden, &mut out);
        let done = std::mem::replace(&mut cur, out);
        if keep {
            kept.push(done);
        }
    }
    drop(kept);
    Array::new(vec![batch, d], cur)
}

impl ScanSubject for ScanBackToFront {
    fn scan<E: Float>(&self, stack: &Stacked<E>, x: &Array<E>) -> Result<Array<E>> {
        scan_in(stack, x, (0..stack.config().layers()).rev(), false)
    }
}

impl ScanSubject for ScanKeepingEveryActivation {
    fn scan<E: Float>(&self, stack: &Stacked<E>, x: &Array<E>) -> Result<Array<E>> {
        scan_in(stack, x, 0..stack.config().layers(), true)
    }
}
