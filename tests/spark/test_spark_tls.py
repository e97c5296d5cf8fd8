"""The Spark connector over mutual TLS, signed in as a NORMAL user: its tls* options and
credentials reach every SDK client it makes (driver and executors: the writer's producer,
the offset reader's pull consumer, the pop reader's simple consumer and admin). The server
takes mutual TLS only and authenticates every call, so a client made without the options
could not connect at all, and the user's policies are the ones docs/spark.md lists."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from popmq import Admin, Credentials, Policy, TLSConfig
from popmq.security.config import SecurityConfig
from popmq.spark import OptionError
from popmq.spark.options import ReadOptions, WriteOptions
from tests.support.certs import CertificateAuthority
from tests.support.server_thread import ServerThread


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path / "ca")


ROOT = Credentials("root", "r00t-s3cret")
SPARK = Credentials("spark-job", "spark-s3cret")


@pytest.fixture
def mtls_server(tmp_path: Path, ca: CertificateAuthority) -> Iterator[ServerThread]:
    pair = ca.server()
    security = SecurityConfig(
        tls_cert_file=str(pair.cert),
        tls_key_file=str(pair.key),
        tls_client_ca_file=str(ca.cert),
        authentication=True,
        root_access_key=ROOT.access_key,
        root_secret_key=ROOT.secret_key,
    )
    thread = ServerThread(tmp_path / "data", security=security)
    thread.start()
    admin_cert = ca.client("admin")
    tls = TLSConfig(
        ca_file=str(ca.cert), cert_file=str(admin_cert.cert), key_file=str(admin_cert.key)
    )
    with Admin(thread.endpoint, tls=tls, credentials=ROOT) as admin:
        admin.create_topic("out", queues=2)
        admin.create_user(SPARK.access_key, SPARK.secret_key)
        # What a job that writes, reads and pops needs (docs/spark.md).
        admin.grant_policy(SPARK.access_key, Policy.of("topic:out", ["pub", "sub", "get"]))
        admin.grant_policy(SPARK.access_key, Policy.of("group:workers", ["sub", "get"]))
    yield thread
    thread.stop()


def test_write_read_and_pop_over_mutual_tls_as_a_normal_user(
    spark: SparkSession, mtls_server: ServerThread, ca: CertificateAuthority, tmp_path: Path
) -> None:
    client = ca.client("spark")
    tls = {
        "tlsCaFile": str(ca.cert),
        "tlsCertFile": str(client.cert),
        "tlsKeyFile": str(client.key),
        "accessKey": SPARK.access_key,
        "secretKey": SPARK.secret_key,
    }
    df = spark.range(20).select(F.format_string("row-%d", "id").alias("body"))
    df.write.format("popmq").option("endpoint", mtls_server.endpoint).option(
        "topic", "out"
    ).options(**tls).mode("append").save()
    read = (
        spark.read.format("popmq")
        .option("endpoint", mtls_server.endpoint)
        .option("topic", "out")
        .options(**tls)
        .load()
    )
    sent = sorted(f"row-{i}" for i in range(20))
    assert sorted(r.body.decode() for r in read.select("body").collect()) == sent
    popped: list[str] = []

    def sink(batch: DataFrame, batch_id: int) -> None:
        popped.extend(r.body.decode() for r in batch.select("body").collect())

    query = (
        spark.readStream.format("popmq")
        .option("endpoint", mtls_server.endpoint)
        .option("topic", "out")
        .option("mode", "pop")
        .option("group", "workers")
        .options(**tls)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(popped) == sent


def test_tls_options_are_parsed_into_the_sdks_tls(ca: CertificateAuthority) -> None:
    base = {"endpoint": "h:1", "topic": "t"}
    assert ReadOptions.parse(base).tls is False
    assert ReadOptions.parse({**base, "TLS": "true"}).tls is True
    parsed = WriteOptions.parse({**base, "tlsCaFile": str(ca.cert), "tlsServerName": "popmq"})
    assert parsed.tls == TLSConfig(ca_file=str(ca.cert), server_name="popmq")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tls": "false", "tlsCaFile": "CA"}, "tls=false contradicts tlsCaFile"),
        ({"tlsCertFile": "CA"}, "tlsCertFile and tlsKeyFile go together"),
        ({"tlsCaFile": "/nonexistent/ca.pem"}, "option tlsCaFile: .*cannot read it"),
        ({"tls": "maybe"}, "is not a boolean"),
    ],
)
def test_bad_tls_options_fail_naming_the_option(
    ca: CertificateAuthority, options: dict[str, str], message: str
) -> None:
    given = {k: str(ca.cert) if v == "CA" else v for k, v in options.items()}
    with pytest.raises(OptionError, match=message):
        ReadOptions.parse({"endpoint": "h:1", "topic": "t", **given})
