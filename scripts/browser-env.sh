#!/usr/bin/env bash
# Install (once) the headless browser the dashboard test drives and print its
# path: Debian's `chromium` package. CI machines start without it.
set -euo pipefail
cd "$(dirname "$0")/.."
chromium=/usr/bin/chromium
if [ ! -x "$chromium" ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  echo "installing chromium (for python/tests/test_dashboard.py)" >&2
  $sudo apt-get update >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium >&2
fi
if [ ! -x "$chromium" ]; then
  echo "chromium is not at $chromium after installing the chromium package" >&2
  exit 1
fi
echo "$chromium"
