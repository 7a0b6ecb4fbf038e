//! Reproductions of the findings in `docs/findings/` about the peers (`ode_solvers-*.md`,
//! `diffsol-*.md`, `candle-optimisers-*.md`, `argmin-*.md`): each test passes while the pinned release behaves as observed; a
//! fixed release makes it fail, which is the signal to update the conformance table and the
//! write-up.

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::optim::Optimizer;
use candle_optimisers::adam::{Adam, ParamsAdam};
use candle_optimisers::nadam::{NAdam, ParamsNAdam};
use candle_optimisers::radam::{ParamsRAdam, RAdam};
use candle_optimisers::Decay as WeightDecay;
use diffsol::{NalgebraMat, OdeBuilder, OdeSolverMethod, OdeSolverStopReason, Vector};
use ode_solvers::{DVector, Dop853, Dopri5, OutputType, Rk4, System};

// The allocation reproduction counts this binary's allocations (per thread: exact).
harness::install_counting_allocator!();

struct Decay;

impl System<f64, DVector<f64>> for Decay {
    fn system(&self, _t: f64, y: &DVector<f64>, dy: &mut DVector<f64>) {
        dy.copy_from(&(-y));
    }
}

fn rk4(y0: [f64; 2], x_end: f64, step: f64) -> std::thread::Result<Rk4<f64, DVector<f64>, Decay>> {
    std::panic::catch_unwind(|| Rk4::new(Decay, 0.0, DVector::from_column_slice(&y0), x_end, step))
}

#[test]
fn finding_rk4_integrates_a_nan_initial_state_into_a_nan_answer_without_an_error() {
    let mut s = rk4([f64::NAN, 0.5], 1.0, 0.01).expect("constructed");
    let stats = s.integrate().expect("no error is returned");
    let y = s.y_out().last().unwrap();
    assert_eq!(stats.accepted_steps, 100);
    assert!(y[0].is_nan(), "{y:?}");
    // the other component is integrated as if nothing were wrong: e^-1 / 2
    assert!((y[1] - 0.5 * (-1f64).exp()).abs() < 1e-9, "{y:?}");
}

#[test]
fn finding_rk4_new_panics_on_a_non_finite_end_or_a_step_that_does_not_advance() {
    // `Rk4::new` computes its step count as ceil((x_end - x) / step_size).to_usize().unwrap()
    for (x_end, step) in [
        (f64::INFINITY, 0.01),
        (f64::NAN, 0.01),
        (1.0, 0.0),
        (1.0, -0.01),
        (1.0, f64::NAN),
    ] {
        assert!(
            rk4([1.0, 0.5], x_end, step).is_err(),
            "Rk4::new(x_end {x_end}, step {step}) did not panic"
        );
    }
    // the well-posed call is fine
    assert!(rk4([1.0, 0.5], 1.0, 0.01).is_ok());
}

/// `(accepted + rejected, None)` of a solve, or `(0, the error)`.
fn attempts(
    r: Result<ode_solvers::dop_shared::Stats, ode_solvers::dop_shared::IntegrationError>,
) -> (u32, Option<String>) {
    match r {
        Ok(st) => (st.accepted_steps + st.rejected_steps, None),
        Err(e) => (0, Some(format!("{e:?}"))),
    }
}

/// `y' = -y`, `y(0) = [1, 0.5]` over `[0, 1]` at `rtol = 1e-6`, `atol = 1e-8` with a step limit
/// of `n_max`, with the crate's default controller settings: `(accepted + rejected, error)`.
fn dopri5(n_max: u32) -> (u32, Option<String>) {
    dopri5_at(n_max, 1e-6)
}

/// [`dopri5`] at `rtol`.
fn dopri5_at(n_max: u32, rtol: f64) -> (u32, Option<String>) {
    let y0 = DVector::from_column_slice(&[1.0, 0.5]);
    let mut s = Dopri5::from_param(
        Decay,
        0.0,
        1.0,
        0.0,
        y0,
        rtol,
        1e-8,
        0.9,
        0.04,
        0.2,
        10.0,
        1.0,
        0.0,
        n_max,
        1000,
        OutputType::Sparse,
    );
    attempts(s.integrate())
}

fn dop853(n_max: u32) -> (u32, Option<String>) {
    dop853_at(n_max, 1e-6)
}

/// [`dop853`] at `rtol`.
fn dop853_at(n_max: u32, rtol: f64) -> (u32, Option<String>) {
    let y0 = DVector::from_column_slice(&[1.0, 0.5]);
    let mut s = Dop853::from_param(
        Decay,
        0.0,
        1.0,
        0.0,
        y0,
        rtol,
        1e-8,
        0.9,
        0.0,
        0.333,
        6.0,
        1.0,
        0.0,
        n_max,
        1000,
        OutputType::Sparse,
    );
    attempts(s.integrate())
}

