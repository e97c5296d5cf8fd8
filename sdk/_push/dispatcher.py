"""POP mode: hands held messages to the listener and settles them (ack, nack or release).

Messages of one FIFO ``message_group`` go one at a time, in the order received; others run
in parallel, up to ``consume_threads``. Runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Coroutine, Mapping
from typing import Any

from popmq.sdk._push.acker import Acker
from popmq.sdk._push.flow_control import Held, HeldMessages
from popmq.sdk._push.listener import ListenerRunner
from popmq.sdk._push.shared import LOGGER_NAME, Counters
from popmq.sdk.errors import PopMQError

logger = logging.getLogger(LOGGER_NAME)


class Dispatcher:
    """Runs the listener for each held message, keeps FIFO groups in order, settles."""

    def __init__(
        self,
        *,
        runner: ListenerRunner,
        held: HeldMessages,
        ackers: Mapping[str, Acker],
        counters: Counters,
        client_id: str,
    ) -> None:
        self._runner = runner
        self._held = held
        self._ackers = ackers
        self._counters = counters
        self._client_id = client_id
        # Listener and release tasks running or waiting for a slot, so close can wait.
        self._tasks: set[asyncio.Task[None]] = set()
        # Per (topic, FIFO message group): the deliveries waiting for the one in progress.
        self._fifo: dict[tuple[str, str], deque[Held]] = {}

    def enqueue(self, held: Held) -> None:
        """Start the listener on ``held`` now, or after its group's message in progress."""
        group = held.message.message_group
        if not group:
            self._start(held)
            return
        key = (held.message.topic, group)
        waiting = self._fifo.get(key)
        if waiting is not None:
            waiting.append(held)  # one of the group is in progress; this one waits
            return
        self._fifo[key] = deque()
        self._start(held)

    async def close(self) -> None:
        """Release every message whose listener has not started, wait for the running ones.

        Called once receiving has stopped.
        """
        unstarted = self._held.unstarted()
        self._fifo.clear()
        await asyncio.gather(*(self.release(h, "close") for h in unstarted))
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _start(self, held: Held) -> None:
        self._track(self._consume(held))

    def _track(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _consume(self, held: Held) -> None:
        group = held.message.message_group
        async with self._runner.slots:
            if held.settled:
                # Released while it waited (close, or max_processing_s): its group's later
                # messages must not overtake it.
                if group:
                    self._next_in_group((held.message.topic, group), ok=False)
                return
            held.started = True
            ok = await self._runner.call(held.message)
        await self._settle(held, ok)
        if group:
            self._next_in_group((held.message.topic, group), ok)

    def _next_in_group(self, key: tuple[str, str], ok: bool) -> None:
        """Start the group's next message, or give all of them back after a failure."""
        waiting = self._fifo.get(key)
        if waiting is None:
            return
        if ok and waiting and not waiting[0].settled:
            self._start(waiting.popleft())
            return
        del self._fifo[key]
        # The failed (or released) message comes back first; the later ones go back too
        # rather than overtaking it.
        for held in waiting:
            self._track(self.release(held, "behind a failed message of its group"))

    async def _settle(self, held: Held, ok: bool) -> None:
        """Ack a success, nack a failure (the server applies the group's backoff)."""
        async with held.lock:
            if held.settled:
                # Released meanwhile (max_processing_s passed); it held a cache slot until
                # its listener returned.
                self._held.forget(held)
                return
            held.settled = True
            if ok:
                self._ackers[held.message.topic].add(held)  # acked in a batch, soon
                return
            try:
                await held.consumer.nack(held.message)
                self._counters.nacked += 1
            except PopMQError as exc:
                logger.warning(
                    "push consumer %s: nack of message %s failed (%s); it will be redelivered "
                    "when its invisible time ends",
                    self._client_id, held.message.message_id, exc,
                )  # fmt: skip
            finally:
                self._held.forget(held)

    async def release(self, held: Held, why: str) -> None:
        """Give a message back unprocessed: visible again at once (nack with no delay)."""
        if held.settled:
            return
        # Claimed before any await, so no listener starts it from now on; the lock then
        # waits for a renewal in flight, whose new handle the nack must use.
        held.settled = True
        async with held.lock:
            try:
                await held.consumer.nack(held.message, delay_s=0)
                self._counters.released += 1
                logger.debug(
                    "push consumer %s: released message %s (%s)",
                    self._client_id, held.message.message_id, why,
                )  # fmt: skip
            except PopMQError as exc:
                logger.warning(
                    "push consumer %s: releasing message %s (%s) failed: %s",
                    self._client_id, held.message.message_id, why, exc,
                )  # fmt: skip
            finally:
                if not held.started:
                    self._held.forget(held)  # a running listener keeps its slot until it returns
