"""DataFrame -> topic: batch and streaming writers.

Each Spark partition sends its rows in batches (one SendMessages per batch and topic) over
the worker's cached channel. Every row gets a deterministic dedup id from (write scope,
partition, row index); the scope is (query id, batch id) for a streaming write and the
dedupKey option (or a fresh id per write) for a batch write. A task or batch that Spark
runs again therefore sends the same dedup ids, and the broker's dedup window answers the
repeats with the first send's receipt instead of storing them twice. That holds when the
rows of a partition come in the same order on a retry (no shuffle right before the write,
or a deterministic sort within partitions).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from popmq import Message
from popmq.spark import _clients
from popmq.spark.errors import OptionError
from popmq.spark.options import WriteOptions

__all__ = ["PopMQBatchWriter", "PopMQCommitMessage", "PopMQStreamWriter", "WriteColumns"]

log = logging.getLogger(__name__)

_ALLOWED: dict[str, tuple[tuple[type[DataType], ...], str]] = {
    "body": ((StringType, BinaryType), "string or binary (required)"),
    "topic": ((StringType,), "string"),
    "tag": ((StringType,), "string"),
    "keys": ((ArrayType, StringType), "array<string> or string"),
    "properties": ((MapType,), "map<string,string>"),
    "message_group": ((StringType,), "string"),
    "delivery_timestamp": ((TimestampType, TimestampNTZType, LongType), "timestamp or epoch ms"),
}


@dataclass(frozen=True)
class WriteColumns:
    """Where each message field is in a row, checked once against the DataFrame's schema."""

    body: int
    body_is_string: bool
    topic: int | None = None
    tag: int | None = None
    keys: int | None = None
    keys_is_string: bool = False
    properties: int | None = None
    message_group: int | None = None
    delivery_timestamp: int | None = None
    delivery_is_ms: bool = False

    @classmethod
    def from_schema(cls, schema: StructType, options: WriteOptions) -> WriteColumns:
        names = [f.name for f in schema.fields]
        unknown = [n for n in names if n not in _ALLOWED]
        if unknown:
            raise OptionError(
                f"columns {unknown} cannot be written: a popmq write takes the columns "
                f"{sorted(_ALLOWED)} (select or rename them)"
            )
        if "body" not in names:
            raise OptionError("a popmq write needs a body column (string or binary)")
        index: dict[str, int] = {}
        for i, f in enumerate(schema.fields):
            allowed, shown = _ALLOWED[f.name]
            ok = isinstance(f.dataType, allowed)
            if isinstance(f.dataType, ArrayType):
                ok = ok and isinstance(f.dataType.elementType, StringType)
            if isinstance(f.dataType, MapType):
                ok = (
                    ok
                    and isinstance(f.dataType.keyType, StringType)
                    and isinstance(f.dataType.valueType, StringType)
                )
            if not ok:
                raise OptionError(
                    f"column {f.name} is {f.dataType.simpleString()}: it must be {shown}"
                )
            index[f.name] = i
        if "topic" not in index and not options.topic:
            raise OptionError(
                "set the topic option or give a topic column: where should the rows go?"
            )
        kinds = {f.name: f.dataType for f in schema.fields}
        return cls(
            body=index["body"],
            body_is_string=isinstance(kinds["body"], StringType),
            topic=None if options.topic else index.get("topic"),
            tag=index.get("tag"),
            keys=index.get("keys"),
            keys_is_string=isinstance(kinds.get("keys"), StringType),
            properties=index.get("properties"),
            message_group=index.get("message_group"),
            delivery_timestamp=index.get("delivery_timestamp"),
            delivery_is_ms=isinstance(kinds.get("delivery_timestamp"), LongType),
        )


@dataclass(frozen=True)
class PopMQCommitMessage(WriterCommitMessage):
    """What one task sent: counts for the driver's commit log line."""

    partition_id: int
    attempt: int
    rows: int
    stored: int
    """Messages stored by this attempt."""
    duplicates: int
    """Rows the broker's dedup window recognised as sent before (a retry's repeats)."""
    first_message_id: str = ""
    last_message_id: str = ""


@dataclass
class _Sender:
    """Per-task state: buffers per topic, flushed as one SendMessages each."""

    options: WriteOptions
    scope: str
    partition_id: int
    rows: int = 0
    stored: int = 0
    duplicates: int = 0
    first_id: str = ""
    last_id: str = ""
    pending: dict[str, tuple[list[Message], int]] = field(default_factory=dict)

    def dedup_id(self, row_index: int) -> str:
        return hashlib.sha1(
            f"{self.scope}/{self.partition_id}/{row_index}".encode(), usedforsecurity=False
        ).hexdigest()

    def add(self, topic: str, message: Message) -> None:
        batch, size = self.pending.get(topic, ([], 0))
        batch.append(message)
        size += len(message.body)
        self.pending[topic] = (batch, size)
        if len(batch) >= self.options.batch_size or size >= self.options.batch_bytes:
            self.flush(topic)

    def flush(self, topic: str) -> None:
        batch, _ = self.pending.pop(topic, ([], 0))
        if not batch:
            return
        producer = _clients.producer(self.options)
        for receipt in producer.send_batch(topic, batch):
            if receipt.duplicate:
                self.duplicates += 1
            else:
                self.stored += 1
            self.first_id = self.first_id or receipt.message_id
            self.last_id = receipt.message_id

    def flush_all(self) -> None:
        for topic in list(self.pending):
            self.flush(topic)


