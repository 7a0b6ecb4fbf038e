//! CNF log-density, sampling and loss gradient of arbitrary small flows, points and settings.
#![no_main]
harness::install_counting_allocator!();
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(msg) = harness::laws::fuzz::cnf(data) {
        panic!("law violated: {msg}");
    }
});
