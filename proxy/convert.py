"""Proto <-> broker_core conversions, kept at the edge of the proxy."""

from __future__ import annotations

from google.protobuf import duration_pb2, timestamp_pb2

from broker_core.catalog import KIND_DLQ, GroupInfo, TopicInfo
from broker_core.errors import InvalidArgumentError
from broker_core.types import (
    ConsumerOffset,
    NewMessage,
    PoppedMessage,
    PulledMessages,
    QueueLag,
    QueueStats,
    SendResult,
)
from popmq.store.v1 import records_pb2
from popmq.v1 import admin_pb2, messaging_pb2


def timestamp(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration(seconds: float) -> duration_pb2.Duration:
    whole = int(seconds)
    return duration_pb2.Duration(seconds=whole, nanos=round((seconds - whole) * 1e9))


def seconds(field: str, value: duration_pb2.Duration) -> float:
    """A Duration as seconds; rejects durations whose parts disagree in sign or overflow."""
    if abs(value.nanos) >= 1_000_000_000 or (value.seconds * value.nanos < 0):
        raise InvalidArgumentError(f"{field} is not a valid duration")
    return value.seconds + value.nanos / 1e9


def new_message(msg: messaging_pb2.OutgoingMessage) -> NewMessage:
    return NewMessage(
        topic=msg.topic,
        body=msg.body,
        tag=msg.tag,
        keys=tuple(msg.keys),
        properties=dict(msg.properties),
        message_id=msg.message_id,
    )


def send_result(result: SendResult) -> messaging_pb2.SendResult:
    return messaging_pb2.SendResult(
        message_id=result.message_id,
        topic=result.topic,
        queue_id=result.queue_id,
        offset=result.offset,
    )


def received_message(popped: PoppedMessage) -> messaging_pb2.ReceivedMessage:
    record = popped.record
    return messaging_pb2.ReceivedMessage(
        message_id=record.message_id,
        topic=popped.topic,
        queue_id=popped.queue_id,
        offset=popped.offset,
        body=record.body,
        tag=record.tag,
        keys=record.keys,
        properties=record.properties,
        born_time=timestamp(record.born_time_ms),
        store_time=timestamp(record.store_time_ms),
        delivery_attempt=record.delivery_attempt,
        receipt_handle=popped.receipt_handle,
        invisible_until=timestamp(popped.invisible_until_ms),
    )


def topic(info: TopicInfo) -> admin_pb2.Topic:
    return admin_pb2.Topic(
        name=info.name,
        queues=info.queues,
        message_type=admin_pb2.MESSAGE_TYPE_NORMAL,
        kind=admin_pb2.TOPIC_KIND_DLQ if info.kind == KIND_DLQ else admin_pb2.TOPIC_KIND_NORMAL,
        create_time=timestamp(info.create_time_ms),
    )


def queue_stats(stats: QueueStats) -> admin_pb2.QueueStats:
    return admin_pb2.QueueStats(
        queue_id=stats.queue_id, min_offset=stats.min_offset, max_offset=stats.max_offset
    )


def group(info: GroupInfo) -> admin_pb2.Group:
    return admin_pb2.Group(
        name=info.name,
        max_delivery_attempts=info.max_delivery_attempts,
        retry_backoff=[duration(ms / 1000) for ms in info.retry_backoff_ms],
        create_time=timestamp(info.create_time_ms),
        auto_created=info.auto_created,
    )


def queue_lag(row: QueueLag) -> admin_pb2.QueueLag:
    return admin_pb2.QueueLag(
        topic=row.topic,
        queue_id=row.queue_id,
        retry=row.retry,
        consumer_offset=row.consumer_offset,
        max_offset=row.max_offset,
        lag=row.lag,
        inflight=row.inflight,
        retention_skipped=row.retention_skipped,
    )


def pulled_message(
    topic: str, queue_id: int, offset: int, record: records_pb2.StoredMessage
) -> messaging_pb2.PulledMessage:
    return messaging_pb2.PulledMessage(
        message_id=record.message_id,
        topic=topic,
        queue_id=queue_id,
        offset=offset,
        body=record.body,
        tag=record.tag,
        keys=record.keys,
        properties=record.properties,
        born_time=timestamp(record.born_time_ms),
        store_time=timestamp(record.store_time_ms),
        delivery_attempt=record.delivery_attempt,
        message_group=record.message_group,
        body_encoding=record.body_encoding,
        born_host=record.born_host,
    )


def pull_response(pulled: PulledMessages) -> messaging_pb2.PullMessagesResponse:
    return messaging_pb2.PullMessagesResponse(
        messages=[
            pulled_message(pulled.topic, pulled.queue_id, offset, record)
            for offset, record in pulled.messages
        ],
        min_offset=pulled.min_offset,
        max_offset=pulled.max_offset,
        next_offset=pulled.next_offset,
    )


def consumer_offset(offset: ConsumerOffset) -> messaging_pb2.ConsumerOffset:
    return messaging_pb2.ConsumerOffset(
        queue_id=offset.queue_id, offset=offset.offset, committed=offset.committed
    )


def timestamp_ms(field: str, value: timestamp_pb2.Timestamp) -> int:
    """A Timestamp as epoch ms; rejects one before the epoch or with invalid nanos."""
    if value.seconds < 0 or not 0 <= value.nanos < 1_000_000_000:
        raise InvalidArgumentError(f"{field} must be a valid time at or after the epoch")
    return value.seconds * 1000 + value.nanos // 1_000_000
