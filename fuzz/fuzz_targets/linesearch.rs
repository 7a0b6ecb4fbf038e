//! Line-search laws over arbitrary quadratics, start points, hyperparameters (invalid ones must be
//! typed errors) and objectives that are NaN/inf at chosen points.
#![no_main]
harness::install_counting_allocator!();
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(msg) = harness::laws::fuzz::linesearch(data) {
        panic!("law violated: {msg}");
    }
});
