"""The example pipeline (examples/spark_orders_pipeline.py) runs and its numbers add up."""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

from pyspark.sql import SparkSession

from tests.spark.helpers import wait_for
from tests.support.server_thread import ServerThread

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_orders_pipeline.py"


def _load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spark_orders_pipeline", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_example_pipeline_runs_and_its_totals_add_up(
    spark: SparkSession, server: ServerThread, tmp_path: Path
) -> None:
    example = _load_example()
    endpoint = server.endpoint
    example.create_topics(endpoint)
    start = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
    example.send_orders(endpoint, 1200, start)  # 150 ms apart: three minutes' worth

    processed = example.run_pipeline(spark, endpoint, tmp_path / "out", tmp_path / "checkpoint")
    assert processed == 1200
    rows = example.report(spark, tmp_path / "out")
    assert [(minute.strftime("%H:%M"), orders) for minute, orders, _ in rows] == [
        ("12:00", 400), ("12:01", 400), ("12:02", 400),
    ]  # fmt: skip
    expected_revenue = sum(round(5 + (i * 7919 % 20000) / 100, 2) for i in range(1200))
    assert abs(sum(revenue for _, _, revenue in rows) - expected_revenue) < 0.05

    enriched = (
        spark.read.format("popmq")
        .option("endpoint", endpoint)
        .option("topic", "orders-enriched")
        .load()
        .collect()
    )
    assert len(enriched) == 1200
    events = [json.loads(r.body) for r in enriched]
    assert sorted(e["order_id"] for e in events) == list(range(1200))
    assert {e["size"] for e in events} <= {"small", "medium", "large"}
    assert all(r.tag == json.loads(r.body)["size"] for r in enriched)

    async def unfinished() -> int:
        return sum(
            r.lag + r.inflight for r in await server.broker.group_lag(example.GROUP, "orders")
        )

    # The pipeline's group consumed everything and acked it.
    wait_for(
        lambda: server.call(unfinished) == 0,
        "the group to be fully acked",
        timeout_s=30,
    )
