#!/usr/bin/env bash
# Install (once) the object-store emulators the GCS and Azure tests start on
# loopback, into a cache outside the clone, and print their paths as shell
# assignments (SILT_FAKE_GCS=..., SILT_AZURITE=...):
#   - fake-gcs-server, a Go module built with `go install`;
#   - Azurite, from npm.
# A tool that cannot be installed is left out of the output (the tests then
# skip loudly, or fail under CI=true); the script itself never fails for it.
set -uo pipefail
cd "$(dirname "$0")/.."
tools="${SILT_TOOLS:-$HOME/.cache/silt-tools}"
fake_gcs_version=v1.56.1
azurite_version=3.37.0
mkdir -p "$tools/bin"

fake_gcs="$tools/bin/fake-gcs-server-$fake_gcs_version"
if [ ! -x "$fake_gcs" ] && command -v go >/dev/null; then
  echo "installing fake-gcs-server $fake_gcs_version (for the gs:// table tests)" >&2
  build="$(mktemp -d)"
  if GOBIN="$build" GOFLAGS=-mod=mod go install "github.com/fsouza/fake-gcs-server@$fake_gcs_version" >&2; then
    mv "$build/fake-gcs-server" "$fake_gcs"
  fi
  rm -rf "$build"
fi
[ -x "$fake_gcs" ] && echo "SILT_FAKE_GCS=$fake_gcs"

azurite_dir="$tools/azurite-$azurite_version"
azurite="$azurite_dir/node_modules/.bin/azurite-blob"
if [ ! -x "$azurite" ] && command -v npm >/dev/null; then
  echo "installing Azurite $azurite_version (for the az:// table tests)" >&2
  mkdir -p "$azurite_dir"
  npm install --prefix "$azurite_dir" --no-audit --no-fund --loglevel=error "azurite@$azurite_version" >&2
fi
[ -x "$azurite" ] && echo "SILT_AZURITE=$azurite"
exit 0
