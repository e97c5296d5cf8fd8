"""Sends written and read as bytes across the hop (broker/send_wire.py) mean what the
generated classes (the oracle) make of them, both ways; HopSend frames split as the
generated HopSendRequest and HopSendResponse say, and so do frames of them."""

from __future__ import annotations

import pytest

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq.broker import wire as w
from popmq.broker.hop_wire import (
    HOP_ERROR,
    HOP_SEND,
    HOP_SEND_HALF,
    hop_answer,
    hop_answer_from_wire,
)
from popmq.broker.send_wire import (
    ANSWER_FRAME_KEY,
    REQUEST_FRAME_KEY,
    frame_from_wire,
    frame_wire,
    send_request_from_wire,
    send_request_wire,
    send_response_wire,
    send_results_from_wire,
)
from popmq.broker_core import NewMessage, SendResult, varint


def _messages() -> list[NewMessage]:
    return [
        NewMessage("orders", b"x" * 1024),
        NewMessage(
            "orders",
            b"\x00\xff",
            tag="TagA",
            keys=("k1", "ключ"),
            properties={"a": "1", "ü": "", "": "empty name"},
            message_id="01ABCDEF",
            born_time_ms=1_700_000_000_123,
            message_group="g-1",
            deliver_at_ms=1_700_000_100_000,
            dedup_id="d-9",
            body_encoding="zstd",
            born_host="host-a",
            queue_id=0,
        ),
        NewMessage("ünïcode", b"", queue_id=7),
        NewMessage("orders", b"y", queue_id=-1, born_time_ms=-5),
        NewMessage("", b"no topic"),
    ]


def _fields(m: NewMessage) -> tuple[object, ...]:
    return (
        m.topic, m.body, m.tag, tuple(m.keys), dict(m.properties), m.message_id,
        m.born_time_ms, m.message_group, m.deliver_at_ms, m.dedup_id, m.body_encoding,
        m.born_host, m.queue_id,
    )  # fmt: skip


def test_send_request_parses_as_the_generated_request_builds_it() -> None:
    messages = _messages()
    built = pb.SendRequest(messages=[w.new_message_to_pb(m) for m in messages])
    assert pb.SendRequest.FromString(send_request_wire(messages)) == built


def test_send_request_reads_back_what_the_generated_request_carries() -> None:
    messages = _messages()
    data = pb.SendRequest(messages=[w.new_message_to_pb(m) for m in messages]).SerializeToString()
    read = send_request_from_wire(data)
    assert [_fields(m) for m in read.messages] == [_fields(m) for m in messages]
    assert read.producer_group == "" and read.check_first_s is None
    again = send_request_from_wire(send_request_wire(messages)).messages
    assert [_fields(m) for m in again] == [_fields(m) for m in messages]


def test_half_send_request_carries_its_producer_group_and_first_check() -> None:
    messages = _messages()[:2]
    data = send_request_wire(messages, producer_group="pg", check_first_s=2.5)
    assert pb.SendHalfRequest.FromString(data) == pb.SendHalfRequest(
        messages=[w.new_message_to_pb(m) for m in messages], producer_group="pg", check_first_s=2.5
    )
    read = send_request_from_wire(data)
    assert (read.producer_group, read.check_first_s) == ("pg", 2.5)
    assert send_request_from_wire(send_request_wire(messages, check_first_s=0.0)).check_first_s == 0
    assert send_request_from_wire(send_request_wire(messages)).check_first_s is None


def test_a_repeated_property_keeps_its_last_value_and_unknown_fields_are_skipped() -> None:
    element = w.new_message_to_pb(NewMessage("t", b"b")).SerializeToString()
    entry_a = b"\x0a\x01k\x12\x01a"
    entry_b = b"\x0a\x01k\x12\x01b"
    # Field 15 varint, field 16 length-delimited, field 17 fixed64, field 18 fixed32.
    unknown = b"\x78\x05" + b"\x82\x01\x02ab" + b"\x89\x01" + bytes(8) + b"\x95\x01" + bytes(4)
    body = element + b"\x2a\x06" + entry_a + b"\x2a\x06" + entry_b + unknown
    data = b"\x0a" + varint(len(body)) + body + b"\x78\x01"
    (read,) = send_request_from_wire(data).messages
    oracle = pb.SendRequest.FromString(data).messages[0]
    assert _fields(read) == _fields(w.new_message_from_pb(oracle))
    assert read.properties == {"k": "b"}


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x05ab",  # a message runs past the end
        b"\x0a\x02\x12\x09",  # a body runs past its message
        b"\x0a",  # no length
        b"\x0b",  # wire type 3
        b"\x0a\x03\x0a\x01\xff",  # a topic that is not UTF-8
        b"\x02\x00",  # field number 0
    ],
)
def test_malformed_send_request_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        send_request_from_wire(data)