#[test]
fn finding_dopri5_and_dop853_accept_a_zero_or_negative_rtol() {
    // docs/findings/ode_solvers-nonpositive-rtol-accepted.md: with atol = 1e-8, y' = -y over
    // [0, 1] is solved without an error under every rtol below
    let mut attempts = Vec::new();
    for rtol in [0.0, -1e-6, -1.0, 1e-6, 1.0] {
        let (n5, e5) = dopri5_at(100_000, rtol);
        let (n8, e8) = dop853_at(100_000, rtol);
        assert_eq!((e5, e8), (None, None), "rtol {rtol}");
        attempts.push((n5, n8));
    }
    // measured with ode_solvers 0.6.2: a negative rtol takes the steps of its magnitude
    // rtol:       0        -1e-6   -1      1e-6    1
    assert_eq!(attempts, [(13, 4), (7, 3), (2, 2), (7, 3), (2, 2)]);
}

#[test]
fn finding_dopri5_takes_one_step_more_than_n_max_where_dop853_stops() {
    // with the default limit, each method's own step count
    let (n5, e5) = dopri5(100_000);
    let (n8, e8) = dop853(100_000);
    assert!(
        e5.is_none() && e8.is_none() && n5 >= 2 && n8 >= 2,
        "{n5} {n8}"
    );
    // Dopri5 checks `n_step > n_max` before each step: n_max + 1 steps are allowed
    assert_eq!(dopri5(n5 - 1), (n5, None), "Dopri5 with n_max = {}", n5 - 1);
    let (_, refused) = dopri5(n5 - 2);
    assert!(refused.unwrap().contains("MaxNumStepReached"));
    // Dop853 checks `n_step >= n_max`: the limit is exact
    let (_, refused) = dop853(n8 - 1);
    assert!(refused.unwrap().contains("MaxNumStepReached"));
    assert_eq!(dop853(n8), (n8, None));
}

/// Where a stepped Tsit45 solve ([`tsit45`]) ended: the last result of `step()`, the solver's
/// time and state, and its accepted and rejected step counts.
struct Tsit45Run {
    last: Result<OdeSolverStopReason<f64>, String>,
    t: f64,
    y: Vec<f64>,
    accepted: usize,
    rejected: usize,
}

/// `diffsol`'s Tsit45 on `field` from `t = 0`, `y = y0` toward `t1` at `rtol` and `atol = 1e-8`
/// (`h0` gives only the direction), stepped until it stops or for `max_calls` calls of `step()`.
fn tsit45(
    field: impl Fn(f64, &[f64], &mut [f64]),
    y0: [f64; 2],
    t1: f64,
    rtol: f64,
    max_calls: usize,
) -> Tsit45Run {
    let problem = OdeBuilder::<NalgebraMat<f64>>::new()
        .h0(if t1 < 0.0 { -1.0 } else { 1.0 })
        .rtol(rtol)
        .atol([1e-8])
        .rhs(move |x: &[f64], _p: &[f64], t: f64, dy: &mut [f64]| field(t, x, dy))
        .init(
            move |_p: &[f64], _t: f64, y: &mut [f64]| y.copy_from_slice(&y0),
            2,
        )
        .build()
        .unwrap();
    let mut s = problem.tsit45().unwrap();
    s.set_stop_time(t1).unwrap();
    let mut last = Ok(OdeSolverStopReason::InternalTimestep);
    for _ in 0..max_calls {
        last = s.step().map_err(|e| e.to_string());
        if last != Ok(OdeSolverStopReason::InternalTimestep) {
            break;
        }
    }
    let st = s.get_statistics();
    Tsit45Run {
        last,
        t: s.state().t,
        y: s.state().y.clone_as_vec(),
        accepted: st.number_of_steps,
        rejected: st.number_of_error_test_failures,
    }
}

fn decay(_t: f64, y: &[f64], dy: &mut [f64]) {
    for (d, v) in dy.iter_mut().zip(y) {
        *d = -v;
    }
}

