//! Golden-v1 replay for `kind = "ode"`: parse a case, solve it with the reference solver, and
//! compare step counts exactly and `ts`/`ys` within the case's tolerance.
//!
//! The comparison rule is golden-v1's: a finite expected value passes when
//! `|got - want| <= atol + rtol*|want|`; an infinite one only when `got` is the same infinity;
//! NaN only when `got` is NaN. Counts (`num_accepted_steps`, `num_rejected_steps`, `num_steps`)
//! must be equal. A `float32` case is solved in f32 (time included — diffrax would keep time in
//! f64 under `jax_enable_x64`, so f32 cases may need a looser tolerance than f64 ones).
//!
//! Guarantees: malformed JSON never panics — every missing field, wrong type, bad tensor shape or
//! unknown name is an [`Error::Golden`] naming the case and the JSON path; invalid settings
//! inside a well-formed case surface as the solver's own typed errors.
//!
//! # References
//! - `docs/GOLDEN-FORMAT.md` (golden-v1, kind `ode`).
//! - diffrax 0.7.2 `diffeqsolve(..., saveat=SaveAt(steps=True))`, whose output the cases record.

use crate::backend::{DType, Real};
use crate::ode::fixtures::{ForcedDecay, Linear, LotkaVolterra, VanDerPol};
use crate::ode::{
    solve, Constant, Controller, InitialStep, Pid, SolveOptions, Solver, Stats, VectorField,
};
use crate::{Error, Result};
use serde_json::{Map, Value};

/// Comparison of one real-valued field (`ts` or `ys`).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldCheck {
    /// `"ts"` or `"ys"`.
    pub field: &'static str,
    pub passed: bool,
    /// Number of element pairs compared (the common prefix when lengths differ).
    pub compared: usize,
    /// Largest `|got - want|` over finite expected values (inf when `got` is not finite there).
    pub max_abs_err: f64,
    /// Largest `|got - want| / |want|` over finite expected values (inf for a miss at `want = 0`).
    pub max_rel_err: f64,
    /// The first failing element, or a length mismatch, in words.
    pub first_mismatch: Option<String>,
    /// `|got - want| / (atol + rtol*|want|)` of every finite expected value compared.
    pub error_ratios: Vec<f64>,
}

/// Comparison of one integer count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountCheck {
    pub field: &'static str,
    pub got: u64,
    pub want: u64,
}

impl CountCheck {
    /// Counts must be equal.
    pub fn passed(&self) -> bool {
        self.got == self.want
    }
}

/// The outcome of replaying one `ode` golden case.
#[derive(Debug, Clone, PartialEq)]
pub struct GoldenOdeReport {
    pub name: String,
    pub dtype: DType,
    pub solver: Solver,
    pub rtol: f64,
    pub atol: f64,
    pub counts: Vec<CountCheck>,
    pub ts: FieldCheck,
    pub ys: FieldCheck,
}

impl GoldenOdeReport {
    /// Every count equal and every value within tolerance.
    pub fn passed(&self) -> bool {
        self.counts.iter().all(CountCheck::passed) && self.ts.passed && self.ys.passed
    }

    /// One line per failing check (empty when the case passed).
    pub fn detail(&self) -> String {
        let mut out = Vec::new();
        for c in self.counts.iter().filter(|c| !c.passed()) {
            out.push(format!("{}: got {}, want {}", c.field, c.got, c.want));
        }
        for f in [&self.ts, &self.ys] {
            if let Some(m) = &f.first_mismatch {
                out.push(m.clone());
            }
        }
        out.join("\n")
    }
}

impl std::fmt::Display for GoldenOdeReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} [{} {}]: {} (ts max abs {:.3e} rel {:.3e}; ys max abs {:.3e} rel {:.3e})",
            self.name,
            self.solver,
            self.dtype,
            if self.passed() { "pass" } else { "FAIL" },
            self.ts.max_abs_err,
            self.ts.max_rel_err,
            self.ys.max_abs_err,
            self.ys.max_rel_err,
        )?;
        if !self.passed() {
            write!(f, "\n{}", self.detail())?;
        }
        Ok(())
    }
}

/// Parse-time context: the case name for error messages.
struct Ctx {
    name: String,
}

