"""spark-drain: Spark pop mode on local[2] vs one SDK SimpleConsumer draining a backlog.

One topic (8 queues) is filled with 1 KiB messages, then drained twice by two groups:
- Spark: readStream pop mode (lease tokens, acks after commit), trigger AvailableNow, noop
  sink, master local[2], driven from a spawned process. Its time includes starting the
  query and its Python workers (the first batch); the steady rate leaves that batch out.
- SDK: one SimpleConsumer in a spawned process (no GIL shared with the server), receive 32
  with a 1 s long poll, ack them in one call, until the backlog is gone.

The server runs in this process on its own loop thread (default settings: pops of at most
32 messages, sync flush). Spark's session start-up is not counted.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from popmq import Admin, Message, Producer, SimpleConsumer
from tests.integration.server import ServerThread

TOPIC = "drain"


@dataclass(frozen=True)
class DrainResult:
    consumer: str
    messages: int
    seconds: float
    steady_rate: float | None = None

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


def _fill(endpoint: str, count: int, body_bytes: int) -> None:
    body = os.urandom(body_bytes)  # incompressible: sent and stored as 1 KiB
    with Producer(endpoint) as producer:
        for start in range(0, count, 500):
            producer.send_batch(TOPIC, [Message(body)] * min(500, count - start))


def _sdk_drain(endpoint: str, count: int) -> tuple[int, float]:
    """Runs in a spawned process: one consumer, receive 32, ack 32, until `count` acked."""
    done = 0
    started = time.perf_counter()
    with SimpleConsumer(endpoint, group="sdk-drain", topic=TOPIC) as consumer:
        while done < count:
            messages = consumer.receive(max_messages=32, invisible_duration_s=60, wait_s=1)
            if messages:
                consumer.ack(messages)
                done += len(messages)
    return done, time.perf_counter() - started


def _spark_drain(endpoint: str, per_partition: int, checkpoint: Path) -> DrainResult:
    """Runs in a spawned process: its own SparkSession, stopped at the end."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import popmq.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("popmq-bench-spark-drain")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    popmq.spark.register(spark)
    started = time.perf_counter()
    query = (
        spark.readStream.format("popmq")
        .option("endpoint", endpoint)
        .option("topic", TOPIC)
        .option("mode", "pop")
        .option("group", "spark-drain")
        .option("numPartitions", "4")
        .option("maxMessagesPerPartition", str(per_partition))
        .option("invisibleDuration", "300s")
        .option("waitSeconds", "1")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    failure = query.exception()
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    spark.stop()
    if failure is not None:
        raise RuntimeError(f"the Spark drain failed: {failure}")
    drained = sum(p["numInputRows"] for p in progress)
    steady = None
    if len(progress) > 1:
        later = progress[1:]
        seconds = sum(p["durationMs"]["triggerExecution"] for p in later) / 1000
        steady = sum(p["numInputRows"] for p in later) / seconds
    return DrainResult("Spark pop mode, local[2], 4 partitions", drained, elapsed, steady)


def _unfinished(server: ServerThread, group: str) -> int:
    """Messages the group has not acked (lag plus in flight), read on the server's loop."""

    async def count() -> int:
        return sum(r.lag + r.inflight for r in await server.broker.group_lag(group, TOPIC))

    return server.call(count)


def run(count: int, *, batches: int, body_bytes: int = 1024) -> list[DrainResult]:
    """Fill `count` messages, drain them with Spark (in about `batches` micro-batches), then
    with one SimpleConsumer."""
    with tempfile.TemporaryDirectory(prefix="popmq-bench-spark-") as tmp:
        server = ServerThread(Path(tmp) / "data")
        endpoint = server.start()
        try:
            with Admin(endpoint) as admin:
                admin.create_topic(TOPIC, queues=8)
            _fill(endpoint, count, body_bytes)
            context = multiprocessing.get_context("spawn")
            with context.Pool(1) as pool:
                per_partition = max(1, -(-count // (4 * batches)))
                spark = pool.apply(
                    _spark_drain, (endpoint, per_partition, Path(tmp) / "checkpoint")
                )
            with context.Pool(1) as pool:
                drained, seconds = pool.apply(_sdk_drain, (endpoint, count))
            sdk = DrainResult("one SDK SimpleConsumer (receive 32, ack)", drained, seconds)
            lag = {group: _unfinished(server, group) for group in ("spark-drain", "sdk-drain")}
        finally:
            server.stop()
    if spark.messages != count or lag != {"spark-drain": 0, "sdk-drain": 0}:
        raise RuntimeError(f"a drain was incomplete: spark {spark.messages}/{count}, lag {lag}")
    return [spark, sdk]


def main(*, quick: bool) -> str:
    count = 1_000 if quick else 200_000
    results = run(count, batches=1 if quick else 4)
    lines = [
        f"{count:,} messages of 1 KiB, 8 queues; each drain acks everything.\n",
        "| consumer | messages | seconds | msg/s | steady msg/s (after batch 1) |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        steady = f"{r.steady_rate:,.0f}" if r.steady_rate is not None else "-"
        lines.append(
            f"| {r.consumer} | {r.messages:,} | {r.seconds:.1f} | {r.rate:,.0f} | {steady} |"
        )
    spark, sdk = results
    lines.append(f"\nSpark / SDK throughput ratio: {spark.rate / sdk.rate:.2f}")
    return "\n".join(lines)
