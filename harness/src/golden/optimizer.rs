//! Replay of `kind = "optimizer"` cases: adam, radam and muon (`ns_coeffs` used verbatim).
//!
//! Adam and RAdam replay through their composed dfdx form under either face (the fused form
//! updates parameters in place and never materialises the updates a case records; law
//! `fused_matches_composed_bitwise` ties it to the composed form). Muon orthogonalises with the
//! planned Newton–Schulz (fast face) or the composed dfdx iteration (dfdx face).

use super::format::{parse_tree, Case};
use super::Comparator;
use crate::backend::{DType, Float};
use crate::optim::{self, AdamHyper, CoeffSpec, Muon, MuonHyper, RadamHyper, Selection, Transform};
use crate::reference::Face;
use crate::tree::{apply_updates, Tree};
use crate::{Error, Result};
use serde_json::Value;

/// Most Newton–Schulz iterations a golden case may ask for: a bound on the work one untrusted
/// file can demand (optax's default is 5; the iteration converges in well under 20).
pub const MAX_NS_STEPS: usize = 100;

/// Replay an `optimizer` case (Adam, RAdam or Muon) through the kernels of `face`, in the case's
/// dtype, recording every comparison in `cmp`; a hyperparameter the reference does not take is a
/// typed error, which fails the case.
pub fn replay(case: &Case, cmp: &mut Comparator, face: Face) -> Result<()> {
    match case.dtype {
        DType::F32 => run::<f32>(case, cmp, face),
        _ => run::<f64>(case, cmp, face),
    }
}

/// Hyperparameters from `optimizer.hyper`, defaults for anything absent; unknown keys are errors
/// (a silently ignored option would make a case pass for the wrong reason).
struct Hyper<'a> {
    case: &'a Case,
    obj: &'a serde_json::Map<String, Value>,
    used: Vec<&'static str>,
}

impl<'a> Hyper<'a> {
    fn f64(&mut self, key: &'static str, default: Option<f64>) -> Result<f64> {
        self.used.push(key);
        match self.obj.get(key) {
            None => {
                default.ok_or_else(|| self.case.err(format!("optimizer.hyper.{key} is required")))
            }
            Some(v) => super::format::parse_number(v).ok_or_else(|| {
                self.case
                    .err(format!("optimizer.hyper.{key} must be a number"))
            }),
        }
    }
    fn bool(&mut self, key: &'static str, default: bool) -> Result<bool> {
        self.used.push(key);
        match self.obj.get(key) {
            None => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| {
                self.case
                    .err(format!("optimizer.hyper.{key} must be a boolean"))
            }),
        }
    }
    fn finish(self) -> Result<()> {
        match self.obj.keys().find(|k| !self.used.contains(&k.as_str())) {
            Some(k) => Err(Error::NotImplemented(format!("optimizer.hyper.{k}"))),
            None => Ok(()),
        }
    }
}

fn adam_hyper(h: &mut Hyper) -> Result<AdamHyper> {
    let d = AdamHyper::default();
    Ok(AdamHyper {
        b1: h.f64("b1", Some(d.b1))?,
        b2: h.f64("b2", Some(d.b2))?,
        eps: h.f64("eps", Some(d.eps))?,
        eps_root: h.f64("eps_root", Some(d.eps_root))?,
        nesterov: h.bool("nesterov", d.nesterov)?,
    })
}