def _results() -> list[SendResult]:
    return [
        SendResult("01AB", "orders", 3, 1234),
        SendResult("01AC", "orders", 0, 0, "recall-h", True),
        SendResult("01AD", "ünïcode", -1, 2**40, "", False, "tx-1"),
    ]


def test_send_results_parse_as_the_generated_response_and_read_back() -> None:
    results = _results()
    built = pb.SendResponse(results=[w.send_result_to_pb(r) for r in results])
    assert pb.SendResponse.FromString(send_response_wire(results)) == built
    assert send_results_from_wire(built.SerializeToString()) == results
    assert send_results_from_wire(send_response_wire(results)) == results
    assert send_results_from_wire(b"") == [] and send_response_wire([]) == b""


def test_hop_send_frames_parse_as_the_generated_messages() -> None:
    messages = _messages()
    request = hop_answer(9, HOP_SEND, send_request_wire(messages))
    assert pb.HopSendRequest.FromString(request) == pb.HopSendRequest(
        id=9, send=pb.SendRequest(messages=[w.new_message_to_pb(m) for m in messages])
    )
    half = hop_answer(10, HOP_SEND_HALF, send_request_wire(messages, producer_group="pg"))
    assert pb.HopSendRequest.FromString(half).send_half.producer_group == "pg"
    answer = hop_answer(2**40, HOP_SEND, send_response_wire(_results()))
    assert pb.HopSendResponse.FromString(answer) == pb.HopSendResponse(
        id=2**40, send=pb.SendResponse(results=[w.send_result_to_pb(r) for r in _results()])
    )
    assert hop_answer_from_wire(answer) == (2**40, HOP_SEND, send_response_wire(_results()))


def test_a_frame_of_requests_and_of_answers_parses_as_the_generated_messages() -> None:
    messages = _messages()
    requests = [
        hop_answer(1, HOP_SEND, send_request_wire(messages)),
        hop_answer(2, HOP_SEND_HALF, send_request_wire(messages[:1], producer_group="pg")),
    ]
    frame = frame_wire(REQUEST_FRAME_KEY, requests)
    assert pb.HopSendRequest.FromString(frame) == pb.HopSendRequest(
        frame=[pb.HopSendRequest.FromString(r) for r in requests]
    )
    assert frame_from_wire(REQUEST_FRAME_KEY, frame) == requests
    answers = [
        hop_answer(2, HOP_SEND_HALF, send_response_wire(_results()[:1])),
        hop_answer(1, HOP_ERROR, pb.ErrorDetail(code="NOT_FOUND").SerializeToString()),
    ]
    built = pb.HopSendResponse(frame=[pb.HopSendResponse.FromString(a) for a in answers])
    assert frame_wire(ANSWER_FRAME_KEY, answers) == built.SerializeToString()
    assert frame_from_wire(ANSWER_FRAME_KEY, built.SerializeToString()) == answers


def test_a_request_or_answer_of_its_own_is_not_a_frame() -> None:
    request = hop_answer(3, HOP_SEND, send_request_wire(_messages()))
    assert frame_from_wire(REQUEST_FRAME_KEY, request) is None
    assert frame_from_wire(ANSWER_FRAME_KEY, hop_answer(3, HOP_SEND, b"")) is None
    assert frame_from_wire(REQUEST_FRAME_KEY, b"") is None


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\x22\x05\x08\x01", "runs past the end"),
        (b"\x22\x02\x08\x01\x08\x07", "carries field 1 besides its parts"),
    ],
)
def test_a_malformed_frame_is_refused(data: bytes, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        frame_from_wire(REQUEST_FRAME_KEY, data)
