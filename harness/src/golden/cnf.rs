//! golden-v1 `cnf` replay: the recorded weights and points through [`crate::cnf::flow`]'s
//! log-likelihood in the case's dtype, compared with diffrax's `log_prob`; with the dfdx face,
//! every block's field is evaluated on dfdx's tape and stepped by the dfdx Runge–Kutta step.

use super::format::{parse_number, parse_tensor, Case};
use super::Comparator;
use crate::backend::{Array, DType, Real};
use crate::cnf::{flow::log_likelihood_with, CnfConfig, CnfParams, Layout, TraceEstimator};
use crate::ode::Solver;
use crate::reference::Face;
use crate::Result;
use serde_json::Value;

/// Replay one case (format errors are `Err`; reference errors fail the comparison).
pub fn replay(case: &Case, cmp: &mut Comparator, face: Face) -> Result<()> {
    match case.dtype {
        DType::F32 => run::<f32>(case, cmp, face),
        DType::F64 => run::<f64>(case, cmp, face),
        other => Err(case.err(format!("cnf cases must be float32 or float64, not {other}"))),
    }
}

fn config(case: &Case) -> Result<CnfConfig> {
    let m = case.at("model")?;
    let uint = |k: &str| {
        m.get(k)
            .and_then(Value::as_u64)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| case.err(format!("model.{k} must be a non-negative integer")))
    };
    let num = |k: &str| {
        m.get(k)
            .and_then(parse_number)
            .ok_or_else(|| case.err(format!("model.{k} must be a number")))
    };
    let solver = m
        .get("solver")
        .and_then(Value::as_str)
        .ok_or_else(|| case.err("model.solver must be a string"))?;
    let trace = match m.get("trace").and_then(Value::as_str) {
        Some("exact") | None => TraceEstimator::Exact,
        Some(other) => {
            return Err(case.err(format!(
                "model.trace `{other}`: only \"exact\" can be replayed (a stochastic trace needs \
                 its probes, which the format does not record)"
            )))
        }
    };
    Ok(CnfConfig {
        data_size: uint("data_size")?,
        width: uint("width")?,
        depth: uint("depth")?,
        blocks: uint("blocks")?,
        t0: num("t0")?,
        t1: num("t1")?,
        dt0: num("dt0")?,
        solver: Solver::parse(solver).map_err(|e| case.err(format!("model.solver: {e}")))?,
        trace,
    })
}

/// The weights of every block in [`Layout`] order, shapes checked against the configuration.
fn weights<A: Real>(case: &Case, cfg: &CnfConfig) -> Result<Vec<Vec<A>>> {
    let layout = Layout::new(cfg);
    let blocks = case
        .at("model/weights")?
        .as_array()
        .ok_or_else(|| case.err("model.weights must be a list over blocks"))?;
    blocks
        .iter()
        .enumerate()
        .map(|(b, layers)| {
            let layers = layers
                .as_array()
                .ok_or_else(|| case.err(format!("model.weights[{b}] must be a list of layers")))?;
            if layers.len() != layout.layers.len() {
                return Err(case.err(format!(
                    "model.weights[{b}] has {} layers, depth {} needs {}",
                    layers.len(),
                    cfg.depth,
                    layout.layers.len()
                )));
            }
            let mut theta = vec![A::default(); layout.len];
            for (li, (lv, l)) in layers.iter().zip(&layout.layers).enumerate() {
                let mut put = |path: &str, shape: Vec<usize>, off: usize| -> Result<()> {
                    let what = format!("model.weights[{b}][{li}].{}", path.replace('/', "."));
                    let v = lv
                        .pointer(&format!("/{path}"))
                        .ok_or_else(|| case.err(format!("{what} is missing")))?;
                    let t: Array<A> = parse_tensor(case, v, &what)?;
                    if t.shape() != shape.as_slice() {
                        return Err(case.err(format!(
                            "{what}: shape {:?}, the model needs {shape:?}",
                            t.shape()
                        )));
                    }
                    theta[off..off + t.len()].copy_from_slice(t.data());
                    Ok(())
                };
                put("lin1/weight", vec![l.out, l.inp], l.w1)?;
                put("lin1/bias", vec![l.out], l.b1)?;
                put("lin2/weight", vec![l.out, 1], l.w2)?;
                put("lin2/bias", vec![l.out], l.b2)?;
                put("lin3/weight", vec![l.out, 1], l.w3)?;
            }
            Ok(theta)
        })
        .collect()
}

/// Steps of one block: `ceil((t1 - t0) / dt0)`, the last one shortened to land on `t1`.
fn steps(cfg: &CnfConfig) -> f64 {
    ((cfg.t1 - cfg.t0) / cfg.dt0).ceil()
}

/// The arithmetic of replaying `points` points: per point, block, step and stage one field
/// evaluation, `sum over layers of 2 in out` multiply-adds for the primal and as many again for
/// each of the `data_size` tangent rows of the exact trace.
fn replay_flops(cfg: &CnfConfig, points: usize) -> f64 {
    let layers: f64 = cfg
        .layer_dims()
        .iter()
        .map(|&(i, o)| 2.0 * i as f64 * o as f64)
        .sum();
    let stages = cfg.solver.tableau().stages() as f64;
    points as f64 * cfg.blocks as f64 * steps(cfg) * stages * layers * (1 + cfg.data_size) as f64
}

fn run<A: Real>(case: &Case, cmp: &mut Comparator, face: Face) -> Result<()> {
    let cfg = config(case)?;
    cfg.validate()
        .map_err(|e| case.err(format!("model: {e}")))?;
    let x: Array<A> = parse_tensor(case, case.at("x")?, "x")?;
    if x.shape().len() != 2 || x.shape()[1] != cfg.data_size {
        return Err(case.err(format!(
            "x: shape {:?}, want [n, {}]",
            x.shape(),
            cfg.data_size
        )));
    }
    let flops = replay_flops(&cfg, x.shape()[0]);
    if flops > super::MAX_REPLAY_FLOPS {
        return Err(case.err(format!(
            "replaying {} points through {} block(s) of width {}, depth {} at {} steps would take \
             about {flops:.1e} floating-point operations, more than the {:.0e} a golden case may \
             ask for (MAX_REPLAY_FLOPS); split the points over several cases",
            x.shape()[0],
            cfg.blocks,
            cfg.width,
            cfg.depth,
            steps(&cfg),
            super::MAX_REPLAY_FLOPS
        )));
    }
    let want: Array<f64> = parse_tensor(case, case.at("expected/log_prob")?, "expected.log_prob")?;
    if want.shape() != [x.shape()[0]] {
        return Err(case.err(format!(
            "expected.log_prob: shape {:?}, want [{}]",
            want.shape(),
            x.shape()[0]
        )));
    }
    let blocks = weights::<A>(case, &cfg)?;
    let params = CnfParams::from_blocks(cfg, blocks).map_err(|e| case.err(e.to_string()))?;
    let got = log_likelihood_with(&params, x.data(), None, face)?;
    let got = Array::new(vec![got.len()], got).map_err(|e| case.err(e.to_string()))?;
    cmp.array("log_prob", &got, &want);
    Ok(())
}
