"""Dataclasses the SDK takes and returns, and their proto conversions.

Proto types stay at this edge: clients build requests with ``to_proto`` helpers and turn
responses into these dataclasses with ``from_proto``, so callers never see pb2 objects.
Durations are float seconds (names end in ``_s``); timestamps are tz-aware UTC datetimes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

from google.protobuf import duration_pb2, timestamp_pb2

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk._compression import BodyDecodeError, decode_body
from popmq.sdk._validation import check_schedule
from popmq.sdk.errors import InvalidArgumentError

__all__ = [
    "Message",
    "ReceivedMessage",
    "SendReceipt",
    "Sql",
    "datetime_from_timestamp",
    "duration_from_seconds",
    "seconds_from_duration",
]

logger = logging.getLogger(__name__)

_NANOS_PER_SECOND = 1_000_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Timestamp's range (protobuf's _CheckTimestampValid): 0001-01-01 to 9999-12-31T23:59:59.
_MIN_TIMESTAMP_SECONDS = -62_135_596_800
_MAX_TIMESTAMP_SECONDS = 253_402_300_799

_recent_datetimes: dict[tuple[int, int], datetime] = {}
"""Datetimes converted lately, by their Timestamp's (seconds, nanos). The messages of one
pop share their ``invisible_until`` and mostly their born and store times (sent in one
batch), so converting each value once saves most of the timedelta arithmetic (~0.7 us a
field). A datetime is immutable, so handing out the same object is safe; at
``_RECENT_DATETIMES`` entries the dict starts over. Lookups and inserts are single dict
operations, safe across threads."""
_RECENT_DATETIMES = 1024

_NO_PROPERTIES: Mapping[str, str] = MappingProxyType({})
"""``Message``'s default properties: read-only, so the shared default is never changed."""


def duration_from_seconds(seconds: float, *, name: str = "duration") -> duration_pb2.Duration:
    """Convert float seconds to a proto Duration, rejecting values no server could accept.

    Args:
        seconds: The duration in seconds.
        name: The argument name, for the error message.

    Raises:
        InvalidArgumentError: ``seconds`` is NaN or infinite.
    """
    if not math.isfinite(seconds):
        raise InvalidArgumentError(f"{name} must be a finite number of seconds, got {seconds}")
    duration = duration_pb2.Duration()
    duration.FromNanoseconds(round(seconds * _NANOS_PER_SECOND))
    return duration


def seconds_from_duration(duration: duration_pb2.Duration) -> float:
    """Convert a proto Duration to float seconds."""
    return duration.seconds + duration.nanos / _NANOS_PER_SECOND


