#!/usr/bin/env bash
# Fuzz smoke run: every target for FUZZ_SECONDS (default 20) seconds, starting from the committed
# corpus, with no sanitizer. Installs cargo-fuzz if missing. Exits non-zero on any crash.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${FUZZ_SECONDS:-20}"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz
fi
export RUSTC_BOOTSTRAP=1   # cargo-fuzz needs nightly flags; stable toolchain with bootstrap works
targets=$(cargo fuzz list --fuzz-dir fuzz)
for t in $targets; do
  corpus="fixtures/corpus/$t"
  work="fuzz/corpus/$t"
  mkdir -p "$corpus" "$work"
  echo "== fuzz $t for ${SECONDS_PER_TARGET}s"
  cargo fuzz run --fuzz-dir fuzz -s none --release "$t" "$work" "$corpus" -- \
    -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=4096 -print_final_stats=1 2>&1 | tail -n 12
done
