//! Laws and mutants that measure process-wide memory. This binary is their own, with its own
//! `main` (`harness = false`) running the tests one after another on the main thread: libtest's
//! worker and output-capture threads would otherwise allocate during a measurement.

use harness::laws::radam::{reference_steppers, trace_once_memory_flat, MemCase};
use harness::laws::{self, RunConfig};

fn radam_steps_trace_once_and_memory_stays_flat() {
    let law = laws::find("radam_steps_trace_once_memory_flat").unwrap();
    let r = laws::run(&law, RunConfig::new(None, None));
    assert!(r.passed, "{}", r.counterexample.unwrap_or_default());
}

fn radam_thousand_steps_neither_grow_live_bytes_nor_allocate_in_fused_form() {
    let _g = harness::probe::exclusive();
    for (form, make) in reference_steppers() {
        let run = trace_once_memory_flat(
            &MemCase {
                elements: 1000,
                steps: 1000,
            },
            &*make,
        )
        .unwrap_or_else(|e| panic!("{form}: {e}"));
        assert_eq!(run.traces, 1, "{form}");
        assert!(
            run.live_growth_first <= 0 && run.live_growth_second <= 0,
            "{form}: {run:?}"
        );
        if form.starts_with("fused") {
            assert_eq!(
                (run.allocs_first, run.allocs_second),
                (0, 0),
                "{form} allocated: {run:?}"
            );
        }
    }
}

fn radam_cond_leak_mutant_is_caught_with_two_steps() {
    let reports = harness::mutants::run_all(Some("radam-cond-leak"));
    let r = &reports[0];
    assert!(r.caught, "radam-cond-leak was not caught");
    let c = r.counterexample.as_deref().unwrap();
    assert!(c.contains("steps: 2"), "not shrunk to N = 2: {c}");
    assert!(c.contains("traces (want 1)"), "{c}");
}

fn measure_sees_an_allocation_and_its_release() {
    let _g = harness::probe::exclusive();
    // black_box: LLVM may elide an allocation whose contents are never observed
    let (v, m) = harness::probe::measure(|| std::hint::black_box(vec![0u8; 1 << 20]));
    assert!(
        m.peak_above_baseline >= 1 << 20 && m.live_delta >= 1 << 20,
        "{m:?} {}",
        v.len()
    );
    let (_, m2) = harness::probe::measure(|| drop(std::hint::black_box(v)));
    assert!(m2.live_delta <= -(1 << 20), "{m2:?}");
}

fn ode_checkpointed_gradient_memory_stays_within_its_bound() {
    let law = laws::find("ode_grad_checkpoint_memory_bound").unwrap();
    let r = laws::run(&law, RunConfig::new(None, None));
    assert!(r.passed, "{}", r.counterexample.unwrap_or_default());
}

fn ode_gradient_memory_figures_and_full_tape_mutant_fails_the_bound() {
    use harness::laws::ode::{check_grad_memory, grad_memory, GRAD_MEM_STEPS};
    use harness::ode::Solver;
    let _g = harness::probe::exclusive();
    for solver in [Solver::Tsit5, Solver::Midpoint] {
        let rows = grad_memory(32, solver, &GRAD_MEM_STEPS).unwrap();
        for r in &rows {
            println!(
                "  {solver} n={} c={} state={}B full_tape_peak={}B checkpointed_peak={}B bound={}B",
                r.steps,
                r.checkpoints,
                r.state_bytes,
                r.full_tape_peak,
                r.checkpointed_peak,
                r.bound
            );
        }
        check_grad_memory(&rows, false).unwrap();
        // A "checkpointed" form that keeps every state (the full tape) breaks the bound.
        assert!(
            check_grad_memory(&rows, true).is_err(),
            "{solver}: full tape within bound"
        );
    }
}

fn main() {
    let tests: [(&str, fn()); 6] = [
        (
            "radam_steps_trace_once_and_memory_stays_flat",
            radam_steps_trace_once_and_memory_stays_flat,
        ),
        (
            "radam_thousand_steps_neither_grow_live_bytes_nor_allocate_in_fused_form",
            radam_thousand_steps_neither_grow_live_bytes_nor_allocate_in_fused_form,
        ),
        (
            "radam_cond_leak_mutant_is_caught_with_two_steps",
            radam_cond_leak_mutant_is_caught_with_two_steps,
        ),
        (
            "measure_sees_an_allocation_and_its_release",
            measure_sees_an_allocation_and_its_release,
        ),
        (
            "ode_checkpointed_gradient_memory_stays_within_its_bound",
            ode_checkpointed_gradient_memory_stays_within_its_bound,
        ),
        (
            "ode_gradient_memory_figures_and_full_tape_mutant_fails_the_bound",
            ode_gradient_memory_figures_and_full_tape_mutant_fails_the_bound,
        ),
    ];
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let (mut passed, mut failed) = (0, 0);
    for (name, f) in tests {
        if filter.as_deref().is_some_and(|p| !name.contains(p)) {
            continue;
        }
        match std::panic::catch_unwind(f) {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!("\ntest result: {}. {passed} passed; {failed} failed; 0 ignored; 0 measured; 0 filtered out\n", if failed == 0 { "ok" } else { "FAILED" });
    std::process::exit(if failed == 0 { 0 } else { 101 });
}
