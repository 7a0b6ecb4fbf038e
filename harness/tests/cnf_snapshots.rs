//! Reviewed CNF numerics (`cargo insta review`; CI never writes snapshots): log-likelihoods of a
//! fixed model in f64 and f32 (exact and Hutchinson trace), the first training losses of a
//! fixed seed, and the first points of every data set's stream, rounded to 6 significant digits.

harness::install_counting_allocator!();

use harness::cnf::data::Dataset;
use harness::cnf::train::{TrainConfig, Trainer};
use harness::cnf::{flow, CnfConfig, CnfParams, Probe, TraceEstimator};

use harness::tolerance::snapshot_rounded;

const POINTS: [f64; 10] = [0.0, 0.0, 1.0, -0.5, -2.0, 1.5, 0.3, 3.0, -4.0, -4.0];

#[derive(serde::Serialize)]
struct LogLik {
    model: String,
    exact_f64: Vec<f64>,
    exact_f32: Vec<f64>,
    hutchinson_rademacher_f64: Vec<f64>,
}

#[test]
fn log_likelihoods_of_a_fixed_model_match_the_reviewed_snapshot() {
    let cfg = CnfConfig {
        width: 8,
        depth: 2,
        blocks: 2,
        ..CnfConfig::default()
    };
    let p = CnfParams::<f64>::init(cfg, 0).unwrap();
    let exact = flow::log_likelihood(&p, &POINTS, None).unwrap();
    let p32 = p.cast::<f32>();
    let x32: Vec<f32> = POINTS.iter().map(|&v| v as f32).collect();
    let exact32 = flow::log_likelihood(&p32, &x32, None).unwrap();
    let hp = CnfParams {
        cfg: CnfConfig {
            trace: TraceEstimator::Hutchinson(Probe::Rademacher),
            ..cfg
        },
        ..p.clone()
    };
    let probes = [1.0, -1.0, -1.0, 1.0, 1.0, 1.0, -1.0, -1.0, 1.0, -1.0];
    let hutch = flow::log_likelihood(&hp, &POINTS, Some(&probes)).unwrap();
    insta::assert_json_snapshot!(
        "log_likelihoods_of_a_fixed_model",
        LogLik {
            model: "init seed 0, 2 blocks, width 8, depth 2, Tsit5 dt0 0.05 on [0, 0.5]".into(),
            exact_f64: exact.iter().map(|&v| snapshot_rounded(v)).collect(),
            exact_f32: exact32
                .iter()
                .map(|&v| snapshot_rounded(v as f64))
                .collect(),
            hutchinson_rademacher_f64: hutch.iter().map(|&v| snapshot_rounded(v)).collect(),
        }
    );
}

#[test]
fn first_training_losses_of_a_fixed_seed() {
    let cfg = CnfConfig {
        width: 8,
        depth: 1,
        blocks: 1,
        ..CnfConfig::default()
    };
    let tc = TrainConfig {
        batch: 64,
        seed: 0,
        ..TrainConfig::default()
    };
    let mut t = Trainer::new(cfg, tc, Dataset::TwoMoons).unwrap();
    let mut s = t.init().unwrap();
    let mut losses = vec![];
    for _ in 0..8 {
        let (next, l) = t.step(&s).unwrap();
        s = next;
        losses.push(snapshot_rounded(l));
    }
    insta::assert_json_snapshot!(losses);
}

/// The data streams are part of every seeded result (training losses, densities, the report):
/// a change of which uniform picks what moves every number downstream while keeping each data
/// set's distribution, which no distributional test can see. Eight points per data set, key 7.
#[derive(serde::Serialize)]
struct Streams {
    two_moons: Vec<[f64; 2]>,
    checkerboard: Vec<[f64; 2]>,
    image_ring_h: Vec<[f64; 2]>,
}

#[test]
fn first_points_of_every_data_set_stream() {
    let image = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/cnf/ring-h.pgm");
    let points = |d: Dataset| {
        let mut out = vec![0.0; 16];
        d.sample_into(7, 0, &mut out);
        out.chunks_exact(2)
            .map(|p| [snapshot_rounded(p[0]), snapshot_rounded(p[1])])
            .collect()
    };
    insta::assert_json_snapshot!(Streams {
        two_moons: points(Dataset::TwoMoons),
        checkerboard: points(Dataset::Checkerboard),
        image_ring_h: points(Dataset::parse(image).unwrap()),
    });
}
