//! `harness upstream diff`: live differential testing of the reference against the real library.
//!
//! Cases are drawn from the laws' own strategies, written as golden-v1 inputs (no outputs) and
//! sent to the worker's `golden` op, which runs the real optax or diffrax exactly as the golden
//! generators do (x64 on, the same jitting) and returns the complete case. That case is replayed
//! through the reference by [`crate::golden::replay`] at the case's golden tolerance. A case the
//! reference does not reproduce (or refuses) is shrunk with proptest's value tree (each
//! candidate goes to the worker again) and the smallest one is written as a golden-v1 file,
//! ready to commit.
//!
//! | kind | strategy | library call |
//! |---|---|---|
//! | `adam`, `radam` | [`opt_case`]: hyperparameters over their legal ranges, thresholds included, gradients from zero to `1e4`, up to 8 steps | `optax.adam` / `optax.radam` |
//! | `muon` | [`muon_case`]: 1-3 leaves of 0-D to 3-D shapes (empty ones among them, at least one not), the standard and Dion presets, raw `[3]` and `[k >= 1, 3]` coefficients, Nesterov on/off, weight decay | `optax.contrib.muon` |
//! | `linesearch` | [`ls_case`] on the objectives golden-v1 has (Rosenbrock in 1-5 dimensions, convex and indefinite quadratics), every hyperparameter | `optax.scale_by_backtracking_linesearch` after `sgd(1)` |
//! | `ode` | [`ode_case`]: linear (damped rotations from [`rotation_case`]), Lotka–Volterra, Van der Pol and forced decay, every tableau, constant and PID steps, forward and backward, f64 and f32 | `diffrax.diffeqsolve` |
//! | `cnf` | [`cnf_case`]: log-densities of 1-6 points under random ConcatSquash flows (data size 1-3, width 1-8, depth 0-2, 1-2 blocks, initial weights scaled by 0.3-1.5), every tableau, constant steps not always dividing the interval, f64 and f32 | the diffrax CNF example's `log_likelihood`, `jit(vmap)` over the points |
//!
//! Not drawn: `recover_from_zero_lr` (not an optax option),
//! an infinite `increase_factor` (the worker passes hyperparameters to optax as JSON gives
//! them, and JSON has no infinity), float16 (golden-v1 has none: such cases are sent as
//! float32). A case the library itself rejects (an exception in optax or diffrax) is counted
//! and listed, not a mismatch. An ODE mismatch where diffrax cannot reproduce itself is
//! reported as explained ([`explain_ode`]).

use super::worker::{Reply, Worker};
use crate::backend::DType;
use crate::cnf::Layout;
use crate::error::{Error, Result};
use crate::golden::{self, Case};
use crate::laws::cnf::{model_case, ModelCase};
use crate::laws::linesearch::{ls_case, LsCase, Problem};
use crate::laws::muon::{muon_case, Coeffs, MuonCase};
use crate::laws::ode::rotation_case;
use crate::laws::strategies::{opt_case, OptCase};
use crate::ode::Solver;
use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The kinds of case `upstream diff` draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiffKind {
    /// `optax.adam` over [`opt_case`] (the threshold is not used).
    Adam,
    /// `optax.radam` over [`opt_case`].
    Radam,
    /// `optax.contrib.muon` over [`muon_case`].
    Muon,
    /// `optax.scale_by_backtracking_linesearch` over [`ls_case`].
    Linesearch,
    /// `diffrax.diffeqsolve` over [`ode_case`].
    Ode,
    /// CNF log-densities through `diffrax.diffeqsolve` over [`cnf_case`].
    Cnf,
}

impl DiffKind {
    /// Every implemented kind.
    pub const ALL: [DiffKind; 6] = [
        DiffKind::Adam,
        DiffKind::Radam,
        DiffKind::Muon,
        DiffKind::Linesearch,
        DiffKind::Ode,
        DiffKind::Cnf,
    ];

