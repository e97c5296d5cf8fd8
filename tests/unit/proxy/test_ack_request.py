"""ack_request.py reads an AckRequest or PopStreamRequest from its bytes to the values upb
parses from them, and refuses what upb refuses (the oracle: the generated classes)."""

from __future__ import annotations

import random

import pytest
from google.protobuf.message import DecodeError

from popmq._gen.popmq.v1 import messaging_pb2 as pb
from popmq.proxy.ack_request import AckRequest, PopStreamRequest


def _assert_ack_reads_as_upb(data: bytes) -> None:
    parsed = pb.AckRequest.FromString(data)
    read = AckRequest.FromString(data)
    assert read.group == parsed.group
    assert read.receipt_handles == list(parsed.receipt_handles)
    assert all(type(h) is str for h in read.receipt_handles)


def _assert_stream_reads_as_upb(data: bytes) -> None:
    parsed = pb.PopStreamRequest.FromString(data)
    read = PopStreamRequest.FromString(data)
    assert read.request_id == parsed.request_id
    action = parsed.WhichOneof("action")
    assert read.WhichOneof("action") == action
    assert read.HasField("action") == parsed.HasField("action")
    for member in ("pop", "cancel", "ack"):
        assert read.HasField(member) == parsed.HasField(member), member
    assert read.pop == parsed.pop
    assert read.cancel == parsed.cancel
    assert read.ack.group == parsed.ack.group
    assert read.ack.receipt_handles == list(parsed.ack.receipt_handles)


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    key = (
        bytes([number << 3 | wire_type])
        if number < 16
        else bytes([(number << 3 | wire_type) & 0x7F | 0x80, number >> 4])
    )
    if wire_type == 2:
        return key + bytes([len(payload)]) + payload
    return key + payload


ACKS = [
    pb.AckRequest(),
    pb.AckRequest(group="g"),
    pb.AckRequest(receipt_handles=["broker-a.AAAA"]),
    pb.AckRequest(group="gr\u00fcppe", receipt_handles=["a", "", "\u4e2d" * 50, "h" * 300]),
]


@pytest.mark.parametrize("request_", ACKS)
def test_acks_read_as_upb_parses_them(request_: pb.AckRequest) -> None:
    _assert_ack_reads_as_upb(request_.SerializeToString())


def test_ack_wire_corner_cases_read_as_upb_parses_them() -> None:
    data = b"".join(
        [
            _field(2, 2, b"first"),
            _field(1, 2, b"g1"),
            _field(1, 2, b"g2"),  # last wins
            _field(2, 0, b"\x05"),  # a handle with the wrong wire type: unknown, skipped
            _field(1, 5, b"abcd"),  # the group as a fixed32: unknown, skipped
            _field(2, 2, b""),
            _field(99, 1, b"abcdefgh"),  # unknown fixed64
            b"\x9b\x06" + _field(1, 0, b"\x01") + b"\x9c\x06",  # a group, field 99
            b"\x92\x00\x02xy",  # receipt_handles with its key in two bytes
            _field(2, 2, b"last"),
        ]
    )
    _assert_ack_reads_as_upb(data)
    read = AckRequest.FromString(data)
    assert read.group == "g2"
    assert read.receipt_handles == ["first", "", "xy", "last"]


BAD_ACKS = [
    b"\x12\x05ab",  # a handle longer than its message
    b"\x12\x02\xff\xfe",  # invalid UTF-8 in a handle
    b"\x0a\x01\xed",  # a truncated UTF-8 sequence in the group
    b"\x02\x00",  # field number 0
    b"\x0f",  # wire type 7
    b"\x0c",  # an end-group that ends nothing
    b"\x08" + b"\xff" * 10 + b"\x01",  # an 11-byte varint
    b"\x12",  # a key and no length
    b"\x12\x80",  # a length cut short
    b"\x1d\x00",  # a fixed32 cut short
]


@pytest.mark.parametrize("data", BAD_ACKS)
def test_what_upb_refuses_in_an_ack_is_refused(data: bytes) -> None:
    with pytest.raises(DecodeError):
        pb.AckRequest.FromString(data)
    with pytest.raises(ValueError):
        AckRequest.FromString(data)
    stream = _field(1, 0, b"\x07") + b"\x22" + bytes([len(data)]) + data
    with pytest.raises(DecodeError):
        pb.PopStreamRequest.FromString(stream)
    with pytest.raises(ValueError):
        PopStreamRequest.FromString(stream)


