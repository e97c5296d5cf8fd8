"""The v2 front end's Code for a core argument error comes from its field, through one
table (proxy/rocketmq/codes.py FIELD_CODES), not from copies of core's rules."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq.broker_core import validation
from popmq.broker_core.errors import InvalidArgumentError, NotFoundError, PopMQError
from popmq.broker_core.filters import parse_filter
from popmq.proxy.rocketmq import codes

Code = pb.Code


def _message(**overrides: object) -> Callable[[], None]:
    args: dict[str, object] = {
        "body": b"x",
        "tag": "",
        "keys": (),
        "properties": {},
        "message_id": "m1",
        "require_message_id": True,
    }
    args.update(overrides)
    return lambda: validation.check_message(0, **args)  # type: ignore[arg-type]


CASES: list[tuple[str, Callable[[], None], int]] = [
    ("topic", lambda: validation.check_name("topic", "bad topic!"), Code.ILLEGAL_TOPIC),
    ("topic prefix", lambda: validation.check_name("topic", "%RETRY%x"), Code.ILLEGAL_TOPIC),
    ("group", lambda: validation.check_name("group", ""), Code.ILLEGAL_CONSUMER_GROUP),
    ("tag filter", lambda: parse_filter("A||", "tag"), Code.ILLEGAL_FILTER_EXPRESSION),
    ("long filter", lambda: parse_filter("A" * 4097, "tag"), Code.ILLEGAL_FILTER_EXPRESSION),
    ("sql filter", lambda: parse_filter("a >", "sql"), Code.ILLEGAL_FILTER_EXPRESSION),
    ("long sql", lambda: parse_filter("a" * 4097, "sql"), Code.ILLEGAL_FILTER_EXPRESSION),
    (
        "invisible",
        lambda: validation.check_invisible(0.5, 1, 43200),
        Code.ILLEGAL_INVISIBLE_TIME,
    ),
    ("offset", lambda: validation.check_offset("t", 0, 5, 4), Code.ILLEGAL_OFFSET),
    ("queue id", lambda: validation.check_queue_id("t", 4, 7), Code.BAD_REQUEST),
    ("batch size", lambda: validation.check_batch_size(0, 32), Code.BAD_REQUEST),
    ("messages", lambda: validation.check_count("messages", 2000, 1024), Code.BAD_REQUEST),
    ("empty body", _message(body=b""), Code.MESSAGE_BODY_EMPTY),
    ("large body", _message(body=b"x" * 4_200_000), Code.MESSAGE_BODY_TOO_LARGE),
    ("tag", _message(tag="a|b"), Code.ILLEGAL_MESSAGE_TAG),
    ("empty tag", lambda: validation.check_tag(0, ""), Code.ILLEGAL_MESSAGE_TAG),
    ("key", _message(keys=(" ",)), Code.ILLEGAL_MESSAGE_KEY),
    ("property name", _message(properties={" ": "v"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (
        "properties",
        _message(properties={"k": "v" * 16384}),
        Code.MESSAGE_PROPERTIES_TOO_LARGE,
    ),
    ("message id", _message(message_id=""), Code.ILLEGAL_MESSAGE_ID),
    (
        "delivery time",
        lambda: validation.check_delivery_time(0, 10**13, 0, 86400),
        Code.ILLEGAL_DELIVERY_TIME,
    ),
    (
        "message group",
        lambda: validation.check_message_extras(
            0, message_group=" ", dedup_id="", body_encoding="", born_host=""
        ),
        Code.ILLEGAL_MESSAGE_GROUP,
    ),
]


@pytest.mark.parametrize(("name", "check", "code"), CASES, ids=[c[0] for c in CASES])
def test_each_core_field_maps_to_its_v2_code(
    name: str, check: Callable[[], None], code: int
) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        check()
    assert info.value.field is not None, name
    assert codes.code_of(info.value) == code, (info.value.field, info.value.value)
    status = codes.status_of(info.value)
    assert status.message == str(info.value)


def test_every_field_of_the_table_is_raised_by_some_core_check() -> None:
    raised = set()
    for _, check, _ in CASES:
        with pytest.raises(InvalidArgumentError) as info:
            check()
        raised.add(info.value.field)
    raised.add("filter_type")  # parse_filter with an unknown type: v2 refuses before it
    assert set(codes.FIELD_CODES) <= raised


def test_errors_without_a_field_keep_their_class_code() -> None:
    assert codes.code_of(InvalidArgumentError("bad")) == Code.BAD_REQUEST
    assert codes.code_of(NotFoundError("no topic"), codes.TOPIC) == Code.TOPIC_NOT_FOUND
    assert codes.code_of(PopMQError("bug")) == Code.INTERNAL_SERVER_ERROR


def test_an_unknown_field_falls_back_to_the_class_code() -> None:
    error = InvalidArgumentError("limit 0 is below the minimum 1", field="limit", value=0)
    assert codes.code_of(error) == Code.BAD_REQUEST


def test_a_protocol_error_keeps_its_own_code() -> None:
    error = codes.ProtocolError(Code.ILLEGAL_POLLING_TIME, "long_polling_timeout is invalid")
    assert codes.code_of(error) == Code.ILLEGAL_POLLING_TIME
