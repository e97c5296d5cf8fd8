"""What the admin API returns and takes: topics, groups and their settings, lag, offset
resets, stored messages and redrives, server info; with their proto conversions."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from popmq.sdk._compression import BodyDecodeError, decode_body
from popmq.sdk.types import (
    Sql,
    datetime_from_timestamp,
    duration_from_seconds,
    enum_suffix,
    seconds_from_duration,
)

__all__ = [
    "ExponentialBackoff",
    "Group",
    "LagReport",
    "OffsetChange",
    "OffsetReset",
    "QueueLag",
    "QueueStats",
    "RedriveOutcome",
    "RedriveResult",
    "ServerInfo",
    "StoredMessage",
    "Subscription",
    "Topic",
    "TopicDescription",
    "TopicLag",
]

logger = logging.getLogger(__name__)


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
            message_type=enum_suffix(admin_pb2.MessageType.Name, message_type, "MESSAGE_TYPE_"),
            kind=enum_suffix(admin_pb2.TopicKind.Name, topic.kind, "TOPIC_KIND_"),
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
        consume_from = enum_suffix(
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
        outcomes: For a redrive of named dead letters, each of them in the order asked.
    """

    moved: int
    dropped: int
    remaining: int
    outcomes: tuple[RedriveOutcome, ...] = ()

    @classmethod
    def from_proto(cls, m: admin_pb2.RedriveDeadLettersResponse) -> RedriveResult:
        return cls(
            m.moved,
            m.dropped,
            m.remaining,
            tuple(
                RedriveOutcome(
                    o.queue_id,
                    o.offset,
                    enum_suffix(admin_pb2.RedriveOutcome.Name, o.outcome, "REDRIVE_OUTCOME_"),
                )
                for o in m.outcomes
            ),
        )


@dataclass(frozen=True, slots=True)
class RedriveOutcome:
    """What a redrive of named dead letters did with one of them.

    Attributes:
        queue_id: Its queue in ``%DLQ%<group>``, as named.
        offset: Its offset, as named.
        outcome: ``"moved"`` (back to its topic), ``"dropped"`` (its topic is gone) or
            ``"not_found"`` (not stored: never, or already redriven, purged or expired).
    """

    queue_id: int
    offset: int
    outcome: str


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