#[test]
fn finding_diffsol_tsit45_accepts_steps_whose_error_estimate_is_nan() {
    // docs/findings/diffsol-nan-error-estimate-accepted.md: a field that is NaN (or infinite)
    // from t = 0.5 on; the solve reaches t1 = 1 with no error and no rejected step
    for bad in [f64::NAN, f64::INFINITY] {
        let field = move |t: f64, y: &[f64], dy: &mut [f64]| {
            for (d, v) in dy.iter_mut().zip(y) {
                *d = if t < 0.5 { -v } else { bad };
            }
        };
        let r = tsit45(field, [1.0, 0.5], 1.0, 1e-6, 100);
        assert_eq!(r.last, Ok(OdeSolverStopReason::TstopReached), "{bad}");
        assert_eq!(r.t, 1.0);
        assert!(r.y.iter().all(|v| v.is_nan()), "{:?}", r.y);
        assert_eq!((r.accepted, r.rejected), (6, 0), "{bad}");
    }
    // the crate's own `solve` returns the NaN state at t1 as its answer
    let problem = OdeBuilder::<NalgebraMat<f64>>::new()
        .rhs(|x: &[f64], _p: &[f64], t: f64, dy: &mut [f64]| {
            for (d, v) in dy.iter_mut().zip(x) {
                *d = if t < 0.5 { -v } else { f64::NAN };
            }
        })
        .init(
            |_p: &[f64], _t: f64, y: &mut [f64]| y.copy_from_slice(&[1.0, 0.5]),
            2,
        )
        .build()
        .unwrap();
    let (_, ts, reason) = problem.tsit45().unwrap().solve(1.0).unwrap();
    assert_eq!(reason, OdeSolverStopReason::TstopReached);
    assert_eq!(ts.last(), Some(&1.0));
}

#[test]
fn finding_diffsol_tsit45_reports_an_overflowed_solve_as_having_reached_its_stop_time() {
    // y' = -y backward from y(0) = [1, 0.5]: the state overflows past t = -709 and turns NaN,
    // the NaN steps are accepted at the maximum growth factor, and the solve stops at t1 = -1000
    let r = tsit45(decay, [1.0, 0.5], -1000.0, 1e-6, 100_000);
    assert_eq!(r.last, Ok(OdeSolverStopReason::TstopReached));
    assert_eq!(r.t, -1000.0);
    assert!(r.y.iter().all(|v| v.is_nan()), "{:?}", r.y);
    assert_eq!((r.accepted, r.rejected), (2604, 0));
    // toward t1 = -inf, the stop test's window 100 eps (|t| + |h|) overflows to infinity once
    // |t| + |h| > f64::MAX, and a finite time counts as having reached -inf
    let r = tsit45(decay, [1.0, 0.5], f64::NEG_INFINITY, 1e-6, 100_000);
    assert_eq!(r.last, Ok(OdeSolverStopReason::TstopReached));
    assert!(r.t.is_finite() && r.t < -1e307, "{}", r.t);
    assert!(r.y.iter().all(|v| v.is_nan()), "{:?}", r.y);
    assert_eq!((r.accepted, r.rejected), (3618, 0));
}

#[test]
fn finding_diffsol_tsit45_steps_a_nan_start_without_end_or_error() {
    // a NaN start: every step is accepted, the time is NaN, and t1 is never reached
    let r = tsit45(decay, [f64::NAN, 0.5], 1.0, 1e-6, 10_000);
    assert_eq!(r.last, Ok(OdeSolverStopReason::InternalTimestep));
    assert!(r.t.is_nan(), "{}", r.t);
    assert_eq!((r.accepted, r.rejected), (10_000, 0));
}

#[test]
fn finding_diffsol_tsit45_accepts_a_zero_or_negative_rtol() {
    // docs/findings/diffsol-nonpositive-rtol-accepted.md: with atol = 1e-8, y' = -y over [0, 1]
    // is solved under every rtol below; a negative rtol takes the steps its magnitude takes
    let exact = [(-1f64).exp(), 0.5 * (-1f64).exp()];
    let mut steps = Vec::new();
    for rtol in [0.0, -1e-6, -1.0, 1e-6, 1.0] {
        let r = tsit45(decay, [1.0, 0.5], 1.0, rtol, 10_000);
        assert_eq!(r.last, Ok(OdeSolverStopReason::TstopReached), "rtol {rtol}");
        let err = (r.y[0] - exact[0]).abs().max((r.y[1] - exact[1]).abs());
        steps.push((r.accepted, r.rejected));
        assert!(err < 1e-5, "rtol {rtol}: error {err:e}");
    }
    // rtol:        0        -1e-6   -1      1e-6    1
    assert_eq!(steps, [(12, 0), (7, 0), (2, 0), (7, 0), (2, 0)]);
}

/// A gradient store holding `grad` for `var` (the store's constructor is private: one from a
/// scalar's backward pass, with the gradient inserted).
fn grads_for(var: &Var, grad: &Tensor) -> candle_core::backprop::GradStore {
    let seed = Var::zeros((), DType::F32, &Device::Cpu).unwrap();
    let mut store = seed.as_tensor().backward().unwrap();
    store.insert(var.as_tensor(), grad.clone());
    store
}

