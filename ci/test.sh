#!/usr/bin/env bash
# The README's test command, then the extra checks CI runs. Run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
# outputs below go to target/, wherever CARGO_TARGET_DIR puts the build
mkdir -p target
# `== step: <what> (<seconds since the start>)` before each check, and the total at the end, so
# that a log shows where CI's time goes (the run must stay within its time limit).
step() { echo "== step: $* (at ${SECONDS} s)"; }
trap 'echo "== steps ended at ${SECONDS} s (exit $?)"' EXIT
step "cargo test --release"
cargo test --release
# The checks below run the binaries this build made. `cargo run -p harness` (or `-p peers`) would
# resolve the features of that one package, not of the whole workspace, and so rebuild every crate
# whose features differ (half, serde, rand, ... and the two workspace crates above them): the
# three `cargo run` commands this replaced rebuilt for 14 minutes on 2 cores. Building the
# workspace's binaries and examples here is a no-op after the test build, and names the
# executables.
cargo build --release --workspace --bins --examples
bin="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release"
step "golden replays and mutants"
"$bin/harness" golden fixtures/golden
"$bin/harness" golden --face dfdx fixtures/golden
"$bin/harness" mutants
step "the custom optimizer example"
# The subject API on a user-written Adam: every law passes on `good`; `buggy` and `buggy-count`
# must fail (exit 1).
"$bin/examples/custom_optimizer" good
for bug in buggy buggy-count; do
    if "$bin/examples/custom_optimizer" "$bug"; then
        echo "custom_optimizer $bug: the planted bug was not caught" >&2
        exit 1
    fi
done
step "the custom solver example"
# The ODE suite on a user-written Bogacki-Shampine solver: every law passes on `good`; each
# planted bug must fail (exit 1).
"$bin/examples/custom_solver" good
for bug in buggy-node buggy-budget buggy-tol buggy-hidden; do
    if "$bin/examples/custom_solver" "$bug"; then
        echo "custom_solver $bug: the planted bug was not caught" >&2
        exit 1
    fi
done
step "peers"
# The laws on Rust crates written elsewhere: exit 0 once it ran (findings are rows, not failures).
"$bin/peers" --json target/peers.json > /dev/null
step "fuzz smoke"
bash ci/fuzz-smoke.sh
step "fmt, clippy, workflows, rustdoc"
cargo fmt --all --check
cargo clippy --release --all-targets -- -D warnings
# The workflows a repository host runs (.github/workflows) against the workflow schema.
bash ci/lint-workflows.sh
# Intra-doc links: a renamed item must not leave a dead link in the rustdoc headers.
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p harness -p harness-reference -p peers
# The laws against the real libraries (CI reaches PyPI): one venv per pinned profile (skipped when
# up to date), then every subject of every profile; exit 1 if a verdict differs from the expected one.
step "upstream setup and check"
"$bin/harness" upstream setup
"$bin/harness" upstream check --json target/upstream-check.json
step "upstream diff"
"$bin/harness" upstream diff --cases 20 --json target/upstream-diff.json
# Nothing above may write into the repository: outputs go to target/ or a temporary directory,
# and committed snapshots, corpora and fixtures change only by review.
if [ -n "$(git status --porcelain)" ]; then
    git status --short >&2
    echo "the checks above wrote into the repository" >&2
    exit 1
fi
