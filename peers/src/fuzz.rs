//! Fuzz bodies over the peer adapters, shared by the cargo-fuzz targets (`fuzz/fuzz_targets/
//! peer_*.rs`) and the corpus and regression replay of `cargo test -p peers`.
//!
//! `peer_ode` decodes the same raw input as the reference's `ode` target
//! ([`harness::laws::fuzz::OdeInput`]: a small system `y_i' = sum_j A_ij y_j + c_i y_i^2`, any
//! interval, tolerances, first step and step budget, unvalidated) into one [`SolveRequest`] and
//! gives it to every peer method that takes its kind of stepping (`ode_solvers`' methods, then
//! `diffsol`'s Tsit45; constant steps to `Rk4` only, not to the adapter's pinned steps of
//! `Dopri5` and `Dop853`). What must hold:
//!
//! - no panic, no hang (the campaign runs with libFuzzer's `-timeout`), no memory exhaustion;
//! - an `Ok` answer is finite and has as many components as the start;
//! - an adaptive solve stays within its step budget (`accepted + rejected <= max_steps`);
//! - `Rk4`'s and diffsol's reported steps account for every evaluation of the field
//!   ([`OdeSolver::evaluations`], as the law `ode_evaluations_accounted`; `Dopri5` and `Dop853`
//!   leave a rejected first step out of their report:
//!   `docs/findings/ode_solvers-first-step-rejections-unreported.md`).
//!
//! Inputs inside a published finding are not re-reported (the findings' reproduction tests hold
//! them): `Rk4` with a step that does not advance toward the end or a non-finite start, end or
//! step, and `Rk4`'s non-finite answers (`docs/findings/ode_solvers-rk4-bad-input.md`), and `Dopri5` taking one step past its
//! budget (`docs/findings/ode_solvers-dopri5-step-limit-off-by-one.md`), and `diffsol`'s
//! non-finite answers (it accepts steps whose error estimate is NaN:
//! `docs/findings/diffsol-nan-error-estimate-accepted.md`). Constant-step requests of more than
//! [`MAX_CONSTANT_STEPS`] steps are not sent: `Rk4` has no step limit and keeps every step's state,
//! so such a request is a request for that much memory, not a defect.
//!
//! `peer_optim` decodes the reference's `radam` input ([`harness::laws::fuzz::RadamInput`]: raw
//! hyperparameters, dtype, up to 64 elements and 16 steps of any gradients) and runs it through
//! candle-optimisers' Adam, AdamW, RAdam and NAdam, each asked for as
//! [`crate::pytorch_convention::Torch::spec`] asks (RAdam at its fixed threshold 5, NAdam with
//! Nesterov momentum; f16 cases run in f32). What must hold: no panic; every step
//! the peer accepts inside the reference's finiteness domain
//! ([`harness::laws::radam::finiteness_domain`]: finite data, hyperparameters in range, a
//! bounded update) gives finite updates. Not re-reported: invalid hyperparameters the peer
//! accepts and zero-element parameters it refuses (`docs/findings/candle-optimisers-*.md`), an
//! `eps` that is zero in the dtype the peer runs in (accepted, then `0/0` on a zero gradient:
//! `docs/findings/candle-optimisers-invalid-hyperparameters.md`), and RAdam with an `eps` whose
//! reciprocal overflows in that dtype (its rectified factor `sqrt(1 - b2^t) / (sqrt(v_t) + eps)`
//! becomes infinite where `v_t = 0`: `docs/findings/candle-optimisers-radam-rectified-factor-overflow.md`);
//! see [`known_optim_finding`].
//!
//! `peer_linesearch` decodes the reference's `linesearch` input
//! ([`harness::laws::fuzz::LineSearchInput`]: raw hyperparameters, a quadratic of dimension 1-6
//! or Rosenbrock, any start) into one search along `-grad f` (`alpha_0` its `max_learning_rate`,
//! `c` its `slope_rtol`, `rho` its `decrease_factor`, `max_backtracking_steps + 1` trials; its
//! other problems, poisons and f32 flag are not used) and gives it to argmin's backtracking line
//! search. What must hold: no panic, no hang; at most `trials + 1` values evaluated; and where the
//! laws can judge the search ([`harness::subject::linesearch::judgeable`]: parameters in range,
//! finite start, slope and candidates, candidates that can be told apart), an answer that claims
//! acceptance is one of the candidates, the rule does not fail there, and its value is the cost
//! there ([`harness::subject::linesearch::accepted_answer_holds`]). The NaN and infinite parameters
//! argmin accepts are a published finding
//! (`docs/findings/argmin-backtracking-nan-parameters-accepted.md`), so outside that domain only
//! the first two are checked.
//!
//! # References
//! - `harness::laws::fuzz` (the reference's targets and their input types).
//! - `fuzz/README.md` (how to run a campaign; where minimised crashes are committed).
//!
//! ```
//! // Any bytes: either a clean run or a named violation, never a panic.
//! assert!(peers::fuzz::ode(&[0u8; 64]).is_ok());
//! ```

