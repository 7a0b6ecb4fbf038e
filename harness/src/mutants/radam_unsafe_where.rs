//! `radam-unsafe-where`: both branches computed without sanitising (optax PR #974 as first
//! written). The rectified branch multiplies by the raw `r_t`, which is NaN for `2 < rho_t < 4`
//! (default b2: steps 3 and 4). The forward value is masked by the selection, so only the
//! branch-finiteness law sees it.

use super::Mutant;
use crate::backend::Float;
use crate::laws::radam::{branches_finite, BranchSubject};
use crate::laws::{check_property, strategies::opt_case, DEFAULT_SEED};
use crate::optim::radam::{RadamBranches, Rectification};
use crate::optim::{MomentState, ScaleByRadam};
use crate::reference::Result;
use crate::tree::Tree;

/// Branches with the raw rectifier.
pub struct UnsafeWhere;

impl BranchSubject for UnsafeWhere {
    fn branches<E: Float>(
        &self,
        opt: &ScaleByRadam,
        grads: &Tree<E>,
        state: &MomentState<E::Acc>,
        params: &Tree<E>,
    ) -> Result<RadamBranches<E::Acc>> {
        opt.branches_with_r(grads, state, params, |r: &Rectification| r.r)
    }
}

pub fn mutant() -> Mutant {
    Mutant {
        name: "radam-unsafe-where",
        incident: "optax #974 (jnp.where without sanitising)",
        law: "radam_branches_finite",
        run: || {
            check_property(
                "radam_branches_finite",
                256,
                DEFAULT_SEED,
                opt_case(12),
                |c| branches_finite(c, &UnsafeWhere),
            )
        },
    }
}
