#!/usr/bin/env bash
# ClusterFuzzLite / OSS-Fuzz build: builds every cargo-fuzz target of fuzz/ with `cargo fuzz build -O`
# and copies into $OUT, per target: the binary, `<target>_seed_corpus.zip` (fixtures/corpus/<target>/)
# and `<target>.options` (libFuzzer max_len and rss limit, as ci/fuzz-nightly.sh uses them).
# Runs in the builder image (copied to $SRC/build.sh; the repository is $SRC/harness) or from the
# repository (.clusterfuzzlite/build.sh, locally through ci/cflite-build-local.sh).
#
# Environment (set by the builder image; ci/cflite-build-local.sh sets them locally):
#   SRC, OUT, WORK      OSS-Fuzz's source, output and scratch directories (OUT must exist)
#   SANITIZER           address (default), memory, undefined, coverage or none; the image's cargo
#                       wrapper adds the coverage flags itself, so coverage and undefined build
#                       with `-s none` here
#   CARGO_BUILD_TARGET  target triple (default: the host's, which is what cargo-fuzz builds for)
#   CARGO_TARGET_DIR    cargo's target directory (default fuzz/target, cargo-fuzz's own)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [[ "$(basename "$here")" == .clusterfuzzlite ]]; then
  cd "$here/.."
else
  cd "${SRC:?SRC must name the source directory}/harness"
fi
: "${OUT:?OUT must name the output directory}"

case "${SANITIZER:-address}" in
  address) san=address ;;
  memory) san=memory ;;
  *) san=none ;;
esac
triple="${CARGO_BUILD_TARGET:-$(rustc -vV | sed -n 's/^host: //p')}"
bindir="${CARGO_TARGET_DIR:-fuzz/target}/$triple/release"

zip_dir() { # zip_dir DIR ZIP: the files of DIR, flat, into ZIP
  if command -v zip >/dev/null 2>&1; then
    rm -f "$2"
    (cd "$1" && zip -q -j "$2" ./*)
  else
    python3 -c 'import sys, zipfile, pathlib
with zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_DEFLATED) as z:
    for p in sorted(pathlib.Path(sys.argv[1]).iterdir()):
        if p.is_file(): z.write(p, p.name)' "$1" "$2"
  fi
}

mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz)
for t in "${targets[@]}"; do
  cargo fuzz build --fuzz-dir fuzz -O -s "$san" --target "$triple" "$t"
  cp "$bindir/$t" "$OUT/$t"
  corpus="fixtures/corpus/$t"
  max_len=4096
  if [[ -d "$corpus" ]] && [[ -n "$(ls -A "$corpus")" ]]; then
    zip_dir "$corpus" "$(cd "$OUT" && pwd)/${t}_seed_corpus.zip"
    for f in "$corpus"/*; do
      s=$(stat -c %s "$f")
      if ((s > max_len)); then max_len=$s; fi
    done
  fi
  printf '[libfuzzer]\nmax_len = %s\nrss_limit_mb = 4096\n' "$max_len" >"$OUT/$t.options"
done
echo "built ${#targets[@]} targets into $OUT: ${targets[*]}"
