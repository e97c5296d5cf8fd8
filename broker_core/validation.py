"""Argument rules shared by every entry point (proxy, embedded use, tests).

Each check raises InvalidArgumentError with a message that says what was wrong and what is
allowed. Nothing is clamped: an out-of-range value is an error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from popmq.broker_core.config import LongPollingConfig, PopConfig
from popmq.broker_core.errors import InvalidArgumentError
from popmq.broker_core.types import NewMessage

NAME_PATTERN: Final = re.compile(r"^[%a-zA-Z0-9_-]+$")
MAX_NAME_LENGTH: Final = 127
RETRY_PREFIX: Final = "%RETRY%"
DLQ_PREFIX: Final = "%DLQ%"
SYSTEM_PREFIX: Final = "rmq_sys_"
RESERVED_PREFIXES: Final = (RETRY_PREFIX, DLQ_PREFIX, SYSTEM_PREFIX)
TRANSACTION_DISCARD_TOPIC: Final = SYSTEM_PREFIX + "TRANS_DISCARDED"
"""Where a broker copies the half messages of transactions it discarded after check_max
unanswered checks (RocketMQ TRANS_CHECK_MAX_TIME_TOPIC): one queue, read-only, readable
wherever a dead-letter topic is."""

MAX_BODY_BYTES: Final = 4 * 1024 * 1024 - 64 * 1024
"""A message body: 4 MiB (RocketMQ's maxMessageSize) less 64 KiB, so a message with its
largest properties, keys and handle still fits the 4 MiB a gRPC client receives by default."""
MAX_PROPERTIES: Final = 128
MAX_PROPERTIES_BYTES: Final = 16 * 1024
MAX_TAG_LENGTH: Final = 127
MAX_KEYS: Final = 32
MAX_KEY_LENGTH: Final = 127
MAX_MESSAGE_ID_LENGTH: Final = 128
MAX_QUEUES: Final = 1024
MAX_MESSAGE_GROUP_LENGTH: Final = 127
MAX_DEDUP_ID_LENGTH: Final = 128
MAX_BORN_HOST_LENGTH: Final = 255
MAX_CLIENT_ID_LENGTH: Final = 255
"""A popping client's id: as long as a consumer's heartbeat client id may be."""
BODY_ENCODINGS: Final = ("", "zlib", "zstd")
MAX_DELIVERY_ATTEMPTS: Final = 1000
MAX_BACKOFF_ENTRIES: Final = 64

MAX_SEND_MESSAGES: Final = 1024
"""Messages in one send request: the work of one request stays bounded (Pub/Sub: 1,000)."""
MAX_SEND_BODY_BYTES: Final = 4 * 1024 * 1024
"""Bodies of one send request, as sent: RocketMQ's batch rule (a batch within
maxMessageSize, 4 MiB). The broker writes a request in one batch on its event loop."""
MAX_REQUEST_BYTES: Final = 5 * 1024 * 1024
"""The server's gRPC receive limit: a largest send request (MAX_SEND_BODY_BYTES of bodies
with up to 1 MiB of properties, keys and ids) fits; anything larger is refused before it
is parsed. Parsing is on the event loop and costs ~11 ms per MiB of the smallest possible
entries (bench/request_stall.py), so this bound is also the worst stall a request causes."""
MAX_SMALL_REQUEST_BYTES: Final = 1024 * 1024
"""Every other request (acks, pops, heartbeats, admin reads): 1,024 receipt handles take
~200 KB, so 1 MiB is ample, and parsing a request this size takes a few milliseconds."""
MAX_RESPONSE_BYTES: Final = 4 * 1024 * 1024 - 16 * 1024
"""Message bytes in one pop or pull answer (bodies, properties, keys and a per-message
allowance), so a client with gRPC's default 4 MiB receive limit can always read it. A
batch stops before the message that would pass it; the first message always fits
(MAX_BODY_BYTES)."""
MESSAGE_OVERHEAD_BYTES: Final = 1024
"""Per-message allowance for the fields around a body in an answer (ids, handle, times)."""
MAX_HANDLES: Final = 1024
"""Receipt handles or lease tokens in one ack-like request (the largest pop batch)."""
MAX_SUBSCRIPTIONS: Final = 1024
"""Topics one consumer group's settings may subscribe to."""
DEFAULT_POP_MESSAGES: Final = 32
"""Messages a pop that does not say how many asks for (RocketMQ's default batch), or
`pop.max_batch` when that is smaller."""