    /// The name used by `--kind` and in the report.
    pub fn name(self) -> &'static str {
        match self {
            DiffKind::Adam => "adam",
            DiffKind::Radam => "radam",
            DiffKind::Muon => "muon",
            DiffKind::Linesearch => "linesearch",
            DiffKind::Ode => "ode",
            DiffKind::Cnf => "cnf",
        }
    }

    /// Golden-v1 inputs of this kind (named `""`; [`named`] names a drawn one).
    pub fn inputs(self) -> BoxedStrategy<Value> {
        match self {
            DiffKind::Adam | DiffKind::Radam => opt_case(MAX_STEPS)
                // a replay that compares nothing never passes: at least one parameter
                .prop_filter("an empty leaf compares nothing", |c| !c.params.is_empty())
                .prop_map(move |c| golden_input(self, &c, ""))
                .boxed(),
            DiffKind::Muon => muon_case()
                // shrinking stays within the filter: it cannot drift to a case that compares
                // nothing (only empty leaves), which never passes
                .prop_filter("an empty tree compares nothing", |c| {
                    c.shapes.iter().any(|s| s.iter().product::<usize>() > 0)
                })
                // `[]` reaches optax as shape (0,), not (0, 3): not the case the reference runs
                .prop_filter(
                    "no empty coefficient rows",
                    |c| !matches!(&c.coeffs, Coeffs::Rows(r, _) if r.is_empty()),
                )
                .prop_map(|c| muon_input(&c))
                .boxed(),
            DiffKind::Linesearch => ls_case()
                .prop_filter("golden-v1 objectives, optax's options", |c| {
                    matches!(c.problem, Problem::Rosenbrock | Problem::Quadratic(_))
                        && c.poison.is_none()
                        && !c.hyper.recover_from_zero_lr
                        && c.hyper.increase_factor.is_finite()
                })
                .prop_map(|c| linesearch_input(&c))
                .boxed(),
            DiffKind::Ode => ode_case().prop_map(|c| ode_input(&c)).boxed(),
            DiffKind::Cnf => cnf_case().prop_map(|c| cnf_input(&c)).boxed(),
        }
    }

    /// The kind called `name`.
    pub fn parse(name: &str) -> Option<DiffKind> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// Most optimizer steps in a drawn case.
pub const MAX_STEPS: usize = 8;

/// The golden-v1 input of `case` for `kind` (float16 cases are sent as float32: golden-v1 has
/// no float16), named `name`, with the generators' tolerance for its dtype.
pub fn golden_input(kind: DiffKind, case: &OptCase, name: &str) -> Value {
    let dtype = if case.dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    // the value the case's dtype holds (what both sides start from)
    let round = |x: f64| {
        if dtype == DType::F32 {
            x as f32 as f64
        } else {
            x
        }
    };
    let tensor = |xs: &[f64]| tensor(&[xs.len()], xs.iter().map(|&x| round(x)));
    let h = &case.hyper.moments;
    let mut hyper = Map::new();
    hyper.insert("learning_rate".into(), json!(case.learning_rate));
    hyper.insert("b1".into(), json!(h.b1));
    hyper.insert("b2".into(), json!(h.b2));
    hyper.insert("eps".into(), json!(h.eps));
    hyper.insert("eps_root".into(), json!(h.eps_root));
    if kind == DiffKind::Radam {
        hyper.insert("threshold".into(), json!(case.hyper.threshold));
    }
    if h.nesterov {
        // only when set: releases before Nesterov RAdam do not know the keyword
        hyper.insert("nesterov".into(), json!(true));
    }
    let tol = crate::tolerance::conformance(dtype);
    json!({
        "format": "golden-v1",
        "name": name,
        "kind": "optimizer",
        "dtype": dtype.to_string(),
        "tolerance": {"rtol": tol.rtol, "atol": tol.atol},
        "optimizer": {"name": kind.name(), "hyper": Value::Object(hyper)},
        "params": {"w": tensor(&case.params)},
        "steps": case.grads.iter().map(|g| json!({"grads": {"w": tensor(g)}})).collect::<Vec<_>>(),
    })
}

/// A golden-v1 tensor: `{"shape": shape, "data": [...]}`.
fn tensor(shape: &[usize], data: impl IntoIterator<Item = f64>) -> Value {
    json!({"shape": shape, "data": data.into_iter().collect::<Vec<_>>()})
}

