#!/usr/bin/env bash
# Nightly fuzz campaign: every cargo-fuzz target (or a subset) for a fixed budget, then
#   - merges the new inputs into fixtures/corpus/<target>/ and minimises it (libFuzzer -merge=1
#     into a fresh directory that replaces the committed one; hand-named seeds are always kept,
#     because tests and docs refer to them by name),
#   - copies every crash, minimised with `cargo fuzz tmin`, into fixtures/regressions/<target>/
#     (replayed by harness/tests/fuzz_replay.rs and memory.rs) and appends a TODO line to
#     fixtures/regressions/README.md that a person must complete,
#   - prints a summary table (target, runs, exec/s, corpus files, cov, ft, crashes, ooms/timeouts)
#     and exits 1 if any target crashed, ran out of memory or timed out.
# Installs cargo-fuzz when missing. Run from any directory.
#
# Environment:
#   FUZZ_SECONDS_PER_TARGET  seconds of fuzzing per target (default 600)
#   FUZZ_JOBS                parallel fuzzing processes per target, libFuzzer -fork=N
#                            (default: number of cores, `nproc`)
#   FUZZ_TARGETS             space-separated subset of targets (default: `cargo fuzz list`)
#   FUZZ_MAX_LEN             libFuzzer -max_len (default per target: the largest committed corpus
#                            file, at least 4096 bytes; the value libFuzzer itself picks from the
#                            corpus in ci/fuzz-smoke.sh)
#   FUZZ_RSS_LIMIT_MB        per-process memory limit (default 4096, as ci/fuzz-smoke.sh)
#   FUZZ_TIMEOUT             seconds one input may run before it counts as a timeout (default 60)
#   FUZZ_SANITIZER           cargo-fuzz sanitizer (default none; `address` builds with
#                            AddressSanitizer and debug assertions, for the targets that reach the
#                            unsafe code of pool.rs and the gemm tiles: muon, cnf, stack)
#
# Why -fork=N and not -jobs/-workers: with -jobs each worker is an independent libFuzzer with its
# own log and its own final stats (coverage overlaps, so they cannot be summed) and each stops at
# its first crash. In fork mode one parent process owns the corpus, runs N children, merges what
# they find, and prints aggregated `#runs: cov: ft: corp:` lines; with -ignore_crashes=1 it keeps
# fuzzing after a crash, so one night collects every crash, each saved as an artifact.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET="${FUZZ_SECONDS_PER_TARGET:-600}"
JOBS="${FUZZ_JOBS:-$(nproc)}"
RSS_LIMIT_MB="${FUZZ_RSS_LIMIT_MB:-4096}"
TIMEOUT="${FUZZ_TIMEOUT:-60}"
SANITIZER="${FUZZ_SANITIZER:-none}"

if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz
fi
export RUSTC_BOOTSTRAP=1   # cargo-fuzz needs nightly flags; the stable toolchain works with this

if [[ -n "${FUZZ_TARGETS:-}" ]]; then
  read -r -a targets <<<"$FUZZ_TARGETS"
else
  mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz)
