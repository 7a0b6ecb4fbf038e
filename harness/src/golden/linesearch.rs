//! Replay of `kind = "linesearch"` cases: `chain(sgd(1.0), scale_by_backtracking_linesearch)`
//! on a rosenbrock or quadratic objective, staged (one trace allowed for the whole run), with the
//! search's rounds computed by the kernels of the chosen face.

use super::format::{parse_number, parse_tensor, Case};
use super::Comparator;
use crate::backend::{Array, DType, Real};
use crate::optim::linesearch::{
    sgd_linesearch, BacktrackingHyper, LineSearch, Objective, Quadratic, Rosenbrock, Staged,
};
use crate::reference::Face;
use crate::tree::{apply_updates, Tree};
use crate::{Error, Result};

/// Most backtracking steps per update a golden case may ask for. Each costs one evaluation of
/// the objective and its gradient over every parameter, and a search that never meets its
/// condition (a NaN value) takes all of them at every update, so the replay's work is this
/// times the parameters times the updates. With the default decrease factor 0.8 the step after
/// 1000 halvings is `0.8^1000 ~ 1e-97`, below every float's resolution: no search needs more.
/// (The reference itself accepts up to [`crate::optim::linesearch::backtracking::MAX_BACKTRACKING_STEPS`] from
/// a caller who asks; a golden file is input, and is bounded tighter.)
pub const MAX_GOLDEN_BACKTRACKING_STEPS: u32 = 1000;

/// Replay a `linesearch` case (SGD with backtracking on one of the fixture objectives) through
/// the kernels of `face`, in the case's dtype, recording every comparison in `cmp`.
pub fn replay(case: &Case, cmp: &mut Comparator, face: Face) -> Result<()> {
    match case.dtype {
        DType::F32 => objective::<f32>(case, cmp, face),
        _ => objective::<f64>(case, cmp, face),
    }
}

/// `hyper`, defaults for anything absent; unknown keys are "not implemented" (never ignored).
pub fn parse_hyper(case: &Case) -> Result<BacktrackingHyper> {
    let obj = case
        .at("hyper")?
        .as_object()
        .ok_or_else(|| case.err("hyper must be an object"))?;
    let steps = obj
        .get("max_backtracking_steps")
        .ok_or_else(|| case.err("hyper.max_backtracking_steps is required"))?
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| case.err("hyper.max_backtracking_steps must be a non-negative integer"))?;
    if steps > MAX_GOLDEN_BACKTRACKING_STEPS {
        return Err(case.err(format!(
            "hyper.max_backtracking_steps = {steps} is beyond the {MAX_GOLDEN_BACKTRACKING_STEPS} a \
             golden case may ask for (optax's default is 15)"
        )));
    }
    let mut h = BacktrackingHyper::new(steps);
    for (k, v) in obj {
        let num = || parse_number(v).ok_or_else(|| case.err(format!("hyper.{k} must be a number")));
        match k.as_str() {
            "max_backtracking_steps" => {}
            "slope_rtol" => h.slope_rtol = num()?,
            "decrease_factor" => h.decrease_factor = num()?,
            "increase_factor" => h.increase_factor = num()?,
            "max_learning_rate" => h.max_learning_rate = num()?,
            "atol" => h.atol = num()?,
            "rtol" => h.rtol = num()?,
            "store_grad" => {
                h.store_grad = v
                    .as_bool()
                    .ok_or_else(|| case.err("hyper.store_grad must be a boolean"))?
            }
            other => return Err(Error::NotImplemented(format!("linesearch hyper.{other}"))),
        }
    }
    Ok(h)
}

fn objective<A: Real>(case: &Case, cmp: &mut Comparator, face: Face) -> Result<()> {
    let name = case
        .at("objective/name")?
        .as_str()
        .ok_or_else(|| case.err("objective.name must be a string"))?;
    match name {
        "rosenbrock" => run::<A, _>(case, cmp, &Rosenbrock, face),
        "quadratic" => {
            let a: Array<f64> =
                parse_tensor(case, case.at("objective/data/A")?, "objective.data.A")?;
            let b: Array<f64> =
                parse_tensor(case, case.at("objective/data/b")?, "objective.data.b")?;
            let n = b.len();
            if b.shape().len() != 1 || a.shape() != [n, n] {
                return Err(case.err(format!(
                    "objective.data: A has shape {:?}, b has shape {:?}; want [n, n] and [n]",
                    a.shape(),
                    b.shape()
                )));
            }
            let q = Quadratic::new(a.into_data(), b.into_data())?;
            run::<A, _>(case, cmp, &q, face)
        }
        other => Err(case.err(format!("unknown objective `{other}`"))),
    }
}

fn run<A: Real, O: Objective<A> + 'static>(
    case: &Case,
    cmp: &mut Comparator,
    f: &O,
    face: Face,
) -> Result<()> {
    let hyper = parse_hyper(case)?;
    let x0: Array<A> = parse_tensor(case, case.at("params")?, "params")?;
    let mut x = Tree::from_leaves([("x".to_string(), x0)])?;
    let steps = case
        .at("steps")?
        .as_array()
        .ok_or_else(|| case.err("steps must be a list"))?;
    let mut search = sgd_linesearch(hyper)?;
    search.1 = search.1.with_face(face);
    let mut opt = Staged::new(search).with_max_traces(1);
    let mut state = opt.search.init(&x)?;
    for (i, step) in steps.iter().enumerate() {
        let field = |k: &str| {
            step.get(k)
                .ok_or_else(|| case.err(format!("steps[{i}].{k} is missing")))
        };
        let number = |k: &str| -> Result<f64> {
            parse_number(field(k)?)
                .ok_or_else(|| case.err(format!("steps[{i}].{k} must be a number")))
        };
        let (value, grad) = f.value_and_grad(&x)?;
        let (u, next) = opt.update(&grad, &state, &x, value, &grad, f)?;
        x = apply_updates(&x, &u)?;
        state = next;
        let ls = &state.1;
        cmp.value(
            || format!("steps[{i}].value"),
            value.as_f64(),
            number("value")?,
        );
        cmp.value(
            || format!("steps[{i}].learning_rate"),
            ls.learning_rate.value.as_f64(),
            number("learning_rate")?,
        );
        let want_n = field("num_linesearch_steps")?.as_i64().ok_or_else(|| {
            case.err(format!(
                "steps[{i}].num_linesearch_steps must be an integer"
            ))
        })?;
        cmp.exact(
            || format!("steps[{i}].num_linesearch_steps"),
            ls.info.num_linesearch_steps.value as i64,
            want_n,
        );
        cmp.value(
            || format!("steps[{i}].decrease_error"),
            ls.info.decrease_error.value.as_f64(),
            number("decrease_error")?,
        );
        let want: Array<f64> = parse_tensor(case, field("params")?, &format!("steps[{i}].params"))?;
        cmp.array(
            &format!("steps[{i}].params"),
            x.get("x").expect("one leaf"),
            &want,
        );
    }
    Ok(())
}
