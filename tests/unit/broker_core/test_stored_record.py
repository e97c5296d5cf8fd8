"""A sent message's record, written field by field (send.stored_record), parses as the
StoredMessage built from the same fields through the generated class (the oracle)."""

from __future__ import annotations

import random

import pytest

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import NewMessage
from popmq.broker_core.send import stored_record


def _oracle(msg: NewMessage, message_id: str, stamp_ms: int) -> records_pb2.StoredMessage:
    return records_pb2.StoredMessage(
        message_id=message_id,
        body=msg.body,
        tag=msg.tag,
        keys=msg.keys,
        properties=msg.properties,
        born_time_ms=msg.born_time_ms or stamp_ms,
        store_time_ms=stamp_ms,
        delivery_attempt=1,
        message_group=msg.message_group,
        deliver_at_ms=msg.deliver_at_ms,
        body_encoding=msg.body_encoding,
        dedup_id=msg.dedup_id,
        born_host=msg.born_host,
    )


CASES = [
    NewMessage("t", b"x"),
    NewMessage("t", b"\x00" * 300, tag="TagA"),
    NewMessage(
        "t",
        b"body",
        tag="t\u00e9",
        keys=("k1", "k\u00fc2"),
        properties={"a": "1", "": "empty name", "b": "", "\u00fc": "\u00e9" * 200},
        message_group="g",
        deliver_at_ms=1_700_000_000_123,
        body_encoding="zlib",
        dedup_id="d",
        born_host="host-1",
        born_time_ms=1_600_000_000_000,
    ),
    NewMessage("t", b"y", born_time_ms=-5),
]


@pytest.mark.parametrize("msg", CASES)
@pytest.mark.parametrize("stamp_ms", [0, 1, 1_700_000_000_000])
def test_written_record_parses_as_the_built_one(msg: NewMessage, stamp_ms: int) -> None:
    written = stored_record(msg, "0A1B2C", stamp_ms)
    assert records_pb2.StoredMessage.FromString(written) == _oracle(msg, "0A1B2C", stamp_ms)
    assert stored_record(msg, "0A1B2C", stamp_ms, b"0A1B2C") == written  # id encoded once


def test_written_record_is_the_upb_serialization_without_properties() -> None:
    msg = NewMessage("t", b"x" * 1024, tag="a", keys=("k",), message_group="g", dedup_id="d")
    written = stored_record(msg, "id", 1_700_000_000_000)
    assert written == _oracle(msg, "id", 1_700_000_000_000).SerializeToString()


def test_random_records_parse_as_built() -> None:
    rng = random.Random(7)

    def text(limit: int) -> str:
        return "".join(rng.choice("ab\u00e9\u4e2d") for _ in range(rng.randrange(limit)))

    for _ in range(300):
        msg = NewMessage(
            "t",
            rng.randbytes(rng.randrange(1, 400)),
            tag=text(5),
            keys=tuple(text(8) for _ in range(rng.randrange(3))),
            properties={text(6): text(200) for _ in range(rng.randrange(4))},
            message_group=text(4),
            deliver_at_ms=rng.choice([0, rng.randrange(1 << 45)]),
            body_encoding=rng.choice(["", "zlib", "zstd"]),
            dedup_id=text(4),
            born_host=text(4),
            born_time_ms=rng.choice([0, rng.randrange(1 << 45)]),
        )
        stamp = rng.randrange(1 << 45)
        written = stored_record(msg, text(10), stamp)
        parsed = records_pb2.StoredMessage.FromString(written)
        assert parsed == _oracle(msg, parsed.message_id, stamp)
