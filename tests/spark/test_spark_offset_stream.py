"""Streaming `offset` mode: admission control, restart from the checkpoint, group commit,
and batch reads by time."""

from __future__ import annotations

import json
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from popmq import Admin, Message, Producer, PullConsumer
from tests.spark.helpers import wait_for


def _send(endpoint: str, topic: str, bodies: list[str]) -> None:
    with Producer(endpoint) as producer:
        for start in range(0, len(bodies), 500):
            producer.send_batch(topic, [Message(b.encode()) for b in bodies[start : start + 500]])


def _stream(spark: SparkSession, endpoint: str, **options: str) -> DataFrame:
    reader = spark.readStream.format("popmq").option("endpoint", endpoint).option("topic", "events")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load().select("body", "queue_id", "queue_offset")


def test_offset_stream_stopped_mid_stream_and_restarted_replays_exactly(
    spark: SparkSession, endpoint: str, tmp_path: Path
) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("events", queues=3)
    first = [f"e-{i}" for i in range(1500)]
    _send(endpoint, "events", first)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    options = {
        "startingOffsets": "earliest",
        "maxMessagesPerTrigger": "300",
        "group": "spark-events",
    }

    query = (
        _stream(spark, endpoint, **options)
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    try:
        wait_for(
            lambda: sum(1 for p in query.recentProgress if p["numInputRows"] > 0) >= 2,
            "two non-empty micro-batches",
        )
    finally:
        query.stop()
    first_run = [p["numInputRows"] for p in query.recentProgress]
    assert 0 < sum(first_run) < 1500, "stopped mid-stream"
    assert max(first_run) <= 300, "admission control: maxMessagesPerTrigger"

    second = [f"e-{i}" for i in range(1500, 2200)]
    _send(endpoint, "events", second)
    # Restart from the checkpoint; startingOffsets no longer matters ("latest" here).
    restarted = (
        _stream(spark, endpoint, **{**options, "startingOffsets": "latest"})
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert restarted.awaitTermination(120)
    assert restarted.exception() is None
    second_run = [p["numInputRows"] for p in restarted.recentProgress]
    assert max(second_run) <= 300

    rows = spark.read.parquet(out).collect()
    bodies = [r.body.decode() for r in rows]
    assert len(bodies) == 2200, "no loss, no duplicates"
    assert sorted(bodies) == sorted(first + second)
    positions = sorted((r.queue_id, r.queue_offset) for r in rows)
    assert len(set(positions)) == 2200

    # reportLatestOffset shows the queues' ends in the progress (the lag signal).
    last = restarted.recentProgress[-1]["sources"][0]
    assert last["latestOffset"] is not None
    with PullConsumer(endpoint, topic="events", group="spark-events") as puller:
        ends = {s.queue_id: s.max_offset for s in puller.queue_offsets()}
        # The group offset follows the query (committed once Spark committed each batch).
        wait_for(
            lambda: {o.queue_id: o.offset for o in puller.get_offsets()} == ends,
            "the group offset to reach the end",
            timeout_s=30,
        )
    with Admin(endpoint) as admin:
        assert sum(r.lag for r in admin.get_group_lag("spark-events", "events")) == 0


def test_batch_read_by_time_range(spark: SparkSession, endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("events", queues=2)
    _send(endpoint, "events", [f"old-{i}" for i in range(50)])
    with PullConsumer(endpoint, topic="events") as puller:
        newest = max(m.store_timestamp for q in range(2) for m in puller.pull(q, 0, 1024).messages)
    boundary_ms = int(newest.timestamp() * 1000) + 1
    while time.time() * 1000 <= boundary_ms:  # store times are ms: let the clock pass it
        time.sleep(0.001)
    _send(endpoint, "events", [f"new-{i}" for i in range(30)])

    def read(**options: str) -> list[tuple[int, int, str]]:
        reader = spark.read.format("popmq").option("endpoint", endpoint).option("topic", "events")
        for name, value in options.items():
            reader = reader.option(name, value)
        rows = reader.load().select("queue_id", "queue_offset", "body").collect()
        return sorted((r.queue_id, r.queue_offset, r.body.decode()) for r in rows)

    everything = read()
    assert len(everything) == 80
    newer = read(startingTimestamp=str(boundary_ms))
    assert sorted(b for _, _, b in newer) == sorted(f"new-{i}" for i in range(30))
    older = read(endingTimestamp=str(boundary_ms))
    assert sorted(b for _, _, b in older) == sorted(f"old-{i}" for i in range(50))
    # JSON offsets per queue: -1 is latest, so queue 1 contributes nothing.
    assert read(startingOffsets='{"0": 20, "1": -1}', endingOffsets='{"0": 25, "1": -1}') == [
        row for row in everything if row[0] == 0 and 20 <= row[1] < 25
    ]


def test_available_now_with_min_messages_per_trigger_reads_everything(
    spark: SparkSession, endpoint: str, tmp_path: Path
) -> None:
    # minMessagesPerTrigger above the whole backlog: held back, the first trigger would plan
    # nothing and AvailableNow would end there, having read nothing.
    with Admin(endpoint) as admin:
        admin.create_topic("events", queues=3)
    _send(endpoint, "events", [f"e-{i}" for i in range(300)])
    options = {  # the Kafka source's names are accepted for these two
        "startingOffsets": "earliest",
        "minOffsetsPerTrigger": "1000",
        "maxOffsetsPerTrigger": "1000",
    }
    query = (
        _stream(spark, endpoint, **options)
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert sum(p["numInputRows"] for p in query.recentProgress) == 300
    # The progress shows the queues' ends and the lag behind them: none left.
    latest = json.loads(query.recentProgress[-1]["sources"][0]["latestOffset"])
    assert sum(latest["queues"].values()) == 300
    assert latest["behind"]["total"] == 0


def test_batch_read_of_two_topics_by_timestamp_with_min_partitions(
    spark: SparkSession, endpoint: str
) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("orders", queues=2)
        admin.create_topic("refunds", queues=1)
    _send(endpoint, "orders", [f"old-{i}" for i in range(40)])
    with PullConsumer(endpoint, topic="orders") as puller:
        newest = max(m.store_timestamp for q in range(2) for m in puller.pull(q, 0, 1024).messages)
    boundary_ms = int(newest.timestamp() * 1000) + 1
    while time.time() * 1000 <= boundary_ms:  # store times are ms: let the clock pass it
        time.sleep(0.001)
    _send(endpoint, "orders", [f"new-{i}" for i in range(20)])
    _send(endpoint, "refunds", [f"refund-{i}" for i in range(30)])

    start = {"orders": {"0": boundary_ms, "1": boundary_ms}, "refunds": {"0": 0}}
    df = (
        spark.read.format("popmq")
        .option("endpoint", endpoint)
        .option("subscribe", "orders,refunds")
        .option("startingOffsetsByTimestamp", json.dumps(start))
        .option("startingOffsets", "latest")  # loses to startingOffsetsByTimestamp, as in Kafka
        .option("minPartitions", "10")
        .load()
    )
    # Ranges of 10, 10 and 30 messages, split in proportion to reach about 10 partitions.
    assert df.rdd.getNumPartitions() == 10
    rows = df.select("topic", "body").collect()
    assert sorted((r.topic, r.body.decode()) for r in rows) == sorted(
        [("orders", f"new-{i}") for i in range(20)]
        + [("refunds", f"refund-{i}") for i in range(30)]
    )


def test_a_stream_over_a_pattern_reads_a_topic_created_while_it_runs(
    spark: SparkSession, endpoint: str, tmp_path: Path
) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("events-a", queues=2)
        admin.create_topic("audit", queues=1)
    _send(endpoint, "events-a", [f"a-{i}" for i in range(20)])
    _send(endpoint, "audit", ["not matched"])
    seen: list[tuple[str, str]] = []
    last_batch: list[int] = []  # the id of the batch that brought the 50th message

    def sink(batch: DataFrame, batch_id: int) -> None:
        seen.extend((r.topic, r.body.decode()) for r in batch.select("topic", "body").collect())
        if len(seen) >= 50 and not last_batch:
            last_batch.append(batch_id)

    query = (
        spark.readStream.format("popmq")
        .option("endpoint", endpoint)
        .option("subscribePattern", "events-.*")
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: len(seen) >= 20, "events-a")
        with Admin(endpoint) as admin:
            admin.create_topic("events-b", queues=3)
        _send(endpoint, "events-b", [f"b-{i}" for i in range(30)])
        wait_for(lambda: len(seen) >= 50, "events-b, found by the pattern")
        # A batch's progress is recorded after its sink returned: a stop before that would
        # leave the batch before it (which knew no events-b) as the last progress.
        wait_for(
            lambda: any(p["batchId"] == last_batch[0] for p in query.recentProgress),
            "the progress of the batch that read the last message",
        )
    finally:
        query.stop()
    assert sorted(seen) == sorted(
        [("events-a", f"a-{i}") for i in range(20)] + [("events-b", f"b-{i}") for i in range(30)]
    )
    (progress,) = (p for p in query.recentProgress if p["batchId"] == last_batch[0])
    latest = json.loads(progress["sources"][0]["latestOffset"])
    assert latest["topics"] == {"events-a": {"0": 10, "1": 10},
                                "events-b": {"0": 10, "1": 10, "2": 10}}  # fmt: skip
