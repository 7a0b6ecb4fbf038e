//! The CNF laws hold on the reference and fail, with small counterexamples, on re-created bugs;
//! bad input gives typed errors.

harness::install_counting_allocator!();

mod common;

use common::assert_law_holds;
use harness::cnf::flow;
use harness::cnf::{CnfConfig, CnfParams, Probe, TraceEstimator};
use harness::laws::cnf::*;
use harness::mutants::cnf_flow::{self, ll as mutant_ll, FlowBug};
use harness::ode::grad::GradMode;
use harness::reference::Error;

fn two_block_linear() -> LinearCase {
    // Non-commuting blocks (a shear and a rotation-like matrix), so block order matters.
    LinearCase {
        d: 2,
        blocks: vec![
            (vec![0.0, 1.0, 0.0, 0.0], vec![0.0, 0.0]),
            (vec![0.5, 0.0, -1.0, 0.3], vec![1.0, -1.0]),
        ],
        x: vec![1.0, -2.0, 0.5, 0.5],
        t1: 0.5,
    }
}

fn small_model() -> ModelCase {
    ModelCase {
        cfg: CnfConfig {
            data_size: 2,
            width: 4,
            depth: 1,
            blocks: 2,
            ..CnfConfig::default()
        },
        seed: 7,
        scale: 1.0,
        x: vec![0.3, -0.5, 1.0, 0.2],
    }
}

#[test]
fn cnf_linear_field_law_holds() {
    assert_law_holds("cnf_linear_field_closed_form");
}

#[test]
fn linear_law_catches_each_flow_mutation() {
    let c = two_block_linear();
    assert!(linear_closed_form_with(&c, reference_ll).is_ok());
    for m in [
        FlowBug::ForwardBlockOrder,
        FlowBug::DeltaNotCarried,
        FlowBug::TraceSignFlipped,
    ] {
        let err = linear_closed_form_with(&c, mutant_ll(m)).unwrap_err();
        assert!(err.contains("closed form"), "{m:?}: {err}");
    }
}

#[test]
fn linear_and_round_trip_laws_fail_a_log_likelihood_with_no_values() {
    let c = two_block_linear();
    let nothing = |_: &CnfParams<f64>, _: &[f64]| Ok(Vec::new());
    let err = linear_closed_form_with(&c, nothing).unwrap_err();
    assert_eq!(err, "log p per sample: 0 values, want 2");
    use proptest::strategy::{Strategy, ValueTree};
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mc = model_case(3)
        .new_tree(&mut runner)
        .expect("a model case")
        .current();
    let err = sample_then_evaluate_with(&mc, reference_sample, nothing).unwrap_err();
    assert!(err.starts_with("log p evaluated: 0 values, want "), "{err}");
}

#[test]
fn linear_trace_term_alone_is_minus_t_times_trace() {
    // f(z) = A z with A = 0.5 * diag(1, -3) (b2 = 0): log p(x) - log N(y(t0)) = -T tr(A) = 0.5.
    let c = LinearCase {
        d: 2,
        blocks: vec![(vec![1.0, 0.0, 0.0, -3.0], vec![0.0, 0.0])],
        x: vec![0.0, 0.0],
        t1: 0.5,
    };
    let lp = reference_ll(&c.params(), &c.x).unwrap()[0];
    let want = -(2.0 * std::f64::consts::PI).ln() + 0.5; // log N(0) in 2-D plus the trace term
    assert!((lp - want).abs() < 1e-12, "{lp} vs {want}");
}

#[test]
fn cnf_round_trip_and_normalisation_laws_hold() {
    assert_law_holds("cnf_sample_then_evaluate");
    assert_law_holds("cnf_density_normalised");
}

#[test]
fn round_trip_law_fails_when_evaluation_does_not_reverse_the_blocks() {
    // Sampling runs block 0 then 1; an evaluation that also runs 0 then 1 (backwards in time)
    // does not invert it.
    let c = small_model();
    assert!(sample_then_evaluate_with(&c, reference_sample, reference_ll).is_ok());
    let err =
        sample_then_evaluate_with(&c, reference_sample, mutant_ll(FlowBug::ForwardBlockOrder))
            .unwrap_err();
    assert!(err.contains("log p at sampling"), "{err}");
}

