#!/bin/sh
# Create the venv of an upstream-bridge profile from its frozen requirement file.
#   harness/upstream/install.sh PROFILE [VENV_DIR]     (default VENV_DIR: target/upstream/PROFILE)
# Needs python3.11 as `python3` (override with PYTHON=...) and PyPI access.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
profile=${1:?usage: install.sh PROFILE [VENV_DIR]}
req="$here/profiles/$profile.txt"
[ -f "$req" ] || { echo "no such profile: $req" >&2; exit 2; }
venv=${2:-$repo/target/upstream/$profile}
python=${PYTHON:-python3}
start=$(date +%s)
"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
"$venv/bin/pip" check --disable-pip-version-check
echo "$profile: installed in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1) at $venv"
