//! The laws that tie each fast kernel to its dfdx face hold on the reference and fail, with a
//! small counterexample, on a planted difference: a mistyped decay in the fused Adam/RAdam, a
//! Newton–Schulz iteration dropped, a stage weight, a step whose last stage misses the exact end of
//! the step, a wrong sign in the Armijo test, a CNF trace of the wrong sign, layers stacked out of
//! order.

mod common;
use common::{assert_law_holds, planted_bug_caught as caught};
use harness::backend::{Array, DfdxFromF32, Float, Real};
use harness::cnf::CnfParams;
use harness::laws::cnf::{fast_field, field_faces_agree_with, model_case};
use harness::laws::linesearch::{
    faces_agree_with as linesearch_faces_agree_with, ls_case, KernelSubject,
};
use harness::laws::muon::{mat_case, planned_matches_composed_with};
use harness::laws::ode::{face_case, step_faces_agree_with, StageField, StepSubject};
use harness::laws::radam::fused_matches_composed_with;
use harness::laws::stack::{faces_agree_with as stack_faces_agree_with, stack_case, InitSubject};
use harness::laws::strategies::opt_case;
use harness::mutants::muon_ns::OneIterationShort;
use harness::ode::dfdx_step::{DfdxRkStep, DfdxStepOut};
use harness::ode::Tableau;
use harness::optim::linesearch::{Armijo, DfdxKernels, SearchKernels};
use harness::optim::{AdamHyper, RadamHyper};
use harness::reference::backend::device;
use harness::stack::dfdx_face::{layer_values, stack_cast};
use harness::stack::{AnyBuilt, Built, Observer, StackConfig, Stacked, Strategy, TensorId};
use harness::tree::Tree;
use proptest::prelude::any;

#[test]
fn ode_fast_step_and_solve_equal_the_dfdx_face() {
    assert_law_holds("ode_step_faces_agree");
}

#[test]
fn linesearch_fast_kernels_equal_the_dfdx_face() {
    assert_law_holds("linesearch_faces_agree");
}

#[test]
fn stack_strategies_equal_the_dfdx_face() {
    assert_law_holds("stack_faces_agree");
}

#[test]
fn cnf_fast_field_equals_the_dfdx_face() {
    assert_law_holds("cnf_field_faces_agree");
}

/// `tab` with its first and last output weights moved by `delta` in opposite directions (the
/// weights still sum to one; FSAL tableaus move the last row of `a` with them).
fn nudged(tab: &Tableau, delta: f64) -> Tableau {
    let s = tab.stages();
    let mut b = tab.b().to_vec();
    let mut a: Vec<Vec<f64>> = (0..s).map(|i| tab.a(i).to_vec()).collect();
    let last = if tab.fsal() { s - 2 } else { s - 1 };
    if last > 0 {
        b[0] += delta;
        b[last] -= delta;
        if tab.fsal() {
            a[s - 1][0] += delta;
            a[s - 1][last] -= delta;
        }
    }
    let b_err = tab.b_err().map(<[f64]>::to_vec);
    Tableau::new(
        "nudged",
        tab.c().to_vec(),
        a,
        b,
        b_err,
        tab.order(),
        tab.fsal(),
    )
    .expect("a nudged tableau is still a tableau")
}

/// A fast step whose output weights are off by 1e-9 (a mistyped digit of a coefficient).
struct WrongStageWeight;

impl StepSubject for WrongStageWeight {
    fn step<A: Real>(
        &self,
        tab: &Tableau,
        tprev: A,
        tnext: A,
        y: &[A],
        field: &mut StageField<'_, A>,
    ) -> DfdxStepOut<A> {
        DfdxRkStep::<A>::new(&nudged(tab, 1e-9))
            .step(tprev, tnext, y, None, &mut |t, z, k| field(t, z, k))
    }
}

/// Stage times `t_prev + c_i dt` everywhere: the stage with `c_i = 1` is not pinned to `t_next`,
/// which `t_prev + (t_next - t_prev)` misses by an ulp for many times.
struct NoExactEndOfStep;

impl StepSubject for NoExactEndOfStep {
    fn step<A: Real>(
        &self,
        tab: &Tableau,
        tprev: A,
        tnext: A,
        y: &[A],
        field: &mut StageField<'_, A>,
    ) -> DfdxStepOut<A> {
        let dt = tnext - tprev;
        let times: Vec<A> = tab.c().iter().map(|&c| tprev + A::of_f64(c) * dt).collect();
        DfdxRkStep::<A>::new(tab).step_at(&times, dt, y, None, &mut |t, z, k| field(t, z, k))
    }
}

#[test]
fn ode_step_faces_law_catches_a_wrong_stage_weight() {
    let c = caught("ode_step_faces_agree", face_case(), |c| {
        step_faces_agree_with(c, &WrongStageWeight)
    });
    assert!(c.contains("y1") || c.contains("error estimate"), "{c}");
    println!("{c}");
}

#[test]
fn ode_step_faces_law_catches_a_last_stage_off_the_exact_end_of_step() {
    let c = caught("ode_step_faces_agree", face_case(), |c| {
        step_faces_agree_with(c, &NoExactEndOfStep)
    });
    assert!(
        c.contains("k_"),
        "the stage derivative at the end of the step differs: {c}"
    );
    println!("{c}");
}

