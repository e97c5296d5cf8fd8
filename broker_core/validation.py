"""Argument rules shared by every entry point (proxy, embedded use, tests).

Each check raises InvalidArgumentError with a message that says what was wrong and what is
allowed. Nothing is clamped: an out-of-range value is an error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from popmq.broker_core.errors import InvalidArgumentError

NAME_PATTERN = re.compile(r"^[%a-zA-Z0-9_-]+$")
MAX_NAME_LENGTH = 127
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SYSTEM_PREFIX = "rmq_sys_"
RESERVED_PREFIXES = (RETRY_PREFIX, DLQ_PREFIX, SYSTEM_PREFIX)

MAX_BODY_BYTES = 4 * 1024 * 1024 - 64 * 1024
"""A message body: 4 MiB (RocketMQ's maxMessageSize) less 64 KiB, so a message with its
largest properties, keys and handle still fits the 4 MiB a gRPC client receives by default."""
MAX_PROPERTIES = 128
MAX_PROPERTIES_BYTES = 16 * 1024
MAX_TAG_LENGTH = 127
MAX_KEYS = 32
MAX_KEY_LENGTH = 127
MAX_MESSAGE_ID_LENGTH = 128
MAX_QUEUES = 1024
MAX_MESSAGE_GROUP_LENGTH = 127
MAX_DEDUP_ID_LENGTH = 128
MAX_BORN_HOST_LENGTH = 255
BODY_ENCODINGS = ("", "zlib", "zstd")
MAX_DELIVERY_ATTEMPTS = 1000
MAX_BACKOFF_ENTRIES = 64

MAX_SEND_MESSAGES = 1024
"""Messages in one send request: the work of one request stays bounded (Pub/Sub: 1,000)."""
MAX_SEND_BODY_BYTES = 4 * 1024 * 1024
"""Bodies of one send request, as sent: RocketMQ's batch rule (a batch within
maxMessageSize, 4 MiB). The broker writes a request in one batch on its event loop."""
MAX_REQUEST_BYTES = 5 * 1024 * 1024
"""The server's gRPC receive limit: a largest send request (MAX_SEND_BODY_BYTES of bodies
with up to 1 MiB of properties, keys and ids) fits; anything larger is refused before it
is parsed. Parsing is on the event loop and costs ~11 ms per MiB of the smallest possible
entries (bench/request_stall.py), so this bound is also the worst stall a request causes."""
MAX_SMALL_REQUEST_BYTES = 1024 * 1024
"""Every other request (acks, pops, heartbeats, admin reads): 1,024 receipt handles take
~200 KB, so 1 MiB is ample, and parsing a request this size takes a few milliseconds."""
MAX_RESPONSE_BYTES = 4 * 1024 * 1024 - 16 * 1024
"""Message bytes in one pop or pull answer (bodies, properties, keys and a per-message
allowance), so a client with gRPC's default 4 MiB receive limit can always read it. A
batch stops before the message that would pass it; the first message always fits
(MAX_BODY_BYTES)."""
MESSAGE_OVERHEAD_BYTES = 1024
"""Per-message allowance for the fields around a body in an answer (ids, handle, times)."""
MAX_HANDLES = 1024
"""Receipt handles or lease tokens in one ack-like request (the largest pop batch)."""
MAX_SUBSCRIPTIONS = 1024
"""Topics one consumer group's settings may subscribe to."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_name(kind: str, name: str, *, allow_dlq: bool = False) -> None:
    """Check a topic or group name; reserved prefixes are refused unless `allow_dlq`."""
    if not name:
        raise InvalidArgumentError(f"{kind} name is empty: use 1 to {MAX_NAME_LENGTH} characters")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidArgumentError(
            f"{kind} name is {len(name)} characters long: at most {MAX_NAME_LENGTH} are allowed"
        )
    if not NAME_PATTERN.match(name):
        raise InvalidArgumentError(
            f"{kind} name {name!r} is invalid: use only letters, digits, '%', '_' and '-'"
        )
    for prefix in RESERVED_PREFIXES:
        if name.startswith(prefix) and not (allow_dlq and prefix == DLQ_PREFIX):
            raise InvalidArgumentError(
                f"{kind} name {name!r} uses the reserved prefix {prefix!r}"
                + (" (dead-letter topics can only be read)" if prefix == DLQ_PREFIX else "")
            )


