//! Golden files as the `golden` command reads them: arbitrary text through the parser and, when
//! it parses, the replay, twice (`harness::laws::fuzz::golden`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(msg) = harness::laws::fuzz::golden(data) {
        panic!("law violated: golden file: {msg}");
    }
});
