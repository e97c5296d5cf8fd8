"""Dead letters removed from the middle of a dead-letter queue by a redrive of named ones.

A dead-letter topic's depth is otherwise its span (max minus min offset): every removal
before (all, the oldest N, retention, purge) cut from the front. A named dead letter
removed behind the oldest leaves a hole that the span still counts, so each removal writes
`dlh:<topic id><offset>` (meta family) in the same batch, and the depth subtracts the holes
inside the span. Keys below the span are never counted, so none needs deleting when the
front passes them; a redrive from the front deletes those it passes anyway.

Threading: reads are one short range scan on the loop (a queue has few holes).
"""

from __future__ import annotations

import struct

from popmq.broker_core.store import Batch, Store

PREFIX = b"dlh:"
_KEY = struct.Struct(">IQ")


def key(topic_id: int, offset: int) -> bytes:
    return PREFIX + _KEY.pack(topic_id, offset)


def mark(batch: Batch, topic_id: int, offset: int) -> None:
    """Record, in the removal's batch, that `offset` of the queue no longer holds a message."""
    batch.put("meta", key(topic_id, offset), b"")


def forget(batch: Batch, topic_id: int, low: int, high: int) -> None:
    """Drop the marks in [low, high): the front moved past them."""
    batch.delete_range("meta", key(topic_id, low), key(topic_id, high))


def count(store: Store, topic_id: int, low: int, high: int) -> int:
    """Holes in [low, high) of the dead-letter queue of `topic_id` (queue 0)."""
    if high <= low:
        return 0
    return sum(1 for _ in store.scan("meta", key(topic_id, low), key(topic_id, high)))


def depth(store: Store, topic_id: int, low: int, high: int) -> int:
    """Dead letters still stored in [low, high): the span less its holes."""
    return high - low - count(store, topic_id, low, high)
