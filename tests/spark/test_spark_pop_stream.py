"""Streaming `pop` mode: lease tokens make retries see the same messages, acks wait for
Spark's commit, queries of one group share the work, partitions may outnumber queues."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from popmq import Admin, Message, Producer, SimpleConsumer
from tests.spark.helpers import wait_for
from tests.support.server_thread import ServerThread


def _send(endpoint: str, topic: str, count: int, prefix: str = "m") -> set[str]:
    bodies = [f"{prefix}-{i}" for i in range(count)]
    with Producer(endpoint) as producer:
        for start in range(0, count, 500):
            producer.send_batch(topic, [Message(b.encode()) for b in bodies[start : start + 500]])
    return set(bodies)


def _pop_stream(spark: SparkSession, endpoint: str, topic: str, **options: str) -> DataFrame:
    reader = (
        spark.readStream.format("popmq")
        .option("endpoint", endpoint)
        .option("topic", topic)
        .option("mode", "pop")
        .option("group", "workers")
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _in_flight(server: ServerThread, group: str, topic: str) -> tuple[int, int]:
    """(lag, in flight) of the group over the topic's queues and its retry queue."""
    rows = server.call(lambda: server.broker.group_lag(group, topic))
    return sum(r.lag for r in rows), sum(r.inflight for r in rows)


