//! Wrong Newton–Schulz iterations, each a [`PlannedNs`] subject of its own: the numerical laws of
//! `laws::muon` must catch every one.
//!
//! - [`OneIterationShort`]: the planned iteration run one step fewer than asked (an off-by-one
//!   in the loop bound): the planned-vs-composed and singular-value laws catch it.
//! - [`TallSideComposed`]: tall inputs orthogonalised by a second code path (the composed
//!   products on the tall side, not the planned ones on the transpose): the same numbers up to
//!   rounding, so only the bitwise transpose law catches it.
//! - [`NormWithoutEps`] (a transform): the normalisation by the gradient's norm without its
//!   `eps`, NaN for an all-zero gradient: the zero-gradient law catches it.
//! - [`CoeffsThroughF32`] (a transform): the float64 coefficients stored back through f32 after
//!   each update: the fixed-state law catches it.

use crate::backend::{Array, Float, Real};
use crate::laws::muon::{NsProblem, Planned, PlannedNs};
use crate::optim::muon::orthogonalize_composed;
use crate::optim::{MuonState, Transform};
use crate::reference::Result;
use crate::tree::Tree;

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
    fn run<A: Real>(&self, p: &NsProblem<'_, A>, out: &mut [A]) -> usize {
        let short = NsProblem {
            steps: p.steps.saturating_sub(1),
            ..*p
        };
        Planned.run(&short, out)
    }
}

/// The reference's planned iteration for square and wide inputs, and the composed one (products
/// of the tall matrix itself) for tall inputs.
#[derive(Debug, Clone, Copy)]
pub struct TallSideComposed;

impl PlannedNs for TallSideComposed {
    fn run<A: Real>(&self, p: &NsProblem<'_, A>, out: &mut [A]) -> usize {
        if p.rows <= p.cols {
            return Planned.run(p, out);
        }
        let input = Array::new(vec![p.rows, p.cols], p.x.to_vec()).expect("rows x cols values");
        let (o, k) = orthogonalize_composed(&input, p.coeffs, p.steps, p.eps);
        out.copy_from_slice(o.data());
        k
    }
}

/// Muon (or any transform) whose orthogonalisation divides by the norm of the gradient without
/// the `eps` guard: a leaf whose gradient is all zeros gets `0 / 0`, NaN, in every element of its
/// update. The other leaves are the reference's.
///
/// ```
/// use harness::laws::muon::{muon_case, zero_gradient_zero_update_with};
/// use harness::laws::{check_property, DEFAULT_SEED};
/// use harness::mutants::muon_ns::NormWithoutEps;
/// use harness::optim::Muon;
/// let r = check_property("zero", 64, DEFAULT_SEED, muon_case(), |c| {
///     zero_gradient_zero_update_with(c, &|h| Muon::new(h).map(NormWithoutEps))
/// });
/// assert!(r.is_err());
/// ```
#[derive(Debug, Clone)]
pub struct NormWithoutEps<T>(pub T);

/// `Transform<E>` for a wrapper `$wrapper<T>(T)` of a transform `T` (bounded by `$bound`): the
/// wrapped transform's `init` and `update`, then `$mistake` on the gradient, the update and the
/// next state.
macro_rules! after_the_update {
    ($wrapper:ident, [$($bound:tt)*], |$grads:ident, $u:ident, $next:ident| $mistake:block) => {
        impl<E: Float, T: $($bound)*> Transform<E> for $wrapper<T> {
            type State = T::State;
            fn static_key(&self) -> u64 {
                self.0.static_key()
            }
            fn init(&self, params: &Tree<E>) -> Result<Self::State> {
                self.0.init(params)
            }
            fn update(
                &self,
                $grads: &Tree<E>,
                state: &Self::State,
                params: &Tree<E>,
            ) -> Result<(Tree<E>, Self::State)> {
                #[allow(unused_mut)]
                let (mut $u, mut $next) = self.0.update($grads, state, params)?;
                $mistake
                Ok(($u, $next))
            }
        }
    };
}

after_the_update!(NormWithoutEps, [Transform<E>], |grads, u, next| {
    let nan = E::of_f64(f64::NAN);
    u = Tree::from_leaves(u.iter().map(|(k, a)| {
        let zero = grads
            .get(k)
            .is_some_and(|g| g.data().iter().all(|v| v.as_f64() == 0.0));
        let a = if zero && !a.data().is_empty() {
            a.map(|_| nan)
        } else {
            a.clone()
        };
        (k.to_string(), a)
    }))?;
});

/// Muon (or any Muon-shaped transform) that stores its Newton–Schulz coefficients back rounded
/// through f32 after every update (a cast of the state to the low-precision dtype that takes
/// the float64 coefficients with it): the coefficients' bits change on the first step.
#[derive(Debug, Clone)]
pub struct CoeffsThroughF32<T>(pub T);

after_the_update!(
    CoeffsThroughF32,
    [Transform<E, State = MuonState<E::Acc>>],
    |grads, u, next| {
        next.ns_coeffs = next.ns_coeffs.map(|c| c as f32 as f64);
    }
);
