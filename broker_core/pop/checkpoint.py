"""Checkpoints: the record of one pop from one queue (RocketMQ PopCheckPoint).

A checkpoint lists the offsets a pop delivered, its deadline, and per message whether it is
resolved: acked, superseded (ChangeInvisibleTime or Nack moved it to a newer checkpoint), or
revived (redelivered through the retry queue or dead-lettered). A checkpoint whose messages
are all resolved is done.

Chained checkpoints cover a contiguous range of their queue; the consumer offset advances
past one when it is done or persisted (see ConsumeQueue.advance). Checkpoints made by
ChangeInvisibleTime or Nack hold one message and stay outside the chain.

FIFO checkpoints (fifo_group set) also hold one message and stay outside the chain: each
message of a message group gets one when a pop reads it, and the group's checkpoints queue
up in offset order behind the one delivered (see ConsumeQueue.fifo). They are redelivered in
place, never through the retry queue, so a group's order survives redelivery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from popmq._gen.popmq.store.v1 import records_pb2

if TYPE_CHECKING:
    from popmq.broker_core.consume_queue import ConsumeQueue


def _bits_to_bytes(bits: int, count: int) -> bytes:
    return bits.to_bytes((count + 7) // 8, "little")


class Checkpoint:
    """In-memory state of one checkpoint; persisted as a CheckpointRecord."""

    __slots__ = (
        "acked",
        "attempt",
        "chained",
        "ck_id",
        "client_id",
        "deadline_ms",
        "fifo_group",
        "full",
        "held",
        "not_before_ms",
        "offsets",
        "persisted",
        "pop_time_ms",
        "queue",
        "range_end",
        "range_start",
        "resolved",
        "revived",
    )

    def __init__(
        self,
        *,
        ck_id: int,
        queue: ConsumeQueue,
        range_start: int,
        range_end: int,
        offsets: list[int],
        pop_time_ms: int,
        deadline_ms: int,
        chained: bool,
    ) -> None:
        self.ck_id = ck_id
        self.queue = queue
        self.range_start = range_start
        self.range_end = range_end
        self.offsets = offsets
        self.pop_time_ms = pop_time_ms
        self.deadline_ms = deadline_ms
        self.chained = chained
        self.full = (1 << len(offsets)) - 1
        self.resolved = 0
        """Bit i: offsets[i] needs nothing more from this checkpoint."""
        self.acked = 0
        """Bit i: offsets[i] was acked here (resolved and not acked = superseded/revived)."""
        self.revived = 0
        """Bit i: offsets[i] was redelivered through the retry queue or dead-lettered."""
        self.persisted = False
        """True once the record is in RocksDB or in the next flush (see pop/live_checkpoints.py)."""
        self.fifo_group = ""
        """Message group of a FIFO checkpoint; empty for every other checkpoint."""
        self.attempt = 0
        """FIFO: delivery attempt of this delivery (the stored record keeps the first)."""
        self.held = False
        """FIFO: waiting behind its group's head, not delivered."""
        self.not_before_ms = 0
        """FIFO: a held head is not delivered before this time (nack backoff)."""
        self.client_id = ""
        """The client that popped the delivery ("" unknown; a held FIFO one has none yet)."""

    @property
    def done(self) -> bool:
        return self.resolved == self.full

    def queue_offset(self) -> int:
        """The offset of a single-message checkpoint (FIFO, moved)."""
        return self.offsets[0] if self.offsets else self.range_start

    def unresolved(self) -> list[int]:
        """Indexes of messages still owed by this checkpoint."""
        return [i for i in range(len(self.offsets)) if not self.resolved >> i & 1]

    def to_record(self) -> bytes:
        q = self.queue
        return records_pb2.CheckpointRecord(
            ck_id=self.ck_id,
            group_id=q.group_id,
            topic_id=q.topic_id,
            queue_id=q.queue_id,
            range_start=self.range_start,
            range_end=self.range_end,
            offsets=self.offsets,
            pop_time_ms=self.pop_time_ms,
            deadline_ms=self.deadline_ms,
            resolved_bits=_bits_to_bytes(self.resolved, len(self.offsets)),
            acked_bits=_bits_to_bytes(self.acked, len(self.offsets)),
            chained=self.chained,
            fifo_group=self.fifo_group,
            attempt=self.attempt,
            held=self.held,
            not_before_ms=self.not_before_ms,
            client_id=self.client_id,
        ).SerializeToString()

    @classmethod
    def from_record(cls, record: records_pb2.CheckpointRecord, queue: ConsumeQueue) -> Checkpoint:
        ck = cls(
            ck_id=record.ck_id,
            queue=queue,
            range_start=record.range_start,
            range_end=record.range_end,
            offsets=list(record.offsets),
            pop_time_ms=record.pop_time_ms,
            deadline_ms=record.deadline_ms,
            chained=record.chained,
        )
        ck.resolved = int.from_bytes(record.resolved_bits, "little")
        ck.acked = int.from_bytes(record.acked_bits, "little")
        ck.fifo_group = record.fifo_group
        ck.attempt = record.attempt
        ck.held = record.held
        ck.not_before_ms = record.not_before_ms
        # Field 17, added last: a record written before clients were recorded reads as "".
        ck.client_id = record.client_id
        ck.persisted = True
        return ck

    def __repr__(self) -> str:
        return (
            f"Checkpoint(id={self.ck_id}, queue={self.queue.lock_key}, "
            f"range=[{self.range_start},{self.range_end}), n={len(self.offsets)}, "
            f"resolved={self.resolved:b}, persisted={self.persisted})"
        )