/// The dtype a case is sent in: float16 goes as float32 (golden-v1 has no float16).
fn sent_dtype(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// `x` as the value `dtype` holds.
fn held(dtype: DType, x: f64) -> f64 {
    if dtype == DType::F64 {
        x
    } else {
        x as f32 as f64
    }
}

/// `input` named `name`.
pub fn named(mut input: Value, name: &str) -> Value {
    if let Some(o) = input.as_object_mut() {
        o.insert("name".into(), json!(name));
    }
    input
}

/// The golden-v1 input of a Muon case: leaves `p0, p1, ...` with the law's Gaussian data
/// ([`crate::laws::muon::tree`]'s draw), one gradient tree per step, the case's coefficients
/// written out as numbers (`[3]` or `[k, 3]`; the standard preset is optax's default and is
/// left out), learning rate 0.02.
pub fn muon_input(case: &MuonCase) -> Value {
    let dtype = sent_dtype(case.dtype);
    let leaves = |seed: u64| {
        let t = crate::laws::muon::tree::<f64>(&case.shapes, seed, 1.0);
        let mut m = Map::new();
        for (name, a) in t.iter() {
            m.insert(
                name.clone(),
                tensor(a.shape(), a.data().iter().map(|&x| held(dtype, x))),
            );
        }
        Value::Object(m)
    };
    let h = case.hyper();
    let mut hyper = Map::new();
    hyper.insert("learning_rate".into(), json!(h.learning_rate));
    match &case.coeffs {
        Coeffs::Standard => {}
        Coeffs::Dion => {
            hyper.insert(
                "ns_coeffs".into(),
                json!(crate::optim::muon::coeffs::DION.to_vec()),
            );
        }
        Coeffs::Single(c, _) => {
            hyper.insert("ns_coeffs".into(), json!(c.to_vec()));
        }
        Coeffs::Rows(rows, _) => {
            hyper.insert("ns_coeffs".into(), json!(rows));
        }
    }
    hyper.insert("ns_steps".into(), json!(h.ns_steps));
    hyper.insert("nesterov".into(), json!(h.nesterov));
    hyper.insert("weight_decay".into(), json!(h.weight_decay));
    let steps = (1..=case.steps)
        .map(|t| json!({"grads": leaves(case.seed ^ (t as u64 * 31))}))
        .collect::<Vec<_>>();
    json!({
        "format": "golden-v1",
        "name": "",
        "kind": "optimizer",
        "dtype": dtype.to_string(),
        "tolerance": tolerance_json(dtype),
        "optimizer": {"name": "muon", "hyper": Value::Object(hyper)},
        "params": leaves(case.seed),
        "steps": steps,
    })
}

fn tolerance_json(dtype: DType) -> Value {
    let tol = crate::tolerance::conformance(dtype);
    json!({"rtol": tol.rtol, "atol": tol.atol})
}

/// The golden-v1 input of a line-search case: the objective (Rosenbrock or the quadratic's `A`
/// and `b`), every optax hyperparameter, the start point and the step count.
pub fn linesearch_input(case: &LsCase) -> Value {
    let dtype = if case.f32 { DType::F32 } else { DType::F64 };
    let objective = match &case.problem {
        Problem::Quadratic(q) => {
            let n = q.b.len();
            json!({"name": "quadratic", "data": {
                "A": tensor(&[n, n], q.a.iter().map(|&x| held(dtype, x))),
                "b": tensor(&[n], q.b.iter().map(|&x| held(dtype, x))),
            }})
        }
        _ => json!({"name": "rosenbrock", "data": {}}),
    };
    let h = &case.hyper;
    json!({
        "format": "golden-v1",
        "name": "",
        "kind": "linesearch",
        "dtype": dtype.to_string(),
        "tolerance": tolerance_json(dtype),
        "objective": objective,
        "hyper": {
            "max_backtracking_steps": h.max_backtracking_steps,
            "slope_rtol": h.slope_rtol,
            "decrease_factor": h.decrease_factor,
            "increase_factor": h.increase_factor,
            "max_learning_rate": h.max_learning_rate,
            "atol": h.atol,
            "rtol": h.rtol,
            "store_grad": h.store_grad,
        },
        "params": tensor(&[case.x0.len()], case.x0.iter().map(|&x| held(dtype, x))),
        "steps": case.steps,
    })
}

/// The tableaus golden-v1 names (diffrax's solvers); `euler` has no error estimate, so it is
/// drawn with constant steps only.
pub const ODE_SOLVERS: [&str; 7] = [
    "euler", "heun", "midpoint", "ralston", "bosh3", "tsit5", "dopri5",
];

/// An ODE problem golden-v1 can name, with its arguments and a start.
#[derive(Debug, Clone, PartialEq)]
pub enum OdeProblem {
    /// `y' = A y` with `A = [[-alpha, -omega], [omega, -alpha]]` (a damped rotation).
    Rotation {
        /// Damping rate `alpha`.
        alpha: f64,
        /// Angular frequency `omega`.
        omega: f64,
    },
    /// `x' = alpha x - beta x p`, `p' = delta x p - gamma p`.
    LotkaVolterra([f64; 4]),
    /// `y0' = y1`, `y1' = mu (1 - y0^2) y1 - y0`.
    VanDerPol {
        /// Damping strength `mu`.
        mu: f64,
    },
    /// `y' = -k y + sin(w t)`, elementwise.
    ForcedDecay {
        /// Decay rate `k`.
        k: f64,
        /// Angular frequency `w` of the forcing.
        w: f64,
    },
}

/// How the solve places its steps.
#[derive(Debug, Clone, PartialEq)]
pub enum OdeController {
    /// Constant steps of `dt0` (signed by the direction of integration).
    Constant {
        /// Step magnitude (positive; the sign follows the direction).
        dt0: f64,
    },
    /// diffrax's `PIDController`; `pi` sets `pcoeff = icoeff = 0.3`.
    Pid {
        /// Relative tolerance; the absolute tolerance is `rtol / 100`.
        rtol: f64,
        /// First step magnitude (signed by the direction), or `None` for diffrax's automatic
        /// choice.
        dt0: Option<f64>,
        /// Use PI coefficients `pcoeff = icoeff = 0.3` (else pure I).
        pi: bool,
        /// Largest step, if capped.
        dtmax: Option<f64>,
    },
}

/// One drawn solve.
#[derive(Debug, Clone, PartialEq)]
pub struct OdeCase {
    /// The system and its arguments.
    pub problem: OdeProblem,
    /// Initial state (2 components, or 1-3 for the forced decay).
    pub y0: Vec<f64>,
    /// The golden-v1 solver name (`euler`, `heun`, ..., `dopri5`).
    pub solver: &'static str,
    /// Step placement (always constant for `euler`).
    pub controller: OdeController,
    /// Length of the interval.
    pub horizon: f64,
    /// Start time, 0 or 0.5.
    pub t0: f64,
    /// Integrate from `t0 + horizon` down to `t0` instead of upwards.
    pub backward: bool,
    /// Run in f32 (else f64).
    pub f32: bool,
}

/// Solves over every tableau and controller: problems with arguments in ranges where they stay
/// bounded over the horizon (`0.5..3`), starts of norm `0.1..3`, constant steps of `0.02..0.3`,
/// PID tolerances `1e-3..1e-7` (atol = rtol / 100) with diffrax's automatic or a given first
/// step, sometimes PI coefficients or a step cap; one case in five backward, one in five f32.
pub fn ode_case() -> impl Strategy<Value = OdeCase> {
    let problem = prop_oneof![
        rotation_case().prop_map(|r| (
            OdeProblem::Rotation {
                alpha: r.alpha,
                omega: r.omega
            },
            r.y0.to_vec()
        )),
        (
            (0.5f64..2.0, 0.5f64..1.5, 1.0f64..3.0, 0.5f64..1.5),
            prop::collection::vec(0.5f64..3.0, 2)
        )
            .prop_map(|((a, b, g, d), y0)| (OdeProblem::LotkaVolterra([a, b, g, d]), y0)),
        (0.0f64..2.0, prop::collection::vec(-2.0f64..2.0, 2))
            .prop_map(|(mu, y0)| (OdeProblem::VanDerPol { mu }, y0)),
        (
            0.1f64..2.0,
            0.5f64..3.0,
            prop::collection::vec(-2.0f64..2.0, 1..4)
        )
            .prop_map(|(k, w, y0)| (OdeProblem::ForcedDecay { k, w }, y0)),
    ];
    let rtol = prop_oneof![Just(1e-3), Just(1e-4), Just(1e-5), Just(1e-6), Just(1e-7)];
    let pid = (
        rtol,
        prop::option::weighted(0.5, 0.01f64..0.3),
        any::<bool>(),
        prop::option::weighted(0.25, 0.05f64..0.5),
    )
        .prop_map(|(rtol, dt0, pi, dtmax)| OdeController::Pid {
            rtol,
            dt0,
            pi,
            dtmax,
        });
    let constant = (0.02f64..0.3).prop_map(|dt0| OdeController::Constant { dt0 });
    (
        problem,
        0usize..ODE_SOLVERS.len(),
        prop_oneof![constant, pid],
        0.5f64..3.0,
        prop_oneof![Just(0.0), Just(0.5)],
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |((problem, y0), solver, controller, horizon, t0, backward, f32)| {
                let solver = ODE_SOLVERS[solver];
                // euler has no error estimate: a PID controller is not an option for it
                let controller = match controller {
                    OdeController::Pid { dt0, .. } if solver == "euler" => {
                        OdeController::Constant {
                            dt0: dt0.unwrap_or(0.1),
                        }
                    }
                    c => c,
                };
                OdeCase {
                    problem,
                    y0,
                    solver,
                    controller,
                    horizon,
                    t0,
                    backward,
                    f32,
                }
            },
        )
}

/// The golden-v1 input of an ODE case (no `tolerance`: the worker fills in the generators'
/// per-dtype and per-controller tolerances, the ones the committed ODE cases record).
pub fn ode_input(case: &OdeCase) -> Value {
    let dtype = if case.f32 { DType::F32 } else { DType::F64 };
    let (t0, t1) = if case.backward {
        (case.t0 + case.horizon, case.t0)
    } else {
        (case.t0, case.t0 + case.horizon)
    };
    let sign = if case.backward { -1.0 } else { 1.0 };
    let problem = match &case.problem {
        OdeProblem::Rotation { alpha, omega } => json!({"name": "linear", "args": {
            "A": tensor(&[2, 2], [-alpha, -omega, *omega, -alpha].map(|x| held(dtype, x))),
        }}),
        OdeProblem::LotkaVolterra([a, b, g, d]) => json!({"name": "lotka_volterra", "args": {
            "alpha": a, "beta": b, "gamma": g, "delta": d,
        }}),
        OdeProblem::VanDerPol { mu } => json!({"name": "van_der_pol", "args": {"mu": mu}}),
        OdeProblem::ForcedDecay { k, w } => {
            json!({"name": "forced_decay", "args": {"k": k, "w": w}})
        }
    };
    let controller = match &case.controller {
        OdeController::Constant { dt0 } => json!({"type": "constant", "dt0": sign * dt0}),
        OdeController::Pid {
            rtol,
            dt0,
            pi,
            dtmax,
        } => {
            let mut c = Map::new();
            c.insert("type".into(), json!("pid"));
            c.insert("rtol".into(), json!(rtol));
            c.insert("atol".into(), json!(rtol / 100.0));
            c.insert("dt0".into(), json!(dt0.map(|d| sign * d)));
            if *pi {
                c.insert("pcoeff".into(), json!(0.3));
                c.insert("icoeff".into(), json!(0.3));
            }
            if let Some(m) = dtmax {
                c.insert("dtmax".into(), json!(m));
            }
            Value::Object(c)
        }
    };
    json!({
        "format": "golden-v1",
        "name": "",
        "kind": "ode",
        "dtype": dtype.to_string(),
        "problem": problem,
        "solver": case.solver,
        "controller": controller,
        "t0": t0,
        "t1": t1,
        "y0": tensor(&[case.y0.len()], case.y0.iter().map(|&x| held(dtype, x))),
    })
}

/// One drawn CNF evaluation: a random model ([`model_case`]: sizes, weight seed and scale,
/// points) integrated by `solver` with constant steps of `dt0` over `[t0, t0 + horizon]`.
#[derive(Debug, Clone)]
pub struct CnfCase {
    /// The model (its `cfg` carries the solver, interval and step) and its points.
    pub model: ModelCase,
    /// The Runge–Kutta method, as also set in `model.cfg.solver`.
    pub solver: Solver,
    /// Run in f32 (else f64).
    pub f32: bool,
}

/// Models of [`model_case`] with up to 6 points, every tableau, `t0` 0 or 0.25, horizons
/// `0.25..1`, steps `0.05..0.3` (so the last step is usually shorter), one case in four f32.
pub fn cnf_case() -> impl Strategy<Value = CnfCase> {
    (
        model_case(6),
        0usize..Solver::ALL.len(),
        prop_oneof![Just(0.0), Just(0.25)],
        0.25f64..1.0,
        0.05f64..0.3,
        prop::bool::weighted(0.25),
    )
        .prop_map(|(mut model, solver, t0, horizon, dt0, f32)| {
            let solver = Solver::ALL[solver];
            model.cfg.solver = solver;
            model.cfg.t0 = t0;
            model.cfg.t1 = t0 + horizon;
            model.cfg.dt0 = dt0;
            CnfCase { model, solver, f32 }
        })
}

/// The golden-v1 input of a CNF case: the model's weights per block and layer (`lin1`
/// weight and bias, `lin2` weight and bias, `lin3` weight, as equinox's `Linear` holds them) and
/// the points, as the case's dtype holds them (no `tolerance`: the worker fills in the
/// generator's).
pub fn cnf_input(case: &CnfCase) -> Value {
    let dtype = if case.f32 { DType::F32 } else { DType::F64 };
    let cfg = &case.model.cfg;
    let layout = Layout::new(cfg);
    let params = case.model.params();
    let weights: Vec<Value> = params
        .blocks
        .iter()
        .map(|theta| {
            let part = |off: usize, shape: &[usize]| {
                let n: usize = shape.iter().product();
                tensor(shape, theta[off..off + n].iter().map(|&x| held(dtype, x)))
            };
            let layers: Vec<Value> = layout
                .layers
                .iter()
                .map(|l| {
                    json!({
                        "lin1": {"weight": part(l.w1, &[l.out, l.inp]), "bias": part(l.b1, &[l.out])},
                        "lin2": {"weight": part(l.w2, &[l.out, 1]), "bias": part(l.b2, &[l.out])},
                        "lin3": {"weight": part(l.w3, &[l.out, 1])},
                    })
                })
                .collect();
            Value::Array(layers)
        })
        .collect();
    let n = case.model.x.len() / cfg.data_size;
    json!({
        "format": "golden-v1",
        "name": "",
        "kind": "cnf",
        "dtype": dtype.to_string(),
        "model": {
            "data_size": cfg.data_size,
            "width": cfg.width,
            "depth": cfg.depth,
            "blocks": cfg.blocks,
            "t0": held(dtype, cfg.t0),
            "t1": held(dtype, cfg.t1),
            "dt0": held(dtype, cfg.dt0),
            "solver": case.solver.name(),
            "trace": "exact",
            "weights": weights,
        },
        "x": tensor(&[n, cfg.data_size], case.model.x.iter().map(|&x| held(dtype, x))),
    })
}

/// What one case gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The reference reproduced the library within the tolerance.
    Match,
    /// It did not: the replay's detail and the library's complete case.
    Mismatch {
        /// [`golden::CaseResult::detail`] of the replay.
        detail: String,
        /// The case as the library filled it in.
        golden: Value,
    },
    /// The library raised (type and message).
    LibraryError(String),
}

