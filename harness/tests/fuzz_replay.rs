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
