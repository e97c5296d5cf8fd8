"""Batch reads and writes through the "popmq" data source, against a real server."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import popmq.spark
from popmq import Admin


def test_batch_write_of_10000_rows_reads_back_exactly(spark: SparkSession, endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("orders", queues=4)
    popmq.spark.register()  # the active session; registering again is harmless
    rows = spark.range(10_000).select(
        F.format_string("order-%d", "id").alias("body"),
        F.when(F.col("id") % 2 == 0, "even").otherwise("odd").alias("tag"),
        F.array(F.format_string("k-%d", "id")).alias("keys"),
        F.create_map(F.lit("n"), F.col("id").cast("string")).alias("properties"),
    )
    rows.write.format("popmq").option("endpoint", endpoint).option("topic", "orders").mode(
        "append"
    ).save()

    df = (
        spark.read.format("popmq")
        .option("endpoint", endpoint)
        .option("topic", "orders")
        .option("maxRecordsPerPartition", "1000")
        .load()
    )
    assert df.rdd.getNumPartitions() == 12  # 4 queues of 2,500, split by 1,000
    got = df.select("body", "tag", "keys", "properties", "topic", "delivery_attempt").collect()
    assert len(got) == 10_000
    bodies = sorted(r.body.decode() for r in got)
    assert bodies == sorted(f"order-{i}" for i in range(10_000))
    for r in got:
        n = int(r.body.decode().split("-")[1])
        assert (r.tag, r.keys, r.properties, r.topic, r.delivery_attempt) == (
            "even" if n % 2 == 0 else "odd",
            [f"k-{n}"],
            {"n": str(n)},
            "orders",
            1,
        )
    per_queue = (
        df.groupBy("queue_id")
        .agg(
            F.min("queue_offset").alias("low"),
            F.max("queue_offset").alias("high"),
            F.count("*").alias("n"),
        )
        .collect()
    )
    assert sorted((r.queue_id, r.low, r.high, r.n) for r in per_queue) == [
        (q, 0, 2499, 2500) for q in range(4)
    ]
