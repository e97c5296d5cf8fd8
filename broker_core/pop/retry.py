"""Retry and dead letters: where a delivery that was not acked goes next, and as what.

- **Retry topics.** A group has one retry topic for each topic it pops,
  `%RETRY%<group>_<topic>` (one queue, created on first use: a pop creates it so that it can
  read it). The catalog finds it by (group id, topic id), never by its name. Revive
  (revive.py) copies a message whose invisible time passed unacked there, as its next
  delivery attempt; a pop of the topic reads it back (reader.py).
- **Dead-letter topics.** A message that used up the group's max_delivery_attempts goes to
  `%DLQ%<group>` instead (one queue, created when the group first dead-letters), as attempt
  1: at its revive (revive.py, a FIFO message's too), or at once when a consumer asks
  (ack.py, RocketMQ's ForwardMessageToDeadLetterQueue). Any group may read it.
- **Copies.** A retry or dead-letter copy is stored now and names where the message first
  lived (its origin fields; a copy of a copy keeps the first origin). A redrive (admin.py)
  turns a dead letter back into a new message of its origin topic.

The names themselves are spelled by catalog.py (`retry_topic_name`, `dlq_topic_name`), which
cluster mode reads too. Every write of a copy is part of its caller's batch: revive's keeps
crash-safety rule 3 (broker.py).
"""

from __future__ import annotations

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import keys
from popmq.broker_core.autocreate import AutoCreate
from popmq.broker_core.catalog import (
    KIND_DLQ,
    KIND_RETRY,
    Catalog,
    GroupInfo,
    TopicInfo,
    dlq_topic_name,
    retry_topic_name,
)
from popmq.broker_core.clock import Clock
from popmq.broker_core.group_commit import GroupCommitWriter
from popmq.broker_core.offsets import QueueOffsets
from popmq.broker_core.stats import BrokerStats
from popmq.broker_core.store import Batch


class Retries:
    """Retry and dead-letter topics, created on first use, and where a revived copy goes."""

    def __init__(
        self,
        *,
        catalog: Catalog,
        writer: GroupCommitWriter,
        create: AutoCreate,
        stats: BrokerStats,
        clock: Clock,
    ) -> None:
        self._catalog = catalog
        self._writer = writer
        self._create = create
        self._stats = stats
        self._clock = clock

    async def retry_topic(self, group: GroupInfo, topic: TopicInfo) -> TopicInfo:
        """The group's retry topic for `topic` (one queue), created on first use."""
        key = (group.group_id, topic.topic_id)
        info = self._catalog.retry_topics.get(key)
        if info is not None:
            return info

        async def create() -> TopicInfo:
            new = self._catalog.new_topic(
                retry_topic_name(group.name, topic.name),
                1,
                kind=KIND_RETRY,
                now_ms=self._clock.now_ms(),
                owner_group=group.name,
                owner_topic=topic.name,
            )
            await self._writer.submit(
                lambda b, _: self._catalog.write_topic(b, new, group_id=group.group_id), sync=True
            )
            self._catalog.register_topic(new, group_id=group.group_id)
            return new

        return await self._create.once(("retry", key), create)

    async def dlq(self, group: GroupInfo) -> TopicInfo:
        """`%DLQ%<group>` (one queue), created when the group first dead-letters."""
        name = dlq_topic_name(group.name)
        info = self._catalog.topics.get(name)
        if info is not None:
            return info
        return await self._create.once(("dlq", name), lambda: self._create.topic(name, 1, KIND_DLQ))

    def user_topic(self, source: TopicInfo) -> TopicInfo | None:
        """The topic a delivery from `source` belongs to: `source` itself, or the topic a
        retry topic retries (None once that topic is deleted)."""
        if source.kind == KIND_RETRY:
            return self._catalog.topics.get(source.owner_topic)
        return source

    async def send_on(
        self, group: GroupInfo, user_topic: TopicInfo, copy: records_pb2.StoredMessage
    ) -> tuple[TopicInfo, tuple[str, str | None]]:
        """Where a revived copy goes: the group's retry topic for `user_topic` as the next
        attempt, or, once the group's max_delivery_attempts are used up, its dead-letter
        topic as attempt 1. Sets the copy's attempt and counts it (revived or dead-lettered).

        Returns the topic to store it in, and whose held pops it wakes: (topic, group) for a
        retry (the group's pops of the user topic read its retry topic), (DLQ, None) for a
        dead letter (any group may read it).
        """
        counted = (group.name, user_topic.name)
        attempt = copy.delivery_attempt
        if attempt >= group.max_delivery_attempts:
            target = await self.dead_letter(group, copy)
            self._stats.dead_lettered[counted] += 1
            return target, (target.name, None)
        self._stats.revived[counted] += 1
        target = await self.retry_topic(group, user_topic)
        copy.delivery_attempt = attempt + 1
        return target, (user_topic.name, group.name)

    async def dead_letter(self, group: GroupInfo, copy: records_pb2.StoredMessage) -> TopicInfo:
        """Make `copy` a dead letter (attempt 1); returns the group's dead-letter topic."""
        copy.delivery_attempt = 1
        return await self.dlq(group)


def redelivery_copy(
    data: bytes, source: str, queue_id: int, offset: int, stamp_ms: int
) -> records_pb2.StoredMessage:
    """A stored message copied for a retry or dead-letter topic: stored now, and pointing
    at where it first lived (a copy of a copy keeps the first origin)."""
    copy = records_pb2.StoredMessage.FromString(data)
    copy.store_time_ms = stamp_ms
    if not copy.origin_topic:
        copy.origin_topic = source
        copy.origin_queue_id = queue_id
        copy.origin_offset = offset
    return copy


def store_copy(batch: Batch, offsets: QueueOffsets, target: TopicInfo, data: bytes) -> int:
    """Append a retry or dead-letter copy to `target`'s one queue, in the caller's batch;
    returns its offset."""
    offset = offsets.allocate(target.topic_id, 0)
    batch.put("messages", keys.message_key(target.topic_id, 0, offset), data)
    return offset


def redriven(record: records_pb2.StoredMessage, stamp_ms: int) -> None:
    """Turn a dead letter into a new message of its origin topic: stored now, attempt 1, due
    at once, with no origin of its own (read the origin before)."""
    record.delivery_attempt = 1
    record.store_time_ms = stamp_ms
    record.deliver_at_ms = 0
    record.ClearField("origin_topic")
    record.ClearField("origin_queue_id")
    record.ClearField("origin_offset")
