//! Stacked init over arbitrary layer counts, widths, hidden sizes, dtypes and seeds (8 MiB cap):
//! every strategy bit-identical, f16 = cast(f32), scan = loop, measured peaks within bounds.
#![no_main]
harness::install_counting_allocator!();
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(msg) = harness::laws::fuzz::stack(data) {
        panic!("law violated: {msg}");
    }
});
