//! The Armijo (sufficient decrease) rule, as optax's backtracking line search evaluates it.
//!
//! For a step `eta` along a direction `u` with slope `<u, grad f(w)>`:
//!
//! ```text
//! decrease_error = max(f(w + eta u) - (1 + rtol) f(w) - eta * slope_rtol * slope, 0)
//! ```
//!
//! with NaN mapped to `+inf` (before the `max`, as upstream), so a candidate whose value is NaN or
//! `+inf` is never accepted, while `-inf` is (it is a decrease). `(1 + rtol) f(w)` is taken
//! literally, also when `f(w) < 0`. A candidate is accepted when `decrease_error <= atol`.
//! Every operation is done in the parameters' dtype `A`, in optax's order.
//!
//! # References
//! - L. Armijo, *Minimization of functions having Lipschitz continuous first partial derivatives*,
//!   Pacific J. Math. 16 (1966).
//! - Nocedal & Wright, *Numerical Optimization*, 2nd ed., §3.1 (Algorithm 3.1).
//! - optax 0.2.8 `_compute_decrease_error`; `docs/ALGORITHMS.md` §4.
//!
//! # Example
//! ```
//! use harness_reference::optim::linesearch::Armijo;
//! let rule = Armijo::new(1e-4, 0.0).unwrap();
//! // f(w) = 1, slope -2: a step of 0.5 reaching f = 0 is a sufficient decrease.
//! assert_eq!(rule.decrease_error(0.5f64, -2.0, 1.0, 0.0), 0.0);
//! // a NaN value is an infinite error
//! assert_eq!(rule.decrease_error(0.5f64, -2.0, 1.0, f64::NAN), f64::INFINITY);
//! ```

use crate::backend::Real;
use crate::error::ensure;
use crate::Result;

/// The rule's two constants.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Armijo {
    /// `c` of the textbook rule (optax's `slope_rtol`), in `[0, 1)`.
    pub slope_rtol: f64,
    /// Relative slack on the current value, finite and `>= 0`.
    pub rtol: f64,
}

impl Armijo {
    /// `slope_rtol` in `[0, 1)`, `rtol` finite and `>= 0`.
    ///
    /// ```
    /// use harness_reference::optim::linesearch::Armijo;
    /// assert!(Armijo::new(1.0, 0.0).unwrap_err().to_string().contains("slope_rtol"));
    /// ```
    pub fn new(slope_rtol: f64, rtol: f64) -> Result<Self> {
        ensure(
            (0.0..1.0).contains(&slope_rtol),
            "slope_rtol",
            slope_rtol,
            "must be in [0, 1)",
        )?;
        ensure(
            rtol.is_finite() && rtol >= 0.0,
            "rtol",
            rtol,
            "must be finite and >= 0",
        )?;
        Ok(Self { slope_rtol, rtol })
    }

    /// `max(new_value - (1+rtol) value - eta slope_rtol slope, 0)`, NaN -> `+inf`, in `A`.
    pub fn decrease_error<A: Real>(&self, eta: A, slope: A, value: A, new_value: A) -> A {
        let one_plus_rtol = A::of_f64(1.0 + self.rtol);
        let e = new_value - one_plus_rtol * value - eta * A::of_f64(self.slope_rtol) * slope;
        let e = if crate::backend::Float::is_nan(e) {
            A::infinity()
        } else {
            e
        };
        // jnp.maximum: e is not NaN here
        if e > A::zero() {
            e
        } else {
            A::zero()
        }
    }

    /// Whether the error is within `atol` (`decrease_error <= atol`, compared in f64 like the
    /// loop condition of the upstream while loop).
    pub fn accepts<A: Real>(decrease_error: A, atol: f64) -> bool {
        decrease_error.as_f64() <= atol
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sufficient_decrease_is_zero_error() {
        let r = Armijo::new(0.5, 0.0).unwrap();
        // 0.75 - 1 - 0.5*0.5*(-1) = 0
        assert_eq!(r.decrease_error(0.5f64, -1.0, 1.0, 0.75), 0.0);
    }

    #[test]
    fn insufficient_decrease_is_the_excess() {
        let r = Armijo::new(0.5, 0.0).unwrap();
        assert_eq!(r.decrease_error(0.5f64, -1.0, 1.0, 1.0), 0.25);
    }

    #[test]
    fn rtol_is_literal_also_for_negative_values() {
        let r = Armijo::new(0.0, 0.5).unwrap();
        // (1 + 0.5) * -2 = -3: a new value of -2.5 is an error of 0.5
        assert_eq!(r.decrease_error(1.0f64, 0.0, -2.0, -2.5), 0.5);
    }

    #[test]
    fn nan_and_inf_values_are_infinite_errors_minus_inf_is_accepted() {
        let r = Armijo::new(1e-4, 0.0).unwrap();
        assert_eq!(r.decrease_error(1.0f32, -1.0, 1.0, f32::NAN), f32::INFINITY);
        assert_eq!(
            r.decrease_error(1.0f32, -1.0, 1.0, f32::INFINITY),
            f32::INFINITY
        );
        assert_eq!(
            r.decrease_error(1.0f32, -1.0, f32::INFINITY, f32::INFINITY),
            f32::INFINITY
        );
        assert_eq!(r.decrease_error(1.0f32, -1.0, 1.0, f32::NEG_INFINITY), 0.0);
    }

    #[test]
    fn out_of_range_constants_name_the_parameter() {
        assert!(Armijo::new(-0.1, 0.0)
            .unwrap_err()
            .to_string()
            .contains("slope_rtol"));
        assert!(Armijo::new(0.1, f64::NAN)
            .unwrap_err()
            .to_string()
            .contains("rtol"));
    }
}