#[test]
fn a_consistent_trace_sign_flip_passes_the_round_trip_but_not_normalisation() {
    // Why both laws exist: flipping the sign in sampling and evaluation alike is self-consistent.
    let c = ModelCase {
        x: vec![0.0, 0.0],
        ..small_model()
    };
    let flipped_sample: Sampler = |p, z| cnf_flow::sample(FlowBug::TraceSignFlipped, p, z);
    let flipped = mutant_ll(FlowBug::TraceSignFlipped);
    assert!(sample_then_evaluate_with(&c, flipped_sample, flipped).is_ok());
    let err = density_normalised_with(&c, flipped).unwrap_err();
    assert!(err.contains("integrates to"), "{err}");
}

#[test]
fn normalisation_law_fails_when_delta_is_not_carried() {
    let c = ModelCase {
        cfg: CnfConfig {
            width: 4,
            depth: 1,
            blocks: 2,
            ..CnfConfig::default()
        },
        seed: 3,
        scale: 1.0,
        x: vec![0.0, 0.0],
    };
    assert!(density_normalised_with(&c, reference_ll).is_ok());
    let err = density_normalised_with(&c, mutant_ll(FlowBug::DeltaNotCarried)).unwrap_err();
    assert!(err.contains("integrates to"), "{err}");
}

#[test]
fn cnf_trace_laws_hold() {
    assert_law_holds("cnf_exact_trace_matches_fd");
    assert_law_holds("cnf_hutchinson_unbiased");
}

#[test]
fn exact_trace_law_fails_on_a_trace_that_reads_one_diagonal_entry() {
    // The re-created bug: the trace of only the first tangent direction (J_00 instead of sum J_jj).
    fn first_entry_only(p: &CnfParams<f64>, t: f64, y: &[f64]) -> Vec<f64> {
        let d = p.cfg.data_size;
        let n = y.len() / d;
        let mut e = vec![0.0; n * d];
        for i in 0..n {
            e[i * d] = 1.0;
        }
        let field = harness::cnf::field::BlockField::new(
            &p.layout,
            &p.blocks[0],
            n,
            harness::cnf::field::Tangents::Probes(&e),
        );
        let (mut f, mut tr) = (vec![0.0; n * d], vec![0.0; n]);
        field.eval_parts(t, y, &mut f, &mut tr);
        tr
    }
    let c = small_model();
    assert!(exact_trace_matches_fd_with(&c, exact_trace).is_ok());
    let err = exact_trace_matches_fd_with(&c, first_entry_only).unwrap_err();
    assert!(err.contains("finite differences"), "{err}");
}

#[test]
fn hutchinson_law_fails_on_probes_with_variance_one_third() {
    // Uniform[-1, 1) probes: E[eps eps^T] = I/3, so the estimate is biased to tr(J)/3.
    fn uniform_probes(seed: u64, count: usize, d: usize) -> Vec<f64> {
        let k = harness::cnf::random::key(seed, 1, 1);
        (0..count * d)
            .map(|i| 2.0 * harness::cnf::random::uniform01(k, i as u64) - 1.0)
            .collect()
    }
    let c = ModelCase {
        x: vec![0.4, -0.3],
        scale: 1.5,
        ..small_model()
    };
    assert!(hutchinson_unbiased_with(&c, [gaussian_probes, rademacher_probes]).is_ok());
    let err = hutchinson_unbiased_with(&c, [uniform_probes, uniform_probes]).unwrap_err();
    assert!(err.contains("standard errors"), "{err}");
}

#[test]
fn cnf_loss_gradient_law_holds() {
    assert_law_holds("cnf_loss_gradient_matches_fd");
}

