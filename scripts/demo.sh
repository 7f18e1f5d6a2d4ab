#!/usr/bin/env bash
# Build Silt and run the demo: TPC-H SF 0.1 generated locally, a server
# in-process, queries cold then warm through pushdown. Uses the same build
# as the tests (dependencies optimized, Silt with debug assertions); set
# SILT_PROFILE=release for a fully optimized build (a longer first build).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
profile="${SILT_PROFILE:-dev}"
cargo build --profile "$profile" --bin silt
dir="debug"; [ "$profile" = "release" ] && dir="release"
exec "$CARGO_TARGET_DIR/$dir/silt" demo "$@"
