"""The connector against a server with authentication on: options accessKey and secretKey
sign its SDK clients' calls (driver and executors); without them the read fails
UNAUTHENTICATED."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from popmq import Admin, Credentials
from popmq.security.config import SecurityConfig
from popmq.spark import OptionError
from popmq.spark.options import ReadOptions
from tests.support.server_thread import ServerThread

ROOT = Credentials("root", "r00t-s3cret")


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[str]:
    security = SecurityConfig(
        authentication=True, root_access_key=ROOT.access_key, root_secret_key=ROOT.secret_key
    )
    thread = ServerThread(tmp_path / "data", security=security)
    thread.start()
    with Admin(thread.endpoint, credentials=ROOT) as admin:
        admin.create_topic("events", queues=2)
    yield thread.endpoint
    thread.stop()


def test_credentials_options_sign_writes_and_reads(spark: SparkSession, secured: str) -> None:
    signed = {"endpoint": secured, "accessKey": ROOT.access_key, "secretKey": ROOT.secret_key}
    rows = spark.createDataFrame([(b"a",), (b"b",), (b"c",)], "body binary")
    rows.write.format("popmq").options(**signed, topic="events").mode("append").save()
    df = spark.read.format("popmq").options(**signed, topic="events").load()
    assert sorted(r.body for r in df.select("body").collect()) == [b"a", b"b", b"c"]
    with pytest.raises(PySparkException, match="no authorization header"):
        spark.read.format("popmq").options(endpoint=secured, topic="events").load().collect()


def test_credentials_options_go_together_and_the_secret_is_never_shown() -> None:
    with pytest.raises(OptionError, match="accessKey and secretKey go together"):
        ReadOptions.parse({"endpoint": "h:1", "topic": "t", "accessKey": "root"})
    parsed = ReadOptions.parse(
        {"endpoint": "h:1", "topic": "t", "accessKey": "root", "secretKey": "s3cret"}
    )
    assert parsed.credentials == Credentials("root", "s3cret")
    assert "s3cret" not in repr(parsed)
