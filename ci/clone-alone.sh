#!/usr/bin/env bash
# Clone the committed tree (HEAD) into an empty temporary directory that has no sibling folders
# and run a command there (default: the README's test command, `cargo test --release`).
# Proves that a user who clones the repository alone can build and test it.
#
#   bash ci/clone-alone.sh                  # cargo test --release in the clone
#   bash ci/clone-alone.sh bash ci/test.sh  # what .ci/run does
#
# CLONE_KEEP=1 keeps the clone (its path is printed) instead of deleting it at exit.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
if [ "${CLONE_KEEP:-0}" != 1 ]; then
    trap 'rm -rf "$work"' EXIT
fi
git clone --quiet --no-hardlinks "$src" "$work/repo"
# The clone's parent must hold nothing but the clone.
[ "$(ls -A "$work")" = repo ] || { echo "clone-alone: $work is not empty" >&2; exit 1; }
cd "$work/repo"
echo "clone-alone: $(git rev-parse --short HEAD) in $work/repo (no siblings)" >&2
if [ "$#" -eq 0 ]; then
    set -- cargo test --release
fi
"$@"