use crate::candle_optimisers_adapter::{
    make_adam, make_adamw, make_nadam, make_radam, CandleOptimiser,
};
use crate::diffsol_adapter::Diffsol;
use crate::ode_solvers_adapter::{Method, OdeSolvers};
use crate::pytorch_convention::{Torch, PYTORCH_ADAMW_WEIGHT_DECAY, PYTORCH_NADAM_MOMENTUM_DECAY};
use arbitrary::{Arbitrary, Unstructured};
use harness::backend::DType;
use harness::laws::fuzz::{LineSearchInput, OdeInput, RadamInput};
use harness::laws::radam::{finiteness_domain, leaf};
use harness::laws::strategies::OptCase;
use harness::subject::ode::{counted, OdeSolver, SolveRequest, Stepping};
use harness::subject::optimizer::{Algorithm, Optimizer, OptimizerSpec};
use std::sync::Arc;

/// Most constant steps a fuzzed request may ask a peer for.
pub const MAX_CONSTANT_STEPS: f64 = 100_000.0;

/// The request an [`OdeInput`] stands for ([`OdeInput::system`]; the step budget `1 + max_steps % 512`; constant steps of `dt0` (default 0.1) when `constant`,
/// else adaptive with the raw `rtol`/`atol`).
pub fn ode_request(x: &OdeInput) -> SolveRequest {
    let (field, y0) = x.system();
    SolveRequest {
        field: Arc::new(field),
        t0: x.t0,
        t1: x.t1,
        y0,
        stepping: if x.constant {
            Stepping::Constant {
                dt: x.dt0.unwrap_or(0.1),
            }
        } else {
            Stepping::Adaptive {
                rtol: x.rtol,
                atol: x.atol,
            }
        },
        max_steps: 1 + (x.max_steps % 512) as usize,
    }
}

/// Whether `r` to `method` is inside a published finding (module docs), so not re-reported.
pub fn known_finding(method: Method, r: &SolveRequest) -> bool {
    match (method, r.stepping) {
        (Method::Rk4, Stepping::Constant { dt }) => {
            let steps = (r.t1 - r.t0) / dt;
            // the constructor's `ceil(steps).to_usize().unwrap()` panics (item 1); a NaN or
            // infinite start is integrated into a non-finite answer reported as success (item 2)
            !(steps.is_finite() && steps >= 0.0) || r.y0.iter().any(|v| !v.is_finite())
        }
        _ => false,
    }
}

/// The `peer_ode` target (module docs): `Err` names the method, the request and what broke.
pub fn ode(data: &[u8]) -> Result<(), String> {
    let Ok(x) = OdeInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return Ok(());
    };
    let r = ode_request(&x);
    if let Stepping::Constant { dt } = r.stepping {
        if ((r.t1 - r.t0) / dt).abs() > MAX_CONSTANT_STEPS {
            return Ok(());
        }
    }
    for method in Method::ALL {
        let solver = OdeSolvers(method);
        // constant steps go to Rk4 alone: Dopri5's and Dop853's pinned steps are the adapter's
        // construct for the order law, with error control switched off
        let pinned = method != Method::Rk4 && matches!(r.stepping, Stepping::Constant { .. });
        if pinned || !solver.supports(&r.stepping) || known_finding(method, &r) {
            continue;
        }
        // Rk4 never checks its state: a start that overflows is integrated into a non-finite
        // answer reported as success (docs/findings/ode_solvers-rk4-bad-input.md, item 2);
        // Dopri5 takes one step past its limit
        // (docs/findings/ode_solvers-dopri5-step-limit-off-by-one.md)
        // Dopri5 and Dop853 leave a rejected first step out of their report
        // (docs/findings/ode_solvers-first-step-rejections-unreported.md)
        answer_holds(
            &solver,
            &r,
            Checks {
                finite: method != Method::Rk4,
                over_budget: usize::from(method == Method::Dopri5),
                accounted: method == Method::Rk4,
            },
        )?;
    }
    // diffsol accepts steps into NaN and returns the NaN state
    // (docs/findings/diffsol-nan-error-estimate-accepted.md)
    if Diffsol.supports(&r.stepping) {
        let checks = Checks {
            finite: false,
            over_budget: 0,
            accounted: true,
        };
        answer_holds(&Diffsol, &r, checks)?;
    }
    Ok(())
}