#[test]
fn finding_candle_adam_adamw_radam_nadam_accept_nan_negative_and_out_of_range_hyperparameters() {
    // docs/findings/candle-optimisers-invalid-hyperparameters.md
    let w = Var::new(&[0.5f32, -1.0], &Device::Cpu).unwrap();
    let g = Tensor::new(&[1.0f32, 2.0], &Device::Cpu).unwrap();
    for bad in [
        ParamsAdam {
            beta_1: f64::NAN,
            ..Default::default()
        },
        ParamsAdam {
            beta_2: 1.5,
            ..Default::default()
        },
        ParamsAdam {
            eps: -1.0,
            ..Default::default()
        },
        ParamsAdam {
            lr: f64::NAN,
            ..Default::default()
        },
    ] {
        let mut adam = Adam::new(vec![w.clone()], bad.clone()).expect("accepted by new");
        adam.step(&grads_for(&w, &g)).expect("and stepped");
    }
    // the step ran: b1 = NaN made the parameters NaN without an error
    assert!(w.to_vec1::<f32>().unwrap().iter().all(|x| x.is_nan()));
    let bad = ParamsRAdam {
        beta_1: f64::NAN,
        ..Default::default()
    };
    assert!(RAdam::new(vec![w.clone()], bad).is_ok());
    // AdamW (Adam with decoupled weight decay) and NAdam: the same, and NaN from the first step
    let adamw = ParamsAdam {
        beta_1: f64::NAN,
        weight_decay: Some(WeightDecay::DecoupledWeightDecay(1e-2)),
        ..Default::default()
    };
    let nadam = ParamsNAdam {
        beta_1: f64::NAN,
        ..Default::default()
    };
    let w = Var::new(&[0.5f32, -1.0], &Device::Cpu).unwrap();
    let mut opt = Adam::new(vec![w.clone()], adamw).expect("AdamW accepted");
    opt.step(&grads_for(&w, &g)).expect("and stepped");
    assert!(w.to_vec1::<f32>().unwrap().iter().all(|x| x.is_nan()));
    let w = Var::new(&[0.5f32, -1.0], &Device::Cpu).unwrap();
    let mut opt = NAdam::new(vec![w.clone()], nadam).expect("NAdam accepted");
    opt.step(&grads_for(&w, &g)).expect("and stepped");
    assert!(w.to_vec1::<f32>().unwrap().iter().all(|x| x.is_nan()));
}

#[test]
fn finding_candle_adam_adamw_radam_nadam_step_fails_on_a_zero_element_parameter() {
    // docs/findings/candle-optimisers-empty-parameter.md
    let empty = Tensor::zeros(0, DType::F64, &Device::Cpu).unwrap();
    let w = Var::from_tensor(&empty).unwrap();
    let b = Var::new(&[1.0f64], &Device::Cpu).unwrap();
    let g = Tensor::zeros(0, DType::F64, &Device::Cpu).unwrap();
    let mut store = grads_for(&w, &g);
    store.insert(b.as_tensor(), Tensor::new(&[0.5f64], &Device::Cpu).unwrap());
    let mut adam = Adam::new(vec![b.clone(), w.clone()], ParamsAdam::default()).unwrap();
    let e = adam.step(&store).expect_err("Adam's step fails");
    assert!(e.to_string().contains("derived from its value"), "{e}");
    let mut radam = RAdam::new(vec![w.clone()], ParamsRAdam::default()).unwrap();
    let e = radam
        .step(&grads_for(&w, &g))
        .expect_err("RAdam's step fails");
    assert!(e.to_string().contains("derived from its value"), "{e}");
    let mut nadam = NAdam::new(vec![w.clone()], ParamsNAdam::default()).unwrap();
    let e = nadam
        .step(&grads_for(&w, &g))
        .expect_err("NAdam's step fails");
    assert!(e.to_string().contains("derived from its value"), "{e}");
    let adamw = ParamsAdam {
        weight_decay: Some(WeightDecay::DecoupledWeightDecay(1e-2)),
        ..Default::default()
    };
    let mut adamw = Adam::new(vec![w.clone()], adamw).unwrap();
    let e = adamw
        .step(&grads_for(&w, &g))
        .expect_err("AdamW's step fails");
    assert!(e.to_string().contains("derived from its value"), "{e}");
    // the cause, in candle-core: an element-wise op on an empty tensor returns its input
    let same = (w.as_tensor() - &g).unwrap();
    assert!(w.set(&same).is_err());
}

