#!/usr/bin/env bash
# The README's test command, then the extra checks CI runs. Run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --release
cargo run --release -q -p harness -- golden fixtures/golden
cargo run --release -q -p harness -- mutants
bash ci/fuzz-smoke.sh
cargo fmt --all --check
cargo clippy --release --all-targets -- -D warnings
# Intra-doc links: a renamed item must not leave a dead link in the rustdoc headers.
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p harness -p harness-reference