impl Ctx {
    fn err(&self, msg: impl Into<String>) -> Error {
        Error::Golden {
            file: self.name.clone(),
            msg: msg.into(),
        }
    }

    fn obj<'v>(&self, v: &'v Value, path: &str) -> Result<&'v Map<String, Value>> {
        v.as_object()
            .ok_or_else(|| self.err(format!("`{path}` must be an object, got {}", kind_of(v))))
    }

    fn field<'v>(&self, o: &'v Map<String, Value>, key: &str, path: &str) -> Result<&'v Value> {
        o.get(key)
            .ok_or_else(|| self.err(format!("missing field `{path}.{key}`")))
    }

    fn str<'v>(&self, v: &'v Value, path: &str) -> Result<&'v str> {
        v.as_str()
            .ok_or_else(|| self.err(format!("`{path}` must be a string, got {}", kind_of(v))))
    }

    /// A golden-v1 number: a JSON number or one of `"nan"`, `"inf"`, `"-inf"`.
    fn num(&self, v: &Value, path: &str) -> Result<f64> {
        match v {
            Value::Number(x) => x
                .as_f64()
                .ok_or_else(|| self.err(format!("`{path}` is not representable as f64"))),
            Value::String(s) => match s.as_str() {
                "nan" => Ok(f64::NAN),
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                _ => Err(self.err(format!(
                    "`{path}` must be a number or \"nan\"/\"inf\"/\"-inf\", got {s:?}"
                ))),
            },
            _ => Err(self.err(format!("`{path}` must be a number, got {}", kind_of(v)))),
        }
    }

    /// A number, or `None` for an absent key or JSON `null`.
    fn opt_num(&self, o: &Map<String, Value>, key: &str, path: &str) -> Result<Option<f64>> {
        match o.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => self.num(v, &format!("{path}.{key}")).map(Some),
        }
    }

    fn count(&self, v: &Value, path: &str) -> Result<u64> {
        v.as_u64()
            .ok_or_else(|| self.err(format!("`{path}` must be a non-negative integer, got {v}")))
    }

    /// A tensor `{"shape": [...], "data": [...]}`: its shape and row-major data.
    fn tensor(&self, v: &Value, path: &str) -> Result<(Vec<usize>, Vec<f64>)> {
        let o = self.obj(v, path)?;
        let shape_v = self.field(o, "shape", path)?;
        let shape: Vec<usize> = shape_v
            .as_array()
            .ok_or_else(|| self.err(format!("`{path}.shape` must be an array")))?
            .iter()
            .map(|d| {
                d.as_u64()
                    .and_then(|d| usize::try_from(d).ok())
                    .ok_or_else(|| {
                        self.err(format!(
                            "`{path}.shape` entries must be non-negative integers, got {d}"
                        ))
                    })
            })
            .collect::<Result<_>>()?;
        let data: Vec<f64> = self
            .field(o, "data", path)?
            .as_array()
            .ok_or_else(|| self.err(format!("`{path}.data` must be an array")))?
            .iter()
            .enumerate()
            .map(|(i, x)| self.num(x, &format!("{path}.data[{i}]")))
            .collect::<Result<_>>()?;
        let numel = shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| self.err(format!("`{path}.shape` {shape:?} overflows")))?;
        if numel != data.len() {
            return Err(self.err(format!(
                "`{path}` has {} data elements but shape {shape:?} needs {numel}",
                data.len()
            )));
        }
        Ok((shape, data))
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The golden-v1 ODE problems, dispatching to the fixtures.
#[derive(Debug, Clone, PartialEq)]
pub enum GoldenProblem {
    Linear(Linear),
    LotkaVolterra(LotkaVolterra),
    VanDerPol(VanDerPol),
    ForcedDecay(ForcedDecay),
}

impl<A: Real> VectorField<A> for GoldenProblem {
    fn eval(&self, t: A, y: &[A], dy: &mut [A]) {
        match self {
            GoldenProblem::Linear(p) => p.eval(t, y, dy),
            GoldenProblem::LotkaVolterra(p) => p.eval(t, y, dy),
            GoldenProblem::VanDerPol(p) => p.eval(t, y, dy),
            GoldenProblem::ForcedDecay(p) => p.eval(t, y, dy),
        }
    }
    fn dim(&self) -> Option<usize> {
        match self {
            GoldenProblem::Linear(p) => VectorField::<A>::dim(p),
            GoldenProblem::LotkaVolterra(p) => VectorField::<A>::dim(p),
            GoldenProblem::VanDerPol(p) => VectorField::<A>::dim(p),
            GoldenProblem::ForcedDecay(p) => VectorField::<A>::dim(p),
        }
    }
}

