"""FIFO message groups: a message group's next message goes only once the previous one is
acked, dead-lettered or expired (RocketMQ FIFO consumption over POP).

Every FIFO message gets its own single-message checkpoint, persisted from birth (the chained
checkpoint passing its offset may be persisted at once, so its record must be in the same
flush or an earlier one). A message read while its group has one in flight is "held": its
checkpoint waits in the group's lane (ConsumeQueue.fifo) and a later pop delivers it.
"""

from __future__ import annotations

import itertools

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import keys
from popmq.broker_core.catalog import GroupInfo, TopicInfo
from popmq.broker_core.config import PopConfig
from popmq.broker_core.consume_queue import ConsumeQueue
from popmq.broker_core.consume_queues import ConsumeQueues
from popmq.broker_core.pop.checkpoint import Checkpoint
from popmq.broker_core.pop.context import QueueRead
from popmq.broker_core.pop.live_checkpoints import LiveCheckpoints
from popmq.broker_core.pop.receipt import ReceiptCodec, ReceiptHandle
from popmq.broker_core.record import MessageRecord
from popmq.broker_core.store import Store
from popmq.broker_core.types import PoppedMessage


class Fifo:
    """FIFO checkpoints: make, deliver in group order, hold, and finish them."""

    def __init__(
        self,
        config: PopConfig,
        *,
        store: Store,
        checkpoints: LiveCheckpoints,
        queues: ConsumeQueues,
        codec: ReceiptCodec,
    ) -> None:
        self._config = config
        self._store = store
        self._checkpoints = checkpoints
        self._queues = queues
        self._codec = codec

    def next_due(
        self, group: GroupInfo, topic: TopicInfo, queue_id: int | None = None
    ) -> int | None:
        """Earliest not-before time of a held FIFO head of this (group, topic), if any (of
        one queue when the pop is limited to it: another queue's head is not its to wait
        for)."""
        due: int | None = None
        for q in range(topic.queues) if queue_id is None else (queue_id,):
            cq = self._queues.get(group.group_id, topic.topic_id, q)
            if cq is None or not cq.fifo_ready:
                continue
            for name in cq.fifo_ready:
                lane = cq.fifo.get(name)
                if lane and lane[0].held:
                    at = lane[0].not_before_ms
                    due = at if due is None else min(due, at)
        return due

    def checkpoint(
        self,
        cq: ConsumeQueue,
        offset: int,
        *,
        group: str,
        attempt: int,
        held: bool,
        now: int,
        deadline: int,
        not_before: int = 0,
        client_id: str = "",
    ) -> Checkpoint:
        """A persisted single-message FIFO checkpoint (written by the next flush).

        FIFO checkpoints skip the buffer: the chained checkpoint passing their offset may be
        persisted at once, so their own record must be in the same flush or an earlier one.
        A held one's deadline only re-arms it (see _revive_fifo).
        """
        ck = Checkpoint(
            ck_id=self._checkpoints.next_ck_id(),
            queue=cq,
            range_start=offset,
            range_end=offset + 1,
            offsets=[offset],
            pop_time_ms=now,
            deadline_ms=now + self._hold_ms() if held else deadline,
            chained=False,
        )
        ck.fifo_group = group
        ck.attempt = attempt
        ck.held = held
        ck.not_before_ms = not_before
        ck.client_id = client_id
        self._checkpoints.persist_new(ck)
        self._checkpoints.track(ck)
        return ck

    def _hold_ms(self) -> int:
        return round(self._config.max_invisible_s * 1000)

    def take(
        self, read: QueueRead, offset: int, record: records_pb2.StoredMessage
    ) -> PoppedMessage | None:
        """Queue a FIFO message behind its group; the delivery when the group was idle."""
        cq = read.cq
        held = record.message_group in cq.fifo
        ck = self.checkpoint(
            cq, offset, group=record.message_group, attempt=max(1, record.delivery_attempt),
            held=held, now=read.now, deadline=read.deadline,
            client_id="" if held else read.client_id,
        )  # fmt: skip
        cq.add(ck)
        cq.fifo_enqueue(ck)
        if held:
            return None
        return self._delivery(read, ck, record)

    def _delivery(
        self, read: QueueRead, ck: Checkpoint, record: records_pb2.StoredMessage
    ) -> PoppedMessage:
        """The delivery of a FIFO checkpoint's message, with its attempt and receipt handle."""
        cq, source = read.cq, read.source
        offset = ck.offsets[0]
        self._checkpoints.history.popped(ck)
        if record.delivery_attempt != ck.attempt:
            copy = records_pb2.StoredMessage()
            copy.CopyFrom(record)
            copy.delivery_attempt = ck.attempt
            record = copy
        handle = self._codec.encode(
            ReceiptHandle(
                cq.group_id, source.topic_id, cq.queue_id, offset, ck.ck_id, 0, ck.deadline_ms
            )
        )
        return PoppedMessage(
            read.user_topic.name, cq.queue_id, offset, MessageRecord(record), handle, ck.deadline_ms
        )

    def deliver_heads(self, read: QueueRead, want: int) -> None:
        """Deliver held heads whose group is free again (previous message acked or expired),
        as many as fit the answer's byte budget."""
        cq, source, now = read.cq, read.source, read.now
        heads = list(itertools.islice(cq.fifo_ready_heads(now), want))
        if not heads:
            return
        values = self._store.multi_get(
            "messages",
            [keys.message_key(source.topic_id, cq.queue_id, h.offsets[0]) for h in heads],
        )
        for head, value in zip(heads, values, strict=True):
            record = records_pb2.StoredMessage.FromString(value) if value is not None else None
            if record is None or not read.record_filter.accepts(record):
                # Deleted by retention, or filtered out by this pop's (changed) filter.
                self.finish(head, acked=record is not None)
                continue
            if value is not None and not read.response.take(len(value)):
                break  # the answer is full: the head stays ready for the next pop
            new = self.checkpoint(
                cq, head.offsets[0], group=head.fifo_group, attempt=head.attempt, held=False,
                now=now, deadline=read.deadline, client_id=read.client_id,
            )  # fmt: skip
            cq.inflight[head.offsets[0]] = new
            cq.fifo_replace(head, new)
            head.resolved = head.full
            self._checkpoints.finish(head)
            read.found.append(self._delivery(read, new, record))

    def finish(self, ck: Checkpoint, *, acked: bool) -> None:
        """Resolve a FIFO checkpoint outside ack (skipped or dead-lettered) and free its group."""
        ck.resolved = ck.full
        if acked:
            ck.acked = ck.full
        ck.queue.release(ck, 0)
        self._checkpoints.finish(ck)
