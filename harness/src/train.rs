//! Training runs as the CLI and the report show them: [`train_for`] steps a CNF trainer and
//! records the loss and live bytes, [`density_grid`] evaluates the learned density for a plot.

use crate::backend::Real;
use crate::cnf::train::TrainState;
use crate::cnf::{CnfConfig, CnfParams, TraceEstimator};
use crate::laws::cnf::TrainSubject;
use crate::Result;

/// What `harness train-cnf` reports (the JSON fields of `docs/CLI.md`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TrainReport {
    /// Steps run.
    pub steps: usize,
    /// Traces (specialisations) the trainer made.
    pub traces: usize,
    /// Live bytes after the first step (warm-up) and after the last.
    pub live_bytes_first: usize,
    /// Live bytes after the last step.
    pub live_bytes_last: usize,
    /// Loss before each step's update, in f64.
    pub loss: Vec<f64>,
    /// Mean wall time per step, in seconds (0 for zero steps).
    pub seconds_per_step: f64,
}

/// Train for `steps` steps from `state`, calling `progress(step, loss)` after each; returns the
/// report and the final state. The trainer computes in `A` (f32 or f64); losses are reported in
/// f64.
pub fn train_for<A: Real>(
    trainer: &mut dyn TrainSubject<A>,
    mut state: TrainState<A>,
    steps: usize,
    mut progress: impl FnMut(usize, f64),
) -> Result<(TrainReport, TrainState<A>)> {
    // grows with the steps actually taken (a huge request must not reserve its whole history)
    let mut loss = Vec::with_capacity(steps.min(1 << 16));
    let mut live_first = 0;
    let start = std::time::Instant::now();
    for i in 0..steps {
        let (next, l) = trainer.step(&state)?;
        state = next;
        loss.push(l);
        if i == 0 {
            live_first = crate::probe::counters().live_bytes;
        }
        progress(i, l);
    }
    let secs = start.elapsed().as_secs_f64();
    Ok((
        TrainReport {
            steps,
            traces: trainer.traces(),
            live_bytes_first: live_first,
            live_bytes_last: crate::probe::counters().live_bytes,
            loss,
            seconds_per_step: if steps > 0 { secs / steps as f64 } else { 0.0 },
        },
        state,
    ))
}

/// The model's density `exp(log p)` on an `n x n` grid over `extent = (x0, x1, y0, y1)`
/// (cell centres; row 0 at `y0`), evaluated in chunks of `chunk` points.
pub fn density_grid(
    params: &CnfParams<f64>,
    extent: (f64, f64, f64, f64),
    n: usize,
    chunk: usize,
) -> Result<crate::report::svg::Grid> {
    let (x0, x1, y0, y1) = extent;
    let mut pts = Vec::with_capacity(2 * n * n);
    for r in 0..n {
        for c in 0..n {
            pts.push(x0 + (c as f64 + 0.5) / n as f64 * (x1 - x0));
            pts.push(y0 + (r as f64 + 0.5) / n as f64 * (y1 - y0));
        }
    }
    let exact = CnfParams {
        cfg: CnfConfig {
            trace: TraceEstimator::Exact,
            ..params.cfg
        },
        ..params.clone()
    };
    let mut values = Vec::with_capacity(n * n);
    for part in pts.chunks(2 * chunk.max(1)) {
        match crate::cnf::flow::log_likelihood(&exact, part, None) {
            Ok(lp) => values.extend(lp.into_iter().map(f64::exp)),
            Err(_) => values.extend(std::iter::repeat_n(f64::NAN, part.len() / 2)),
        }
    }
    Ok(crate::report::svg::Grid {
        nx: n,
        ny: n,
        extent,
        values,
    })
}
