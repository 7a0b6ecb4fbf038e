//! Replays the committed fuzz corpus and every minimised crash (fixtures/regressions/, each with
//! a line in its README on what broke) through the same entry points the fuzz targets use.
//! (The `stack` target measures memory: its corpus is replayed by the serialised `memory.rs`.)

harness::install_counting_allocator!();

use std::path::Path;

fn replay(target: &str, run: fn(&[u8]) -> Result<(), String>) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
    let mut n = 0;
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            let data = std::fs::read(&p).unwrap();
            if let Err(msg) = run(&data) {
                panic!("{}: {msg}", p.display());
            }
            n += 1;
        }
    }
    n
}

#[test]
fn radam_corpus_and_regressions_replay_clean() {
    let n = replay("radam", harness::laws::fuzz::radam);
    assert!(n >= 4, "only {n} inputs replayed");
}

#[test]
fn ode_corpus_and_regressions_replay_clean() {
    let n = replay("ode", harness::laws::fuzz::ode);
    assert!(n >= 1, "only {n} inputs replayed");
}

#[test]
fn linesearch_corpus_and_regressions_replay_clean() {
    let n = replay("linesearch", harness::laws::fuzz::linesearch);
    assert!(n >= 10, "only {n} inputs replayed");
}

#[test]
fn linesearch_seed_corpus_decodes_to_the_intended_cases() {
    use arbitrary::{Arbitrary, Unstructured};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/corpus/linesearch");
    let read = |name: &str| {
        let data = std::fs::read(dir.join(name)).unwrap();
        harness::laws::fuzz::LineSearchInput::arbitrary_take_rest(Unstructured::new(&data))
            .unwrap()
            .to_case()
    };
    let c = read("rosenbrock-3d");
    assert_eq!(c.x0, vec![-0.5, 0.5, 1.2]);
    assert_eq!(c.hyper.max_backtracking_steps, 15);
    assert!(c.hyper.validate().is_ok());
    let c = read("invalid-decrease-factor");
    assert!(c
        .hyper
        .validate()
        .unwrap_err()
        .to_string()
        .contains("decrease_factor"));
    let c = read("nan-everywhere-recover");
    assert!(c.hyper.recover_from_zero_lr && c.poison.unwrap().value.is_nan());
}

#[test]
fn muon_corpus_and_regressions_replay_clean() {
    let n = replay("muon", harness::laws::fuzz::muon);
    assert!(n >= 5, "only {n} inputs replayed");
}

#[test]
fn cnf_corpus_and_regressions_replay_clean() {
    let n = replay("cnf", harness::laws::fuzz::cnf);
    assert!(n >= 1, "only {n} inputs replayed");
}

#[test]
fn cli_corpus_and_regressions_replay_clean() {
    let n = replay("cli", harness::cli::fuzz::run_input);
    assert!(n >= 100, "only {n} inputs replayed");
}

#[test]
fn golden_corpus_and_regressions_replay_clean() {
    let n = replay("golden", harness::laws::fuzz::golden);
    assert!(n >= 6, "only {n} inputs replayed");
}

#[test]
fn pgm_corpus_and_regressions_replay_clean() {
    let n = replay("pgm", harness::laws::fuzz::pgm);
    assert!(n >= 4, "only {n} inputs replayed");
}

fn golden_seed(name: &str) -> Vec<u8> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/corpus/golden");
    std::fs::read(dir.join(name)).unwrap()
}

#[test]
fn golden_target_fails_on_a_replay_whose_bits_change_between_calls() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // planted bug: every second replay flips the last bit of the output
    let calls = AtomicUsize::new(0);
    let flaky = |case: &harness::golden::Case| {
        let mut r = harness::golden::replay(case)?;
        if calls.fetch_add(1, Ordering::Relaxed) % 2 == 1 {
            let bits = u64::from_str_radix(&r.output_bits, 16).unwrap() ^ 1;
            r.output_bits = format!("{bits:016x}");
        }
        Ok(r)
    };
    let data = golden_seed("ode-lv-ralston-const-nondiv");
    harness::laws::fuzz::golden(&data).unwrap();
    let err = harness::laws::fuzz::golden_with(&data, &flaky).unwrap_err();
    assert!(
        err.contains("replaying case `ode-lv-ralston-const-nondiv` twice"),
        "{err}"
    );
}

#[test]
fn golden_target_fails_on_a_format_error_that_names_another_file() {
    // planted bug: the replay's format errors name a fixed file, not the case's
    let misnamed = |case: &harness::golden::Case| {
        Err(harness::Error::Golden {
            file: "case.json".into(),
            msg: format!("`{}`: unknown field", case.name),
        })
    };
    let data = golden_seed("muon-inf-params-zero-decay-f32");
    let err = harness::laws::fuzz::golden_with(&data, &misnamed).unwrap_err();
    assert!(err.contains("not a golden error naming the file"), "{err}");
    // and the real parser names the file on a malformed one
    harness::laws::fuzz::golden(b"{\"format\": \"golden-v1\", \"name\": 3}").unwrap();
}

#[test]
fn pgm_target_fails_on_draws_one_pixel_off() {
    use harness::cnf::data::{Dataset, ImageDensity};
    // 2x1: black on the left, white on the right; planted bug: every draw lands one pixel to
    // the right of the pixel the sampler picked (an index off by one)
    let im = ImageDensity::from_pgm(b"P2 2 1 255 0 255").unwrap();
    let mut wide = vec![0.0f64; 16];
    Dataset::Image(im.clone()).sample_into(3, 0, &mut wide);
    let narrow: Vec<f32> = wide.iter().map(|&v| v as f32).collect();
    harness::laws::fuzz::image_draws_hold(&im, &wide, &narrow).unwrap();
    // one pixel in pixel units is 1 / std_x in the standardised plane
    let (m, s) = (im.to_pixels(0.0, 0.0).0, im.to_pixels(1.0, 0.0).0);
    let step = 1.0 / (s - m);
    let shifted: Vec<f64> = wide
        .iter()
        .enumerate()
        .map(|(i, &v)| if i % 2 == 0 { v + step } else { v })
        .collect();
    let narrow: Vec<f32> = shifted.iter().map(|&v| v as f32).collect();
    let err = harness::laws::fuzz::image_draws_hold(&im, &shifted, &narrow).unwrap_err();
    assert!(
        err.contains("2x1 image: sample 0") && err.contains("no pixel of positive weight"),
        "{err}"
    );
}