_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


def _has_control(text: str) -> bool:
    """Whether `text` holds a control character (_CONTROL). Empty text and printable ASCII,
    what names and tags nearly always are, have none: two string scans in C cost about
    half a regex search compiled (500 against 930 instructions)."""
    if not text or (text.isascii() and text.isprintable()):
        return False
    return _CONTROL.search(text) is not None


def _limit(value: int) -> str:
    """A number as `allowed` texts show it: with thousands separators."""
    return f"{value:,}"


_NAME_ALLOWED: Final = f"1..{MAX_NAME_LENGTH} of letters, digits, '%', '_', '-'"
_CLIENT_ID_ALLOWED: Final = f"0..{MAX_CLIENT_ID_LENGTH} characters, no control characters"


def check_name(kind: str, name: str, *, allow_dlq: bool = False) -> None:
    """Check a topic or group name; reserved prefixes are refused unless `allow_dlq`
    (which admits dead-letter topics and the discarded-transactions topic, read-only ones).

    The error's field is `kind` ("topic", "group")."""
    allowed = _NAME_ALLOWED
    if not name:
        raise InvalidArgumentError(
            f"{kind} name is empty: use 1 to {MAX_NAME_LENGTH} characters",
            field=kind,
            value=name,
            allowed=allowed,
        )
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidArgumentError(
            f"{kind} name is {len(name)} characters long: at most {MAX_NAME_LENGTH} are allowed",
            field=kind,
            value=name,
            allowed=allowed,
        )
    if not NAME_PATTERN.match(name):
        raise InvalidArgumentError(
            f"{kind} name {name!r} is invalid: use only letters, digits, '%', '_' and '-'",
            field=kind,
            value=name,
            allowed=allowed,
        )
    if allow_dlq and name == TRANSACTION_DISCARD_TOPIC:
        return
    for prefix in RESERVED_PREFIXES:
        if name.startswith(prefix) and not (allow_dlq and prefix == DLQ_PREFIX):
            raise InvalidArgumentError(
                f"{kind} name {name!r} uses the reserved prefix {prefix!r}"
                + (" (dead-letter topics can only be read)" if prefix == DLQ_PREFIX else ""),
                field=kind,
                value=name,
                allowed=f"no prefix {prefix!r}",
            )


def check_range(
    name: str,
    value: float,
    low: float,
    high: float,
    unit: str = "",
    *,
    field: str | None = None,
) -> None:
    """Check low <= value <= high, naming the field and the allowed range.

    `name` is how the message names the argument; `field` (default: `name`) is the
    error's structured field, for names that carry an index or a queue."""
    if low <= value <= high:
        return
    shown = f"{value:g}{unit}"
    allowed = f"{low:g}{unit}..{high:g}{unit}"
    where = name if field is None else field
    if value < low:
        raise InvalidArgumentError(
            f"{name} {shown} is below the minimum {low:g}{unit}",
            field=where,
            value=value,
            allowed=allowed,
        )
    raise InvalidArgumentError(
        f"{name} {shown} is above the maximum {high:g}{unit}",
        field=where,
        value=value,
        allowed=allowed,
    )


def check_count(field: str, count: int, limit: int, what: str = "entries") -> None:
    """Check a request's list length before any per-entry work, naming the limit."""
    if count > limit:
        raise InvalidArgumentError(
            f"{field} has {count} {what}: at most {limit} are allowed in one request",
            field=field,
            value=count,
            allowed=f"at most {_limit(limit)} {what}",
        )


