"""The SDK's hand-written conversions give what the generic ones gave.

``datetime_from_timestamp`` reuses recent results and computes the rest itself instead of
calling ``Timestamp.ToDatetime``; ``Message`` has its own ``__init__``; ``to_proto`` can fill
a message of a request in place. Each must stay indistinguishable from the plain version.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from popmq import Message
from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk.types import datetime_from_timestamp

EDGES = [
    (0, 0),
    (0, 999_999_999),
    (-1, 999_999_999),
    (1_700_000_000, 123_456_789),
    (1_700_000_000, 123_456_999),  # same microsecond as the one before
    (-62_135_596_800, 0),  # 0001-01-01, the smallest valid timestamp
    (253_402_300_799, 999_999_999),  # 9999-12-31T23:59:59.999999999, the largest
]


@pytest.mark.parametrize(("seconds", "nanos"), EDGES)
def test_timestamp_converts_as_protobuf_converts_it(seconds: int, nanos: int) -> None:
    timestamp = Timestamp(seconds=seconds, nanos=nanos)

    for _ in range(2):  # computed, then reused
        converted = datetime_from_timestamp(timestamp)
        assert converted == timestamp.ToDatetime(tzinfo=UTC)
        assert converted.tzinfo is UTC


def test_many_timestamps_convert_as_protobuf_converts_them() -> None:
    rng = random.Random(7)
    for _ in range(5000):  # more than the reuse table holds
        timestamp = Timestamp(
            seconds=rng.randrange(-(10**10), 10**10), nanos=rng.randrange(1_000_000_000)
        )
        assert datetime_from_timestamp(timestamp) == timestamp.ToDatetime(tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "nanos", "neighbour"),
    [
        # Converted first, the neighbour must not answer for the invalid value (same key).
        (0, 1_000_000_000, (1, 0)),
        (0, -1, (-1, 999_999_999)),
        (253_402_300_800, 0, (253_402_300_799, 0)),
        (-62_135_596_801, 0, (-62_135_596_800, 0)),
    ],
)
def test_invalid_timestamp_is_refused_as_protobuf_refuses_it(
    seconds: int, nanos: int, neighbour: tuple[int, int]
) -> None:
    datetime_from_timestamp(Timestamp(seconds=neighbour[0], nanos=neighbour[1]))
    timestamp = Timestamp(seconds=seconds, nanos=nanos)

    with pytest.raises(ValueError) as expected:
        timestamp.ToDatetime(tzinfo=UTC)
    with pytest.raises(ValueError) as caught:
        datetime_from_timestamp(timestamp)

    assert str(caught.value) == str(expected.value)


def test_unset_timestamp_is_the_epoch() -> None:
    assert datetime_from_timestamp(Timestamp()) == datetime(1970, 1, 1, tzinfo=UTC)


def test_message_filled_in_place_equals_a_new_one() -> None:
    messages = [
        Message(b"plain"),
        Message(
            b"full",
            tag="T",
            keys=["k"],
            properties={"p": "v"},
            message_id="m",
            message_group="g",
            dedup_id="d",
        ),
        Message(b"later", delay_s=1.5),
        Message(b"level", delay_level=3),
        Message(b"at", deliver_at=datetime(2030, 1, 1, tzinfo=UTC) + timedelta(microseconds=7)),
        Message(b"epoch", deliver_at=1_900_000_000.25),
    ]
    request = messaging_pb2.SendMessagesRequest()

    for message in messages:
        filled = message.to_proto("orders", into=request.messages.add())
        assert filled == message.to_proto("orders")

    assert len(request.messages) == len(messages)
    assert request.messages[1].properties["p"] == "v"


def test_each_message_gets_its_own_properties_dict() -> None:
    first, second = Message(b"a"), Message(b"b")

    first.properties["x"] = "1"  # type: ignore[index]

    assert second.properties == {}
    assert Message(b"c").properties == {}


def test_message_fields_are_set_positionally_and_by_name_alike() -> None:
    by_position = Message(b"x", "T", ["k"], {"p": "v"}, "m", "g", None, 2.0, None, "d")
    by_name = Message(
        b"x", tag="T", keys=("k",), properties={"p": "v"}, message_id="m", message_group="g",
        delay_s=2.0, dedup_id="d",
    )  # fmt: skip

    assert by_position == by_name
    assert by_name.keys == ("k",)
