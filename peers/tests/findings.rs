//! Reproductions of the findings in `docs/findings/ode_solvers-rk4-bad-input.md`: each test
//! passes while `ode_solvers` 0.6.2 behaves as observed; a fixed release makes it fail, which is
//! the signal to update the conformance table and the write-up.

use ode_solvers::{DVector, Rk4, System};

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
