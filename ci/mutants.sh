#!/usr/bin/env bash
# Mutation testing of the reference modules with cargo-mutants: each mutant (a small semantic
# change to one function) is built in cargo-mutants' scratch copy of the tree (never in place) and
# the selected tests run against it; a mutant the tests do not fail is "missed". Writes
# $MUTANTS_OUT/summary.md (caught, missed, unviable, timeout, score = caught / (caught + missed),
# the missed mutants, and which of them fixtures/mutants/equivalent.md explains) and
# $MUTANTS_OUT/missed.txt. Installs cargo-mutants when missing. Run from any directory.
# Exit status: 0 when no mutant was missed or timed out, 1 otherwise, 2 when the unmutated tree
# failed its tests (the baseline) or a setting is bad.
#
# Environment:
#   MUTANTS_FILES    space-separated files or directories to mutate (default: the reference
#                    modules harness/reference/src/{optim,ode,stack,stage,cnf}; missing ones are skipped)
#   MUTANTS_SHARD    k/n: run only shard k (0-based) of n, cargo-mutants --shard (default: all)
#   MUTANTS_SHARDING slice (cargo-mutants' default: shard k is the k-th consecutive range, e.g. one
#                    file's mutants) or round-robin (mutant i on shard i % n: a systematic sample
#                    across every file, for estimating the score of the whole tree)
#   MUTANTS_RE       only mutants whose name matches this regex (cargo-mutants --re), e.g. to
#                    re-test a missed mutant after adding the test that should kill it
#                    (cargo-mutants 27.1.0 keeps its "delete field … from struct … expression"
#                    mutants whatever the pattern: five extra mutants, killed by tests/cnf.rs and
#                    tests/memory.rs, so "missed" when MUTANTS_TESTS leaves those out)
#   MUTANTS_TESTS    cargo target selection for the build and the test run, e.g.
#                    "--lib --test laws --test golden" (default: every test target of harness,
#                    i.e. the whole `cargo test --release` suite)
#   MUTANTS_OPT_LEVEL  opt-level of the harness crate alone in mutant builds (default: the
#                    release profile's 3). Each mutant rebuilds harness and its test binaries;
#                    at 1 that is much cheaper, and the dependencies stay optimised and cached.
#   MUTANTS_JOBS     mutants built and tested in parallel, each in its own scratch copy (default 1)
#   MUTANTS_TIMEOUT  seconds one test run may take (default: cargo-mutants' own, from the baseline)
#   MUTANTS_BASELINE run (default) or skip: skip the test run of the unmutated tree (needs
#                    MUTANTS_TIMEOUT; for repeated runs over a tree known to pass)
#   MUTANTS_OUT      report directory (default fixtures/mutants)
#   MUTANTS_TMPDIR   where cargo-mutants makes its scratch copy (default: the repository's parent
#                    directory, see below)
#   MUTANTS_LIST=1   only list the mutants that would run, with their count, and exit
#   CARGO_TARGET_DIR if set, the scratch copies build there (keeps the dependencies cached
#                    between runs); unset, each run builds in its scratch copy's own target/
set -euo pipefail
cd "$(dirname "$0")/.."

FILES="${MUTANTS_FILES:-harness/reference/src/optim harness/reference/src/ode harness/reference/src/stack harness/reference/src/stage harness/reference/src/cnf}"
OUT="${MUTANTS_OUT:-fixtures/mutants}"
JOBS="${MUTANTS_JOBS:-1}"

if ! command -v cargo-mutants >/dev/null 2>&1; then
  cargo install --locked cargo-mutants
fi

# The reference crate is mutated; the laws that must catch each mutant are the harness crate's
# tests, so every test of the workspace runs (cargo-mutants --test-workspace).
args=(--package harness-reference --test-workspace=true --profile release --jobs "$JOBS" --no-shuffle)
for f in $FILES; do
  if [[ -d "$f" ]]; then
    args+=("--file=${f%/}/**")
  elif [[ -f "$f" ]]; then
    args+=("--file=$f")
  else
    echo "skipping $f: not in this tree" >&2
  fi
done
if [[ ! " ${args[*]} " =~ " --file=" ]]; then
  echo "no file of MUTANTS_FILES ($FILES) exists" >&2
  exit 2
fi
if [[ -n "${MUTANTS_SHARD:-}" ]]; then args+=(--shard "$MUTANTS_SHARD"); fi
if [[ -n "${MUTANTS_SHARDING:-}" ]]; then args+=(--sharding "$MUTANTS_SHARDING"); fi
if [[ -n "${MUTANTS_RE:-}" ]]; then args+=(--re "$MUTANTS_RE"); fi
if [[ -n "${MUTANTS_TIMEOUT:-}" ]]; then args+=(--timeout "$MUTANTS_TIMEOUT"); fi
args+=(--baseline "${MUTANTS_BASELINE:-run}")
for a in ${MUTANTS_TESTS:-}; do args+=("--cargo-arg=$a"); done
if [[ -n "${MUTANTS_OPT_LEVEL:-}" ]]; then
  args+=("--cargo-arg=--config=profile.release.package.harness.opt-level=$MUTANTS_OPT_LEVEL")
