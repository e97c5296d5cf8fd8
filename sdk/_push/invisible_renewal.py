"""POP mode: keeps held messages invisible until they are settled, for a bounded time.

One timer task on the event loop renews each held message at two thirds of its invisible
time, with the newest receipt handle, and releases it after ``max_processing_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections.abc import Awaitable, Callable

from popmq.sdk._push.flow_control import Held
from popmq.sdk._push.shared import LOGGER_NAME, Counters
from popmq.sdk.errors import PopMQError

logger = logging.getLogger(LOGGER_NAME)

RENEW_AT = 2 / 3
"""A held message is renewed when this fraction of its invisible time has passed."""
RENEW_CONCURRENCY = 64
"""ChangeInvisibleTime calls in flight at most."""

Release = Callable[[Held, str], Awaitable[None]]
"""Gives a message back unprocessed, saying why (the dispatcher's ``release``)."""


class InvisibleRenewal:
    """Renews each held message ahead of its expiry; releases it after max_processing_s."""

    def __init__(
        self,
        *,
        invisible_s: float,
        max_processing_s: float,
        release: Release,
        counters: Counters,
        client_id: str,
    ) -> None:
        self._invisible_s = invisible_s
        self._max_processing_s = max_processing_s
        self._release = release
        self._counters = counters
        self._client_id = client_id
        # The timer: (renew_at, seq, held), earliest first; settled entries are skipped.
        self._due: list[tuple[float, int, Held]] = []
        # Set when an earlier renewal than the one the loop sleeps for is scheduled.
        self._wakeup = asyncio.Event()
        self._seq = itertools.count()

    def schedule(self, held: Held, since: float) -> None:
        """Renew ``held`` when ``RENEW_AT`` of its invisible time from ``since`` has passed."""
        renew_at = since + self._invisible_s * RENEW_AT
        if not self._due or renew_at < self._due[0][0]:
            self._wakeup.set()
        heapq.heappush(self._due, (renew_at, next(self._seq), held))

    async def run(self) -> None:
        """Sleep until the earliest renewal is due, renew what is due, repeat."""
        gate = asyncio.Semaphore(RENEW_CONCURRENCY)
        renewing: set[asyncio.Task[None]] = set()
        while True:
            self._wakeup.clear()
            now = time.monotonic()
            while self._due and self._due[0][0] <= now:
                _, _, held = heapq.heappop(self._due)
                if held.settled:
                    continue
                task = asyncio.ensure_future(self._renew(held, gate))
                renewing.add(task)
                task.add_done_callback(renewing.discard)
            timeout = self._due[0][0] - now if self._due else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)

    async def _renew(self, held: Held, gate: asyncio.Semaphore) -> None:
        now = time.monotonic()
        if now - held.received_at >= self._max_processing_s:
            logger.warning(
                "push consumer %s: message %s held for more than %.0fs; releasing it",
                self._client_id, held.message.message_id, self._max_processing_s,
            )  # fmt: skip
            await self._release(held, "max_processing_s reached")
            return
        async with gate, held.lock:
            if held.settled:
                return
            started = time.monotonic()
            try:
                await held.consumer.change_invisible_duration(held.message, self._invisible_s)
            except PopMQError as exc:
                logger.warning(
                    "push consumer %s: renewing message %s failed (%s); it may be redelivered",
                    self._client_id, held.message.message_id, exc,
                )  # fmt: skip
                return
            self._counters.renewed += 1
        self.schedule(held, started)
