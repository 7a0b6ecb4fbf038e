//! candle-optimisers' Adam and RAdam on arbitrary hyperparameters, sizes and gradients
//! (`peers::fuzz::optim`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(msg) = peers::fuzz::optim(data) {
        panic!("law violated: {msg}");
    }
});
