//! Wrong RAdam configurations, planted: the reference's forms built with the rectification
//! threshold one unit higher than the case asks for (a comparison of `rho_t` written against
//! `threshold + 1`, or `<=` where `<` belongs on an integer-valued schedule). The laws of
//! `laws::radam` that hold the forms to each other and to the closed-form schedule must catch it.

use crate::optim::{self, Chain, RadamHyper, ScaleByLearningRate, ScaleByRadam, Selection};
use crate::reference::Result;

/// `hyper` with its threshold one unit higher.
fn shifted(hyper: RadamHyper) -> RadamHyper {
    RadamHyper {
        threshold: hyper.threshold + 1.0,
        ..hyper
    }
}

/// The `Branch` form of RAdam, rectifying one unit of `rho_t` late.
///
/// ```
/// use harness::laws::radam::where_matches_branch_with;
/// use harness::laws::strategies::opt_case;
/// use harness::laws::{check_property, DEFAULT_SEED};
/// use harness::mutants::radam_forms::branch_rectifying_late;
/// let r = check_property("forms", 128, DEFAULT_SEED, opt_case(12), |c| {
///     where_matches_branch_with(c, &branch_rectifying_late)
/// });
/// assert!(r.is_err());
/// ```
pub fn branch_rectifying_late(
    learning_rate: f64,
    hyper: RadamHyper,
) -> Result<Chain<ScaleByRadam, ScaleByLearningRate>> {
    optim::radam(learning_rate, shifted(hyper), Selection::Branch)
}

/// RAdam's scaling (the `Where` form), rectifying one unit of `rho_t` late.
pub fn scaling_rectifying_late(hyper: RadamHyper) -> Result<ScaleByRadam> {
    ScaleByRadam::new(shifted(hyper), Selection::Where)
}
