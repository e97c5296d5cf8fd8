#!/usr/bin/env bash
# Install etcd (the server cluster mode coordinates through, docs/cluster.md) from Debian's
# `etcd-server` package.
#
# Idempotent and fast: when `etcd` is installed it only checks and exits. Called by
# `make setup`. Unlike the benchmark peers this is not best effort: tests/cluster start a
# real etcd and fail without it, so a machine where the install cannot happen gets an error
# that says how to install it by hand (exit status 1).
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1 || [[ -x "/usr/sbin/$1" || -x "/usr/bin/$1" ]]; }

if have etcd; then
  exit 0
fi

fail() {
  echo "install_etcd: $1" >&2
  echo "install_etcd: install it by hand: apt-get install etcd-server (Debian/Ubuntu), or put" \
    "an etcd 3.4+ binary on PATH or in POPMQ_ETCD" >&2
  exit 1
}

command -v apt-get >/dev/null 2>&1 || fail "apt-get not found"
sudo=""
if [[ "$(id -u)" != 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo="sudo -n"
  else
    fail "not root and no passwordless sudo"
  fi
fi

echo "install_etcd: apt-get install etcd-server" >&2
export DEBIAN_FRONTEND=noninteractive
# Tests start their own etcd on free ports with a temp data dir; the packaged service (which
# listens on 2379) is stopped and disabled where systemd runs it, so nothing else holds a port.
# Another apt run (a second checkout's setup, unattended upgrades) holds dpkg's lock for a
# while: wait for it rather than fail.
$sudo timeout 600 apt-get -o DPkg::Lock::Timeout=300 update -qq || fail "apt-get update failed"
$sudo timeout 600 apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends etcd-server >/dev/null \
  || fail "apt-get install etcd-server failed"
if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
  $sudo systemctl disable --now etcd >/dev/null 2>&1 || true
fi
have etcd || fail "installed, but the etcd binary is not found"