#[test]
fn observed_candle_radam_allocates_more_per_step_once_rectified_and_keeps_live_bytes_flat() {
    // docs/findings/candle-optimisers-radam-allocations.md: what fails the allocation clause of
    // `optimizer_live_bytes_flat` (a constant per branch, not a growth)
    use harness::probe::{measure_in, Scope};
    let w = Var::new(&[0.5f32], &Device::Cpu).unwrap();
    let g = Tensor::new(&[0.3f32], &Device::Cpu).unwrap();
    let mut radam = RAdam::new(vec![w.clone()], ParamsRAdam::default()).unwrap();
    let mut per_step = Vec::new();
    for _ in 0..8 {
        let store = grads_for(&w, &g);
        let ((), m) = measure_in(Scope::ThisThread, || radam.step(&store).unwrap());
        drop(store);
        per_step.push((m.allocations, m.live_delta));
    }
    // steps 1-5 (rho_t <= 5) are momentum steps, 6-8 rectified: more temporaries each
    assert!(
        per_step[1..5].iter().all(|s| s.0 == per_step[1].0),
        "{per_step:?}"
    );
    assert!(
        per_step[5..].iter().all(|s| s.0 == per_step[5].0),
        "{per_step:?}"
    );
    assert!(per_step[5].0 > per_step[4].0, "{per_step:?}");
    // and nothing stays alive after a step
    assert!(per_step[1..].iter().all(|s| s.1 == 0), "{per_step:?}");
}

/// The parameters after `steps` steps of `opt` from `w`, each on the gradient `g`.
fn after_steps<O: Optimizer>(opt: &mut O, w: &Var, g: &Tensor, steps: usize) -> Vec<Vec<f64>> {
    (0..steps)
        .map(|_| {
            opt.step(&grads_for(w, g)).expect("stepped");
            w.as_tensor()
                .to_dtype(DType::F64)
                .unwrap()
                .to_vec1::<f64>()
                .unwrap()
        })
        .collect()
}

#[test]
fn finding_candle_adam_and_radam_accept_an_eps_that_is_zero_in_f32_and_divide_0_by_0() {
    // docs/findings/candle-optimisers-invalid-hyperparameters.md, "An `eps` that is zero in the
    // parameters' dtype": 1e-50 is a positive f64 that rounds to 0 in f32
    let eps = 1e-50;
    assert_eq!(eps as f32, 0.0);
    // the reference refuses it for f32 arithmetic and accepts it for f64
    let hyper = harness::optim::AdamHyper {
        eps,
        ..Default::default()
    };
    assert!(hyper.validate_for::<f32>().is_err());
    assert!(hyper.validate_for::<f64>().is_ok());
    let zero = Tensor::zeros(2, DType::F32, &Device::Cpu).unwrap();
    // Adam: the first step on a zero gradient is 0 / (sqrt(0) + 0) = NaN
    let w = Var::new(&[0.5f32, -1.0], &Device::Cpu).unwrap();
    let mut adam = Adam::new(vec![w.clone()], params_adam_eps(eps)).expect("accepted by new");
    let seen = after_steps(&mut adam, &w, &zero, 1);
    assert!(seen[0].iter().all(|x| x.is_nan()), "{seen:?}");
    // RAdam: steps 1-5 are momentum steps (lr m_hat = 0, parameters unchanged); step 6 is the
    // first rectified one (rho_t > 5 under the default b2) and multiplies 1/0 = inf by m_hat = 0
    let w = Var::new(&[0.5f32, -1.0], &Device::Cpu).unwrap();
    let params = ParamsRAdam {
        eps,
        ..Default::default()
    };
    let mut radam = RAdam::new(vec![w.clone()], params).expect("accepted by new");
    let seen = after_steps(&mut radam, &w, &zero, 6);
    assert!(seen[..5].iter().all(|p| p == &[0.5, -1.0]), "{seen:?}");
    assert!(seen[5].iter().all(|x| x.is_nan()), "{seen:?}");
    // the same hyperparameters on f64 parameters keep them finite (eps is 1e-50 there)
    let w = Var::new(&[0.5f64, -1.0], &Device::Cpu).unwrap();
    let zero = Tensor::zeros(2, DType::F64, &Device::Cpu).unwrap();
    let mut adam = Adam::new(vec![w.clone()], params_adam_eps(eps)).unwrap();
    assert_eq!(after_steps(&mut adam, &w, &zero, 6)[5], [0.5, -1.0]);
}

/// The peer's default Adam hyperparameters with `eps`.
fn params_adam_eps(eps: f64) -> ParamsAdam {
    ParamsAdam {
        eps,
        ..Default::default()
    }
}

