"""Index records written field by field parse as the IndexRecord message they stand for."""

from __future__ import annotations

import pytest

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import keys
from popmq.broker_core.message_index import index_record


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


def test_text_keys_carry_the_topic_and_the_length() -> None:
    key = keys.id_index_key(258, "héllo")
    assert key == b"i" + (258).to_bytes(4, "big") + (6).to_bytes(2, "big") + "héllo".encode()
