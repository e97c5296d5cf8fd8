"""Deduplication of half messages: a half send repeated within the dedup window is answered
with the first half's result (its transaction id) and stores nothing.

A duplicate half would be a second transaction of the same message: its check-back asks the
producer, whose checker commits it by message id, and the message is delivered twice. So a
half message is deduplicated as a send is (send.py, dedup.py), by its own index entry:

- `h` (topic, dedup id, the message id when it has none) -> IndexRecord with the
  transaction's sequence (`transaction_seq`), the queue chosen at the half send and offset
  -1; written in the batch that stores the half, kept for the dedup window (its expiry
  marker, swept as dedup entries are). Apart from the `i`/`d` entries of stored messages, so
  that a normal send never pays for it and a half's commit (which indexes the message as a
  send) never hides the transaction a repeat of the half must be answered with.
- The entry outlives the transaction's end: a repeat of a half committed or rolled back
  within the window gets the first result too, and the transaction's end is then answered
  as EndTransaction's idempotence says (the same resolution again is a no-op).
- Half sends in flight claim their keys in the Sender's `PendingDedup`, so a concurrent
  repeat waits for the first instead of storing a second transaction.

Threading: on the loop; a lookup is one multi-get.
"""

from __future__ import annotations

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import keys, message_index
from popmq.broker_core.store import Batch, Store
from popmq.broker_core.transaction_id import TransactionIdCodec
from popmq.broker_core.types import SendResult


def lookup_key(topic_id: int, dedup_id: str, message_id: str) -> bytes:
    """The `h` entry of a half message: by its dedup id, else its message id."""
    return keys.half_dedup_key(topic_id, dedup_id or message_id)


def find(
    store: Store, lookup_keys: list[bytes], now_ms: int, window_ms: int
) -> list[records_pb2.IndexRecord | None]:
    """The half stored within the window under each key, if any (one multi-get)."""
    return message_index.find_duplicates(store, lookup_keys, now_ms, window_ms)


def write_entry(
    batch: Batch,
    expiries: message_index.Expiries,
    key: bytes,
    *,
    queue_id: int,
    message_id: str,
    seq: int,
    stamp_ms: int,
    window_ms: int,
) -> None:
    """Index a half message stored now (transaction `seq`) for the dedup window."""
    record = records_pb2.IndexRecord(
        queue_id=queue_id,
        offset=-1,
        store_time_ms=stamp_ms,
        message_id=message_id,
        transaction_seq=seq,
    )
    batch.put("index", key, record.SerializeToString())
    expiries.add(stamp_ms + window_ms, key)


def repeat_result(
    hit: records_pb2.IndexRecord, topic: str, codec: TransactionIdCodec
) -> SendResult:
    """What a repeat of the half `hit` indexes is answered with: the first one's result."""
    return SendResult(
        hit.message_id,
        topic,
        hit.queue_id,
        -1,
        duplicate=True,
        transaction_id=codec.encode(hit.transaction_seq),
    )


def delete_entry(store: Store, batch: Batch, key: bytes, seq: int) -> None:
    """Delete the `h` entry `key` while it still names transaction `seq`."""
    data = store.get("index", key)
    if data is not None and records_pb2.IndexRecord.FromString(data).transaction_seq == seq:
        batch.delete("index", key)
