"""A wake-up signal for a background loop that sleeps until a deadline or a new event.

asyncio.Event with asyncio.wait_for can swallow a cancellation on Python 3.11 when the
timeout and the cancel race (the task then never stops); asyncio.wait never cancels what it
waits on, so close() can always stop the loop.
"""

from __future__ import annotations

import asyncio


class Wakeup:
    """`wait(seconds)` returns after `seconds` or as soon as `set()` is called."""

    def __init__(self) -> None:
        # The future the loop sleeps on; None while the loop is busy (it re-reads its state
        # before sleeping again, so a set() then is not lost).
        self._future: asyncio.Future[None] | None = None

    def set(self) -> None:
        if self._future is not None and not self._future.done():
            self._future.set_result(None)

    async def wait(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        self._future = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait([self._future], timeout=seconds)
        finally:
            self._future = None
