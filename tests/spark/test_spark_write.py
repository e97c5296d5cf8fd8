"""Writes: a batch Spark runs again stores nothing twice (dedup ids + the broker's window)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.errors import PySparkException, StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from popmq import Admin, Message, Producer, PullConsumer
from tests.support.server_thread import ServerThread


def _stored(endpoint: str, topic: str) -> int:
    with PullConsumer(endpoint, topic=topic) as puller:
        return sum(s.max_offset - s.min_offset for s in puller.queue_offsets())


def _bodies(spark: SparkSession, endpoint: str, topic: str) -> list[str]:
    df = spark.read.format("popmq").option("endpoint", endpoint).option("topic", topic).load()
    return sorted(r.body.decode() for r in df.select("body").collect())


def test_stream_write_of_a_batch_run_again_after_a_failure_has_no_duplicates(
    spark: SparkSession, endpoint: str, tmp_path: Path
) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("in", queues=2)
        admin.create_topic("out", queues=2)
    sent = [f"m-{i}" for i in range(1000)]
    with Producer(endpoint) as producer:
        producer.send_batch("in", [Message(b.encode()) for b in sent])
    armed = tmp_path / "armed"
    armed.write_text("fail queue 1 until disarmed")
    armed_path = str(armed)

    def gate(queue_id, body):  # no type hints: Spark would read them as a pandas UDF
        # Executor side. While armed, the task of queue 1 waits until the task of queue 0
        # has stored some messages, then fails (every attempt): the batch fails after part
        # of it was written, and Spark runs it again on restart.
        import os
        import time

        from popmq import PullConsumer

        if queue_id == 1 and os.path.exists(armed_path):
            with PullConsumer(endpoint, topic="out") as puller:
                give_up = time.monotonic() + 60
                while time.monotonic() < give_up:
                    if sum(s.max_offset for s in puller.queue_offsets()) >= 100:
                        break
                    time.sleep(0.05)
            raise RuntimeError("injected failure while the batch is half written")
        return body

    gate_udf = F.udf(gate, "binary")

    def start() -> StreamingQuery:
        return (
            spark.readStream.format("popmq")
            .option("endpoint", endpoint)
            .option("topic", "in")
            .option("startingOffsets", "earliest")
            .load()
            .select(gate_udf("queue_id", "body").alias("body"), F.lit("copied").alias("tag"))
            .writeStream.format("popmq")
            .option("endpoint", endpoint)
            .option("topic", "out")
            .option("batchSize", "50")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )

    failed = start()
    with pytest.raises(StreamingQueryException, match="injected failure"):
        failed.awaitTermination(120)
    half = _stored(endpoint, "out")
    assert 100 <= half < 1000, "the failed batch wrote part of its rows"

    armed.unlink()
    again = start()  # replays batch 0: same query id, batch id, partitions, rows
    assert again.awaitTermination(120)
    assert again.exception() is None
    assert _stored(endpoint, "out") == 1000, "the rows written twice were stored once"
    assert _bodies(spark, endpoint, "out") == sorted(sent)


def test_batch_write_repeated_with_one_dedup_key_stores_once(
    spark: SparkSession, endpoint: str
) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("out", queues=2)
    df = spark.range(300).select(
        F.format_string("row-%d", "id").alias("body"), F.lit("out").alias("topic")
    )
    for _ in range(2):
        df.write.format("popmq").option("endpoint", endpoint).option(
            "dedupKey", "export-2026-11-21"
        ).mode("append").save()
    assert _stored(endpoint, "out") == 300
    assert _bodies(spark, endpoint, "out") == sorted(f"row-{i}" for i in range(300))


def test_write_rejects_columns_it_cannot_send(spark: SparkSession, endpoint: str) -> None:
    df = spark.range(3).select(F.col("id").alias("body"))
    with pytest.raises(
        PySparkException, match="column body is bigint: it must be string or binary"
    ):
        df.write.format("popmq").option("endpoint", endpoint).option("topic", "t").mode(
            "append"
        ).save()
    extra = spark.range(3).select(F.lit("x").alias("body"), F.col("id"))
    with pytest.raises(PySparkException, match=r"columns \['id'\] cannot be written"):
        extra.write.format("popmq").option("endpoint", endpoint).option("topic", "t").mode(
            "append"
        ).save()


def test_write_carries_message_group_keys_properties_and_delivery_time(
    spark: SparkSession, server: ServerThread
) -> None:
    endpoint = server.endpoint
    with Admin(endpoint) as admin:
        admin.create_topic("mixed", queues=1, message_type="mixed")
    due = datetime.now(UTC) + timedelta(hours=1)
    df = spark.createDataFrame(
        [
            ("a", "g1", "k-a", {"p": "1"}, None),
            ("b", "g1", "k-b", {"p": "2"}, None),
            ("c", None, None, None, due),
        ],
        "body string, message_group string, keys string, properties map<string,string>, "
        "delivery_timestamp timestamp",
    )
    df.write.format("popmq").option("endpoint", endpoint).option("topic", "mixed").mode(
        "append"
    ).save()
    with PullConsumer(endpoint, topic="mixed") as puller:
        now = puller.pull(0, 0).messages
        # Rows of different Spark partitions arrive in either order.
        assert sorted((m.body, m.message_group, m.keys, m.properties["p"]) for m in now) == [
            (b"a", "g1", ("k-a",), "1"),
            (b"b", "g1", ("k-b",), "2"),
        ]
    # c waits for its delivery time in the broker's timers (docs/architecture.md), due in
    # an hour: not delivered now, not lost.
    store = server.broker.store
    due_ms = server.sync(
        lambda: [int.from_bytes(k[:8], "big") for k, _ in store.scan("timers", b"", b"\xff" * 16)]
    )
    assert len(due_ms) == 1
    assert abs(due_ms[0] - due.timestamp() * 1000) < 1000
