//! Golden-v1 replay for `kind = "ode"`: parse a case, solve it with the reference solver, and
//! compare step counts exactly and `ts`/`ys` within the case's tolerance, through the same
//! [`Case`] walker and [`Comparator`] as every other kind.
//!
//! A `float32` case is solved in f32 (time included, as the generators run diffrax with f32
//! times). Malformed JSON never panics: every missing field, wrong type, bad tensor shape or
//! unknown name is an [`Error::Golden`] naming the file and the JSON path; invalid settings
//! inside a well-formed case are the solver's own typed errors.
//!
//! # References
//! - `docs/GOLDEN-FORMAT.md` (golden-v1, kind `ode`).
//! - diffrax 0.7.2 `diffeqsolve(..., saveat=SaveAt(steps=True))`, whose output the cases record.

use super::format::Case;
use super::Comparator;
use crate::backend::{DType, Real};
use crate::ode::fixtures::{ForcedDecay, Linear, LotkaVolterra, VanDerPol};
use crate::ode::Integration;
use crate::ode::{solve, Constant, Controller, InitialStep, Pid, Solver, Stats, VectorField};
use crate::reference::Face;
use crate::Result;
use serde_json::{Map, Value};

/// The golden-v1 ODE problems, dispatching to the fixtures.
#[derive(Debug, Clone, PartialEq)]
pub enum GoldenProblem {
    /// `y' = A y`.
    Linear(Linear),
    /// Lotka–Volterra predator–prey.
    LotkaVolterra(LotkaVolterra),
    /// Van der Pol oscillator.
    VanDerPol(VanDerPol),
    /// Forced decay `y' = -k y + sin(w t)`.
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
    dtype: DType,
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

fn parse_problem(cx: &Case, v: &Value) -> Result<GoldenProblem> {
    let o = cx.obj(v, "problem")?;
    let name = cx.string(cx.field(o, "name", "problem")?, "problem.name")?;
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

fn parse_controller(cx: &Case, v: &Value) -> Result<Controller> {
    let o = cx.obj(v, "controller")?;
    let ty = cx.string(cx.field(o, "type", "controller")?, "controller.type")?;
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

fn parse_case(cx: &Case) -> Result<OdeCase> {
    let o = cx.obj(&cx.doc, "")?;
    let problem = parse_problem(cx, cx.field(o, "problem", "")?)?;
    let solver = Solver::parse(cx.string(cx.field(o, "solver", "")?, "solver")?)?;
    let controller = parse_controller(cx, cx.field(o, "controller", "")?)?;
    let t0 = cx.num(cx.field(o, "t0", "")?, "t0")?;
    let t1 = cx.num(cx.field(o, "t1", "")?, "t1")?;
    let (y0_shape, y0) = cx.tensor(cx.field(o, "y0", "")?, "y0")?;
    let exp = cx.obj(cx.field(o, "expected", "")?, "expected")?;
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
        dtype: cx.dtype,
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
fn run_in<A: Real>(c: &OdeCase, face: Face) -> Result<(Vec<f64>, Vec<f64>, Stats)> {
    let y0: Vec<A> = c.y0.iter().map(|&v| A::of_f64(v)).collect();
    let sol = solve(
        &c.problem,
        &Integration::new(
            &c.solver.tableau(),
            &c.controller,
            A::of_f64(c.t0),
            A::of_f64(c.t1),
        )
        .face(face),
        &y0,
    )?;
    let ts = sol.ts.iter().map(|t| t.as_f64()).collect();
    let ys = sol.ys.iter().flatten().map(|v| v.as_f64()).collect();
    Ok((ts, ys, sol.stats))
}

/// Replay one `ode` case: the three step counts must be equal, then every `ts` and `ys` value
/// within the case's tolerance (a length mismatch is a failure of its own).
///
/// ```
/// use harness::golden::{load, replay};
/// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/golden/ode-lv-tsit5-pid.json");
/// let result = replay(&load(std::path::Path::new(path))?)?;
/// assert!(result.passed, "{}", result.detail);
/// # Ok::<(), harness::Error>(())
/// ```
pub fn replay(case: &Case, cmp: &mut Comparator, face: Face) -> Result<()> {
    let c = parse_case(case)?;
    let (ts, ys, stats) = match c.dtype {
        DType::F32 => run_in::<f32>(&c, face)?,
        _ => run_in::<f64>(&c, face)?,
    };
    let got = [
        stats.num_accepted_steps,
        stats.num_rejected_steps,
        stats.num_steps,
    ];
    for ((field, got), want) in ["num_accepted_steps", "num_rejected_steps", "num_steps"]
        .into_iter()
        .zip(got)
        .zip(c.want_counts)
    {
        cmp.exact(|| field.to_string(), got as i64, want as i64);
    }
    let d = c.y0.len().max(1);
    for (field, got, want) in [("ts", &ts, &c.want_ts), ("ys", &ys, &c.want_ys)] {
        if got.len() != want.len() {
            cmp.fail(format!(
                "{field}: got {} elements, want {}",
                got.len(),
                want.len()
            ));
        }
        for (i, (&g, &w)) in got.iter().zip(want.iter()).enumerate() {
            let what = || match field {
                "ts" => format!("ts[{i}]"),
                _ => format!("ys[{}][{}]", i / d, i % d),
            };
            cmp.value(what, g, w);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::Error as RefError;
    use crate::Error;
    use serde_json::json;

    /// The workspace's golden cases (the three ODE examples among them).
    const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/golden/");

    fn doc(file: &str) -> Value {
        let path = format!("{EXAMPLES}{file}");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} is not JSON: {e}"))
    }

    fn case_of(doc: &Value) -> Result<Case> {
        Case::parse("case.json", &doc.to_string())
    }

    /// Replay a document: the comparator, or the format/solver error.
    fn replay_doc(doc: &Value) -> Result<Comparator> {
        let case = case_of(doc)?;
        let mut cmp = Comparator::new(case.tolerance);
        replay(&case, &mut cmp, Face::Fast)?;
        Ok(cmp)
    }

    /// Replay a committed case, which must pass; its step counts.
    fn replay_passes(file: &str) -> Stats {
        let cmp = replay_doc(&doc(file)).unwrap();
        assert!(cmp.passed(), "{file}: {}", cmp.detail());
        let c = parse_case(&case_of(&doc(file)).unwrap()).unwrap();
        run_in::<f64>(&c, Face::Fast).unwrap().2
    }

    /// A format-check case with no kind-specific fields, for the parser tests.
    fn stub() -> Case {
        case_of(
            &json!({"format": "golden-v1", "name": "t", "kind": "ode", "dtype": "float64",
                        "tolerance": {"rtol": 0.0, "atol": 0.0}}),
        )
        .unwrap()
    }

    #[test]
    fn dopri5_matches_golden_linear_pid_case() {
        let s = replay_passes("ode-linear-dopri5-pid.json");
        assert_eq!(s.num_rejected_steps, 1, "the case has one rejected step");
    }

    #[test]
    fn tsit5_matches_golden_lv_case() {
        let s = replay_passes("ode-lv-tsit5-pid.json");
        assert_eq!((s.num_accepted_steps, s.num_rejected_steps), (43, 8));
    }

    #[test]
    fn heun_matches_golden_vdp_constant_case() {
        let s = replay_passes("ode-vdp-heun-const.json");
        assert_eq!(s.num_accepted_steps, 40);
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

    fn solved_ts(file: &str) -> Vec<f64> {
        let c = parse_case(&case_of(&doc(file)).unwrap()).unwrap();
        run_in::<f64>(&c, Face::Fast).unwrap().0
    }

    #[test]
    fn constant_step_times_are_bit_identical_to_golden_vdp_case() {
        // Stronger than the tolerance: the endpoint rule reproduces diffrax's times exactly,
        // including 0.15000000000000002 at step 3 and 0.9500000000000001 at step 19 (the
        // reciprocal form; `t0 + (t1-t0)*(k/n)` differs at 15 of the 40 steps).
        let file = "ode-vdp-heun-const.json";
        assert_eq!(solved_ts(file), exact_expected_ts(file));
    }

    #[test]
    fn pid_times_match_golden_far_inside_the_case_tolerance() {
        // Not bitwise: XLA's summation order inside the stage and error dot products is not
        // reproducible, and the embedded error (a difference of nearly equal sums) amplifies
        // ULP differences to ~1e-10 relative in the scaled error and hence in the next step.
        // Measured: ts rel <= 3e-11, ys rel <= 6e-10, against the cases' rtol 1e-8.
        for file in ["ode-linear-dopri5-pid.json", "ode-lv-tsit5-pid.json"] {
            let ts = solved_ts(file);
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
        let mut case = doc("ode-vdp-heun-const.json");
        case["expected"]["ys"]["data"][7] = json!(1.0);
        let cmp = replay_doc(&case).unwrap();
        assert!(!cmp.passed());
        assert!(
            cmp.detail().starts_with("1 mismatch(es); first: ys[3][1]"),
            "{}",
            cmp.detail()
        );
        case["expected"]["num_rejected_steps"] = json!(2);
        let cmp = replay_doc(&case).unwrap();
        assert!(
            cmp.detail().contains("num_rejected_steps: got 0, want 2"),
            "{}",
            cmp.detail()
        );
    }

    #[test]
    fn extra_or_missing_steps_fail_on_length() {
        let mut case = doc("ode-vdp-heun-const.json");
        case["expected"]["ts"]["shape"] = json!([39]);
        case["expected"]["ts"]["data"].as_array_mut().unwrap().pop();
        case["expected"]["ys"]["shape"] = json!([39, 2]);
        let ys = case["expected"]["ys"]["data"].as_array_mut().unwrap();
        ys.pop();
        ys.pop();
        let cmp = replay_doc(&case).unwrap();
        assert!(!cmp.passed());
        assert!(
            cmp.detail().contains("ts: got 40 elements, want 39"),
            "{}",
            cmp.detail()
        );
    }

    fn golden_msg(r: Result<Comparator>) -> String {
        match r {
            Err(Error::Golden { file, msg }) => {
                assert_eq!(file, "case.json", "the error names the file");
                msg
            }
            other => panic!("expected Error::Golden, got {other:?}"),
        }
    }

    #[test]
    fn malformed_cases_are_typed_errors_naming_the_file_not_panics() {
        let good = doc("ode-lv-tsit5-pid.json");
        let edit = |f: &dyn Fn(&mut Value)| {
            let mut c = good.clone();
            f(&mut c);
            replay_doc(&c)
        };
        assert!(golden_msg(replay_doc(&Value::Null)).contains("not an object"));
        assert!(golden_msg(edit(&|c| c["format"] = "golden-v0".into())).contains("golden-v1"));
        assert!(golden_msg(edit(&|c| c["dtype"] = "float16".into())).contains("dtype"));
        assert!(golden_msg(edit(&|c| {
            c.as_object_mut().unwrap().remove("t1");
        }))
        .contains("missing field `t1`"));
        assert!(golden_msg(edit(&|c| c["t0"] = "zero".into())).contains("`t0`"));
        assert!(golden_msg(edit(&|c| c["y0"]["shape"] = json!([3]))).contains("needs 3"));
        assert!(golden_msg(edit(&|c| c["y0"]["shape"] = json!([-1]))).contains("non-negative"));
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
            golden_msg(edit(&|c| c["expected"]["num_steps"] = json!(-1))).contains("num_steps")
        );
        assert!(
            golden_msg(edit(&|c| c["expected"]["ys"]["shape"] = json!([86]))).contains("y0.shape")
        );
        assert!(golden_msg(edit(&|c| c["tolerance"]["rtol"] = "inf".into())).contains("tolerance"));
        // A well-formed case with an invalid setting is the solver's own typed error.
        assert!(matches!(
            edit(&|c| c["controller"]["rtol"] = json!(-1.0)),
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
            edit(&|c| c["y0"] = json!({"shape": [3], "data": [1.0, 1.0, 1.0]})),
            Err(Error::Golden { .. }) | Err(Error::Reference(RefError::ShapeMismatch { .. }))
        ));
    }

    #[test]
    fn a_value_of_the_wrong_json_type_is_named_in_the_error() {
        let good = doc("ode-lv-tsit5-pid.json");
        let msg = |f: &dyn Fn(&mut Value)| {
            let mut c = good.clone();
            f(&mut c);
            golden_msg(replay_doc(&c))
        };
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
        let m = msg(&|c| c["name"] = json!(123));
        assert!(m.contains("`name` must be a string, got a number"), "{m}");
    }

    #[test]
    fn non_finite_expected_values_follow_the_format_rule() {
        let tol = crate::tolerance::Tol {
            rtol: 0.0,
            atol: 0.0,
        };
        let mut c = Comparator::new(tol);
        for (g, w) in [
            (f64::NAN, f64::NAN),
            (f64::INFINITY, f64::INFINITY),
            (1.0, 1.0),
        ] {
            c.value(|| "v".into(), g, w);
        }
        assert!(c.passed(), "{}", c.detail());
        let loose = crate::tolerance::Tol {
            rtol: 1.0,
            atol: 1.0,
        };
        for (g, w) in [
            (1.0, f64::NAN),
            (f64::NAN, 1.0),
            (f64::NEG_INFINITY, f64::INFINITY),
        ] {
            let mut c = Comparator::new(loose);
            c.value(|| "v".into(), g, w);
            assert!(!c.passed(), "got {g}, want {w}");
        }
    }

    #[test]
    fn golden_problem_names_parse_to_their_fixtures() {
        let cx = stub();
        let p = parse_problem(
            &cx,
            &json!({"name": "forced_decay", "args": {"k": 0.5, "w": 2.0}}),
        )
        .unwrap();
        assert_eq!(
            p,
            GoldenProblem::ForcedDecay(ForcedDecay { k: 0.5, w: 2.0 })
        );
        let p = parse_problem(&cx, &json!({"name": "van_der_pol", "args": {"mu": 1.0}})).unwrap();
        assert_eq!(p, GoldenProblem::VanDerPol(VanDerPol { mu: 1.0 }));
        assert!(parse_problem(
            &cx,
            &json!({"name": "linear", "args": {"A": {"shape": [2, 3], "data": [0, 0, 0, 0, 0, 0]}}})
        )
        .is_err());
    }

    #[test]
    fn a_linear_problem_whose_matrix_is_not_square_2d_is_a_typed_error() {
        // A vector, a 3-d block and a non-square matrix: each must be named as "must be square",
        // never reach an index (a vector has no second dimension).
        let cx = stub();
        for (shape, n) in [(vec![4], 4), (vec![2, 2, 1], 4), (vec![2, 3], 6)] {
            let a = json!({"shape": shape, "data": vec![0.0; n]});
            let e = parse_problem(&cx, &json!({"name": "linear", "args": {"A": a}}))
                .unwrap_err()
                .to_string();
            assert!(e.contains("must be square"), "shape {shape:?}: {e}");
        }
    }

    #[test]
    fn golden_problems_keep_their_fixture_dimension_so_a_wrong_state_is_a_shape_error() {
        let cx = stub();
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
                &Integration::new(
                    &Solver::Tsit5.tableau(),
                    &Controller::constant(0.1).unwrap(),
                    0.0,
                    1.0,
                ),
                &vec![1.0; d + 1],
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
            &Integration::new(&Solver::Tsit5.tableau(), &ctl, 0.0, 1.0),
            &[1.0; 4],
        );
        assert_eq!(r.unwrap().y_final.len(), 4);
    }
}
