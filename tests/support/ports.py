"""Loopback ports for processes a test starts on an address chosen up front (so that a
restart keeps it): etcd, `popmq broker`, `popmq proxy`.

A port asked of the kernel (bind to port 0) and released is free only until the next bind to
port 0 anywhere on the machine, which may get it before the test's process binds it: with
several xdist workers starting servers at once, "address already in use". So ports come from
below the kernel's ephemeral range, where no bind to port 0 and no outgoing connection is
ever given one, each xdist worker from a block of its own, in turn, and each probed first.
"""

from __future__ import annotations

import itertools
import os
import socket
from collections.abc import Iterator

_FIRST = 20_000
_BLOCK = 2_000
"""Ports per xdist worker: 20000-21999 for gw0, 22000-23999 for gw1, ... (six blocks end
below 32768, where Linux's default ephemeral range begins)."""
_BLOCKS = 6


def _worker_index() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")  # unset when not under xdist
    digits = worker.removeprefix("gw")
    return int(digits) % _BLOCKS if digits.isdigit() else 0


def _candidates() -> Iterator[int]:
    first = _FIRST + _worker_index() * _BLOCK
    start = os.getpid() % _BLOCK  # two runs of the suite side by side start apart
    return itertools.cycle([first + (start + i) % _BLOCK for i in range(_BLOCK)])


_next_port = _candidates()


def _listenable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A loopback port nobody listens on right now and that no other worker of this run,
    nor the kernel, hands out meanwhile (the module docstring)."""
    for _ in range(_BLOCK):
        port = next(_next_port)
        if _listenable(port):
            return port
    raise RuntimeError(f"no free loopback port in this worker's block of {_BLOCK}")
