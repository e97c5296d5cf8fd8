"""A stored record re-tagged for the wire parses as the ReceivedMessage the proxy would build
from the record's fields one by one (convert.fill_received_message, the oracle)."""

from __future__ import annotations

import random

import pytest
from google.protobuf import timestamp_pb2

from popmq._gen.popmq.store.v1 import records_pb2
from popmq._gen.popmq.v1 import messaging_pb2
from popmq.broker_core import MessageRecord, PoppedMessage, received_message_wire, varint
from popmq.broker_core.record_wire import (
    delivered_fields,
    has_message_group,
    read_varint,
    timestamp_message,
)
from popmq.proxy import convert


def _through_objects(popped: PoppedMessage) -> messaging_pb2.ReceivedMessage:
    out = messaging_pb2.ReceivedMessage()
    convert.fill_received_message(out, popped)
    return out


def _wire(popped: PoppedMessage) -> bytes:
    """The ReceivedMessage's bytes: the field of a PopResponse, its tag and length taken off."""
    element = received_message_wire(
        popped.record.to_bytes(),
        field_tag=b"\x0a",
        topic=popped.topic.encode(),
        queue_id=popped.queue_id,
        offset=popped.offset,
        receipt_handle=popped.receipt_handle,
        invisible_until_ms=popped.invisible_until_ms,
    )
    assert element[:1] == b"\x0a"
    size, start = read_varint(element, 1)
    assert start + size == len(element)
    return element[start:]


def _through_bytes(popped: PoppedMessage) -> messaging_pb2.ReceivedMessage:
    return messaging_pb2.ReceivedMessage.FromString(_wire(popped))


def _popped(record: records_pb2.StoredMessage, *, raw: bool = True, **where: int) -> PoppedMessage:
    data = record.SerializeToString()
    wrapped = MessageRecord(records_pb2.StoredMessage.FromString(data), data if raw else None)
    return PoppedMessage(
        "orders-ü",
        where.get("queue_id", 3),
        where.get("offset", 1234),
        wrapped,
        "broker-a.AAAA-_handle",
        where.get("until", 1_764_000_000_123),
    )


def _full_record() -> records_pb2.StoredMessage:
    record = records_pb2.StoredMessage(
        message_id="01JD6Z-msg-ñ",
        body=bytes(range(256)) * 5,  # a length that needs a two-byte varint
        tag="tag-Ω",
        born_time_ms=1_764_000_000_001,
        store_time_ms=1_764_000_000_999,
        delivery_attempt=300,  # a two-byte varint
        origin_topic="orders",
        origin_queue_id=7,
        origin_offset=99,
        message_group="group-1",
        deliver_at_ms=1_764_000_100_000,
        body_encoding="zstd",
        dedup_id="dedup-1",
        born_host="host-1",
    )
    record.keys.extend(["k1", "ключ", ""])
    record.properties.update({"a": "1", "ü": "ÿ" * 200, "empty": ""})
    return record


@pytest.mark.parametrize("raw", [True, False], ids=["read", "built"])
def test_every_delivered_field_crosses_as_the_objects_carry_it(raw: bool) -> None:
    popped = _popped(_full_record(), raw=raw)
    assert _through_bytes(popped) == _through_objects(popped)


def test_internal_fields_stay_behind() -> None:
    popped = _popped(_full_record())
    wire = delivered_fields(popped.record.to_bytes())
    assert b"dedup-1" not in wire
    assert b"orders" not in wire  # the origin topic of a retry copy
    # Nothing beyond what the objects carry: not one unknown field.
    expected = _through_objects(popped)
    assert len(_through_bytes(popped).SerializeToString()) == expected.ByteSize()


def test_a_plain_record_and_zero_positions() -> None:
    record = records_pb2.StoredMessage(
        message_id="m", body=b"x", born_time_ms=1000, store_time_ms=2000, delivery_attempt=1
    )
    popped = _popped(record, queue_id=0, offset=0, until=5000)
    wire = _wire(popped)
    assert messaging_pb2.ReceivedMessage.FromString(wire) == _through_objects(popped)
    # Zero positions are left out, as proto3 serialization leaves them out.
    assert len(wire) == _through_objects(popped).ByteSize()


def test_times_before_the_epoch_and_whole_seconds() -> None:
    record = records_pb2.StoredMessage(
        message_id="m", body=b"x", born_time_ms=-1_500, store_time_ms=7_000, delivery_attempt=1
    )
    popped = _popped(record)
    assert _through_bytes(popped) == _through_objects(popped)


