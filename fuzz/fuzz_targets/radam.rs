//! RAdam/Adam laws over arbitrary hyperparameters, dtypes, shapes and gradient sequences.
#![no_main]
harness::install_counting_allocator!();
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(msg) = harness::laws::fuzz::radam(data) {
        panic!("law violated: {msg}");
    }
});
