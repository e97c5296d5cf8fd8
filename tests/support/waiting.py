"""Waiting for state no call can wait on: a background effect (a revive, a checkpoint
persisted by its buffer task, a consumer's rebalance) that wakes no waiter a test could
await. Where a condition, an event or a stream says when something changed, a test waits
on that instead.

`wait_until` polls a predicate from a plain thread; `until` polls from a coroutine (the
predicate may itself be a coroutine function, for conditions on async reads). Both fail with
an AssertionError naming what they waited for and for how long. Each caller passes its own
timeout: they are tuned for a busy 2-core machine.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

__all__ = ["until", "wait_until"]

INTERVAL_S = 0.02
"""How long to sleep between two looks, unless the caller says otherwise."""


def wait_until(
    predicate: Callable[[], object],
    what: str,
    timeout_s: float,
    *,
    interval_s: float = INTERVAL_S,
) -> None:
    """Poll `predicate()` until it is true; fail naming `what` after `timeout_s`."""
    began = time.monotonic()
    while not predicate():
        waited = time.monotonic() - began
        if waited > timeout_s:
            raise AssertionError(_timed_out(what, waited))
        time.sleep(interval_s)


async def until(
    predicate: Callable[[], object | Awaitable[object]],
    what: str,
    timeout_s: float,
    *,
    interval_s: float = INTERVAL_S,
) -> None:
    """Yield to the loop until `predicate()` (or what it returns, awaited) is true; fail
    naming `what` after `timeout_s`."""
    began = time.monotonic()
    while not await _holds(predicate):
        waited = time.monotonic() - began
        if waited > timeout_s:
            raise AssertionError(_timed_out(what, waited))
        await asyncio.sleep(interval_s)


async def _holds(predicate: Callable[[], object | Awaitable[object]]) -> object:
    held = predicate()
    return await held if inspect.isawaitable(held) else held


def _timed_out(what: str, waited: float) -> str:
    return f"timed out after {waited:.1f}s waiting for {what}"
