//! Structured fuzz inputs: `Arbitrary` mirrors of the law inputs, shared by the cargo-fuzz
//! targets and the corpus/regression replay in `cargo test`. Their `Debug` prints a reproducer.

use super::strategies::OptCase;
use crate::backend::DType;
use crate::optim::{AdamHyper, RadamHyper};
use arbitrary::{Arbitrary, Unstructured};

/// Raw RAdam run: every hyperparameter unvalidated (NaN, negative and out-of-range values
/// included), any dtype, up to 16 steps over up to 64 elements, any gradient values.
#[derive(Debug, Clone, Arbitrary)]
pub struct RadamInput {
    pub b1: f64,
    pub b2: f64,
    pub eps: f64,
    pub eps_root: f64,
    pub nesterov: bool,
    pub threshold: f64,
    pub learning_rate: f64,
    pub dtype: u8,
    pub elements: u8,
    pub params: Vec<f64>,
    pub grads: Vec<f64>,
    pub steps: u8,
}

impl RadamInput {
    /// The law input this fuzz input stands for (sizes capped; gradients reused cyclically).
    pub fn to_case(&self) -> OptCase {
        let n = (self.elements % 65) as usize;
        let steps = 1 + (self.steps % 16) as usize;
        let pick = |v: &[f64], i: usize| if v.is_empty() { 0.0 } else { v[i % v.len()] };
        OptCase {
            hyper: RadamHyper {
                moments: AdamHyper {
                    b1: self.b1,
                    b2: self.b2,
                    eps: self.eps,
                    eps_root: self.eps_root,
                    nesterov: self.nesterov,
                },
                threshold: self.threshold,
            },
            learning_rate: self.learning_rate,
            dtype: [DType::F16, DType::F32, DType::F64][(self.dtype % 3) as usize],
            params: (0..n).map(|i| pick(&self.params, i)).collect(),
            grads: (0..steps)
                .map(|s| (0..n).map(|i| pick(&self.grads, s * n + i)).collect())
                .collect(),
        }
    }
}

/// The `radam` target: any input either is rejected with a typed error or satisfies every pure
/// RAdam/Adam law (NaN/inf/huge data: the bitwise laws; the finiteness laws where their domain,
/// [`super::radam::finiteness_domain`], holds). No input may panic.
pub fn radam(data: &[u8]) -> Result<(), String> {
    let Ok(input) = RadamInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return Ok(());
    };
    super::radam::check_case(&input.to_case())
}
