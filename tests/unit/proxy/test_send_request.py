"""send_request.py reads a SendMessagesRequest or SendStreamRequest from its bytes to the
values upb parses from them, and refuses what upb refuses (the oracle: the generated classes,
read the way the servicer read them before)."""

from __future__ import annotations

import random

import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf.message import DecodeError

from popmq._gen.popmq.v1 import messaging_pb2 as pb
from popmq.broker_core import NewMessage
from popmq.proxy.send_request import (
    DELAY,
    DELAY_LEVEL,
    DELIVERY_TIME,
    SendRequest,
    SendStreamRequest,
)


def _expected(message: pb.OutgoingMessage) -> NewMessage:
    return NewMessage(
        topic=message.topic,
        body=message.body,
        tag=message.tag,
        keys=tuple(message.keys),
        properties=dict(message.properties),
        message_id=message.message_id,
        message_group=message.message_group,
        dedup_id=message.dedup_id,
        body_encoding=message.body_encoding,
        born_host=message.born_host,
    )


def _schedule(message: pb.OutgoingMessage) -> tuple[int, object] | None:
    which = message.WhichOneof("schedule")
    if which == "delivery_time":
        return DELIVERY_TIME, message.delivery_time
    if which == "delay":
        return DELAY, message.delay
    if which == "delay_level":
        return DELAY_LEVEL, message.delay_level
    return None


def _assert_reads_as_upb(data: bytes) -> None:
    parsed = pb.SendMessagesRequest.FromString(data)
    read = SendRequest.FromString(data)
    assert read.messages == [_expected(m) for m in parsed.messages]
    schedules = {s.index: (s.kind, s.value) for s in read.schedules}
    assert [s.index for s in read.schedules] == sorted(schedules)
    for i, message in enumerate(parsed.messages):
        assert schedules.get(i) == _schedule(message), i
    assert read.transactional == parsed.transactional
    assert read.producer_group == parsed.producer_group
    assert read.repeat == parsed.repeat
    assert read.HasField("transaction_check_delay") == parsed.HasField("transaction_check_delay")
    if parsed.HasField("transaction_check_delay"):
        assert read.transaction_check_delay == parsed.transaction_check_delay


def _full() -> pb.OutgoingMessage:
    return pb.OutgoingMessage(
        topic="orders",
        body=b"\x00\xff" * 100,
        tag="T\u00e9",
        keys=["k1", "k\u4e2d"],
        properties={"a": "1", "": "", "\u00fc": "v" * 300},
        message_id="id-1",
        message_group="g",
        delivery_time=timestamp_pb2.Timestamp(seconds=1_700_000_000, nanos=5),
        dedup_id="d",
        body_encoding="zstd",
        born_host="h",
    )


CASES = [
    pb.SendMessagesRequest(),
    pb.SendMessagesRequest(messages=[pb.OutgoingMessage(topic="t", body=b"x")]),
    pb.SendMessagesRequest(messages=[_full(), pb.OutgoingMessage(delay_level=-3)]),
    pb.SendMessagesRequest(
        messages=[
            pb.OutgoingMessage(topic="t", body=b"x", delay=duration_pb2.Duration(seconds=-1)),
            pb.OutgoingMessage(delay_level=7),
            pb.OutgoingMessage(delay=duration_pb2.Duration()),
        ],
        transactional=True,
        producer_group="pg",
        transaction_check_delay=duration_pb2.Duration(),
    ),
    pb.SendMessagesRequest(messages=[_full()], repeat=True),
]


@pytest.mark.parametrize("request_", CASES)
def test_requests_read_as_upb_parses_them(request_: pb.SendMessagesRequest) -> None:
    _assert_reads_as_upb(request_.SerializeToString())


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    key = (
        bytes([number << 3 | wire_type])
        if number < 16
        else bytes([(number << 3 | wire_type) & 0x7F | 0x80, number >> 4])
    )
    if wire_type == 2:
        return key + bytes([len(payload)]) + payload
    return key + payload


def test_wire_corner_cases_read_as_upb_parses_them() -> None:
    ts = lambda s: timestamp_pb2.Timestamp(seconds=s).SerializeToString()  # noqa: E731
    message = b"".join(
        [
            _field(1, 2, b"first"),
            _field(1, 2, b"topic"),  # last wins
            _field(2, 0, b"\x05"),  # body with the wrong wire type: unknown, skipped
            _field(2, 2, b"body"),
            _field(5, 2, _field(1, 2, b"k") + _field(2, 2, b"v1")),
            _field(5, 2, _field(2, 2, b"v2") + _field(1, 2, b"k")),  # same key: replaced
            _field(5, 2, _field(2, 2, b"no key")),
            _field(8, 2, ts(5)),
            _field(9, 2, b"\x08\x01"),  # switches the oneof to delay
            _field(8, 2, b"\x10\x07"),  # back to delivery_time: cleared, then nanos only
            _field(8, 2, b"\x08\x09"),  # merged with it
            _field(99, 5, b"abcd"),  # unknown fixed32
            _field(98, 1, b"abcdefgh"),  # unknown fixed64
            b"\x9b\x06" + _field(1, 0, b"\x01") + b"\x9c\x06",  # a group, field 99
            _field(10, 2, b"xx"),  # delay_level with the wrong wire type: unknown
        ]
    )
    request = b"".join(
        [
            _field(1, 2, message),
            _field(2, 0, b"\x02"),  # transactional: any non-zero
            _field(4, 2, b"\x08\x03"),
            _field(4, 2, b"\x10\x04"),  # merged
            _field(3, 2, b"pg"),
            _field(5, 0, b"\x05"),  # repeat: any non-zero
            _field(5, 2, b"x"),  # repeat with the wrong wire type: unknown, skipped
        ]
    )
    _assert_reads_as_upb(request)
    assert SendRequest.FromString(request).repeat
    read = SendRequest.FromString(request)
    assert read.messages[0].properties == {"k": "v2", "": "no key"}
    assert read.schedules[0].value == timestamp_pb2.Timestamp(seconds=9, nanos=7)