def test_a_task_failing_once_still_yields_every_message_once_and_acks_wait_for_commit(
    spark: SparkSession, server: ServerThread, tmp_path: Path
) -> None:
    endpoint = server.endpoint
    with Admin(endpoint) as admin:
        admin.create_topic("jobs", queues=2)
    sent = _send(endpoint, "jobs", 400)
    marker = str(tmp_path / "failed-once")

    def fail_first_attempt(body):  # no type hints: Spark would read them as a pandas UDF
        # Runs on an executor: the first attempt of partition 0 in batch 0 dies after its
        # partition popped (the retry pops again under the same lease token).
        from pyspark import TaskContext

        context = TaskContext.get()
        if (
            context is not None
            and context.getLocalProperty("streaming.sql.batchId") == "0"
            and context.partitionId() == 0
            and context.attemptNumber() == 0
        ):
            with open(marker, "w") as f:
                f.write("failed")
            raise RuntimeError("injected failure of the first attempt")
        return body

    flaky = F.udf(fail_first_attempt, "binary")
    seen: list[tuple[str, int]] = []
    unacked_at_batch_time: list[tuple[int, int, int]] = []
    lock = threading.Lock()

    def sink(batch: DataFrame, batch_id: int) -> None:
        # foreachBatch runs in this (driver) process, before Spark commits the batch.
        rows = batch.collect()
        _, in_flight = _in_flight(server, "workers", "jobs")
        with lock:
            seen.extend((r.body.decode(), r.delivery_attempt) for r in rows)
            unacked_at_batch_time.append((batch_id, len(rows), in_flight))

    query = (
        _pop_stream(
            spark,
            endpoint,
            "jobs",
            numPartitions="2",
            maxMessagesPerPartition="100",
            invisibleDuration="60s",
            waitSeconds="1",
        )
        .select("body", "delivery_attempt", flaky("body").alias("checked"))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        wait_for(lambda: len(seen) >= 400, "all 400 messages")
        # Every batch was acked once committed: nothing left, nothing in flight.
        wait_for(lambda: _in_flight(server, "workers", "jobs") == (0, 0), "all acks")
    finally:
        query.stop()
    assert Path(marker).exists(), "the injected failure happened"
    bodies = [b for b, _ in seen]
    assert sorted(bodies) == sorted(sent), "every message exactly once"
    assert {attempt for _, attempt in seen} == {1}, "the retry replayed the lease"
    # While a batch ran, exactly its own messages were in flight: none acked before the
    # commit, and the failed attempt's pop left nothing extra leased.
    for batch_id, rows, in_flight in unacked_at_batch_time:
        assert in_flight == rows, (batch_id, rows, in_flight)


def test_messages_of_an_uncommitted_batch_come_back_after_the_lease(
    spark: SparkSession, endpoint: str, tmp_path: Path
) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("jobs", queues=2)
    sent = _send(endpoint, "jobs", 50)

    def failing_sink(batch: DataFrame, batch_id: int) -> None:
        batch.collect()
        raise RuntimeError("the sink fails: the batch is never committed")

    query = (
        _pop_stream(spark, endpoint, "jobs", invisibleDuration="3s", waitSeconds="1")
        .writeStream.foreachBatch(failing_sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        with pytest.raises(StreamingQueryException, match="the batch is never committed"):
            query.awaitTermination(120)
    finally:
        query.stop()
    # Nothing was acked: after the lease ends every message is delivered again.
    back: list[Any] = []
    with SimpleConsumer(endpoint, group="workers", topic="jobs") as consumer:
        wait_for(
            lambda: bool(back.extend(consumer.receive(32, 60, wait_s=2))) or len(back) >= 50,
            "the 50 unacked messages to come back",
            timeout_s=60,
        )
        consumer.ack(back)
    assert sorted(m.body.decode() for m in back) == sorted(sent)
    assert {m.delivery_attempt for m in back} == {2}


def test_two_queries_of_one_group_split_the_work_without_overlap(
    spark: SparkSession, server: ServerThread, tmp_path: Path
) -> None:
    endpoint = server.endpoint
    with Admin(endpoint) as admin:
        admin.create_topic("jobs", queues=4)
    seen: dict[str, list[str]] = {"a": [], "b": []}
    batches: dict[str, int] = {"a": 0, "b": 0}
    lock = threading.Lock()

    def sink_for(name: str) -> Any:
        def sink(batch: DataFrame, batch_id: int) -> None:
            rows = batch.select("body").collect()
            with lock:
                seen[name].extend(r.body.decode() for r in rows)
                batches[name] += 1

        return sink

    queries = [
        _pop_stream(
            spark,
            endpoint,
            "jobs",
            numPartitions="2",
            maxMessagesPerPartition="50",
            waitSeconds="0.5",
        )
        .writeStream.foreachBatch(sink_for(name))
        .option("checkpointLocation", str(tmp_path / f"checkpoint-{name}"))
        .trigger(processingTime="200 milliseconds")
        .start()
        for name in ("a", "b")
    ]
    try:
        # Both are running before the work arrives, so both can take a share.
        wait_for(
            lambda: all("Initializing" not in q.status["message"] for q in queries),
            "both queries to start",
        )
        sent = _send(endpoint, "jobs", 3000)
        wait_for(lambda: len(seen["a"]) + len(seen["b"]) >= 3000, "all 3000 messages")
        wait_for(lambda: _in_flight(server, "workers", "jobs") == (0, 0), "all acks")
    finally:
        for query in queries:
            query.stop()
    assert not set(seen["a"]) & set(seen["b"]), "no message processed by both"
    assert sorted(seen["a"] + seen["b"]) == sorted(sent), "every message exactly once"
    assert seen["a"] and seen["b"], "both queries took a share"


def test_more_partitions_than_queues_are_all_used_and_available_now_acks_the_end(
    spark: SparkSession, server: ServerThread, tmp_path: Path
) -> None:
    endpoint = server.endpoint
    with Admin(endpoint) as admin:
        admin.create_topic("jobs", queues=2)
    sent = _send(endpoint, "jobs", 200)
    partitions: list[tuple[int, int, int]] = []
    seen: list[str] = []

    def sink(batch: DataFrame, batch_id: int) -> None:
        rows = batch.withColumn("pid", F.spark_partition_id()).collect()
        seen.extend(r.body.decode() for r in rows)
        used = len({r.pid for r in rows})
        partitions.append((batch.rdd.getNumPartitions(), used, len(rows)))

    query = (
        _pop_stream(spark, endpoint, "jobs", numPartitions="4", maxMessagesPerPartition="25")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(seen) == sorted(sent)
    assert partitions[0] == (4, 4, 100), "4 partitions over 2 queues, each took its 25"
    assert all(planned == 4 for planned, _, _ in partitions)
    # Pop offsets are synthetic: the lag (the group's backlog when a batch was planned)
    # is what reportLatestOffset puts into the progress.
    reported = [json.loads(p["sources"][0]["latestOffset"]) for p in query.recentProgress]
    behind = [r["behind"]["total"] for r in reported]
    assert behind[:2] == [200, 100]
    # AvailableNow ends without commit(); the last batch was acked by latestOffset(start).
    wait_for(lambda: _in_flight(server, "workers", "jobs") == (0, 0), "all acks", timeout_s=30)


def test_one_group_pops_several_subscribed_topics_and_acks_them_all(
    spark: SparkSession, server: ServerThread, tmp_path: Path
) -> None:
    endpoint = server.endpoint
    with Admin(endpoint) as admin:
        admin.create_topic("jobs", queues=2)
        admin.create_topic("urgent", queues=1)
    sent = {("jobs", b) for b in _send(endpoint, "jobs", 100)}
    sent |= {("urgent", b) for b in _send(endpoint, "urgent", 40, prefix="u")}
    seen: list[tuple[str, str]] = []

    def sink(batch: DataFrame, batch_id: int) -> None:
        seen.extend((r.topic, r.body.decode()) for r in batch.select("topic", "body").collect())

    query = (
        spark.readStream.format("popmq")
        .option("endpoint", endpoint)
        .option("subscribe", "jobs,urgent")
        .option("mode", "pop")
        .option("group", "workers")
        .option("maxMessagesPerPartition", "30")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(seen) == sorted(sent), "every message of both topics, once"
    first = json.loads(query.recentProgress[0]["sources"][0]["latestOffset"])
    assert first["topics"] == ["jobs", "urgent"]
    for topic in ("jobs", "urgent"):
        wait_for(lambda t=topic: _in_flight(server, "workers", t) == (0, 0), f"acks of {topic}")
