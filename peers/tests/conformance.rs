//! The README's peer conformance table is what the suites give today.

use std::path::PathBuf;

// The optimizer suite's memory law counts this binary's allocations (as the `peers` binary does).
harness::install_counting_allocator!();

#[test]
fn the_readme_table_equals_the_suites_output() {
    let readme =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let (start, end) = ("<!-- peers-table -->\n", "<!-- /peers-table -->");
    let from = readme
        .find(start)
        .expect("README has the peers table marker")
        + start.len();
    let to = readme[from..].find(end).expect("end marker") + from;
    let rows = peers::run(&peers::RunOptions::default());
    let now = peers::markdown_table(&rows);
    assert_eq!(
        &readme[from..to],
        now,
        "regenerate with `cargo run --release -p peers` and review the change"
    );
}
