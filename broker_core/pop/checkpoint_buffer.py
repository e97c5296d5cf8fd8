"""The checkpoint buffer: a pop's chained checkpoint stays in memory until it lingers.

Most deliveries are acked within moments, so a chained checkpoint is not written when its
pop returns: it waits here and is persisted (record and revive entry, live_checkpoints.py)
only once it is ck_buffer_time_s old or ck_persist_ahead_s from its deadline, whichever
comes first (by the broker's clock), or at once, oldest first, while more than ck_buffer_max
wait. One acked (or otherwise finished) meanwhile is never written at all (RocketMQ's
PopBufferMergeService). A crash loses what is buffered: those messages are popped again,
never lost, since the consumer offset passes a checkpoint only once it is done or persisted.

Threading: on the event loop. The loop is one of the broker's background tasks.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from popmq.broker_core.clock import Clock
from popmq.broker_core.config import PopConfig
from popmq.broker_core.pop.checkpoint import Checkpoint
from popmq.broker_core.wakeup import Wakeup


class CheckpointBuffer:
    """Chained checkpoints not persisted yet, and the loop persisting those that linger."""

    def __init__(self, config: PopConfig, *, clock: Clock) -> None:
        self._config = config
        self._clock = clock
        # (persist_at_ms, ck_id) of buffered checkpoints; entries of ones gone are skipped.
        self._heap: list[tuple[int, int]] = []
        # The buffered checkpoints by id: those the loop may still persist.
        self._buffered: dict[int, Checkpoint] = {}
        self._wakeup = Wakeup()
        clock.on_advance(self._wakeup.set)

    @property
    def count(self) -> int:
        return len(self._buffered)

    def add(self, ck: Checkpoint) -> None:
        """Keep a chained checkpoint in memory until it lingers (see loop)."""
        pop = self._config
        persist_at = min(
            ck.pop_time_ms + round(pop.ck_buffer_time_s * 1000),
            ck.deadline_ms - round(pop.ck_persist_ahead_s * 1000),
        )
        self._buffered[ck.ck_id] = ck
        if not self._heap or persist_at < self._heap[0][0]:
            self._wakeup.set()
        heapq.heappush(self._heap, (persist_at, ck.ck_id))

    def discard(self, ck_id: int) -> None:
        """The checkpoint finished, or was persisted: it no longer waits here."""
        self._buffered.pop(ck_id, None)

    def drain(self) -> list[Checkpoint]:
        """Take every buffered checkpoint out (a clean shutdown persists them all)."""
        cks = list(self._buffered.values())
        self._buffered.clear()
        return cks

    async def loop(self, persist: Callable[[Checkpoint], None]) -> None:
        """Persist buffered checkpoints that lingered, or the oldest when too many are."""
        while True:
            now = self._clock.now_ms()
            while self._heap and (
                self._heap[0][0] <= now or len(self._buffered) > self._config.ck_buffer_max
            ):
                _, ck_id = heapq.heappop(self._heap)
                ck = self._buffered.pop(ck_id, None)
                if ck is not None:
                    persist(ck)
            timeout = 1.0
            if self._heap:
                timeout = min(timeout, max(0.0, (self._heap[0][0] - now) / 1000))
            await self._wakeup.wait(timeout)
