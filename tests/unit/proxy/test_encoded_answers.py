"""Answers written as bytes (messaging.ENCODED_ANSWERS) parse as the messages the proxy
would build field by field."""

from __future__ import annotations

from popmq._gen.popmq.store.v1 import records_pb2
from popmq._gen.popmq.v1 import messaging_pb2
from popmq.broker_core import (
    InvalidReceiptHandleError,
    MessageRecord,
    NotFoundError,
    PopMQError,
    PoppedMessage,
    SendResult,
    received_message_wire,
    received_messages_wire,
)
from popmq.proxy import convert
from popmq.proxy.pop_stream import AckedPop, ack_answer, pop_answer
from popmq.proxy.send_stream import send_answer


def _result_message(result: SendResult) -> messaging_pb2.SendResult:
    return messaging_pb2.SendResult(
        message_id=result.message_id,
        topic=result.topic,
        queue_id=result.queue_id,
        offset=result.offset,
        recall_handle=result.recall_handle,
        duplicate=result.duplicate,
        transaction_id=result.transaction_id,
    )


def test_send_results_cross_as_the_objects_carry_them() -> None:
    results = [
        SendResult("01AB", "orders", 3, 1234),
        SendResult("01AC", "orders", 0, 0, duplicate=True),
        SendResult("01AD", "délais", 5, -1, "broker-a.recall"),  # a delayed message
        SendResult("01AE", "orders", 1, 7, transaction_id="tx-1"),
        SendResult("01AF", "orders", 2**31 - 1, 2**62),
    ]
    expected = messaging_pb2.SendMessagesResponse(results=[_result_message(r) for r in results])
    wire = send_answer(results)
    assert messaging_pb2.SendMessagesResponse.FromString(wire) == expected
    assert len(wire) == expected.ByteSize()
    assert send_answer([]) == b""


def _popped(offset: int) -> PoppedMessage:
    record = records_pb2.StoredMessage(
        message_id=f"id-{offset}", body=b"body", born_time_ms=1000, store_time_ms=2000,
        delivery_attempt=1,
    )  # fmt: skip
    data = record.SerializeToString()
    return PoppedMessage(
        "orders", 1, offset, MessageRecord(record, data), f"handle-{offset}", 30_000
    )


def test_a_pop_that_carried_acks_answers_both() -> None:
    request = messaging_pb2.PopRequest(group="g", topic="orders", ack_receipt_handles=["a", "b"])
    popped = [_popped(5), _popped(6)]
    result = AckedPop([None, NotFoundError("no longer in flight")], popped)
    expected = messaging_pb2.PopResponse()
    convert.received_messages(expected.messages, popped)
    expected.ack_results.add(receipt_handle="a", code="OK")
    expected.ack_results.add(receipt_handle="b", code="NOT_FOUND", message="no longer in flight")
    assert messaging_pb2.PopResponse.FromString(pop_answer(request, result)) == expected
    plain = messaging_pb2.PopResponse.FromString(pop_answer(request, popped))
    assert list(plain.messages) == list(expected.messages)
    assert not plain.ack_results


def test_ack_results_cross_as_the_objects_carry_them() -> None:
    handles = ["broker-a.AAAA", "", "ünïcode", "h" * 300]
    outcomes: list[PopMQError | None] = [
        None,
        InvalidReceiptHandleError("receipt handle is empty"),
        NotFoundError("é" * 200),  # a length that needs a two-byte varint
        None,
    ]
    expected = messaging_pb2.AckResponse()
    for handle, error in zip(handles, outcomes, strict=True):
        if error is None:
            expected.results.add(receipt_handle=handle, code="OK")
        else:
            expected.results.add(receipt_handle=handle, code=error.code, message=str(error))
    wire = ack_answer(handles, outcomes)
    assert messaging_pb2.AckResponse.FromString(wire) == expected
    assert wire == expected.SerializeToString()
    assert ack_answer([], []) == b""


def test_an_answer_of_many_queues_topics_and_deadlines_crosses_whole() -> None:
    """What messages share is encoded once and reused only while it stays the same: an
    answer whose topic, queue, invisible-until and handle length change from message to
    message (queue 0 and offset 0 included) is each message's own delivery, in order."""
    popped = []
    for i, (topic, queue_id, until) in enumerate(
        [("orders", 1, 30_000), ("orders", 1, 30_000), ("orders", 0, 30_000),
         ("délais", 0, 30_000), ("délais", 2, 45_001), ("orders", 2, 45_001),
         ("orders", 2, 30_000)]
    ):  # fmt: skip
        record = records_pb2.StoredMessage(
            message_id=f"id-{i}", body=b"b" * i, born_time_ms=1000 + i, store_time_ms=2000,
            delivery_attempt=i,
        )  # fmt: skip
        data = record.SerializeToString()
        handle = "broker-a." + "h" * (300 if i == 4 else i)  # one handle over 255 bytes
        popped.append(PoppedMessage(topic, queue_id, i, MessageRecord(record, data), handle, until))
    expected = messaging_pb2.PopResponse()
    convert.received_messages(expected.messages, popped)
    wire = received_messages_wire(popped)
    assert messaging_pb2.PopResponse.FromString(wire) == expected
    one_by_one = b"".join(
        received_message_wire(
            m.record.to_bytes(),
            field_tag=b"\x0a",
            topic=m.topic.encode(),
            queue_id=m.queue_id,
            offset=m.offset,
            receipt_handle=m.receipt_handle,
            invisible_until_ms=m.invisible_until_ms,
        )
        for m in popped
    )
    assert wire == one_by_one
    assert len(wire) == expected.ByteSize()
    assert received_messages_wire([]) == b""