def check_send_size(messages: int, body_bytes: int) -> None:
    """Check one send request's message count and body bytes (MAX_SEND_*)."""
    check_count("messages", messages, MAX_SEND_MESSAGES, "messages")
    if body_bytes > MAX_SEND_BODY_BYTES:
        raise InvalidArgumentError(
            f"messages carry {body_bytes} body bytes: at most {MAX_SEND_BODY_BYTES} (4 MiB) "
            "are allowed in one send request; split it into smaller requests",
            field="messages",
            value=body_bytes,
            allowed=f"at most {_limit(MAX_SEND_BODY_BYTES)} B of bodies",
        )


def check_batch_size(batch_size: int, max_batch: int, *, name: str = "max_messages") -> None:
    """Check how many messages one pop or pull asks for: 1..max_batch (field "batch_size");
    `name` is the argument's name in the caller's API."""
    check_range(name, batch_size, 1, max_batch, field="batch_size")


def check_invisible(invisible_s: float, low_s: float, high_s: float) -> None:
    """Check an invisible duration in seconds (a pop's: min..max; a change's: 0..max)."""
    check_range("invisible_duration", invisible_s, low_s, high_s, "s")


def check_queue_id(topic: str, queues: int, queue_id: int) -> None:
    """Check that `queue_id` is one of the `queues` queues of `topic`."""
    if not 0 <= queue_id < queues:
        raise InvalidArgumentError(
            f"queue_id {queue_id} is outside 0..{queues - 1}: topic {topic!r} has {queues} queues",
            field="queue_id",
            value=queue_id,
            allowed=f"0..{queues - 1}",
        )


def check_offset(topic: str, queue_id: int, offset: int, max_offset: int) -> None:
    """Check a read or commit position: 0..the queue's max offset (the next to be written)."""
    if not 0 <= offset <= max_offset:
        raise InvalidArgumentError(
            f"offset {offset} is outside 0..{max_offset}: topic {topic!r} queue {queue_id} has "
            f"max_offset {max_offset}",
            field="offset",
            value=offset,
            allowed=f"0..{max_offset}",
        )


def check_delivery_time(index: int, deliver_at_ms: int, now_ms: int, max_delay_s: float) -> None:
    """Check a delayed message's due time: not before the epoch, at most max_delay_s ahead."""
    # The texts of the errors are formatted only for an error: this runs for every message.
    if deliver_at_ms < 0:
        raise InvalidArgumentError(
            f"messages[{index}].deliver_at is before the epoch",
            field="message.delivery_timestamp",
            value=deliver_at_ms,
            allowed=f"0..now+{max_delay_s:.0f}s",
        )
    if deliver_at_ms - now_ms > round(max_delay_s * 1000):
        raise InvalidArgumentError(
            f"messages[{index}] is due in {(deliver_at_ms - now_ms) / 1000:.0f}s: at "
            f"most {max_delay_s:.0f}s (max_delay_s) ahead is allowed",
            field="message.delivery_timestamp",
            value=deliver_at_ms,
            allowed=f"0..now+{max_delay_s:.0f}s",
        )


def check_tag(index: int, tag: str) -> None:
    """Check a message's tag: 1..MAX_TAG_LENGTH characters, not blank, no '|', no controls."""
    # In the order (and words) of the SDK's copy, sdk/_validation.py.
    if "|" in tag or not tag.strip() or _has_control(tag):
        raise InvalidArgumentError(
            f"messages[{index}].tag {tag!r} is invalid: no '|', no control characters, not blank",
            field="message.tag",
            value=tag,
            allowed=f"1..{MAX_TAG_LENGTH} characters, not blank, no '|', no controls",
        )
    if len(tag) > MAX_TAG_LENGTH:
        raise InvalidArgumentError(
            f"messages[{index}].tag is longer than {MAX_TAG_LENGTH} characters",
            field="message.tag",
            value=tag,
            allowed=f"1..{MAX_TAG_LENGTH} characters, not blank, no '|', no controls",
        )


