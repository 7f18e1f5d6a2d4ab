#!/usr/bin/env bash
# Create (once) the Python environment the tests need and print its python.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
if [ ! -x "$SILT_VENV/bin/python" ]; then
  python3 -m venv "$SILT_VENV" >&2
fi
stamp="$SILT_VENV/.requirements.sha"
want="$(sha256sum python/requirements-test.txt | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  "$SILT_VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r python/requirements-test.txt >&2
  echo "$want" > "$stamp"
fi
echo "$SILT_VENV/bin/python"
