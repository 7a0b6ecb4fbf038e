//! Wrong Newton–Schulz iterations, each a [`PlannedNs`] subject of its own: the numerical laws of
//! `laws::muon` must catch every one.
//!
//! - [`OneIterationShort`]: the planned iteration run one step fewer than asked (an off-by-one
//!   in the loop bound): the planned-vs-composed and singular-value laws catch it.
//! - [`TallSideComposed`]: tall inputs orthogonalised by a second code path (the composed
//!   products on the tall side, not the planned ones on the transpose): the same numbers up to
//!   rounding, so only the bitwise transpose law catches it.

use crate::backend::{Array, Real};
use crate::laws::muon::{Planned, PlannedNs};
use crate::optim::muon::orthogonalize_composed;

/// The reference's planned iteration with `steps - 1` iterations.
///
/// ```
/// use harness::laws::muon::{band_case, singular_value_band_with};
/// use harness::mutants::muon_ns::OneIterationShort;
/// use harness::laws::{check_property, DEFAULT_SEED};
/// let r = check_property("band", 64, DEFAULT_SEED, band_case(), |c| {
///     singular_value_band_with(c, &OneIterationShort)
/// });
/// assert!(r.is_err());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct OneIterationShort;

impl PlannedNs for OneIterationShort {
    fn run<A: Real>(
        &self,
        rows: usize,
        cols: usize,
        sym_block: usize,
        x: &[A],
        coeffs: &Array<f64>,
        steps: usize,
        eps: A,
        out: &mut [A],
    ) -> usize {
        Planned.run(
            rows,
            cols,
            sym_block,
            x,
            coeffs,
            steps.saturating_sub(1),
            eps,
            out,
        )
    }
}

/// The reference's planned iteration for square and wide inputs, and the composed one (products
/// of the tall matrix itself) for tall inputs.
#[derive(Debug, Clone, Copy)]
pub struct TallSideComposed;

impl PlannedNs for TallSideComposed {
    fn run<A: Real>(
        &self,
        rows: usize,
        cols: usize,
        sym_block: usize,
        x: &[A],
        coeffs: &Array<f64>,
        steps: usize,
        eps: A,
        out: &mut [A],
    ) -> usize {
        if rows <= cols {
            return Planned.run(rows, cols, sym_block, x, coeffs, steps, eps, out);
        }
        let input = Array::new(vec![rows, cols], x.to_vec()).expect("rows x cols values");
        let (o, k) = orthogonalize_composed(&input, coeffs, steps, eps);
        out.copy_from_slice(o.data());
        k
    }
}