/// Send `input` to the worker's `golden` op and replay the result through the reference.
/// `Err` only when the worker fails or returns something that is not a golden-v1 case.
pub fn compare(worker: &mut Worker, input: &Value, timeout: Duration) -> Result<Outcome> {
    let golden = match filled(worker, input, false, timeout)? {
        Ok(g) => g,
        Err(e) => return Ok(Outcome::LibraryError(e)),
    };
    let name = golden
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("upstream")
        .to_string();
    let case = Case::parse(&format!("{name} (from the worker)"), &golden.to_string())?;
    // a case the library solved and the reference refuses is a difference too
    let r = match golden::replay(&case) {
        Ok(r) => r,
        Err(e) => {
            return Ok(Outcome::Mismatch {
                detail: format!("the reference refused the case: {e}"),
                golden,
            })
        }
    };
    Ok(if r.passed {
        Outcome::Match
    } else {
        Outcome::Mismatch {
            detail: r.detail,
            golden,
        }
    })
}

/// The case `input` as the library fills it in (`eager`: an ODE solve run op by op instead of
/// jitted); `Ok(Err(_))` when the library raised.
fn filled(
    worker: &mut Worker,
    input: &Value,
    eager: bool,
    timeout: Duration,
) -> Result<std::result::Result<Value, String>> {
    let mut f = Map::new();
    f.insert("case".into(), input.clone());
    if eager {
        f.insert("eager".into(), json!(true));
    }
    let result = match worker.request("golden", f, timeout)? {
        Reply::Failure { failure, .. } => return Ok(Err(failure.to_string())),
        Reply::Success { result, .. } => result,
    };
    result
        .get("case")
        .cloned()
        .map(Ok)
        .ok_or_else(|| Error::Worker {
            profile: worker.profile().to_string(),
            kind: crate::WorkerErrorKind::BadResult,
            detail: "golden result without `case`".into(),
        })
}

