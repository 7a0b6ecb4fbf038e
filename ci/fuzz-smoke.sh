#!/usr/bin/env bash
# Fuzz smoke run: every target for FUZZ_SECONDS (default 20) seconds, starting from the committed
# corpus and regressions, with no sanitizer. Installs cargo-fuzz if missing. Runs every target
# even after a crash, prints each crash's panic message and the input (libFuzzer's Base64 line,
# and the artifact path), and exits non-zero if any target crashed.
#
# The libFuzzer seed is fixed (FUZZ_SEED, default 1) so that a CI failure comes from a change to
# the code or the corpus, not from the draw; the exploration itself is the nightly campaign's job
# (ci/fuzz-nightly.sh, random seeds). A time budget still makes the run count depend on the
# machine's speed, so a slower machine explores a prefix of the same sequence.
#
# Most of the run is the first target's build: the whole tree, coverage-instrumented, in release
# (about 940 s on 2 cores; every later target builds in about 1 s). The `cli` corpus then takes
# about two minutes rather than FUZZ_SECONDS, since libFuzzer replays a whole corpus before it
# stops and each `check --report` input runs every mutant and golden case. Building at
# opt-level 1 saves about 220 s of the build but slows that replay past 20 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${FUZZ_SECONDS:-20}"
SEED="${FUZZ_SEED:-1}"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz
fi
export RUSTC_BOOTSTRAP=1   # cargo-fuzz needs nightly flags; stable toolchain with bootstrap works
targets="${FUZZ_TARGETS:-$(cargo fuzz list --fuzz-dir fuzz)}"   # FUZZ_TARGETS: a subset
log=$(mktemp)
trap 'rm -f "$log"' EXIT
crashed=()
for t in $targets; do
  corpus="fixtures/corpus/$t"
  regressions="fixtures/regressions/$t"
  work="fuzz/corpus/$t"
  mkdir -p "$corpus" "$regressions" "$work"
  echo "== fuzz $t for ${SECONDS_PER_TARGET}s (seed $SEED)"
  if cargo fuzz run --fuzz-dir fuzz -s none --release "$t" "$work" "$corpus" "$regressions" -- \
    -max_total_time="$SECONDS_PER_TARGET" -seed="$SEED" -rss_limit_mb=4096 \
    -print_final_stats=1 >"$log" 2>&1; then
    grep -E '^(Done|stat::)' "$log" || tail -n 8 "$log"
  else
    crashed+=("$t")
    echo "!! $t crashed:"
    grep -E -A2 "panicked at|ERROR: libFuzzer|^SUMMARY|^Base64:|Test unit written|^Error:" "$log" \
      | grep -v -E '^\s+[0-9]+: |^\s+at ' || tail -n 40 "$log"
  fi
done
if ((${#crashed[@]})); then
  echo "fuzz smoke: crashes in ${crashed[*]} (reproduce: cargo fuzz run --fuzz-dir fuzz -s none --release <target> <artifact>)" >&2
  exit 1
fi
