//! The `harness` command line itself: arbitrary subcommands, flags, values and input files, run
//! in-process; every run exits 0, 1 or 2 and leaves its inputs untouched (`harness::cli::fuzz`).
#![no_main]
harness::install_counting_allocator!();
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(msg) = harness::cli::fuzz::run_input(data) {
        panic!("command-line contract broken: {msg}");
    }
});
