"""Spark tests: one session-scoped local SparkSession, a real popmq server per test.

The session runs `local[2,4]`: two task threads (as local[2]) and up to four attempts per
task, so a task that fails once is retried as it would be on a cluster (plain local[2]
never retries). Worker Pythons are this interpreter, which has pyarrow and the project.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import popmq.spark
from tests.support.server_thread import ServerThread

_HERE = Path(__file__).resolve().parent
SPARK_TEST_TIMEOUT_S = 300
"""A Spark test runs several jobs of ~0.3 s fixed cost each, plus the session's start-up
(5-7 s) for the first one; on a loaded 2-core machine each can take several times longer,
so these tests get more than the suite's 120 s."""


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE not in item.path.resolve().parents:
            continue
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SPARK_TEST_TIMEOUT_S))
        if "spark" in getattr(item, "fixturenames", ()):
            # One xdist worker runs every test of the shared session, so the suite starts one
            # JVM for them, not one per worker (each takes both cores while it starts).
            item.add_marker(pytest.mark.xdist_group("spark"))


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("popmq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.sql.streaming.stopTimeout", "30s")
        # A worker Python imports pyspark, pyarrow and grpc before it connects back; on a
        # loaded 2-core machine that can take longer than the default 15 s.
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    popmq.spark.register(session)
    yield session
    session.stop()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    thread = ServerThread(tmp_path / "data")
    thread.start()
    yield thread
    thread.stop()


@pytest.fixture
def endpoint(server: ServerThread) -> str:
    return server.endpoint
