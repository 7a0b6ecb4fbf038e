//! Reviewed Muon numerics (`cargo insta review`; CI never writes snapshots): the singular-value
//! bands per preset (theory: range of the iteration polynomial over the band's input domain;
//! observation: Gaussian inputs), the first 6 updates of a fixed problem per dtype and preset
//! (rounded to 6 significant digits), and the state signature.

harness::install_counting_allocator!();

use harness::backend::{Array, Float};
use harness::laws::muon::{
    gaussian, ns_polynomial, singular_values, BAND_INPUT_FLOOR, DION_BAND, STANDARD_BAND,
};
use harness::optim::muon::NsPlan;
use harness::optim::{CoeffSpec, Muon, MuonHyper, Transform};
use harness::stage::HasSignature;
use harness::tree::{apply_updates, Tree};

use harness::tolerance::snapshot_rounded;

#[test]
fn singular_value_bands_per_preset() {
    let mut rows = Vec::new();
    for (preset, band) in [("standard", STANDARD_BAND), ("dion", DION_BAND)] {
        let opt = Muon::new(MuonHyper {
            ns_coeffs: CoeffSpec::Preset(preset.into()),
            ..MuonHyper::new(0.02)
        })
        .unwrap();
        let c = Transform::<f64>::init(&opt, &Tree::new())
            .unwrap()
            .ns_coeffs;
        // theory: P over [floor, 1] on a grid of 1e5 points
        let grid = (0..=100_000).map(|i| {
            let s = BAND_INPUT_FLOOR + (1.0 - BAND_INPUT_FLOOR) * i as f64 / 1e5;
            ns_polynomial(&c, 5, s)
        });
        let (pmin, pmax) = grid.fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(y), b.max(y)));
        // observation: Gaussian m x 2m .. m x 48 inputs, f64, planned form
        let (mut omin, mut omax) = (f64::MAX, f64::MIN);
        for (seed, (m, n)) in [
            (1, 8),
            (4, 8),
            (4, 48),
            (8, 16),
            (12, 48),
            (16, 32),
            (24, 48),
        ]
        .into_iter()
        .enumerate()
        {
            let x = gaussian(seed as u64, m * n);
            let mut out = vec![0.0; m * n];
            NsPlan::new(m, n).run(&x, &c, 5, 1e-8, &mut out);
            for s in singular_values(&out, m, n) {
                omin = omin.min(s);
                omax = omax.max(s);
            }
        }
        rows.push(serde_json::json!({
            "preset": preset,
            "band": [band.0, band.1],
            "polynomial_range": [snapshot_rounded(pmin), snapshot_rounded(pmax)],
            "observed_gaussian_range": [snapshot_rounded(omin), snapshot_rounded(omax)],
        }));
    }
    insta::assert_json_snapshot!(rows);
}

/// The fixed problem: `w` 3x5, `v` 4x2 (tall), `b` [3]; gradient at step k, entry i of leaf j:
/// `sin(1.3 k + 0.7 i + j)`.
fn first_updates<E: Float>(preset: &str) -> serde_json::Value {
    let opt = Muon::new(MuonHyper {
        ns_coeffs: CoeffSpec::Preset(preset.into()),
        weight_decay: 0.01,
        ..MuonHyper::new(0.02)
    })
    .unwrap();
    let shapes: [(&str, Vec<usize>); 3] = [("b", vec![3]), ("v", vec![4, 2]), ("w", vec![3, 5])];
    let leaf = |f: &dyn Fn(usize, usize) -> f64| {
        Tree::from_leaves(shapes.iter().enumerate().map(|(j, (n, s))| {
            let len = s.iter().product();
            let d = (0..len).map(|i| E::of_f64(f(i, j))).collect();
            (n.to_string(), Array::new(s.clone(), d).unwrap())
        }))
        .unwrap()
    };
    let mut p: Tree<E> = leaf(&|i, j| 0.1 * (i as f64) - 0.2 * j as f64);
    let mut s = opt.init(&p).unwrap();
    let mut out = serde_json::Map::new();
    for k in 1..=6 {
        let g: Tree<E> = leaf(&|i, j| (1.3 * k as f64 + 0.7 * i as f64 + j as f64).sin());
        let (u, ns) = opt.update(&g, &s, &p).unwrap();
        p = apply_updates(&p, &u).unwrap();
        s = ns;
        for (n, a) in u.iter() {
            let v: Vec<f64> = a
                .data()
                .iter()
                .map(|x| snapshot_rounded(x.as_f64()))
                .collect();
            out.entry(n.clone())
                .or_insert_with(|| serde_json::json!([]))
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!(v));
        }
    }
    serde_json::Value::Object(out)
}

macro_rules! muon_updates_snapshot {
    ($name:ident, $e:ty) => {
        #[test]
        fn $name() {
            insta::assert_json_snapshot!(serde_json::json!({
                "standard": first_updates::<$e>("standard"),
                "dion": first_updates::<$e>("dion"),
            }));
        }
    };
}
muon_updates_snapshot!(muon_first_6_updates_f16, half::f16);
muon_updates_snapshot!(muon_first_6_updates_f32, f32);
muon_updates_snapshot!(muon_first_6_updates_f64, f64);

#[test]
fn muon_state_signature_matches_the_reviewed_snapshot() {
    let p = Tree::from_leaves([
        ("b".to_string(), Array::vector(vec![half::f16::ZERO; 4])),
        (
            "w".to_string(),
            Array::new(vec![2, 3], vec![half::f16::ZERO; 6]).unwrap(),
        ),
    ])
    .unwrap();
    let std = Muon::new(MuonHyper::new(0.02)).unwrap();
    let dion = Muon::new(MuonHyper {
        ns_coeffs: CoeffSpec::Preset("dion".into()),
        ..MuonHyper::new(0.02)
    })
    .unwrap();
    insta::assert_snapshot!(
        "muon_state_signature",
        format!(
            "standard f16: {}\ndion f16: {}",
            std.init(&p).unwrap().signature(),
            dion.init(&p).unwrap().signature()
        )
    );
}
