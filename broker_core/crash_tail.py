"""The crash tail: what a broker stored just before a run that did not end cleanly.

A proxy retries a send whose broker died mid-call on that broker, and moves it to another
once the dead broker's address refuses connections (docs/cluster.md, "A retried send is
stored once"). If the dead broker had written the send before it died, the message is then
stored twice once it restarts. Such a send was written at most a few seconds before the
broker's last write, so a cluster broker that restarts after an unclean end asks the other
brokers which of its last messages they hold (broker/crash_tail_sync.py) and removes those
here, before it serves.

- The run marker: `run:open` in the meta family, written (synced) when the store opens and
  deleted by a clean close, so a store that opens with it ended its last run uncleanly
  (kill -9, a crash, a power cut). A store of a release without the marker opens as clean.
  A replicating store (a shard's leader) and a read-only view keep no marker: a shard's
  new leader takes its tail on every takeover instead (`Broker.crash_tail(takeover=True)`).
- `select`: the messages of normal topics stored within `crash_tail_s` before the last one
  stored (a message or a half message), in any queue, and the half messages of open
  transactions sent within that time (`txn:` records, read back from the newest: their
  sequences grow with time within a run, and with the boot epoch across runs). Retry and
  dead-letter copies are never sent through a proxy, and delayed messages waiting as
  timers are not looked at (their family is ordered by due time, not store time).
- `remove`: one write deleting those messages and their index entries. Each removal leaves
  a gap at its offset, which readers step over as over what retention deleted; a removal
  at a queue's end records the end (`qend:` in the meta family, read by QueueOffsets), so a
  restart never gives the offset to another message. A half message goes with its
  transaction's record, its check schedule and its dedup entry: it is never checked back
  (a check would have its producer commit it, a second copy of the one the other broker
  holds), and an EndTransaction of its id answers that it is unknown.

Threading: on the event loop, at start (or a shard's takeover) only. `select` seeks each
queue's last message, then reads back one point read per message of the tail, giving the
loop a turn every few hundred; `remove` is one group-commit write.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Final

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import half_dedup, keys
from popmq.broker_core.catalog import KIND_NORMAL, Catalog
from popmq.broker_core.errors import PopMQError
from popmq.broker_core.group_commit import GroupCommitWriter
from popmq.broker_core.offsets import QueueOffsets
from popmq.broker_core.store import Batch, Store
from popmq.broker_core.transactions import Transactions

log = logging.getLogger(__name__)

_READS_PER_TURN: Final = 256
"""Store reads between two turns given to the loop while selecting (about a millisecond)."""

RUN_MARKER: Final = b"run:open"
"""meta family: present while a run has the store open (see the module doc)."""


def open_run(store: Store) -> bool:
    """Mark the store as open by a run; returns whether the last run ended uncleanly (the
    marker was there). Synced: a run killed right after must be found unclean."""
    unclean = store.get("meta", RUN_MARKER) is not None
    if not unclean and not store.read_only:
        try:
            batch = store.batch()
            batch.put("meta", RUN_MARKER, b"")
            store.write(batch, sync=True)
        except PopMQError as exc:
            log.warning(
                "store %s: the run marker could not be written (%s); if this run is killed, "
                "its next start will not look for sends moved to other brokers",
                store.path,
                exc,
            )
    return unclean


def close_run(store: Store) -> None:
    """Clear the marker: the run ends cleanly (every write before this one is durable).
    A failure leaves it, and the next start reconciles for nothing."""
    try:
        batch = store.batch()
        batch.delete("meta", RUN_MARKER)
        store.write(batch, sync=True)
    except PopMQError:
        return


@dataclass(frozen=True, slots=True)
class TailMessage:
    """One message of the crash tail."""

    topic: str
    topic_id: int
    queue_id: int
    offset: int
    message_id: str
    dedup_id: str
    """"" when the message id is its dedup id."""
    keys: tuple[str, ...]
    store_time_ms: int
    """When it was stored (a half message: sent)."""
    transaction_seq: int = 0
    """A half message's transaction (its `txn:` sequence; offset -1); 0 for a message."""


