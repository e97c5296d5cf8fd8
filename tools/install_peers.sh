#!/usr/bin/env bash
# Install the benchmark peers, redis-server and nats-server, from Debian's packages.
#
# Idempotent and fast: when both are installed it only checks and exits. Called by
# `make setup` (best effort: a machine without apt or root gets a warning, and the bench's
# --quick mode then skips the peer rows with a note) and by `make bench` with --require
# (the full side-by-side run needs them).
set -euo pipefail

require=0
[[ "${1:-}" == "--require" ]] && require=1

have() { command -v "$1" >/dev/null 2>&1 || [[ -x "/usr/sbin/$1" || -x "/usr/bin/$1" ]]; }

if have redis-server && have nats-server; then
  exit 0
fi

fail() {
  echo "install_peers: $1" >&2
  if (( require )); then exit 1; fi
  echo "install_peers: continuing without the peers (bench --quick skips their rows)" >&2
  exit 0
}

command -v apt-get >/dev/null 2>&1 || fail "apt-get not found; install redis-server and nats-server by hand"
sudo=""
if [[ "$(id -u)" != 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo="sudo -n"
  else
    fail "not root and no passwordless sudo; install redis-server and nats-server by hand"
  fi
fi

echo "install_peers: apt-get install redis-server nats-server" >&2
export DEBIAN_FRONTEND=noninteractive
# The bench starts its own servers on free ports; a service the packages start is not used.
# Another apt run (a second checkout's setup, unattended upgrades) holds dpkg's lock for a
# while: wait for it rather than fail.
$sudo timeout 600 apt-get -o DPkg::Lock::Timeout=300 update -qq || fail "apt-get update failed"
$sudo timeout 600 apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends redis-server nats-server \
  >/dev/null || fail "apt-get install failed"
have redis-server && have nats-server || fail "installed, but the binaries are not found"
