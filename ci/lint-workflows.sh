#!/usr/bin/env bash
# Validate every GitHub Actions workflow against the published workflow schema
# (check-jsonschema's bundled `vendor.github-workflows`; installed into a venv under target/).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${CARGO_TARGET_DIR:-target}/lint-venv"
if [[ ! -x "$venv/bin/check-jsonschema" ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q check-jsonschema
fi
"$venv/bin/check-jsonschema" --builtin-schema vendor.github-workflows .github/workflows/*.yml