fi

if [[ "${MUTANTS_LIST:-0}" == 1 ]]; then
  cargo mutants "${args[@]}" --list
  echo "$(cargo mutants "${args[@]}" --list | wc -l) mutants"
  exit 0
fi

# Each mutant changes one function of the harness crate: with incremental compilation only the
# codegen units it touches are rebuilt (dependencies are never incremental, so they stay cached).
export CARGO_PROFILE_RELEASE_INCREMENTAL="${CARGO_PROFILE_RELEASE_INCREMENTAL:-true}"

# cargo-mutants copies the tree into $TMPDIR. By default the copy is made in the repository's
# parent directory (MUTANTS_TMPDIR chooses another place); the tests read only files inside the
# copy, so any location works.
export TMPDIR="${MUTANTS_TMPDIR:-$(dirname "$(pwd)")}"

mkdir -p "$OUT"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
start=$(date +%s)
status=0
cargo mutants "${args[@]}" --output "$scratch" || status=$?
elapsed=$(($(date +%s) - start))
res="$scratch/mutants.out"
if [[ ! -f "$res/outcomes.json" ]]; then
  echo "cargo-mutants wrote no outcomes (status $status)" >&2
  exit 2
fi

cp "$res/missed.txt" "$OUT/missed.txt"
python3 - "$res" "$OUT" "$elapsed" "$status" "$(cargo mutants --version)" \
  "$FILES" "${MUTANTS_SHARD:-all}" "${MUTANTS_TESTS:-every test target}" <<'EOF'
import json, pathlib, re, sys
res, out, elapsed, status, version, files, shard, tests = sys.argv[1:]
res = pathlib.Path(res)
o = json.load(open(res / "outcomes.json"))
out = pathlib.Path(out)
n = {k: o.get(k, 0) for k in ("caught", "missed", "unviable", "timeout")}
viable = n["caught"] + n["missed"]
score = 100.0 * n["caught"] / viable if viable else float("nan")
missed = [l for l in (out / "missed.txt").read_text().splitlines() if l.strip()]
tpath = res / "timeout.txt"
timeouts = [l for l in tpath.read_text().splitlines() if l.strip()] if tpath.exists() else []
eq = pathlib.Path("fixtures/mutants/equivalent.md")
eq_text = eq.read_text() if eq.exists() else ""
def short(m):
    return m.split(": ", 1)[1] if ": " in m else m
# An entry is the backticked text that opens a bullet: a full name (file:line:col: description,
# that run's tree) or a bare description (any file, any line).
eq_entries = set(re.findall(r"^- `([^`]+)`", eq_text, re.M))
explained = [m for m in missed if m in eq_entries or short(m) in eq_entries]
lines = [
    "# Mutation testing (cargo-mutants)",
    "",
    f"Written by `ci/mutants.sh` ({version}). Files: `{files}`; shard: {shard}; tests: {tests}; "
    f"wall time {int(elapsed) // 60} min {int(elapsed) % 60} s; cargo-mutants exit status {status}.",
    "",
    "| mutants | caught | missed | unviable | timeout | score = caught / (caught + missed) |",
    "|---|---|---|---|---|---|",
    f"| {o.get('total_mutants', sum(n.values()))} | {n['caught']} | {n['missed']} | {n['unviable']} "
    f"| {n['timeout']} | {score:.1f}% |",
    "",
    "Unviable mutants do not build (the type system rejects them) and count for nothing; a timeout "
    "is a mutant that made the tests run too long (usually an endless loop), which counts as "
    "detected but is listed here.",
    "",
    f"## Missed ({len(missed)}; {len(explained)} explained in `equivalent.md`)",
    "",
]
lines += [f"- `{m}`" + (" (equivalent)" if m in explained else "") for m in missed] or ["None."]
if timeouts:
    lines += ["", "## Timeouts", ""] + [f"- `{t}`" for t in timeouts]
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines[5:8]))
if len(missed) > len(explained):
    print(f"{len(missed) - len(explained)} missed mutants are neither killed nor explained in {eq}")
EOF

case "$status" in
  0) exit 0 ;;
  2 | 3) exit 1 ;;   # cargo-mutants: 2 = missed mutants, 3 = timeouts
  *) exit 2 ;;       # 4 = the baseline failed, others = usage or internal error
esac
