#!/usr/bin/env bash
# Create (once) the Python environment the tests need and print its python.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
# One setup at a time: tests in one binary run in parallel, and each that
# needs Python calls this; two pip installs into one venv break each other
# (seen on a fresh machine: "No such file or directory: ...INSTALLER_*.tmp").
mkdir -p "$(dirname "$SILT_VENV")"
exec 9>"$SILT_VENV.lock"
flock 9
if [ ! -x "$SILT_VENV/bin/python" ]; then
  python3 -m venv "$SILT_VENV" >&2
fi
stamp="$SILT_VENV/.requirements.sha"
want="$(sha256sum python/requirements-test.txt | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  # --no-cache-dir: torch and its CUDA libraries are ~3 GB of wheels; the venv
  # (outside the clone) is the cache, pip's own would hold a second copy.
  "$SILT_VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir \
    -r python/requirements-test.txt >&2
  echo "$want" > "$stamp"
fi
echo "$SILT_VENV/bin/python"
