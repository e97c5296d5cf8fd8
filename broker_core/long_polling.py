"""Held pops: each is an asyncio future parked per (group, topic), woken by arrivals.

No thread and no sweep per held request: a stored message, a revived message or a nack whose
delay ended calls `notify`, which wakes as many waiters as messages arrived. A waiter that
times out simply returns an empty result (RocketMQ PopLongPollingService, minus its 20 ms
sweep). Bounds: per (group, topic) and total, beyond which parking fails with
RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import asyncio
from collections import deque

from broker_core.config import LongPollingConfig
from broker_core.errors import ResourceExhaustedError


class LongPolling:
    """Registry of parked pops."""

    def __init__(self, config: LongPollingConfig) -> None:
        self._config = config
        # topic -> group -> parked futures, oldest first. A future is resolved by notify or
        # removed by unpark; only touched on the loop thread.
        self._waiters: dict[str, dict[str, deque[asyncio.Future[None]]]] = {}
        self._total = 0

    @property
    def held(self) -> int:
        """Number of pops parked right now."""
        return self._total

    def park(self, group: str, topic: str) -> asyncio.Future[None]:
        by_group = self._waiters.setdefault(topic, {})
        queue = by_group.setdefault(group, deque())
        if len(queue) >= self._config.max_per_key:
            raise ResourceExhaustedError(
                f"too many held pops for group {group!r} on topic {topic!r}: "
                f"at most {self._config.max_per_key} may wait at once; retry later"
            )
        if self._total >= self._config.max_total:
            raise ResourceExhaustedError(
                f"too many held pops on this server: at most {self._config.max_total}; retry later"
            )
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(future)
        self._total += 1
        return future

    def unpark(self, group: str, topic: str, future: asyncio.Future[None]) -> None:
        by_group = self._waiters.get(topic)
        if by_group is None:
            return
        queue = by_group.get(group)
        if queue is None:
            return
        try:
            queue.remove(future)
        except ValueError:
            return
        self._total -= 1
        if not queue:
            del by_group[group]
            if not by_group:
                del self._waiters[topic]

    def notify(self, topic: str, count: int = 1, *, group: str | None = None) -> int:
        """Wake up to `count` waiters of each group on `topic` (or of one group)."""
        by_group = self._waiters.get(topic)
        if not by_group:
            return 0
        groups = [group] if group is not None else list(by_group)
        woken = 0
        for name in groups:
            queue = by_group.get(name)
            if not queue:
                continue
            budget = count
            for future in queue:
                if budget == 0:
                    break
                if not future.done():
                    future.set_result(None)
                    budget -= 1
                    woken += 1
        return woken

    def notify_all(self, topic: str) -> None:
        """Wake every waiter on a topic (it was deleted)."""
        for queue in self._waiters.get(topic, {}).values():
            for future in queue:
                if not future.done():
                    future.set_result(None)
