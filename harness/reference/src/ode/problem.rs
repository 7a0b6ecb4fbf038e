//! The problem interface: a vector field `dy/dt = f(t, y)` on a flat state.
//!
//! States are flat slices of any length; a caller with a structured state (a matrix, a tree of
//! leaves) keeps the shape beside the slice, as the rest of the workspace does with
//! [`crate::backend::Array`]. The solver calls [`VectorField::eval`] with a preallocated output
//! buffer, so a field that does not allocate keeps the whole step allocation-free.
//!
//! Guarantees the solver relies on: `eval` writes every element of `dy` (the buffer holds the
//! previous stage's values, not zeros) and does not panic for finite inputs. Non-finite outputs
//! are allowed; the solver handles them like diffrax (NaN errors count as infinite).
//!
//! # References
//! - diffrax 0.7.2 `ODETerm` (`vector_field(t, y, args)`).
//! - E. Hairer, S. P. Nørsett, G. Wanner, *Solving Ordinary Differential Equations I*, §II.1.

use crate::backend::Real;

/// A vector field `f(t, y)` of an ODE `dy/dt = f(t, y)` in the arithmetic type `A`.
///
/// Closures `Fn(A, &[A], &mut [A])` are vector fields:
///
/// ```
/// use harness_reference::ode::VectorField;
/// let decay = |_t: f64, y: &[f64], dy: &mut [f64]| dy[0] = -y[0];
/// let mut dy = [0.0];
/// decay.eval(0.0, &[2.0], &mut dy);
/// assert_eq!(dy, [-2.0]);
/// ```
pub trait VectorField<A: Real> {
    /// Write `f(t, y)` into `dy` (same length as `y`); every element must be written.
    fn eval(&self, t: A, y: &[A], dy: &mut [A]);
    /// The state length the field requires, if it has one (checked against `y0` by the solver).
    fn dim(&self) -> Option<usize> {
        None
    }
}

impl<A: Real, F: Fn(A, &[A], &mut [A])> VectorField<A> for F {
    fn eval(&self, t: A, y: &[A], dy: &mut [A]) {
        self(t, y, dy)
    }
}

/// The field with time reversed: `g(s, y) = -f(-s, y)`. Solving `g` from `-t0` to `-t1` is
/// exactly (bit for bit: both negations are exact) diffrax's backward solve of `f` from `t0`
/// to `t1 < t0`.
pub struct Reversed<'a, F: ?Sized>(pub &'a F);

impl<A: Real, F: VectorField<A> + ?Sized> VectorField<A> for Reversed<'_, F> {
    fn eval(&self, s: A, y: &[A], dy: &mut [A]) {
        self.0.eval(-s, y, dy);
        for v in dy.iter_mut() {
            *v = -*v;
        }
    }
    fn dim(&self) -> Option<usize> {
        self.0.dim()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reversed_field_negates_time_and_value() {
        let f = |t: f64, y: &[f64], dy: &mut [f64]| dy[0] = t * y[0];
        let mut dy = [0.0];
        Reversed(&f).eval(3.0, &[2.0], &mut dy);
        // -f(-3, 2) = -(-3 * 2) = 6
        assert_eq!(dy, [6.0]);
    }
}
