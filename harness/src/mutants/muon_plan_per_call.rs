//! A Newton–Schulz "plan" rebuilt at every call: the workspace (`X`, `X^T`, `B X`, `A`, `c A`,
//! `B`) is allocated by each run, as a form without a plan does. The memory law of the planned
//! form (`laws::muon::planned_ns_allocates_only_gemm_scratch`) must catch it: its peak is the
//! workspace, thousands of times gemm's per-call scratch.

use crate::backend::Array;
use crate::laws::muon::NsRunner;
use crate::optim::muon::NsPlan;

/// Builds a fresh [`NsPlan`] (one thread) for every run.
#[derive(Debug, Clone, Copy)]
pub struct PlanPerCall {
    /// Rows of the matrices run.
    pub rows: usize,
    /// Columns of the matrices run.
    pub cols: usize,
}

impl NsRunner for PlanPerCall {
    fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }
    fn threads(&self) -> usize {
        1
    }
    fn run(
        &mut self,
        input: &[f32],
        coeffs: &Array<f64>,
        ns_steps: usize,
        eps: f32,
        out: &mut [f32],
    ) -> usize {
        // on gemm 0.15, as the allocation law judges the reference plan
        NsPlan::<f32>::new(self.rows, self.cols)
            .with_threads(1)
            .with_kernel(crate::backend::GemmKernel::Dfdx)
            .run(input, coeffs, ns_steps, eps, out)
    }
}