def datetime_from_timestamp(timestamp: timestamp_pb2.Timestamp) -> datetime:
    """Convert a proto Timestamp to a tz-aware UTC datetime (the epoch when unset).

    The same value as ``timestamp.ToDatetime(tzinfo=UTC)``, which raises ``ValueError`` for
    a timestamp out of its range; recent results are reused (see ``_recent_datetimes``).
    """
    key = (timestamp.seconds, timestamp.nanos)
    converted = _recent_datetimes.get(key)
    if converted is not None:
        return converted
    seconds, nanos = key
    if 0 <= nanos < _NANOS_PER_SECOND and (
        _MIN_TIMESTAMP_SECONDS <= seconds <= _MAX_TIMESTAMP_SECONDS
    ):
        converted = _EPOCH + timedelta(0, seconds, nanos // 1000)
        if len(_recent_datetimes) >= _RECENT_DATETIMES:
            _recent_datetimes.clear()
        _recent_datetimes[key] = converted
        return converted
    return timestamp.ToDatetime(tzinfo=UTC)  # raises the protobuf's error for a bad value


def enum_suffix(name_of: Callable[[int], str], value: int, prefix: str) -> str:
    """Name an enum value without its proto prefix, lower case ("TOPIC_KIND_DLQ" -> "dlq").

    Values newer than the generated code keep their number, so old clients still work.
    """
    try:
        full = name_of(value)
    except ValueError:
        return str(value)
    return full.removeprefix(prefix).lower()


@dataclass(frozen=True, slots=True, init=False)
class Message:
    """A message to send.

    Attributes:
        body: Payload, 1 byte to 4 MiB (before compression).
        tag: Optional tag that consumers filter on ("TagA"); no ``|`` allowed.
        keys: Optional business keys.
        properties: User properties (at most 128 entries, 16 KiB in total).
        message_id: Optional id; the producer assigns a unique one when empty.
        message_group: FIFO group (fifo and mixed topics): messages of one group are
            delivered in send order, one at a time. 1 to 127 characters.
        deliver_at: Deliver at this time: an aware datetime or epoch seconds (delay and
            mixed topics); a time in the past means at once.
        delay_s: Deliver this many seconds after the server receives the send.
        delay_level: RocketMQ delay level 1..18 (1s 5s 10s 30s 1m .. 10m 20m 30m 1h 2h).
        dedup_id: A repeat of this id on the topic within the server's dedup window is
            answered with the first send's receipt and not stored; empty: the message id.

    Set at most one of ``deliver_at``, ``delay_s`` and ``delay_level``.
    """

    body: bytes
    tag: str = ""
    keys: Sequence[str] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    message_id: str = ""
    message_group: str = ""
    deliver_at: datetime | float | None = None
    delay_s: float | None = None
    delay_level: int | None = None
    dedup_id: str = ""

    # Written out rather than generated: a frozen dataclass's __init__ plus __post_init__
    # cost ~4 us a message, about as much as building its wire form.
    def __init__(
        self,
        body: bytes,
        tag: str = "",
        keys: Sequence[str] = (),
        properties: Mapping[str, str] = _NO_PROPERTIES,
        message_id: str = "",
        message_group: str = "",
        deliver_at: datetime | float | None = None,
        delay_s: float | None = None,
        delay_level: int | None = None,
        dedup_id: str = "",
    ) -> None:
        # Copy the caller's containers so later mutation of them cannot change this message,
        # and fail on a str body or a bare-str key here rather than deep inside protobuf.
        if type(body) is not bytes:
            if isinstance(body, bytearray | memoryview):
                body = bytes(body)
            elif not isinstance(body, bytes):
                raise TypeError(f"body must be bytes, got {type(body).__name__}")
        if type(keys) is not tuple:
            if isinstance(keys, str):
                raise TypeError("keys must be a sequence of strings, not a single string")
            keys = tuple(keys)
        properties = {} if properties is _NO_PROPERTIES else dict(properties)
        if deliver_at is not None and (
            isinstance(deliver_at, bool) or not isinstance(deliver_at, datetime | int | float)
        ):
            raise TypeError(
                f"deliver_at must be a datetime or epoch seconds, got {type(deliver_at).__name__}"
            )
        if delay_s is not None and (
            isinstance(delay_s, bool) or not isinstance(delay_s, int | float)
        ):
            raise TypeError(f"delay_s must be a number, got {type(delay_s).__name__}")
        if delay_level is not None and (
            isinstance(delay_level, bool) or not isinstance(delay_level, int)
        ):
            raise TypeError(f"delay_level must be an int, got {type(delay_level).__name__}")
        set_field = object.__setattr__  # frozen: the dataclass's own __setattr__ refuses
        set_field(self, "body", body)
        set_field(self, "tag", tag)
        set_field(self, "keys", keys)
        set_field(self, "properties", properties)
        set_field(self, "message_id", message_id)
        set_field(self, "message_group", message_group)
        set_field(self, "deliver_at", deliver_at)
        set_field(self, "delay_s", delay_s)
        set_field(self, "delay_level", delay_level)
        set_field(self, "dedup_id", dedup_id)

    def to_proto(
        self, topic: str, *, into: messaging_pb2.OutgoingMessage | None = None
    ) -> messaging_pb2.OutgoingMessage:
        """Build the wire message for sending this message to ``topic``.

        Args:
            topic: The topic to send to.
            into: An empty message to fill and return instead of a new one, e.g.
                ``request.messages.add()``: a message appended to a request is copied, one
                filled in place is not.

        Raises:
            InvalidArgumentError: More than one of deliver_at, delay_s and delay_level is
                set, or one of them is out of range.
        """
        check_schedule(
            0, deliver_at=self.deliver_at, delay_s=self.delay_s, delay_level=self.delay_level
        )
        # Field by field, and only the fields that are set: upb's keyword constructor costs
        # ~2 us more, most of it for an empty map.
        wire = messaging_pb2.OutgoingMessage() if into is None else into
        wire.topic = topic
        wire.body = self.body
        if self.tag:
            wire.tag = self.tag
        if self.keys:
            wire.keys.extend(self.keys)
        if self.properties:
            wire.properties.update(self.properties)
        if self.message_id:
            wire.message_id = self.message_id
        if self.message_group:
            wire.message_group = self.message_group
        if self.dedup_id:
            wire.dedup_id = self.dedup_id
        if self.deliver_at is None:
            if self.delay_s is not None:
                wire.delay.CopyFrom(duration_from_seconds(self.delay_s, name="delay_s"))
            elif self.delay_level is not None:
                wire.delay_level = self.delay_level
        elif isinstance(self.deliver_at, datetime):
            since_epoch = self.deliver_at - _EPOCH
            wire.delivery_time.FromNanoseconds(
                (since_epoch.days * 86_400 + since_epoch.seconds) * _NANOS_PER_SECOND
                + since_epoch.microseconds * 1000
            )
        else:
            wire.delivery_time.FromNanoseconds(round(self.deliver_at * _NANOS_PER_SECOND))
        return wire


@dataclass(frozen=True, slots=True)
class SendReceipt:
    """Where a sent message was stored.

    Attributes:
        message_id: The message id (client-assigned or server-assigned).
        topic: Topic the message was stored in.
        queue_id: Queue of the topic the message was stored in.
        offset: Offset of the message in its queue (dense, from 0); -1 for a delayed
            message, whose offset is assigned when it is due.
        recall_handle: For a delayed message, what ``recall`` takes to cancel it before it
            is due; empty otherwise.
        duplicate: True when the send repeated a dedup id within the server's dedup window:
            the message was not stored again and this receipt is the first send's.
        transaction_id: For a half message (a transaction's send): the transaction the
            commit or rollback names; its offset is -1. Empty otherwise.
    """

    message_id: str
    topic: str
    queue_id: int
    offset: int
    recall_handle: str = ""
    duplicate: bool = False
    transaction_id: str = ""

    @classmethod
    def from_proto(cls, result: messaging_pb2.SendResult) -> SendReceipt:
        """Build a receipt from one entry of a SendMessages response."""
        # Positional: keyword matching costs more than the six reads (once per message).
        return cls(
            result.message_id,
            result.topic,
            result.queue_id,
            result.offset,
            result.recall_handle,
            result.duplicate,
            result.transaction_id,
        )


@dataclass(slots=True)
class ReceivedMessage:
    """A popped message with the receipt handle that owns this delivery.

    Mutable on purpose: ``change_invisible_duration`` replaces ``receipt_handle`` and
    ``invisible_until`` in place, because the server invalidates the old handle.

    Attributes:
        message_id: Message id assigned at send.
        topic: Topic the message was sent to (the original topic for a retried message).
        queue_id: Queue of the copy being delivered.
        offset: Offset of the copy being delivered in its queue.
        body: Payload, as the producer gave it (a compressed body is decoded).
        tag: Tag, or empty.
        keys: Business keys.
        properties: User properties.
        born_timestamp: When the producer created the message (UTC).
        store_timestamp: When the server stored the message (UTC).
        delivery_attempt: 1 on first delivery, +1 on every redelivery.
        receipt_handle: Opaque handle to ack, nack or change the invisible time.
        invisible_until: When the message becomes visible again unless acked (UTC).
        message_group: FIFO group, or empty.
        deliver_at: For a delayed message, when it was due (UTC); None otherwise.
        born_host: Host that built the message, or empty.
        body_encoding: Empty, except when this client could not decode the body (an
            unknown encoding or corrupt data, logged as a warning): then the encoding the
            producer named, and ``body`` holds the bytes as stored. Such a message is
            still delivered so the application can ack it or leave it to the DLQ.
    """

    message_id: str
    topic: str
    queue_id: int
    offset: int
    body: bytes
    tag: str
    keys: tuple[str, ...]
    properties: dict[str, str]
    born_timestamp: datetime
    store_timestamp: datetime
    delivery_attempt: int
    receipt_handle: str
    invisible_until: datetime
    message_group: str = ""
    deliver_at: datetime | None = None
    born_host: str = ""
    body_encoding: str = ""

    @classmethod
    def from_proto(cls, message: messaging_pb2.ReceivedMessage) -> ReceivedMessage:
        """Build a received message from one entry of a Pop response, decoding the body."""
        body = message.body
        body_encoding = message.body_encoding
        if body_encoding:
            try:
                body = decode_body(body, body_encoding)
                body_encoding = ""
            except BodyDecodeError as exc:
                logger.warning(
                    "message %s on %s: cannot decode its body (%s); delivering it as stored",
                    message.message_id,
                    message.topic,
                    exc,
                )
        # Read once per message and field: each upb read builds a new Python object, and an
        # empty repeated field or map is cheaper to test than to copy.
        keys = message.keys
        properties = message.properties
        # Positional, in field order: 17 keywords cost more than the conversions.
        return cls(
            message.message_id,
            message.topic,
            message.queue_id,
            message.offset,
            body,
            message.tag,
            tuple(keys) if keys else (),
            dict(properties) if properties else {},
            datetime_from_timestamp(message.born_time),
            datetime_from_timestamp(message.store_time),
            message.delivery_attempt,
            message.receipt_handle,
            datetime_from_timestamp(message.invisible_until),
            message.message_group,
            (
                datetime_from_timestamp(message.deliver_time)
                if message.HasField("deliver_time")
                else None
            ),
            message.born_host,
            body_encoding,
        )

    def to_proto(self) -> messaging_pb2.ReceivedMessage:
        """Build the wire form (for tests and tools that replay deliveries)."""
        return messaging_pb2.ReceivedMessage(
            message_id=self.message_id,
            topic=self.topic,
            queue_id=self.queue_id,
            offset=self.offset,
            body=self.body,
            tag=self.tag,
            keys=list(self.keys),
            properties=dict(self.properties),
            born_time=self.born_timestamp,
            store_time=self.store_timestamp,
            delivery_attempt=self.delivery_attempt,
            receipt_handle=self.receipt_handle,
            invisible_until=self.invisible_until,
            message_group=self.message_group,
            deliver_time=self.deliver_at,
            born_host=self.born_host,
            body_encoding=self.body_encoding,
        )


@dataclass(frozen=True, slots=True)
class Sql:
    """A SQL92 filter over message properties, evaluated by the server (RocketMQ's syntax).

    ``SimpleConsumer(..., filter=Sql("region = 'eu' AND amount > 100"))``; a plain string
    filter is a tag expression instead. The server parses the expression and reports a
    syntax error as ``InvalidArgumentError`` with its position.

    Attributes:
        expression: The condition, e.g. ``"amount > 100 AND vip IS NOT NULL"``.
    """

    expression: str

    def __post_init__(self) -> None:
        if not isinstance(self.expression, str):
            raise TypeError(f"Sql expression must be a str, got {type(self.expression).__name__}")
        if not self.expression.strip():
            raise InvalidArgumentError(
                'Sql expression is empty: give a condition such as "amount > 100", '
                'or use filter="*" to receive everything'
            )