/// Which of [`answer_holds`]'s checks apply to a method (the others are published findings).
struct Checks {
    /// An `Ok` answer is finite.
    finite: bool,
    /// Attempted steps an adaptive solve may take past its budget.
    over_budget: usize,
    /// The steps reported account for the field's evaluations ([`OdeSolver::evaluations`]).
    accounted: bool,
}

/// The target's checks of one solve of `r` by `solver`: an `Ok` answer has as many components as
/// the start, is finite when `checks.finite`, an adaptive solve took at most
/// `max_steps + checks.over_budget` attempted steps, and, when `checks.accounted`, made no more
/// field evaluations than the steps it reports account for.
fn answer_holds(solver: &dyn OdeSolver, r: &SolveRequest, checks: Checks) -> Result<(), String> {
    let (field, calls) = counted(Arc::clone(&r.field));
    let counted_request = SolveRequest { field, ..r.clone() };
    let Ok(report) = solver.solve(&counted_request) else {
        return Ok(()); // a typed error: fine
    };
    let (finite, over_budget) = (checks.finite, checks.over_budget);
    let broke = |what: String| format!("{}: {what} on {r:?}", solver.name());
    if report.y_final.len() != r.y0.len() {
        return Err(broke(format!(
            "answer of {} components for a start of {}",
            report.y_final.len(),
            r.y0.len()
        )));
    }
    if finite && report.y_final.iter().any(|v| !v.is_finite()) {
        return Err(broke(format!(
            "non-finite answer {:?} reported as success",
            report.y_final
        )));
    }
    if matches!(r.stepping, Stepping::Adaptive { .. })
        && report.accepted + report.rejected > r.max_steps + over_budget
    {
        return Err(broke(format!(
            "{} accepted + {} rejected steps over a budget of {}",
            report.accepted, report.rejected, r.max_steps
        )));
    }
    if let Some(counts) = solver.evaluations(&r.stepping).filter(|_| checks.accounted) {
        let made = calls.load(std::sync::atomic::Ordering::Relaxed);
        let allowed = counts.at_most(report.accepted, report.rejected);
        if made > allowed {
            return Err(broke(format!(
                "{made} field evaluations for {} accepted and {} rejected steps reported \
                 ({counts:?} allow {allowed})",
                report.accepted, report.rejected
            )));
        }
    }
    Ok(())
}

/// Whether `case`, run in the peer by `algorithm` in `case.dtype` (f32 or f64), is inside a
/// published finding about non-finite updates, so not re-reported:
///
/// - `eps` rounds to zero in the dtype (the reference refuses it: `AdamHyper::validate_for`);
///   the peer accepts it and divides `0/0` on a zero gradient
///   (`docs/findings/candle-optimisers-invalid-hyperparameters.md`, "An `eps` that is zero in
///   the parameters' dtype");
/// - RAdam, and `1 / eps` overflows in the dtype: the rectified factor's denominator
///   `sqrt(v_t) + eps` is then below `1 / MAX` wherever `v_t = 0`, and the peer's reciprocal of
///   it is infinite (`docs/findings/candle-optimisers-radam-rectified-factor-overflow.md`). A
///   denominator is never below `eps`, so no other input can reach that overflow.
///
/// ```
/// use harness::laws::strategies::OptCase;
/// use harness::backend::DType;
/// use harness::optim::RadamHyper;
/// use harness::subject::optimizer::Algorithm;
/// let mut case = OptCase { hyper: RadamHyper::default(), learning_rate: 1e-3, dtype: DType::F64,
///     params: vec![0.0], grads: vec![vec![1e-170]; 6] };
/// case.hyper.moments.eps = 1e-320;
/// assert!(peers::fuzz::known_optim_finding(Algorithm::RAdam, &case));
/// assert!(!peers::fuzz::known_optim_finding(Algorithm::Adam, &case));
/// case.hyper.moments.eps = 1e-300;
/// assert!(!peers::fuzz::known_optim_finding(Algorithm::RAdam, &case));
/// ```
pub fn known_optim_finding(algorithm: Algorithm, case: &OptCase) -> bool {
    let m = &case.hyper.moments;
    let (zero_in_dtype, reciprocal_overflows) = if case.dtype == DType::F64 {
        (m.validate_for::<f64>().is_err(), !(1.0 / m.eps).is_finite())
    } else {
        let eps = m.eps as f32;
        (m.validate_for::<f32>().is_err(), !(1.0 / eps).is_finite())
    };
    zero_in_dtype || (algorithm == Algorithm::RAdam && reciprocal_overflows)
}

