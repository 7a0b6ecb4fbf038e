//! `ode_solvers`' methods on arbitrary small polynomial systems, intervals, tolerances and step
//! budgets (`peers::fuzz::ode`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(msg) = peers::fuzz::ode(data) {
        panic!("law violated: {msg}");
    }
});