async def select(
    store: Store, catalog: Catalog, offsets: QueueOffsets, tail_ms: int
) -> list[TailMessage]:
    """The messages of normal topics stored within `tail_ms` before the last message stored
    (module doc), oldest first within each queue. It gives the loop a turn every
    `_READS_PER_TURN` reads: a busy broker's tail is many messages, and a shard's new leader
    holds its lease and its followers' heartbeats on this loop."""
    ends: list[tuple[str, int, int, int]] = []  # (topic, topic id, queue, last offset)
    last_ms = -1
    for topic in list(catalog.topics_by_id.values()):
        if topic.kind != KIND_NORMAL:
            continue
        for queue_id in range(topic.queues):
            last = _last_stored(store, topic.topic_id, queue_id)
            if last is None:
                continue
            offset, stored = last
            ends.append((topic.name, topic.topic_id, queue_id, offset))
            last_ms = max(last_ms, stored.store_time_ms)
    newest_half = _newest_half(store)
    if newest_half is not None:
        last_ms = max(last_ms, newest_half.created_ms)
    if last_ms < 0:
        return []
    cutoff = last_ms - tail_ms
    found: list[TailMessage] = await _open_halves(store, catalog, cutoff)
    reads = 0
    for name, topic_id, queue_id, last_offset in ends:
        low = offsets.min_offset(topic_id, queue_id)
        queue_tail: list[TailMessage] = []
        offset = last_offset
        while offset >= low:
            reads += 1
            if reads % _READS_PER_TURN == 0:
                await asyncio.sleep(0)
            data = store.get("messages", keys.message_key(topic_id, queue_id, offset))
            offset -= 1
            if data is None:
                continue  # a gap: lost in doubt, or removed by an earlier reconciliation
            stored = records_pb2.StoredMessage.FromString(data)
            if stored.store_time_ms < cutoff:
                break  # store times grow with offsets within a queue
            queue_tail.append(
                TailMessage(
                    topic=name,
                    topic_id=topic_id,
                    queue_id=queue_id,
                    offset=offset + 1,
                    message_id=stored.message_id,
                    dedup_id="" if stored.dedup_id == stored.message_id else stored.dedup_id,
                    keys=tuple(stored.keys),
                    store_time_ms=stored.store_time_ms,
                )
            )
        queue_tail.reverse()
        found.extend(queue_tail)
    return found


def _newest_half(store: Store) -> records_pb2.TransactionRecord | None:
    """The transaction record of the last half message sent (the highest sequence)."""
    start = keys.TRANSACTION_PREFIX
    last = store.last_key("meta", start, keys.prefix_end(start))
    if last is None:
        return None
    data = store.get("meta", last)
    return None if data is None else records_pb2.TransactionRecord.FromString(data)


async def _open_halves(store: Store, catalog: Catalog, cutoff_ms: int) -> list[TailMessage]:
    """The half messages of open transactions sent at or after `cutoff_ms`, oldest first:
    read back from the newest record until one sent before the cutoff (resolved ones count
    for that, and are skipped)."""
    found: list[TailMessage] = []
    start = keys.TRANSACTION_PREFIX
    end = keys.prefix_end(start)
    reads = 0
    while (key := store.last_key("meta", start, end)) is not None:
        reads += 1
        if reads % _READS_PER_TURN == 0:
            await asyncio.sleep(0)
        end = key  # exclusive: the next read finds the record before this one
        data = store.get("meta", key)
        if data is None:
            continue
        record = records_pb2.TransactionRecord.FromString(data)
        if record.created_ms < cutoff_ms:
            break
        topic = catalog.topics_by_id.get(record.topic_id)
        if record.state != records_pb2.TransactionRecord.STATE_OPEN or topic is None:
            continue
        if topic.kind != KIND_NORMAL:
            continue
        stored = records_pb2.StoredMessage.FromString(record.message)
        found.append(
            TailMessage(
                topic=topic.name,
                topic_id=topic.topic_id,
                queue_id=record.queue_id,
                offset=-1,
                message_id=record.message_id,
                dedup_id="" if stored.dedup_id == record.message_id else stored.dedup_id,
                keys=(),
                store_time_ms=record.created_ms,
                transaction_seq=keys.parse_transaction_seq(key),
            )
        )
    found.reverse()
    return found


