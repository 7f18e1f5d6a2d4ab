#!/usr/bin/env bash
# The whole test suite: formatting, lints, Rust unit and integration tests
# (real S3 endpoint, GCS and Azure emulators, and Flight server on loopback;
# the JDBC driver against it), and the Python (ADBC, S3 clients)
# client tests against a real `silt serve`, and `silt bench smoke` (every
# benchmark mode on tiny data). CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== emulators (fake-gcs-server, Azurite: installed once; the gs:// and az:// tests start them)"
scripts/emulators-env.sh >/dev/null
echo "== cargo test"
# Apache Arrow's Flight SQL JDBC driver (and a JDK), for the JDBC test
# (crates/silt-server/tests/it/jdbc.rs); fetched once into ~/.cache/silt-tools.
SILT_JDBC_DRIVER="$(scripts/jdbc-env.sh)"
export SILT_JDBC_DRIVER
cargo test --workspace
# The binary the Python tests and the smoke run use is the one `cargo test`
# just built for `crates/silt/tests` (same profile and features): a separate
# `cargo build --bin silt` would resolve other features and rebuild
# DataFusion and everything above it.
if [ ! -x "$CARGO_TARGET_DIR/debug/silt" ]; then
  echo "cargo test did not build $CARGO_TARGET_DIR/debug/silt" >&2
  exit 1
fi
echo "== python tests (ADBC, S3 clients, the installed silt wheel and silt.torch against silt serve)"
PY="$(scripts/python-env.sh)"
# The package as a user installs it: built as a wheel, installed into the
# test environment; the tests import that, not the source tree.
scripts/python-wheel.sh "$PY" >/dev/null
# Debian's chromium, for the dashboard test (installed once by the script).
SILT_CHROMIUM="$(scripts/browser-env.sh)"
export SILT_CHROMIUM
SILT_BIN="$CARGO_TARGET_DIR/debug/silt" "$PY" -m pytest -q python/tests
echo "== silt bench smoke (the benchmark harness end to end on tiny data; no timing asserted)"
SILT_PYTHON="$PY" "$CARGO_TARGET_DIR/debug/silt" bench smoke --out "$(mktemp -d)"
