"""A pop answered in the received form (broker/hop_wire.py: the broker writes each delivery
as the proxy's client gets it) gives the client the very bytes the proxy wrote before from
the PoppedMessages it read (popped_from_wire, globalize, pop_answer), and the header a proxy
reads (count, stored bytes, handles) says what the objects said."""

from __future__ import annotations

import pytest

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq._gen.popmq.store.v1 import records_pb2
from popmq._gen.popmq.v1 import messaging_pb2
from popmq.broker.hop_wire import (
    globalize,
    pop_response_wire,
    popped_from_wire,
    received_form_wire,
    received_from_wire,
    received_response_wire,
)
from popmq.broker_core import (
    MESSAGE_OVERHEAD_BYTES,
    MessageRecord,
    PopMQError,
    PoppedMessage,
    ReceivedBatch,
    received_messages_wire,
)
from popmq.proxy import convert
from popmq.proxy.pop_stream import AckedPop, pop_answer

GLOBAL_IDS = (4, 5, 9)
"""A broker's local queues 0, 1 and 2 in a route that numbers them 4, 5 and 9."""


def _record(i: int, **fields: object) -> MessageRecord:
    stored = records_pb2.StoredMessage(
        message_id=f"01ID{i}", body=b"b" * (i * 300), tag=f"t{i % 2}", born_time_ms=1_000 + i,
        store_time_ms=2_000, delivery_attempt=1 + i % 3, **fields,  # type: ignore[arg-type]
    )  # fmt: skip
    return MessageRecord.from_bytes(stored.SerializeToString())


def _broker_answer(first: int = 0) -> list[PoppedMessage]:
    """A broker's deliveries as its pop returns them: local queue ids, queue 0 and offset 0
    among them, a retry copy of another topic, a local queue past the route's (a route
    changed meanwhile: it keeps its id), handle lengths and deadlines that change."""
    rows = [
        ("orders", 1, 7, 30_000), ("orders", 1, 8, 30_000), ("orders", 0, 0, 30_000),
        ("orders", 2, 2**40, 45_001), ("délais", 0, 3, 45_001), ("orders", 5, 1, 45_001),
        ("orders", 2, 9, 30_000),
    ]  # fmt: skip
    return [
        PoppedMessage(
            topic,
            queue,
            offset,
            _record(first + i, keys=["k1", "k2"], properties={"a": "1"}),
            f"b1.{'h' * (i + 20) if i != 3 else 'h' * 300}",
            until,
        )
        for i, (topic, queue, offset, until) in enumerate(rows)
    ]


def _proxy_read_before(data: bytes) -> list[PoppedMessage]:
    """What a proxy made of a broker's answer in the objects' form: PoppedMessages with the
    route's global queue ids."""
    popped = popped_from_wire(data)
    globalize(popped, lambda local: GLOBAL_IDS[local] if local < len(GLOBAL_IDS) else local)
    return popped


def test_the_client_gets_the_bytes_the_proxy_wrote_from_the_objects() -> None:
    popped = _broker_answer()
    before = _proxy_read_before(pop_response_wire(popped))
    batch = received_from_wire(received_response_wire(popped, GLOBAL_IDS))
    assert batch is not None
    request = messaging_pb2.PopRequest(group="g", topic="orders")
    assert pop_answer(request, batch) == pop_answer(request, before)
    # And both mean what the field-by-field conversion builds.
    expected = messaging_pb2.PopResponse()
    convert.received_messages(expected.messages, before)
    assert messaging_pb2.PopResponse.FromString(pop_answer(request, batch)) == expected
    assert [m.queue_id for m in expected.messages] == [5, 5, 4, 9, 4, 5, 9]

    # A pop that carried acks: their results first, the same way.
    acked = messaging_pb2.PopRequest(group="g", topic="orders", ack_receipt_handles=["x", "y"])
    outcomes: list[PopMQError | None] = [None, None]
    assert pop_answer(acked, AckedPop(outcomes, batch)) == pop_answer(
        acked, AckedPop(outcomes, before)
    )


