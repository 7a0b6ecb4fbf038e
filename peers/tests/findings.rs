//! Reproductions of the findings in `docs/findings/ode_solvers-*.md`: each test passes while
//! `ode_solvers` 0.6.2 behaves as observed; a fixed release makes it fail, which is the signal to
//! update the conformance table and the write-up.

use ode_solvers::{DVector, Dop853, Dopri5, OutputType, Rk4, System};

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
    let y0 = DVector::from_column_slice(&[1.0, 0.5]);
    let mut s = Dopri5::from_param(
        Decay,
        0.0,
        1.0,
        0.0,
        y0,
        1e-6,
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
    let y0 = DVector::from_column_slice(&[1.0, 0.5]);
    let mut s = Dop853::from_param(
        Decay,
        0.0,
        1.0,
        0.0,
        y0,
        1e-6,
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
