"""The SDK checks sends with the server's rules and the server's words.

Each bad input of the table goes through ``popmq.sdk._validation`` and
``popmq.broker_core.validation``; both must refuse it with the same message (and both must
accept the good inputs). The SDK does not import broker_core; only this test puts the two
side by side.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from popmq.broker_core import validation as server
from popmq.broker_core.errors import InvalidArgumentError as ServerInvalidArgument
from popmq.sdk import _validation as client
from popmq.sdk.errors import InvalidArgumentError as ClientInvalidArgument

GOOD: dict[str, Any] = {
    "body": b"x",
    "tag": "TagA",
    "keys": ("order-1",),
    "properties": {"region": "eu"},
    "message_id": "01ABC",
}

BAD_MESSAGES: dict[str, dict[str, Any]] = {
    "empty body": {"body": b""},
    "body over 4 MiB - 64 KiB": {"body": b"x" * (4 * 1024 * 1024 - 64 * 1024 + 1)},
    "tag with a bar": {"tag": "A|B"},
    "blank tag": {"tag": "  "},
    "tag with a control character": {"tag": "A\nB"},
    "tag too long": {"tag": "t" * 128},
    "too many keys": {"keys": tuple(f"k{n}" for n in range(33))},
    "blank key": {"keys": (" ",)},
    "key with a control character": {"keys": ("a\tb",)},
    "key too long": {"keys": ("k" * 128,)},
    "too many properties": {"properties": {f"p{n}": "v" for n in range(129)}},
    "empty property name": {"properties": {"": "v"}},
    "blank property name": {"properties": {" ": "v"}},
    "property name with a control character": {"properties": {"a\x00": "v"}},
    "properties over 16 KiB": {"properties": {"big": "v" * (16 * 1024)}},
    "message id too long": {"message_id": "m" * 129},
    "message id with a control character": {"message_id": "m\x7f"},
}

EXTRAS: dict[str, Any] = {
    "message_group": "user-42",
    "dedup_id": "order-7",
    "body_encoding": "zlib",
    "born_host": "web-1",
}

BAD_EXTRAS: dict[str, dict[str, Any]] = {
    "blank message group": {"message_group": "   "},
    "message group too long": {"message_group": "g" * 128},
    "message group with a control character": {"message_group": "g\n1"},
    "dedup id too long": {"dedup_id": "d" * 129},
    "blank dedup id": {"dedup_id": " "},
    "dedup id with a control character": {"dedup_id": "d\x01"},
    "born host too long": {"born_host": "h" * 256},
    "unknown body encoding": {"body_encoding": "gzip"},
}

BAD_NAMES = ["", "t" * 128, "orders!", "has space", "%RETRY%g_t", "%DLQ%g", "rmq_sys_x"]

RANGES: list[tuple[str, float, float, float, str]] = [
    ("max_messages", 0, 1, 32, ""),
    ("max_messages", 33, 1, 32, ""),
    ("invisible_duration", 0.2, 1, 43_200, "s"),
    ("delay_level", 19, 1, 18, ""),
]


def _messages(check: Callable[..., None], error: type[Exception], *args: Any, **kwargs: Any) -> str:
    with pytest.raises(error) as caught:
        check(*args, **kwargs)
    return str(caught.value)


@pytest.mark.parametrize("case", sorted(BAD_MESSAGES))
def test_bad_message_is_refused_with_the_servers_message(case: str) -> None:
    arguments = {**GOOD, **BAD_MESSAGES[case]}

    from_client = _messages(client.check_message, ClientInvalidArgument, 3, **arguments)
    from_server = _messages(server.check_message, ServerInvalidArgument, 3, **arguments)

    assert from_client == from_server
    assert from_client.startswith("messages[3]")


@pytest.mark.parametrize("case", sorted(BAD_EXTRAS))
def test_bad_group_dedup_id_encoding_or_host_is_refused_with_the_servers_message(
    case: str,
) -> None:
    arguments = {**EXTRAS, **BAD_EXTRAS[case]}

    from_client = _messages(client.check_message_extras, ClientInvalidArgument, 1, **arguments)
    from_server = _messages(server.check_message_extras, ServerInvalidArgument, 1, **arguments)

    assert from_client == from_server
    assert from_client.startswith("messages[1]")


def test_good_message_passes_both() -> None:
    for check in (client, server):
        check.check_message(0, **GOOD)
        check.check_message_extras(0, **EXTRAS)
        # The limits themselves are allowed.
        check.check_message(
            0,
            body=b"x" * (4 * 1024 * 1024 - 64 * 1024),
            tag="t" * 127,
            keys=tuple(f"k{n}" for n in range(32)),
            properties={"p": "v" * (16 * 1024 - 1)},
            message_id="m" * 128,
        )
        check.check_message_extras(
            0, message_group="g" * 127, dedup_id="d" * 128, body_encoding="", born_host="h" * 255
        )


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_topic_name_is_refused_with_the_servers_message(name: str) -> None:
    from_client = _messages(client.check_name, ClientInvalidArgument, "topic", name)
    from_server = _messages(server.check_name, ServerInvalidArgument, "topic", name)

    assert from_client == from_server


def test_dead_letter_names_are_allowed_where_the_server_allows_them() -> None:
    client.check_name("topic", "%DLQ%billing", allow_dlq=True)
    server.check_name("topic", "%DLQ%billing", allow_dlq=True)


@pytest.mark.parametrize(("field", "value", "low", "high", "unit"), RANGES)
def test_out_of_range_value_is_refused_with_the_servers_message(
    field: str, value: float, low: float, high: float, unit: str
) -> None:
    from_client = _messages(
        client.check_range, ClientInvalidArgument, field, value, low, high, unit
    )
    from_server = _messages(
        server.check_range, ServerInvalidArgument, field, value, low, high, unit
    )

    assert from_client == from_server


def test_client_limits_equal_the_servers() -> None:
    for name in (
        "MAX_BODY_BYTES",
        "MAX_PROPERTIES",
        "MAX_PROPERTIES_BYTES",
        "MAX_TAG_LENGTH",
        "MAX_KEYS",
        "MAX_KEY_LENGTH",
        "MAX_MESSAGE_ID_LENGTH",
        "MAX_NAME_LENGTH",
        "RESERVED_PREFIXES",
        "MAX_MESSAGE_GROUP_LENGTH",
        "MAX_DEDUP_ID_LENGTH",
        "MAX_BORN_HOST_LENGTH",
        "BODY_ENCODINGS",
    ):
        assert getattr(client, name) == getattr(server, name), name


# -- the client's own checks: schedule and batch size ------------------------------------


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        (
            {"delay_s": 1.0, "delay_level": 3},
            "messages[2] sets delay_s and delay_level: set at most one of deliver_at, "
            "delay_s and delay_level",
        ),
        (
            {"deliver_at": 1e9, "delay_s": 1.0, "delay_level": 3},
            "messages[2] sets deliver_at and delay_s and delay_level",
        ),
        ({"delay_s": -0.5}, "messages[2].delay_s -0.5 is invalid: use 0 or more seconds"),
        ({"delay_s": float("inf")}, "messages[2].delay_s inf is invalid"),
        ({"delay_level": 0}, "messages[2].delay_level 0 is below the minimum 1"),
        ({"delay_level": 19}, "messages[2].delay_level 19 is above the maximum 18"),
        ({"deliver_at": -1.0}, "messages[2].deliver_at -1.0 is not a time"),
        ({"deliver_at": float("nan")}, "messages[2].deliver_at nan is not a time"),
        ({"deliver_at": datetime(2030, 1, 1)}, "has no time zone: use an aware datetime"),
    ],
)
def test_bad_schedule_is_refused_before_sending(schedule: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"deliver_at": None, "delay_s": None, "delay_level": None}
    arguments.update(schedule)

    with pytest.raises(ClientInvalidArgument) as caught:
        client.check_schedule(2, **arguments)

    assert message in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_batch_over_4_mib_as_sent_is_refused() -> None:
    client.check_batch_size(4 * 1024 * 1024)
    with pytest.raises(ClientInvalidArgument, match=r"4194305 bytes .* at most 4194304"):
        client.check_batch_size(4 * 1024 * 1024 + 1)


def test_batch_over_1024_messages_is_refused_like_the_server_does() -> None:
    client.check_batch_size(1, 1024)
    with pytest.raises(ClientInvalidArgument, match=r"1025 messages: at most 1024"):
        client.check_batch_size(1, 1025)
    server.check_send_size(1024, 1)
    with pytest.raises(ServerInvalidArgument, match=r"1025 messages: at most 1024"):
        server.check_send_size(1025, 1)