def test_the_header_says_what_the_objects_said() -> None:
    popped = _broker_answer()
    data = received_response_wire(popped, GLOBAL_IDS)
    batch = received_from_wire(data)
    assert batch is not None
    before = _proxy_read_before(pop_response_wire(popped))
    assert len(batch) == len(popped)
    assert batch.receipt_handles() == [m.receipt_handle for m in popped]
    assert batch.stored_bytes + len(batch) * MESSAGE_OVERHEAD_BYTES == globalize(
        before, lambda local: local
    )
    # The generated class reads the same answer: no `messages`, the received fields set.
    parsed = pb.PopResponse.FromString(data)
    assert not parsed.messages
    assert parsed.received_count == len(popped)
    assert list(parsed.received_handles.handles) == [m.receipt_handle for m in popped]
    assert parsed.received == batch.wire()
    # A field after `received` (a later release's, unknown here) leaves the same deliveries.
    later = received_from_wire(data + b"\x30\x01")
    assert later is not None and later.wire() == batch.wire() and len(later) == len(batch)
    # ReceivedBatch.of, what a proxy builds from a broker of an earlier release's objects.
    made = ReceivedBatch.of(popped, GLOBAL_IDS)
    assert (made.wire(), made.receipt_handles(), made.count, made.stored_bytes) == (
        batch.wire(),
        batch.receipt_handles(),
        batch.count,
        batch.stored_bytes,
    )


def test_answers_of_several_brokers_join_as_their_messages_together() -> None:
    first, second = _broker_answer(), _broker_answer(first=10)
    joined = received_from_wire(received_response_wire(first, GLOBAL_IDS))
    other = received_from_wire(received_response_wire(second, (0, 1, 2)))
    assert joined is not None and other is not None
    joined.extend(other)
    objects = _proxy_read_before(pop_response_wire(first)) + popped_from_wire(
        pop_response_wire(second)
    )
    assert joined.wire() == received_messages_wire(objects)
    assert len(joined) == len(objects)
    assert joined.receipt_handles() == [m.receipt_handle for m in objects]
    carried = joined.handles_only()
    assert carried.wire() == b"" and carried.receipt_handles() == joined.receipt_handles()


def test_an_answer_in_the_objects_form_is_told_apart() -> None:
    """A broker of an earlier release ignores received_form and answers `messages`: the
    proxy reads those the old way (None here). Nothing popped is empty in both forms."""
    assert received_from_wire(pop_response_wire(_broker_answer())) is None
    assert received_response_wire([], GLOBAL_IDS) == b""
    empty = received_from_wire(b"")
    assert empty is not None and len(empty) == 0 and empty.wire() == b""
    assert empty.receipt_handles() == []


def test_a_malformed_received_answer_is_refused() -> None:
    data = received_response_wire(_broker_answer(), GLOBAL_IDS)
    with pytest.raises(ValueError, match="runs past the end"):
        received_from_wire(data[:-1])
    count_only = pb.PopResponse(received_count=3).SerializeToString()
    with pytest.raises(ValueError, match="counts 3 deliveries in 0 bytes"):
        received_from_wire(count_only)


@pytest.mark.parametrize("ids", [(), (0,), (4, 5, 9), (2**31 - 1, 0, 300)])
def test_the_form_appended_to_a_request_sets_its_received_form(ids: tuple[int, ...]) -> None:
    request = pb.PopRequest(group="g", topic="orders", max_messages=32, wait_s=0.0)
    data = request.SerializeToString() + received_form_wire(ids)
    parsed = pb.PopRequest.FromString(data)
    assert parsed.HasField("received_form")
    assert tuple(parsed.received_form.queue_ids) == ids
    parsed.ClearField("received_form")
    assert parsed == request
