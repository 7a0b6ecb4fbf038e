//! `muon-captured-coeffs`: the Newton–Schulz coefficients converted once — to the dtype and on
//! the shard that first uses them — and reused by every later trace (optax #1186: a coefficient
//! array built outside the state was captured by the first trace and leaked into later ones
//! under sharding). Here the capture is a cell filled by the first conversion; every later
//! conversion returns it, whatever the dtype it is for. An f32 (or f16, whose arithmetic is f32)
//! parameter updated first makes a later f64 parameter use f32-rounded coefficients, so its
//! update is no longer bit-identical to the reference's.

use super::Mutant;
use crate::backend::{Array, Float};
use crate::laws::muon::{shard_case, sharding_and_order_invariant, subject_with};
use crate::laws::{check_property, DEFAULT_SEED};
use crate::optim::muon::CoeffPolicy;
use std::sync::Mutex;

/// Converts once, then hands out the captured conversion.
#[derive(Debug, Default)]
pub struct CapturedCoeffs {
    captured: Mutex<Option<Array<f64>>>,
}

impl CoeffPolicy for CapturedCoeffs {
    fn convert<A: Float>(&self, c: &Array<f64>) -> Array<f64> {
        let mut cell = self.captured.lock().expect("not poisoned");
        cell.get_or_insert_with(|| c.map(|x| A::of_f64(x).as_f64()))
            .clone()
    }
}

pub fn mutant() -> Mutant {
    Mutant {
        name: "muon-captured-coeffs",
        incident: "optax #1186 / PR #1193 (coefficients captured outside the state)",
        law: "muon_sharding_and_order_invariant",
        run: || {
            check_property(
                "muon_sharding_and_order_invariant",
                64,
                DEFAULT_SEED,
                shard_case(),
                |case| {
                    let subject = subject_with(case, CapturedCoeffs::default())?;
                    sharding_and_order_invariant(case, &subject)
                },
            )
        },
    }
}