def _message(row: Row, columns: WriteColumns, dedup_id: str, index: int) -> Message:
    body = row[columns.body]
    if body is None:
        raise ValueError(f"row {index} of this partition has a null body; a message needs one")
    if columns.body_is_string:
        body = body.encode()
    keys: Sequence[str] = ()
    if columns.keys is not None and row[columns.keys] is not None:
        value = row[columns.keys]
        keys = [value] if columns.keys_is_string else [k for k in value if k is not None]
    deliver_at: float | None = None
    if columns.delivery_timestamp is not None and row[columns.delivery_timestamp] is not None:
        value = row[columns.delivery_timestamp]
        # A naive datetime from Spark is in this worker's local time zone: .timestamp()
        # interprets it so.
        deliver_at = value / 1000 if columns.delivery_is_ms else datetime.timestamp(value)
    return Message(
        bytes(body),
        tag=_text(row, columns.tag),
        keys=keys,
        properties=dict(row[columns.properties] or {}) if columns.properties is not None else {},
        message_group=_text(row, columns.message_group),
        deliver_at=deliver_at,
        dedup_id=dedup_id,
    )


def _text(row: Row, index: int | None) -> str:
    if index is None:
        return ""
    value = row[index]
    return "" if value is None else str(value)


def _send_rows(
    rows: Iterator[Row], options: WriteOptions, columns: WriteColumns, scope: str
) -> PopMQCommitMessage:
    context = TaskContext.get()
    partition_id = context.partitionId() if context is not None else 0
    attempt = context.attemptNumber() if context is not None else 0
    sender = _Sender(options, scope, partition_id)
    for index, row in enumerate(rows):
        topic = options.topic or _text(row, columns.topic)
        if not topic:
            raise ValueError(f"row {index} of this partition has no topic and no topic option")
        sender.add(topic, _message(row, columns, sender.dedup_id(index), index))
        sender.rows += 1
    sender.flush_all()
    return PopMQCommitMessage(
        partition_id=partition_id,
        attempt=attempt,
        rows=sender.rows,
        stored=sender.stored,
        duplicates=sender.duplicates,
        first_message_id=sender.first_id,
        last_message_id=sender.last_id,
    )


def _totals(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int, int, int]:
    done = [m for m in messages if isinstance(m, PopMQCommitMessage)]
    return (
        sum(m.rows for m in done),
        sum(m.stored for m in done),
        sum(m.duplicates for m in done),
        len(messages) - len(done),
    )


class PopMQBatchWriter(DataSourceWriter):
    """df.write.format("popmq"): at-least-once, no duplicates from task retries."""

    def __init__(self, options: WriteOptions, columns: WriteColumns) -> None:
        self.options = options
        self.columns = columns
        # Made on the driver at planning time: every task and retry of this write shares it.
        self.scope = f"batch/{options.dedup_key or uuid.uuid4().hex}"

    def write(self, iterator: Iterator[Row]) -> PopMQCommitMessage:
        return _send_rows(iterator, self.options, self.columns, self.scope)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, stored, duplicates, _ = _totals(messages)
        log.info(
            "popmq write committed: %d rows, %d messages stored, %d repeats dropped by dedup",
            rows,
            stored,
            duplicates,
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, stored, _, failed = _totals(messages)
        log.warning(
            "popmq write aborted: %d tasks failed; tasks that finished stored %d messages "
            "(of %d rows), which stay (a rerun with the same dedupKey within the dedup "
            "window does not store them twice)",
            failed,
            stored,
            rows,
        )


class PopMQStreamWriter(DataSourceStreamWriter):
    """writeStream.format("popmq"): dedup ids from (query id, batch id, partition, row)."""

    def __init__(self, options: WriteOptions, columns: WriteColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[Row]) -> PopMQCommitMessage:
        context = TaskContext.get()
        query_id = context.getLocalProperty("sql.streaming.queryId") if context else None
        batch_id = context.getLocalProperty("streaming.sql.batchId") if context else None
        if not query_id or batch_id is None:
            raise RuntimeError(
                "a popmq stream write runs without the streaming query id and batch id task "
                "properties; dedup ids cannot be derived"
            )
        return _send_rows(iterator, self.options, self.columns, f"stream/{query_id}/{batch_id}")

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows, stored, duplicates, _ = _totals(messages)
        log.info(
            "popmq stream write batch %d committed: %d rows, %d stored, %d repeats dropped",
            batchId,
            rows,
            stored,
            duplicates,
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows, stored, _, failed = _totals(messages)
        log.warning(
            "popmq stream write batch %d aborted: %d tasks failed, finished tasks stored %d "
            "messages of %d rows; Spark runs the batch again and the dedup window drops the "
            "repeats",
            batchId,
            failed,
            stored,
            rows,
        )
