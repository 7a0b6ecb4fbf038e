//! Replays the committed `peer_ode`, `peer_optim` and `peer_linesearch` corpora and every minimised crash
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
fn peer_linesearch_corpus_and_regressions_replay_clean() {
    let n = replay("peer_linesearch", peers::fuzz::linesearch);
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

/// The case a committed `peer_optim` regression input stands for, run as the target runs it (f16
/// cases in f32).
fn optim_case(name: &str) -> harness::laws::strategies::OptCase {
    use arbitrary::{Arbitrary, Unstructured};
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/regressions/peer_optim")
        .join(name);
    let data = std::fs::read(path).unwrap();
    let input =
        harness::laws::fuzz::RadamInput::arbitrary_take_rest(Unstructured::new(&data)).unwrap();
    let mut case = input.to_case();
    if case.dtype == harness::backend::DType::F16 {
        case.dtype = harness::backend::DType::F32;
    }
    case
}

/// The first update of `algorithm` on `case` in the peer that is not finite, if any (steps the
/// peer refuses end the run).
fn first_non_finite<E: peers::candle_optimisers_adapter::PeerFloat>(
    algorithm: harness::subject::optimizer::Algorithm,
    case: &harness::laws::strategies::OptCase,
) -> Option<(usize, Vec<E>)> {
    use harness::laws::radam::leaf;
    use harness::subject::optimizer::{Optimizer, OptimizerSpec};
    use peers::candle_optimisers_adapter::{make_adam, make_radam};
    let spec = OptimizerSpec {
        algorithm,
        dtype: <E as harness::backend::Float>::DTYPE,
        learning_rate: case.learning_rate,
        hyper: case.hyper,
    };
    let mut opt = match algorithm {
        harness::subject::optimizer::Algorithm::Adam => make_adam(&spec),
        _ => make_radam(&spec),
    }
    .unwrap();
    let mut params = leaf::<E>(&case.params);
    let mut state = opt.init(&params).unwrap();
    for (i, g) in case.grads.iter().enumerate() {
        let (updates, next) = opt.update(&leaf::<E>(g), &state, &params).ok()?;
        let u = updates.get("w").unwrap().data().to_vec();
        if u.iter().any(|v| !harness::backend::Float::is_finite(*v)) {
            return Some((i + 1, u));
        }
        params = harness::tree::apply_updates(&params, &updates).unwrap();
        state = next;
    }
    None
}

#[test]
fn the_committed_optimizer_crashes_still_reach_the_findings_they_were_found_for() {
    use harness::backend::DType;
    use harness::subject::optimizer::Algorithm;
    use peers::fuzz::known_optim_finding;
    // an eps that is 0 in f32, zero gradients: Adam's first update is 0/0
    let case = optim_case("eps-zero-in-f32-zero-gradient");
    assert_eq!(case.dtype, DType::F32, "{case:?}");
    assert!(case.hyper.moments.eps > 0.0 && case.hyper.moments.eps as f32 == 0.0);
    assert!(known_optim_finding(Algorithm::Adam, &case));
    let (step, u) = first_non_finite::<f32>(Algorithm::Adam, &case).expect("a non-finite update");
    assert_eq!(step, 1);
    assert!(u.iter().all(|v| v.is_nan()), "{u:?}");
    // f64 RAdam, eps below 1 / f64::MAX, zero gradients: the first rectified step multiplies
    // the factor's overflowed reciprocal 1/eps = inf by m_hat = 0
    let case = optim_case("radam-rectified-factor-overflows");
    assert_eq!(case.dtype, DType::F64, "{case:?}");
    assert!((1.0 / case.hyper.moments.eps).is_infinite(), "{case:?}");
    assert!(known_optim_finding(Algorithm::RAdam, &case));
    assert!(!known_optim_finding(Algorithm::Adam, &case));
    assert!(case.grads.iter().flatten().all(|&g| g == 0.0), "{case:?}");
    let (_, u) = first_non_finite::<f64>(Algorithm::RAdam, &case).expect("a non-finite update");
    assert!(u.iter().all(|v| v.is_nan()), "{u:?}");
    // Adam on the same case stays finite
    assert_eq!(first_non_finite::<f64>(Algorithm::Adam, &case), None);
}
