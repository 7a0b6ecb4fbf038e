//! Muon over arbitrary shapes (up to 48x48, 1xN, Nx1, zero-size), coefficient tensors (valid,
//! malformed, non-finite), scalars, dtypes and gradients: typed errors or the laws, never a panic.
#![no_main]
harness::install_counting_allocator!();
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(msg) = harness::laws::fuzz::muon(data) {
        panic!("law violated: {msg}");
    }
});
