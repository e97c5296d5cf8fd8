"""The row schema of a read, and messages -> Arrow record batches.

Spark 4.3 checks that a batch's Arrow schema equals the declared schema exactly, so the
Arrow schema is derived from the Spark one with PySpark's own converter (timestamps are
microseconds in UTC, as Spark's reader expects).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["READ_SCHEMA", "MessageLike", "arrow_schema", "to_record_batch"]

READ_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("queue_id", IntegerType()),
        StructField("queue_offset", LongType()),
        StructField("message_id", StringType()),
        StructField("tag", StringType()),
        StructField("keys", ArrayType(StringType())),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("body", BinaryType()),
        StructField("born_timestamp", TimestampType()),
        StructField("store_timestamp", TimestampType()),
        StructField("delivery_attempt", IntegerType()),
        StructField("message_group", StringType()),
    ]
)
"""Rows of a read. tag and message_group are null when the message has none; the other
columns are never null (Spark treats source columns as nullable, so they are declared so)."""


class MessageLike(Protocol):
    """What a pulled (offset mode) and a received (pop mode) message both offer."""

    @property
    def topic(self) -> str: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def message_id(self) -> str: ...
    @property
    def tag(self) -> str: ...
    @property
    def keys(self) -> tuple[str, ...]: ...
    @property
    def properties(self) -> dict[str, str]: ...
    @property
    def body(self) -> bytes: ...
    @property
    def born_timestamp(self) -> datetime: ...
    @property
    def store_timestamp(self) -> datetime: ...
    @property
    def delivery_attempt(self) -> int: ...
    @property
    def message_group(self) -> str: ...


@functools.cache
def arrow_schema() -> pa.Schema:
    """The Arrow schema Spark expects for READ_SCHEMA."""
    return to_arrow_schema(READ_SCHEMA, timezone="UTC")


def to_record_batch(messages: Sequence[MessageLike]) -> pa.RecordBatch:
    """One Arrow record batch holding `messages` as rows of READ_SCHEMA."""
    schema = arrow_schema()

    def column(name: str, values: list[object]) -> pa.Array:
        return pa.array(values, type=schema.field(name).type)

    return pa.RecordBatch.from_arrays(
        [
            column("topic", [m.topic for m in messages]),
            column("queue_id", [m.queue_id for m in messages]),
            column("queue_offset", [m.offset for m in messages]),
            column("message_id", [m.message_id for m in messages]),
            column("tag", [m.tag or None for m in messages]),
            column("keys", [list(m.keys) for m in messages]),
            column("properties", [list(m.properties.items()) for m in messages]),
            column("body", [m.body for m in messages]),
            column("born_timestamp", [m.born_timestamp for m in messages]),
            column("store_timestamp", [m.store_timestamp for m in messages]),
            column("delivery_attempt", [m.delivery_attempt for m in messages]),
            column("message_group", [m.message_group or None for m in messages]),
        ],
        schema=schema,
    )
