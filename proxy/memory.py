"""What the server's memory needs: glibc's allocator told to give freed blocks back, and
the server-wide budget of popped bytes not yet written (`PoppedBytes`).

The allocator (glibc only). Why: glibc raises its mmap threshold each time a block above it
is freed (up to 32 MiB on 64-bit), so after a burst of 1 MiB message bodies every later body
of that size comes from the heap instead of its own mapping, and a heap freed in the middle
is not returned: a server that held 1 GB for a slow consumer stayed at 1 GB after the client
left, and a second burst took more. A fixed threshold (glibc's own starting
value, 128 KiB) keeps bodies and grpc's message buffers in mappings that go back to the
system when freed. Costs one mmap/munmap pair per large allocation, small beside copying the
body it holds. Elsewhere (musl, macOS, Windows) this does nothing.

The budget: each PopStream bounds what it holds (proxy/stream_session.py), but N streams
would hold N times that; `PoppedBytes` bounds their sum. Everything in it runs on the
server's event loop.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import sys
from collections.abc import Callable

from popmq.broker_core import MAX_RESPONSE_BYTES

log = logging.getLogger(__name__)

MMAP_THRESHOLD_BYTES = 128 * 1024
"""Allocations at least this large get their own mapping (glibc's default start value)."""

_M_MMAP_THRESHOLD = -3
"""mallopt's parameter number for the threshold (malloc.h)."""

_applied = False


def return_large_blocks() -> bool:
    """Fix glibc's mmap threshold once per process; True when it was set (now or before)."""
    global _applied
    if _applied:
        return True
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "gnu_get_libc_version"):  # not glibc (musl's mallopt does nothing)
        return False
    if not libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES):
        log.warning("mallopt(M_MMAP_THRESHOLD) failed: freed message memory may stay resident")
        return False
    _applied = True
    return True


MAX_POPPED_BYTES = 64 * 1024 * 1024
"""Bytes popped and not yet written one server holds for all its PopStreams together:
eight streams' worth of MAX_UNWRITTEN_BYTES (two 4 MiB answers each), so eight consumers
reading at full speed never wait on it, and no number of streams can make the server hold
more (docs/limits.md)."""


class PoppedBytes:
    """The server-wide budget of bytes popped and not yet written (reserved for a pop's
    answer, or in an answer waiting for its writer), shared by every PopStream.

    A stream admits a pop only with bytes free here as well as in its own budget
    (proxy/stream_session.py); a stream that waits for bytes registers its `admit` and is
    called back, on the loop, once bytes come back. One per server (its event loop).

    Args:
        limit: Bytes all streams may hold together; at least one whole answer.
    """

    def __init__(self, limit: int = MAX_POPPED_BYTES) -> None:
        if limit < MAX_RESPONSE_BYTES:
            raise ValueError(
                f"popped bytes limit {limit} is below one pop answer ({MAX_RESPONSE_BYTES})"
            )
        self.limit = limit
        self.held = 0
        """Bytes held now (tests and the memory benchmark read it)."""
        # Admit callbacks of the streams waiting for bytes, in the order they began to wait
        # (a dict as an ordered set); whether a wake-up is scheduled. Touched on the loop.
        self._waiting: dict[Callable[[], None], None] = {}
        self._waking = False

    def free(self) -> int:
        return self.limit - self.held

    def hold(self, size: int) -> None:
        self.held += size

    def let_go(self, size: int) -> None:
        self.held -= size
        if self._waiting and not self._waking and size > 0:
            # Not now: the caller is in the middle of its own bookkeeping.
            self._waking = True
            asyncio.get_running_loop().call_soon(self._wake)

    def wait(self, admit: Callable[[], None]) -> None:
        """`admit` is called once bytes come back (until `unwait`)."""
        self._waiting[admit] = None

    def unwait(self, admit: Callable[[], None]) -> None:
        self._waiting.pop(admit, None)

    def _wake(self) -> None:
        self._waking = False
        for admit in list(self._waiting):
            if self.free() <= 0:
                return
            admit()