fn run<E: Float>(case: &Case, cmp: &mut Comparator, face: Face) -> Result<()> {
    let name = case
        .at("optimizer/name")?
        .as_str()
        .ok_or_else(|| case.err("optimizer.name must be a string"))?;
    let obj = case
        .at("optimizer/hyper")?
        .as_object()
        .ok_or_else(|| case.err("optimizer.hyper must be an object"))?;
    let mut h = Hyper {
        case,
        obj,
        used: vec![],
    };
    let lr = h.f64("learning_rate", None)?;
    match name {
        "adam" => {
            let hyper = adam_hyper(&mut h)?;
            h.finish()?;
            steps::<E, _>(case, cmp, &optim::adam(lr, hyper)?)
        }
        "radam" => {
            let moments = adam_hyper(&mut h)?;
            let threshold = h.f64("threshold", Some(RadamHyper::default().threshold))?;
            h.finish()?;
            let hyper = RadamHyper { moments, threshold };
            steps::<E, _>(case, cmp, &optim::radam(lr, hyper, Selection::Where)?)
        }
        "muon" => {
            let d = MuonHyper::new(lr);
            let ns_coeffs = muon_coeffs(case, h.obj.get("ns_coeffs"))?;
            h.used.push("ns_coeffs");
            let steps_f = h.f64("ns_steps", Some(d.ns_steps as f64))?;
            if !(steps_f >= 0.0 && steps_f.fract() == 0.0) {
                return Err(case.err("optimizer.hyper.ns_steps must be a non-negative integer"));
            }
            if steps_f > MAX_NS_STEPS as f64 {
                return Err(case.err(format!(
                    "optimizer.hyper.ns_steps = {steps_f} is beyond the {MAX_NS_STEPS} iterations a golden case may ask for (optax's default is 5)"
                )));
            }
            let hyper = MuonHyper {
                learning_rate: lr,
                ns_coeffs,
                ns_steps: steps_f as usize,
                beta: h.f64("beta", Some(d.beta))?,
                eps: h.f64("eps", Some(d.eps))?,
                weight_decay: h.f64("weight_decay", Some(d.weight_decay))?,
                nesterov: h.bool("nesterov", d.nesterov)?,
                adam_b1: h.f64("adam_b1", Some(d.adam_b1))?,
                adam_b2: h.f64("adam_b2", Some(d.adam_b2))?,
                adam_eps_root: h.f64("adam_eps_root", Some(d.adam_eps_root))?,
                adam_weight_decay: h.f64("adam_weight_decay", Some(d.adam_weight_decay))?,
                adam_learning_rate: match h.obj.get("adam_learning_rate") {
                    None | Some(Value::Null) => {
                        h.used.push("adam_learning_rate");
                        None
                    }
                    Some(_) => Some(h.f64("adam_learning_rate", None)?),
                },
            };
            h.finish()?;
            steps::<E, _>(case, cmp, &Muon::new(hyper)?.with_face(face))
        }
        other => Err(case.err(format!("unknown optimizer `{other}`"))),
    }
}

/// `ns_coeffs`: `[a, b, c]` or `[[a, b, c], ...]` (numbers, used verbatim), or a preset name.
fn muon_coeffs(case: &Case, v: Option<&Value>) -> Result<CoeffSpec> {
    let num = |v: &Value| {
        super::format::parse_number(v)
            .ok_or_else(|| case.err("optimizer.hyper.ns_coeffs must hold numbers"))
    };
    match v {
        None => Ok(CoeffSpec::default()),
        Some(Value::String(s)) => Ok(CoeffSpec::Preset(s.clone())),
        Some(Value::Array(items)) if items.iter().all(|x| x.is_array()) => {
            let mut data = Vec::new();
            for row in items {
                let row = row.as_array().expect("checked");
                if row.len() != 3 {
                    return Err(case.err("optimizer.hyper.ns_coeffs rows must have 3 numbers"));
                }
                for x in row {
                    data.push(num(x)?);
                }
            }
            Ok(CoeffSpec::Raw {
                shape: vec![items.len(), 3],
                data,
            })
        }
        Some(Value::Array(items)) => Ok(CoeffSpec::Raw {
            shape: vec![items.len()],
            data: items.iter().map(num).collect::<Result<_>>()?,
        }),
        Some(_) => Err(case.err("optimizer.hyper.ns_coeffs must be a list or a preset name")),
    }
}

/// `state = init(params)`; per step `updates, state = update(grads, state, params)`, compare,
/// `params = params + updates`.
fn steps<E: Float, T: Transform<E>>(case: &Case, cmp: &mut Comparator, opt: &T) -> Result<()> {
    let mut params: Tree<E> = parse_tree(case, case.at("params")?, "params")?;
    let steps = case
        .at("steps")?
        .as_array()
        .ok_or_else(|| case.err("steps must be a list"))?;
    let mut state = opt.init(&params)?;
    for (i, step) in steps.iter().enumerate() {
        let field = |k: &str| {
            step.get(k)
                .ok_or_else(|| case.err(format!("steps[{i}].{k} is missing")))
        };
        let grads: Tree<E> = parse_tree(case, field("grads")?, &format!("steps[{i}].grads"))?;
        let want: Tree<f64> = parse_tree(case, field("updates")?, &format!("steps[{i}].updates"))?;
        let (updates, next) = opt.update(&grads, &state, &params)?;
        cmp.tree(&format!("steps[{i}].updates"), &updates, &want);
        params = apply_updates(&params, &updates)?;
        state = next;
    }
    Ok(())
}
