#!/usr/bin/env bash
# Install the headless Chromium that the console's browser tests drive (tests/console), from
# Debian's package chromium-headless-shell.
#
# Idempotent and fast: when the binary is there it only checks and exits. Called by
# `make setup`, best effort: a machine without apt or root gets a warning, and the browser
# tests then skip, naming the missing binary. Playwright's own `playwright install` is never
# used: it downloads a browser build from a host outside the package registries.
set -euo pipefail

BINARY=/usr/lib/chromium/chromium-headless-shell

if [[ -x "$BINARY" ]]; then
  exit 0
fi

fail() {
  echo "install_browser: $1" >&2
  echo "install_browser: continuing without it (the console's browser tests skip)" >&2
  exit 0
}

command -v apt-get >/dev/null 2>&1 || fail "apt-get not found; install chromium-headless-shell by hand"
sudo=""
if [[ "$(id -u)" != 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo="sudo -n"
  else
    fail "not root and no passwordless sudo; install chromium-headless-shell by hand"
  fi
fi

echo "install_browser: apt-get install chromium-headless-shell" >&2
export DEBIAN_FRONTEND=noninteractive
# Another apt run (a second checkout's setup, unattended upgrades) holds dpkg's lock for a
# while: wait for it rather than fail.
$sudo timeout 600 apt-get -o DPkg::Lock::Timeout=300 update -qq || fail "apt-get update failed"
$sudo timeout 900 apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends chromium-headless-shell \
  >/dev/null || fail "apt-get install failed"
[[ -x "$BINARY" ]] || fail "installed, but $BINARY is not there"