/// A parsed `ode` case.
struct OdeCase {
    name: String,
    dtype: DType,
    rtol: f64,
    atol: f64,
    problem: GoldenProblem,
    solver: Solver,
    controller: Controller,
    t0: f64,
    t1: f64,
    y0: Vec<f64>,
    want_ts: Vec<f64>,
    want_ys: Vec<f64>,
    want_counts: [u64; 3],
}

fn parse_problem(cx: &Ctx, v: &Value) -> Result<GoldenProblem> {
    let o = cx.obj(v, "problem")?;
    let name = cx.str(cx.field(o, "name", "problem")?, "problem.name")?;
    let empty = Map::new();
    let args = match o.get("args") {
        None | Some(Value::Null) => &empty,
        Some(a) => cx.obj(a, "problem.args")?,
    };
    let arg = |k: &str| {
        cx.num(
            cx.field(args, k, "problem.args")?,
            &format!("problem.args.{k}"),
        )
    };
    Ok(match name {
        "linear" => {
            let (shape, data) = cx.tensor(cx.field(args, "A", "problem.args")?, "problem.args.A")?;
            if shape.len() != 2 || shape[0] != shape[1] {
                return Err(cx.err(format!("`problem.args.A` must be square, got shape {shape:?}")));
            }
            GoldenProblem::Linear(Linear::new(shape[0], data)?)
        }
        "lotka_volterra" => GoldenProblem::LotkaVolterra(LotkaVolterra::new(
            arg("alpha")?,
            arg("beta")?,
            arg("gamma")?,
            arg("delta")?,
        )?),
        "van_der_pol" => GoldenProblem::VanDerPol(VanDerPol::new(arg("mu")?)?),
        "forced_decay" => GoldenProblem::ForcedDecay(ForcedDecay::new(arg("k")?, arg("w")?)?),
        other => {
            return Err(cx.err(format!(
                "unknown `problem.name` {other:?}; expected linear, lotka_volterra, van_der_pol or forced_decay"
            )))
        }
    })
}

fn parse_controller(cx: &Ctx, v: &Value) -> Result<Controller> {
    let o = cx.obj(v, "controller")?;
    let ty = cx.str(cx.field(o, "type", "controller")?, "controller.type")?;
    let num = |k: &str| cx.num(cx.field(o, k, "controller")?, &format!("controller.{k}"));
    let opt = |k: &str| cx.opt_num(o, k, "controller");
    match ty {
        "constant" => Ok(Controller::Constant(Constant::new(num("dt0")?)?)),
        "pid" => {
            let mut p = Pid::new(num("rtol")?, num("atol")?)?;
            if let Some(x) = opt("pcoeff")? {
                p = p.pcoeff(x)?;
            }
            if let Some(x) = opt("icoeff")? {
                p = p.icoeff(x)?;
            }
            if let Some(x) = opt("dcoeff")? {
                p = p.dcoeff(x)?;
            }
            if let Some(x) = opt("factormin")? {
                p = p.factormin(x)?;
            }
            if let Some(x) = opt("factormax")? {
                p = p.factormax(x)?;
            }
            if let Some(x) = opt("safety")? {
                p = p.safety(x)?;
            }
            p.dtmin = opt("dtmin")?;
            p.dtmax = opt("dtmax")?;
            p.dt0 = opt("dt0")?;
            p.initial_step = InitialStep::Diffrax0p01;
            p.validate()?;
            Ok(Controller::Pid(p))
        }
        other => Err(cx.err(format!(
            "unknown `controller.type` {other:?}; expected constant or pid"
        ))),
    }
}

