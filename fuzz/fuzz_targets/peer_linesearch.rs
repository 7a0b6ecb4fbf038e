//! argmin's backtracking line search on arbitrary quadratics and Rosenbrock starts and raw
//! hyperparameters (`peers::fuzz::linesearch`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(msg) = peers::fuzz::linesearch(data) {
        panic!("law violated: {msg}");
    }
});
