"""The "popmq" data source: picks the reader or writer that the options and call ask for."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from popmq.spark.errors import OptionError
from popmq.spark.offset_reader import PopMQBatchReader, PopMQOffsetStreamReader
from popmq.spark.options import KAFKA_ALIASES, ReadOptions, WriteOptions
from popmq.spark.pop_reader import PopMQPopStreamReader
from popmq.spark.schema import READ_SCHEMA
from popmq.spark.writer import PopMQBatchWriter, PopMQStreamWriter, WriteColumns

__all__ = ["PopMQDataSource"]


def _check_read_schema(schema: StructType) -> None:
    if schema.simpleString() != READ_SCHEMA.simpleString():
        raise OptionError(
            f"a popmq read has the fixed schema {READ_SCHEMA.simpleString()}; do not pass "
            f"another one (got {schema.simpleString()})"
        )


class PopMQDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("popmq")``; see docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "popmq"

    def schema(self) -> StructType:
        return READ_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_read_schema(schema)
        options = ReadOptions.parse(self.options)
        if options.mode == "pop":
            raise OptionError(
                "mode=pop reads a stream (spark.readStream); a batch read (spark.read) reads "
                "offset ranges: use mode=offset"
            )
        given = {str(name).lower() for name in self.options}
        per_trigger = ("maxMessagesPerTrigger", "minMessagesPerTrigger", "maxTriggerDelay")
        if options.max_messages_per_trigger is not None or given & {
            name.lower() for name in (*per_trigger, *KAFKA_ALIASES)
        }:
            raise OptionError(
                f"{', '.join(per_trigger)} apply to streams only; a batch read (spark.read) "
                "reads its whole range at once (bound it with endingOffsets, "
                "endingOffsetsByTimestamp or endingTimestamp)"
            )
        return PopMQBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_read_schema(schema)
        options = ReadOptions.parse(self.options)
        if (
            options.ending_offsets
            or options.ending_timestamp_ms is not None
            or options.ending_offsets_by_timestamp is not None
        ):
            raise OptionError(
                "endingOffsets, endingOffsetsByTimestamp and endingTimestamp apply to batch "
                "reads only; a stream has no end (use trigger(availableNow=True) to stop at "
                "what is there now)"
            )
        if options.mode == "pop":
            return PopMQPopStreamReader(options)
        return PopMQOffsetStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError("a topic can only be appended to: use mode('append')")
        options = WriteOptions.parse(self.options)
        return PopMQBatchWriter(options, WriteColumns.from_schema(schema, options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        if overwrite:
            raise OptionError("a topic can only be appended to: use outputMode('append')")
        options = WriteOptions.parse(self.options)
        return PopMQStreamWriter(options, WriteColumns.from_schema(schema, options))