#[test]
fn finding_candle_radam_rectified_step_is_infinite_where_the_exact_update_is_finite() {
    // docs/findings/candle-optimisers-radam-rectified-factor-overflow.md: a gradient of 1e-170
    // (its square underflows, so v_t = 0) and eps = 1e-320 (a subnormal f64, 1/eps > f64::MAX)
    let (g, eps) = (1e-170f64, 1e-320f64);
    assert_eq!(g * g, 0.0);
    assert!((1.0 / eps).is_infinite());
    let grad = Tensor::new(&[g], &Device::Cpu).unwrap();
    let w = Var::new(&[0.0f64], &Device::Cpu).unwrap();
    let p = ParamsRAdam {
        eps,
        ..Default::default()
    };
    let mut radam = RAdam::new(vec![w.clone()], p.clone()).unwrap();
    let seen = after_steps(&mut radam, &w, &grad, 6);
    // steps 1-5 (momentum, theta -= lr m_hat with m_hat = g): finite
    assert!(seen[..5].iter().all(|x| x[0].is_finite()), "{seen:?}");
    // step 6, the first rectified step: -inf
    assert_eq!(seen[5][0], f64::NEG_INFINITY, "{seen:?}");
    // The exact step 6 from the crate's own algorithm box (src/radam.rs, lines 32-38):
    // lr r_t sqrt(1 - b2^t) m_hat / (sqrt(v_t) + eps) with m_hat = g (a constant gradient) and
    // v_t = 0: about 2.0e144, far inside f64's range.
    let (b2, t) = (p.beta_2, 6.0);
    let rho_inf = 2.0 / (1.0 - b2) - 1.0;
    let rho_t = rho_inf - 2.0 * t * b2.powf(t) / (1.0 - b2.powf(t));
    let r = ((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t))
        .sqrt();
    let exact = p.lr * r * (1.0 - b2.powf(t)).sqrt() * (g / eps);
    assert!(exact.is_finite() && exact > 1e144, "{exact:e}");
    // The cause: RAdam forms the factor l = sqrt(1 - b2^t) / (sqrt(v_t) + eps) as a tensor of
    // its own, and candle-core computes `f64 / &Tensor` as `rhs.recip()? * lhs`: here 1/eps,
    // which overflows, then inf * m_hat.
    let denominator = Tensor::new(&[eps], &Device::Cpu).unwrap();
    let l = ((1.0 - b2.powf(t)).sqrt() / &denominator).unwrap();
    assert_eq!(l.to_vec1::<f64>().unwrap(), [f64::INFINITY]);
    // Adam divides the scaled moment by the denominator in one tensor division: finite
    let w = Var::new(&[0.0f64], &Device::Cpu).unwrap();
    let mut adam = Adam::new(vec![w.clone()], params_adam_eps(eps)).unwrap();
    let seen = after_steps(&mut adam, &w, &grad, 6);
    assert!(seen.iter().all(|x| x[0].is_finite()), "{seen:?}");
}

#[test]
fn finding_candle_nn_model_cast_with_to_dtype_keeps_every_f32_variable_alive() {
    // docs/findings/candle-nn-to-dtype-keeps-f32-variables.md
    use peers::candle_nn_stack_adapter::{
        blocks_from, build, held_bound, measure, table_config, Block, Path,
    };
    let cfg = table_config();
    let f32_bytes = cfg.params() * 4;
    // the adapter's f32-then-cast build: the f16 model holds its parameters and the f32 ones
    let m = measure(&cfg, Path::F32ThenCast, &build).unwrap();
    assert_eq!(m.param_bytes, cfg.final_bytes());
    assert!(m.held_bytes >= m.final_bytes + f32_bytes, "{m:?}");
    assert!(m.held_bytes > held_bound(&cfg), "{m:?}");
    // the same build with each cast detached from the graph: the f32 variables are freed
    let detached = |cfg: &harness::stack::StackConfig, _: Path| -> Result<Vec<Block>, String> {
        let varmap = candle_nn::VarMap::new();
        let vb = candle_nn::VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
        let cast = |l: &candle_nn::Linear| {
            let w = l.weight().to_dtype(DType::F16).unwrap().detach();
            let b = l.bias().map(|b| b.to_dtype(DType::F16).unwrap().detach());
            candle_nn::Linear::new(w, b)
        };
        Ok(blocks_from(&vb, cfg)?
            .iter()
            .map(|b| Block {
                up: cast(&b.up),
                down: cast(&b.down),
            })
            .collect())
    };
    let d = measure(&cfg, Path::F32ThenCast, &detached).unwrap();
    assert_eq!(d.param_bytes, cfg.final_bytes());
    assert!(d.held_bytes <= held_bound(&cfg), "{d:?}");
    assert!(d.held_bytes < m.final_bytes + f32_bytes / 8, "{d:?}");
    // the peak is the same either way: every f32 layer and its cast are alive at once
    assert!(d.peak_bytes >= m.final_bytes + f32_bytes, "{d:?}");
}

/// The 2-d Rosenbrock function from `(-1.2, 1)` as an argmin problem, counting its costs.
struct CountedRosenbrock(std::cell::Cell<usize>);

impl argmin::core::CostFunction for CountedRosenbrock {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, x: &Vec<f64>) -> Result<f64, argmin::core::Error> {
        self.0.set(self.0.get() + 1);
        Ok(100.0 * (x[1] - x[0] * x[0]).powi(2) + (1.0 - x[0]).powi(2))
    }
}

