"""Values that cross broker_core's public API (the proxy converts them to and from protos)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from popmq.store.v1 import records_pb2


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message to send."""

    topic: str
    body: bytes
    tag: str = ""
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    message_id: str = ""
    born_time_ms: int = 0
    message_group: str = ""
    """FIFO group: delivered in send order, one in flight at a time (fifo/mixed topics)."""
    deliver_at_ms: int = 0
    """Epoch ms before which the message stays invisible (delay/mixed topics); 0 = now."""
    dedup_id: str = ""
    """A repeat within the topic's dedup window is answered with the first send's result."""
    body_encoding: str = ""
    """How the producer encoded `body`: "" (identity), "zlib" or "zstd"."""
    born_host: str = ""


@dataclass(frozen=True, slots=True)
class SendResult:
    """Where a sent message was stored."""

    message_id: str
    topic: str
    queue_id: int
    offset: int
    recall_handle: str = ""
    """For a delayed message: pass to Broker.recall to cancel it before it is due."""
    duplicate: bool = False
    """True when this send repeated a dedup id inside the window and was not stored."""


@dataclass(frozen=True, slots=True)
class PoppedMessage:
    """One delivery: the stored record plus where it came from and its receipt handle."""

    topic: str
    """The user topic (for a retry copy, the topic it was first sent to)."""
    queue_id: int
    offset: int
    record: records_pb2.StoredMessage
    receipt_handle: str
    invisible_until_ms: int

    @property
    def delivery_attempt(self) -> int:
        return self.record.delivery_attempt


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue_id: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class QueueLag:
    topic: str
    queue_id: int
    retry: bool
    consumer_offset: int
    max_offset: int
    inflight: int
    retention_skipped: int = 0

    @property
    def lag(self) -> int:
        return max(0, self.max_offset - self.consumer_offset)


@dataclass(frozen=True, slots=True)
class PulledMessages:
    """A read of one queue by offset (no group, no state): records and the queue's bounds."""

    topic: str
    queue_id: int
    messages: list[tuple[int, records_pb2.StoredMessage]]
    """(offset, record) in offset order."""
    min_offset: int
    """Smallest offset still stored; a read below it started here instead."""
    max_offset: int
    """Offset the next stored message will get."""
    next_offset: int
    """Where to read next: after the last returned record, or where the read started."""


@dataclass(frozen=True, slots=True)
class ConsumerOffset:
    """A consumer group's position in one queue."""

    queue_id: int
    offset: int
    committed: bool
    """False: the group has no position in the queue yet; offset is where it would start."""