fn parse_case(case: &Value) -> Result<OdeCase> {
    let name = case
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("<unnamed ode case>")
        .to_string();
    let cx = Ctx { name: name.clone() };
    let o = cx.obj(case, "<case>")?;
    let format = cx.str(cx.field(o, "format", "<case>")?, "format")?;
    if format != "golden-v1" {
        return Err(cx.err(format!("`format` must be \"golden-v1\", got {format:?}")));
    }
    cx.str(cx.field(o, "name", "<case>")?, "name")?;
    let kind = cx.str(cx.field(o, "kind", "<case>")?, "kind")?;
    if kind != "ode" {
        return Err(cx.err(format!(
            "`kind` must be \"ode\" for an ODE replay, got {kind:?}"
        )));
    }
    let dtype = match cx.str(cx.field(o, "dtype", "<case>")?, "dtype")? {
        "float32" => DType::F32,
        "float64" => DType::F64,
        other => return Err(cx.err(format!("`dtype` must be float32 or float64, got {other:?}"))),
    };
    let tol = cx.obj(cx.field(o, "tolerance", "<case>")?, "tolerance")?;
    let rtol = cx.num(cx.field(tol, "rtol", "tolerance")?, "tolerance.rtol")?;
    let atol = cx.num(cx.field(tol, "atol", "tolerance")?, "tolerance.atol")?;
    if !(rtol.is_finite() && rtol >= 0.0 && atol.is_finite() && atol >= 0.0) {
        return Err(cx.err(format!(
            "tolerance must be finite and >= 0, got rtol {rtol}, atol {atol}"
        )));
    }
    let problem = parse_problem(&cx, cx.field(o, "problem", "<case>")?)?;
    let solver = Solver::parse(cx.str(cx.field(o, "solver", "<case>")?, "solver")?)?;
    let controller = parse_controller(&cx, cx.field(o, "controller", "<case>")?)?;
    let t0 = cx.num(cx.field(o, "t0", "<case>")?, "t0")?;
    let t1 = cx.num(cx.field(o, "t1", "<case>")?, "t1")?;
    let (y0_shape, y0) = cx.tensor(cx.field(o, "y0", "<case>")?, "y0")?;
    let exp = cx.obj(cx.field(o, "expected", "<case>")?, "expected")?;
    let (ts_shape, want_ts) = cx.tensor(cx.field(exp, "ts", "expected")?, "expected.ts")?;
    if ts_shape.len() != 1 {
        return Err(cx.err(format!("`expected.ts` must be 1-d, got shape {ts_shape:?}")));
    }
    let (ys_shape, want_ys) = cx.tensor(cx.field(exp, "ys", "expected")?, "expected.ys")?;
    let mut expect_ys = vec![want_ts.len()];
    expect_ys.extend_from_slice(&y0_shape);
    if ys_shape != expect_ys {
        return Err(cx.err(format!(
            "`expected.ys` shape {ys_shape:?} must be [len(ts)] + y0.shape = {expect_ys:?}"
        )));
    }
    let mut want_counts = [0u64; 3];
    for (slot, key) in
        want_counts
            .iter_mut()
            .zip(["num_accepted_steps", "num_rejected_steps", "num_steps"])
    {
        *slot = cx.count(cx.field(exp, key, "expected")?, &format!("expected.{key}"))?;
    }
    Ok(OdeCase {
        name,
        dtype,
        rtol,
        atol,
        problem,
        solver,
        controller,
        t0,
        t1,
        y0,
        want_ts,
        want_ys,
        want_counts,
    })
}

/// `(ts, ys flattened, stats)` of the solve in `A`, widened to f64.
fn run_in<A: Real>(c: &OdeCase) -> Result<(Vec<f64>, Vec<f64>, Stats)> {
    let y0: Vec<A> = c.y0.iter().map(|&v| A::of_f64(v)).collect();
    let sol = solve(
        &c.problem,
        &c.solver.tableau(),
        &c.controller,
        A::of_f64(c.t0),
        A::of_f64(c.t1),
        &y0,
        &SolveOptions::default(),
    )?;
    let ts = sol.ts.iter().map(|t| t.as_f64()).collect();
    let ys = sol.ys.iter().flatten().map(|v| v.as_f64()).collect();
    Ok((ts, ys, sol.stats))
}