#[test]
fn gradient_law_fails_when_the_trace_is_detached_from_the_tape() {
    let c = small_model();
    assert!(loss_gradient_matches_fd_with(&c, flow::loss_and_grad).is_ok());
    let err =
        loss_gradient_matches_fd_with(&c, cnf_flow::loss_and_grad_detached_trace).unwrap_err();
    assert!(err.contains("finite differences"), "{err}");
}

#[test]
fn cnf_hand_vjp_law_holds() {
    assert_law_holds("cnf_hand_vjp_matches_tape");
}

#[test]
fn hand_vjp_law_fails_when_the_hand_written_vjp_drops_the_trace_cotangent() {
    // Two chunks (tiles = 2) and the exact trace: the detached variant loses d tr / d theta in
    // the hand-written backward pass only, and the tape (which keeps it) disagrees.
    let c = VjpCase {
        model: small_model(),
        tiles: 2,
        hutchinson: false,
    };
    assert!(hand_vjp_matches_tape_with(&c, flow::loss_and_grad).is_ok());
    let err = hand_vjp_matches_tape_with(&c, cnf_flow::loss_and_grad_detached_trace).unwrap_err();
    assert!(err.contains("on the tape"), "{err}");
}

#[test]
fn the_tape_reference_is_computed_independently_of_the_hand_written_vjp() {
    // An oracle that routes through the code it checks passes every comparison. The tape and the
    // hand-written VJP agree within CNF_MANUAL_VJP (the law above) but order their floating-point
    // operations differently, so some gradient entries differ in their last bits; identical bits
    // everywhere would mean the "reference" is the hand-written VJP itself.
    let c = VjpCase {
        model: small_model(),
        tiles: 1,
        hutchinson: false,
    };
    let (p, x, probes) = c.inputs();
    let mode = GradMode::FullTape;
    let hand = flow::loss_and_grad(&p, &x, probes.as_deref(), mode).unwrap();
    let tape = flow::loss_and_grad_on_tape(&p, &x, probes.as_deref(), mode).unwrap();
    let (h, t): (Vec<f64>, Vec<f64>) = (hand.grads.concat(), tape.grads.concat());
    assert_eq!(h.len(), t.len());
    let differ = h
        .iter()
        .zip(&t)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert!(differ > 0, "all {} entries bitwise equal", h.len());
}

#[test]
fn density_grid_uses_the_exact_trace_and_holds_unit_mass() {
    use harness::train::density_grid;
    let exact = small_model().params();
    let mut hutchinson = exact.clone();
    hutchinson.cfg.trace = TraceEstimator::Hutchinson(Probe::Gaussian);
    let (n, half) = (40, 7.0);
    let extent = (-half, half, -half, half);
    // There are no probes on a grid: whatever the model trains with, the grid uses the exact trace.
    let g = density_grid(&hutchinson, extent, n, 256).unwrap();
    assert_eq!((g.nx, g.ny, g.values.len()), (n, n, n * n));
    assert_eq!(
        g.values,
        density_grid(&exact, extent, n, 256).unwrap().values
    );
    assert!(g.values.iter().all(|v| v.is_finite() && *v >= 0.0));
    // Change of variables makes p a density: the midpoint rule over [-7, 7]^2 sums to 1 (the base
    // Gaussian's mass outside is < 1e-10, the rule converges geometrically on smooth, decaying
    // integrands, here with cells of 0.35: measured 1 - 1.2e-11), within the normalisation law's
    // tolerance.
    let cell = (2.0 * half / n as f64).powi(2);
    let mass = g.values.iter().sum::<f64>() * cell;
    assert!(
        (mass - 1.0).abs() < harness::tolerance::CNF_NORMALISATION,
        "mass {mass}"
    );
}

