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

/// The shrunk counterexample of the law `name` (its property `law`, over `strategy`, 256 cases
/// from the default seed) on a planted bug; fails the test if the bug passes.
#[allow(dead_code)]
pub fn planted_bug_caught<T: std::fmt::Debug>(
    name: &str,
    strategy: impl proptest::strategy::Strategy<Value = T>,
    law: impl Fn(&T) -> Result<(), String>,
) -> String {
    laws::check_property(name, 256, laws::DEFAULT_SEED, strategy, law)
        .expect_err("the planted bug must be caught")
}
