"""Loopback ports for processes a test starts on an address chosen up front (so that a
restart keeps it): etcd, `popmq broker`, `popmq proxy`.

A port asked of the kernel (bind to port 0) and released is free only until the next bind to
port 0 anywhere on the machine, which may get it before the test's process binds it: with
several xdist workers starting servers at once, "address already in use". So ports come from
below the kernel's ephemeral range, where no bind to port 0 and no outgoing connection is
ever given one, each xdist worker from a block of its own, in turn, and each probed first.

Two runs of the suite side by side have the same workers, so their blocks are the same, and
a probe cannot see a port whose server is down for a restart. So each port handed out is
also claimed machine-wide: an exclusive lock on a file named after it, held by this process
(released by the kernel when it exits), which every other process skips. The most recent
_HELD claims are kept; older ones are let go.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import socket
import tempfile
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

_FIRST = 20_000
_BLOCK = 2_000
"""Ports per xdist worker: 20000-21999 for gw0, 22000-23999 for gw1, ... (six blocks end
below 32768, where Linux's default ephemeral range begins)."""
_BLOCKS = 6
_HELD = 512
"""Claims this process keeps (each an open file): enough for every port a test of a worker
may restart on, few enough for any file limit."""
_CLAIMS = Path(tempfile.gettempdir()) / "popmq-test-ports"
_claimed: OrderedDict[int, int] = OrderedDict()
"""Port -> the descriptor of its locked claim file, oldest first."""


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


def _claim(port: int) -> bool:
    """Whether this process holds `port`'s claim (taking it if no other process does)."""
    if port in _claimed:
        _claimed.move_to_end(port)
        return True
    _CLAIMS.mkdir(exist_ok=True)
    fd = os.open(_CLAIMS / str(port), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _claimed[port] = fd
    while len(_claimed) > _HELD:
        _, old = _claimed.popitem(last=False)
        os.close(old)
    return True


def free_port() -> int:
    """A loopback port nobody listens on right now, that no other worker of this run nor
    any other process of the suite is given meanwhile, nor the kernel (module docstring)."""
    for _ in range(_BLOCK):
        port = next(_next_port)
        if _claim(port) and _listenable(port):
            return port
    raise RuntimeError(f"no free loopback port in this worker's block of {_BLOCK}")
