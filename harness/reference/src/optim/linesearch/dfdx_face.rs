//! The dfdx face of the backtracking line search: its candidate, slope and Armijo decrease
//! error written as dfdx tensor operations ([`DfdxKernels`]), run by the same round as the loop
//! kernels ([`super::ScaleByBacktrackingLinesearch::search`]).
//!
//! ```text
//! candidate = w + u * eta                      (per leaf, one tensor expression)
//! value     = f(candidate)                     (the objective's own value)
//! slope     = sum(concat(u) * concat(g))       (lane order: padded rows, then halving)
//! error     = max(f_new - (1 + rtol) f - (eta c) slope, 0),  NaN -> +inf
//! ```
//!
//! The slope's reduction runs over the leaves concatenated in order, in the workspace's lane order
//! ([`crate::backend::Ten::lane_sum`]), so its roundings are those of the loop's sixteen
//! accumulators; the candidate is materialised and handed to
//! [`super::Objective::value`], where the loop
//! kernels may use [`super::Objective::value_along`]: the faces agree bit for bit (law
//! `linesearch_faces_agree`).
//! The decrease error is a handful of scalars; dfdx has no scalar arithmetic of its own, so it is
//! written out here from the formula (not shared with the loop kernels, so that a wrong sign in
//! either is seen by the law).
//!
//! # References
//! - Nocedal & Wright, *Numerical Optimization*, 2nd ed., §3.1 (the Armijo condition);
//!   optax 0.2.8 `_linesearch.py`; `docs/ALGORITHMS.md` §4.
//!
//! ```
//! use harness_reference::optim::linesearch::{point, Armijo, DfdxKernels, SearchKernels};
//! let (w, u) = (point::<f64>(&[1.0, 2.0]), point::<f64>(&[-1.0, 0.5]));
//! let k = DfdxKernels;
//! assert_eq!(k.candidate(&w, 0.5, &u).get("x").unwrap().data(), &[0.5, 2.25]);
//! assert_eq!(k.slope(&u, &u), 1.25);
//! // f_new - f - eta c slope = 0.9 - 1 - 0.5 * 0.5 * (-1) = 0.15
//! let armijo = Armijo::new(0.5, 0.0).unwrap();
//! assert!((k.decrease_error(&armijo, 0.5f64, -1.0, 1.0, 0.9) - 0.15).abs() < 1e-15);
//! ```

use super::armijo::Armijo;
use super::backtracking::SearchKernels;
use crate::backend::{device, Real, Ten};
use crate::tree::Tree;

/// The line search's kernels as dfdx tensor operations.
#[derive(Clone, Copy, Debug, Default)]
pub struct DfdxKernels;

impl SearchKernels for DfdxKernels {
    fn candidate<A: Real>(&self, params: &Tree<A>, eta: A, u: &Tree<A>) -> Tree<A> {
        let dev = device();
        Tree(
            params
                .iter()
                .zip(u.iter())
                .map(|((k, p), (_, d))| {
                    let w = Ten::from_array(&dev, p) + Ten::from_array(&dev, d) * eta;
                    (k.clone(), w.to_array(p.shape()).expect("same shape"))
                })
                .collect(),
        )
    }

    fn slope<A: Real>(&self, u: &Tree<A>, g: &Tree<A>) -> A {
        let dev = device();
        let flat = |t: &Tree<A>| {
            Ten::from_vec(
                &dev,
                t.iter()
                    .flat_map(|(_, a)| a.data().iter().copied())
                    .collect(),
            )
        };
        (flat(u) * flat(g)).lane_sum()
    }

    fn decrease_error<A: Real>(
        &self,
        armijo: &Armijo,
        eta: A,
        slope: A,
        value: A,
        new_value: A,
    ) -> A {
        let (c, rtol) = (A::of_f64(armijo.slope_rtol), A::of_f64(1.0 + armijo.rtol));
        let e = new_value - rtol * value - eta * c * slope;
        match e {
            e if num_traits::Float::is_nan(e) => A::infinity(),
            e if e > A::zero() => e,
            _ => A::zero(), // jnp.maximum(e, 0), +0 for both signed zeros
        }
    }
}
