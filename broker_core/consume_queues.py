"""The registry of ConsumeQueue objects: one per (group, topic, queue) a group consumes.

A queue's state is created on first use (a pop, an offset commit, a reset) or by recovery,
placed where the group's consume_from says when the group is new to a user topic. The
registry answers lookups and removes the queues of a deleted topic or group.

Threading: all on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from popmq.broker_core.catalog import KIND_NORMAL, Catalog, GroupInfo, TopicInfo
from popmq.broker_core.consume_queue import ConsumeQueue
from popmq.broker_core.errors import NotFoundError
from popmq.broker_core.offsets import QueueOffsets
from popmq.broker_core.pop.live_checkpoints import LiveCheckpoints
from popmq.broker_core.types import GroupSettings

QueueKey = tuple[int, int, int]
"""(group_id, topic_id, queue_id)"""


class ConsumeQueues:
    """Every ConsumeQueue, keyed by (group_id, topic_id, queue_id)."""

    def __init__(
        self,
        *,
        catalog: Catalog,
        offsets: QueueOffsets,
        checkpoints: LiveCheckpoints,
        settings_of: Callable[[int], GroupSettings],
    ) -> None:
        self._catalog = catalog
        self._offsets = offsets
        self._checkpoints = checkpoints
        self._settings_of = settings_of
        # (group_id, topic_id, queue_id) -> ConsumeQueue; created on first pop or recovery.
        self._queues: dict[QueueKey, ConsumeQueue] = {}

    def __contains__(self, key: QueueKey) -> bool:
        return key in self._queues

    def __iter__(self) -> Iterator[QueueKey]:
        return iter(self._queues)

    def items(self) -> list[tuple[QueueKey, ConsumeQueue]]:
        """A snapshot of (key, queue) pairs (callers may remove queues while iterating)."""
        return list(self._queues.items())

    def values(self) -> list[ConsumeQueue]:
        return list(self._queues.values())

    def get(self, group_id: int, topic_id: int, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((group_id, topic_id, queue_id))

    def queue(self, group: GroupInfo, topic: TopicInfo, queue_id: int) -> ConsumeQueue:
        """The group's queue state, created (and placed) on first use."""
        key = (group.group_id, topic.topic_id, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            self._start_topic(group, topic)
            cq = self._queues.get(key)
        if cq is None:
            # Retry queues, groups consuming from the first message, and queues added to a
            # topic the group already consumes start at the earliest retained message:
            # nothing in them predates the group, so skipping any would lose messages.
            start = self._offsets.min_offset(topic.topic_id, queue_id)
            cq = self.new_queue(group.group_id, topic.topic_id, queue_id, start)
            if cq is None:
                raise NotFoundError(f"topic {topic.name!r} or group {group.name!r} was deleted")
        return cq

    def _start_topic(self, group: GroupInfo, topic: TopicInfo) -> None:
        """Place a group new to a topic where its consume_from says (RocketMQ
        ConsumeFromWhere): the end ("last") or the first message stored at a time, in every
        queue at once, so queue-exclusive consumers that reach the queues one by one still
        start the topic at one moment. The starts are written by the next flush: a message
        sent after them is in that flush or a later one, so a restart cannot skip it.
        """
        if topic.kind != KIND_NORMAL:
            return
        settings = self._settings_of(group.group_id)
        if settings.consume_from not in ("last", "timestamp"):
            return
        gid, tid = group.group_id, topic.topic_id
        if any((gid, tid, q) in self._queues for q in range(topic.queues)):
            return
        for queue_id in range(topic.queues):
            if settings.consume_from == "last":
                start = self._offsets.max_offset(tid, queue_id)
            else:
                start = self._offsets.offset_at(tid, queue_id, settings.consume_from_ms)
            cq = self.new_queue(gid, tid, queue_id, start)
            if cq is not None:
                self._checkpoints.write_offset(cq)

    def new_queue(
        self, group_id: int, topic_id: int, queue_id: int, committed: int
    ) -> ConsumeQueue | None:
        """Register a queue's state at `committed`; None when its group or topic is gone."""
        group = self._catalog.groups_by_id.get(group_id)
        topic = self._catalog.topics_by_id.get(topic_id)
        if group is None or topic is None:
            return None
        cq = ConsumeQueue(
            group=group.name,
            group_id=group_id,
            topic=topic.name,
            topic_id=topic_id,
            queue_id=queue_id,
            committed=committed,
        )
        self._queues[(group_id, topic_id, queue_id)] = cq
        return cq

    def place(self, group_id: int, starts: list[tuple[int, int, int]]) -> None:
        """Create the queues a group was given start offsets for (those it has not yet)."""
        for topic_id, queue_id, offset in starts:
            if (group_id, topic_id, queue_id) not in self._queues:
                self.new_queue(group_id, topic_id, queue_id, offset)

    def remove(self, key: QueueKey) -> None:
        """Forget a queue of a deleted topic or group (its offset is no longer written)."""
        del self._queues[key]
        self._checkpoints.forget_queue(key)
