#!/usr/bin/env bash
# Installs headless Chromium and chromedriver from Debian for the dashboard's browser tests
# (crates/payhook-server/tests/it/ui.rs). Idempotent: does nothing when both are already there.
set -euo pipefail

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-browser.sh: chromium or chromedriver is missing and installing them needs root" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
command -v chromedriver >/dev/null 2>&1 || { echo "chromedriver is still missing after the install" >&2; exit 1; }
echo "installed $(chromium --version 2>/dev/null || echo chromium) and $(chromedriver --version | head -1)"
