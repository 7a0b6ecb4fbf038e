//! `stack-vmap-fp32`: the stacked model built the way equinox's `filter_vmap` did it (equinox
//! #673) where a bounded strategy is required. Asked for `chunked-direct` (or `preallocated`),
//! this build materialises every layer's f32 weights at once and only then casts — the values are
//! bit-identical, only the peak is `N*P*(4+s)` instead of `N*P*s + chunk`. The peak law catches
//! it: its counterexample is the smallest model whose f32 copy no longer hides inside the bound's
//! slack, and it prints the measured ratio.

use super::Mutant;
use crate::laws::stack::{peaks_within_bounds, stack_case, InitSubject};
use crate::laws::{check_property, DEFAULT_SEED};
use crate::stack::{build_any, AnyBuilt, Observer, StackConfig, Strategy};

/// Every bounded strategy replaced by vmap-then-cast.
pub struct VmapFp32;

impl InitSubject for VmapFp32 {
    fn build(
        &self,
        cfg: &StackConfig,
        seed: u64,
        strategy: Strategy,
        obs: &mut dyn Observer,
    ) -> crate::reference::Result<AnyBuilt> {
        let s = match strategy {
            Strategy::ChunkedDirect | Strategy::Preallocated => Strategy::VmapF32ThenCast,
            other => other,
        };
        build_any(cfg, seed, s, obs)
    }
}

pub fn mutant() -> Mutant {
    Mutant {
        name: "stack-vmap-fp32",
        incident: "equinox #673 (filter_vmap init in f32, then cast)",
        law: "stack_peak_within_bound",
        run: || {
            let _g = crate::probe::exclusive();
            check_property(
                "stack_peak_within_bound",
                64,
                DEFAULT_SEED,
                stack_case(8, 48, 96),
                |x| peaks_within_bounds(x, &VmapFp32),
            )
        },
    }
}
