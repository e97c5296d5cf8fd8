"""Client-side argument checks: the server's rules and messages, applied before any call.

The rules and the wording mirror ``broker_core/validation.py`` (the SDK must not import the
broker), so a bad message fails the same way whether the client or the server catches it; a
unit test runs a table of bad inputs through both and compares the messages. The client
checks the body before compressing it, so what a user sends is what the limit is about.

Limits that depend on the server's configuration (``max_delay_s``, the pop batch ceiling) are
left to the server. Two checks are the client's own: the schedule of a message (at most one
of ``deliver_at``, ``delay_s`` and ``delay_level``) and the size of a batch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime

from popmq.sdk.errors import InvalidArgumentError

__all__ = [
    "DELAY_LEVELS_S",
    "MAX_BATCH_BODY_BYTES",
    "MAX_BATCH_MESSAGES",
    "MAX_BATCH_REQUEST_BYTES",
    "MAX_BODY_BYTES",
    "MAX_MESSAGE_GROUP_LENGTH",
    "check_batch_size",
    "check_message",
    "check_message_extras",
    "check_name",
    "check_range",
    "check_request_size",
    "check_schedule",
]

NAME_PATTERN = re.compile(r"^[%a-zA-Z0-9_-]+$")
MAX_NAME_LENGTH = 127
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SYSTEM_PREFIX = "rmq_sys_"
RESERVED_PREFIXES = (RETRY_PREFIX, DLQ_PREFIX, SYSTEM_PREFIX)

MAX_BODY_BYTES = 4 * 1024 * 1024 - 64 * 1024
"""The server's limit: 4 MiB less 64 KiB, so a received message always fits a gRPC
client's default 4 MiB receive limit."""
MAX_PROPERTIES = 128
MAX_PROPERTIES_BYTES = 16 * 1024
MAX_TAG_LENGTH = 127
MAX_KEYS = 32
MAX_KEY_LENGTH = 127
MAX_MESSAGE_ID_LENGTH = 128
MAX_MESSAGE_GROUP_LENGTH = 127
MAX_DEDUP_ID_LENGTH = 128
MAX_BORN_HOST_LENGTH = 255
BODY_ENCODINGS = ("", "zlib", "zstd")

MAX_BATCH_BODY_BYTES = 4 * 1024 * 1024
"""Bodies of one send_batch, as sent (after compression): RocketMQ's batch rule (a batch
within ``maxMessageSize``). The server's gRPC limit is 130 MiB, but the broker writes a
batch in one RocksDB write on its event loop, so large batches stall every other client."""
MAX_BATCH_MESSAGES = 1024
"""Messages of one send_batch: the server's per-request limit."""
MAX_BATCH_REQUEST_BYTES = 5 * 1024 * 1024 - 64 * 1024
"""One send request as encoded (bodies, properties, keys, ids): below the server's 5 MiB
receive limit, which refuses a larger request before reading it."""

