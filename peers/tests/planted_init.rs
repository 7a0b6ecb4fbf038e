//! The stacked-initialisation laws of the candle-nn rows (`stack_peak_within_bound`,
//! `stack_model_holds_final_bytes`) pass on candle-nn's direct f16 build; here each is shown
//! failing on the same build with a bug planted in the adapter: an f32 copy of every tensor kept
//! alive after the build.

use candle_core::{DType, Tensor};
use peers::candle_nn_stack_adapter::{build, check, table_config, Block, Path};
use std::cell::RefCell;

// The laws measure this binary's allocations.
harness::install_counting_allocator!();

thread_local! {
    /// Where the planted bug keeps its f32 copies (a cache nobody reads).
    static KEPT: RefCell<Vec<Tensor>> = const { RefCell::new(Vec::new()) };
}

/// The adapter's build, then an f32 copy of every tensor of the model kept alive.
fn keeps_an_f32_copy(cfg: &harness::stack::StackConfig, path: Path) -> Result<Vec<Block>, String> {
    let model = build(cfg, path)?;
    for t in model.iter().flat_map(Block::tensors) {
        let copy = t.to_dtype(DType::F32).map_err(|e| e.to_string())?;
        KEPT.with(|k| k.borrow_mut().push(copy));
    }
    Ok(model)
}

#[test]
fn the_stack_laws_fail_on_a_direct_build_that_keeps_an_f32_copy() {
    let cfg = table_config();
    let verdict = |rows: &[(Path, &str, Result<String, String>)], law: &str| {
        rows.iter()
            .find(|(p, l, _)| *p == Path::Direct && *l == law)
            .map(|(_, _, v)| v.clone())
            .expect("a row")
    };
    // the adapter as it is: both laws hold on the direct build
    let honest = check(&cfg, &build);
    for law in ["stack_peak_within_bound", "stack_model_holds_final_bytes"] {
        assert!(verdict(&honest, law).is_ok(), "{law}: {honest:?}");
    }
    // planted: 8 layers' f32 copy (N*P*4 = 16,818,176 bytes) is more than the one f32 layer
    // (P*4 = 2,102,272 bytes) the bound allows
    let planted = check(&cfg, &keeps_an_f32_copy);
    KEPT.with(|k| k.borrow_mut().clear());
    for law in ["stack_peak_within_bound", "stack_model_holds_final_bytes"] {
        let e = verdict(&planted, law).expect_err(law);
        assert!(e.contains("bytes over"), "{law}: {e}");
    }
}
