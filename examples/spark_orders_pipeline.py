"""Orders pipeline on Spark: popmq (pop mode) -> JSON -> per-minute Parquet + enriched topic.

    make example                       # embedded popmq server, sample orders, local[2]
    python examples/spark_orders_pipeline.py --endpoint 127.0.0.1:8081 --orders 5000

What it does:
1. Creates the topics ``orders`` and ``orders-enriched`` (if missing) and sends sample orders
   as JSON: ``{"order_id", "customer", "amount", "ts"}`` spread over several minutes.
2. Streams ``orders`` in pop mode (group ``orders-pipeline``): executors pop in parallel
   under lease tokens; a batch's messages are acked only after Spark committed it.
3. Each micro-batch (foreachBatch, so one read feeds both outputs):
   - parses the JSON and aggregates orders and revenue per minute, written as Parquet to
     ``<output>/per_minute/batch_id=<n>`` (overwritten when a batch is replayed);
   - writes an enriched event per order (size class, customer tier) to
     ``orders-enriched``, with dedupKey ``<query>/<batch>`` so a replayed batch stores
     nothing twice.
4. Runs with trigger(availableNow=True) and prints the per-minute totals.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import popmq.spark
from popmq import Admin, AlreadyExistsError, Message, Producer

GROUP = "orders-pipeline"
ORDER_SCHEMA = "order_id long, customer string, amount double, ts timestamp"


def create_topics(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        for name in ("orders", "orders-enriched"):
            try:
                admin.create_topic(name, queues=4)
            except AlreadyExistsError:
                pass


def send_orders(endpoint: str, count: int, start: datetime) -> None:
    """Sample orders, one every 150 ms of event time (so several minutes' worth)."""
    with Producer(endpoint) as producer:
        batch: list[Message] = []
        for i in range(count):
            order = {
                "order_id": i,
                "customer": f"c-{i % 37}",
                "amount": round(5 + (i * 7919 % 20000) / 100, 2),
                "ts": (start + timedelta(milliseconds=150 * i)).isoformat(timespec="milliseconds"),
            }
            batch.append(Message(json.dumps(order).encode(), tag="order", keys=[str(i)]))
            if len(batch) == 500:
                producer.send_batch("orders", batch)
                batch = []
        if batch:
            producer.send_batch("orders", batch)


def enrich(orders: DataFrame) -> DataFrame:
    """One event per order, ready for popmq's writer (body, tag, keys, properties)."""
    size = (
        F.when(F.col("amount") >= 150, "large")
        .when(F.col("amount") >= 50, "medium")
        .otherwise("small")
    )
    tier = F.when(F.col("customer").isin("c-1", "c-2", "c-3"), "gold").otherwise("standard")
    return orders.select(
        F.to_json(
            F.struct("order_id", "customer", "amount", "ts", size.alias("size"), tier.alias("tier"))
        ).alias("body"),
        size.alias("tag"),
        F.array(F.col("order_id").cast("string")).alias("keys"),
        F.create_map(F.lit("source_message_id"), F.col("message_id")).alias("properties"),
    )


def run_pipeline(spark: SparkSession, endpoint: str, output: Path, checkpoint: Path) -> int:
    """Drain `orders` once (AvailableNow); returns the number of orders processed."""

    def process(batch: DataFrame, batch_id: int) -> None:
        orders = batch.select(
            "message_id", F.from_json(F.col("body").cast("string"), ORDER_SCHEMA).alias("o")
        ).select("message_id", "o.*")
        orders.persist()
        per_minute = orders.groupBy(F.date_trunc("minute", "ts").alias("minute")).agg(
            F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("revenue")
        )
        per_minute.write.mode("overwrite").parquet(
            str(output / "per_minute" / f"batch_id={batch_id}")
        )
        enrich(orders).write.format("popmq").option("endpoint", endpoint).option(
            "topic", "orders-enriched"
        ).option("dedupKey", f"{GROUP}/{batch_id}").mode("append").save()
        orders.unpersist()

    query = (
        spark.readStream.format("popmq")
        .option("endpoint", endpoint)
        .option("topic", "orders")
        .option("mode", "pop")
        .option("group", GROUP)
        .option("numPartitions", "4")
        .option("maxMessagesPerPartition", "500")
        .option("invisibleDuration", "120s")
        .option("waitSeconds", "1")
        .load()
        .writeStream.foreachBatch(process)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the pipeline failed: {query.exception()}")
    return sum(p["numInputRows"] for p in query.recentProgress)


def report(spark: SparkSession, output: Path) -> list[tuple[datetime, int, float]]:
    """Per-minute totals over every batch's partial aggregates."""
    totals = (
        spark.read.parquet(str(output / "per_minute"))
        .groupBy("minute")
        .agg(F.sum("orders").alias("orders"), F.round(F.sum("revenue"), 2).alias("revenue"))
        .orderBy("minute")
        .collect()
    )
    return [(row.minute, row.orders, row.revenue) for row in totals]


@contextmanager
def embedded_server(data_dir: Path) -> Iterator[str]:
    """A popmq server on 127.0.0.1 (a free port) in a background thread."""
    from popmq.broker_core.config import BrokerConfig, StoreConfig
    from popmq.proxy import PopMQServer, ServerConfig

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="popmq-example-server", daemon=True)
    thread.start()
    server = PopMQServer(
        ServerConfig(
            listen="127.0.0.1:0",
            shutdown_grace_s=1.0,
            broker=BrokerConfig(store=StoreConfig(data_dir=data_dir)),
        )
    )
    port = asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=60)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


def spark_session() -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("popmq-orders-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    popmq.spark.register(session)
    return session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", help="popmq server host:port (default: start one)")
    parser.add_argument("--orders", type=int, default=2000, help="sample orders to send")
    parser.add_argument("--output", type=Path, help="output dir (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.orders < 1:
        parser.error("--orders must be at least 1")
    output = args.output or Path(tempfile.mkdtemp(prefix="popmq-example-output-"))
    # The session first: starting its JVM forks, which gRPC dislikes once its threads run.
    spark = spark_session()
    try:
        with tempfile.TemporaryDirectory(prefix="popmq-example-") as tmp:
            work = Path(tmp)
            server = _given(args.endpoint) if args.endpoint else embedded_server(work / "data")
            with server as endpoint:
                create_topics(endpoint)
                start = datetime.now(UTC).replace(second=0, microsecond=0)
                send_orders(endpoint, args.orders, start)
                processed = run_pipeline(spark, endpoint, output, work / "checkpoint")
                rows = report(spark, output)
    finally:
        spark.stop()
    print(f"processed {processed} orders; per minute (written to {output / 'per_minute'}):")
    for minute, orders, revenue in rows:
        print(f"  {minute:%Y-%m-%d %H:%M}  {orders:6d} orders  {revenue:12.2f}")
    print(f"enriched events were sent to topic orders-enriched ({processed} messages)")
    return 0


@contextmanager
def _given(endpoint: str) -> Iterator[str]:
    yield endpoint


if __name__ == "__main__":
    sys.exit(main())
