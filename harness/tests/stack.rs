//! Stacked init (equinox #673): the pure laws, conversions, typed errors, and reviewed
//! snapshots of the analytic bounds and of the initialised stack's checksums. (The measured
//! peaks, the scan memory law and the `stack-vmap-fp32` mutant live in `memory.rs`, serialised.)

harness::install_counting_allocator!();

mod common;
use common::{assert_law_holds, planted_bug_caught};

use harness::backend::{DType, Float};
use harness::reference::Error;
use harness::stack::{bounds, build, build_any, forward, StackConfig, Strategy, TensorId};

#[test]
fn all_strategies_build_the_bit_identical_stack() {
    assert_law_holds("stack_strategies_bitwise_identical");
}

#[test]
fn f16_init_is_the_cast_of_f32_init() {
    assert_law_holds("stack_f16_init_is_cast_of_f32");
}

#[test]
fn strategies_law_catches_a_layer_list_built_back_to_front() {
    use harness::laws::stack::{stack_case, strategies_bitwise_identical_with};
    use harness::mutants::stack_init_and_scan::ListLayersReversed;
    let c = planted_bug_caught(
        "stack_strategies_bitwise_identical",
        stack_case(6, 24, 48),
        |c| strategies_bitwise_identical_with(c, &ListLayersReversed),
    );
    assert!(
        c.contains("layers: 2"),
        "the smallest stack that shows it has two layers: {c}"
    );
    println!("{c}");
}

#[test]
fn cast_law_catches_f16_weights_rounded_toward_zero() {
    use harness::laws::stack::{low_precision_is_cast_of_f32_with, stack_case};
    use harness::mutants::stack_init_and_scan::F16ByTruncation;
    let c = planted_bug_caught(
        "stack_f16_init_is_cast_of_f32",
        stack_case(6, 24, 48),
        |c| low_precision_is_cast_of_f32_with(c, &F16ByTruncation),
    );
    assert!(c.contains("f16 init") && c.contains("layers: 1"), "{c}");
    println!("{c}");
}

#[test]
fn scan_law_catches_a_scan_that_walks_the_layers_back_to_front() {
    use harness::laws::stack::{scan_equals_unrolled_with, stack_case};
    use harness::mutants::stack_init_and_scan::ScanBackToFront;
    let c = planted_bug_caught(
        "stack_scan_equals_unrolled",
        (stack_case(6, 24, 48), 1..=3usize),
        |(c, b)| scan_equals_unrolled_with(c, *b, &ScanBackToFront),
    );
    assert!(c.contains("scan") && c.contains("layers: 2"), "{c}");
    println!("{c}");
}

/// A scan that returns no rows.
struct ScanOfNothing;

impl harness::laws::stack::ScanSubject for ScanOfNothing {
    fn scan<E: Float>(
        &self,
        stack: &harness::stack::Stacked<E>,
        _x: &harness::backend::Array<E>,
    ) -> harness::reference::Result<harness::backend::Array<E>> {
        harness::backend::Array::new(vec![0, stack.config().width()], Vec::new())
    }
}

#[test]
fn scan_law_fails_a_scan_that_returns_no_rows() {
    use harness::laws::stack::{scan_equals_unrolled_with, stack_case};
    let c = planted_bug_caught(
        "stack_scan_equals_unrolled",
        (stack_case(6, 24, 48), 1..=3usize),
        |(c, b)| scan_equals_unrolled_with(c, *b, &ScanOfNothing),
    );
    assert!(
        c.contains("scan shape [0,") && c.contains("unrolled ["),
        "{c}"
    );
}

#[test]
fn scan_equals_unrolled_loop_bitwise() {
    assert_law_holds("stack_scan_equals_unrolled");
}

#[test]
fn zero_sizes_and_overflow_are_typed_errors() {
    assert!(matches!(
        StackConfig::new(0, 1024, 4096, DType::F16),
        Err(Error::InvalidHyper { name: "layers", .. })
    ));
    assert!(matches!(
        StackConfig::new(16, 1 << 31, 1 << 31, DType::F16),
        Err(Error::Overflow(_))
    ));
}

#[test]
fn list_and_stack_convert_both_ways_without_changing_bits() {
    let cfg = StackConfig::new(3, 5, 7, DType::F16).unwrap();
    let list = build::<half::f16>(&cfg, 11, Strategy::LayerwiseList, &mut ())
        .unwrap()
        .into_list()
        .unwrap();
    let stacked = list.to_stacked().unwrap();
    assert_eq!(stacked.to_list().unwrap(), list);
    assert_eq!(list.checksum(), stacked.checksum());
    assert_eq!(list.into_stacked().unwrap(), stacked);
}

