"""Write jobs and record helpers that several broker components submit or build.

A job is `apply(batch, offsets)`, run by the GroupCommitWriter inside its flush (group_commit.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import keys, message_index
from popmq.broker_core.store import Batch, Store

if TYPE_CHECKING:  # offsets.py imports this module
    from popmq.broker_core.offsets import QueueOffsets


def noop(batch: Batch, offsets: QueueOffsets) -> None:
    """A job that only waits for the flush (the flush hook writes the state)."""


def confirm(batch: Batch, offsets: QueueOffsets) -> None:
    """A job that writes nothing and is answered once what was written before it is as
    durable (and replicated) as a send's write must be: a repeat answered from the store
    (group commit answers it at once unless an earlier write's fsync or replication failed)."""
    batch.quorum = True


def ignore_result(future: asyncio.Future[Any]) -> None:
    """Housekeeping writes may fail (disk full); they are redone by the next recovery."""
    if not future.cancelled():
        future.exception()


def delete_meta(meta_keys: list[bytes]) -> Callable[[Batch, QueueOffsets], None]:
    """A job deleting meta records (expired superseded-handle records)."""

    def apply(batch: Batch, offsets: QueueOffsets) -> None:
        for key in meta_keys:
            batch.delete("meta", key)

    return apply


def delete_range(
    start: bytes, end: bytes, *, queue_end: tuple[bytes, int] | None = None
) -> Callable[[Batch, QueueOffsets], None]:
    """A job deleting the messages in [start, end) with one range tombstone; with
    `queue_end` (its key, the offset), recording where the queue ends, in the same batch."""

    def apply(batch: Batch, offsets: QueueOffsets) -> None:
        batch.delete_range("messages", start, end)
        if queue_end is not None:
            batch.put("meta", queue_end[0], keys.encode_u64(queue_end[1]))

    return apply


def store_indexed(
    batch: Batch,
    offsets: QueueOffsets,
    topic_id: int,
    queue_id: int,
    record: records_pb2.StoredMessage,
    stamp_ms: int,
    retention_ms: int,
) -> int:
    """Store a message that was sent before (a due timer, a redriven dead letter) at the end
    of a queue, with its id and key index entries; its dedup entry from the send stays as it
    is. Returns its offset."""
    offset = offsets.allocate(topic_id, queue_id)
    batch.put("messages", keys.message_key(topic_id, queue_id, offset), record.SerializeToString())
    expiries = message_index.Expiries()
    message_index.write_entries(
        batch,
        expiries,
        topic_id=topic_id,
        queue_id=queue_id,
        offset=offset,
        message_id=record.message_id,
        dedup_id="",
        message_keys=record.keys,
        stamp_ms=stamp_ms,
        retention_ms=retention_ms,
        dedup_window_ms=0,
    )
    expiries.put(batch)
    return offset


def sweep(
    store: Store,
    markers: list[tuple[bytes, list[bytes]]],
    now: int,
    ttl: dict[bytes, int],
    batch: Batch,
    _: QueueOffsets,
) -> None:
    """A job (with its first arguments bound) deleting expired index entries."""
    message_index.sweep_batch(store, batch, markers, now, ttl)