def check_message(
    index: int,
    *,
    body: bytes,
    tag: str,
    keys: Sequence[str],
    properties: Mapping[str, str],
    message_id: str,
    require_message_id: bool = False,
    id_printable: bool = False,
) -> None:
    """Check one message of a send; `index` locates it in the request.

    An empty message_id lets the broker assign one; `require_message_id` refuses it, for
    protocols whose clients always send one (apache.rocketmq.v2). `id_printable`: the
    caller found no control character in it already (`check_send`, for a whole send)."""
    # The texts of the errors are formatted only for an error: this runs for every message.
    if not body:
        raise InvalidArgumentError(
            f"messages[{index}].body is empty: a message needs 1 to {MAX_BODY_BYTES} bytes",
            field="message.body",
            value=body,
            allowed=f"1 B..{_limit(MAX_BODY_BYTES)} B",
        )
    if len(body) > MAX_BODY_BYTES:
        raise InvalidArgumentError(
            f"messages[{index}].body is {len(body)} bytes: at most {MAX_BODY_BYTES} "
            "(4 MiB - 64 KiB) are allowed",
            field="message.body",
            value=body,
            allowed=f"1 B..{_limit(MAX_BODY_BYTES)} B",
        )
    if tag:
        check_tag(index, tag)
    if len(keys) > MAX_KEYS:
        raise InvalidArgumentError(
            f"messages[{index}] has {len(keys)} keys: at most {MAX_KEYS} allowed",
            field="message.keys",
            value=len(keys),
            allowed=f"at most {MAX_KEYS} keys",
        )
    for key in keys:
        if not key.strip() or _has_control(key) or len(key) > MAX_KEY_LENGTH:
            raise InvalidArgumentError(
                f"messages[{index}] key {key!r} is invalid: 1 to {MAX_KEY_LENGTH} characters, "
                "not blank, no control characters",
                field="message.keys",
                value=key,
                allowed=f"1..{MAX_KEY_LENGTH} characters, not blank, no controls",
            )
    if len(properties) > MAX_PROPERTIES:
        raise InvalidArgumentError(
            f"messages[{index}] has {len(properties)} properties: at most {MAX_PROPERTIES} "
            "are allowed",
            field="message.properties",
            value=len(properties),
            allowed=f"at most {MAX_PROPERTIES} properties",
        )
    total = 0
    for name, value in properties.items():
        if not name or _has_control(name):
            raise InvalidArgumentError(
                f"messages[{index}] property name {name!r} is empty or has controls",
                field="message.properties.name",
                value=name,
                allowed="not blank, no control characters",
            )
        if not name.strip():
            # Refused as the v2 front end always did: no SQL filter can name such a property.
            raise InvalidArgumentError(
                f"messages[{index}] property name {name!r} is blank",
                field="message.properties.name",
                value=name,
                allowed="not blank, no control characters",
            )
        total += len(name.encode()) + len(value.encode())
    if total > MAX_PROPERTIES_BYTES:
        raise InvalidArgumentError(
            f"messages[{index}] properties take {total} bytes: at most "
            f"{MAX_PROPERTIES_BYTES} (16 KiB)",
            field="message.properties",
            value=total,
            allowed=f"at most {_limit(MAX_PROPERTIES_BYTES)} B",
        )
    if (
        (require_message_id and not message_id)
        or len(message_id) > MAX_MESSAGE_ID_LENGTH
        or (not id_printable and _has_control(message_id))
    ):
        low, rule = (
            (1, f"1 to {MAX_MESSAGE_ID_LENGTH}")
            if require_message_id
            else (0, f"at most {MAX_MESSAGE_ID_LENGTH}")
        )
        raise InvalidArgumentError(
            f"messages[{index}].message_id is invalid: {rule} printable characters",
            field="message.message_id",
            value=message_id,
            allowed=f"{low}..{MAX_MESSAGE_ID_LENGTH} printable characters",
        )


