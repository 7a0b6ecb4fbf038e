#!/usr/bin/env bash
# Exercises .clusterfuzzlite/build.sh without Docker: copies the committed tree (git ls-files, as
# the Dockerfile's COPY would) to $SRC/harness in a temp directory, runs build.sh there with SRC,
# OUT and WORK pointing at temp directories, then checks that every target of `cargo fuzz list`
# has an executable, a seed corpus zip and an options file in OUT, and that each binary runs 100
# iterations on its unzipped seed corpus with exit status 0. Prints one line per target.
# Installs cargo-fuzz when missing. Run from any directory.
#
# Environment:
#   SANITIZER         passed to build.sh (default none: the local check is that the build works;
#                     the address build is the image's default and only adds -Zsanitizer=address)
#   CFLITE_KEEP=1     keep the temp directories (printed) instead of deleting them
#   CARGO_TARGET_DIR  build cache for the copy (default fuzz/target/cflite-local, inside
#                     cargo-fuzz's own ignored target directory, so repeated runs reuse the deps)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz
fi
export RUSTC_BOOTSTRAP=1   # the image has a nightly toolchain; stable works with this
export SANITIZER="${SANITIZER:-none}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/fuzz/target/cflite-local}"
CARGO_BUILD_TARGET="$(rustc -vV | sed -n 's/^host: //p')"
export CARGO_BUILD_TARGET

tmp="$(mktemp -d)"
if [[ "${CFLITE_KEEP:-0}" == 1 ]]; then
  echo "temp directories kept in $tmp"
else
  trap 'rm -rf "$tmp"' EXIT
fi
export SRC="$tmp/src" OUT="$tmp/out" WORK="$tmp/work"
mkdir -p "$SRC/harness" "$OUT" "$WORK"
git ls-files -z | xargs -0 cp --parents -t "$SRC/harness"
mkdir -p "$SRC/harness/fixtures/corpus"
cp -r fixtures/corpus/. "$SRC/harness/fixtures/corpus/"   # the corpus as it is now, committed or not
cp .clusterfuzzlite/build.sh "$SRC/build.sh"

# As the image's `compile` does: run $SRC/build.sh from the WORKDIR.
(cd "$SRC/harness" && bash "$SRC/build.sh")

mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz)
failed=0
for t in "${targets[@]}"; do
  if [[ ! -x "$OUT/$t" || ! -f "$OUT/${t}_seed_corpus.zip" || ! -f "$OUT/$t.options" ]]; then
    echo "FAIL $t: missing executable, seed corpus zip or options file in OUT"
    failed=1
    continue
  fi
  seeds="$WORK/seeds-$t"
  mkdir -p "$seeds"
  unzip -q -o "$OUT/${t}_seed_corpus.zip" -d "$seeds"
  n=$(find "$seeds" -type f | wc -l)
  if "$OUT/$t" -runs=100 -rss_limit_mb=4096 "$seeds" >"$WORK/$t.log" 2>&1; then
    echo "ok   $t: $(stat -c %s "$OUT/$t") byte binary, $n seeds, 100 runs: $(grep -m 1 -E '^#[0-9]+ +DONE' "$WORK/$t.log" || tail -n 1 "$WORK/$t.log")"
  else
    echo "FAIL $t: 100 runs on its seed corpus exited non-zero; log:"
    tail -n 20 "$WORK/$t.log"
    failed=1
  fi
done
exit "$failed"
