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

/// Raw stack build: any layer count, width, hidden size (zeros included), dtype and seed. Sizes
/// are reduced modulo `N <= 32`, `D <= 128`, `H <= 256`, and the layer count is then capped so
/// that the largest transient (`N*P*(4+8)` bytes) stays within [`STACK_FUZZ_CAP`].
#[derive(Debug, Clone, Arbitrary)]
pub struct StackInput {
    pub layers: u8,
    pub width: u16,
    pub hidden: u16,
    pub dtype: u8,
    pub seed: u64,
}

/// Memory cap of one `stack` fuzz input: 8 MiB.
pub const STACK_FUZZ_CAP: usize = 8 << 20;

impl StackInput {
    /// The law input this fuzz input stands for.
    pub fn to_case(&self) -> super::stack::StackCase {
        let (d, h) = ((self.width % 129) as usize, (self.hidden % 257) as usize);
        let p = 2 * d * h + d + h;
        let n = ((self.layers % 33) as usize).min(STACK_FUZZ_CAP / (12 * p).max(1));
        super::stack::StackCase {
            layers: n,
            width: d,
            hidden: h,
            dtype: [DType::F16, DType::F32, DType::F64][(self.dtype % 3) as usize],
            seed: self.seed,
        }
    }
}

/// The `stack` target: a zero size is rejected with a typed error naming the field; any other
/// input satisfies every stack law (all strategies bit-identical, f16 = cast(f32), scan = loop,
/// measured peaks within their bounds). No input may panic.
pub fn stack(data: &[u8]) -> Result<(), String> {
    let Ok(input) = StackInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return Ok(());
    };
    let case = input.to_case();
    match case.config() {
        Err(e) if case.layers == 0 || case.width == 0 || case.hidden == 0 => {
            if e.contains("must be >= 1") {
                Ok(())
            } else {
                Err(format!("zero size rejected with the wrong error: {e}"))
            }
        }
        Err(e) => Err(format!("valid sizes rejected: {e}")),
        Ok(_) => super::stack::check_case(&case),
    }
}