impl argmin::core::Gradient for CountedRosenbrock {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, x: &Vec<f64>) -> Result<Vec<f64>, argmin::core::Error> {
        Ok(vec![
            -400.0 * x[0] * (x[1] - x[0] * x[0]) - 2.0 * (1.0 - x[0]),
            200.0 * (x[1] - x[0] * x[0]),
        ])
    }
}

/// One backtracking search of argmin 0.11.0 from `(-1.2, 1)` along `-grad f`, with `c`, `rho`
/// and `alpha_0`, at most 20 candidates: `(constructors accepted everything, cost evaluations,
/// termination reason)`.
fn argmin_search(c: f64, rho: f64, alpha0: f64) -> (bool, usize, String) {
    use argmin::core::{Executor, LineSearch, State};
    use argmin::solver::linesearch::condition::ArmijoCondition;
    use argmin::solver::linesearch::BacktrackingLineSearch;
    let Ok(condition) = ArmijoCondition::new(c) else {
        return (false, 0, "ArmijoCondition::new refused".into());
    };
    let Ok(mut search) =
        BacktrackingLineSearch::<Vec<f64>, Vec<f64>, _, f64>::new(condition).rho(rho)
    else {
        return (false, 0, "rho refused".into());
    };
    search.search_direction(vec![215.6, 88.0]);
    if search.initial_step_length(alpha0).is_err() {
        return (false, 0, "initial_step_length refused".into());
    }
    let problem = CountedRosenbrock(std::cell::Cell::new(0));
    let result = Executor::new(problem, search)
        .configure(|s| {
            s.param(vec![-1.2, 1.0])
                .gradient(vec![-215.6, -88.0])
                .cost(24.2)
                .max_iters(19)
        })
        .run()
        .expect("the run itself succeeds");
    let reason = format!("{:?}", result.state.get_termination_reason());
    (true, result.problem.problem.unwrap().0.get(), reason)
}

#[test]
fn finding_argmin_backtracking_accepts_nan_constants_and_a_nan_or_infinite_first_step() {
    // the checks refuse what lies outside the range...
    for (c, rho, alpha0) in [(0.0, 0.5, 1e-3), (1e-4, 1.0, 1e-3), (1e-4, 0.5, -1.0)] {
        assert!(!argmin_search(c, rho, alpha0).0, "{c} {rho} {alpha0}");
    }
    // ...and NaN, outside nothing, passes every one of them: the search then evaluates all 20
    // candidates (every one NaN, or the rule never true) and stops at the iteration limit
    for (c, rho, alpha0) in [
        (f64::NAN, 0.5, 1e-3),
        (1e-4, 0.5, f64::NAN),
        (1e-4, 0.5, f64::INFINITY),
    ] {
        let (accepted, evals, reason) = argmin_search(c, rho, alpha0);
        assert!(accepted, "{c} {rho} {alpha0}");
        assert_eq!(evals, 20, "{c} {rho} {alpha0}");
        assert!(reason.contains("MaxItersReached"), "{reason}");
    }
    // a NaN rho is taken too, and goes unnoticed while the first candidate satisfies the rule
    let (accepted, evals, reason) = argmin_search(1e-4, f64::NAN, 1e-3);
    assert!(
        accepted && evals == 1 && reason.contains("SolverConverged"),
        "{reason}"
    );
    // once the search has to backtrack, every candidate after the first is NaN
    let (accepted, evals, reason) = argmin_search(1e-4, f64::NAN, 1.0);
    assert!(
        accepted && evals == 20 && reason.contains("MaxItersReached"),
        "{evals} {reason}"
    );
}

/// `y' = 2 t` (one component), recording the time of every evaluation.
#[derive(Default)]
struct Ramp(std::sync::Arc<std::sync::Mutex<Vec<f64>>>);

impl System<f64, DVector<f64>> for Ramp {
    fn system(&self, t: f64, _y: &DVector<f64>, dy: &mut DVector<f64>) {
        self.0.lock().unwrap().push(t);
        dy[0] = 2.0 * t;
    }
}

/// `Dop853::from_param` on [`Ramp`] from 0 to `x_end`, `y(0) = 0`, with the crate's default
/// controller settings; `h = h_max = step` and tolerances of 1e200 pin every step to `step`.
fn dop853_ramp(x_end: f64, rtol: f64, step: Option<f64>) -> (Result<f64, String>, Vec<f64>) {
    let (tol, h_max, h) = match step {
        Some(h) => (1e200, h, h),
        None => (rtol, x_end, 0.0),
    };
    let ramp = Ramp::default();
    let times = std::sync::Arc::clone(&ramp.0);
    let mut s = Dop853::from_param(
        ramp,
        0.0,
        x_end,
        0.0,
        DVector::from_element(1, 0.0),
        tol,
        tol * 1e-2,
        0.9,
        0.0,
        0.333,
        6.0,
        h_max,
        h,
        100_000,
        1000,
        OutputType::Sparse,
    );
    let answer = s
        .integrate()
        .map(|_| s.y_out().last().unwrap()[0])
        .map_err(|e| e.to_string());
    let times = times.lock().unwrap().clone();
    (answer, times)
}

