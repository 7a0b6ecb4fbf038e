//! Replays the committed fuzz corpus and every minimised crash (fixtures/regressions/, each with
//! a line in its README on what broke) through the same entry points the fuzz targets use.
//! (The `stack` target measures memory: its corpus is replayed by the serialised `memory.rs`.)

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
