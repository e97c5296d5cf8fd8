"""Make the C allocator give large freed blocks back to the system (glibc only).

Why: glibc raises its mmap threshold each time a block above it is freed (up to 32 MiB on
64-bit), so after a burst of 1 MiB message bodies every later body of that size comes from
the heap instead of its own mapping, and a heap freed in the middle is not returned: a server
that held 1 GB for a slow consumer stayed at 1 GB after the client left, and a second burst
took more (issue 20). A fixed threshold (glibc's own starting value, 128 KiB) keeps bodies
and grpc's message buffers in mappings that go back to the system when freed.

Costs one mmap/munmap pair per large allocation, small beside copying the body it holds.
Elsewhere (musl, macOS, Windows) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

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
