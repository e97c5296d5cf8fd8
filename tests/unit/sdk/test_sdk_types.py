"""Dataclass <-> proto conversions and request building of the SDK (no server)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from google.protobuf import duration_pb2

from popmq import sdk
from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from popmq.sdk.admin_requests import build_create_group_request, build_create_topic_request
from popmq.sdk.admin_types import Group, QueueLag, Topic, TopicDescription
from popmq.sdk.consumer import build_nack_request, build_pop_request
from popmq.sdk.producer import build_send_request
from popmq.sdk.types import (
    Message,
    ReceivedMessage,
    SendReceipt,
    duration_from_seconds,
    seconds_from_duration,
)

BORN = datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
STORED = datetime(2025, 1, 2, 3, 4, 6, tzinfo=UTC)
INVISIBLE_UNTIL = datetime(2025, 1, 2, 3, 4, 36, tzinfo=UTC)


def test_public_names_are_sorted() -> None:
    # The exact set is pinned once, in tests/unit/test_public_names.py.
    assert sdk.__all__ == sorted(sdk.__all__)


def test_message_converts_to_outgoing_message_for_its_topic() -> None:
    message = Message(
        b"body", tag="TagA", keys=["k1", "k2"], properties={"region": "eu"}, message_id="m-1"
    )

    wire = message.to_proto("orders")

    assert wire == messaging_pb2.OutgoingMessage(
        topic="orders",
        body=b"body",
        tag="TagA",
        keys=["k1", "k2"],
        properties={"region": "eu"},
        message_id="m-1",
    )


def test_message_copies_callers_containers_so_later_changes_do_not_leak_in() -> None:
    keys = ["k1"]
    properties = {"a": "1"}
    message = Message(b"x", keys=keys, properties=properties)

    keys.append("k2")
    properties["b"] = "2"

    assert message.keys == ("k1",)
    assert message.properties == {"a": "1"}


def test_message_defaults_leave_optional_fields_empty() -> None:
    wire = Message(b"x").to_proto("t")

    assert (wire.tag, list(wire.keys), dict(wire.properties), wire.message_id) == ("", [], {}, "")


def test_message_accepts_bytearray_body_as_bytes() -> None:
    assert Message(bytearray(b"ab")).body == b"ab"  # type: ignore[arg-type]


def test_message_rejects_a_str_body() -> None:
    with pytest.raises(TypeError, match="body must be bytes"):
        Message("text")  # type: ignore[arg-type]


def test_message_rejects_a_single_string_as_keys() -> None:
    with pytest.raises(TypeError, match="keys"):
        Message(b"x", keys="k1")


def test_message_is_immutable() -> None:
    message = Message(b"x")

    with pytest.raises(AttributeError):
        message.tag = "T"  # type: ignore[misc]


def test_send_receipt_is_built_from_send_result() -> None:
    result = messaging_pb2.SendResult(message_id="m", topic="orders", queue_id=3, offset=41)

    assert SendReceipt.from_proto(result) == SendReceipt("m", "orders", 3, 41)


def test_send_request_carries_every_message_in_order() -> None:
    request = build_send_request("orders", [Message(b"a"), Message(b"b", tag="TagB")])

    assert [(m.topic, m.body, m.tag) for m in request.messages] == [
        ("orders", b"a", ""),
        ("orders", b"b", "TagB"),
    ]


def _received_proto() -> messaging_pb2.ReceivedMessage:
    return messaging_pb2.ReceivedMessage(
        message_id="m-1",
        topic="orders",
        queue_id=2,
        offset=7,
        body=b"\x00payload",
        tag="TagA",
        keys=["k1", "k2"],
        properties={"region": "eu"},
        born_time=BORN,
        store_time=STORED,
        delivery_attempt=3,
        receipt_handle="rh-1",
        invisible_until=INVISIBLE_UNTIL,
    )


def test_received_message_is_built_from_pop_response_entry() -> None:
    message = ReceivedMessage.from_proto(_received_proto())

    assert message == ReceivedMessage(
        message_id="m-1",
        topic="orders",
        queue_id=2,
        offset=7,
        body=b"\x00payload",
        tag="TagA",
        keys=("k1", "k2"),
        properties={"region": "eu"},
        born_timestamp=BORN,
        store_timestamp=STORED,
        delivery_attempt=3,
        receipt_handle="rh-1",
        invisible_until=INVISIBLE_UNTIL,
    )


def test_received_message_timestamps_are_utc_aware() -> None:
    message = ReceivedMessage.from_proto(_received_proto())

    for value in (message.born_timestamp, message.store_timestamp, message.invisible_until):
        assert value.tzinfo is not None
        assert value.utcoffset() is not None
        assert value.utcoffset().total_seconds() == 0  # type: ignore[union-attr]


def test_received_message_round_trips_through_proto() -> None:
    wire = _received_proto()

    assert ReceivedMessage.from_proto(wire).to_proto() == wire


def test_received_message_receipt_handle_can_be_replaced_in_place() -> None:
    message = ReceivedMessage.from_proto(_received_proto())

    message.receipt_handle = "rh-2"

    assert message.receipt_handle == "rh-2"


def test_topic_is_built_with_enum_names_without_prefix() -> None:
    wire = admin_pb2.Topic(
        name="%DLQ%billing",
        queues=1,
        message_type=admin_pb2.MESSAGE_TYPE_NORMAL,
        kind=admin_pb2.TOPIC_KIND_DLQ,
        create_time=BORN,
    )

    assert Topic.from_proto(wire) == Topic("%DLQ%billing", 1, "normal", "dlq", BORN)


def test_topic_with_unspecified_message_type_reads_as_normal() -> None:
    wire = admin_pb2.Topic(name="orders", queues=8, kind=admin_pb2.TOPIC_KIND_NORMAL)

    assert Topic.from_proto(wire).message_type == "normal"


def test_topic_kind_unknown_to_this_client_keeps_its_number() -> None:
    wire = admin_pb2.Topic(name="orders", queues=8)
    wire.kind = 99  # type: ignore[assignment]

    assert Topic.from_proto(wire).kind == "99"


def test_topic_description_lists_queue_stats_by_queue() -> None:
    response = admin_pb2.GetTopicResponse(
        topic=admin_pb2.Topic(name="orders", queues=2, kind=admin_pb2.TOPIC_KIND_NORMAL),
        queues=[
            admin_pb2.QueueStats(queue_id=0, min_offset=0, max_offset=5),
            admin_pb2.QueueStats(queue_id=1, min_offset=2, max_offset=9),
        ],
    )

    description = TopicDescription.from_proto(response)

    assert description.topic.name == "orders"
    assert description.queues == [sdk.QueueStats(0, 0, 5), sdk.QueueStats(1, 2, 9)]


def test_group_retry_backoff_is_in_float_seconds() -> None:
    wire = admin_pb2.Group(
        name="billing",
        max_delivery_attempts=17,
        retry_backoff=[duration_pb2.Duration(seconds=1), duration_pb2.Duration(nanos=500_000_000)],
        create_time=BORN,
        auto_created=True,
    )

    assert Group.from_proto(wire) == Group("billing", 17, (1.0, 0.5), BORN, True)


def test_queue_lag_is_built_from_proto() -> None:
    wire = admin_pb2.QueueLag(
        topic="orders",
        queue_id=0,
        retry=True,
        consumer_offset=3,
        max_offset=10,
        lag=7,
        inflight=2,
    )

    assert QueueLag.from_proto(wire) == QueueLag("orders", 0, True, 3, 10, 7, 2)


@pytest.mark.parametrize("seconds", [0.0, 1.0, 0.2, 30.5, 43200.0, 1e-9])
def test_duration_round_trips_float_seconds(seconds: float) -> None:
    assert math.isclose(
        seconds_from_duration(duration_from_seconds(seconds)), seconds, abs_tol=1e-9
    )


def test_duration_splits_seconds_and_nanos() -> None:
    assert duration_from_seconds(1.25) == duration_pb2.Duration(seconds=1, nanos=250_000_000)


@pytest.mark.parametrize("seconds", [math.nan, math.inf, -math.inf])
def test_duration_rejects_non_finite_seconds(seconds: float) -> None:
    with pytest.raises(sdk.InvalidArgumentError, match="wait_s"):
        duration_from_seconds(seconds, name="wait_s")


def test_pop_request_with_defaults_sets_the_optional_fields() -> None:
    request = build_pop_request("billing", "orders")

    assert request.group == "billing"
    assert request.topic == "orders"
    assert request.HasField("max_messages")
    assert request.max_messages == 32
    assert request.HasField("invisible_duration")
    assert request.invisible_duration == duration_pb2.Duration(seconds=30)
    assert request.HasField("long_polling_timeout")
    assert request.long_polling_timeout == duration_pb2.Duration(seconds=20)
    assert request.filter == messaging_pb2.FilterExpression(
        type=messaging_pb2.FILTER_TYPE_TAG, expression="*"
    )


def test_pop_request_with_none_leaves_fields_to_the_server() -> None:
    request = build_pop_request(
        "billing", "orders", max_messages=None, invisible_duration_s=None, wait_s=None
    )

    assert not request.HasField("max_messages")
    assert not request.HasField("invisible_duration")
    assert not request.HasField("long_polling_timeout")


def test_pop_request_carries_the_tag_filter_and_given_values() -> None:
    request = build_pop_request(
        "g", "t", filter="TagA || TagB", max_messages=5, invisible_duration_s=0.5, wait_s=0
    )

    assert request.filter.expression == "TagA || TagB"
    assert request.max_messages == 5
    assert request.invisible_duration == duration_pb2.Duration(nanos=500_000_000)
    assert request.HasField("long_polling_timeout")
    assert request.long_polling_timeout == duration_pb2.Duration()


def test_nack_without_delay_leaves_delay_unset_for_group_backoff() -> None:
    assert not build_nack_request("g", "rh", None).HasField("delay")


def test_nack_with_delay_sets_it() -> None:
    request = build_nack_request("g", "rh", 5)

    assert request.delay == duration_pb2.Duration(seconds=5)
    assert (request.group, request.receipt_handle) == ("g", "rh")


def test_create_topic_request_sets_queues_only_when_given() -> None:
    assert not build_create_topic_request("orders", None).HasField("queues")
    given = build_create_topic_request("orders", 4)
    assert given.HasField("queues")
    assert given.queues == 4


def test_create_group_request_without_settings_leaves_server_defaults() -> None:
    request = build_create_group_request("billing", None, None)

    assert not request.HasField("max_delivery_attempts")
    assert list(request.retry_backoff) == []


def test_create_group_request_carries_attempts_and_backoff() -> None:
    request = build_create_group_request("billing", 17, [1, 2.5])

    assert request.HasField("max_delivery_attempts")
    assert request.max_delivery_attempts == 17
    assert list(request.retry_backoff) == [
        duration_pb2.Duration(seconds=1),
        duration_pb2.Duration(seconds=2, nanos=500_000_000),
    ]
