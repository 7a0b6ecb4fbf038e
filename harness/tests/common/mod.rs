//! Helpers shared by the integration tests.

use harness::laws::{self, RunConfig};

/// Run the registered law `name` with its default case count and fail with its counterexample.
pub fn assert_law_holds(name: &str) {
    let law = laws::find(name).unwrap_or_else(|| panic!("law {name} is not registered"));
    let r = laws::run(&law, RunConfig::new(None, None));
    assert!(
        r.passed,
        "{name} failed:\n{}",
        r.counterexample.unwrap_or_default()
    );
}