def check_message_extras(
    index: int, *, message_group: str, dedup_id: str, body_encoding: str, born_host: str
) -> None:
    """Check the FIFO group, dedup id, body encoding and born host of one message."""
    if body_encoding not in BODY_ENCODINGS:
        raise InvalidArgumentError(
            f"messages[{index}].body_encoding {body_encoding!r} is not supported: use '', "
            "'zlib' or 'zstd'",
            field="message.body_encoding",
            value=body_encoding,
            allowed="'', 'zlib', 'zstd'",
        )
    if not (message_group or dedup_id or born_host):
        return  # the usual message: nothing more to check
    for field, value, limit in (
        ("message_group", message_group, MAX_MESSAGE_GROUP_LENGTH),
        ("dedup_id", dedup_id, MAX_DEDUP_ID_LENGTH),
        ("born_host", born_host, MAX_BORN_HOST_LENGTH),
    ):
        if value and (not value.strip() or _has_control(value) or len(value) > limit):
            raise InvalidArgumentError(
                f"messages[{index}].{field} {value[:40]!r} is invalid: 1 to {limit} characters, "
                "not blank, no control characters",
                field=f"message.{field}",
                value=value,
                allowed=f"1..{limit} characters, not blank, no controls",
            )


def check_send(messages: Sequence[NewMessage], now_ms: int, max_delay_s: float) -> None:
    """What a send's messages must be whatever the broker holds, in this order: 1 to
    MAX_SEND_MESSAGES of them with MAX_SEND_BODY_BYTES of bodies in all, valid topic names,
    then each message's fields and delivery time (at most `max_delay_s` after `now_ms`),
    named by its index in the send.

    The one place these are checked: every BrokerAPI's send runs it before anything is
    stored (broker_core/send.py's admit; a cluster proxy before it splits the send over
    brokers, cluster/cluster_broker.py). What depends on the broker's state (room on disk,
    the topics and their message types) is checked by the broker that stores them."""
    if not messages:
        raise InvalidArgumentError("a send needs at least one message")
    check_count("messages", len(messages), MAX_SEND_MESSAGES, "messages")
    # Counted first: the sum below is then over at most MAX_SEND_MESSAGES bodies.
    check_send_size(len(messages), sum(len(m.body) for m in messages))
    for name in {msg.topic for msg in messages}:
        check_name("topic", name)
    # A send's messages mostly share their tag: a tag equal to one checked already is valid
    # too, and is compared instead of checked again (a third of checking a message).
    checked_tag = ""
    # Their ids (an SDK sets one on each) are searched for control characters together:
    # one scan of them all costs a third of a scan of each. When one has some, each is
    # checked as before, so the first error in message order is still the one raised.
    ids_printable = not _has_control("".join([msg.message_id for msg in messages]))
    for i, msg in enumerate(messages):
        tag = msg.tag
        check_message(
            i,
            body=msg.body,
            tag=tag if tag != checked_tag else "",
            keys=msg.keys,
            properties=msg.properties,
            message_id=msg.message_id,
            id_printable=ids_printable,
        )
        check_message_extras(
            i,
            message_group=msg.message_group,
            dedup_id=msg.dedup_id,
            body_encoding=msg.body_encoding,
            born_host=msg.born_host,
        )
        if msg.deliver_at_ms:  # 0 (at once) passes both of its checks
            check_delivery_time(i, msg.deliver_at_ms, now_ms, max_delay_s)
        checked_tag = tag


@dataclass(frozen=True, slots=True)
class PopArguments:
    """A pop's batch size, invisible duration and long-polling wait, defaulted and checked
    (`pop_arguments`)."""

    max_messages: int
    invisible_s: float
    wait_s: float


def pop_arguments(
    pop: PopConfig,
    long_polling: LongPollingConfig,
    *,
    max_messages: int | None = None,
    invisible_s: float | None = None,
    wait_s: float | None = None,
) -> PopArguments:
    """A pop's batch size, invisible duration and long-polling wait: each one not given
    takes its default (DEFAULT_POP_MESSAGES or `pop.max_batch` when smaller,
    `pop.default_invisible_s`, `long_polling.default_timeout_s`), and each is checked
    against its limits, in that order.

    The one place these are defaulted and checked, for every BrokerAPI (`check_pop`) and
    for a front end that needs the values before it pops (api.ServerInfo.pop_arguments)."""
    if max_messages is None:
        max_messages = min(DEFAULT_POP_MESSAGES, pop.max_batch)
    if invisible_s is None:
        invisible_s = pop.default_invisible_s
    if wait_s is None:
        wait_s = long_polling.default_timeout_s
    check_batch_size(max_messages, pop.max_batch)
    check_invisible(invisible_s, pop.min_invisible_s, pop.max_invisible_s)
    check_range("long_polling_timeout", wait_s, 0, long_polling.max_timeout_s, "s")
    return PopArguments(max_messages, invisible_s, wait_s)