#[test]
fn a_sample_that_overflows_in_a_later_chunk_is_reported_at_its_batch_index() {
    // A linear block f(z) = 0.5 * 1e10 z (W1 = 1e10 I, sigmoid(0) = 0.5): a zero point stays
    // exactly zero, any other point overflows f64 within the ten constant steps. d = 3, and
    // GRAD_CHUNK + 3 points are two chunks; only the last point is non-zero.
    let d = 3;
    let mut w1 = vec![0.0; d * d];
    for i in 0..d {
        w1[i * d + i] = 1e10;
    }
    let c = LinearCase {
        d,
        blocks: vec![(w1, vec![0.0; d])],
        x: vec![],
        t1: 1.0,
    };
    let p = c.params();
    let point = [0.0, 0.0, 1.0];
    let index_of = |e: Error| match e {
        Error::NonFinite(m) if m.starts_with("sample at index ") => {
            m[16..].split(' ').next().unwrap().parse::<usize>().unwrap()
        }
        e => panic!("expected a sample overflow, got {e:?}"),
    };
    // Alone, the point overflows at element j of itself.
    let j = index_of(flow::sample(&p, &point, None).unwrap_err());
    assert!(j < d);
    let n = flow::GRAD_CHUNK + 3;
    let mut z = vec![0.0; n * d];
    z[(n - 1) * d..].copy_from_slice(&point);
    assert_eq!(
        index_of(flow::sample(&p, &z, None).unwrap_err()),
        (n - 1) * d + j
    );
}

#[test]
fn loss_and_grad_is_bitwise_identical_on_one_and_two_threads() {
    // 300 samples: four chunks of the parallel split (75 each)
    let c = VjpCase {
        model: small_model(),
        tiles: 2,
        hutchinson: true,
    };
    let (p, x, probes) = c.inputs();
    let run = |threads| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| flow::loss_and_grad(&p, &x, probes.as_deref(), GradMode::FullTape))
            .unwrap()
    };
    let (one, two) = (run(1), run(2));
    assert!(x.len() / p.cfg.data_size > flow::GRAD_CHUNK);
    assert_eq!(one.loss.to_bits(), two.loss.to_bits());
    assert_eq!(one.grads, two.grads);
}

#[test]
fn bad_batches_are_typed_errors() {
    let p = CnfParams::<f64>::init(
        CnfConfig {
            width: 4,
            depth: 1,
            blocks: 1,
            ..CnfConfig::default()
        },
        0,
    )
    .unwrap();
    assert!(matches!(
        flow::log_likelihood(&p, &[1.0, 2.0, 3.0], None),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        flow::log_likelihood(&p, &[f64::NAN, 0.0], None),
        Err(Error::InvalidHyper { name: "x", .. })
    ));
    assert!(matches!(
        flow::log_likelihood(&p, &[0.0, 0.0], Some(&[1.0, 1.0][..])),
        Err(Error::InvalidHyper { name: "probes", .. })
    ));
    assert_eq!(
        flow::log_likelihood(&p, &[], None).unwrap(),
        Vec::<f64>::new()
    );
    let hp = CnfParams::<f64>::init(
        CnfConfig {
            trace: TraceEstimator::Hutchinson(Probe::Gaussian),
            ..p.cfg
        },
        0,
    )
    .unwrap();
    assert!(matches!(
        flow::log_likelihood(&hp, &[0.0, 0.0], Some(&[1.0][..])),
        Err(Error::ShapeMismatch { .. })
    ));
    // A huge input overflows |y|^2: a typed error naming the sample, not a NaN.
    let err = flow::log_likelihood(&p, &[1e200, 0.0], None).unwrap_err();
    assert!(matches!(err, Error::NonFinite(_)), "{err}");
}

#[test]
fn same_seed_gives_bit_identical_training() {
    let c = TrainCase {
        steps: 3,
        seed: 11,
        width: 3,
        batch: 8,
        hutchinson: true,
        checkpointed: true,
    };
    let run = || {
        let mut t = trainer_for(&c).unwrap();
        let mut s = t.init().unwrap();
        let mut losses = vec![];
        for _ in 0..c.steps {
            let (n, l) = t.step(&s).unwrap();
            s = n;
            losses.push(l.to_bits());
        }
        (losses, s.params)
    };
    let (a, pa) = run();
    let (b, pb) = run();
    assert_eq!(a, b);
    harness::laws::bitwise_equal("params", &pa, &pb).unwrap();
}

