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

from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from popmq.sdk._compression import BodyDecodeError, decode_body
from popmq.sdk._validation import check_schedule
from popmq.sdk.errors import InvalidArgumentError

__all__ = [
    "BrokerStatus",
    "ClusterStatus",
    "EtcdEndpointStatus",
    "ExponentialBackoff",
    "Group",
    "LagReport",
    "Message",
    "OffsetChange",
    "OffsetReset",
    "Policy",
    "ProxyStatus",
    "QueueLag",
    "QueueStats",
    "ReceivedMessage",
    "RedriveResult",
    "SendReceipt",
    "ServerInfo",
    "Sql",
    "StoredMessage",
    "Subscription",
    "Topic",
    "TopicDescription",
    "TopicLag",
    "User",
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


def _enum_suffix(name_of: Callable[[int], str], value: int, prefix: str) -> str:
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


@dataclass(frozen=True, slots=True)
class Topic:
    """A named set of queues.

    Attributes:
        name: Topic name.
        queues: Number of queues.
        message_type: Messages the topic accepts: ``"normal"``.
        kind: ``"normal"`` for a user topic, ``"dlq"`` for a dead-letter topic.
        create_time: When the topic was created (UTC).
    """

    name: str
    queues: int
    message_type: str
    kind: str
    create_time: datetime

    @classmethod
    def from_proto(cls, topic: admin_pb2.Topic) -> Topic:
        """Build a topic from its wire form."""
        # The proto treats an unspecified message type as NORMAL; say so explicitly.
        message_type = topic.message_type or admin_pb2.MESSAGE_TYPE_NORMAL
        return cls(
            name=topic.name,
            queues=topic.queues,
            message_type=_enum_suffix(admin_pb2.MessageType.Name, message_type, "MESSAGE_TYPE_"),
            kind=_enum_suffix(admin_pb2.TopicKind.Name, topic.kind, "TOPIC_KIND_"),
            create_time=datetime_from_timestamp(topic.create_time),
        )


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Offsets of one queue of a topic.

    Attributes:
        queue_id: Queue id, 0..queues-1.
        min_offset: Smallest offset still stored.
        max_offset: Offset the next message will get (number of messages ever stored).
        message_count: Messages stored now (``max_offset - min_offset``).
        last_store_time: When the newest message was stored (UTC); None for an empty queue.
        broker: The broker holding the queue (cluster mode; "" in local mode).
    """

    queue_id: int
    min_offset: int
    max_offset: int
    message_count: int = 0
    last_store_time: datetime | None = None
    broker: str = ""

    @classmethod
    def from_proto(cls, stats: admin_pb2.QueueStats) -> QueueStats:
        """Build queue stats from their wire form."""
        return cls(
            queue_id=stats.queue_id,
            min_offset=stats.min_offset,
            max_offset=stats.max_offset,
            message_count=stats.message_count,
            last_store_time=(
                datetime_from_timestamp(stats.last_store_time)
                if stats.HasField("last_store_time")
                else None
            ),
            broker=stats.broker,
        )


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic with the offsets of each of its queues.

    Attributes:
        topic: The topic.
        queues: One entry per queue, by queue id.
        consumer_groups: Groups that have consumed the topic, sorted by name.
    """

    topic: Topic
    queues: list[QueueStats]
    consumer_groups: tuple[str, ...] = ()

    @classmethod
    def from_proto(cls, response: admin_pb2.GetTopicResponse) -> TopicDescription:
        """Build a description from a GetTopic response."""
        return cls(
            topic=Topic.from_proto(response.topic),
            queues=[QueueStats.from_proto(q) for q in response.queues],
            consumer_groups=tuple(response.consumer_groups),
        )


@dataclass(frozen=True, slots=True)
class Group:
    """A consumer group and its delivery settings.

    Attributes:
        name: Group name.
        max_delivery_attempts: Deliveries before a message goes to ``%DLQ%<group>``.
        retry_backoff_s: Nack delay by delivery attempt in seconds (attempt n uses entry
            n-1; the last entry repeats).
        create_time: When the group was created (UTC).
        auto_created: True when the group was created implicitly by its first use.
        exponential_backoff: The policy ``retry_backoff_s`` was computed from, if any.
        fifo: True for a FIFO group (messages of one message group in send order).
        subscriptions: Declared subscriptions, sorted by topic.
        consume_from: Where the group starts in queues it never consumed: ``"first"``,
            ``"last"`` or ``"timestamp"``.
        consume_from_time: The time for ``consume_from="timestamp"`` (UTC), else None.
    """

    name: str
    max_delivery_attempts: int
    retry_backoff_s: tuple[float, ...]
    create_time: datetime
    auto_created: bool
    exponential_backoff: ExponentialBackoff | None = None
    fifo: bool = False
    subscriptions: tuple[Subscription, ...] = ()
    consume_from: str = "first"
    consume_from_time: datetime | None = None

    @classmethod
    def from_proto(cls, group: admin_pb2.Group) -> Group:
        """Build a group from its wire form."""
        consume_from = _enum_suffix(
            admin_pb2.ConsumeFrom.Name,
            group.consume_from or admin_pb2.CONSUME_FROM_FIRST_OFFSET,
            "CONSUME_FROM_",
        ).removesuffix("_offset")
        return cls(
            name=group.name,
            max_delivery_attempts=group.max_delivery_attempts,
            retry_backoff_s=tuple(seconds_from_duration(d) for d in group.retry_backoff),
            create_time=datetime_from_timestamp(group.create_time),
            auto_created=group.auto_created,
            exponential_backoff=(
                ExponentialBackoff.from_proto(group.exponential_backoff)
                if group.HasField("exponential_backoff")
                else None
            ),
            fifo=group.fifo,
            subscriptions=tuple(Subscription.from_proto(s) for s in group.subscriptions),
            consume_from=consume_from,
            consume_from_time=(
                datetime_from_timestamp(group.consume_from_time)
                if group.HasField("consume_from_time")
                else None
            ),
        )


@dataclass(frozen=True, slots=True)
class QueueLag:
    """A consumer group's position in one queue.

    Attributes:
        topic: The user topic.
        queue_id: Queue id (0 for the retry queue).
        retry: True for the group's retry queue of this topic.
        consumer_offset: Next offset the group has not yet finished with.
        max_offset: Offset the next stored message will get.
        lag: ``max_offset - consumer_offset``.
        inflight: Messages popped and neither acked nor redelivered yet.
        retention_skipped: Messages retention deleted before the group consumed them.
        oldest_unacked_age_s: Age of the oldest message not yet acked; 0 when none.
        broker: The broker holding the queue (cluster mode; "" in local mode). In cluster
            mode each broker has its own retry queue of the group.
    """

    topic: str
    queue_id: int
    retry: bool
    consumer_offset: int
    max_offset: int
    lag: int
    inflight: int
    retention_skipped: int = 0
    oldest_unacked_age_s: float = 0.0
    broker: str = ""

    @classmethod
    def from_proto(cls, lag: admin_pb2.QueueLag) -> QueueLag:
        """Build a lag row from its wire form."""
        return cls(
            topic=lag.topic,
            queue_id=lag.queue_id,
            retry=lag.retry,
            consumer_offset=lag.consumer_offset,
            max_offset=lag.max_offset,
            lag=lag.lag,
            inflight=lag.inflight,
            retention_skipped=lag.retention_skipped,
            oldest_unacked_age_s=seconds_from_duration(lag.oldest_unacked_age),
            broker=lag.broker,
        )


# -- admin (AdminService) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExponentialBackoff:
    """A consumer group's redelivery backoff, as a policy: the nack delay ``initial_s *
    multiplier ** (attempt - 1)``, capped at ``max_s``, which the server turns into the
    group's ``retry_backoff_s`` (the ``exponential_backoff`` setting of a group).

    RocketMQ's exponential retry policy defaults: 5 s, 2 h, 2. Not the producer's wait between
    send attempts: that is ``RetryBackoff`` (``RetryPolicy.backoff``).

    Attributes:
        initial_s: Delay after the first delivery, 1 s to 12 h.
        max_s: Largest delay, ``initial_s`` to 12 h.
        multiplier: Growth per attempt, 1 to 10.
    """

    initial_s: float = 5.0
    max_s: float = 7200.0
    multiplier: float = 2.0

    @classmethod
    def from_proto(cls, value: admin_pb2.ExponentialBackoff) -> ExponentialBackoff:
        """Build a policy from its wire form."""
        return cls(
            initial_s=seconds_from_duration(value.initial),
            max_s=seconds_from_duration(value.max),
            multiplier=value.multiplier,
        )

    def to_proto(self) -> admin_pb2.ExponentialBackoff:
        """Build the wire form."""
        return admin_pb2.ExponentialBackoff(
            initial=duration_from_seconds(self.initial_s, name="exponential_backoff.initial_s"),
            max=duration_from_seconds(self.max_s, name="exponential_backoff.max_s"),
            multiplier=self.multiplier,
        )


@dataclass(frozen=True, slots=True)
class Subscription:
    """A group's subscription to a topic.

    Attributes:
        topic: The subscribed topic.
        filter: Which messages the group receives: a tag expression (``"TagA || TagB"``,
            ``"*"``) or ``Sql(...)``. A pop without a filter of its own uses this one.
    """

    topic: str
    filter: str | Sql = "*"

    @classmethod
    def from_proto(cls, value: admin_pb2.Subscription) -> Subscription:
        """Build a subscription from its wire form."""
        expression = value.filter.expression
        if value.filter.type == messaging_pb2.FILTER_TYPE_SQL:
            return cls(value.topic, Sql(expression))
        return cls(value.topic, expression or "*")

    def to_proto(self) -> admin_pb2.Subscription:
        """Build the wire form."""
        if isinstance(self.filter, Sql):
            expression = messaging_pb2.FilterExpression(
                type=messaging_pb2.FILTER_TYPE_SQL, expression=self.filter.expression
            )
        else:
            expression = messaging_pb2.FilterExpression(
                type=messaging_pb2.FILTER_TYPE_TAG, expression=self.filter
            )
        return admin_pb2.Subscription(topic=self.topic, filter=expression)


@dataclass(frozen=True, slots=True)
class TopicLag:
    """A consumer group's lag summed over one topic.

    Attributes:
        topic: The user topic.
        lag: Messages of the normal queues not yet finished.
        inflight: Messages in flight (normal and retry queues).
        retry_backlog: Messages waiting in the group's retry queue of the topic.
        oldest_unacked_age_s: Age of the oldest message not yet acked; 0 when none.
    """

    topic: str
    lag: int
    inflight: int
    retry_backlog: int
    oldest_unacked_age_s: float

    @classmethod
    def from_proto(cls, value: admin_pb2.TopicLag) -> TopicLag:
        """Build a topic summary from its wire form."""
        return cls(
            topic=value.topic,
            lag=value.lag,
            inflight=value.inflight,
            retry_backlog=value.retry_backlog,
            oldest_unacked_age_s=seconds_from_duration(value.oldest_unacked_age),
        )


@dataclass(frozen=True, slots=True)
class LagReport:
    """How far a group is behind: per queue, per topic, and its dead-letter depth.

    Attributes:
        queues: One row per (topic, queue), normal queues first, then the retry queue.
        topics: One row per topic, sorted by name.
        dlq_depth: Messages stored in the group's dead-letter topic ``%DLQ%<group>``.
    """

    queues: list[QueueLag]
    topics: list[TopicLag]
    dlq_depth: int

    @classmethod
    def from_proto(cls, response: admin_pb2.GetGroupLagResponse) -> LagReport:
        """Build a report from a GetGroupLag response."""
        return cls(
            queues=[QueueLag.from_proto(q) for q in response.queues],
            topics=[TopicLag.from_proto(t) for t in response.topics],
            dlq_depth=response.dlq_depth,
        )


@dataclass(frozen=True, slots=True)
class OffsetChange:
    """The reset of one queue's consumer offset.

    Attributes:
        queue_id: Queue id.
        old_offset: Consumer offset before the reset.
        new_offset: Consumer offset after the reset.
    """

    queue_id: int
    old_offset: int
    new_offset: int


@dataclass(frozen=True, slots=True)
class OffsetReset:
    """What an offset reset moved.

    Attributes:
        queues: One entry per reset queue, by queue id.
        dropped_inflight: In-flight deliveries a forced reset dropped.
    """

    queues: list[OffsetChange]
    dropped_inflight: int

    @classmethod
    def from_proto(cls, response: admin_pb2.ResetOffsetsResponse) -> OffsetReset:
        """Build the result from a ResetOffsets response."""
        return cls(
            queues=[OffsetChange(q.queue_id, q.old_offset, q.new_offset) for q in response.queues],
            dropped_inflight=response.dropped_inflight,
        )


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message as stored, read without consuming it (peek, query by id or key).

    Attributes:
        message_id: Message id assigned at send.
        topic: Topic it is stored in.
        queue_id: Queue it is stored in.
        offset: Its offset in that queue (-1: a delayed message not yet due).
        body: Payload, decoded when the producer compressed it.
        tag: Tag, or empty.
        keys: Business keys.
        properties: User properties.
        born_timestamp: When the producer created it (UTC).
        store_timestamp: When this copy was stored (UTC).
        delivery_attempt: Delivery attempt this copy is delivered as.
        origin_topic: For retry and dead-letter copies, the topic it was first sent to.
        origin_queue_id: For retry and dead-letter copies, the first copy's queue.
        origin_offset: For retry and dead-letter copies, the first copy's offset.
        message_group: FIFO message group, or empty.
        deliver_time: Delivery time of a delayed message (UTC), else None.
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
    origin_topic: str = ""
    origin_queue_id: int = 0
    origin_offset: int = 0
    message_group: str = ""
    deliver_time: datetime | None = None

    @classmethod
    def from_proto(cls, message: admin_pb2.StoredMessage) -> StoredMessage:
        """Build a stored message from its wire form (decoding a compressed body)."""
        try:
            body = decode_body(message.body, message.body_encoding)
        except BodyDecodeError:
            logger.warning(
                "message %s has a body encoded as %r that cannot be decoded; kept as stored",
                message.message_id,
                message.body_encoding,
            )
            body = message.body
        return cls(
            message_id=message.message_id,
            topic=message.topic,
            queue_id=message.queue_id,
            offset=message.offset,
            body=body,
            tag=message.tag,
            keys=tuple(message.keys),
            properties=dict(message.properties),
            born_timestamp=datetime_from_timestamp(message.born_time),
            store_timestamp=datetime_from_timestamp(message.store_time),
            delivery_attempt=message.delivery_attempt,
            origin_topic=message.origin_topic,
            origin_queue_id=message.origin_queue_id,
            origin_offset=message.origin_offset,
            message_group=message.message_group,
            deliver_time=(
                datetime_from_timestamp(message.deliver_time)
                if message.HasField("deliver_time")
                else None
            ),
        )


@dataclass(frozen=True, slots=True)
class RedriveResult:
    """What a dead-letter redrive did.

    Attributes:
        moved: Messages moved back to their topics.
        dropped: Messages removed without a move because their topic no longer exists.
        remaining: Messages still in the dead-letter topic.
    """

    moved: int
    dropped: int
    remaining: int


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """The running server's state.

    Attributes:
        version: popmq version.
        start_time: When the server started (UTC).
        uptime_s: Seconds since start.
        data_dir: Directory of the store.
        store_bytes: Bytes the store's files use on disk.
        topics: Number of user and dead-letter topics.
        groups: Number of consumer groups.
        config: The configuration in effect, ``"section.key"`` -> TOML value (secrets
            redacted); empty unless the caller is a SUPER user.
    """

    version: str
    start_time: datetime
    uptime_s: float
    data_dir: str
    store_bytes: int
    topics: int
    groups: int
    config: dict[str, str]

    @classmethod
    def from_proto(cls, response: admin_pb2.GetServerInfoResponse) -> ServerInfo:
        """Build server info from a GetServerInfo response."""
        return cls(
            version=response.version,
            start_time=datetime_from_timestamp(response.start_time),
            uptime_s=seconds_from_duration(response.uptime),
            data_dir=response.data_dir,
            store_bytes=response.store_bytes,
            topics=response.topics,
            groups=response.groups,
            config=dict(sorted(response.config.items())),
        )


def _optional(message: admin_pb2.BrokerStatus, name: str) -> int | None:
    return getattr(message, name) if message.HasField(name) else None


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """One follower of a replicated shard, as its leader sees it.

    Attributes:
        name: Its replica name.
        in_sync: In the in-sync set: sends wait for it, and it may be elected.
        lag_batches: Batches of the leader's log it lacks.
        lag_bytes: Bytes of those batches.
        lag_s: Age of the oldest batch it lacks (0 when only batches in flight).
    """

    name: str
    in_sync: bool
    lag_batches: int
    lag_bytes: int
    lag_s: float


@dataclass(frozen=True, slots=True)
class ShardReplication:
    """A replicated shard's leader (``popmq broker --shard``; docs/replication.md).

    Attributes:
        leader: The leader replica's name.
        epoch: Its epoch (fencing token).
        lsn: The last batch of its log.
        mode: ``"sync"`` or ``"async"``.
        min_insync: In-sync followers a send needs.
        followers: Its followers.
        terms: Times the leader's process became the shard's leader.
    """

    leader: str
    epoch: int
    lsn: int
    mode: str
    min_insync: int
    followers: tuple[ReplicaStatus, ...]
    terms: int

    @classmethod
    def from_proto(cls, message: admin_pb2.ShardReplication) -> ShardReplication:
        return cls(
            leader=message.leader,
            epoch=message.epoch,
            lsn=message.lsn,
            mode=message.mode,
            min_insync=message.min_insync,
            followers=tuple(
                ReplicaStatus(
                    name=f.name,
                    in_sync=f.in_sync,
                    lag_batches=f.lag_batches,
                    lag_bytes=f.lag_bytes,
                    lag_s=seconds_from_duration(f.lag),
                )
                for f in message.followers
            ),
            terms=message.terms,
        )


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    """One broker as the answering proxy sees it (``Admin.cluster_status``).

    Values measured by the broker are None when it did not answer just now.

    Attributes:
        name: Broker name.
        address: Its BrokerService ``HOST:PORT``; for a broker not registered now, the last
            one the proxy saw, or ``""``.
        live: Registered in etcd now (as the proxy's watch last saw it). A broker that
            routes name but that is not registered is listed with ``live`` false.
        reachable: Answered the proxy's status call just now, within a short deadline.
        error: Why it is not live or not reachable; ``""`` when it is both.
        epoch: Its registration's epoch (0 when not live).
        lease_ttl_s: Seconds its registration lease has left; None when etcd did not say.
        data_dir: Its store's directory (local mode only).
        store_bytes: Bytes of its store's files.
        disk_free_bytes: Bytes still free for the store on its data dir's filesystem.
        topics: Topics whose route gives it queues.
        queues: Queues it holds over those topics.
        messages_sent: Messages stored by sends since it started.
        messages_popped: Deliveries by pops since it started.
        messages_acked: Deliveries acked since it started.
        long_polls_held: Pops held waiting for a message now.
        isolated_for_s: Seconds until the proxy's sends use it again (0: they do).
        send_failures: Failed sends the proxy recorded on it.
        isolations: Times the proxy isolated it.
        send_latency_s: Latency of the proxy's last send to it.
        replication: For a replicated shard, its leader's replication state; None for a
            standalone broker or when it did not answer.
    """

    name: str
    address: str
    live: bool
    reachable: bool
    error: str
    epoch: int
    lease_ttl_s: float | None
    data_dir: str
    store_bytes: int | None
    disk_free_bytes: int | None
    topics: int
    queues: int
    messages_sent: int | None
    messages_popped: int | None
    messages_acked: int | None
    long_polls_held: int | None
    isolated_for_s: float
    send_failures: int
    isolations: int
    send_latency_s: float
    replication: ShardReplication | None = None

    @classmethod
    def from_proto(cls, message: admin_pb2.BrokerStatus) -> BrokerStatus:
        """Build a broker's status from its GetClusterStatus entry."""
        return cls(
            name=message.name,
            address=message.address,
            live=message.live,
            reachable=message.reachable,
            error=message.error,
            epoch=message.epoch,
            lease_ttl_s=(
                seconds_from_duration(message.lease_ttl) if message.HasField("lease_ttl") else None
            ),
            data_dir=message.data_dir,
            store_bytes=_optional(message, "store_bytes"),
            disk_free_bytes=_optional(message, "disk_free_bytes"),
            topics=message.topics,
            queues=message.queues,
            messages_sent=_optional(message, "messages_sent"),
            messages_popped=_optional(message, "messages_popped"),
            messages_acked=_optional(message, "messages_acked"),
            long_polls_held=_optional(message, "long_polls_held"),
            isolated_for_s=seconds_from_duration(message.isolated_for),
            send_failures=message.send_failures,
            isolations=message.isolations,
            send_latency_s=seconds_from_duration(message.send_latency),
            replication=(
                ShardReplication.from_proto(message.replication)
                if message.HasField("replication")
                else None
            ),
        )


@dataclass(frozen=True, slots=True)
class ProxyStatus:
    """One registered proxy.

    Attributes:
        name: Proxy name.
        address: The ``HOST:PORT`` clients reach it at.
        epoch: Its registration's epoch.
        this_proxy: True for the proxy that answered.
    """

    name: str
    address: str
    epoch: int
    this_proxy: bool


@dataclass(frozen=True, slots=True)
class EtcdEndpointStatus:
    """What one etcd endpoint said about itself, or why it said nothing.

    Attributes:
        endpoint: ``HOST:PORT``.
        reachable: Answered within the deadline.
        error: Why it is not reachable; ``""`` when it is.
        version: etcd version.
        db_size_bytes: Bytes of its backend database.
        leader: Member id of the leader it knows (0: none).
        member_id: Its own member id.
        revision: Its current revision.
        raft_term: Raft term.
        errors: Alarms and errors it reports.
    """

    endpoint: str
    reachable: bool
    error: str
    version: str
    db_size_bytes: int
    leader: int
    member_id: int
    revision: int
    raft_term: int
    errors: list[str]

    @property
    def is_leader(self) -> bool:
        """True when this endpoint's member is the leader."""
        return self.reachable and self.leader != 0 and self.leader == self.member_id


_CLUSTER_MODES = {admin_pb2.CLUSTER_MODE_LOCAL: "local", admin_pb2.CLUSTER_MODE_CLUSTER: "cluster"}


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """The cluster as the answering server sees it (``Admin.cluster_status``).

    Attributes:
        mode: ``"local"`` (``popmq serve``: one embedded broker, no proxies, no etcd) or
            ``"cluster"`` (``popmq proxy``).
        cluster: The cluster's name; ``""`` in local mode.
        proxy: The answering proxy's name (local mode: the server's address).
        brokers: Brokers by name: the live ones and those routes name.
        proxies: Registered proxies by name.
        proxies_stale: etcd did not answer: ``proxies`` is the last list read.
        proxies_read_time: When ``proxies`` was read from etcd; None when it never was.
        etcd: One entry per configured etcd endpoint; None in local mode.
    """

    mode: str
    cluster: str
    proxy: str
    brokers: list[BrokerStatus]
    proxies: list[ProxyStatus]
    proxies_stale: bool
    proxies_read_time: datetime | None
    etcd: list[EtcdEndpointStatus] | None

    @property
    def etcd_reachable(self) -> bool | None:
        """True when an etcd endpoint answered; None in local mode."""
        return None if self.etcd is None else any(e.reachable for e in self.etcd)

    @classmethod
    def from_proto(cls, response: admin_pb2.GetClusterStatusResponse) -> ClusterStatus:
        """Build the status from a GetClusterStatus response."""
        return cls(
            mode=_CLUSTER_MODES.get(response.mode, "unspecified"),
            cluster=response.cluster,
            proxy=response.proxy,
            brokers=[BrokerStatus.from_proto(b) for b in response.brokers],
            proxies=[
                ProxyStatus(name=p.name, address=p.address, epoch=p.epoch, this_proxy=p.this_proxy)
                for p in response.proxies
            ],
            proxies_stale=response.proxies_stale,
            proxies_read_time=(
                datetime_from_timestamp(response.proxies_read_time)
                if response.HasField("proxies_read_time")
                else None
            ),
            etcd=(
                [
                    EtcdEndpointStatus(
                        endpoint=e.endpoint,
                        reachable=e.reachable,
                        error=e.error,
                        version=e.version,
                        db_size_bytes=e.db_size_bytes,
                        leader=e.leader,
                        member_id=e.member_id,
                        revision=e.revision,
                        raft_term=e.raft_term,
                        errors=list(e.errors),
                    )
                    for e in response.etcd.endpoints
                ]
                if response.HasField("etcd")
                else None
            ),
        )


RESOURCE_TYPES = ("topic", "group", "cluster", "any")
"""What a policy can cover: topics, groups, the cluster (server info, users, policies), or
all of them."""
PATTERNS = ("literal", "prefixed", "any")
ACTIONS = ("pub", "sub", "create", "update", "delete", "get", "list", "all")
DECISIONS = ("allow", "deny")
USER_TYPES = ("normal", "super")


def _choice(name: str, value: str, allowed: Sequence[str]) -> str:
    lowered = value.lower() if isinstance(value, str) else value
    if lowered not in allowed:
        raise InvalidArgumentError(f"{name} {value!r} is not one of {', '.join(allowed)}")
    return str(lowered)


@dataclass(frozen=True, slots=True)
class Policy:
    """One entry of a user's access control list (RocketMQ's ACL 2.0 policy).

    Of the policies matching a request the most specific decides (a named resource type
    before ``"any"``; ``"literal"`` before ``"prefixed"`` before ``"any"``; a longer prefix
    first); ``"deny"`` wins a tie; no match refuses (docs/security.md).

    Attributes:
        resource_type: ``"topic"``, ``"group"``, ``"cluster"`` or ``"any"``.
        name: The topic or group name (``"literal"``), or its prefix (``"prefixed"``);
            ``""`` for pattern ``"any"`` and for the cluster.
        pattern: ``"literal"``, ``"prefixed"`` or ``"any"``; ``""`` (the default):
            ``"literal"`` with a name, ``"any"`` without.
        actions: Of ``"pub"``, ``"sub"``, ``"create"``, ``"update"``, ``"delete"``,
            ``"get"``, ``"list"``, ``"all"``. Empty only to revoke a whole policy.
        decision: ``"allow"`` or ``"deny"``.
        source_cidrs: It applies only to requests from these networks (IPv4 or IPv6
            CIDRs, or addresses); empty: from anywhere.
    """

    resource_type: str
    name: str = ""
    pattern: str = ""
    actions: tuple[str, ...] = ()
    decision: str = "allow"
    source_cidrs: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        resource: str,
        actions: Sequence[str] = (),
        *,
        deny: bool = False,
        source_cidrs: Sequence[str] = (),
    ) -> Policy:
        """A policy from RocketMQ-style resource text, as ``popmq acl grant`` takes it.

        ``"topic:orders"`` (literal), ``"topic:orders-*"`` (prefixed), ``"topic:*"`` (every
        topic); the same with ``"group:"`` or ``"any:"`` (topics and groups alike);
        ``"cluster"``; ``"*"`` (everything).
        """
        text = resource.strip()
        if text in ("*", "any:*"):
            return cls("any", "", "any", tuple(actions), _deny(deny), tuple(source_cidrs))
        if text.lower() == "cluster":
            return cls("cluster", "", "any", tuple(actions), _deny(deny), tuple(source_cidrs))
        kind, sep, name = text.partition(":")
        if not sep or kind.lower() not in ("topic", "group", "any") or not name:
            raise InvalidArgumentError(
                f"resource {resource!r} is not TYPE:NAME, TYPE:PREFIX*, TYPE:*, cluster or *"
                " (TYPE: topic, group or any)"
            )
        pattern = "literal"
        if name == "*":
            pattern, name = "any", ""
        elif name.endswith("*"):
            pattern, name = "prefixed", name[:-1]
        return cls(kind.lower(), name, pattern, tuple(actions), _deny(deny), tuple(source_cidrs))

    def to_proto(self) -> admin_pb2.Policy:
        """The wire form; a value outside the allowed ones raises InvalidArgumentError."""
        kind = _choice("resource_type", self.resource_type, RESOURCE_TYPES)
        pattern = _choice("pattern", self.pattern, ("", *PATTERNS))
        actions = [_choice("action", a, ACTIONS) for a in self.actions]
        decision = _choice("decision", self.decision, DECISIONS)
        return admin_pb2.Policy(
            resource_type=f"RESOURCE_TYPE_{kind.upper()}",
            pattern=f"RESOURCE_PATTERN_{(pattern or 'unspecified').upper()}",
            name=self.name,
            actions=[f"ACTION_{a.upper()}" for a in actions],
            decision=f"DECISION_{decision.upper()}",
            source_cidrs=list(self.source_cidrs),
        )

    @classmethod
    def from_proto(cls, policy: admin_pb2.Policy) -> Policy:
        """Build a policy from its wire form."""
        return cls(
            resource_type=_enum_suffix(
                admin_pb2.ResourceType.Name, policy.resource_type, "RESOURCE_TYPE_"
            ),
            name=policy.name,
            pattern=_enum_suffix(
                admin_pb2.ResourcePattern.Name, policy.pattern, "RESOURCE_PATTERN_"
            ),
            actions=tuple(
                _enum_suffix(admin_pb2.Action.Name, a, "ACTION_") for a in policy.actions
            ),
            decision=_enum_suffix(
                admin_pb2.Decision.Name, policy.decision or admin_pb2.DECISION_ALLOW, "DECISION_"
            ),
            source_cidrs=tuple(policy.source_cidrs),
        )

    @property
    def resource(self) -> str:
        """The resource as ``Policy.of`` reads it: ``"topic:orders-*"``, ``"cluster"``."""
        if self.resource_type == "cluster":
            return "cluster"
        pattern = self.pattern or ("literal" if self.name else "any")
        if self.resource_type == "any" and pattern == "any":
            return "*"
        suffix = {"any": "*", "prefixed": "*"}.get(pattern, "")
        return f"{self.resource_type}:{self.name}{suffix}"


