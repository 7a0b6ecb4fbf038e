//! `harness bench AREA`: the reference timed against the physical limit measured in the same run.
//!
//! Figures (names from CLI.md, stable): area `optim` — `copy_bandwidth_gbps`,
//! `adam_fused_16m_gbps`, `radam_fused_16m_gbps`, `radam_allocs_per_step`, and the ratios of
//! the fused rates to the copy bandwidth; area `stack` — `init_chunked_gbps` (f16 output bytes
//! per second of `chunked-direct` for 16 layers of 1024-4096-1024) against
//! `fresh_write_gbps` (filling a freshly allocated buffer of the same size, the limit of producing
//! that many bytes of new memory). Times are medians over repetitions.

use crate::backend::Array;
use crate::optim::{AdamHyper, FusedMoments, RadamHyper, Selection};
use crate::tree::Tree;
use crate::{Error, Result};
use rayon::prelude::*;
use std::time::Instant;

/// One reported figure.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Figure {
    pub name: String,
    pub value: f64,
    pub unit: String,
}

fn fig(name: &str, value: f64, unit: &str) -> Figure {
    Figure {
        name: name.into(),
        value,
        unit: unit.into(),
    }
}

/// Median wall time of `reps` runs of `f`, in seconds.
pub fn median_seconds(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(|a, b| a.total_cmp(b));
    t[t.len() / 2]
}

/// Run the figures of `area` (`all` runs every implemented area).
pub fn run(area: &str, quick: bool) -> Result<Vec<Figure>> {
    match area {
        "optim" => optim(quick),
        "stack" => stack(quick),
        "all" => {
            let mut v = optim(quick)?;
            v.extend(stack(quick)?);
            Ok(v)
        }
        "muon" | "ode" | "cnf" => Err(Error::NotImplemented(format!("bench area `{area}`"))),
        other => Err(Error::InvalidHyper {
            name: "AREA",
            value: other.into(),
            expected: "one of optim, muon, ode, cnf, stack, all".into(),
        }),
    }
}

/// Parameters per fused-step figure (16,777,216).
pub const FUSED_PARAMS: usize = 1 << 24;
/// Bytes moved per parameter by a fused Adam/RAdam step: read g, p, m, v; write p, m, v (f32).
pub const FUSED_BYTES_PER_PARAM: usize = 28;
/// Bytes of the copy whose bandwidth is the limit (256 MiB).
pub const COPY_BYTES: usize = 256 << 20;

/// Copy bandwidth with the threads and chunking the fused update uses: (read + written) / time.
pub fn copy_bandwidth_gbps(reps: usize) -> f64 {
    let n = COPY_BYTES / 4;
    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    let secs = median_seconds(reps, || {
        dst.par_chunks_mut(crate::optim::fused::CHUNK)
            .zip(src.par_chunks(crate::optim::fused::CHUNK))
            .for_each(|(d, s)| d.copy_from_slice(s));
    });
    std::hint::black_box(&dst);
    (2 * COPY_BYTES) as f64 / secs / 1e9
}

fn optim(quick: bool) -> Result<Vec<Figure>> {
    let reps = if quick { 3 } else { 11 };
    let copy = copy_bandwidth_gbps(reps);
    let mk = |v: f32| -> Result<Tree<f32>> {
        Tree::from_leaves([(
            "w".to_string(),
            Array::new(vec![FUSED_PARAMS], vec![v; FUSED_PARAMS])?,
        )])
    };
    let mut params = mk(0.5)?;
    let grads = mk(0.01)?;
    let bytes = (FUSED_BYTES_PER_PARAM * FUSED_PARAMS) as f64;

    let mut adam = FusedMoments::adam(1e-3, AdamHyper::default(), &params)?;
    adam.step(&mut params, &grads)?;
    let adam_s = median_seconds(reps, || adam.step(&mut params, &grads).expect("validated"));
    drop(adam);

    let mut radam = FusedMoments::radam(1e-3, RadamHyper::default(), Selection::Where, &params)?;
    for _ in 0..2 {
        radam.step(&mut params, &grads)?;
    }
    let radam_s = median_seconds(reps, || radam.step(&mut params, &grads).expect("validated"));
    let steps = 20u64;
    let (r, m) = crate::probe::measure(|| {
        for _ in 0..steps {
            radam.step(&mut params, &grads)?;
        }
        Ok::<(), Error>(())
    });
    r?;
    let (adam_gbps, radam_gbps) = (bytes / adam_s / 1e9, bytes / radam_s / 1e9);
    Ok(vec![
        fig("copy_bandwidth_gbps", copy, "GB/s"),
        fig("adam_fused_16m_gbps", adam_gbps, "GB/s"),
        fig("radam_fused_16m_gbps", radam_gbps, "GB/s"),
        fig("adam_fused_vs_copy", adam_gbps / copy, "ratio"),
        fig("radam_fused_vs_copy", radam_gbps / copy, "ratio"),
        fig(
            "radam_allocs_per_step",
            m.allocations as f64 / steps as f64,
            "allocations",
        ),
    ])
}

/// The stack figure's model: 16 layers of a 1024-4096-1024 block in f16 (256 MiB).
pub fn stack_bench_config() -> Result<crate::stack::StackConfig> {
    crate::stack::StackConfig::new(16, 1024, 4096, crate::backend::DType::F16)
}

fn stack(quick: bool) -> Result<Vec<Figure>> {
    use crate::stack::{build, Strategy};
    let reps = if quick { 1 } else { 5 };
    let cfg = stack_bench_config()?;
    let bytes = cfg.final_bytes() as f64;
    let n = cfg.params();
    let fill_s = median_seconds(reps, || {
        std::hint::black_box(vec![half::f16::ONE; n]);
    });
    let mut err = None;
    let init_s = median_seconds(reps, || {
        match build::<half::f16>(&cfg, 0, Strategy::ChunkedDirect, &mut ()) {
            Ok(m) => drop(std::hint::black_box(m)),
            Err(e) => err = Some(e),
        }
    });
    if let Some(e) = err {
        return Err(e);
    }
    // the generator alone, into a warm 64 KiB buffer: the compute half of the init
    let mut scratch = vec![0f32; crate::stack::init::CHUNK_ELEMS];
    let key = crate::stack::rng::stream_key(0, 0, 0);
    let rounds = 256u64;
    let rng_s = median_seconds(reps, || {
        for r in 0..rounds {
            let start = r * scratch.len() as u64;
            crate::stack::rng::fill_f32(key, 0.5, start, &mut scratch);
            std::hint::black_box(&scratch);
        }
    });
    let rng_rate = (rounds as usize * scratch.len()) as f64 / rng_s / 1e9;
    let (init, fill) = (bytes / init_s / 1e9, bytes / fill_s / 1e9);
    Ok(vec![
        fig("init_chunked_gbps", init, "GB/s"),
        fig("fresh_write_gbps", fill, "GB/s"),
        fig("init_chunked_vs_fresh_write", init / fill, "ratio"),
        fig("init_chunked_16x1024x4096_ms", init_s * 1e3, "ms"),
        fig("counter_rng_gelems", rng_rate, "Gelem/s"),
    ])
}
