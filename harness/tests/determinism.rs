//! Same seed, same numbers, whatever the thread count: the fused optimizers split large leaves
//! across rayon workers, and the result must not depend on how many there are.

harness::install_counting_allocator!();

use harness::backend::Array;
use harness::optim::{AdamHyper, FusedMoments, RadamHyper, Selection};
use harness::tree::Tree;

fn run(threads: usize) -> (Tree<f32>, Tree<f32>) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| {
        // 5 chunks of the fused kernel's parallel split, plus a remainder.
        let n = 5 * harness::optim::fused::CHUNK + 123;
        let leaf = |f: fn(usize) -> f32| {
            Tree::from_leaves([("w".to_string(), Array::vector((0..n).map(f).collect()))]).unwrap()
        };
        let mut p = leaf(|i| (i as f32 * 0.001).sin());
        let g = leaf(|i| (i as f32 * 0.37).cos());
        let mut radam =
            FusedMoments::radam(1e-2, RadamHyper::default(), Selection::Where, &p).unwrap();
        let mut adam = FusedMoments::adam(
            1e-2,
            AdamHyper {
                nesterov: true,
                ..Default::default()
            },
            &p,
        )
        .unwrap();
        let mut q = p.clone();
        for _ in 0..8 {
            radam.step(&mut p, &g).unwrap();
            adam.step(&mut q, &g).unwrap();
        }
        (p, q)
    })
}

#[test]
fn fused_steps_are_bitwise_identical_on_one_and_two_threads() {
    let (a1, b1) = run(1);
    let (a2, b2) = run(2);
    harness::laws::bitwise_equal("radam params", &a1, &a2).unwrap();
    harness::laws::bitwise_equal("adam params", &b1, &b2).unwrap();
}