/// Why an ODE mismatch says nothing about the reference, when it does not: the library's own
/// jitted and op-by-op runs of the case (`golden`, as filled in by the jitted run) differ beyond
/// the case's tolerance, or take different steps. Rounding in the embedded error estimate
/// (a sum of stage derivatives that nearly cancels) moves the controller's next step; when the
/// library cannot reproduce itself to the tolerance, a second implementation cannot either.
/// `None` when the library is self-consistent (the mismatch stands) or the eager run failed.
pub fn explain_ode(
    worker: &mut Worker,
    golden: &Value,
    timeout: Duration,
) -> Result<Option<String>> {
    let Ok(eager) = filled(worker, golden, true, timeout)? else {
        return Ok(None);
    };
    let tol = crate::tolerance::Tol {
        rtol: golden["tolerance"]["rtol"].as_f64().unwrap_or(0.0),
        atol: golden["tolerance"]["atol"].as_f64().unwrap_or(0.0),
    };
    let numbers = |case: &Value, key: &str| -> Vec<f64> {
        case["expected"][key]["data"]
            .as_array()
            .map(|xs| xs.iter().filter_map(golden::parse_number).collect())
            .unwrap_or_default()
    };
    let steps = |case: &Value| case["expected"]["num_steps"].as_u64();
    let (a_steps, b_steps) = (steps(golden), steps(&eager));
    let (mut off, mut total, mut worst) = (0usize, 0usize, 0.0f64);
    for key in ["ts", "ys"] {
        let (a, b) = (numbers(golden, key), numbers(&eager, key));
        if a.len() != b.len() {
            return Ok(Some(format!(
                "rounding-sensitive: the library's own jitted and op-by-op runs take different \
                 steps ({} and {} values of `{key}`; {a_steps:?} and {b_steps:?} steps)",
                a.len(),
                b.len()
            )));
        }
        for (x, y) in a.iter().zip(&b) {
            total += 1;
            if !tol.close(*y, *x) {
                off += 1;
                worst = worst.max((x - y).abs() / x.abs().max(f64::MIN_POSITIVE));
            }
        }
    }
    Ok((off > 0).then(|| {
        format!(
            "rounding-sensitive: the library's own jitted and op-by-op runs differ beyond the \
             tolerance ({off} of {total} values, relative up to {worst:.1e})"
        )
    }))
}

