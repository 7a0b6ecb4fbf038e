//! Input generators shared by the laws (and, through `Arbitrary` mirrors, the fuzz targets).

use crate::backend::DType;
use crate::optim::{AdamHyper, RadamHyper};
use proptest::prelude::*;

/// A run of an optimizer on one flat leaf: hyperparameters, learning rate, initial parameters and
/// one gradient vector per step.
#[derive(Clone, PartialEq)]
pub struct OptCase {
    /// Moment hyperparameters and RAdam threshold.
    pub hyper: RadamHyper,
    /// Learning rate.
    pub learning_rate: f64,
    /// Dtype of the parameters.
    pub dtype: DType,
    /// Initial values of the flat leaf.
    pub params: Vec<f64>,
    /// One gradient vector per step, each of `params.len()` values.
    pub grads: Vec<Vec<f64>>,
}

impl std::fmt::Debug for OptCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let h = &self.hyper;
        write!(
            f,
            "OptCase {{ {} b1={} b2={} eps={:e} eps_root={:e} nesterov={} threshold={} lr={}, params={:?}, grads({} steps)={:?} }}",
            self.dtype, h.moments.b1, h.moments.b2, h.moments.eps, h.moments.eps_root,
            h.moments.nesterov, h.threshold, self.learning_rate, self.params, self.grads.len(), self.grads
        )
    }
}

/// `b2` values whose branch schedules differ, plus anything in (0, 1).
pub fn b2() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.999),
        Just(0.99),
        Just(0.9),
        Just(0.5),
        Just(0.6),
        Just(1.0 / 3.0),
        (0.0f64..1.0),
    ]
}

/// Gradient entries: normal-sized, zeros, tiny and large (|g| <= 1e4; beyond `sqrt(f32::MAX)`
/// `g*g` overflows in f32, outside the finiteness laws' domain).
pub fn grad_value() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => -3.0f64..3.0,
        1 => Just(0.0),
        1 => -1e-20f64..1e-20,
        1 => -1e4f64..1e4,
    ]
}

/// RAdam hyperparameters over their legal ranges (thresholds include ill-posed ones).
pub fn radam_hyper() -> impl Strategy<Value = RadamHyper> {
    (
        prop_oneof![Just(0.9), 0.0f64..1.0],
        b2(),
        prop_oneof![Just(1e-8), Just(1e-3), 1e-12f64..1.0],
        prop_oneof![3 => Just(0.0), 1 => Just(1e-8)],
        any::<bool>(),
        prop_oneof![3 => Just(5.0), 1 => Just(4.0), 1 => 0.0f64..30.0],
    )
        .prop_map(|(b1, b2, eps, eps_root, nesterov, threshold)| RadamHyper {
            moments: AdamHyper {
                b1,
                b2,
                eps,
                eps_root,
                nesterov,
            },
            threshold,
        })
}

/// A whole case: up to `max_steps` steps over a leaf of up to 6 elements (0 included).
pub fn opt_case(max_steps: usize) -> impl Strategy<Value = OptCase> {
    (
        radam_hyper(),
        0usize..6,
        1usize..=max_steps,
        prop_oneof![Just(DType::F64), Just(DType::F32), Just(DType::F16)],
    )
        .prop_flat_map(|(hyper, n, steps, dtype)| {
            (
                Just(hyper),
                prop_oneof![Just(1e-3), 1e-5f64..1.0],
                Just(dtype),
                prop::collection::vec(-2.0f64..2.0, n),
                prop::collection::vec(prop::collection::vec(grad_value(), n), steps),
            )
        })
        .prop_map(|(hyper, learning_rate, dtype, params, grads)| OptCase {
            hyper,
            learning_rate,
            dtype,
            params,
            grads,
        })
}