BAD = [
    b"\x0a\x05ab",  # a field longer than its message
    b"\x0a\x03\x12\x05a",  # inside a message
    b"\x0a\x02\x0a\x01\xff",  # invalid UTF-8 in the topic
    b"\x0a\x04\x2a\x02\x0a\x01",  # inside a map entry
    b"\x0a\x03\x1a\x01\xed",  # a truncated UTF-8 sequence in the tag
    b"\x0a\x02\x00\x00",  # field number 0
    b"\x0f",  # wire type 7
    b"\x0c",  # an end-group that ends nothing
    b"\x10" + b"\xff" * 10 + b"\x01",  # an 11-byte varint
    b"\x0a\x03\x42\x01\xff",  # a Timestamp that does not parse
    b"\x0a\x02\x1d\x00",  # a fixed32 cut short
]


@pytest.mark.parametrize("data", BAD)
def test_what_upb_refuses_is_refused(data: bytes) -> None:
    with pytest.raises(DecodeError):
        pb.SendMessagesRequest.FromString(data)
    with pytest.raises(ValueError):
        SendRequest.FromString(data)


def test_random_requests_read_as_upb_parses_them() -> None:
    rng = random.Random(11)

    def text(limit: int) -> str:
        return "".join(rng.choice("ab\u00e9\u4e2d") for _ in range(rng.randrange(limit)))

    for _ in range(200):
        messages = []
        for _ in range(rng.randrange(4)):
            message = pb.OutgoingMessage(
                topic=text(6),
                body=rng.randbytes(rng.randrange(300)),
                tag=text(4),
                keys=[text(5) for _ in range(rng.randrange(3))],
                properties={text(5): text(300) for _ in range(rng.randrange(3))},
                message_id=text(4),
                message_group=text(3),
                dedup_id=text(3),
                body_encoding=text(3),
                born_host=text(3),
            )
            choice = rng.randrange(4)
            if choice == 1:
                message.delivery_time.seconds = rng.randrange(-(1 << 40), 1 << 40)
            elif choice == 2:
                message.delay.nanos = rng.randrange(-999_999_999, 999_999_999)
            elif choice == 3:
                message.delay_level = rng.randrange(-(1 << 31), 1 << 31)
            messages.append(message)
        request = pb.SendMessagesRequest(
            messages=messages,
            transactional=rng.random() < 0.5,
            producer_group=text(3),
            repeat=rng.random() < 0.5,
        )
        data = request.SerializeToString()
        _assert_reads_as_upb(data)
        # A request cut anywhere reads as upb parses it, or fails where upb fails.
        cut = data[: rng.randrange(len(data) + 1)]
        try:
            pb.SendMessagesRequest.FromString(cut)
        except DecodeError:
            with pytest.raises(ValueError):
                SendRequest.FromString(cut)
        else:
            _assert_reads_as_upb(cut)


def test_stream_requests_read_as_upb_parses_them() -> None:
    send = pb.SendMessagesRequest(messages=[_full()])
    for request in (
        pb.SendStreamRequest(request_id=7, send=send),
        pb.SendStreamRequest(request_id=1),
        pb.SendStreamRequest(send=pb.SendMessagesRequest()),
    ):
        data = request.SerializeToString()
        read = SendStreamRequest.FromString(data)
        assert read.request_id == request.request_id
        assert read.has_send == request.HasField("send")
        assert read.send.messages == [_expected(m) for m in request.send.messages]
    # A repeated `send` merges: messages append, the last scalars win.
    twice = (
        pb.SendStreamRequest(request_id=3, send=send).SerializeToString()
        + pb.SendStreamRequest(
            send=pb.SendMessagesRequest(messages=[_full()], transactional=True)
        ).SerializeToString()
    )
    parsed = pb.SendStreamRequest.FromString(twice)
    read = SendStreamRequest.FromString(twice)
    assert read.request_id == parsed.request_id == 3
    assert read.has_send
    assert read.send.messages == [_expected(m) for m in parsed.send.messages]
    assert [s.index for s in read.send.schedules] == [0, 1]
    assert read.send.transactional
    with pytest.raises(ValueError):
        SendStreamRequest.FromString(b"\x12\x03\x0a\x05a")


def test_a_request_of_too_many_messages_is_read_by_upb_whole() -> None:
    """Past MAX_SEND_MESSAGES the servicer refuses the count before reading a message: the
    request is parsed by upb (faster), and still accepted or refused as upb does."""
    message = pb.OutgoingMessage(topic="wide", body=b"x")
    request = pb.SendMessagesRequest(messages=[message] * 1500, producer_group="pg", repeat=True)
    read = SendRequest.FromString(request.SerializeToString())
    assert len(read.messages) == 1500
    assert read.repeat
    assert {m.topic for m in read.messages} == {"wide"}  # what access checks read
    assert read.producer_group == "pg"
    broken = request.SerializeToString() + b"\x0a\x03\x0a\x01\xff"  # invalid UTF-8, last
    with pytest.raises(DecodeError):
        pb.SendMessagesRequest.FromString(broken)
    with pytest.raises(ValueError):
        SendRequest.FromString(broken)