/// One mismatch, shrunk (the `mismatches` rows of the `--json` document).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Mismatch {
    /// The kind ([`DiffKind::name`]).
    pub kind: String,
    /// The name of the shrunk case.
    pub case: String,
    /// The replay's detail on the shrunk case (first mismatch and count).
    pub detail: String,
    /// The golden-v1 file written, when it could be written.
    pub golden_file: Option<String>,
    /// The input as drawn before shrinking (golden-v1 JSON, no outputs).
    pub drawn: String,
    /// Candidates sent while shrinking.
    pub shrink_steps: u32,
    /// Why the mismatch says nothing about the reference ([`explain_ode`]); `None`: it stands.
    pub explained: Option<String>,
}

/// The whole run (the `--json` document: `{"cases", "mismatches", ...}`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DiffReport {
    /// Cases drawn and compared (not counting shrinking).
    pub cases: u32,
    /// Cases per kind, and how many of them the library rejected.
    pub per_kind: Vec<(String, u32, u32)>,
    /// The mismatches, shrunk.
    pub mismatches: Vec<Mismatch>,
    /// Cases the library rejected (`kind: type: message`), at most 20 listed.
    pub library_errors: Vec<String>,
    /// How many cases the library rejected.
    pub library_error_count: u32,
    /// Wall seconds.
    pub seconds: f64,
}