def _deny(deny: bool) -> str:
    return "deny" if deny else "allow"


@dataclass(frozen=True, slots=True)
class User:
    """A user of the server's access control (its secret is never returned).

    Attributes:
        access_key: The access key the user signs requests with.
        user_type: ``"normal"`` (checked against its policies) or ``"super"`` (not checked;
            may manage users and policies).
        enabled: A disabled user's requests are refused.
        secret_fingerprint: The first 16 hex digits of the SHA-256 of its secret key:
            compare with ``printf %s "$SECRET" | sha256sum | cut -c1-16``.
        policy_count: Number of policies in its access control list.
        create_time: When it was created (UTC).
        update_time: When it or its policies last changed (UTC).
    """

    access_key: str
    user_type: str
    enabled: bool
    secret_fingerprint: str
    policy_count: int
    create_time: datetime
    update_time: datetime

    @classmethod
    def from_proto(cls, user: admin_pb2.User) -> User:
        """Build a user from its wire form."""
        return cls(
            access_key=user.access_key,
            user_type=_enum_suffix(admin_pb2.UserType.Name, user.user_type, "USER_TYPE_"),
            enabled=user.enabled,
            secret_fingerprint=user.secret_fingerprint,
            policy_count=user.policy_count,
            create_time=datetime_from_timestamp(user.create_time),
            update_time=datetime_from_timestamp(user.update_time),
        )
