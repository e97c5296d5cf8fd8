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

Arrival watches (AwaitMessages: "tell me when any of these queues passes these offsets")
are kept apart from pops, per (topic, queue): an arrival on queue q touches only the watches
of q, and each watch learns which queues moved, so a woken watch checks those queues alone.
Waking costs O(watches of that queue), never O(every held call).

`held_topics` counts the pops and watches held per topic, so a send to a topic nothing waits
on (the usual case under load) skips `notify` with one dict lookup that finds nothing: this
module runs as Python even in a compiled build, and a call into it cost a send about 3,600
instructions per queue it wrote to.

Everything runs on the loop thread.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable

from popmq.broker_core.config import LongPollingConfig
from popmq.broker_core.errors import ResourceExhaustedError

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


class ArrivalWatch:
    """One held AwaitMessages: the queues it watches, and those that received messages."""

    __slots__ = ("future", "held", "moved", "queue_ids", "topic")

    def __init__(self, topic: str, queue_ids: tuple[int, ...]) -> None:
        self.topic = topic
        self.queue_ids = queue_ids
        # Counted in the registry's bounds and held_topics until unwatched.
        self.held = False
        # Queues notified since the watch was made (None: a notify that named no queue,
        # so every watched queue may have moved).
        self.moved: set[int] | None = set()
        # Resolved at the first arrival on a watched queue.
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def _arrived(self, queue_id: int | None) -> None:
        if queue_id is None:
            self.moved = None
        elif self.moved is not None:
            self.moved.add(queue_id)
        if not self.future.done():
            self.future.set_result(None)

    def take_moved(self) -> tuple[int, ...]:
        """The watched queues that may have moved since the last call; re-arms the watch."""
        moved, self.moved = self.moved, set()
        if not self.future.done():
            return ()
        self.future = asyncio.get_running_loop().create_future()
        if moved is None:
            return self.queue_ids
        return tuple(sorted(moved))


class LongPolling:
    """Registry of parked pops and arrival watches."""

    def __init__(self, config: LongPollingConfig) -> None:
        self._config = config
        # topic -> group -> its parked futures by queue. A future is resolved by notify (or
        # by its owner's timeout) and removed by unpark; only touched on the loop thread.
        self._waiters: dict[str, dict[str, _GroupWaiters]] = {}
        self._total = 0
        # topic -> queue id -> the watches of that queue (a dict as an ordered set).
        self._watches: dict[str, dict[int, dict[ArrivalWatch, None]]] = {}
        self._watch_count = 0
        self._watched_queues = 0
        self.held_topics: dict[str, int] = {}
        """topic -> pops and arrival watches held on it now; a topic nothing waits on is
        absent. The same dict for the registry's life (a sender keeps a reference)."""

    def _hold(self, topic: str) -> None:
        held = self.held_topics
        held[topic] = held.get(topic, 0) + 1

    def _release(self, topic: str) -> None:
        held = self.held_topics
        left = held[topic] - 1
        if left:
            held[topic] = left
        else:
            del held[topic]

    @property
    def held(self) -> int:
        """Number of pops and arrival watches (AwaitMessages) held right now."""
        return self._total + self._watch_count

    @property
    def watches(self) -> int:
        """Number of arrival watches (held AwaitMessages) right now."""
        return self._watch_count

    def held_of(
        self, group: str, topics: Iterable[str] | None = None
    ) -> list[tuple[str, int, int]]:
        """(topic, queue id or ALL_QUEUES, pops held) of a group now, by topic and queue: of
        `topics`, or of every topic with a held pop (one dict lookup per such topic)."""
        names = sorted(self._waiters) if topics is None else topics
        rows: list[tuple[str, int, int]] = []
        for topic in names:
            waiters = self._waiters.get(topic, {}).get(group)
            if waiters is None:
                continue
            for queue_id in sorted(waiters.by_queue):
                count = sum(1 for future in waiters.by_queue[queue_id] if not future.done())
                if count:
                    rows.append((topic, queue_id, count))
        return rows

    def watch(self, topic: str, queue_ids: Iterable[int]) -> ArrivalWatch:
        """Watch queues of `topic` for arrivals until `unwatch`; bounded like held pops.

        Raises ResourceExhaustedError past LongPollingConfig.max_total watches, or past
        max_watched_queues (queue, watch) pairs in all (each pair is a registry entry).
        """
        ids = tuple(queue_ids)
        if self._watch_count + self._total >= self._config.max_total:
            raise ResourceExhaustedError(
                f"too many held calls on this server: at most {self._config.max_total}; retry later"
            )
        if self._watched_queues + len(ids) > self._config.max_watched_queues:
            raise ResourceExhaustedError(
                f"too many watched queues on this server: at most "
                f"{self._config.max_watched_queues} (queue, call) pairs may be held at once; "
                "retry later"
            )
        watch = ArrivalWatch(topic, ids)
        by_queue = self._watches.setdefault(topic, {})
        for queue_id in ids:
            by_queue.setdefault(queue_id, {})[watch] = None
        self._watch_count += 1
        self._watched_queues += len(ids)
        self._hold(topic)
        watch.held = True
        return watch

    def unwatch(self, watch: ArrivalWatch) -> None:
        """Forget a watch (idempotent)."""
        if not watch.held:
            return
        watch.held = False
        by_queue = self._watches.get(watch.topic)
        if by_queue is not None:
            for queue_id in watch.queue_ids:
                bucket = by_queue.get(queue_id)
                if bucket is not None:
                    bucket.pop(watch, None)
                    if not bucket:
                        del by_queue[queue_id]
            if not by_queue:
                del self._watches[watch.topic]
        self._watch_count -= 1
        self._watched_queues -= len(watch.queue_ids)
        self._release(watch.topic)

    def _notify_watches(self, topic: str, queue_id: int | None) -> None:
        by_queue = self._watches.get(topic)
        if not by_queue:
            return
        if queue_id is not None:
            for watch in by_queue.get(queue_id, ()):
                watch._arrived(queue_id)
            return
        for bucket in by_queue.values():
            for watch in bucket:
                watch._arrived(None)

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
        if self._total + self._watch_count >= self._config.max_total:
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
        self._hold(topic)
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
        self._release(topic)
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
        if group is None:
            self._notify_watches(topic, queue_id)
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
        self._notify_watches(topic, None)
        for waiters in self._waiters.get(topic, {}).values():
            for bucket in waiters.by_queue.values():
                _wake(bucket, len(bucket))
