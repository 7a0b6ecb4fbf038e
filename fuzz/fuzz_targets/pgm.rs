//! Greyscale images as `train-cnf --data` reads them: arbitrary bytes through the PGM reader and,
//! when it accepts them, points drawn from the image's density (`harness::laws::fuzz::pgm`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(msg) = harness::laws::fuzz::pgm(data) {
        panic!("law violated: PGM image: {msg}");
    }
});