def test_random_acks_read_as_upb_parses_them() -> None:
    rng = random.Random(5)

    def text(limit: int) -> str:
        return "".join(rng.choice("ab.-_\u00e9\u4e2d") for _ in range(rng.randrange(limit)))

    for _ in range(300):
        request = pb.AckRequest(
            group=text(8), receipt_handles=[text(200) for _ in range(rng.randrange(5))]
        )
        data = request.SerializeToString()
        _assert_ack_reads_as_upb(data)
        stream = pb.PopStreamRequest(request_id=rng.randrange(1 << 64), ack=request)
        _assert_stream_reads_as_upb(stream.SerializeToString())
        # Cut anywhere, each reads as upb parses it, or fails where upb fails.
        framed = stream.SerializeToString()
        for whole, read_, oracle, check in (
            (data, AckRequest.FromString, pb.AckRequest.FromString, _assert_ack_reads_as_upb),
            (framed, PopStreamRequest.FromString, pb.PopStreamRequest.FromString,
             _assert_stream_reads_as_upb),
        ):  # fmt: skip
            cut = whole[: rng.randrange(len(whole) + 1)]
            try:
                oracle(cut)
            except DecodeError:
                with pytest.raises(ValueError):
                    read_(cut)
            else:
                check(cut)


STREAMS = [
    pb.PopStreamRequest(),
    pb.PopStreamRequest(request_id=7),
    pb.PopStreamRequest(request_id=1, pop=pb.PopRequest(group="g", topic="t", max_messages=3)),
    pb.PopStreamRequest(request_id=2, pop=pb.PopRequest()),
    pb.PopStreamRequest(request_id=3, cancel=pb.PopStreamCancel()),
    pb.PopStreamRequest(request_id=4, ack=pb.AckRequest(group="g", receipt_handles=["h1", "h2"])),
    pb.PopStreamRequest(request_id=5, ack=pb.AckRequest()),
]


@pytest.mark.parametrize("request_", STREAMS)
def test_stream_requests_read_as_upb_parses_them(request_: pb.PopStreamRequest) -> None:
    _assert_stream_reads_as_upb(request_.SerializeToString())


def test_a_oneof_member_replaces_another_and_a_repeated_member_merges() -> None:
    ack1 = pb.AckRequest(group="g1", receipt_handles=["a"]).SerializeToString()
    ack2 = pb.AckRequest(receipt_handles=["b"]).SerializeToString()
    pop = pb.PopRequest(group="g", topic="t").SerializeToString()
    pop_more = pb.PopRequest(max_messages=4, ack_receipt_handles=["c"]).SerializeToString()
    cases = [
        _field(4, 2, ack1) + _field(4, 2, ack2),  # merged: both handles, the group kept
        _field(2, 2, pop) + _field(2, 2, pop_more),  # merged pops
        _field(4, 2, ack1) + _field(2, 2, pop),  # the pop replaces the ack
        _field(2, 2, pop) + _field(4, 2, ack2),  # the ack replaces the pop
        _field(4, 2, ack1) + _field(2, 2, pop) + _field(4, 2, ack2),  # a fresh ack: "b" alone
        _field(2, 2, pop) + _field(3, 2, b"") + _field(2, 2, pop_more),  # a fresh pop
        _field(3, 2, b"") + _field(1, 0, b"\x09"),
        _field(4, 0, b"\x01") + _field(2, 5, b"abcd"),  # members of the wrong wire type
        _field(1, 0, b"\x01") + _field(1, 0, b"\x02") + _field(1, 2, b"x"),  # last id wins
        _field(3, 2, _field(5, 0, b"\x01")),  # a cancel with an unknown field
    ]
    for data in cases:
        _assert_stream_reads_as_upb(data)
    read = PopStreamRequest.FromString(cases[4])
    assert read.ack.group == ""
    assert read.ack.receipt_handles == ["b"]
    with pytest.raises(ValueError):
        # A member replaced later still has to parse, as upb parses each as it comes.
        PopStreamRequest.FromString(_field(4, 2, b"\x12\x05ab") + _field(2, 2, pop))
    with pytest.raises(ValueError):
        PopStreamRequest.FromString(_field(2, 2, b"\x0a\x05ab"))  # a pop that does not parse


def test_names_that_are_not_the_oneof_are_refused_as_upb_refuses_them() -> None:
    read = PopStreamRequest.FromString(b"")
    parsed = pb.PopStreamRequest()
    for name in ("request_id", "nothing"):
        with pytest.raises(ValueError):
            parsed.HasField(name)
        with pytest.raises(ValueError):
            read.HasField(name)
    with pytest.raises(ValueError):
        parsed.WhichOneof("nothing")
    with pytest.raises(ValueError):
        read.WhichOneof("nothing")


def test_the_readers_name_the_messages_they_read() -> None:
    """Error texts and the RPC log name a request's message and fields by DESCRIPTOR."""
    assert AckRequest.DESCRIPTOR.full_name == "popmq.v1.AckRequest"
    assert PopStreamRequest.DESCRIPTOR.full_name == "popmq.v1.PopStreamRequest"