def test_random_records_match() -> None:
    rng = random.Random(7)
    text = "abcxyz-_ü€😀"
    for _ in range(300):
        record = records_pb2.StoredMessage(
            message_id="".join(rng.choices(text, k=rng.randrange(1, 40))),
            body=rng.randbytes(rng.randrange(1, 3000)),
            born_time_ms=rng.randrange(1, 1 << 45),
            store_time_ms=rng.randrange(1, 1 << 45),
            delivery_attempt=rng.randrange(1, 40),
        )
        if rng.random() < 0.5:
            record.tag = "".join(rng.choices(text, k=rng.randrange(1, 20)))
        record.keys.extend("".join(rng.choices(text, k=3)) for _ in range(rng.randrange(0, 4)))
        for _ in range(rng.randrange(0, 5)):
            record.properties["".join(rng.choices(text, k=4))] = "".join(
                rng.choices(text, k=rng.randrange(0, 300))
            )
        if rng.random() < 0.3:
            record.deliver_at_ms = rng.randrange(1, 1 << 45)
        if rng.random() < 0.3:
            record.message_group = "g"
        if rng.random() < 0.3:
            record.origin_topic, record.origin_queue_id, record.origin_offset = "t", -1, 5
        popped = _popped(record, queue_id=rng.randrange(0, 64), offset=rng.randrange(0, 1 << 40))
        assert _through_bytes(popped) == _through_objects(popped)


def test_fields_of_other_wire_types_are_skipped() -> None:
    record = records_pb2.StoredMessage(
        message_id="m", body=b"x", born_time_ms=1000, store_time_ms=2000, delivery_attempt=1
    )
    # Field 40 as fixed64 and field 41 as fixed32: a later format's fields, not delivered.
    data = record.SerializeToString() + b"\xc1\x02" + bytes(8) + b"\xcd\x02" + bytes(4)
    assert delivered_fields(data) == delivered_fields(record.SerializeToString())


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x05abc",  # a length past the end
        b"\x30",  # a varint cut off
        b"\x0b",  # wire type 3 (a group)
        b"\x30" + b"\xff" * 11,  # a varint longer than ten bytes
        b"\x30" + b"\xff" * 10 + b"\x01",  # eleven bytes, the last one ending it
        b"\x30" + b"\xff" * 9,  # ten bytes, none ending it, then the end
    ],
)
def test_malformed_records_are_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match=r"runs past|wire type|longer than"):
        delivered_fields(data)
    with pytest.raises(ValueError, match=r"runs past|wire type|longer than"):
        has_message_group(data)


def test_a_message_group_is_read_off_the_bytes_as_a_parse_reads_it() -> None:
    full = _full_record()
    plain = records_pb2.StoredMessage(message_id="m", body=b"x" * 300, delivery_attempt=2)
    assert has_message_group(full.SerializeToString())
    assert not has_message_group(plain.SerializeToString())
    assert not has_message_group(b"")
    # A later occurrence wins, as in a parse: set, then emptied; empty, then set.
    group = b"\x62\x01g"
    emptied = full.SerializeToString() + b"\x62\x00"
    assert records_pb2.StoredMessage.FromString(emptied).message_group == ""
    assert not has_message_group(emptied)
    assert has_message_group(plain.SerializeToString() + group)
    # Fields of other wire types are skipped, and numbers of up to ten bytes.
    assert has_message_group(group + b"\xc1\x02" + bytes(8) + b"\xcd\x02" + bytes(4))
    assert has_message_group(b"\x30" + b"\xff" * 9 + b"\x01" + group)
    assert not has_message_group(b"\x30\x00" + b"\x30" + b"\x80" * 9 + b"\x00")


def test_varints_round_trip() -> None:
    for value in (0, 1, 127, 128, 300, 1 << 31, (1 << 64) - 1):
        encoded = varint(value)
        assert read_varint(encoded, 0) == (value, len(encoded))


def test_a_timestamp_of_zero_is_empty() -> None:
    assert timestamp_message(0) == b"\x00"


def test_timestamps_match_protobufs_encoding_for_every_millisecond_and_sign() -> None:
    rng = random.Random(11)
    times = [0, 1, 999, 1000, 1001, -1, -999, -1000, -1001, (1 << 62) - 1, -(1 << 62)]
    times += [rng.randrange(-(1 << 45), 1 << 45) for _ in range(2000)]
    times += [1_795_967_622_000 + n for n in range(1000)]
    for ms in times:
        # Seconds round down and nanos are never negative, as the conversion sets them.
        expected = timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=ms % 1000 * 1_000_000)
        body = expected.SerializeToString()
        assert timestamp_message(ms) == varint(len(body)) + body, ms


def test_interleaved_times_of_a_pop_each_keep_their_own_encoding() -> None:
    # A queue's run interleaves the store times of a few sends; more distinct times than
    # the kept encodings make the cache start over, and every answer stays right.
    rng = random.Random(5)
    stores = [1_795_967_622_000 + 7 * n for n in range(1500)]
    for _ in range(3):
        for ms in rng.choices(stores, k=4000):
            popped = _popped(
                records_pb2.StoredMessage(
                    message_id="m", body=b"x", born_time_ms=ms - 3, store_time_ms=ms
                )
            )
            assert _through_bytes(popped) == _through_objects(popped)
