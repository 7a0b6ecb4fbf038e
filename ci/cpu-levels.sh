#!/usr/bin/env bash
# Same bits on every x86-64: build the harness for the baseline `x86-64` and for `x86-64-v3`
# (AVX2, FMA, BMI), replay every golden case with each build and compare the digests of the
# computed numbers (`output_bits` of `harness golden --json`), then run the snapshot tests under
# each build (the snapshots are the same files for both). Exits 1 naming each case whose bits
# differ.
#
# Rust never contracts a*b+c into an FMA on its own, and gemm chooses its kernels at run time from
# the CPU it runs on, not from -C target-cpu; so the two builds are expected to agree bit for bit.
#
# Environment: CPU_LEVELS (default "x86-64 x86-64-v3").
set -euo pipefail
cd "$(dirname "$0")/.."
levels="${CPU_LEVELS:-x86-64 x86-64-v3}"
snapshot_tests=(--test snapshots --test muon_snapshots --test cnf_snapshots --test ode --test stack
  --test memory)
digests=()
for level in $levels; do
  dir="target/cpu-level/$level"
  echo "== $level: build, golden replay, snapshots"
  export RUSTFLAGS="-C target-cpu=$level"
  cargo build --release --quiet -p harness --target-dir "$dir"
  "$dir/release/harness" golden fixtures/golden --json "$dir/golden.json" | tail -n 1
  INSTA_UPDATE=no cargo test --release --quiet -p harness --target-dir "$dir" \
    "${snapshot_tests[@]}" 2>&1 | grep -E "^test result|FAILED|panicked" || true
  INSTA_UPDATE=no cargo test --release --quiet -p harness --target-dir "$dir" \
    "${snapshot_tests[@]}" >/dev/null 2>&1 || { echo "!! snapshot tests failed under $level"; exit 1; }
  unset RUSTFLAGS
  digests+=("$dir/golden.json")
done
python3 - "${digests[@]}" <<'PY'
import json, sys
runs = [(p, {c["name"]: c["output_bits"] for c in json.load(open(p))["cases"]}) for p in sys.argv[1:]]
base_path, base = runs[0]
bad = 0
for path, other in runs[1:]:
    for name, bits in base.items():
        if other.get(name) != bits:
            bad += 1
            print(f"!! {name}: {bits} ({base_path}) != {other.get(name)} ({path})")
print(f"{len(base)} golden cases compared across {len(runs)} builds: {bad} differ")
sys.exit(1 if bad else 0)
PY
