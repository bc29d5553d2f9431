#!/usr/bin/env bash
# Regenerate the README's pictures from the shipped example (deterministic: analytic profile, no search).
#   scripts/make_readme_images.sh            # writes docs/timeline.png
# Uses the project's venv when present. The full report goes to a temporary folder; only the
# timeline is committed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
export MPLBACKEND=Agg
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" -m autotune.cli report examples/telechat2_115b/train.yaml --out "$tmp" >/dev/null
cp "$tmp/timeline.png" docs/timeline.png
echo "wrote docs/timeline.png"
