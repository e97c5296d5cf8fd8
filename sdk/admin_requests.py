"""The requests the admin clients build from their arguments, checked on the client: what
a topic or group is created or updated with, and offset resets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from google.protobuf import timestamp_pb2

from popmq._gen.popmq.v1 import admin_pb2
from popmq.sdk.admin_types import ExponentialBackoff, Subscription
from popmq.sdk.errors import InvalidArgumentError
from popmq.sdk.types import duration_from_seconds

__all__ = [
    "MESSAGE_TYPES",
    "Time",
    "build_create_group_request",
    "build_create_topic_request",
    "build_reset_offsets_request",
    "build_update_group_request",
    "timestamp_of",
    "user_type_of",
]

MESSAGE_TYPES = ("normal", "fifo", "delay", "transaction", "mixed")
"""Message types a topic can accept (RocketMQ 5's TopicMessageType)."""

Time = datetime | float
"""A point in time: a timezone-aware datetime or seconds since the epoch."""


def timestamp_of(value: Time, *, name: str) -> timestamp_pb2.Timestamp:
    """A proto Timestamp; a naive datetime is refused (its time zone would be a guess)."""
    stamp = timestamp_pb2.Timestamp()
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidArgumentError(
                f"{name} is a naive datetime: give one with a time zone (e.g. tzinfo=UTC)"
            )
        stamp.FromDatetime(value)
        return stamp
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise InvalidArgumentError(
            f"{name} must be a timezone-aware datetime or epoch seconds >= 0, got {value!r}"
        )
    stamp.FromNanoseconds(round(value * 1_000_000_000))
    return stamp


def _message_type(value: str | None) -> str:
    """The MessageType enum name of "normal", "fifo", ... (None: unspecified)."""
    if value is None:
        return "MESSAGE_TYPE_UNSPECIFIED"
    if value not in MESSAGE_TYPES:
        raise InvalidArgumentError(
            f"message_type {value!r} is not one of {', '.join(MESSAGE_TYPES)}"
        )
    return f"MESSAGE_TYPE_{value.upper()}"


def _set_consume_from(
    request: admin_pb2.CreateGroupRequest | admin_pb2.UpdateGroupRequest,
    consume_from: str | Time,
) -> None:
    if consume_from == "first":
        request.consume_from = admin_pb2.CONSUME_FROM_FIRST_OFFSET
    elif consume_from == "last":
        request.consume_from = admin_pb2.CONSUME_FROM_LAST_OFFSET
    elif isinstance(consume_from, str):
        raise InvalidArgumentError(
            f"consume_from {consume_from!r} is not 'first', 'last' or a time"
        )
    else:
        request.consume_from = admin_pb2.CONSUME_FROM_TIMESTAMP
        request.consume_from_time.CopyFrom(timestamp_of(consume_from, name="consume_from"))


def build_create_topic_request(
    name: str, queues: int | None, message_type: str | None = None
) -> admin_pb2.CreateTopicRequest:
    """Build a CreateTopic request; ``None`` leaves the server defaults (8 queues, normal)."""
    request = admin_pb2.CreateTopicRequest(name=name, message_type=_message_type(message_type))
    if queues is not None:
        request.queues = queues
    return request


def build_create_group_request(
    name: str,
    max_delivery_attempts: int | None,
    retry_backoff_s: Sequence[float] | None,
    *,
    exponential_backoff: ExponentialBackoff | None = None,
    fifo: bool = False,
    subscriptions: Sequence[Subscription] = (),
    consume_from: str | Time | None = None,
) -> admin_pb2.CreateGroupRequest:
    """Build a CreateGroup request; ``None`` arguments leave the server defaults."""
    request = admin_pb2.CreateGroupRequest(
        name=name, fifo=fifo, subscriptions=[s.to_proto() for s in subscriptions]
    )
    if max_delivery_attempts is not None:
        request.max_delivery_attempts = max_delivery_attempts
    if retry_backoff_s is not None:
        request.retry_backoff.extend(
            duration_from_seconds(s, name="retry_backoff_s") for s in retry_backoff_s
        )
    if exponential_backoff is not None:
        request.exponential_backoff.CopyFrom(exponential_backoff.to_proto())
    if consume_from is not None:
        _set_consume_from(request, consume_from)
    return request


def build_update_group_request(
    name: str,
    *,
    max_delivery_attempts: int | None = None,
    retry_backoff_s: Sequence[float] | None = None,
    exponential_backoff: ExponentialBackoff | None = None,
    fifo: bool | None = None,
    set_subscriptions: Sequence[Subscription] = (),
    remove_subscriptions: Sequence[str] = (),
    consume_from: str | Time | None = None,
) -> admin_pb2.UpdateGroupRequest:
    """Build an UpdateGroup request; ``None`` and empty arguments keep the current value."""
    request = admin_pb2.UpdateGroupRequest(
        name=name,
        set_subscriptions=[s.to_proto() for s in set_subscriptions],
        remove_subscriptions=list(remove_subscriptions),
    )
    if max_delivery_attempts is not None:
        request.max_delivery_attempts = max_delivery_attempts
    if retry_backoff_s is not None:
        if not retry_backoff_s:
            raise InvalidArgumentError("retry_backoff_s is empty: give at least one delay")
        request.retry_backoff.extend(
            duration_from_seconds(s, name="retry_backoff_s") for s in retry_backoff_s
        )
    if exponential_backoff is not None:
        request.exponential_backoff.CopyFrom(exponential_backoff.to_proto())
    if fifo is not None:
        request.fifo = fifo
    if consume_from is not None:
        _set_consume_from(request, consume_from)
    return request


def user_type_of(value: str | None) -> str:
    """The UserType enum name of "normal" or "super" (None: unspecified)."""
    if value is None:
        return "USER_TYPE_UNSPECIFIED"
    if not isinstance(value, str) or value.lower() not in ("normal", "super"):
        raise InvalidArgumentError(f"user_type {value!r} is not 'normal' or 'super'")
    return f"USER_TYPE_{value.upper()}"


def build_reset_offsets_request(
    group: str, topic: str, to: str | Time | Mapping[int, int], *, force: bool = False
) -> admin_pb2.ResetOffsetsRequest:
    """Build a ResetOffsets request.

    Args:
        group: Consumer group.
        topic: Topic whose queues to reset.
        to: ``"earliest"``, ``"latest"``, a time (datetime or epoch seconds), or explicit
            offsets ``{queue_id: offset}``.
        force: Reset even while the group has messages of the topic in flight.
    """
    request = admin_pb2.ResetOffsetsRequest(group=group, topic=topic, force=force)
    if to == "earliest":
        request.target = admin_pb2.RESET_TARGET_EARLIEST
    elif to == "latest":
        request.target = admin_pb2.RESET_TARGET_LATEST
    elif isinstance(to, str):
        raise InvalidArgumentError(
            f"to {to!r} is not 'earliest', 'latest', a time or {{queue_id: offset}}"
        )
    elif isinstance(to, Mapping):
        request.target = admin_pb2.RESET_TARGET_OFFSETS
        for queue_id, offset in to.items():
            request.offsets[queue_id] = offset
    else:
        request.target = admin_pb2.RESET_TARGET_TIMESTAMP
        request.timestamp.CopyFrom(timestamp_of(to, name="to"))
    return request
