//! Helpers shared by the integration tests.

use harness::laws::{self, RunConfig};

/// Run the registered law `name` with its default case count and fail with its counterexample.
/// Only pure laws: memory laws run in the serial `memory` test binary.
pub fn assert_law_holds(name: &str) {
    let law = laws::find(name).unwrap_or_else(|| panic!("law {name} is not registered"));
    assert!(
        !law.measures_memory,
        "{name} measures memory: run it in tests/memory.rs"
    );
    let r = laws::run(&law, RunConfig::new(None, None).unwrap());
    assert!(
        r.passed,
        "{name} failed:\n{}",
        r.counterexample.unwrap_or_default()
    );
}