def check_pop(
    pop: PopConfig,
    long_polling: LongPollingConfig,
    group: str,
    topic: str,
    *,
    max_messages: int | None = None,
    invisible_s: float | None = None,
    wait_s: float | None = None,
    max_bytes: int | None = None,
) -> PopArguments:
    """What a BrokerAPI's pop checks before it reads anything, in this order: the group and
    topic names (a dead-letter topic may be read), the answer bound `max_bytes`, then the
    arguments `pop_arguments` defaults and checks."""
    check_name("group", group)
    check_name("topic", topic, allow_dlq=True)
    if max_bytes is not None:
        check_range("max_bytes", max_bytes, 0, MAX_RESPONSE_BYTES)
    return pop_arguments(
        pop, long_polling, max_messages=max_messages, invisible_s=invisible_s, wait_s=wait_s
    )


def check_client_id(client_id: str) -> None:
    """The id of the client a pop names, recorded with its deliveries: empty (unknown) or
    up to MAX_CLIENT_ID_LENGTH characters without control characters (every pop checks it:
    ~0.1 µs empty, ~0.2 µs an SDK id, Python build: bench/inflight_consumers.py)."""
    if len(client_id) > MAX_CLIENT_ID_LENGTH:
        raise InvalidArgumentError(
            f"client_id is {len(client_id)} characters long: at most {MAX_CLIENT_ID_LENGTH} "
            "are allowed",
            field="client_id",
            value=client_id[:MAX_CLIENT_ID_LENGTH],
            allowed=_CLIENT_ID_ALLOWED,
        )
    if _has_control(client_id):
        raise InvalidArgumentError(
            f"client_id {client_id!r} contains control characters",
            field="client_id",
            value=client_id,
            allowed=_CLIENT_ID_ALLOWED,
        )


class Subscriptions(Protocol):
    """Where a pop finds its group's declared subscription of a topic."""

    def subscription_filter(self, group: str, topic: str) -> tuple[str, str] | None: ...


def pop_filter(
    subscriptions: Subscriptions,
    group: str,
    topic: str,
    filter_expression: str,
    filter_type: str,
) -> tuple[str, str]:
    """The filter a pop reads with, as (filter_type, filter_expression): its own, or, when
    it brings none (an empty tag expression), the group's declared subscription of the
    topic, if it declares one. The filter itself is parsed, and refused, by the broker
    that reads (filters.parse_filter)."""
    if filter_expression.strip() or filter_type != "tag":
        return filter_type, filter_expression
    declared = subscriptions.subscription_filter(group, topic)
    return (filter_type, filter_expression) if declared is None else declared


REDRIVE_SELECTED_MAX = 1000
"""Most dead letters one redrive may name: they are read and moved in one batch."""


def check_redrive_selection(max_messages: int | None, selected: Sequence[tuple[int, int]]) -> None:
    """A selection is bounded, names each dead letter once and excludes max_messages."""
    if max_messages is not None:
        raise InvalidArgumentError(
            "max_messages and selected dead letters exclude each other: name the dead letters "
            "to redrive, or ask for the oldest max_messages",
            field="max_messages",
            value=max_messages,
            allowed="unset when dead letters are named",
        )
    check_count("messages", len(selected), REDRIVE_SELECTED_MAX, "dead letters")
    seen: set[tuple[int, int]] = set()
    for queue_id, offset in selected:
        if offset < 0:
            raise InvalidArgumentError(
                f"offset {offset} of queue {queue_id} is negative: offsets start at 0",
                field="offset",
                value=offset,
                allowed="0 or more",
            )
        if (queue_id, offset) in seen:
            raise InvalidArgumentError(
                f"dead letter at queue {queue_id} offset {offset} is named twice: name each once",
                field="messages",
                value=f"{queue_id}:{offset}",
                allowed="each dead letter once",
            )
        seen.add((queue_id, offset))