#[test]
fn committed_pgm_image_loads_and_samples_on_its_strokes() {
    use harness::cnf::data::Dataset;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/cnf/ring-h.pgm");
    let ds = Dataset::parse(path).unwrap();
    assert_eq!(ds.name(), "image 48x48");
    let mut pts = vec![0.0; 400];
    ds.sample_into(harness::cnf::random::key(0, 1, 2), 0, &mut pts);
    // standardised: the sample mean is near 0 and the spread near 1 (closed form of the
    // standardisation; 200 samples give standard errors ~0.07)
    let mean = pts.iter().step_by(2).sum::<f64>() / 200.0;
    let var = pts
        .iter()
        .step_by(2)
        .map(|v| (v - mean).powi(2))
        .sum::<f64>()
        / 200.0;
    assert!(mean.abs() < 0.3 && (var - 1.0).abs() < 0.35, "{mean} {var}");
    assert!(Dataset::parse("no-such-set").is_err());
}

#[test]
fn train_for_reports_each_step_loss_and_a_time_per_step_within_the_wall_time() {
    use harness::train::train_for;
    let c = TrainCase {
        steps: 3,
        seed: 1,
        width: 2,
        batch: 4,
        hutchinson: false,
        checkpointed: false,
    };
    let mut t = trainer_for(&c).unwrap();
    let s = t.init().unwrap();
    let mut seen = vec![];
    let wall = std::time::Instant::now();
    let (r, _) = train_for(&mut t, s.clone(), 3, |i, l| seen.push((i, l))).unwrap();
    let wall = wall.elapsed().as_secs_f64();
    assert_eq!(r.steps, 3);
    assert_eq!(r.loss.len(), 3);
    let expect: Vec<(usize, f64)> = r.loss.iter().copied().enumerate().collect();
    assert_eq!(seen, expect, "progress sees every step's loss, in order");
    // Wall time over steps (each step takes far longer than the clock's resolution).
    // and the steps' total cannot exceed the wall time around the call.
    assert!(
        r.seconds_per_step > 0.0 && r.seconds_per_step * 3.0 <= wall,
        "{r:?}, wall {wall} s"
    );
    // No step: nothing to divide by, the figure is 0 (never NaN).
    let (r0, _) = train_for(&mut t, s, 0, |_, _| panic!("no step ran")).unwrap();
    assert_eq!((r0.steps, r0.loss.len(), r0.seconds_per_step), (0, 0, 0.0));
}

// ----------------------------------------------------------------------------------------------
// Training in f32.

#[test]
fn f32_loss_and_grad_match_f64_within_the_f32_tolerance() {
    // generated cases: exact and Hutchinson traces, one chunk and several
    harness::laws::check_property(
        "cnf_f32_loss_grad_matches_f64",
        24,
        harness::laws::DEFAULT_SEED,
        vjp_case(),
        |c| f32_loss_grad_matches_f64_with(c, flow::loss_and_grad),
    )
    .unwrap();
    // the tolerance is the f32 one of the one table, and tighter than the f16 rule
    let tol = harness::tolerance::cnf_loss_grad(harness::backend::DType::F32);
    assert!(tol.rtol < harness::tolerance::for_dtype(harness::backend::DType::F16).rtol);
}

#[test]
fn f32_check_fails_on_a_detached_trace_with_a_small_counterexample() {
    // a fixed small case: the f32 gradient without the trace's cotangent misses the f64 one
    let c = VjpCase {
        model: small_model(),
        tiles: 1,
        hutchinson: false,
    };
    assert!(f32_loss_grad_matches_f64_with(&c, flow::loss_and_grad).is_ok());
    let err =
        f32_loss_grad_matches_f64_with(&c, cnf_flow::loss_and_grad_detached_trace).unwrap_err();
    assert!(err.contains(", f64 "), "{err}");
    // the property runner finds it on generated cases and shrinks it to a small model
    let err = harness::laws::check_property(
        "cnf_f32_loss_grad_matches_f64",
        24,
        harness::laws::DEFAULT_SEED,
        vjp_case(),
        |c| f32_loss_grad_matches_f64_with(c, cnf_flow::loss_and_grad_detached_trace),
    )
    .unwrap_err();
    let width = err
        .split("width: ")
        .nth(1)
        .and_then(|s| s.split(|ch: char| !ch.is_ascii_digit()).next())
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or_else(|| panic!("no width in the counterexample: {err}"));
    assert!(width <= 2, "counterexample not shrunk: {err}");
}