DELAY_LEVELS_S: tuple[float, ...] = (
    1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
)  # fmt: skip
"""RocketMQ's ``messageDelayLevel``: level N (1-based) waits ``DELAY_LEVELS_S[N - 1]``."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _where(index: int) -> str:
    """How an error names message ``index`` of a send (the server's words)."""
    return f"messages[{index}]"


def check_name(kind: str, name: str, *, allow_dlq: bool = False) -> None:
    """Check a topic or group name; reserved prefixes are refused unless ``allow_dlq``."""
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
    """Check ``low <= value <= high``, naming the field and the allowed range."""
    if low <= value <= high:
        return
    shown = f"{value:g}{unit}"
    if value < low:
        raise InvalidArgumentError(f"{field} {shown} is below the minimum {low:g}{unit}")
    raise InvalidArgumentError(f"{field} {shown} is above the maximum {high:g}{unit}")


def check_message(
    index: int,
    *,
    body: bytes,
    tag: str,
    keys: Sequence[str],
    properties: Mapping[str, str],
    message_id: str,
) -> None:
    """Check one message of a send; ``index`` locates it in the batch."""
    # Runs for every message sent: the common case (short body, few or no optional fields)
    # takes a few comparisons, and the error text is only built when there is an error.
    if not body:
        raise InvalidArgumentError(
            f"{_where(index)}.body is empty: a message needs 1 to {MAX_BODY_BYTES} bytes"
        )
    if len(body) > MAX_BODY_BYTES:
        raise InvalidArgumentError(
            f"{_where(index)}.body is {len(body)} bytes: "
            f"at most {MAX_BODY_BYTES} (4 MiB - 64 KiB) are allowed"
        )
    if tag:
        if "|" in tag or not tag.strip() or _CONTROL.search(tag):
            raise InvalidArgumentError(
                f"{_where(index)}.tag {tag!r} is invalid: no '|', no control characters, not blank"
            )
        if len(tag) > MAX_TAG_LENGTH:
            raise InvalidArgumentError(
                f"{_where(index)}.tag is longer than {MAX_TAG_LENGTH} characters"
            )
    if keys:
        if len(keys) > MAX_KEYS:
            raise InvalidArgumentError(
                f"{_where(index)} has {len(keys)} keys: at most {MAX_KEYS} allowed"
            )
        for key in keys:
            if not key.strip() or _CONTROL.search(key) or len(key) > MAX_KEY_LENGTH:
                raise InvalidArgumentError(
                    f"{_where(index)} key {key!r} is invalid: 1 to {MAX_KEY_LENGTH} characters, "
                    "not blank, no control characters"
                )
    if properties:
        if len(properties) > MAX_PROPERTIES:
            raise InvalidArgumentError(
                f"{_where(index)} has {len(properties)} properties: "
                f"at most {MAX_PROPERTIES} are allowed"
            )
        total = 0
        for name, value in properties.items():
            if not name or _CONTROL.search(name):
                raise InvalidArgumentError(
                    f"{_where(index)} property name {name!r} is empty or has controls"
                )
            if not name.strip():
                # As the server: no SQL filter can name a blank property.
                raise InvalidArgumentError(f"{_where(index)} property name {name!r} is blank")
            total += len(name.encode()) + len(value.encode())
        if total > MAX_PROPERTIES_BYTES:
            raise InvalidArgumentError(
                f"{_where(index)} properties take {total} bytes: "
                f"at most {MAX_PROPERTIES_BYTES} (16 KiB)"
            )
    if len(message_id) > MAX_MESSAGE_ID_LENGTH or _CONTROL.search(message_id):
        raise InvalidArgumentError(
            f"{_where(index)}.message_id is invalid: "
            f"at most {MAX_MESSAGE_ID_LENGTH} printable characters"
        )


def check_message_extras(
    index: int, *, message_group: str, dedup_id: str, body_encoding: str, born_host: str
) -> None:
    """Check the FIFO group, dedup id, body encoding and born host of one message."""
    if message_group:
        _check_optional_text(index, "message_group", message_group, MAX_MESSAGE_GROUP_LENGTH)
    if dedup_id:
        _check_optional_text(index, "dedup_id", dedup_id, MAX_DEDUP_ID_LENGTH)
    if born_host:
        _check_optional_text(index, "born_host", born_host, MAX_BORN_HOST_LENGTH)
    if body_encoding not in BODY_ENCODINGS:
        raise InvalidArgumentError(
            f"{_where(index)}.body_encoding {body_encoding!r} is not supported: "
            "use '', 'zlib' or 'zstd'"
        )


def _check_optional_text(index: int, field: str, value: str, limit: int) -> None:
    if not value.strip() or _CONTROL.search(value) or len(value) > limit:
        raise InvalidArgumentError(
            f"{_where(index)}.{field} {value[:40]!r} is invalid: 1 to {limit} characters, "
            "not blank, no control characters"
        )


def check_schedule(
    index: int,
    *,
    deliver_at: datetime | float | None,
    delay_s: float | None,
    delay_level: int | None,
) -> None:
    """Check a message's schedule: at most one of the three, each in its own range.

    The upper bound of a delay is the server's ``max_delay_s`` (3 days by default); the
    server checks it against its own clock, so the client leaves it to the server.
    """
    if deliver_at is None and delay_s is None and delay_level is None:
        return  # most messages: sent now
    where = _where(index)
    given = [
        name
        for name, value in (
            ("deliver_at", deliver_at),
            ("delay_s", delay_s),
            ("delay_level", delay_level),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise InvalidArgumentError(
            f"{where} sets {' and '.join(given)}: set at most one of deliver_at, delay_s "
            "and delay_level"
        )
    if isinstance(deliver_at, datetime):
        if deliver_at.tzinfo is None or deliver_at.utcoffset() is None:
            raise InvalidArgumentError(
                f"{where}.deliver_at {deliver_at.isoformat()} has no time zone: use an aware "
                "datetime (e.g. datetime.now(UTC) + timedelta(minutes=5)) or epoch seconds"
            )
    elif deliver_at is not None and not (math.isfinite(deliver_at) and deliver_at >= 0):
        raise InvalidArgumentError(
            f"{where}.deliver_at {deliver_at} is not a time: use epoch seconds (0 or more) "
            "or an aware datetime"
        )
    if delay_s is not None and not (math.isfinite(delay_s) and delay_s >= 0):
        raise InvalidArgumentError(
            f"{where}.delay_s {delay_s} is invalid: use 0 or more seconds "
            "(up to the server's max_delay_s, 3 days by default)"
        )
    if delay_level is not None:
        check_range(f"{where}.delay_level", delay_level, 1, len(DELAY_LEVELS_S))


def check_batch_size(body_bytes: int, messages: int = 1) -> None:
    """Check one batch, as sent, against ``MAX_BATCH_MESSAGES`` and ``MAX_BATCH_BODY_BYTES``."""
    if messages > MAX_BATCH_MESSAGES:
        raise InvalidArgumentError(
            f"the batch has {messages} messages: at most {MAX_BATCH_MESSAGES} per send_batch; "
            "split it into smaller batches"
        )
    if body_bytes > MAX_BATCH_BODY_BYTES:
        raise InvalidArgumentError(
            f"the batch's bodies take {body_bytes} bytes as sent (after compression): at most "
            f"{MAX_BATCH_BODY_BYTES} (4 MiB) per send_batch; split it into smaller batches"
        )


def check_request_size(request_bytes: int) -> None:
    """Check one send request, as encoded, against ``MAX_BATCH_REQUEST_BYTES``."""
    if request_bytes > MAX_BATCH_REQUEST_BYTES:
        raise InvalidArgumentError(
            f"the batch takes {request_bytes} bytes as sent with its properties and keys: at "
            f"most {MAX_BATCH_REQUEST_BYTES} per send_batch; split it into smaller batches"
        )
