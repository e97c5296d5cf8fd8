"""Index records written field by field parse as the IndexRecord message they stand for."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import keys
from popmq.broker_core.message_index import (
    Expiries,
    QueueRecords,
    index_record,
    marker_entries,
)
from popmq.broker_core.store import Store


@pytest.mark.parametrize(
    ("queue_id", "offset", "store_time_ms", "message_id", "recall_handle"),
    [
        (3, 1234, 1_764_000_000_123, "01ABCDEF", ""),
        (0, 0, 0, "", ""),
        (7, -1, 1_764_000_000_123, "01ABCDEF", "broker-a.recall-handle"),  # a delayed message
        (2**31 - 1, 2**62, 1, "ü" * 200, "r"),
    ],
)
def test_index_records_parse_as_the_message(
    queue_id: int, offset: int, store_time_ms: int, message_id: str, recall_handle: str
) -> None:
    expected = records_pb2.IndexRecord(
        queue_id=queue_id,
        offset=offset,
        store_time_ms=store_time_ms,
        message_id=message_id,
        recall_handle=recall_handle,
    )
    written = index_record(queue_id, offset, store_time_ms, message_id, recall_handle)
    assert records_pb2.IndexRecord.FromString(written) == expected
    assert written == expected.SerializeToString()
    # The id encoded by the caller (a send encodes it once) writes the same bytes.
    raw_id = message_id.encode()
    assert index_record(queue_id, offset, store_time_ms, message_id, recall_handle, raw_id) == (
        written
    )


@pytest.mark.parametrize("queue_id", [0, 1, 7, 2**31 - 1])
@pytest.mark.parametrize("store_time_ms", [0, 1, 1_764_000_000_123])
def test_a_queues_records_are_the_index_records_written_field_by_field(
    queue_id: int, store_time_ms: int
) -> None:
    """A send writes the index records of one queue's messages with what they share encoded
    once: the bytes are index_record's, zero fields left out as protobuf leaves them out."""
    records = QueueRecords(queue_id, store_time_ms)
    for offset in (0, 1, 127, 128, 2**62):
        for message_id in ("", "01ABCDEF" * 4 + "01", "ü" * 200):
            written = records.record(offset, message_id, message_id.encode())
            assert written == index_record(queue_id, offset, store_time_ms, message_id)


def test_text_keys_carry_the_topic_and_the_length() -> None:
    key = keys.id_index_key(258, "héllo")
    assert key == b"i" + (258).to_bytes(4, "big") + (6).to_bytes(2, "big") + "héllo".encode()


def test_id_keys_are_the_text_layout_for_every_topic_and_length() -> None:
    """id_index_key keeps the heads it made; a key is the same bytes whichever head it
    reuses, and past the heads it keeps it starts again."""
    for topic_id in (0, 1, 258, 2**32 - 1):
        for text in ("", "a", "01ABCDEF" * 4, "ü" * 70, "x" * 300):
            raw = text.encode()
            expected = b"i" + topic_id.to_bytes(4, "big") + len(raw).to_bytes(2, "big") + raw
            assert keys.id_index_key(topic_id, text) == expected
            assert keys.id_index_key(topic_id, text) == expected  # from its kept head
            assert keys.id_index_key_of(topic_id, raw) == expected  # encoded by the caller
    for topic_id in range(5000):
        assert (
            keys.id_index_key(topic_id, "id")[:7]
            == b"i" + topic_id.to_bytes(4, "big") + b"\x00\x02"
        )
    with pytest.raises(struct.error):
        keys.id_index_key(1, "x" * 70_000)
    with pytest.raises(struct.error):
        keys.id_index_key_of(1, b"x" * 70_000)


def test_an_expiry_marker_lists_entries_of_every_length(tmp_path: Path) -> None:
    entries = [b"i-first", b"k" * 300, b"", b"i-first", b"d" * 41, b"k" * 300]
    expiries = Expiries()
    for entry in entries:
        expiries.add(1_000, entry)
    expiries.add(2_000, b"lone")
    store = Store(tmp_path / "store")
    try:
        batch = store.batch()
        expiries.put(batch)
        store.write(batch, sync=True)
        (marker, value), (lone, rest) = store.scan("index", b"x", b"y")
    finally:
        store.close()
    assert marker_entries(marker, value) == entries
    assert keys.parse_expiry_key(marker) == (1_000, b"i-first")
    assert marker_entries(lone, rest) == [b"lone"] and rest == b""