fi
if ((${#targets[@]} == 0)); then
  echo "no fuzz targets (cargo fuzz list --fuzz-dir fuzz printed nothing)" >&2
  exit 2
fi

build_flags=(--fuzz-dir fuzz -s "$SANITIZER" --release)
if [[ "$SANITIZER" != none ]]; then
  build_flags+=(--debug-assertions)
fi
fuzz=(cargo fuzz run "${build_flags[@]}")
for t in "${targets[@]}"; do
  cargo fuzz build "${build_flags[@]}" "$t"
done

logdir="fuzz/artifacts/nightly-logs"   # ignored by git, like the artifacts
mkdir -p "$logdir"
summary=()
failed=0

# A seed named by a person (anything but libFuzzer's 40-hex-digit SHA-1 names) stays in the corpus.
is_generated() { [[ "$(basename "$1")" =~ ^[0-9a-f]{40}$ ]]; }

for t in "${targets[@]}"; do
  corpus="fixtures/corpus/$t"
  work="fuzz/corpus/$t"
  artifacts="fuzz/artifacts/$t"
  mkdir -p "$corpus" "$work" "$artifacts" "fixtures/regressions/$t"
  cp -rn "$corpus"/. "$work"/

  max_len="${FUZZ_MAX_LEN:-}"
  if [[ -z "$max_len" ]]; then
    max_len=4096
    for f in "$corpus"/*; do
      [[ -f "$f" ]] || continue
      s=$(stat -c %s "$f")
      if ((s > max_len)); then max_len=$s; fi
    done
  fi
  common=(-max_len="$max_len" -rss_limit_mb="$RSS_LIMIT_MB" -timeout="$TIMEOUT")

  list_artifacts() { find "$artifacts" -maxdepth 1 -type f -printf '%f\n' | sort; }
  before=$(mktemp)
  list_artifacts >"$before"

  log="$logdir/$t.log"
  echo "== fuzz $t: ${SECONDS_PER_TARGET}s, -fork=$JOBS, -max_len=$max_len, sanitizer $SANITIZER (log: $log)"
  start=$(date +%s)
  # Fork mode exits non-zero when a child crashed; the artifacts decide, not the status.
  "${fuzz[@]}" "$t" "$work" -- "${common[@]}" -fork="$JOBS" \
    -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -max_total_time="$SECONDS_PER_TARGET" >"$log" 2>&1 || true
  elapsed=$(($(date +%s) - start))
  tail -n 3 "$log"

  # Final aggregated fork-mode line: "#RUNS: cov: C ft: F corp: N exec/s: E oom/timeout/crash: ..."
  stats=$(grep -E '^#[0-9]+: cov: ' "$log" | tail -n 1 || true)
  runs=$(sed -nE 's/^#([0-9]+):.*/\1/p' <<<"$stats")
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$stats")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$stats")
  runs="${runs:-0}"
  exec_s=$((runs / (elapsed > 0 ? elapsed : 1)))

  # Merge and minimise: hand-named seeds first, then whatever in the old corpus and the work
  # corpus adds coverage. The fresh directory replaces the committed one.
  fresh=$(mktemp -d)
  for f in "$corpus"/*; do
    if [[ -f "$f" ]] && ! is_generated "$f"; then cp "$f" "$fresh"/; fi
  done
  "${fuzz[@]}" "$t" "$fresh" "$work" "$corpus" -- "${common[@]}" -merge=1 \
    >"$logdir/$t.merge.log" 2>&1
  rm -rf "$corpus"
  mkdir -p "$corpus"
  cp "$fresh"/* "$corpus"/ 2>/dev/null || true
  rm -rf "$fresh"
  corpus_files=$(find "$corpus" -type f | wc -l)

  # New crashes: minimise each, commit it as a regression input with a TODO line for a person.
  crashes=0
  other=0
  while read -r a; do
    [[ -n "$a" ]] || continue
    case "$a" in
      crash-*)
        crashes=$((crashes + 1))
        cargo fuzz tmin --fuzz-dir fuzz -s none --release "$t" "$artifacts/$a" \
          >"$logdir/$t.tmin.$a.log" 2>&1 || true
        min="$artifacts/minimized-from-${a#crash-}"
        if [[ ! -f "$min" ]]; then min="$artifacts/$a"; fi
        cp "$min" "fixtures/regressions/$t/$a"
        msg=$({ "${fuzz[@]}" "$t" "fixtures/regressions/$t/$a" 2>&1 || true; } |
          grep -m 1 -E 'panicked|law violated' || true)
        msg="${msg:-see $logdir/$t.tmin.$a.log}"
        # shellcheck disable=SC2016 # the backticks are Markdown
        printf -- '- `%s/%s` — TODO(nightly %s): what broke, root cause, fix. Panic: %s\n' \
          "$t" "$a" "$(date -u +%F)" "$msg" >>fixtures/regressions/README.md
        echo "!! $t: crash $a minimised into fixtures/regressions/$t/$a"
        ;;
      oom-* | timeout-*)
        other=$((other + 1))
        echo "!! $t: $a left in $artifacts (not a regression input: it would stall cargo test)"
        ;;
    esac
  done < <(list_artifacts | comm -13 "$before" -)
  rm -f "$before"
  if ((crashes + other > 0)); then failed=1; fi

  summary+=("$(printf '%-12s %12s %9s %8s %7s %7s %8s %13s' \
    "$t" "$runs" "$exec_s" "$corpus_files" "${cov:-?}" "${ft:-?}" "$crashes" "$other")")
done

echo
echo "nightly fuzz: ${SECONDS_PER_TARGET}s per target, -fork=$JOBS"
printf '%-12s %12s %9s %8s %7s %7s %8s %13s\n' \
  target runs exec/s corpus cov ft crashes ooms/timeouts
printf '%s\n' "${summary[@]}"
exit "$failed"
