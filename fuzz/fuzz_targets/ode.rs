//! ODE solves of arbitrary small polynomial systems, intervals, tolerances and controllers.
#![no_main]
harness::install_counting_allocator!();
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(msg) = harness::laws::fuzz::ode(data) {
        panic!("law violated: {msg}");
    }
});