/// Compare `got` with `want` element-wise under golden-v1's rule. `label(i)` names element `i`.
fn compare(
    field: &'static str,
    got: &[f64],
    want: &[f64],
    rtol: f64,
    atol: f64,
    label: impl Fn(usize) -> String,
) -> FieldCheck {
    let mut check = FieldCheck {
        field,
        passed: true,
        compared: got.len().min(want.len()),
        max_abs_err: 0.0,
        max_rel_err: 0.0,
        first_mismatch: None,
        error_ratios: Vec::with_capacity(got.len().min(want.len())),
    };
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            let d = (g - w).abs();
            let d = if d.is_nan() { f64::INFINITY } else { d };
            check.max_abs_err = check.max_abs_err.max(d);
            let rel = if w == 0.0 {
                if d == 0.0 {
                    0.0
                } else {
                    f64::INFINITY
                }
            } else {
                d / w.abs()
            };
            check.max_rel_err = check.max_rel_err.max(rel);
            let tol = atol + rtol * w.abs();
            check.error_ratios.push(match d {
                0.0 => 0.0,
                _ if tol == 0.0 => f64::INFINITY,
                _ => d / tol,
            });
            d <= atol + rtol * w.abs()
        };
        if !ok {
            check.passed = false;
            if check.first_mismatch.is_none() {
                check.first_mismatch = Some(format!(
                    "{}: got {g:e}, want {w:e} (|diff| {:.3e} > atol + rtol*|want| = {:.3e})",
                    label(i),
                    (g - w).abs(),
                    atol + rtol * w.abs()
                ));
            }
        }
    }
    if got.len() != want.len() {
        check.passed = false;
        let msg = format!("{field}: got {} elements, want {}", got.len(), want.len());
        check.first_mismatch = Some(match check.first_mismatch.take() {
            Some(m) => format!("{msg}; first value mismatch {m}"),
            None => msg,
        });
    }
    check
}

