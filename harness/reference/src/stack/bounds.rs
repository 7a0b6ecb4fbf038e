//! The analytic peak of each strategy, as formulas in `N`, `D`, `H` and the dtype size `s`.
//!
//! With `P = 2*D*H + H + D` parameters per layer and `s` bytes per element of the final dtype,
//! the bytes a build holds at its worst moment, above what was live before it started, are:
//!
//! | strategy | peak bound |
//! |---|---|
//! | `vmap-f32-then-cast` | `N*P*4 + N*P*s + meta` (all f32 layers, and their cast, at once) |
//! | `layerwise-list` | `N*P*s + P*4 + meta` (the list so far, one f32 layer and its cast) |
//! | `list-then-stack` | `N*P*s + max(N*P*s, P*4) + meta` (the list, and the stack it is copied into) |
//! | `preallocated` | `N*P*s + P*4 + meta` (the stack, and one f32 layer) |
//! | `chunked-direct` | `N*P*s + 4*min(16384, D*H) + meta` (the stack, and <= 64 KiB of working memory: tiles live on the stack; the term covers the thread pool's bookkeeping when layers of >= 16384 elements are filled in parallel) |
//!
//! `meta = 1024 + 512*N` bytes covers the headers: the shape vectors of the arrays (at most three
//! `usize` each) and the layer list's own buffer (`N` layers of four array headers). The final
//! model is `N*P*s` bytes, so `chunked-direct`'s ratio `peak / final` is at most
//! `1 + (4*min(16384, D*H) + meta) / (N*P*s)`, which is <= 1.01 whenever
//! `N*P*s >= 100 * (65536 + 1024 + 512*N)` ([`chunked_within_one_percent`]) — e.g. the CLI's
//! 16 x 1024-4096-1024 f16 model (256 MiB final: ratio 1.0003).
//!
//! Guarantees: the bounds are exact formulas, computed without overflow for every valid
//! [`StackConfig`] (its constructor checks `N*P*12`).
//!
//! # References
//! equinox #673: vmap-then-cast measured at 5.3x the final bytes with equinox (XLA keeps extra
//! copies), list-then-stack 2.7x, the list 1.9x; the lower bound is 1.0x.
//!
//! # Example
//! ```
//! use harness_reference::backend::DType;
//! use harness_reference::stack::{bounds, StackConfig, Strategy};
//! let cfg = StackConfig::new(16, 1024, 4096, DType::F16)?;
//! let vmap = bounds::peak_bound(&cfg, Strategy::VmapF32ThenCast) as f64 / cfg.final_bytes() as f64;
//! assert!((vmap - 3.0).abs() < 1e-3); // (4 + 2) / 2
//! assert!(bounds::chunked_within_one_percent(&cfg));
//! # Ok::<(), harness_reference::Error>(())
//! ```

use super::config::StackConfig;
use super::init::{chunk_elems, Strategy};

/// Header bytes that do not scale with the parameters: `1024`.
pub const META_FIXED: usize = 1024;
/// Header bytes per layer: `512`.
pub const META_PER_LAYER: usize = 512;

/// `meta = 1024 + 512*N`.
pub fn meta_bytes(cfg: &StackConfig) -> usize {
    META_FIXED + META_PER_LAYER * cfg.layers()
}

/// The formula of a strategy's bound, as printed in tables.
pub fn formula(s: Strategy) -> &'static str {
    match s {
        Strategy::VmapF32ThenCast => "N*P*(4+s) + meta",
        Strategy::LayerwiseList => "N*P*s + P*4 + meta",
        Strategy::ListThenStack => "N*P*s + max(N*P*s, P*4) + meta",
        Strategy::Preallocated => "N*P*s + P*4 + meta",
        Strategy::ChunkedDirect => "N*P*s + 4*min(16384, D*H) + meta",
    }
}

/// The peak bound of `s` for `cfg`, in bytes (module table).
pub fn peak_bound(cfg: &StackConfig, s: Strategy) -> usize {
    let fin = cfg.final_bytes();
    let layer_f32 = cfg.params_per_layer() * 4;
    let body = match s {
        Strategy::VmapF32ThenCast => cfg.params() * 4 + fin,
        Strategy::LayerwiseList | Strategy::Preallocated => fin + layer_f32,
        Strategy::ListThenStack => fin + fin.max(layer_f32),
        Strategy::ChunkedDirect => fin + 4 * chunk_elems(cfg),
    };
    body + meta_bytes(cfg)
}

/// `peak_bound / final_bytes`.
pub fn ratio_bound(cfg: &StackConfig, s: Strategy) -> f64 {
    peak_bound(cfg, s) as f64 / cfg.final_bytes() as f64
}

/// Whether `chunked-direct`'s bound is within 1% of the final bytes:
/// `N*P*s >= 100 * (4*min(16384, D*H) + meta)`.
pub fn chunked_within_one_percent(cfg: &StackConfig) -> bool {
    cfg.final_bytes() >= 100 * (4 * chunk_elems(cfg) + meta_bytes(cfg))
}

/// Bytes the scan's working buffers take for a batch of `b` rows: two `[b, D]` activations in
/// the model dtype, one `[b, H]` hidden buffer in the accumulator dtype (`a` = 4 for f16/f32,
/// 8 for f64), plus headers — independent of `N`.
pub fn scan_activation_bytes(cfg: &StackConfig, batch: usize) -> usize {
    let acc = if cfg.elem_bytes() == 8 { 8 } else { 4 };
    2 * batch * cfg.width() * cfg.elem_bytes() + batch * cfg.hidden() * acc + META_FIXED
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::DType;

    #[test]
    fn bounds_order_as_expected_for_the_mistral_block() {
        let cfg = StackConfig::new(16, 1024, 4096, DType::F16).unwrap();
        let r = |s| ratio_bound(&cfg, s);
        // closed forms: 1 + 4/s = 3; 1 + 4/(N s) = 1.125; 2; 1.125; 1 + 65536/final
        assert!((r(Strategy::VmapF32ThenCast) - 3.0).abs() < 1e-4);
        assert!((r(Strategy::LayerwiseList) - 1.125).abs() < 1e-4);
        assert!((r(Strategy::ListThenStack) - 2.0).abs() < 1e-4);
        assert!((r(Strategy::Preallocated) - 1.125).abs() < 1e-4);
        assert!(r(Strategy::ChunkedDirect) < 1.0003);
    }

    #[test]
    fn tiny_models_are_not_within_one_percent() {
        let cfg = StackConfig::new(1, 1, 1, DType::F16).unwrap();
        assert!(!chunked_within_one_percent(&cfg));
    }
}