/// The dfdx kernels with the slope term's sign flipped: `f_new - f + eta c slope`, which accepts
/// candidates that do not decrease enough.
struct WrongArmijoSign;

impl SearchKernels for WrongArmijoSign {
    fn candidate<A: Real>(&self, params: &Tree<A>, eta: A, u: &Tree<A>) -> Tree<A> {
        DfdxKernels.candidate(params, eta, u)
    }
    fn slope<A: Real>(&self, u: &Tree<A>, g: &Tree<A>) -> A {
        DfdxKernels.slope(u, g)
    }
    fn decrease_error<A: Real>(
        &self,
        armijo: &Armijo,
        eta: A,
        slope: A,
        value: A,
        new_value: A,
    ) -> A {
        DfdxKernels.decrease_error(armijo, eta, -slope, value, new_value)
    }
}

#[test]
fn linesearch_faces_law_catches_a_wrong_armijo_sign() {
    let c = caught("linesearch_faces_agree", ls_case(), |c| {
        linesearch_faces_agree_with(c, &KernelSubject(WrongArmijoSign))
    });
    println!("{c}");
}

#[test]
fn fused_and_composed_adam_radam_law_catches_a_mistyped_decay_in_the_fast_form() {
    // the fused form built with b1 off in its seventh digit
    let c = caught("fused_matches_composed_bitwise", opt_case(8), |c| {
        fused_matches_composed_with(c, |h| RadamHyper {
            moments: AdamHyper {
                b1: h.moments.b1 * (1.0 - 1e-7),
                ..h.moments
            },
            ..h
        })
    });
    assert!(c.contains("params") || c.contains("mu"), "{c}");
    println!("{c}");
}

#[test]
fn fused_and_composed_adam_radam_law_fails_a_fast_form_that_rejects_what_the_composed_one_runs() {
    // the fused form built with b1 = 1 (outside [0, 1)): its constructor refuses every case
    let c = caught("fused_matches_composed_bitwise", opt_case(8), |c| {
        fused_matches_composed_with(c, |h| RadamHyper {
            moments: AdamHyper {
                b1: 1.0,
                ..h.moments
            },
            ..h
        })
    });
    assert!(
        c.contains("the fused constructor rejects what the composed form runs"),
        "{c}"
    );
}

#[test]
fn planned_and_composed_newton_schulz_law_catches_a_dropped_iteration() {
    let c = caught("muon_planned_matches_composed", mat_case(40), |c| {
        planned_matches_composed_with(c, &OneIterationShort)
    });
    assert!(c.contains("planned["), "{c}");
    println!("{c}");
}

/// The fast CNF field with the trace's sign flipped (the divergence entering the log-density with
/// the wrong sign).
fn trace_negated(
    p: &CnfParams<f64>,
    b: usize,
    n: usize,
    probes: Option<&[f64]>,
    t: f64,
    y: &[f64],
    out: &mut [f64],
) {
    fast_field(p, b, n, probes, t, y, out);
    for v in &mut out[n * p.cfg.data_size..] {
        *v = -*v;
    }
}

#[test]
fn cnf_field_faces_law_catches_a_trace_of_the_wrong_sign() {
    let c = caught(
        "cnf_field_faces_agree",
        (model_case(6), any::<bool>()),
        |c| field_faces_agree_with(c, trace_negated),
    );
    assert!(c.contains("trace"), "{c}");
    println!("{c}");
}

/// The dfdx face with its layers stacked last to first.
struct LayersReversed;

fn reversed<E: Float + DfdxFromF32>(cfg: &StackConfig, seed: u64) -> Stacked<E> {
    let dev = device();
    let [a, b, c, d] = TensorId::ALL.map(|t| {
        let layers = (0..cfg.layers())
            .rev()
            .map(|l| layer_values(&dev, cfg, seed, l, t))
            .collect();
        Array::new(cfg.stacked_shape(t), stack_cast::<E>(layers)).expect("stacked shape")
    });
    Stacked::new(*cfg, [a, b, c, d]).expect("stacked shapes")
}

impl InitSubject for LayersReversed {
    fn build(
        &self,
        cfg: &StackConfig,
        seed: u64,
        _strategy: Strategy,
        _obs: &mut dyn Observer,
    ) -> harness::reference::Result<AnyBuilt> {
        Ok(match cfg.dtype() {
            harness::backend::DType::F16 => AnyBuilt::F16(Built::Stacked(reversed(cfg, seed))),
            harness::backend::DType::F32 => AnyBuilt::F32(Built::Stacked(reversed(cfg, seed))),
            _ => AnyBuilt::F64(Built::Stacked(reversed(cfg, seed))),
        })
    }
}

#[test]
fn stack_faces_law_catches_layers_stacked_out_of_order() {
    let c = caught("stack_faces_agree", stack_case(6, 24, 48), |c| {
        stack_faces_agree_with(c, &LayersReversed)
    });
    assert!(
        c.contains("layers: 2"),
        "the smallest stack that shows it has two layers: {c}"
    );
    println!("{c}");
}
