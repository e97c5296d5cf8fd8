"""Queue-edge lookups next to large message bodies stay cheap once the bodies are in table files.

A message body is stored whole in one data block. RocksDB's default block cache keeps no
block larger than 512 KiB (a shard), so before `Store` gave `messages` a cache that keeps
such blocks, every lookup of a queue's first or last key next to a large body read that
block from its table file again (and decompressed it when the body compressed): loading the
next offset of 1,024 cold queues held the event loop 170-250 ms in `bench.request_stall`,
3-4 s next to a compressible 3.9 MiB body (docs/limits.md).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from popmq.broker_core import keys
from popmq.broker_core.store import Store

_BODY = b"compressible " * (3 * 1024 * 1024 // 13)
"""~3 MiB that Snappy shrinks: a read of its block from a table file also decompresses it."""


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """Topic 2, queue 0 holds large bodies in level-0 table files; topics 1 and 3 are empty."""
    store = Store(tmp_path / "data")
    for n in range(3):
        batch = store.batch()
        batch.put("messages", keys.queue_prefix(2, 0) + n.to_bytes(8, "big"), _BODY)
        store.write(batch, sync=False)
        store._families["messages"].flush(True)  # one level-0 table file each
    return store


def test_a_large_message_block_stays_in_the_block_cache(store: Store) -> None:
    messages = store._families["messages"]
    assert store.get("messages", keys.queue_prefix(2, 0) + (1).to_bytes(8, "big")) == _BODY
    cached = int(messages.property_int_value("rocksdb.block-cache-usage") or 0)
    assert cached >= len(_BODY), f"a {len(_BODY)} byte block was not kept ({cached} cached)"
    store.close()


def test_edge_lookups_of_many_queues_next_to_large_bodies_are_fast(store: Store) -> None:
    began = time.perf_counter()
    for topic in (1, 3):  # just below and just above the large bodies
        for queue in range(1024):
            start, end = keys.queue_prefix(topic, queue), keys.queue_prefix(topic, queue + 1)
            assert store.last_key("messages", start, end) is None
            assert store.first_key("messages", start, end) is None
    took = time.perf_counter() - began
    # Measured 10-30 ms; several seconds when each lookup read and decompressed a block.
    assert took < 1.0, f"4,096 edge lookups took {took:.2f} s"
    store.close()


def test_last_key_finds_the_largest_key_of_a_range_and_none_for_an_empty_one(
    store: Store,
) -> None:
    last = keys.queue_prefix(2, 0) + (2).to_bytes(8, "big")
    assert store.last_key("messages", keys.queue_prefix(2, 0), keys.queue_prefix(2, 1)) == last
    assert store.first_key("messages", keys.queue_prefix(2, 0), keys.queue_prefix(2, 1)) == (
        keys.queue_prefix(2, 0) + (0).to_bytes(8, "big")
    )
    # Ranges on either side, and one that ends right after the first key.
    assert store.last_key("messages", keys.queue_prefix(1, 0), keys.queue_prefix(2, 0)) is None
    assert store.last_key("messages", keys.queue_prefix(2, 1), keys.queue_prefix(3, 0)) is None
    first = keys.queue_prefix(2, 0) + (0).to_bytes(8, "big")
    assert store.last_key("messages", keys.queue_prefix(2, 0), first + b"\x00") == first
    store.close()
