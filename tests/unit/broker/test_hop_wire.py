"""Pop and Ack answers written and read as bytes across the hop (broker/hop_wire.py) mean
what the generated classes (the oracle) make of them, both ways."""

from __future__ import annotations

import pytest

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker import wire as w
from popmq.broker.hop_wire import (
    HOP_ACK,
    HOP_ERROR,
    HOP_POP,
    ack_request_wire,
    ack_response_wire,
    ack_results_from_wire,
    globalize,
    hop_answer,
    hop_answer_from_wire,
    pop_response_wire,
    popped_from_wire,
)
from popmq.broker_core import MESSAGE_OVERHEAD_BYTES, MessageRecord, PoppedMessage, varint
from popmq.broker_core.errors import NotFoundError, PopMQError, UnavailableError


def _record(body: bytes, **fields: object) -> MessageRecord:
    stored = records_pb2.StoredMessage(message_id="0A0B", body=body, tag="t", **fields)  # type: ignore[arg-type]
    return MessageRecord.from_bytes(stored.SerializeToString())


def _popped() -> list[PoppedMessage]:
    return [
        PoppedMessage("orders", 3, 1234, _record(b"x" * 1024), "h1-abc", 1_700_000_000_123),
        PoppedMessage("orders", 0, 0, _record(b""), "h2", 0),
        PoppedMessage("ünïcode", 7, 2**40, _record(b"\x00\xff", keys=["k"]), "h3", 5),
        PoppedMessage("t", -1, -5, MessageRecord(records_pb2.StoredMessage()), "", -2),
    ]


def _fields(p: PoppedMessage) -> tuple[object, ...]:
    return (
        p.topic,
        p.queue_id,
        p.offset,
        p.record.to_bytes(),
        p.receipt_handle,
        p.invisible_until_ms,
    )


def test_pop_answer_parses_as_the_generated_response_builds_it() -> None:
    popped = _popped()
    built = pb.PopResponse(messages=[w.popped_to_pb(p) for p in popped])
    assert pb.PopResponse.FromString(pop_response_wire(popped)) == built


def test_pop_answer_reads_back_what_the_generated_response_carries() -> None:
    popped = _popped()
    data = pb.PopResponse(messages=[w.popped_to_pb(p) for p in popped]).SerializeToString()
    assert [_fields(p) for p in popped_from_wire(data)] == [_fields(p) for p in popped]
    assert [_fields(p) for p in popped_from_wire(pop_response_wire(popped))] == [
        _fields(p) for p in popped
    ]


def test_popped_records_read_their_fields_when_asked() -> None:
    (first, *_) = popped_from_wire(pop_response_wire(_popped()))
    assert first.record.body == b"x" * 1024
    assert first.record.message_id == "0A0B"
    assert first.record.stored_size == len(first.record.to_bytes())


def test_pop_answer_skips_fields_it_does_not_know() -> None:
    element = w.popped_to_pb(_popped()[0]).SerializeToString()
    # Field 15 varint, field 16 length-delimited, field 17 fixed64, field 18 fixed32.
    unknown = b"\x78\x05" + b"\x82\x01\x02ab" + b"\x89\x01" + bytes(8) + b"\x95\x01" + bytes(4)
    data = b"\x0a" + varint(len(element + unknown)) + element + unknown + b"\x10\x01"
    assert [_fields(p) for p in popped_from_wire(data)] == [_fields(_popped()[0])]


@pytest.mark.parametrize("data", [b"\x0a\x05ab", b"\x0a\x02\x22\x09", b"\x0a", b"\x0b"])
def test_malformed_pop_answer_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        popped_from_wire(data)


def test_an_empty_pop_answer_has_no_deliveries() -> None:
    assert pop_response_wire([]) == b""
    assert popped_from_wire(b"") == []


def _ack_oracle(outcomes: list[PopMQError | None]) -> pb.AckResponse:
    return pb.AckResponse(
        results=[
            pb.AckResult(error=w.error_detail(e)) if e is not None else pb.AckResult()
            for e in outcomes
        ]
    )


def test_ack_answer_parses_as_the_generated_response_builds_it() -> None:
    outcomes: list[PopMQError | None] = [
        None,
        NotFoundError("receipt handle is stale", field="receipt_handle"),
        None,
        UnavailableError("later"),
    ]
    data = ack_response_wire(outcomes)
    assert pb.AckResponse.FromString(data) == _ack_oracle(outcomes)
    back = ack_results_from_wire(_ack_oracle(outcomes).SerializeToString())
    assert back[0] is None and back[2] is None
    assert isinstance(back[1], NotFoundError) and back[1].field == "receipt_handle"
    assert str(back[1]) == "receipt handle is stale"
    assert isinstance(back[3], UnavailableError)
    assert [type(o) for o in ack_results_from_wire(data)] == [type(o) for o in back]


@pytest.mark.parametrize(
    ("group", "handles"),
    [
        ("orders", ["b1.AAAA", "b1.BBBB"]),
        ("g", []),
        ("", ["only"]),
        ("grüppe", ["b2." + "x" * 200] * 3),
    ],
)
def test_ack_request_is_the_generated_requests_bytes(group: str, handles: list[str]) -> None:
    data = ack_request_wire(group, handles)
    assert data == pb.AckRequest(group=group, handles=handles).SerializeToString()
    back = pb.AckRequest.FromString(data)
    assert (back.group, list(back.handles)) == (group, handles)


def test_ack_answer_of_acked_handles_reads_as_none_each() -> None:
    assert ack_results_from_wire(ack_response_wire([None] * 32)) == [None] * 32
    assert ack_results_from_wire(_ack_oracle([None] * 3).SerializeToString()) == [None] * 3
    assert ack_results_from_wire(b"") == []


def test_hop_answers_parse_as_the_generated_response_and_split_back() -> None:
    popped = _popped()
    pop = hop_answer(7, HOP_POP, pop_response_wire(popped))
    assert pb.HopStreamResponse.FromString(pop) == pb.HopStreamResponse(
        id=7, pop=pb.PopResponse(messages=[w.popped_to_pb(p) for p in popped])
    )
    ack = hop_answer(2**40, HOP_ACK, ack_response_wire([None, None]))
    assert pb.HopStreamResponse.FromString(ack) == pb.HopStreamResponse(
        id=2**40, ack=pb.AckResponse(results=[pb.AckResult(), pb.AckResult()])
    )
    detail = w.error_detail(NotFoundError("no such group"))
    error = pb.HopStreamResponse(id=3, error=detail).SerializeToString()
    assert hop_answer_from_wire(error) == (3, HOP_ERROR, detail.SerializeToString())
    assert hop_answer_from_wire(ack) == (2**40, HOP_ACK, ack_response_wire([None, None]))
    assert hop_answer_from_wire(pb.HopStreamResponse(id=1).SerializeToString()) == (1, 0, b"")


def test_globalize_numbers_each_message_by_its_route_and_counts_its_bytes() -> None:
    popped = popped_from_wire(pop_response_wire([*_popped(), _popped()[0]]))
    asked: list[int] = []

    def global_id(local_id: int) -> int:
        asked.append(local_id)
        return local_id + 100

    size = globalize(popped, global_id)
    assert [p.queue_id for p in popped] == [103, 100, 107, 99, 103]
    assert sorted(asked) == [-1, 0, 3, 7]  # once a queue
    assert size == sum(p.record.stored_size + MESSAGE_OVERHEAD_BYTES for p in popped)
    assert globalize([], global_id) == 0
