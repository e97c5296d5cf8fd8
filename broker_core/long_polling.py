"""Held pops: each is an asyncio future parked per (group, topic, queue), woken by arrivals.

No thread and no sweep per held request: a stored message, a revived message or a nack whose
delay ended calls `notify`, which wakes as many waiters as messages arrived. A waiter that
times out simply returns an empty result (RocketMQ PopLongPollingService, minus its 20 ms
sweep). Bounds: per (group, topic) and total, beyond which parking fails with
RESOURCE_EXHAUSTED.

A pop limited to one queue (RocketMQ PopMessageRequestHeader.queueId) parks in that queue's
set; a pop of every queue parks in the group's every-queue set. An arrival on queue q wakes
q's set first, then the every-queue set, so a send to another queue never spends the wake-up
a queue-limited waiter needs. A notify that names no queue (a retry copy belongs to none; a
FIFO group released, a revive, a delayed message whose queue the caller did not say) wakes
`count` waiters of every set of the group: more than needed at times, never too few. Cost:
per group, one dict lookup per set visited and the futures woken; never a scan of all
waiters.

Everything runs on the loop thread.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable

from broker_core.config import LongPollingConfig
from broker_core.errors import ResourceExhaustedError

ALL_QUEUES = -1
"""Key of the set of waiters that pop every queue of the topic."""


class _GroupWaiters:
    """One group's parked pops on one topic, by the queue they pop (ALL_QUEUES: every one)."""

    __slots__ = ("by_queue", "count")

    def __init__(self) -> None:
        # queue id or ALL_QUEUES -> parked futures, oldest first.
        self.by_queue: dict[int, deque[asyncio.Future[None]]] = {}
        # Futures in all the sets (the per-key bound).
        self.count = 0


def _wake(waiters: deque[asyncio.Future[None]] | None, budget: int) -> int:
    """Resolve up to `budget` pending futures, oldest first; returns how many."""
    if not waiters or budget <= 0:
        return 0
    woken = 0
    for future in waiters:
        if not future.done():
            future.set_result(None)
            woken += 1
            if woken == budget:
                break
    return woken


class LongPolling:
    """Registry of parked pops."""

    def __init__(self, config: LongPollingConfig) -> None:
        self._config = config
        # topic -> group -> its parked futures by queue. A future is resolved by notify (or
        # by its owner's timeout) and removed by unpark; only touched on the loop thread.
        self._waiters: dict[str, dict[str, _GroupWaiters]] = {}
        self._total = 0

    @property
    def held(self) -> int:
        """Number of pops parked right now."""
        return self._total

    def park(self, group: str, topic: str, queue_id: int | None = None) -> asyncio.Future[None]:
        """Park a pop of `group` on `topic`: of one queue, or of every queue (None)."""
        by_group = self._waiters.setdefault(topic, {})
        waiters = by_group.get(group)
        if waiters is None:
            waiters = by_group[group] = _GroupWaiters()
        if waiters.count >= self._config.max_per_key:
            raise ResourceExhaustedError(
                f"too many held pops for group {group!r} on topic {topic!r}: "
                f"at most {self._config.max_per_key} may wait at once; retry later"
            )
        if self._total >= self._config.max_total:
            raise ResourceExhaustedError(
                f"too many held pops on this server: at most {self._config.max_total}; retry later"
            )
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        key = ALL_QUEUES if queue_id is None else queue_id
        bucket = waiters.by_queue.get(key)
        if bucket is None:
            bucket = waiters.by_queue[key] = deque()
        bucket.append(future)
        waiters.count += 1
        self._total += 1
        return future

    def unpark(
        self, group: str, topic: str, future: asyncio.Future[None], queue_id: int | None = None
    ) -> None:
        """Forget a parked future (the same group, topic and queue it was parked with)."""
        by_group = self._waiters.get(topic)
        if by_group is None:
            return
        waiters = by_group.get(group)
        if waiters is None:
            return
        key = ALL_QUEUES if queue_id is None else queue_id
        bucket = waiters.by_queue.get(key)
        if bucket is None:
            return
        try:
            bucket.remove(future)  # near the front: the oldest wake and time out first
        except ValueError:
            return
        self._total -= 1
        waiters.count -= 1
        if not bucket:
            del waiters.by_queue[key]
            if not waiters.by_queue:
                del by_group[group]
                if not by_group:
                    del self._waiters[topic]

    def notify(
        self,
        topic: str,
        count: int = 1,
        *,
        group: str | None = None,
        queue_id: int | None = None,
    ) -> int:
        """Wake waiters for `count` arrivals on `topic`, for each group (or for one group).

        With `queue_id`, the arrivals are on that queue: up to `count` waiters per group,
        those limited to the queue first, then those popping every queue. Without, the
        queue is unknown or there is none: up to `count` in each of the group's sets.
        Returns how many were woken.
        """
        by_group = self._waiters.get(topic)
        if not by_group:
            return 0
        targets: Iterable[_GroupWaiters]
        if group is not None:
            one = by_group.get(group)
            if one is None:
                return 0
            targets = (one,)
        else:
            targets = by_group.values()  # resolving a future never changes the registry
        woken = 0
        for waiters in targets:
            if queue_id is None:
                for bucket in waiters.by_queue.values():
                    woken += _wake(bucket, count)
                continue
            mine = _wake(waiters.by_queue.get(queue_id), count)
            woken += mine + _wake(waiters.by_queue.get(ALL_QUEUES), count - mine)
        return woken

    def notify_all(self, topic: str) -> None:
        """Wake every waiter on a topic (it was deleted, or the server is draining)."""
        for waiters in self._waiters.get(topic, {}).values():
            for bucket in waiters.by_queue.values():
                _wake(bucket, len(bucket))
