#!/usr/bin/env bash
# Build the `silt` Python package as a wheel and install it into the test
# environment (the venv python-env.sh made), replacing any earlier install:
# the Python tests then import the installed package, as a user's program
# would, never the source tree (python/tests/conftest.py checks).
# Usage: scripts/python-wheel.sh PYTHON   Prints the wheel's path.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="$1"
# Built from a copy, so the build leaves no build/ or *.egg-info in the clone.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r python/pyproject.toml python/README.md python/silt "$work/"
find "$work/silt" -name __pycache__ -prune -exec rm -rf {} +
# --no-build-isolation: setuptools is in requirements-test.txt, so the build
# needs no second download of it.
"$PY" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
  --wheel-dir "$work/dist" "$work" >&2
wheel="$(ls "$work"/dist/silt-*.whl)"
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel" >&2
dest="${SILT_VENV:-$(dirname "$(dirname "$PY")")}/wheels"
mkdir -p "$dest"
cp "$wheel" "$dest/"
echo "$dest/$(basename "$wheel")"
