#!/usr/bin/env bash
# Install the browser the real-browser tests drive: the distribution's Chromium (Debian packages
# chromium and chromium-driver). Playwright only drives it; it never downloads a browser of its own.
# Also makes sure npm is there: `make slides` vendors reveal.js from the npm registry with it.
# Idempotent: does nothing when Chromium and npm are already there.
set -euo pipefail
if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]] && command -v npm >/dev/null 2>&1; then
    echo "browser: $(/usr/bin/chromium --version 2>/dev/null || echo chromium) is installed; npm $(npm --version)"
    exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
    echo "install_browser.sh: Chromium (or npm) is not installed and this is not root." >&2
    echo "  Run:  sudo apt-get install -y chromium chromium-driver nodejs npm   (or: sudo bash slides/install_browser.sh)" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_browser.sh: no apt-get here; install Chromium with your package manager and set" >&2
    echo "  CHROMIUM=/path/to/chromium for the tests." >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
pkgs=(chromium chromium-driver)
command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
apt-get install -y -qq "${pkgs[@]}" >/dev/null
echo "browser: $(/usr/bin/chromium --version) installed"