#[test]
fn f32_hand_vjp_matches_the_tape_within_the_f32_tolerance() {
    // The tape is f64: on it each step's cotangents are computed from the f32 states and
    // rounded to f32, so the two f32 gradients differ by f32 rounding, not by a formula.
    for hutchinson in [false, true] {
        let c = VjpCase {
            model: small_model(),
            tiles: 2,
            hutchinson,
        };
        let (p, x, probes) = c.inputs();
        let p32 = p.cast::<f32>();
        let narrow = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
        let (x, probes) = (narrow(&x), probes.as_deref().map(narrow));
        let mode = GradMode::FullTape;
        let hand = flow::loss_and_grad(&p32, &x, probes.as_deref(), mode).unwrap();
        let tape = flow::loss_and_grad_on_tape(&p32, &x, probes.as_deref(), mode).unwrap();
        let tol = harness::tolerance::cnf_loss_grad(harness::backend::DType::F32);
        assert!(tol.close(hand.loss as f64, tape.loss as f64));
        for (h, t) in hand.grads.iter().zip(&tape.grads) {
            let scale = t.iter().fold(0.0f32, |m, v| m.max(v.abs())) as f64;
            for (&a, &b) in h.iter().zip(t) {
                let (a, b) = (a as f64, b as f64);
                assert!(
                    (a - b).abs() <= tol.atol + tol.rtol * scale.max(b.abs()),
                    "hand {a:e}, tape {b:e}, scale {scale:e}"
                );
            }
        }
    }
}

#[test]
fn f32_training_is_bitwise_identical_on_one_and_two_threads_and_for_the_same_seed() {
    use harness::cnf::data::Dataset;
    use harness::cnf::train::{TrainConfig, Trainer};
    // batch 300: three chunks of the parallel split; Hutchinson probes and checkpointing
    let cfg = CnfConfig {
        width: 8,
        depth: 2,
        blocks: 2,
        trace: TraceEstimator::Hutchinson(Probe::Gaussian),
        ..CnfConfig::default()
    };
    let tc = TrainConfig {
        batch: 300,
        seed: 3,
        grad: GradMode::Checkpointed { checkpoints: None },
        ..TrainConfig::default()
    };
    let run = |threads| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut t = Trainer::<f32>::typed(cfg, tc, Dataset::TwoMoons).unwrap();
            let mut s = t.init().unwrap();
            let mut losses = vec![];
            for _ in 0..3 {
                let (n, l) = t.step(&s).unwrap();
                s = n;
                losses.push(l.to_bits());
            }
            assert_eq!(t.traces(), 1);
            (losses, s.params)
        })
    };
    let (l1, p1) = run(1);
    let (l2, p2) = run(2);
    let (l2b, p2b) = run(2);
    assert_eq!(l1, l2);
    harness::laws::bitwise_equal("f32 params, 1 vs 2 threads", &p1, &p2).unwrap();
    assert_eq!(l2, l2b);
    harness::laws::bitwise_equal("f32 params, same seed", &p2, &p2b).unwrap();
    // the f32 losses track the f64 ones of the same seed (the weights start from the same draws),
    // within the f32 loss tolerance
    let mut t64 = Trainer::new(cfg, tc, Dataset::TwoMoons).unwrap();
    let l64 = t64.step(&t64.init().unwrap()).unwrap().1;
    let l32 = f64::from_bits(l1[0]);
    assert!(
        harness::tolerance::cnf_loss_grad(harness::backend::DType::F32).close(l32, l64),
        "{l32} vs {l64}"
    );
}