def check_range(field: str, value: float, low: float, high: float, unit: str = "") -> None:
    """Check low <= value <= high, naming the field and the allowed range."""
    if low <= value <= high:
        return
    shown = f"{value:g}{unit}"
    if value < low:
        raise InvalidArgumentError(f"{field} {shown} is below the minimum {low:g}{unit}")
    raise InvalidArgumentError(f"{field} {shown} is above the maximum {high:g}{unit}")


def check_count(field: str, count: int, limit: int, what: str = "entries") -> None:
    """Check a request's list length before any per-entry work, naming the limit."""
    if count > limit:
        raise InvalidArgumentError(
            f"{field} has {count} {what}: at most {limit} are allowed in one request"
        )


def check_send_size(messages: int, body_bytes: int) -> None:
    """Check one send request's message count and body bytes (MAX_SEND_*)."""
    check_count("messages", messages, MAX_SEND_MESSAGES, "messages")
    if body_bytes > MAX_SEND_BODY_BYTES:
        raise InvalidArgumentError(
            f"messages carry {body_bytes} body bytes: at most {MAX_SEND_BODY_BYTES} (4 MiB) "
            "are allowed in one send request; split it into smaller requests"
        )


def check_message(
    index: int,
    *,
    body: bytes,
    tag: str,
    keys: Sequence[str],
    properties: Mapping[str, str],
    message_id: str,
) -> None:
    """Check one message of a send; `index` locates it in the request."""
    where = f"messages[{index}]"
    if not body:
        raise InvalidArgumentError(
            f"{where}.body is empty: a message needs 1 to {MAX_BODY_BYTES} bytes"
        )
    if len(body) > MAX_BODY_BYTES:
        raise InvalidArgumentError(
            f"{where}.body is {len(body)} bytes: at most {MAX_BODY_BYTES} (4 MiB - 64 KiB) are "
            "allowed"
        )
    if tag:
        if "|" in tag or not tag.strip() or _CONTROL.search(tag):
            raise InvalidArgumentError(
                f"{where}.tag {tag!r} is invalid: no '|', no control characters, not blank"
            )
        if len(tag) > MAX_TAG_LENGTH:
            raise InvalidArgumentError(f"{where}.tag is longer than {MAX_TAG_LENGTH} characters")
    if len(keys) > MAX_KEYS:
        raise InvalidArgumentError(f"{where} has {len(keys)} keys: at most {MAX_KEYS} allowed")
    for key in keys:
        if not key.strip() or _CONTROL.search(key) or len(key) > MAX_KEY_LENGTH:
            raise InvalidArgumentError(
                f"{where} key {key!r} is invalid: 1 to {MAX_KEY_LENGTH} characters, "
                "not blank, no control characters"
            )
    if len(properties) > MAX_PROPERTIES:
        raise InvalidArgumentError(
            f"{where} has {len(properties)} properties: at most {MAX_PROPERTIES} are allowed"
        )
    total = 0
    for name, value in properties.items():
        if not name or _CONTROL.search(name):
            raise InvalidArgumentError(f"{where} property name {name!r} is empty or has controls")
        total += len(name.encode()) + len(value.encode())
    if total > MAX_PROPERTIES_BYTES:
        raise InvalidArgumentError(
            f"{where} properties take {total} bytes: at most {MAX_PROPERTIES_BYTES} (16 KiB)"
        )
    if len(message_id) > MAX_MESSAGE_ID_LENGTH or _CONTROL.search(message_id):
        raise InvalidArgumentError(
            f"{where}.message_id is invalid: at most {MAX_MESSAGE_ID_LENGTH} printable characters"
        )


def check_message_extras(
    index: int, *, message_group: str, dedup_id: str, body_encoding: str, born_host: str
) -> None:
    """Check the FIFO group, dedup id, body encoding and born host of one message."""
    where = f"messages[{index}]"
    if body_encoding not in BODY_ENCODINGS:
        raise InvalidArgumentError(
            f"{where}.body_encoding {body_encoding!r} is not supported: use '', 'zlib' or 'zstd'"
        )
    if not (message_group or dedup_id or born_host):
        return  # the usual message: nothing more to check
    for field, value, limit in (
        ("message_group", message_group, MAX_MESSAGE_GROUP_LENGTH),
        ("dedup_id", dedup_id, MAX_DEDUP_ID_LENGTH),
        ("born_host", born_host, MAX_BORN_HOST_LENGTH),
    ):
        if value and (not value.strip() or _CONTROL.search(value) or len(value) > limit):
            raise InvalidArgumentError(
                f"{where}.{field} {value[:40]!r} is invalid: 1 to {limit} characters, "
                "not blank, no control characters"
            )