impl DiffReport {
    /// The kinds of which the library rejected every case: nothing of theirs was compared.
    ///
    /// ```
    /// use harness::upstream::diff::DiffReport;
    /// let report = DiffReport {
    ///     cases: 4,
    ///     per_kind: vec![("adam".into(), 2, 0), ("linesearch".into(), 2, 2)],
    ///     mismatches: vec![],
    ///     library_errors: vec![],
    ///     library_error_count: 2,
    ///     seconds: 0.1,
    /// };
    /// assert_eq!(report.uncompared_kinds(), ["linesearch"]);
    /// assert!(!report.passed());
    /// ```
    pub fn uncompared_kinds(&self) -> Vec<&str> {
        self.per_kind
            .iter()
            .filter(|(_, cases, rejected)| rejected >= cases)
            .map(|(kind, ..)| kind.as_str())
            .collect()
    }

    /// Whether the run passes: every mismatch explained ([`Mismatch::explained`]) and every
    /// kind compared on at least one case (a run that compared nothing proves nothing).
    pub fn passed(&self) -> bool {
        self.mismatches.iter().all(|m| m.explained.is_some()) && self.uncompared_kinds().is_empty()
    }
}

/// Settings of a diff run.
#[derive(Debug, Clone, PartialEq)]
pub struct DiffOptions {
    /// Cases per kind.
    pub cases: u32,
    /// The kinds, in order.
    pub kinds: Vec<DiffKind>,
    /// Seed of the case generator (fixed by default: runs are reproducible).
    pub seed: u64,
    /// Where shrunk cases are written.
    pub out_dir: PathBuf,
    /// Time limit of one `golden` request.
    pub timeout: Duration,
    /// Most candidates sent while shrinking one mismatch.
    pub max_shrink: u32,
}

