//! Same seed, same numbers, whatever the thread count: the fused optimizers split large leaves
//! across rayon workers, the line search's objective splits its long sums, and the result must
//! not depend on how many there are.

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

/// Three line-search steps on Rosenbrock in `dim` dimensions (f32) inside a pool of `threads`
/// (where the objective's sums split their blocks over the workers), or on the calling thread
/// when `threads` is 0: the final point, and every step's value, slope-dependent decrease error
/// and value at a candidate (the sums themselves: the point depends on them only through the
/// Armijo decisions).
fn linesearch_run(dim: usize, threads: usize) -> (Tree<f32>, Vec<f32>) {
    use harness::optim::linesearch::{
        point, sgd_linesearch, BacktrackingHyper, LineSearch, Objective, Rosenbrock,
    };
    let run = || {
        let opt = sgd_linesearch(BacktrackingHyper::new(15)).unwrap();
        let mut x = point::<f32>(
            &(0..dim)
                .map(|i| 0.5 + 0.1 * (i as f64).sin())
                .collect::<Vec<_>>(),
        );
        let mut state = opt.init(&x).unwrap();
        let mut sums = Vec::new();
        for _ in 0..3 {
            let (v, g) = Rosenbrock.value_and_grad(&x).unwrap();
            let (u, s) = opt.update(&g, &state, &x, v, &g, &Rosenbrock).unwrap();
            sums.extend([
                v,
                s.1.info.decrease_error.value,
                Rosenbrock.value_along(&x, 0.25, &u).unwrap(),
            ]);
            x = harness::tree::apply_updates(&x, &u).unwrap();
            state = s;
        }
        (x, sums)
    };
    match threads {
        0 => run(),
        n => rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
            .install(run),
    }
}

#[test]
fn line_search_steps_are_bitwise_identical_on_the_caller_and_on_one_or_two_threads() {
    // past twice the split threshold, and a remainder: the sums and the gradient split over
    // the threads at their first levels
    let dim = (2 * harness::backend::PARALLEL_BLOCKS + 1) * harness::backend::BLOCK + 77;
    let (point, sums) = linesearch_run(dim, 0);
    for threads in [1, 2] {
        let (p, s) = linesearch_run(dim, threads);
        harness::laws::bitwise_equal("line-search point", &point, &p).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&sums),
            bits(&s),
            "values and decrease errors, {threads} threads"
        );
    }
}
