"""Spark's pop mode against a cluster (etcd, three `popmq broker` and two `popmq proxy`
processes): a proxy killed with SIGKILL in the middle of a batch costs neither a message
nor a duplicate, because the retried task pops its lease again through the other proxy and
gets the same messages (the lease lives in etcd, its handles name their brokers)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from popmq import Admin, Message, Producer
from tests.spark.helpers import wait_for
from tests.support.cluster import Cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path / "cluster", brokers=3, proxies=2).start()
    try:
        yield running
    finally:
        running.stop()


def test_a_proxy_killed_mid_batch_keeps_the_lease_semantics(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    first, second = cluster.endpoints
    endpoints = f"{first},{second}"  # executors and the driver start on p1
    with Admin(endpoints) as admin:
        admin.create_topic("jobs", queues=1)  # one queue on each of the three brokers
    bodies = [f"job-{i}" for i in range(300)]
    with Producer(endpoints) as producer:
        producer.send_batch("jobs", [Message(b.encode()) for b in bodies])

    popped = tmp_path / "popped"
    killed = tmp_path / "killed"

    def die_with_the_proxy(body):  # no type hints: Spark would read them as a pandas UDF
        # Runs on an executor after its partition popped its lease page through p1: the
        # first attempt of partition 0 in batch 0 waits until p1 is killed, then fails.
        from pyspark import TaskContext

        context = TaskContext.get()
        if (
            context is not None
            and context.getLocalProperty("streaming.sql.batchId") == "0"
            and context.partitionId() == 0
            and context.attemptNumber() == 0
        ):
            import os
            import time

            popped.touch()
            deadline = time.monotonic() + 60
            while not os.path.exists(killed) and time.monotonic() < deadline:
                time.sleep(0.05)
            raise RuntimeError("the task dies with its proxy")
        return body

    def kill_p1_when_popped() -> None:
        deadline = time.monotonic() + 120
        while not popped.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if popped.exists():
            cluster.kill("p1")
            killed.touch()

    killer = threading.Thread(target=kill_p1_when_popped, daemon=True)
    killer.start()
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    def sink(batch: DataFrame, batch_id: int) -> None:
        rows = batch.collect()
        with lock:
            seen.extend((r.body.decode(), r.delivery_attempt) for r in rows)

    flaky = F.udf(die_with_the_proxy, "binary")
    query = (
        spark.readStream.format("popmq")
        .option("endpoint", endpoints)
        .option("topic", "jobs")
        .option("mode", "pop")
        .option("group", "workers")
        .option("numPartitions", "2")
        .option("maxMessagesPerPartition", "100")
        .option("invisibleDuration", "60s")
        .option("waitSeconds", "1")
        .load()
        .select("body", "delivery_attempt", flaky("body").alias("checked"))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        wait_for(lambda: len(seen) >= 300, "all 300 messages", timeout_s=240)

        def settled() -> bool:
            with Admin(second) as admin:
                report = admin.lag_report("workers", "jobs")
            return sum(q.lag + q.inflight for q in report.queues) == 0

        wait_for(settled, "every batch acked through the surviving proxy", timeout_s=120)
    finally:
        query.stop()
        killer.join(timeout=5)
    assert killed.exists(), "p1 was killed while the first attempt held its lease page"
    assert sorted(b for b, _ in seen) == sorted(bodies), "every message exactly once"
    assert {attempt for _, attempt in seen} == {1}, "the retry replayed the lease via p2"
