//! Bad input never panics: invalid hyperparameters, mismatched shapes and dtype-specific
//! underflow are typed errors naming the problem, and a failed update leaves the state intact.

harness::install_counting_allocator!();

use harness::backend::Array;
use harness::optim::{self, AdamHyper, FusedMoments, RadamHyper, Selection, Transform};
use harness::reference::Error;
use harness::tree::Tree;

fn tree(n: usize) -> Tree<f32> {
    Tree::from_leaves([("w".to_string(), Array::vector(vec![1.0; n]))]).unwrap()
}

#[test]
fn out_of_range_hyperparameters_name_the_parameter_and_range() {
    let cases = [
        (
            AdamHyper {
                b1: 1.0,
                ..Default::default()
            },
            "b1",
        ),
        (
            AdamHyper {
                b2: -0.1,
                ..Default::default()
            },
            "b2",
        ),
        (
            AdamHyper {
                b2: f64::NAN,
                ..Default::default()
            },
            "b2",
        ),
        (
            AdamHyper {
                eps: -1e-8,
                ..Default::default()
            },
            "eps",
        ),
        (
            AdamHyper {
                eps_root: f64::INFINITY,
                ..Default::default()
            },
            "eps_root",
        ),
    ];
    for (h, name) in cases {
        let e = optim::adam(1e-3, h).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidHyper { name: n, .. } if *n == name),
            "{e}"
        );
        assert!(e.to_string().contains(name));
    }
    let e = optim::radam(f64::NAN, RadamHyper::default(), Selection::Where).unwrap_err();
    assert!(e.to_string().contains("learning_rate"), "{e}");
    let h = RadamHyper {
        threshold: f64::INFINITY,
        ..Default::default()
    };
    assert!(optim::radam(1e-3, h, Selection::Branch)
        .unwrap_err()
        .to_string()
        .contains("threshold"));
}

#[test]
fn eps_that_rounds_to_zero_in_the_arithmetic_dtype_is_rejected() {
    let h = AdamHyper {
        eps: 1e-50,
        ..Default::default()
    };
    let e = FusedMoments::adam(1e-3, h, &tree(2))
        .err()
        .expect("must reject");
    assert!(
        e.to_string().contains("must not round to 0 in float32"),
        "{e}"
    );
    // the same eps is fine in f64
    let p64 = Tree::from_leaves([("w".to_string(), Array::vector(vec![1.0f64]))]).unwrap();
    assert!(FusedMoments::adam(1e-3, h, &p64).is_ok());
}

#[test]
fn f16_params_keep_moments_in_f32_so_default_eps_is_safe() {
    // 1e-8 rounds to 0 in f16 (smallest subnormal 6e-8); moments and eps live in f32 instead,
    // so a zero gradient gives a zero update, not 0/0.
    let p = Tree::from_leaves([("w".to_string(), Array::vector(vec![half::f16::ONE; 3]))]).unwrap();
    let g = p.zeros_like::<half::f16>();
    let opt = optim::adam(1e-3, AdamHyper::default()).unwrap();
    let s = opt.init(&p).unwrap();
    let (u, _) = opt.update(&g, &s, &p).unwrap();
    assert!(u.get("w").unwrap().data().iter().all(|x| x.to_f32() == 0.0));
}

#[test]
fn mismatched_shapes_are_typed_errors_and_state_is_untouched() {
    let opt = optim::radam(1e-3, RadamHyper::default(), Selection::Where).unwrap();
    let p = tree(3);
    let s = opt.init(&p).unwrap();
    let e = opt.update(&tree(4), &s, &p).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let other = Tree::from_leaves([("v".to_string(), Array::vector(vec![1.0f32; 3]))]).unwrap();
    assert!(matches!(
        opt.update(&other, &s, &p).unwrap_err(),
        Error::Structure(_)
    ));

    let mut fused = FusedMoments::radam(1e-3, RadamHyper::default(), Selection::Where, &p).unwrap();
    let mut params = p.clone();
    assert!(fused.step(&mut params, &tree(5)).is_err());
    assert_eq!(
        fused.state().count,
        0,
        "a rejected step must not advance the state"
    );
    assert_eq!(params, p, "a rejected step must not touch the parameters");
}

#[test]
fn array_data_length_must_match_shape() {
    let e = Array::new(vec![2, 3], vec![0.0f32; 5]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DataLength {
                expected: 6,
                got: 5,
                ..
            }
        ),
        "{e}"
    );
    assert!(matches!(
        Array::<f32>::zeros(&[usize::MAX, 2]).unwrap_err(),
        Error::Overflow(_)
    ));
}

#[test]
fn count_saturates_at_int32_max() {
    assert_eq!(optim::moments::safe_increment(i32::MAX), i32::MAX);
}
