//! The forward pass over the stack: as a scan (one block at a time, activation buffers reused)
//! and as an unrolled loop over the per-layer list.
//!
//! The block is `y = W2 · tanh(W1 · x + b1) + b2` for each row `x` of a `[B, D]` batch. Sums run
//! in the accumulator type ([`Float::Acc`]: f32 for f16 and f32, f64 for f64) in index order;
//! `tanh(...)` is kept in the accumulator, and each layer's output is rounded to the model dtype
//! (as a model stored in f16 would pass f16 activations between layers).
//!
//! Guarantees: [`forward_scan`] and [`forward_unrolled`] perform the same operations in the same
//! order, so their outputs are bit-identical; the scan allocates its three working buffers once,
//! so its memory does not grow with `N` (at most
//! [`super::bounds::scan_activation_bytes`]), while the unrolled loop allocates fresh buffers
//! for every layer.
//!
//! # References
//! equinox #673 and `eqx.filter_vmap` + `lax.scan`: a scan over stacked layers compiles (here:
//! sizes) the block once.
//!
//! # Example
//! ```
//! use harness_reference::backend::{Array, DType};
//! use harness_reference::stack::{build, forward, StackConfig, Strategy};
//! let cfg = StackConfig::new(3, 4, 8, DType::F32)?;
//! let m = build::<f32>(&cfg, 1, Strategy::ChunkedDirect, &mut ())?.into_stacked()?;
//! let x = Array::new(vec![2, 4], vec![0.5f32; 8])?;
//! let a = forward::forward_scan(&m, &x)?;
//! let b = forward::forward_unrolled(&m.to_list()?, &x)?;
//! assert_eq!(a, b);
//! # Ok::<(), harness_reference::Error>(())
//! ```

use super::model::{LayerList, LayerView, Stacked};
use crate::backend::{Array, Float};
use crate::Result;
use num_traits::Float as _;

/// One block on a `[B, D]` batch: `hidden` is `[B, H]` scratch, `out` is `[B, D]`.
// `s = s + ...`: the accumulator bound (`num_traits::Float`) does not promise `AddAssign`
#[allow(clippy::assign_op_pattern)]
pub fn block<E: Float>(
    v: LayerView<'_, E>,
    d: usize,
    h: usize,
    x: &[E],
    hidden: &mut [E::Acc],
    out: &mut [E],
) {
    let batch = x.len() / d;
    for b in 0..batch {
        let xr = &x[b * d..(b + 1) * d];
        let hr = &mut hidden[b * h..(b + 1) * h];
        for (j, hj) in hr.iter_mut().enumerate() {
            let w = &v.w1[j * d..(j + 1) * d];
            let mut s = v.b1[j].to_acc();
            for (wk, xk) in w.iter().zip(xr) {
                s = s + wk.to_acc() * xk.to_acc();
            }
            *hj = s.tanh();
        }
        let or = &mut out[b * d..(b + 1) * d];
        for (i, oi) in or.iter_mut().enumerate() {
            let w = &v.w2[i * h..(i + 1) * h];
            let mut s = v.b2[i].to_acc();
            for (wk, hk) in w.iter().zip(hr.iter()) {
                s = s + wk.to_acc() * *hk;
            }
            *oi = E::from_acc(s);
        }
    }
}

fn check_input<E: Float>(x: &Array<E>, d: usize) -> Result<usize> {
    match x.shape() {
        [b, w] if *w == d => Ok(*b),
        s => Err(crate::Error::ShapeMismatch {
            leaf: "x".into(),
            expected: vec![s.first().copied().unwrap_or(0), d],
            got: s.to_vec(),
        }),
    }
}

/// Scan over the stacked layers: three buffers allocated once, swapped between layers.
pub fn forward_scan<E: Float>(stack: &Stacked<E>, x: &Array<E>) -> Result<Array<E>> {
    let cfg = stack.config();
    let (d, h) = (cfg.width(), cfg.hidden());
    let batch = check_input(x, d)?;
    let mut cur = x.data().to_vec();
    let mut next = vec![E::default(); batch * d];
    let mut hidden = vec![<E::Acc as Float>::of_f64(0.0); batch * h];
    for l in 0..cfg.layers() {
        block(stack.layer(l), d, h, &cur, &mut hidden, &mut next);
        std::mem::swap(&mut cur, &mut next);
    }
    drop(next);
    Array::new(vec![batch, d], cur)
}

/// An unrolled loop over the list: every layer gets fresh buffers.
pub fn forward_unrolled<E: Float>(list: &LayerList<E>, x: &Array<E>) -> Result<Array<E>> {
    let cfg = list.config();
    let (d, h) = (cfg.width(), cfg.hidden());
    let batch = check_input(x, d)?;
    let mut cur = x.clone();
    for layer in list.layers() {
        let mut hidden = vec![<E::Acc as Float>::of_f64(0.0); batch * h];
        let mut out = vec![E::default(); batch * d];
        block(layer.view(), d, h, cur.data(), &mut hidden, &mut out);
        cur = Array::new(vec![batch, d], out)?;
    }
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::DType;
    use crate::stack::{build, StackConfig, Strategy};

    #[test]
    fn a_one_unit_layer_gives_the_hand_computed_output_bit_for_bit() {
        // D = H = 1: y = w2 * tanh(w1 * x + b1) + b2
        let cfg = StackConfig::new(1, 1, 1, DType::F64).unwrap();
        let m = build::<f64>(&cfg, 4, Strategy::ChunkedDirect, &mut ())
            .unwrap()
            .into_stacked()
            .unwrap();
        let v = m.layer(0);
        let x = 0.75;
        let want = v.w2[0] * (v.w1[0] * x + v.b1[0]).tanh() + v.b2[0];
        let got = forward_scan(&m, &Array::new(vec![1, 1], vec![x]).unwrap()).unwrap();
        assert_eq!(got.data()[0], want);
    }

    #[test]
    fn wrong_input_width_is_a_shape_error() {
        let cfg = StackConfig::new(1, 3, 2, DType::F32).unwrap();
        let m = build::<f32>(&cfg, 0, Strategy::ChunkedDirect, &mut ())
            .unwrap()
            .into_stacked()
            .unwrap();
        let x = Array::new(vec![1, 2], vec![0f32; 2]).unwrap();
        assert!(forward_scan(&m, &x).is_err());
    }
}
