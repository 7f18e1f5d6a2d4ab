#!/usr/bin/env bash
# Build Silt (release) and run the demo: TPC-H SF 0.1 generated locally,
# a server in-process, queries cold then warm through pushdown.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
cargo build --release --bin silt
exec "$CARGO_TARGET_DIR/release/silt" demo "$@"