/// Replay one golden-v1 `ode` case (the parsed JSON document) and compare with its expectations.
///
/// ```
/// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/golden/ode-lv-tsit5-pid.json");
/// let case: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
/// let report = harness::golden::replay_golden(&case)?;
/// assert!(report.passed(), "{report}");
/// # Ok::<(), harness::Error>(())
/// ```
pub fn replay_golden(case: &Value) -> Result<GoldenOdeReport> {
    let c = parse_case(case)?;
    let (ts, ys, stats) = match c.dtype {
        DType::F32 => run_in::<f32>(&c)?,
        _ => run_in::<f64>(&c)?,
    };
    let d = c.y0.len().max(1);
    let counts = vec![
        CountCheck {
            field: "num_accepted_steps",
            got: stats.num_accepted_steps as u64,
            want: c.want_counts[0],
        },
        CountCheck {
            field: "num_rejected_steps",
            got: stats.num_rejected_steps as u64,
            want: c.want_counts[1],
        },
        CountCheck {
            field: "num_steps",
            got: stats.num_steps as u64,
            want: c.want_counts[2],
        },
    ];
    Ok(GoldenOdeReport {
        ts: compare("ts", &ts, &c.want_ts, c.rtol, c.atol, |i| {
            format!("ts[{i}]")
        }),
        ys: compare("ys", &ys, &c.want_ys, c.rtol, c.atol, |i| {
            format!("ys[{}][{}]", i / d, i % d)
        }),
        name: c.name,
        dtype: c.dtype,
        solver: c.solver,
        rtol: c.rtol,
        atol: c.atol,
        counts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::Error as RefError;

    /// The workspace's golden cases (the three ODE examples among them).
    const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/golden/");

    fn load(file: &str) -> Value {
        let path = format!("{EXAMPLES}{file}");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} is not JSON: {e}"))
    }

    fn replay_passes(file: &str) -> GoldenOdeReport {
        let report = replay_golden(&load(file)).unwrap();
        eprintln!("{report}");
        assert!(report.passed(), "{report}");
        report
    }

    #[test]
    fn dopri5_matches_golden_linear_pid_case() {
        let r = replay_passes("ode-linear-dopri5-pid.json");
        assert_eq!(r.counts[1].got, 1, "the case has one rejected step");
    }

    #[test]
    fn tsit5_matches_golden_lv_case() {
        let r = replay_passes("ode-lv-tsit5-pid.json");
        assert_eq!((r.counts[0].got, r.counts[1].got), (43, 8));
    }

    #[test]
    fn heun_matches_golden_vdp_constant_case() {
        let r = replay_passes("ode-vdp-heun-const.json");
        assert_eq!(r.counts[0].got, 40);
    }

    /// The `expected.ts` numbers of a case file parsed from the raw text with Rust's correctly
    /// rounded `str::parse::<f64>`. serde_json without its `float_roundtrip` feature misreads
    /// some shortest-round-trip literals by one ULP (`0.9500000000000001` -> `0.95`), so bitwise
    /// checks cannot go through `serde_json::Value`.
    fn exact_expected_ts(file: &str) -> Vec<f64> {
        let text = std::fs::read_to_string(format!("{EXAMPLES}{file}")).unwrap();
        let exp = &text[text.find("\"expected\"").unwrap()..];
        let ts = &exp[exp.find("\"ts\"").unwrap()..];
        let data = &ts[ts.find("\"data\"").unwrap()..];
        let body = &data[data.find('[').unwrap() + 1..data.find(']').unwrap()];
        body.split(',')
            .map(|x| x.trim().parse::<f64>().unwrap())
            .collect()
    }

    #[test]
    fn constant_step_times_are_bit_identical_to_golden_vdp_case() {
        // Stronger than the tolerance: the endpoint rule reproduces diffrax's times exactly,
        // including 0.15000000000000002 at step 3 and 0.9500000000000001 at step 19 (the
        // reciprocal form; `t0 + (t1-t0)*(k/n)` differs at 15 of the 40 steps).
        let c = parse_case(&load("ode-vdp-heun-const.json")).unwrap();
        let (ts, _, _) = run_in::<f64>(&c).unwrap();
        assert_eq!(ts, exact_expected_ts("ode-vdp-heun-const.json"));
    }

    #[test]
    fn pid_times_match_golden_far_inside_the_case_tolerance() {
        // Not bitwise: XLA's summation order inside the stage and error dot products is not
        // reproducible, and the embedded error (a difference of nearly equal sums) amplifies
        // ULP differences to ~1e-10 relative in the scaled error and hence in the next step.
        // Measured: ts rel <= 3e-11, ys rel <= 6e-10, against the cases' rtol 1e-8.
        for file in ["ode-linear-dopri5-pid.json", "ode-lv-tsit5-pid.json"] {
            let c = parse_case(&load(file)).unwrap();
            let (ts, _, _) = run_in::<f64>(&c).unwrap();
            let want = exact_expected_ts(file);
            assert_eq!(
                ts.first(),
                want.first(),
                "{file}: the first step is exactly dt0 / 0.01"
            );
            let worst = ts
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs() / b.abs())
                .fold(0.0, f64::max);
            assert!(worst < 1e-9, "{file}: {worst:e}");
            assert_eq!(
                ts.last(),
                want.last(),
                "{file}: the last step ends exactly at t1"
            );
        }
    }

    #[test]
    fn a_perturbed_expectation_is_reported_with_its_first_mismatch() {
        let mut case = load("ode-vdp-heun-const.json");
        case["expected"]["ys"]["data"][7] = serde_json::json!(1.0);
        case["expected"]["num_rejected_steps"] = serde_json::json!(2);
        let r = replay_golden(&case).unwrap();
        assert!(!r.passed());
        assert!(r.ts.passed);
        assert!(!r.ys.passed);
        assert!(
            r.ys.first_mismatch
                .as_deref()
                .unwrap()
                .starts_with("ys[3][1]"),
            "{}",
            r.detail()
        );
        assert!(
            r.detail().contains("num_rejected_steps: got 0, want 2"),
            "{}",
            r.detail()
        );
    }

    #[test]
    fn extra_or_missing_steps_fail_on_length() {
        let mut case = load("ode-vdp-heun-const.json");
        case["expected"]["ts"]["shape"] = serde_json::json!([39]);
        case["expected"]["ts"]["data"].as_array_mut().unwrap().pop();
        case["expected"]["ys"]["shape"] = serde_json::json!([39, 2]);
        let ys = case["expected"]["ys"]["data"].as_array_mut().unwrap();
        ys.pop();
        ys.pop();
        let r = replay_golden(&case).unwrap();
        assert!(!r.ts.passed && !r.ys.passed);
        assert!(r
            .ts
            .first_mismatch
            .unwrap()
            .contains("got 40 elements, want 39"));
    }

    fn golden_msg(r: Result<GoldenOdeReport>) -> String {
        match r {
            Err(Error::Golden { msg, .. }) => msg,
            other => panic!("expected Error::Golden, got {other:?}"),
        }
    }

    #[test]
    fn malformed_cases_are_typed_errors_not_panics() {
        let good = load("ode-lv-tsit5-pid.json");
        let edit = |f: &dyn Fn(&mut Value)| {
            let mut c = good.clone();
            f(&mut c);
            replay_golden(&c)
        };
        assert!(golden_msg(replay_golden(&Value::Null)).contains("must be an object"));
        assert!(golden_msg(edit(&|c| c["format"] = "golden-v0".into())).contains("golden-v1"));
        assert!(golden_msg(edit(&|c| c["kind"] = "optimizer".into())).contains("kind"));
        assert!(golden_msg(edit(&|c| c["dtype"] = "float16".into())).contains("dtype"));
        assert!(golden_msg(edit(&|c| {
            c.as_object_mut().unwrap().remove("t1");
        }))
        .contains("missing field `<case>.t1`"));
        assert!(golden_msg(edit(&|c| c["t0"] = "zero".into())).contains("`t0`"));
        assert!(
            golden_msg(edit(&|c| c["y0"]["shape"] = serde_json::json!([3]))).contains("needs 3")
        );
        assert!(
            golden_msg(edit(&|c| c["y0"]["shape"] = serde_json::json!([-1])))
                .contains("non-negative")
        );
        assert!(golden_msg(edit(&|c| c["problem"]["name"] = "lorenz".into())).contains("lorenz"));
        assert!(golden_msg(edit(&|c| {
            c["problem"]["args"]
                .as_object_mut()
                .unwrap()
                .remove("delta");
        }))
        .contains("problem.args.delta"));
        assert!(golden_msg(edit(&|c| c["controller"]["type"] = "pi".into()))
            .contains("controller.type"));
        assert!(
            golden_msg(edit(&|c| c["expected"]["num_steps"] = serde_json::json!(-1)))
                .contains("num_steps")
        );
        assert!(golden_msg(edit(
            &|c| c["expected"]["ys"]["shape"] = serde_json::json!([86])
        ))
        .contains("y0.shape"));
        assert!(golden_msg(edit(&|c| c["tolerance"]["rtol"] = "inf".into())).contains("tolerance"));
        // A well-formed case with an invalid setting is the solver's own typed error.
        assert!(matches!(
            edit(&|c| c["controller"]["rtol"] = serde_json::json!(-1.0)),
            Err(Error::Reference(RefError::InvalidHyper {
                name: "rtol",
                ..
            }))
        ));
        assert!(matches!(
            edit(&|c| c["solver"] = "rk4".into()),
            Err(Error::Reference(RefError::InvalidHyper {
                name: "solver",
                ..
            }))
        ));
        assert!(matches!(
            edit(&|c| c["y0"] = serde_json::json!({"shape": [3], "data": [1.0, 1.0, 1.0]})),
            Err(Error::Golden { .. }) | Err(Error::Reference(RefError::ShapeMismatch { .. }))
        ));
    }

    #[test]
    fn a_value_of_the_wrong_json_type_is_named_in_the_error() {
        let good = load("ode-lv-tsit5-pid.json");
        let msg = |f: &dyn Fn(&mut Value)| {
            let mut c = good.clone();
            f(&mut c);
            golden_msg(replay_golden(&c))
        };
        use serde_json::json;
        for (what, got) in [
            (json!(null), "got null"),
            (json!(true), "got a boolean"),
            (json!([0.0]), "got an array"),
            (json!({"t": 0.0}), "got an object"),
        ] {
            let m = msg(&|c| c["t0"] = what.clone());
            assert!(
                m.contains("`t0` must be a number") && m.ends_with(got),
                "{m}"
            );
        }
        let m = msg(&|c| c["solver"] = json!(5));
        assert!(m.ends_with("must be a string, got a number"), "{m}");
        let m = msg(&|c| c["problem"] = json!("lotka_volterra"));
        assert!(m.ends_with("must be an object, got a string"), "{m}");
    }

    #[test]
    fn non_finite_expected_values_follow_the_format_rule() {
        let c = compare(
            "ys",
            &[f64::NAN, f64::INFINITY, 1.0],
            &[f64::NAN, f64::INFINITY, 1.0],
            0.0,
            0.0,
            |i| i.to_string(),
        );
        assert!(c.passed);
        let c = compare("ys", &[1.0], &[f64::NAN], 1.0, 1.0, |i| i.to_string());
        assert!(!c.passed);
        let c = compare("ys", &[f64::NAN], &[1.0], 1.0, 1.0, |i| i.to_string());
        assert!(!c.passed);
        assert_eq!(c.max_abs_err, f64::INFINITY);
        let c = compare(
            "ys",
            &[f64::NEG_INFINITY],
            &[f64::INFINITY],
            1.0,
            1.0,
            |i| i.to_string(),
        );
        assert!(!c.passed);
    }

    #[test]
    fn golden_problem_names_parse_to_their_fixtures() {
        let cx = Ctx { name: "t".into() };
        let p = parse_problem(
            &cx,
            &serde_json::json!({"name": "forced_decay", "args": {"k": 0.5, "w": 2.0}}),
        )
        .unwrap();
        assert_eq!(
            p,
            GoldenProblem::ForcedDecay(ForcedDecay { k: 0.5, w: 2.0 })
        );
        let p = parse_problem(
            &cx,
            &serde_json::json!({"name": "van_der_pol", "args": {"mu": 1.0}}),
        )
        .unwrap();
        assert_eq!(p, GoldenProblem::VanDerPol(VanDerPol { mu: 1.0 }));
        assert!(parse_problem(&cx, &serde_json::json!({"name": "linear", "args": {"A": {"shape": [2, 3], "data": [0, 0, 0, 0, 0, 0]}}})).is_err());
    }

    #[test]
    fn a_linear_problem_whose_matrix_is_not_square_2d_is_a_typed_error() {
        // A vector, a 3-d block and a non-square matrix: each must be named as "must be square",
        // never reach an index (a vector has no second dimension).
        let cx = Ctx { name: "t".into() };
        for (shape, n) in [(vec![4], 4), (vec![2, 2, 1], 4), (vec![2, 3], 6)] {
            let a = serde_json::json!({"shape": shape, "data": vec![0.0; n]});
            let e = parse_problem(
                &cx,
                &serde_json::json!({"name": "linear", "args": {"A": a}}),
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains("must be square"), "shape {shape:?}: {e}");
        }
    }

    #[test]
    fn golden_problems_keep_their_fixture_dimension_so_a_wrong_state_is_a_shape_error() {
        use serde_json::json;
        let cx = Ctx { name: "t".into() };
        let a = json!({"shape": [3, 3], "data": [0.0, 1.0, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0, -0.5]});
        for (problem, d) in [
            (json!({"name": "linear", "args": {"A": a}}), 3),
            (
                json!({"name": "lotka_volterra",
                       "args": {"alpha": 1.5, "beta": 1.0, "gamma": 3.0, "delta": 1.0}}),
                2,
            ),
            (json!({"name": "van_der_pol", "args": {"mu": 1.0}}), 2),
        ] {
            let p = parse_problem(&cx, &problem).unwrap();
            assert_eq!(VectorField::<f64>::dim(&p), Some(d), "{problem}");
            // One element too many: a typed error before the field is evaluated (a field that
            // reads past its dimension would otherwise see garbage or panic).
            let r = solve(
                &p,
                &Solver::Tsit5.tableau(),
                &Controller::constant(0.1).unwrap(),
                0.0,
                1.0,
                &vec![1.0; d + 1],
                &SolveOptions::default(),
            );
            assert!(
                matches!(&r, Err(RefError::ShapeMismatch { expected, .. }) if expected == &vec![d]),
                "{problem}: {r:?}"
            );
        }
        // Forced decay acts element-wise: no fixed dimension, any state length solves.
        let p = parse_problem(
            &cx,
            &json!({"name": "forced_decay", "args": {"k": 0.5, "w": 2.0}}),
        );
        let p = p.unwrap();
        assert_eq!(VectorField::<f64>::dim(&p), None);
        let ctl = Controller::constant(0.1).unwrap();
        let r = solve(
            &p,
            &Solver::Tsit5.tableau(),
            &ctl,
            0.0,
            1.0,
            &[1.0; 4],
            &SolveOptions::default(),
        );
        assert_eq!(r.unwrap().y_final.len(), 4);
    }
}
