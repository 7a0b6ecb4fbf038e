//! The flow's parameters: one flat vector per block in [`Layout`] order, initialised as
//! `equinox.nn.Linear` does (uniform in `[-1/sqrt(fan_in), 1/sqrt(fan_in))`, fan-in 1 for the
//! time layers), from a counter-based stream so the same seed gives the same bits.

use super::config::{CnfConfig, Layout};
use super::random::{key, uniform01};
use crate::backend::Float;
use crate::{Error, Result};

/// Purpose tag of the weight streams.
const WEIGHT_STREAM: u64 = 0xC0F_0001;

/// A CNF's weights.
#[derive(Debug, Clone, PartialEq)]
pub struct CnfParams<E = f64> {
    /// The (validated) configuration the weights were drawn for.
    pub cfg: CnfConfig,
    /// Offsets of every layer inside each block's vector (`Layout::new(&cfg)`).
    pub layout: Layout,
    /// `blocks[b]` has `layout.len` values.
    pub blocks: Vec<Vec<E>>,
}

impl<E: Float> CnfParams<E> {
    /// Random weights from `seed` (validated configuration).
    pub fn init(cfg: CnfConfig, seed: u64) -> Result<Self> {
        cfg.validate()?;
        let layout = Layout::new(&cfg);
        let blocks = (0..cfg.blocks)
            .map(|b| {
                let k = key(seed, WEIGHT_STREAM, b as u64);
                let mut theta = vec![E::default(); layout.len];
                for l in &layout.layers {
                    let fan = |off: usize, len: usize, fan_in: usize, th: &mut [E]| {
                        let lim = 1.0 / (fan_in as f64).sqrt();
                        for (i, v) in th.iter_mut().enumerate().skip(off).take(len) {
                            *v = E::of_f64((2.0 * uniform01(k, i as u64) - 1.0) * lim);
                        }
                    };
                    fan(l.w1, l.out * l.inp, l.inp, &mut theta);
                    fan(l.b1, l.out, l.inp, &mut theta);
                    fan(l.w2, l.out, 1, &mut theta);
                    fan(l.b2, l.out, 1, &mut theta);
                    fan(l.w3, l.out, 1, &mut theta);
                }
                theta
            })
            .collect();
        Ok(CnfParams {
            cfg,
            layout,
            blocks,
        })
    }

    /// Weights given per block (each of `layout.len` finite values).
    pub fn from_blocks(cfg: CnfConfig, blocks: Vec<Vec<E>>) -> Result<Self> {
        cfg.validate()?;
        let layout = Layout::new(&cfg);
        if blocks.len() != cfg.blocks {
            return Err(Error::ShapeMismatch {
                leaf: "weights".into(),
                expected: vec![cfg.blocks],
                got: vec![blocks.len()],
            });
        }
        for (b, th) in blocks.iter().enumerate() {
            if th.len() != layout.len {
                return Err(Error::ShapeMismatch {
                    leaf: format!("weights[{b}]"),
                    expected: vec![layout.len],
                    got: vec![th.len()],
                });
            }
            if let Some(i) = th.iter().position(|x| !x.is_finite()) {
                return Err(Error::InvalidHyper {
                    name: "weights",
                    value: format!("{:?} at block {b} index {i}", th[i]),
                    expected: "every weight must be finite".into(),
                });
            }
        }
        Ok(CnfParams {
            cfg,
            layout,
            blocks,
        })
    }

    /// The same weights in another dtype (rounded to nearest).
    pub fn cast<F: Float>(&self) -> CnfParams<F> {
        CnfParams {
            cfg: self.cfg,
            layout: self.layout.clone(),
            blocks: self
                .blocks
                .iter()
                .map(|b| b.iter().map(|x| F::of_f64(x.as_f64())).collect())
                .collect(),
        }
    }

    /// Total parameter count.
    pub fn len(&self) -> usize {
        self.layout.len * self.blocks.len()
    }
    /// `true` when there are no parameters (never the case for a validated configuration).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
