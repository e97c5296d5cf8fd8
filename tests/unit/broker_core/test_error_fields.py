"""Structured fields on broker errors: each core check names its field, the value given
(bounded) and what is allowed, and the message keeps saying the true limit."""

from __future__ import annotations

import pytest

from popmq.broker_core import validation
from popmq.broker_core.errors import (
    MAX_VALUE_CHARS,
    InvalidArgumentError,
    NotFoundError,
    PopMQError,
)
from popmq.broker_core.filters import parse_filter


def _message(**overrides: object) -> None:
    args: dict[str, object] = {
        "body": b"x",
        "tag": "",
        "keys": (),
        "properties": {},
        "message_id": "m1",
    }
    args.update(overrides)
    validation.check_message(0, **args)  # type: ignore[arg-type]


def test_fields_default_to_none_so_every_existing_raise_keeps_working() -> None:
    error = NotFoundError("topic 'x' does not exist")
    assert (error.field, error.value, error.allowed) == (None, None, None)
    assert str(error) == "topic 'x' does not exist"
    assert error.code == "NOT_FOUND" and not error.retriable


def test_fields_are_keyword_only_and_the_message_stays_the_text() -> None:
    error = InvalidArgumentError("queues 0 is below the minimum 1", field="queues", value=0)
    assert str(error) == "queues 0 is below the minimum 1"
    assert error.args == ("queues 0 is below the minimum 1",)
    assert (error.field, error.value) == ("queues", "0")


def test_a_huge_value_never_lands_in_an_error() -> None:
    body = b"x" * (5 * 1024 * 1024)
    with pytest.raises(InvalidArgumentError) as info:
        _message(body=body)
    assert info.value.value == f"{len(body)} B"
    assert info.value.allowed == "1 B..4,128,768 B"
    long_tag = "t" * 4 * 1024 * 1024
    with pytest.raises(InvalidArgumentError) as info:
        _message(tag=long_tag)
    assert info.value.value is not None and len(info.value.value) <= MAX_VALUE_CHARS
    assert len(str(info.value)) < 200


def test_body_errors_say_the_true_limit() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        _message(body=b"x" * (validation.MAX_BODY_BYTES + 1))
    assert "at most 4128768 (4 MiB - 64 KiB)" in str(info.value)
    with pytest.raises(InvalidArgumentError) as info:
        _message(body=b"")
    assert (info.value.field, info.value.value) == ("message.body", "0 B")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"tag": "a|b"}, "message.tag"),
        ({"tag": "t" * 128}, "message.tag"),
        ({"keys": [" "]}, "message.keys"),
        ({"keys": [f"k{i}" for i in range(33)]}, "message.keys"),
        ({"properties": {f"p{i}": "v" for i in range(129)}}, "message.properties"),
        ({"properties": {"k": "v" * 16 * 1024}}, "message.properties"),
        ({"properties": {" ": "v"}}, "message.properties.name"),
        ({"message_id": "m" * 129}, "message.message_id"),
    ],
)
def test_each_message_check_names_its_field(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        _message(**overrides)
    assert info.value.field == field
    assert info.value.allowed


def test_an_empty_message_id_is_refused_only_where_clients_always_send_one() -> None:
    _message(message_id="")  # the broker assigns one
    with pytest.raises(InvalidArgumentError) as info:
        _message(message_id="", require_message_id=True)
    assert info.value.field == "message.message_id"
    assert str(info.value) == "messages[0].message_id is invalid: 1 to 128 printable characters"


@pytest.mark.parametrize(
    ("check", "field", "allowed"),
    [
        (lambda: validation.check_name("topic", "bad name!"), "topic", None),
        (lambda: validation.check_name("group", ""), "group", None),
        (lambda: validation.check_batch_size(0, 32), "batch_size", "1..32"),
        (lambda: validation.check_batch_size(33, 32), "batch_size", "1..32"),
        (lambda: validation.check_invisible(0.2, 1, 43200), "invisible_duration", "1s..43200s"),
        (lambda: validation.check_queue_id("orders", 4, 4), "queue_id", "0..3"),
        (lambda: validation.check_offset("orders", 0, 11, 10), "offset", "0..10"),
        (lambda: validation.check_count("messages", 1025, 1024), "messages", None),
        (
            lambda: validation.check_delivery_time(0, 10**13, 0, 86400),
            "message.delivery_timestamp",
            None,
        ),
        (lambda: parse_filter("a || ", "tag"), "filter_expression", None),
        (lambda: parse_filter("x" * 5000, "tag"), "filter_expression", None),
        (lambda: parse_filter("a >", "sql"), "filter_expression", None),
        (lambda: parse_filter("x" * 5000, "sql"), "filter_expression", None),
    ],
)
def test_core_checks_name_their_field(check: object, field: str, allowed: str | None) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        check()  # type: ignore[operator]
    assert info.value.field == field
    assert info.value.value is not None
    if allowed is not None:
        assert info.value.allowed == allowed


def test_invisible_message_names_the_allowed_range() -> None:
    with pytest.raises(PopMQError) as info:
        validation.check_invisible(0.2, 1, 43200)
    assert str(info.value) == "invisible_duration 0.2s is below the minimum 1s"
    assert info.value.value == "0.2"
