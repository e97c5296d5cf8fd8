"""The connector's own logic without a SparkSession: options, offsets, planning, and the
readers' driver and executor methods called directly against a real server.

Spark calls these methods in its own processes; here the test plays Spark's part, which
makes the edge cases (data loss, restarts, lease renewal) quick and deterministic.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows
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

from popmq import Admin, Message, NotFoundError, Producer, PullConsumer, SimpleConsumer
from popmq.spark import DataLossError, OffsetFormatError, OptionError
from popmq.spark.offset_reader import OffsetRange, PopMQBatchReader, PopMQOffsetStreamReader
from popmq.spark.offsets import (
    PopOffset,
    QueueOffsets,
    lease_token,
    parse_offsets_option,
    plan_ranges,
    split_by_backlog,
)
from popmq.spark.options import (
    KAFKA_ALIASES,
    READ_OPTIONS,
    WRITE_OPTIONS,
    ReadOptions,
    WriteOptions,
    parse_duration_s,
)
from popmq.spark.pop_reader import LeasePartition, PopMQPopStreamReader
from popmq.spark.schema import READ_SCHEMA, arrow_schema
from popmq.spark.source import PopMQDataSource
from popmq.spark.writer import WriteColumns
from tests.spark.helpers import wait_for
from tests.support.server_thread import ServerThread

# -- options ---------------------------------------------------------------------------


def test_read_options_parse_and_reject_bad_values_naming_the_option() -> None:
    o = ReadOptions.parse(
        {"ENDPOINT": "h:1", "topic": "t", "Mode": "pop", "group": "g", "invisibleDuration": "2m",
         "waitSeconds": "500ms", "numPartitions": "8", "maxMessagesPerTrigger": "1000"}
    )  # fmt: skip
    assert (o.endpoint, o.mode, o.group, o.invisible_duration_s, o.wait_s) == (
        "h:1", "pop", "g", 120.0, 0.5,
    )  # fmt: skip
    assert (o.num_partitions, o.max_messages_per_trigger) == (8, 1000)
    base = {"endpoint": "h:1", "topic": "t"}
    cases = [
        ({"topic": "t"}, "option endpoint is required"),
        ({**base, "mode": "push"}, "mode='push' is not supported: use offset or pop"),
        ({**base, "mode": "pop"}, "option group is required in pop mode"),
        ({**base, "mode": "pop", "group": "g", "startingOffsets": "earliest"},
         "startingOffsets applies to mode=offset only"),
        ({**base, "maxRecordsPerPartition": "0"}, r"maxRecordsPerPartition=0 is outside"),
        ({**base, "mode": "pop", "group": "g", "failOnDataLoss": "false"},
         "failOnDataLoss applies to mode=offset only: pop mode has no offset ranges"),
        ({**base, "mode": "pop", "group": "g", "maxRecordsPerPartition": "9"},
         "maxRecordsPerPartition applies to mode=offset only: .*maxMessagesPerPartition"),
        ({**base, "mode": "pop", "group": "g", "pullBatchSize": "9"},
         "pullBatchSize applies to mode=offset only: .*popBatchSize"),
        ({**base, "mode": "pop", "group": "g", "maxTriggerDelay": "1m"},
         "maxTriggerDelay applies to mode=offset only"),
        ({**base, "mode": "pop", "group": "g", "minOffsetsPerTrigger": "9"},
         "minOffsetsPerTrigger applies to mode=offset only"),
        ({**base, "numPartitions": "4"}, "numPartitions applies to mode=pop only"),
        ({**base, "mode": "pop", "group": "g", "filter": "A", "sqlFilter": "a = 1"},
         "not both"),
        ({**base, "failOnDataLoss": "maybe"}, "not a boolean"),
        ({**base, "mode": "pop", "group": "g", "invisibleDuration": "0.5s"},
         r"outside the allowed 1s\.\.43200s"),
        ({**base, "mode": "pop", "group": "g", "waitSeconds": "ten"}, "is not a duration"),
        ({**base, "minMessagesPerTrigger": "10", "maxMessagesPerTrigger": "5"},
         "minMessagesPerTrigger=10 is above maxMessagesPerTrigger=5"),
        # Unknown names fail with the nearest known one; Kafka names with what to use.
        ({**base, "maxmessagepertrigger": "5"},
         "unknown option maxmessagepertrigger for a popmq read: did you mean "
         "maxMessagesPerTrigger"),
        ({**base, "assign": "{}"}, "assign is not supported.*use option topic or subscribe"),
        ({**base, "includeHeaders": "true"}, "always in the properties column"),
        ({**base, "kafka.bootstrap.servers": "k:9092"}, "a Kafka client setting"),
        ({**base, "path": "/x"}, "names a topic, not a path"),
        ({**base, "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger=0 is outside"),
        ({**base, "maxoffsetspertrigger": "5", "maxMessagesPerTrigger": "5"},
         "options maxOffsetsPerTrigger and maxMessagesPerTrigger are the same option"),
    ]  # fmt: skip
    for options, message in cases:
        with pytest.raises(OptionError, match=message):
            ReadOptions.parse(options)
    assert parse_duration_s("x", "15m") == 900.0
    with pytest.raises(OptionError, match="a popmq read needs the topics to read: give exactly"):
        ReadOptions.parse({"endpoint": "h:1"})
    assert WriteOptions.parse({"endpoint": "h:1", "batchSize": "10"}).batch_size == 10
    # The Kafka source's names where they mean the same; Spark's own options pass.
    kafka_named = ReadOptions.parse(
        {**base, "maxoffsetspertrigger": "9", "minOffsetsPerTrigger": "3",
         "checkpointlocation": "/cp"}
    )  # fmt: skip
    assert (kafka_named.max_messages_per_trigger, kafka_named.min_messages_per_trigger) == (9, 3)
    assert WriteOptions.parse({"endpoint": "h:1", "checkpointLocation": "/cp"}).topic == ""
    with pytest.raises(OptionError, match=r"unknown option batchsizes .*did you mean batchSize"):
        WriteOptions.parse({"endpoint": "h:1", "batchsizes": "10"})
    for name in ("maxOffsetsPerTrigger", "minMessagesPerTrigger", "maxTriggerDelay"):
        batch = PopMQDataSource({**base, name: "5"})
        with pytest.raises(OptionError, match="apply to streams only"):
            batch.reader(READ_SCHEMA)


def test_kafka_topic_and_time_options_parse_and_reject_bad_values() -> None:
    base = {"endpoint": "h:1"}
    listed = ReadOptions.parse({**base, "subscribe": " b, a ,,"})
    assert (listed.topic, listed.subscribe, listed.by_topic) == ("", ("b", "a"), True)
    pattern = ReadOptions.parse({**base, "subscribePattern": "orders-.*", "minPartitions": "8"})
    assert (pattern.subscribe_pattern, pattern.min_partitions) == ("orders-.*", 8)
    timed = ReadOptions.parse(
        {**base, "topic": "t", "startingOffsetsByTimestamp": '{"t": {"0": 5, "1": 0}}',
         "endingOffsetsByTimestamp": '{"t": {"0": 9, "1": 9}}',
         "startingOffsetsByTimestampStrategy": "LATEST"}
    )  # fmt: skip
    assert timed.starting_offsets_by_timestamp == {"t": {0: 5, 1: 0}}
    assert timed.ending_offsets_by_timestamp == {"t": {0: 9, 1: 9}}
    assert (timed.starting_timestamp_strategy, ReadOptions.parse({**base, "topic": "t"})
            .starting_timestamp_strategy) == ("latest", "error")  # fmt: skip
    one = "give exactly one of topic"
    cases = [
        ({**base, "topic": "t", "subscribe": "a"},
         f"topic and subscribe exclude each other: {one}"),
        ({**base, "subscribe": "a", "subscribePattern": "a"}, "exclude each other"),
        ({**base, "subscribe": " , "}, "option subscribe is empty"),
        ({**base, "subscribe": "a,b,a"}, "subscribe names a more than once"),
        ({**base, "subscribePattern": "(a"}, r"subscribePattern='\(a' is not a regular expr"),
        ({**base, "topic": "t", "minPartitions": "0"}, r"minPartitions=0 is outside the allowed"),
        ({**base, "topic": "t", "mode": "pop", "group": "g", "minPartitions": "4"},
         "minPartitions applies to mode=offset only: pop mode runs exactly numPartitions"),
        ({**base, "topic": "t", "mode": "pop", "group": "g", "startingOffsetsByTimestamp": "{}"},
         "startingOffsetsByTimestamp applies to mode=offset only"),
        ({**base, "topic": "t", "startingOffsetsByTimestamp": "{}"},
         r"is not a JSON object \{"),
        ({**base, "topic": "t", "startingOffsetsByTimestamp": "[1]"}, "is not a JSON object"),
        ({**base, "topic": "t", "startingOffsetsByTimestamp": '{"0": 5}'},
         "topic '0' must map to an object"),
        ({**base, "topic": "t", "endingOffsetsByTimestamp": '{"t": {"x": 5}}'},
         "'x' of topic 't' is not a queue id"),
        ({**base, "topic": "t", "startingOffsetsByTimestamp": '{"t": {"0": "5"}}'},
         r"the time of topic 't' queue 0 is \"5\", not an integer \(epoch milliseconds\)"),
        ({**base, "topic": "t", "startingOffsetsByTimestamp": '{"t": {"0": 1.5}}'},
         "not an integer"),
        ({**base, "topic": "t", "startingOffsetsByTimestamp": '{"t": {"0": -1}}'},
         r"the time -1 of topic 't' queue 0 is outside the allowed 0\.\.253402300799999"),
        ({**base, "topic": "t", "startingOffsetsByTimestamp": '{"t": {"0": 1, "00": 2}}'},
         "names queue 0 twice"),
        ({**base, "topic": "t", "startingTimestamp": "-5"}, "outside the allowed 0..2534"),
        ({**base, "topic": "t", "startingOffsetsByTimestampStrategy": "latest"},
         "applies only with startingOffsetsByTimestamp or startingTimestamp"),
        ({**base, "topic": "t", "startingTimestamp": "1",
          "startingOffsetsByTimestampStrategy": "earliest"}, "use error or latest"),
    ]  # fmt: skip
    for options, message in cases:
        with pytest.raises(OptionError, match=message):
            ReadOptions.parse(options)
    stream = PopMQDataSource({**base, "topic": "t", "endingOffsetsByTimestamp": '{"t": {"0": 1}}'})
    with pytest.raises(OptionError, match="apply to batch reads only"):
        stream.streamReader(READ_SCHEMA)


def test_every_option_is_in_the_docs_options_table() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "spark.md").read_text()
    table = docs[docs.index("## Options") :]
    table = table[: table.index("\n\n", table.index("| option |"))]
    named = set(re.findall(r"`?([A-Za-z.]+)`?", " ".join(
        row.split("|")[1] for row in table.splitlines() if row.startswith("| ")
    )))  # fmt: skip
    missing = sorted({*READ_OPTIONS, *WRITE_OPTIONS, *KAFKA_ALIASES} - named)
    assert missing == [], f"options missing from the docs/spark.md options table: {missing}"


def test_write_columns_are_checked_against_the_schema() -> None:
    options = WriteOptions.parse({"endpoint": "h:1", "topic": "t"})
    schema = StructType(
        [
            StructField("keys", StringType()),
            StructField("body", BinaryType()),
            StructField("properties", MapType(StringType(), StringType())),
            StructField("delivery_timestamp", LongType()),
        ]
    )
    columns = WriteColumns.from_schema(schema, options)
    assert (columns.body, columns.body_is_string, columns.keys, columns.keys_is_string) == (
        1, False, 0, True,
    )  # fmt: skip
    assert (columns.properties, columns.delivery_timestamp, columns.delivery_is_ms) == (2, 3, True)
    bad = [
        (StructType([StructField("tag", StringType())]), "needs a body column"),
        (StructType([StructField("body", IntegerType())]), "column body is int"),
        (
            StructType([StructField("body", MapType(StringType(), StringType()))]),
            "column body is map<string,string>: it must be string or binary",
        ),
        (
            StructType(
                [StructField("body", StringType()), StructField("keys", ArrayType(LongType()))]
            ),
            "column keys is array<bigint>",
        ),
        (StructType([StructField("body", StringType()), StructField("x", StringType())]),
         r"columns \['x'\] cannot be written"),
    ]  # fmt: skip
    for schema, message in bad:
        with pytest.raises(OptionError, match=message):
            WriteColumns.from_schema(schema, options)
    no_topic = WriteOptions.parse({"endpoint": "h:1"})
    with pytest.raises(OptionError, match="set the topic option or give a topic column"):
        WriteColumns.from_schema(StructType([StructField("body", StringType())]), no_topic)


def test_read_schema_and_arrow_schema_agree() -> None:
    assert [f.name for f in READ_SCHEMA.fields] == arrow_schema().names
    assert isinstance(READ_SCHEMA["born_timestamp"].dataType, TimestampType)
    assert str(arrow_schema().field("born_timestamp").type) == "timestamp[us, tz=UTC]"


# -- offsets ---------------------------------------------------------------------------


def test_split_by_backlog_shares_the_limit_in_proportion_and_exactly() -> None:
    start = {0: 0, 1: 10, 2: 5}
    latest = {0: 100, 1: 60, 2: 5}  # backlogs 100, 50, 0
    end = split_by_backlog(start, latest, 30)
    assert end == {0: 20, 1: 20, 2: 5}
    assert sum(end[q] - start[q] for q in start) == 30
    # Remainders: 7 over backlogs 1,1,1 -> 3,2,2 (ties to the lower queue id).
    assert split_by_backlog({0: 0, 1: 0, 2: 0}, {0: 1, 1: 1, 2: 1}, 2) == {0: 1, 1: 1, 2: 0}
    assert split_by_backlog({0: 0, 1: 0}, {0: 10, 1: 10}, 7) == {0: 4, 1: 3}
    assert split_by_backlog(start, latest, 1_000) == latest


def test_offsets_options_resolve_earliest_latest_and_json() -> None:
    earliest, latest = {("t", 0): 3, ("t", 1): 0}, {("t", 0): 10, ("t", 1): 7}

    def parse(text: str, topic: str = "t") -> dict[tuple[str, int], int]:
        return parse_offsets_option("startingOffsets", text, earliest, latest, topic)

    assert parse("earliest") == earliest
    assert parse("LATEST") == latest
    assert parse('{"0": -2, "1": 4}') == {("t", 0): 3, ("t", 1): 4}
    assert parse('{"0": 5, "1": -1}') == {("t", 0): 5, ("t", 1): 7}
    # Kafka's form, keyed by topic: optional with option topic, required with subscribe.
    assert parse('{"t": {"0": 5, "1": -1}}') == parse('{"t": {"0": 5, "1": -1}}', "")
    for text, topic, message in [
        ("nope", "t", "is not earliest, latest, or a JSON object"),
        ('{"0": 1}', "t", r"missing queues \[1\]"),
        ('{"0": 1, "1": 1, "2": 1}', "t", r"names queue 2, but the topic has queues 0\.\.1"),
        ('{"0": 11, "1": 0}', "t", r"offset 11 of queue 0 is outside 0\.\.10"),
        ('{"0": "x", "1": 0}', "t", "is not an integer"),
        ('{"0": 1, "1": 1}', "", "with subscribe or subscribePattern give an object per topic"),
        ('{"u": {"0": 1}}', "", "names topic 'u'; the query reads t"),
        ('{"t": {"0": 1}}', "", r"missing queues \[t/1\]"),
        ('{"t": {"0": 1, "1": 1, "5": 1}}', "", "names topic 't' queue 5, but the topic 't' has"),
    ]:
        with pytest.raises(OptionError, match=message):
            parse(text, topic)


def test_min_partitions_splits_large_ranges_in_proportion_as_kafka() -> None:
    a, b, c = ("t", 0), ("t", 1), ("u", 0)
    start, end = {a: 0, b: 0, c: 10}, {a: 100, b: 10, c: 10}
    assert plan_ranges(start, end, 1000) == [(a, 0, 100), (b, 0, 10)]  # c is empty
    assert plan_ranges(start, end, 1000, 2) == [(a, 0, 100), (b, 0, 10)]  # enough already
    # 10 wanted: b (10 of 110) would get one part and keeps it; a shares the other 9.
    split = plan_ranges(start, end, 1000, 10)
    assert [r for r in split if r[0] == b] == [(b, 0, 10)]
    assert [(low, high) for key, low, high in split if key == a] == [
        (0, 11), (11, 22), (22, 33), (33, 44), (44, 55), (55, 66), (66, 77), (77, 88), (88, 100)
    ]  # fmt: skip
    # maxRecordsPerPartition cuts first; minPartitions then splits what that left.
    assert plan_ranges({a: 0}, {a: 10}, 4, 5) == [(a, 0, 2), (a, 2, 4), (a, 4, 6), (a, 6, 8),
                                                   (a, 8, 10)]  # fmt: skip
    # Never a range of less than one offset, whatever minPartitions asks.
    assert plan_ranges({a: 0}, {a: 3}, 1000, 50) == [(a, 0, 1), (a, 1, 2), (a, 2, 3)]
    assert plan_ranges({a: 5}, {a: 5}, 1000, 50) == []


def test_checkpointed_offsets_are_versioned_and_checked() -> None:
    offsets = QueueOffsets({("t", 1): 5, ("t", 0): 7}, "t")
    data = offsets.to_json()
    assert (
        json.dumps(data) == '{"v": 1, "mode": "offset", "topic": "t", "queues": {"0": 7, "1": 5}}'
    )
    assert QueueOffsets.from_json(json.loads(json.dumps(data)), "t") == QueueOffsets(
        {("t", 0): 7, ("t", 1): 5}, "t"
    )
    with pytest.raises(OffsetFormatError, match="format version 2"):
        QueueOffsets.from_json({**data, "v": 2}, "t")
    with pytest.raises(OffsetFormatError, match="of topic 't', but the query reads topic 'u'"):
        QueueOffsets.from_json(data, "u")
    with pytest.raises(OffsetFormatError, match=r"written in mode 'offset'.*mode 'pop'"):
        PopOffset.from_json(data)
    # subscribe / subscribePattern: keyed by topic; either form reads back in either query.
    both = QueueOffsets({("b", 0): 1, ("a", 1): 2, ("a", 0): 3})
    assert json.dumps(both.to_json()) == (
        '{"v": 1, "mode": "offset", "topics": {"a": {"0": 3, "1": 2}, "b": {"0": 1}}}'
    )
    assert QueueOffsets.from_json(both.to_json()) == both
    assert QueueOffsets.from_json(data).queues == offsets.queues  # topic -> subscribe
    assert QueueOffsets.from_json(QueueOffsets(offsets.queues).to_json(), "t") == offsets
    with pytest.raises(OffsetFormatError, match="of topic 'b', but the query reads topic 'a'"):
        QueueOffsets.from_json(both.to_json(), "a")
    with pytest.raises(OffsetFormatError, match="malformed"):
        QueueOffsets.from_json({"v": 1, "mode": "offset", "topics": {"a": 5}})
    pop = PopOffset("run1", 4, 3, 100)
    assert PopOffset.from_json(pop.to_json()) == pop
    assert pop.partition_topics("t") == ["t", "t", "t"]
    several = PopOffset("run1", 4, 3, 100, (("a", 1), ("b", 2)))
    assert several.to_json()["topics"] == {"a": 1, "b": 2}
    assert PopOffset.from_json(several.to_json()) == several
    assert several.partition_topics("") == ["a", "b", "b"]
    with pytest.raises(OffsetFormatError, match="do not add up to parts"):
        PopOffset.from_json({**several.to_json(), "parts": 4})
    assert pop.tokens() == [lease_token("run1", 4, i) for i in range(3)] == [
        "spark/run1/4/0", "spark/run1/4/1", "spark/run1/4/2",
    ]  # fmt: skip
    assert PopOffset("run1", -1, 0, 0).tokens() == []


# -- offset reader against a server ---------------------------------------------------


def _fill(endpoint: str, topic: str, count: int, queues: int = 2) -> None:
    """Create `topic` and send `count` messages, spread evenly over its queues."""
    with Admin(endpoint) as admin:
        admin.create_topic(topic, queues=queues)
    with Producer(endpoint) as producer:
        producer.send_batch(topic, [Message(f"m-{i}".encode()) for i in range(count)])


def _offset_reader(endpoint: str, **options: str) -> PopMQOffsetStreamReader:
    return PopMQOffsetStreamReader(
        ReadOptions.parse({"endpoint": endpoint, "topic": "t", **options})
    )


def _rows(reader: Any, parts: list[Any]) -> list[tuple[int, int, bytes]]:
    rows = []
    for part in parts:
        for batch in reader.read(part):
            for r in batch.to_pylist():
                rows.append((r["queue_id"], r["queue_offset"], r["body"]))
    return rows


def test_an_endpoint_list_passes_through_to_the_sdk_which_fails_over(endpoint: str) -> None:
    _fill(endpoint, "t", 4)
    listed = f"127.0.0.1:1,{endpoint}"  # nothing listens on port 1: the SDK moves on
    assert WriteOptions.parse({"endpoint": listed}).endpoint == listed
    reader = _offset_reader(listed, startingOffsets="earliest")
    assert reader.options.endpoint == listed
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert len(_rows(reader, reader.partitions(start, end))) == 4


def test_offset_reader_plans_limits_and_replays_pure_ranges(endpoint: str) -> None:
    _fill(endpoint, "t", 100)  # 50 per queue
    reader = _offset_reader(endpoint, startingOffsets="earliest", maxRecordsPerPartition="20")
    start = reader.initialOffset()
    assert reader.initialOffset() == start  # Spark calls it twice
    assert reader.getDefaultReadLimit() == ReadAllAvailable()
    end = reader.latestOffset(start, ReadMaxRows(30))
    assert QueueOffsets.from_json(end, "t").queues == {("t", 0): 15, ("t", 1): 15}
    parts = reader.partitions(start, end)
    assert [(p.queue_id, p.start, p.end) for p in parts] == [(0, 0, 15), (1, 0, 15)]
    assert reader.partitions(start, end) == parts  # pure in (start, end)
    first = _rows(reader, parts)
    assert len(first) == 30 and _rows(reader, parts) == first  # a replay reads the same
    end2 = reader.latestOffset(end, ReadAllAvailable())
    assert [(p.start, p.end) for p in reader.partitions(end, end2)] == [
        (15, 35), (35, 50), (15, 35), (35, 50),
    ]  # fmt: skip
    assert reader.latestOffset(end2, ReadAllAvailable()) == end2  # nothing new
    # The queues' ends and the lag behind them go to the progress (sources[].latestOffset);
    # a restarted query reports the ends before it planned anything (a replay comes first).
    ends = QueueOffsets({("t", 0): 50, ("t", 1): 50}, "t").to_json()
    caught_up = {"total": 0, "max": 0, "queues": {"0": 0, "1": 0}}
    assert reader.reportLatestOffset() == {**ends, "behind": caught_up}
    assert _offset_reader(endpoint).reportLatestOffset() == ends
    assert reader.latestOffset(start, ReadMaxRows(30)) == end
    assert reader.reportLatestOffset()["behind"] == {
        "total": 70, "max": 35, "queues": {"0": 35, "1": 35},
    }  # fmt: skip
    # minMessagesPerTrigger holds a batch back until enough arrived or maxTriggerDelay passed
    # since the last batch it let through; the first trigger is never held (as Kafka's).
    with Producer(endpoint) as producer:
        producer.send_batch("t", [Message(b"late")] * 3)
    waiting = _offset_reader(
        endpoint, minMessagesPerTrigger="5", maxMessagesPerTrigger="10", maxTriggerDelay="1h"
    )
    assert waiting.latestOffset(end2, ReadMinRows(5)) != end2, "the first trigger goes"
    assert waiting.latestOffset(end2, ReadMinRows(5)) == end2
    assert waiting.latestOffset(end2, ReadMaxRows(10)) == end2, "min and max both set"
    assert waiting.latestOffset(end2, ReadMinRows(3)) != end2
    waiting.prepareForTriggerAvailableNow()  # AvailableNow never holds back: it would end
    assert waiting.latestOffset(end2, ReadMinRows(5)) != end2
    impatient = _offset_reader(endpoint, maxTriggerDelay="0s")
    assert impatient.latestOffset(end2, ReadMinRows(5)) != end2


def test_offsets_deleted_by_retention_fail_the_query_or_are_skipped(server: ServerThread) -> None:
    endpoint = server.endpoint
    _fill(endpoint, "t", 40)
    strict = _offset_reader(endpoint, startingOffsets="earliest")
    start = strict.initialOffset()
    end = strict.latestOffset(start, ReadAllAvailable())
    parts = strict.partitions(start, end)
    # Retention deletes everything stored up to now (a "now" far in the future).
    far = 10**15
    assert server.call(lambda: server.broker.apply_retention(now=far)) == 40
    with Producer(endpoint) as producer:
        producer.send_batch("t", [Message(b"after")] * 4)
    with pytest.raises(DataLossError, match=r"offsets \[0, 20\) were deleted"):
        list(strict.read(parts[0]))
    strict_again = _offset_reader(endpoint, startingOffsets="earliest")
    with pytest.raises(DataLossError, match="failOnDataLoss=false"):
        strict_again.latestOffset(start, ReadAllAvailable())

    lenient = _offset_reader(endpoint, failOnDataLoss="false")
    assert list(lenient.read(lenient.partitions(start, end)[0])) == []  # skipped, logged
    end2 = lenient.latestOffset(start, ReadAllAvailable())
    assert QueueOffsets.from_json(end2, "t").queues == {("t", 0): 22, ("t", 1): 22}
    rows = _rows(lenient, lenient.partitions(start, end2))
    assert sorted(b for _, _, b in rows) == [b"after"] * 4
    # A queue new to the query (not in the start offsets) starts at its earliest, silently.
    new = OffsetRange("t", 1, 0, 22, True, new_queue=True)
    assert [b for _, _, b in _rows(strict, [new])] == [b"after"] * 2


def test_offset_reader_commits_progress_to_a_group_for_lag_tools(endpoint: str) -> None:
    _fill(endpoint, "t", 10)
    reader = _offset_reader(endpoint, startingOffsets="earliest", group="reader")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    reader.latestOffset(end, ReadAllAvailable())  # Spark committed `end` before this call
    with Admin(endpoint) as admin:
        rows = admin.get_group_lag("reader", "t")
    assert {r.queue_id: r.consumer_offset for r in rows if not r.retry} == {0: 5, 1: 5}


def _topic_rows(reader: Any, parts: list[Any]) -> list[tuple[str, int, int, bytes]]:
    return sorted(
        (r["topic"], r["queue_id"], r["queue_offset"], r["body"])
        for part in parts
        for batch in reader.read(part)
        for r in batch.to_pylist()
    )


def test_a_pattern_reads_topics_created_later_and_a_deleted_topic_is_data_loss(
    server: ServerThread,
) -> None:
    endpoint = server.endpoint
    _fill(endpoint, "orders-a", 4)
    _fill(endpoint, "other", 2)
    # A dead-letter topic whose name matches is still left out (as Kafka's internal topics).
    with SimpleConsumer(endpoint, group="orders-x", topic="other") as consumer:
        handle = consumer.receive(max_messages=1, wait_s=1)[0].receipt_handle
    server.call(lambda: server.broker.dead_letter("orders-x", handle))
    with Admin(endpoint) as admin:
        assert "%DLQ%orders-x" in {t.name for t in admin.list_topics()}

    def reader(**options: str) -> PopMQOffsetStreamReader:
        base = {"endpoint": endpoint, "subscribePattern": ".*orders-.*"}
        return PopMQOffsetStreamReader(ReadOptions.parse({**base, **options}))

    stream = reader(startingOffsets="earliest")
    start = stream.initialOffset()
    assert start["topics"] == {"orders-a": {"0": 0, "1": 0}}
    end = stream.latestOffset(start, ReadAllAvailable())
    assert {t for t, *_ in _topic_rows(stream, stream.partitions(start, end))} == {"orders-a"}
    _fill(endpoint, "orders-b", 6, queues=3)  # created while the query runs
    wait_for(lambda: stream.latestOffset(end, ReadAllAvailable()) != end, "orders-b found")
    end2 = stream.latestOffset(end, ReadAllAvailable())
    assert end2["topics"]["orders-b"] == {"0": 2, "1": 2, "2": 2}
    parts = stream.partitions(end, end2)
    assert {(p.topic, p.new_queue) for p in parts} == {("orders-b", True)}  # from earliest
    assert len(_topic_rows(stream, parts)) == 6
    behind = stream.reportLatestOffset()["behind"]["queues"]
    assert sorted(behind) == ["orders-a/0", "orders-a/1", "orders-b/0", "orders-b/1", "orders-b/2"]

    with Admin(endpoint) as admin:
        admin.delete_topic("orders-a", force=True)
    with pytest.raises(DataLossError, match="topic 'orders-a' of the checkpoint is not read any"):
        reader().latestOffset(end2, ReadAllAvailable())
    lenient = reader(failOnDataLoss="false").latestOffset(end2, ReadAllAvailable())
    assert list(lenient["topics"]) == ["orders-b"]
    nothing = ReadOptions.parse({"endpoint": endpoint, "subscribePattern": "nothing.*"})
    with pytest.raises(OptionError, match=r"subscribePattern 'nothing\.\*' matches no topic"):
        PopMQBatchReader(nothing).partitions()


def test_offsets_by_timestamp_resolve_per_queue_and_a_time_after_the_last_message(
    endpoint: str,
) -> None:
    _fill(endpoint, "t", 8)  # 4 per queue
    with PullConsumer(endpoint, topic="t") as puller:
        newest = max(m.store_timestamp for q in (0, 1) for m in puller.pull(q, 0).messages)
    boundary = int(newest.timestamp() * 1000) + 1
    while time.time() * 1000 <= boundary:  # store times are ms: let the clock pass it
        time.sleep(0.001)
    with Producer(endpoint) as producer:
        producer.send_batch("t", [Message(b"new")] * 4)  # 2 per queue, offsets 4 and 5
    future = boundary + 3_600_000

    def ranges(**options: str) -> list[tuple[int, int, int]]:
        read = PopMQBatchReader(ReadOptions.parse({"endpoint": endpoint, "topic": "t", **options}))
        return [(p.queue_id, p.start, p.end) for p in read.partitions()]

    def by_time(q0: int, q1: int) -> str:
        return json.dumps({"t": {"0": q0, "1": q1}})

    assert ranges(startingOffsetsByTimestamp=by_time(boundary, 0)) == [(0, 4, 6), (1, 0, 6)]
    assert ranges(endingOffsetsByTimestamp=by_time(boundary, future)) == [(0, 0, 4), (1, 0, 6)]
    # Precedence as Kafka's: startingTimestamp > startingOffsetsByTimestamp > startingOffsets.
    assert ranges(startingOffsetsByTimestamp=by_time(boundary, boundary),
                  startingOffsets="latest") == [(0, 4, 6), (1, 4, 6)]  # fmt: skip
    assert ranges(startingTimestamp="0", startingOffsetsByTimestamp=by_time(boundary, boundary)
                  ) == [(0, 0, 6), (1, 0, 6)]  # fmt: skip
    # A start after the newest message: error (Kafka's default strategy), or the queue's end.
    after = by_time(boundary, future)
    with pytest.raises(OptionError, match=r"no message is stored at or after the given time in "
                       r"queues \[t/1\].*startingOffsetsByTimestampStrategy=latest"):  # fmt: skip
        ranges(startingOffsetsByTimestamp=after)
    with pytest.raises(OptionError, match=r"option startingTimestamp: .*queues \[t/0, t/1\]"):
        ranges(startingTimestamp=str(future))
    latest = {"startingOffsetsByTimestampStrategy": "latest"}
    assert ranges(startingOffsetsByTimestamp=after, **latest) == [(0, 4, 6)]
    assert ranges(startingTimestamp=str(future), **latest) == []
    for text, message in [
        ('{"u": {"0": 1, "1": 1}}', "names topic 'u'; the query reads t"),
        ('{"t": {"0": 1}}', r"must name every queue; missing queues \[t/1\]"),
        ('{"t": {"0": 1, "1": 1, "2": 1}}', "names topic 't' queue 2, but the topic 't' has "
         r"queues 0\.\.1"),
    ]:  # fmt: skip
        with pytest.raises(OptionError, match=message):
            ranges(startingOffsetsByTimestamp=text)
    # A stream starts at the same place (and only a new checkpoint looks at the option).
    stream = _offset_reader(endpoint, startingOffsetsByTimestamp=by_time(boundary, 0))
    assert stream.initialOffset()["queues"] == {"0": 4, "1": 0}


# -- pop reader against a server -------------------------------------------------------


def _pop_reader(endpoint: str, **options: str) -> PopMQPopStreamReader:
    base = {"endpoint": endpoint, "topic": "t", "mode": "pop", "group": "g", "waitSeconds": "0"}
    return PopMQPopStreamReader(ReadOptions.parse({**base, **options}))


def _unfinished(server: ServerThread, topic: str = "t") -> tuple[int, int]:
    rows = server.call(lambda: server.broker.group_lag("g", topic))
    return sum(r.lag for r in rows), sum(r.inflight for r in rows)


def test_pop_reader_leases_replay_and_are_acked_only_when_committed(
    server: ServerThread,
) -> None:
    endpoint = server.endpoint
    _fill(endpoint, "t", 30)
    reader = _pop_reader(endpoint, numPartitions="3", maxMessagesPerPartition="8")
    try:
        start = reader.initialOffset()
        assert reader.initialOffset() == start
        end = reader.latestOffset(start, ReadAllAvailable())
        assert {k: v for k, v in end.items() if k != "run"} == {
            "v": 1, "mode": "pop", "batch": 0, "parts": 3, "max": 8,
        }  # fmt: skip
        parts = reader.partitions(start, end)
        assert parts == [LeasePartition(lease_token(end["run"], 0, i), 8, "t") for i in range(3)]
        first = _rows(reader, parts)
        assert len(first) == 24
        assert _rows(reader, parts) == first, "a retried task reads the same messages"
        assert _unfinished(server) == (30, 24), "nothing acked before the commit"
        # Spark asks for batch 1 only after committing batch 0: that acks batch 0.
        end1 = reader.latestOffset(end, ReadMaxRows(4))
        assert (end1["batch"], end1["parts"], end1["max"]) == (1, 3, 1)
        assert _unfinished(server) == (6, 0)
        parts1 = reader.partitions(end, end1)
        assert len(_rows(reader, parts1)) == 3
        reader.commit(end1)
        assert _unfinished(server) == (3, 0)
        assert reader.reportLatestOffset()["behind"]["total"] == 3  # the progress shows lag
    finally:
        reader.stop()

    # A restarted query (a new reader) acks the batch its checkpoint says was committed.
    restarted = _pop_reader(endpoint, numPartitions="1", maxMessagesPerPartition="8")
    try:
        end2 = restarted.latestOffset(end1, ReadAllAvailable())
        assert end2["run"] == end["run"] and end2["batch"] == 2
        rows = _rows(restarted, restarted.partitions(end1, end2))
        assert len(rows) == 3
        seen = {b for _, _, b in first} | {b for _, _, b in rows}
        assert len(seen) == 27  # no message twice
        assert restarted.latestOffset(end2, ReadAllAvailable()) == end2  # acked; nothing left
        assert _unfinished(server) == (0, 0)
        assert restarted.reportLatestOffset()["behind"]["total"] == 0
    finally:
        restarted.stop()


def test_leases_of_a_running_batch_are_renewed_past_the_invisible_duration(
    server: ServerThread,
) -> None:
    endpoint = server.endpoint
    _fill(endpoint, "t", 10)
    reader = _pop_reader(endpoint, invisibleDuration="2s", maxMessagesPerPartition="10")
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        rows = _rows(reader, reader.partitions(start, end))
        assert len(rows) == 10
        # The batch "runs" for longer than the 2 s lease: the driver's keeper renews it, so
        # another consumer of the group sees nothing during 4 s.
        with SimpleConsumer(endpoint, group="g", topic="t") as consumer:
            assert consumer.receive(max_messages=32, wait_s=4) == []
        reader.latestOffset(end, ReadAllAvailable())  # committed: acked
        assert _unfinished(server) == (0, 0)
    finally:
        reader.stop()


def test_a_batch_that_never_commits_shows_attempts_then_its_poison_goes_to_the_dlq(
    server: ServerThread,
) -> None:
    endpoint = server.endpoint
    with Admin(endpoint) as admin:
        admin.create_topic("t", queues=1)
        admin.create_group("g", max_delivery_attempts=2)
    with Producer(endpoint) as producer:
        producer.send("t", b"poison")
    options = {"invisibleDuration": "1s", "waitSeconds": "10", "maxMessagesPerPartition": "5"}
    attempts = []
    start: dict[str, Any] = {}
    end: dict[str, Any] = {}
    for _ in range(2):  # the first run, then a restart that replays the uncommitted batch
        reader = _pop_reader(endpoint, **options)
        if not start:
            start = reader.initialOffset()
            end = reader.latestOffset(start, ReadAllAvailable())
        rows = [r for part in reader.partitions(start, end) for r in _arrow_rows(reader, part)]
        reader.stop()  # the driver dies: nobody renews or acks; the lease runs out
        attempts += [(r["body"], r["delivery_attempt"]) for r in rows]
        wait_for(lambda: _unfinished(server)[1] == 0, "the lease to end", timeout_s=30)
    assert attempts == [(b"poison", 1), (b"poison", 2)]
    with PullConsumer(endpoint, topic="%DLQ%g") as dlq:

        def dead_lettered() -> bool:
            try:
                return dlq.queue_offsets()[0].max_offset == 1
            except NotFoundError:  # the DLQ topic is created by the first dead letter
                return False

        wait_for(dead_lettered, "the DLQ copy", timeout_s=30)
        assert [m.body for m in dlq.pull(0, 0).messages] == [b"poison"]


def _arrow_rows(reader: Any, part: Any) -> list[dict[str, Any]]:
    return [row for batch in reader.read(part) for row in batch.to_pylist()]


def test_one_group_pops_several_topics_each_with_its_own_partitions(server: ServerThread) -> None:
    endpoint = server.endpoint
    _fill(endpoint, "a", 6)
    _fill(endpoint, "b", 3, queues=1)
    _fill(endpoint, "c", 0, queues=1)  # no backlog: no partitions
    options = {"subscribe": "a,b,c", "mode": "pop", "group": "g", "waitSeconds": "0"}
    reader = PopMQPopStreamReader(ReadOptions.parse({"endpoint": endpoint, **options}))
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        assert (end["parts"], end["topics"]) == (3, {"a": 2, "b": 1})
        parts = reader.partitions(start, end)
        assert [p.topic for p in parts] == ["a", "a", "b"]
        assert reader.partitions(start, end) == parts  # pure in (start, end)
        rows = _topic_rows(reader, parts)
        assert sorted((t, b) for t, _, _, b in rows) == [
            *(("a", f"m-{i}".encode()) for i in range(6)),
            *(("b", f"m-{i}".encode()) for i in range(3)),
        ]
        assert reader.latestOffset(end, ReadAllAvailable()) == end  # acked; nothing left
        for topic in ("a", "b"):
            assert _unfinished(server, topic) == (0, 0)
        report = reader.reportLatestOffset()
        assert (report["topics"], sorted(report["behind"]["queues"])) == (
            ["a", "b", "c"], ["a/0", "a/1", "a/retry", "b/0", "b/retry", "c/0"],
        )  # fmt: skip
        # maxMessagesPerTrigger below the partition count: fewer partitions, one message each.
        with Producer(endpoint) as producer:
            for topic in ("a", "b"):
                producer.send_batch(topic, [Message(b"more")] * 4)
        wait_for(lambda: reader.reportLatestOffset()["behind"]["total"] == 8, "the new backlog")
        end2 = reader.latestOffset(end, ReadMaxRows(2))
        assert (end2["parts"], end2["max"], end2["topics"]) == (2, 1, {"a": 1, "b": 1})
    finally:
        reader.stop()