fn write_case(dir: &Path, golden: &Value) -> std::result::Result<PathBuf, String> {
    let name = golden
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("upstream-diff");
    // the name comes from the worker's reply: a file name in `dir`, never a path out of it
    if !crate::upstream::profile::is_plain_name(name) {
        return Err(format!(
            "the case is named {name:?}, not a plain file name (letters, digits, '.', '_', '-')"
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(format!("{name}.json"));
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    serde::Serialize::serialize(golden, &mut ser).map_err(|e| e.to_string())?;
    buf.push(b'\n');
    std::fs::write(&path, buf).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Draw, compare and shrink (module docs). `progress` receives a line before each drawn case.
/// A worker failure ends the run with `Err`.
pub fn run(
    worker: &mut Worker,
    opts: &DiffOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<DiffReport> {
    let started = Instant::now();
    let mut report = DiffReport {
        cases: 0,
        per_kind: Vec::new(),
        mismatches: Vec::new(),
        library_errors: Vec::new(),
        library_error_count: 0,
        seconds: 0.0,
    };
    for &kind in &opts.kinds {
        let rejected_before = report.library_error_count;
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&opts.seed.to_le_bytes());
        seed[8] = kind as u8;
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed);
        let mut runner = TestRunner::new_with_rng(Config::default(), rng);
        let strategy = kind.inputs();
        for i in 0..opts.cases {
            progress(&format!("{} case {}/{}", kind.name(), i + 1, opts.cases));
            let mut tree = strategy
                .new_tree(&mut runner)
                .map_err(|e| Error::NotImplemented(format!("case generation: {e}")))?;
            let drawn = tree.current();
            let name = format!("upstream-diff-{}-{}-{i}", kind.name(), opts.seed);
            report.cases += 1;
            match compare(worker, &named(drawn.clone(), &name), opts.timeout)? {
                Outcome::Match => {}
                Outcome::LibraryError(e) => {
                    report.library_error_count += 1;
                    if report.library_errors.len() < 20 {
                        report
                            .library_errors
                            .push(format!("{} {name}: {e}", kind.name()));
                    }
                }
                Outcome::Mismatch { detail, golden } => {
                    let (detail, golden, steps) =
                        shrink(worker, &mut *tree, &name, detail, golden, opts)?;
                    let explained = if kind == DiffKind::Ode {
                        explain_ode(worker, &golden, opts.timeout)?
                    } else {
                        None
                    };
                    let golden_file = write_case(&opts.out_dir, &golden)
                        .map(|p| p.display().to_string())
                        .map_err(|e| progress(&format!("could not write the case: {e}")))
                        .ok();
                    report.mismatches.push(Mismatch {
                        kind: kind.name().to_string(),
                        case: name.clone(),
                        detail,
                        golden_file,
                        drawn: drawn.to_string(),
                        shrink_steps: steps,
                        explained,
                    });
                }
            }
        }
        let rejected = report.library_error_count - rejected_before;
        report
            .per_kind
            .push((kind.name().to_string(), opts.cases, rejected));
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// proptest's shrinking loop over the value tree: simplify while the candidate still
/// mismatches, complicate when it matches; returns the smallest mismatch's detail and case.
fn shrink(
    worker: &mut Worker,
    tree: &mut dyn ValueTree<Value = Value>,
    name: &str,
    mut detail: String,
    mut golden: Value,
    opts: &DiffOptions,
) -> Result<(String, Value, u32)> {
    let mut steps = 0;
    if !tree.simplify() {
        return Ok((detail, golden, steps));
    }
    while steps < opts.max_shrink {
        steps += 1;
        let candidate = named(tree.current(), name);
        match compare(worker, &candidate, opts.timeout)? {
            Outcome::Mismatch {
                detail: d,
                golden: g,
            } => {
                detail = d;
                golden = g;
                if !tree.simplify() {
                    break;
                }
            }
            Outcome::Match | Outcome::LibraryError(_) => {
                if !tree.complicate() {
                    break;
                }
            }
        }
    }
    Ok((detail, golden, steps))
}
