//! Replays the committed `peer_ode` and `peer_optim` corpora and every minimised crash
//! (fixtures/regressions/peer_*/, each with a line in fixtures/regressions/README.md on what
//! broke) through the entry points the fuzz targets use.

use std::path::Path;

/// Every committed input of `target` through `run`; how many there were.
fn replay(target: &str, run: fn(&[u8]) -> Result<(), String>) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
    let mut n = 0;
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if let Err(msg) = run(&std::fs::read(&p).unwrap()) {
                panic!("{}: {msg}", p.display());
            }
            n += 1;
        }
    }
    n
}

#[test]
fn peer_ode_corpus_and_regressions_replay_clean() {
    let n = replay("peer_ode", peers::fuzz::ode);
    assert!(n >= 2, "only {n} inputs replayed");
}

#[test]
fn peer_optim_corpus_and_regressions_replay_clean() {
    let n = replay("peer_optim", peers::fuzz::optim);
    assert!(n >= 4, "only {n} inputs replayed");
}

#[test]
fn the_committed_crashes_still_reach_the_behaviour_they_were_found_for() {
    use arbitrary::{Arbitrary, Unstructured};
    use harness::subject::ode::{OdeSolver, Stepping};
    use peers::ode_solvers_adapter::{Method, OdeSolvers};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/regressions/peer_ode");
    let request = |name: &str| {
        let data = std::fs::read(dir.join(name)).unwrap();
        let x =
            harness::laws::fuzz::OdeInput::arbitrary_take_rest(Unstructured::new(&data)).unwrap();
        peers::fuzz::ode_request(&x)
    };
    // Dopri5 answers after one step more than the budget
    let r = request("dopri5-one-step-over-budget");
    assert!(matches!(r.stepping, Stepping::Adaptive { .. }));
    let s = OdeSolvers(Method::Dopri5).solve(&r).unwrap();
    assert_eq!(s.accepted + s.rejected, r.max_steps + 1, "{r:?}");
    // Rk4 overflows into NaN and reports success
    let r = request("rk4-overflow-to-nan-reported-as-success");
    assert!(r.y0.iter().all(|v| v.is_finite()), "{r:?}");
    let s = OdeSolvers(Method::Rk4).solve(&r).unwrap();
    assert!(s.y_final.iter().any(|v| v.is_nan()), "{s:?}");
}
