//! A subject that panics is reported once, by its verdict: while the property runner shrinks it
//! (the panic again at every step) the panic hook stays silent, and the hook the program had
//! installed still runs for every panic outside the runner. Its own file: the hook is global,
//! and this test installs one that counts.

use std::sync::atomic::{AtomicUsize, Ordering};

static REPORTED: AtomicUsize = AtomicUsize::new(0);

#[test]
fn panics_inside_the_property_runner_are_reported_by_the_verdict_not_the_hook() {
    std::panic::set_hook(Box::new(|_| {
        REPORTED.fetch_add(1, Ordering::SeqCst);
    }));
    let verdict = harness::laws::check_property("below_ten", 64, 7, 0u32..1000, |&x| {
        assert!(x < 10, "boom at {x}");
        Ok(())
    });
    let err = verdict.unwrap_err();
    assert!(err.contains("boom at 10"), "{err}");
    assert_eq!(
        REPORTED.load(Ordering::SeqCst),
        0,
        "the hook ran while shrinking"
    );
    // outside the runner the program's own hook runs, once per panic
    let _ = std::panic::catch_unwind(|| panic!("outside"));
    assert_eq!(REPORTED.load(Ordering::SeqCst), 1);
}