#[test]
fn any_dtype_build_reports_final_bytes() {
    for dt in [DType::F16, DType::F32, DType::F64] {
        let cfg = StackConfig::new(2, 3, 4, dt).unwrap();
        let b = build_any(&cfg, 0, Strategy::Preallocated, &mut ()).unwrap();
        // P = 2*3*4 + 4 + 3 = 31; N*P*s = 62 s
        assert_eq!(b.data_bytes(), 62 * dt.size());
    }
}

#[test]
fn forward_rejects_a_batch_of_the_wrong_width() {
    let cfg = StackConfig::new(2, 3, 4, DType::F32).unwrap();
    let m = build::<f32>(&cfg, 0, Strategy::ChunkedDirect, &mut ())
        .unwrap()
        .into_stacked()
        .unwrap();
    let x = harness::backend::Array::new(vec![1, 4], vec![0f32; 4]).unwrap();
    assert!(matches!(
        forward::forward_scan(&m, &x),
        Err(Error::ShapeMismatch { .. })
    ));
}

#[derive(serde::Serialize)]
struct BoundRow {
    strategy: &'static str,
    formula: &'static str,
    bound_bytes: usize,
    bound_ratio: String,
}

fn bound_table(cfg: &StackConfig) -> (usize, Vec<BoundRow>) {
    let rows = Strategy::ALL
        .into_iter()
        .map(|s| BoundRow {
            strategy: s.name(),
            formula: bounds::formula(s),
            bound_bytes: bounds::peak_bound(cfg, s),
            bound_ratio: format!("{:.6}", bounds::ratio_bound(cfg, s)),
        })
        .collect();
    (cfg.final_bytes(), rows)
}

#[test]
fn analytic_bounds_for_the_cli_model_and_a_small_one() {
    // 16 x 1024-4096-1024 f16 (the CLI figure) and 4 x 16-64-16 f16 (the measured snapshot)
    let big = StackConfig::new(16, 1024, 4096, DType::F16).unwrap();
    let small = StackConfig::new(4, 16, 64, DType::F16).unwrap();
    insta::assert_json_snapshot!("stack_bounds", [bound_table(&big), bound_table(&small)]);
}

#[derive(serde::Serialize)]
struct TensorSum {
    tensor: &'static str,
    shape: Vec<usize>,
    first: Vec<f64>,
    sum: f64,
}

#[derive(serde::Serialize)]
struct Checksum {
    dtype: DType,
    checksum: String,
    tensors: Vec<TensorSum>,
}

fn checksum_of<E: Float>(cfg: &StackConfig, seed: u64) -> Checksum {
    let m = build::<E>(cfg, seed, Strategy::ChunkedDirect, &mut ())
        .unwrap()
        .into_stacked()
        .unwrap();
    Checksum {
        dtype: E::DTYPE,
        checksum: format!("{:016x}", m.checksum()),
        tensors: TensorId::ALL
            .into_iter()
            .map(|t| {
                let a = &m.tensors[t as usize];
                TensorSum {
                    tensor: t.name(),
                    shape: a.shape().to_vec(),
                    first: a.data().iter().take(3).map(|x| x.as_f64()).collect(),
                    // f64 sum in index order: exact enough to pin every element's rounding
                    sum: a.data().iter().map(|x| x.as_f64()).sum(),
                }
            })
            .collect(),
    }
}

#[test]
fn initialised_stack_checksums_match_the_reviewed_snapshot() {
    // 3 layers of 8-16-8, seed 42: any change to the generator, the limits or the casts shows
    let cfg = |dt| StackConfig::new(3, 8, 16, dt).unwrap();
    let rows = vec![
        checksum_of::<half::f16>(&cfg(DType::F16), 42),
        checksum_of::<f32>(&cfg(DType::F32), 42),
        checksum_of::<f64>(&cfg(DType::F64), 42),
    ];
    insta::assert_json_snapshot!("stack_checksums", rows);
}

#[test]
fn strategy_display_is_its_cli_name_and_parses_back() {
    for s in Strategy::ALL {
        let shown = s.to_string();
        assert_eq!(shown, s.name());
        assert_eq!(Strategy::parse(&shown), Some(s));
    }
}