def _last_stored(
    store: Store, topic_id: int, queue_id: int
) -> tuple[int, records_pb2.StoredMessage] | None:
    """The queue's last stored message (gaps at its end skipped), with its offset."""
    last = store.last_key(
        "messages", keys.queue_prefix(topic_id, queue_id), keys.queue_prefix(topic_id, queue_id + 1)
    )
    if last is None:
        return None
    data = store.get("messages", last)
    if data is None:
        return None
    return keys.message_offset(last), records_pb2.StoredMessage.FromString(data)


async def remove(
    store: Store,
    writer: GroupCommitWriter,
    offsets: QueueOffsets,
    messages: list[TailMessage],
    transactions: Transactions,
) -> None:
    """Delete `messages` (from `select`) with their index entries, in one synced write.

    An index entry is deleted only while it still points at the removed copy. A queue whose
    last stored message goes keeps its end (`keys.queue_end_key`). A half message goes with
    its transaction while that is still open (module doc)."""
    if not messages:
        return

    def apply(batch: Batch, _: QueueOffsets) -> int:
        ends: dict[tuple[int, int], int] = {}
        halves = 0
        for m in messages:
            if m.transaction_seq:
                halves += _remove_half(store, batch, m)
                continue
            batch.delete("messages", keys.message_key(m.topic_id, m.queue_id, m.offset))
            _delete_entry(store, batch, keys.id_index_key(m.topic_id, m.message_id), m)
            if m.dedup_id:
                _delete_entry(store, batch, keys.dedup_key(m.topic_id, m.dedup_id), m)
            for key in m.keys:
                batch.delete("index", keys.key_index_key(m.topic_id, key, m.queue_id, m.offset))
            where = (m.topic_id, m.queue_id)
            ends[where] = max(ends.get(where, 0), m.offset + 1)
        for (topic_id, queue_id), end in ends.items():
            if end >= offsets.max_offset(topic_id, queue_id):
                batch.put("meta", keys.queue_end_key(topic_id, queue_id), keys.encode_u64(end))
        return halves

    halves: int = await writer.submit(apply, sync=True)
    transactions.forget_open(halves)


def _remove_half(store: Store, batch: Batch, m: TailMessage) -> int:
    """Delete an open transaction's record, check schedule and dedup entry; 1 when it was
    still open (0: resolved meanwhile, kept)."""
    seq = m.transaction_seq
    data = store.get("meta", keys.transaction_key(seq))
    if data is None:
        return 0
    record = records_pb2.TransactionRecord.FromString(data)
    if record.state != records_pb2.TransactionRecord.STATE_OPEN:
        return 0
    batch.delete("meta", keys.transaction_key(seq))
    batch.delete("meta", keys.transaction_check_key(record.next_check_ms, seq))
    key = half_dedup.lookup_key(m.topic_id, m.dedup_id, m.message_id)
    half_dedup.delete_entry(store, batch, key, seq)
    return 1


def _delete_entry(store: Store, batch: Batch, entry: bytes, m: TailMessage) -> None:
    data = store.get("index", entry)
    if data is None:
        return
    record = records_pb2.IndexRecord.FromString(data)
    if record.queue_id == m.queue_id and record.offset == m.offset:
        batch.delete("index", entry)