#[test]
fn finding_dop853_evaluates_its_twelfth_stage_at_the_step_start() {
    // docs/findings/ode_solvers-dop853-twelfth-stage-at-step-start.md
    let (answer, times) = dop853_ramp(1.0, 0.0, Some(1.0));
    // f at the start, eleven stages, then f at the end of the accepted step
    assert_eq!(times.len(), 13, "{times:?}");
    assert_eq!(times[0], 0.0);
    // stages 2..=11 at their nodes c_2..c_11, strictly inside the step
    assert!(
        times[1..11].iter().all(|&t| t > 0.0 && t < 1.0),
        "{times:?}"
    );
    // stage 12, whose node is 1 (its row of the tableau sums to 1), runs at the step's start
    assert_eq!(times[11], 0.0, "{times:?}");
    assert_eq!(times[12], 1.0, "{times:?}");
    // An order-8 step integrates y' = 2t exactly: y(1) = 1. With k_12 = f(0) = 0 instead of
    // f(1) = 2 the step is short by h * b_12 * 2, b_12 = 4.47106157277725905e-2 (Hairer's
    // dop853.f, B12).
    let y = answer.unwrap();
    assert!(
        (y - (1.0 - 2.0 * 4.471_061_572_777_259e-2)).abs() < 1e-12,
        "{y}"
    );
}

#[test]
fn finding_dop853_cannot_integrate_y_prime_2t_at_rtol_1e6() {
    // the same equation through the crate's own step-size control: reported as stiff
    let (answer, times) = dop853_ramp(2.0, 1e-6, None);
    let e = answer.expect_err("Dop853 answered");
    assert!(e.contains("stiff"), "{e}");
    assert!(times.len() > 10_000, "{} evaluations", times.len());
    // at rtol 1e-3 it answers after more than 50 steps, off by more than 1e-2 (relative 3e-3)
    let (answer, _) = dop853_ramp(2.0, 1e-3, None);
    let y = answer.unwrap();
    assert!((y - 4.0).abs() > 1e-2, "{y}");
    // Dopri5 of the same release, default settings: exact to rounding in 6 steps
    let mut s = Dopri5::from_param(
        Ramp::default(),
        0.0,
        2.0,
        0.0,
        DVector::from_element(1, 0.0),
        1e-6,
        1e-8,
        0.9,
        0.04,
        0.2,
        10.0,
        2.0,
        0.0,
        100_000,
        1000,
        OutputType::Sparse,
    );
    let stats = s.integrate().expect("Dopri5 answers");
    assert!((s.y_out().last().unwrap()[0] - 4.0).abs() < 1e-12);
    assert!(stats.accepted_steps <= 10, "{stats:?}");
}

/// `y_1' = -50 y_1 (1 + y_2^2)`, `y_2' = -30 y_1 y_2` (the suite's fast decay), counting its
/// evaluations.
#[derive(Default)]
struct FastDecay(std::sync::Arc<std::sync::atomic::AtomicU32>);

impl System<f64, DVector<f64>> for FastDecay {
    fn system(&self, _t: f64, y: &DVector<f64>, dy: &mut DVector<f64>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        dy[0] = -50.0 * y[0] * (1.0 + y[1] * y[1]);
        dy[1] = -30.0 * y[0] * y[1];
    }
}

#[test]
fn finding_dopri5_leaves_rejections_before_the_first_accepted_step_out_of_rejected_steps() {
    // docs/findings/ode_solvers-first-step-rejections-unreported.md
    let field = FastDecay::default();
    let calls = std::sync::Arc::clone(&field.0);
    let mut s = Dopri5::from_param(
        field,
        0.0,
        1.0,
        0.0,
        DVector::from_column_slice(&[1.0, 0.5]),
        1e-3,
        1e-5,
        0.9,
        0.04,
        0.2,
        10.0,
        1.0,
        0.0,
        100_000,
        1000,
        OutputType::Sparse,
    );
    let stats = s.integrate().expect("solved");
    let calls = calls.load(std::sync::atomic::Ordering::Relaxed);
    // the crate's own evaluation count is right
    assert_eq!(stats.num_eval, calls);
    // 2 for the starting step, 1 at the start, 6 a attempt: one attempt more than reported
    let reported = stats.accepted_steps + stats.rejected_steps;
    assert_eq!(calls, 3 + 6 * (reported + 1), "{stats:?}");
}