/// The `peer_optim` target (module docs): `Err` names the optimizer, the case and what broke.
pub fn optim(data: &[u8]) -> Result<(), String> {
    let Ok(input) = RadamInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return Ok(());
    };
    let mut case = input.to_case();
    if case.dtype == DType::F16 {
        case.dtype = DType::F32; // the peer runs f32 and f64
    }
    // published findings: out-of-range hyperparameters are accepted, empty parameters refused
    if !finiteness_domain(&case) || case.params.is_empty() {
        return Ok(());
    }
    type Make = fn(&OptimizerSpec) -> harness::reference::Result<CandleOptimiser>;
    let subjects: [(Make, Torch); 4] = [
        (make_adam, Torch::Adam),
        (
            make_adamw,
            Torch::AdamW {
                weight_decay: PYTORCH_ADAMW_WEIGHT_DECAY,
            },
        ),
        (make_radam, Torch::RAdam),
        (
            make_nadam,
            Torch::NAdam {
                momentum_decay: PYTORCH_NADAM_MOMENTUM_DECAY,
            },
        ),
    ];
    for (make, torch) in subjects {
        let spec = torch.spec(&case);
        let Ok(opt) = make(&spec) else {
            continue; // not expressible in the peer's parameters
        };
        if known_optim_finding(spec.algorithm, &case) {
            continue;
        }
        let name = torch.name();
        let broke = |what: String| format!("candle-optimisers {name}: {what} on {case:?}");
        let result = if case.dtype == DType::F64 {
            steps::<f64, _>(opt, &case)
        } else {
            steps::<f32, _>(opt, &case)
        };
        result.map_err(broke)?;
    }
    Ok(())
}

/// Run every step of `case` through `opt`: `Err` at the first non-finite update; a typed error
/// from the peer ends the run quietly.
fn steps<E: harness::backend::Real, O: Optimizer<E>>(
    mut opt: O,
    case: &OptCase,
) -> Result<(), String> {
    let mut params = leaf::<E>(&case.params);
    let Ok(mut state) = opt.init(&params) else {
        return Ok(());
    };
    for (i, g) in case.grads.iter().enumerate() {
        let Ok((updates, next)) = opt.update(&leaf::<E>(g), &state, &params) else {
            return Ok(());
        };
        let u = updates
            .get("w")
            .map(|a| a.data().to_vec())
            .unwrap_or_default();
        if u.iter().any(|v| !harness::backend::Float::is_finite(*v)) {
            return Err(format!("step {}: non-finite update {u:?}", i + 1));
        }
        params = harness::tree::apply_updates(&params, &updates).map_err(|e| e.to_string())?;
        state = next;
    }
    Ok(())
}

/// The `peer_linesearch` target (module docs): `Err` names the request and what broke.
pub fn linesearch(data: &[u8]) -> Result<(), String> {
    use harness::laws::linesearch::Problem;
    use harness::subject::linesearch::{
        accepted_answer_holds, judgeable, BacktrackingSearch, SearchCase,
    };
    let Ok(input) = LineSearchInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return Ok(());
    };
    let case = input.to_case();
    let quadratic = match &case.problem {
        Problem::Quadratic(q) => Some((q.a.clone(), q.b.clone())),
        Problem::Rosenbrock => None,
        _ => return Ok(()), // the suite's problems are the quadratic and Rosenbrock
    };
    let trials = case.hyper.max_backtracking_steps as usize + 1;
    let search = SearchCase {
        quadratic,
        x0: case.x0.clone(),
        direction_scale: vec![1.0; case.x0.len()],
        initial_step: case.hyper.max_learning_rate,
        slope_rtol: case.hyper.slope_rtol,
        decrease_factor: case.hyper.decrease_factor,
    };
    let Ok(r) = search.request(trials) else {
        return Ok(()); // a start the problem itself rejects
    };
    let argmin = crate::argmin_adapter::Argmin;
    let Ok(s) = argmin.search(&r) else {
        return Ok(()); // a typed error: fine
    };
    let broke = |what: String| format!("{}: {what} on {r:?}", argmin.name());
    let evals = r.problem.values_evaluated();
    if evals > trials + 1 {
        return Err(broke(format!(
            "{evals} values evaluated with {trials} trials"
        )));
    }
    if judgeable(&r, trials) {
        accepted_answer_holds(&r, &s, trials).map_err(broke)?;
    }
    Ok(())
}
