"""Argument rules of popmq.broker_core.validation: exact messages, no clamping."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from popmq.broker_core.config import LongPollingConfig, PopConfig
from popmq.broker_core.errors import InvalidArgumentError
from popmq.broker_core.types import NewMessage
from popmq.broker_core.validation import (
    PopArguments,
    check_message,
    check_name,
    check_pop,
    check_range,
    check_send,
    pop_arguments,
    pop_filter,
)

MiB = 1024 * 1024


def _message(
    *,
    index: int = 0,
    body: bytes = b"x",
    tag: str = "",
    keys: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    message_id: str = "",
) -> None:
    check_message(
        index,
        body=body,
        tag=tag,
        keys=keys,
        properties=properties or {},
        message_id=message_id,
    )


# -- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["a", "orders", "Orders_2024-eu", "with%percent", "x" * 127, "%DLQ", "rmq_sy"]
)
def test_valid_names_are_accepted(name: str) -> None:
    check_name("topic", name)


def test_empty_name_is_rejected_naming_the_allowed_length() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        check_name("topic", "")
    assert str(info.value) == "topic name is empty: use 1 to 127 characters"


def test_name_longer_than_127_characters_is_rejected() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        check_name("group", "g" * 128)
    assert str(info.value) == "group name is 128 characters long: at most 127 are allowed"


@pytest.mark.parametrize("name", ["a b", "a.b", "a/b", "caf\u00e9", "tab\there", "a:b"])
def test_name_with_characters_outside_the_pattern_is_rejected(name: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        check_name("topic", name)
    assert str(info.value) == (
        f"topic name {name!r} is invalid: use only letters, digits, '%', '_' and '-'"
    )


@pytest.mark.parametrize(
    ("name", "prefix"),
    [("%RETRY%g_orders", "%RETRY%"), ("rmq_sys_trace", "rmq_sys_")],
)
@pytest.mark.parametrize("allow_dlq", [False, True])
def test_retry_and_system_prefixes_are_reserved_even_where_dlq_is_allowed(
    name: str, prefix: str, allow_dlq: bool
) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        check_name("topic", name, allow_dlq=allow_dlq)
    assert str(info.value) == f"topic name {name!r} uses the reserved prefix {prefix!r}"


def test_dlq_prefix_is_reserved_unless_allowed() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        check_name("topic", "%DLQ%billing")
    assert str(info.value) == (
        "topic name '%DLQ%billing' uses the reserved prefix '%DLQ%' "
        "(dead-letter topics can only be read)"
    )
    check_name("topic", "%DLQ%billing", allow_dlq=True)


def test_validation_errors_are_invalid_argument_value_errors() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        check_name("topic", "")
    assert info.value.code == "INVALID_ARGUMENT"
    assert info.value.retriable is False
    assert isinstance(info.value, ValueError)


# -- ranges ---------------------------------------------------------------------------------


def test_value_below_range_names_the_minimum() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        check_range("invisible_duration", 0.2, 1, 43200, "s")
    assert str(info.value) == "invisible_duration 0.2s is below the minimum 1s"


def test_value_above_range_names_the_maximum() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        check_range("max_messages", 33, 1, 32)
    assert str(info.value) == "max_messages 33 is above the maximum 32"


@pytest.mark.parametrize("value", [1, 16, 32])
def test_range_bounds_are_inclusive(value: int) -> None:
    check_range("max_messages", value, 1, 32)


@pytest.mark.parametrize("value", [0.999, -1, 32.001, 10**9])
def test_out_of_range_value_is_an_error_never_clamped(value: float) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^max_messages .* is (below|above) the"):
        check_range("max_messages", value, 1, 32)


# -- messages -------------------------------------------------------------------------------


def test_empty_body_is_rejected_with_its_index() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        _message(index=3, body=b"")
    assert str(info.value) == "messages[3].body is empty: a message needs 1 to 4128768 bytes"


def test_body_over_4_mib_less_64_kib_is_rejected() -> None:
    _message(body=b"x" * (4 * MiB - 64 * 1024))
    with pytest.raises(InvalidArgumentError) as info:
        _message(body=b"x" * (4 * MiB - 64 * 1024 + 1))
    assert str(info.value) == (
        "messages[0].body is 4128769 bytes: at most 4128768 (4 MiB - 64 KiB) are allowed"
    )


@pytest.mark.parametrize("tag", ["a|b", "|", "  ", "a\nb", "a\x00"])
def test_tag_with_bar_control_characters_or_blank_is_rejected(tag: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        _message(tag=tag)
    assert str(info.value) == (
        f"messages[0].tag {tag!r} is invalid: no '|', no control characters, not blank"
    )


def test_tag_length_is_limited_to_127_characters() -> None:
    _message(tag="t" * 127)
    with pytest.raises(InvalidArgumentError) as info:
        _message(tag="t" * 128)
    assert str(info.value) == "messages[0].tag is longer than 127 characters"


def test_at_most_32_keys_are_allowed() -> None:
    _message(keys=[f"k{i}" for i in range(32)])
    with pytest.raises(InvalidArgumentError) as info:
        _message(keys=[f"k{i}" for i in range(33)])
    assert str(info.value) == "messages[0] has 33 keys: at most 32 allowed"


@pytest.mark.parametrize("key", ["", " ", "a\tb", "k" * 128])
def test_blank_long_or_control_keys_are_rejected(key: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^messages\[0\] key .* is invalid: 1 to 127"):
        _message(keys=["fine", key])


def test_128_properties_are_accepted_and_129_rejected() -> None:
    _message(properties={f"p{i}": "v" for i in range(128)})
    with pytest.raises(InvalidArgumentError) as info:
        _message(properties={f"p{i}": "v" for i in range(129)})
    assert str(info.value) == "messages[0] has 129 properties: at most 128 are allowed"


def test_properties_of_exactly_16_kib_are_accepted() -> None:
    _message(properties={"k": "v" * (16 * 1024 - 1)})


def test_properties_over_16_kib_are_rejected() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        _message(properties={"k": "v" * (16 * 1024)})
    assert str(info.value) == "messages[0] properties take 16385 bytes: at most 16384 (16 KiB)"


def test_properties_size_counts_utf8_bytes_not_characters() -> None:
    # 1 + 8192 * 2 bytes = 16385, although only 8193 characters.
    with pytest.raises(InvalidArgumentError, match="take 16385 bytes"):
        _message(properties={"k": "\u00e9" * 8192})


@pytest.mark.parametrize("name", ["", "a\nb"])
def test_empty_or_control_property_name_is_rejected(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"property name .* is empty or has controls"):
        _message(properties={name: "v"})


@pytest.mark.parametrize("name", [" ", "\u3000"])
def test_blank_property_name_is_rejected(name: str) -> None:
    # As the v2 front end always refused it: no SQL filter can name such a property.
    with pytest.raises(InvalidArgumentError, match=r"property name .* is blank$"):
        _message(properties={name: "v"})


def test_message_id_is_limited_to_128_printable_characters() -> None:
    _message(message_id="m" * 128)
    for bad in ["m" * 129, "id\n"]:
        with pytest.raises(InvalidArgumentError) as info:
            _message(message_id=bad)
        assert str(info.value) == (
            "messages[0].message_id is invalid: at most 128 printable characters"
        )


# -- a pop's arguments ----------------------------------------------------------------------

_POP = PopConfig(max_batch=16, default_invisible_s=20, min_invisible_s=2, max_invisible_s=60)
_POLL = LongPollingConfig(default_timeout_s=5, max_timeout_s=10)


def test_a_pop_argument_not_given_takes_its_default_and_a_given_one_is_kept() -> None:
    assert pop_arguments(_POP, _POLL) == PopArguments(16, 20, 5)  # 32 capped at max_batch
    assert pop_arguments(PopConfig(), LongPollingConfig()).max_messages == 32
    given = pop_arguments(_POP, _POLL, max_messages=3, invisible_s=2, wait_s=0)
    assert given == PopArguments(3, 2, 0)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"max_messages": 17}, "max_messages 17 is above the maximum 16"),
        ({"invisible_s": 1.5}, "invisible_duration 1.5s is below the minimum 2s"),
        ({"wait_s": 11}, "long_polling_timeout 11s is above the maximum 10s"),
        # In that order: the batch size is named first.
        ({"max_messages": 0, "invisible_s": 0, "wait_s": -1}, "max_messages 0 is below"),
    ],
)
def test_a_pop_argument_out_of_its_limits_is_refused_by_name(
    given: dict[str, float], expected: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=f"^{expected}"):
        pop_arguments(_POP, _POLL, **given)  # type: ignore[arg-type]


def test_a_pops_names_and_answer_bound_are_checked_before_its_arguments() -> None:
    with pytest.raises(InvalidArgumentError, match="group name is empty"):
        check_pop(_POP, _POLL, "", "t", max_messages=0)
    with pytest.raises(InvalidArgumentError, match="reserved prefix '%RETRY%'"):
        check_pop(_POP, _POLL, "g", "%RETRY%x", max_messages=0)
    with pytest.raises(InvalidArgumentError, match="max_bytes -1 is below the minimum 0"):
        check_pop(_POP, _POLL, "g", "t", max_messages=0, max_bytes=-1)
    assert check_pop(_POP, _POLL, "g", "%DLQ%g", max_bytes=0) == PopArguments(16, 20, 5)


class _Declared:
    def subscription_filter(self, group: str, topic: str) -> tuple[str, str] | None:
        return ("sql", "a > 1") if (group, topic) == ("g", "t") else None


@pytest.mark.parametrize(
    ("group", "expression", "kind", "expected"),
    [
        ("g", "", "tag", ("sql", "a > 1")),  # none of its own: the declared one
        ("g", "  ", "tag", ("sql", "a > 1")),
        ("g", "x", "tag", ("tag", "x")),  # its own wins
        ("g", "", "sql", ("sql", "")),  # an (empty) SQL filter is its own
        ("other", "", "tag", ("tag", "")),  # nothing declared: every message
    ],
)
def test_a_pop_without_a_filter_of_its_own_takes_the_groups_declared_one(
    group: str, expression: str, kind: str, expected: tuple[str, str]
) -> None:
    assert pop_filter(_Declared(), group, "t", expression, kind) == expected


# -- a send's messages ----------------------------------------------------------------------


def test_a_send_is_checked_whole_naming_each_message_by_its_index_in_the_send() -> None:
    good = NewMessage("a", b"x")
    check_send([good, NewMessage("b", b"y", deliver_at_ms=1_000 + 5_000)], 1_000, 5)
    with pytest.raises(InvalidArgumentError, match="a send needs at least one message"):
        check_send([], 0, 5)
    with pytest.raises(InvalidArgumentError, match=r"^messages\[1\]\.body is empty"):
        check_send([good, NewMessage("b", b"")], 0, 5)
    with pytest.raises(InvalidArgumentError, match=r"^messages\[2\] is due in 6s"):
        check_send([good, good, NewMessage("b", b"y", deliver_at_ms=6_000)], 0, 5)
    with pytest.raises(InvalidArgumentError, match="topic name 'b c' is invalid"):
        check_send([good, NewMessage("b c", b"y")], 0, 5)
    with pytest.raises(InvalidArgumentError, match="messages has 1025 messages"):
        check_send([good] * 1025, 0, 5)
    with pytest.raises(InvalidArgumentError, match="4194305 body bytes"):
        check_send([NewMessage("a", b"x" * (2 * MiB)), NewMessage("b", b"y" * (2 * MiB + 1))], 0, 5)


def test_a_send_names_its_first_bad_message_when_tags_repeat_and_ids_are_checked_together() -> None:
    """check_send checks a repeated tag once and every message id in one scan: a bad tag
    or id is still refused, and the first bad message in send order is the one named."""
    tagged = NewMessage("a", b"x", tag="t", message_id="ID-0")
    check_send([tagged, NewMessage("a", b"x", tag="t", message_id="ID-1")], 0, 5)
    with pytest.raises(InvalidArgumentError, match=r"^messages\[2\]\.tag 't\|u' is invalid"):
        check_send([tagged, tagged, NewMessage("a", b"x", tag="t|u")], 0, 5)
    with pytest.raises(InvalidArgumentError, match=r"^messages\[3\]\.message_id is invalid"):
        check_send([tagged] * 3 + [NewMessage("a", b"x", tag="t", message_id="ID\x01")], 0, 5)
    # A bad tag before a bad id: the tag's error, as when each message was checked whole.
    with pytest.raises(InvalidArgumentError, match=r"^messages\[1\]\.tag"):
        check_send(
            [
                tagged,
                NewMessage("a", b"x", tag=" "),
                NewMessage("a", b"x", message_id="ID\x7f"),
            ],
            0,
            5,
        )
    # A non-ASCII id without control characters passes; one with DEL (0x7f) does not.
    check_send([NewMessage("a", b"x", message_id="idé"), tagged], 0, 5)
    with pytest.raises(InvalidArgumentError, match=r"^messages\[1\]\.message_id"):
        check_send(
            [NewMessage("a", b"x", message_id="idé"), NewMessage("a", b"x", message_id="é\x7f")],
            0,
            5,
        )
