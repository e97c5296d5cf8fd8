"""What ``Admin.inspect_group`` returns: a consumer group's runtime view (held long polls,
messages in flight and the clients holding them, revive lag, blocked FIFO heads), with its
proto conversions."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from google.protobuf import timestamp_pb2
from google.protobuf.message import Message

from popmq._gen.popmq.v1 import admin_pb2
from popmq.sdk.types import datetime_from_timestamp, seconds_from_duration

__all__ = [
    "BlockedHead",
    "ConsumerInflight",
    "DeliveryEvent",
    "GroupInspection",
    "HeldPolls",
    "InflightMessage",
    "ReviveLag",
]

MAX_INFLIGHT_PAGE = 1000
"""The largest in-flight page the server answers."""


def _time(owner: Message, name: str) -> datetime | None:
    if not owner.HasField(name):
        return None
    value: timestamp_pb2.Timestamp = getattr(owner, name)
    return datetime_from_timestamp(value)


@dataclass(frozen=True, slots=True)
class HeldPolls:
    """Pops of the group held (long polling) on one queue now.

    Attributes:
        topic: The user topic.
        queue_id: The queue they pop, or -1 for pops of every queue of the topic.
        count: Pops held.
        broker: The broker holding them (cluster mode; "" in local mode).
    """

    topic: str
    queue_id: int
    count: int
    broker: str = ""


@dataclass(frozen=True, slots=True)
class InflightMessage:
    """A message of the group popped and not yet acked, nacked back or redelivered.

    Attributes:
        topic: The user topic.
        queue_id: Queue id (0 for the retry queue).
        retry: True for the group's retry queue of this topic.
        offset: Offset in that queue.
        message_id: Message id.
        delivery_attempt: Delivery attempt of this delivery (1 for the first).
        pop_time: When this delivery was made or its invisible time last changed.
        invisible_until: When it becomes visible again unless acked first (None for a
            waiting FIFO message without a backoff).
        waiting: A FIFO message read but not delivered: it waits behind its message
            group's head.
        broker: The broker holding it (cluster mode; "" in local mode).
        client_id: The client that popped it ("" when its pop named none, or for a
            waiting FIFO message).
    """

    topic: str
    queue_id: int
    retry: bool
    offset: int
    message_id: str
    delivery_attempt: int
    pop_time: datetime | None
    invisible_until: datetime | None
    waiting: bool = False
    broker: str = ""
    client_id: str = ""

    @classmethod
    def from_proto(cls, m: admin_pb2.InflightMessage) -> InflightMessage:
        """Build a row from its wire form."""
        return cls(
            topic=m.topic,
            queue_id=m.queue_id,
            retry=m.retry,
            offset=m.offset,
            message_id=m.message_id,
            delivery_attempt=m.delivery_attempt,
            pop_time=_time(m, "pop_time"),
            invisible_until=_time(m, "invisible_until"),
            waiting=m.waiting,
            broker=m.broker,
            client_id=m.client_id,
        )


@dataclass(frozen=True, slots=True)
class ConsumerInflight:
    """The group's messages in flight that one client popped (every broker's).

    Attributes:
        client_id: The client ("" for pops that named none).
        count: Messages it holds in flight.
        earliest_invisible_until: The earliest deadline among them.
    """

    client_id: str
    count: int
    earliest_invisible_until: datetime | None

    @classmethod
    def from_proto(cls, c: admin_pb2.ConsumerInflight) -> ConsumerInflight:
        """Build a row from its wire form."""
        return cls(c.client_id, c.count, _time(c, "earliest_invisible_until"))


@dataclass(frozen=True, slots=True)
class ReviveLag:
    """How late redelivery runs on one broker.

    Attributes:
        lag_s: Now minus the deadline of the oldest due delivery not redelivered yet; 0
            when none is due.
        oldest_due: That deadline (None when nothing is due).
        next_deadline: The earliest deadline of any delivery in flight on the broker
            (every group; None when none).
        live_checkpoints: Pops that still owe a message (every group).
        broker: The broker (cluster mode; "" in local mode).
    """

    lag_s: float
    oldest_due: datetime | None
    next_deadline: datetime | None
    live_checkpoints: int
    broker: str = ""

    @classmethod
    def from_proto(cls, r: admin_pb2.ReviveLag) -> ReviveLag:
        """Build a row from its wire form."""
        return cls(
            lag_s=seconds_from_duration(r.lag),
            oldest_due=_time(r, "oldest_due"),
            next_deadline=_time(r, "next_deadline"),
            live_checkpoints=r.live_checkpoints,
            broker=r.broker,
        )


@dataclass(frozen=True, slots=True)
class BlockedHead:
    """A FIFO message group waiting for its head message.

    Attributes:
        topic: The user topic.
        queue_id: Queue id.
        message_group: The message group.
        offset: The head's offset.
        message_id: The head's message id.
        delivery_attempt: The head's delivery attempt.
        invisible_until: Delivered head: when it becomes visible again; held head: when
            its nack backoff ends.
        delivered: True when the head is in flight; False when it waits for a backoff.
        waiting: Messages of the message group read behind the head, not delivered yet.
        broker: The broker holding the queue (cluster mode; "" in local mode).
    """

    topic: str
    queue_id: int
    message_group: str
    offset: int
    message_id: str
    delivery_attempt: int
    invisible_until: datetime | None
    delivered: bool
    waiting: int
    broker: str = ""

    @classmethod
    def from_proto(cls, b: admin_pb2.BlockedHead) -> BlockedHead:
        """Build a row from its wire form."""
        return cls(
            topic=b.topic,
            queue_id=b.queue_id,
            message_group=b.message_group,
            offset=b.offset,
            message_id=b.message_id,
            delivery_attempt=b.delivery_attempt,
            invisible_until=_time(b, "invisible_until"),
            delivered=b.delivered,
            waiting=b.waiting,
            broker=b.broker,
        )


@dataclass(frozen=True, slots=True)
class DeliveryEvent:
    """One step of a message's delivery history (``Admin.message_history``).

    Attributes:
        time: When it happened.
        event: ``stored``, ``pop``, ``nack``, ``change_invisible_time``, ``retry`` (its
            invisible time passed: copied to the group's retry queue), ``dead_letter`` or
            ``redeliver`` (a FIFO message delivered again in place).
        group: The group it concerns ("" for ``stored``).
        topic: The user topic.
        queue_id: Queue id (0 for the retry queue).
        retry: The step concerns the copy in the group's retry queue of the topic.
        offset: Offset in that queue.
        delivery_attempt: The attempt concerned (for ``retry`` and ``dead_letter``: the
            one that expired).
        invisible_until: ``pop``, ``nack``, ``change_invisible_time``: when it becomes
            visible again unless acked (else None).
        to_topic: ``retry``, ``dead_letter``: the topic of the copy (else "").
        to_offset: ``retry``, ``dead_letter``: the copy's offset (else -1).
        broker: The broker that recorded it (cluster mode; "" in local mode).
        client_id: ``pop``, ``nack``, ``change_invisible_time``: the client holding the
            delivery; ``retry``, ``dead_letter``, ``redeliver``: the one whose delivery
            expired ("" when unknown).
    """

    time: datetime
    event: str
    group: str
    topic: str
    queue_id: int
    retry: bool
    offset: int
    delivery_attempt: int
    invisible_until: datetime | None
    to_topic: str
    to_offset: int
    broker: str = ""
    client_id: str = ""

    @classmethod
    def from_proto(cls, e: admin_pb2.DeliveryEvent) -> DeliveryEvent:
        """Build a step from its wire form."""
        return cls(
            time=datetime_from_timestamp(e.time),
            event=e.event,
            group=e.group,
            topic=e.topic,
            queue_id=e.queue_id,
            retry=e.retry,
            offset=e.offset,
            delivery_attempt=e.delivery_attempt,
            invisible_until=_time(e, "invisible_until"),
            to_topic=e.to_topic,
            to_offset=e.to_offset,
            broker=e.broker,
            client_id=e.client_id,
        )


@dataclass(frozen=True, slots=True)
class GroupInspection:
    """A consumer group's runtime view (``Admin.inspect_group``).

    Attributes:
        held_polls: The long polls held now, by topic and queue.
        inflight: A page of messages in flight, by queue and offset.
        next_page_token: Pass it as ``page_token`` for the next page; "" after the last.
        revive: How late redelivery runs, one row per broker.
        blocked_heads: Blocked FIFO message groups, the longest-held first (at most 100
            per broker).
        blocked_groups: Blocked FIFO message groups in all.
        now: The server's time when it looked.
        consumers: Every message in flight (not only this page's) per client that popped
            it, the most first, at most 1,000 clients; waiting FIFO messages are not counted.
        consumer_count: Clients holding messages in all (more than ``consumers`` lists when
            above its cap).
    """

    held_polls: list[HeldPolls]
    inflight: list[InflightMessage]
    next_page_token: str
    revive: list[ReviveLag]
    blocked_heads: list[BlockedHead]
    blocked_groups: int
    now: datetime
    consumers: list[ConsumerInflight] = field(default_factory=list)
    consumer_count: int = 0

    @classmethod
    def from_proto(cls, r: admin_pb2.InspectGroupResponse) -> GroupInspection:
        """Build a view from an InspectGroup response."""
        return cls(
            held_polls=[HeldPolls(h.topic, h.queue_id, h.count, h.broker) for h in r.held_polls],
            inflight=[InflightMessage.from_proto(m) for m in r.inflight],
            next_page_token=r.next_page_token,
            revive=[ReviveLag.from_proto(v) for v in r.revive],
            blocked_heads=[BlockedHead.from_proto(b) for b in r.blocked_heads],
            blocked_groups=r.blocked_groups,
            now=datetime_from_timestamp(r.now),
            consumers=[ConsumerInflight.from_proto(c) for c in r.consumers],
            consumer_count=r.consumer_count,
        )
