"""TLS in cluster mode: BrokerService over TLS (mutual TLS: brokers verify the proxies'
client certificates), proxies connecting with `[security] broker_tls*`, and clients over
TLS to the proxies."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from popmq import Admin, Producer, SimpleConsumer, TLSConfig
from popmq.broker.server import BrokerServer
from popmq.broker_core import BrokerConfig, StoreConfig, UnavailableError
from popmq.cluster import RemoteBroker
from popmq.runtime.config import ServerConfig
from popmq.security.config import SecurityConfig
from popmq.security.tls import ChannelTLS, TLSFilesError, broker_channel_tls
from tests.support.brokers import BrokerProcess
from tests.support.certs import CertificateAuthority
from tests.support.inprocess_cluster import InProcessCluster
from tests.support.ports import free_port


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path / "ca")


def broker_security(ca: CertificateAuthority) -> SecurityConfig:
    """Brokers serve TLS and accept only proxies with a certificate of `ca`."""
    pair = ca.server("broker")
    return SecurityConfig(
        tls_cert_file=str(pair.cert), tls_key_file=str(pair.key), tls_client_ca_file=str(ca.cert)
    )


def proxy_security(ca: CertificateAuthority) -> SecurityConfig:
    """Proxies serve TLS to clients and present a client certificate to the brokers."""
    own, client = ca.server("proxy"), ca.client("proxy-to-broker")
    return SecurityConfig(
        tls_cert_file=str(own.cert),
        tls_key_file=str(own.key),
        broker_tls=True,
        broker_tls_ca_file=str(ca.cert),
        broker_tls_cert_file=str(client.cert),
        broker_tls_key_file=str(client.key),
    )


@pytest.fixture
def cluster(tmp_path: Path, ca: CertificateAuthority) -> Iterator[InProcessCluster]:
    (tmp_path / "cluster").mkdir()
    running = InProcessCluster(
        tmp_path / "cluster",
        broker_security=broker_security(ca),
        proxy_security=proxy_security(ca),
    ).start(brokers=2, proxies=1)
    yield running
    running.stop()


def test_a_cluster_with_tls_between_every_part_sends_and_receives(
    cluster: InProcessCluster, ca: CertificateAuthority
) -> None:
    tls = TLSConfig(ca_file=ca.cert)
    endpoint = cluster.proxies[0]
    with Admin(endpoint, tls=tls) as admin:
        admin.create_topic("orders", queues=4)  # queues on both brokers
    with Producer(endpoint, tls=tls) as producer:
        sent = {producer.send("orders", f"m{i}".encode()).message_id for i in range(8)}
    got: set[str] = set()
    with SimpleConsumer(endpoint, group="g", topic="orders", tls=tls) as consumer:
        for _ in range(20):
            batch = consumer.receive(max_messages=8, wait_s=2)
            consumer.ack(batch)
            got |= {m.message_id for m in batch}
            if got == sent:
                break
    assert got == sent
    with Admin(endpoint, tls=tls) as admin:  # per-broker status went over TLS too
        status = admin.cluster_status()
    assert {b.name for b in status.brokers} == {"b1", "b2"}


@pytest.fixture
def tls_broker(tmp_path: Path, ca: CertificateAuthority) -> Iterator[tuple[asyncio.Runner, str]]:
    """A standalone `popmq broker` server (no etcd) with mutual TLS, on a loop of its own."""
    runner = asyncio.Runner()
    server = BrokerServer(
        ServerConfig(
            listen="127.0.0.1:0",
            shutdown_grace_s=1.0,
            broker=BrokerConfig(broker_name="b1", store=StoreConfig(data_dir=tmp_path / "b1")),
            security=broker_security(ca),
        )
    )
    runner.run(server.start())
    yield runner, server.address
    runner.run(server.stop())
    runner.close()


async def _topics(address: str, tls: ChannelTLS | None) -> list[str]:
    remote = RemoteBroker(address, call_timeout_s=2.0, tls=tls, catalog=False)
    await remote.start()
    try:
        return [topic.name for topic in await remote.list_topics()]
    finally:
        await remote.close()


def test_a_proxy_needs_the_brokers_ca_and_its_client_certificate(
    tls_broker: tuple[asyncio.Runner, str], ca: CertificateAuthority
) -> None:
    runner, address = tls_broker
    with pytest.raises(UnavailableError):  # plaintext to a TLS broker
        runner.run(_topics(address, None))
    without_cert = broker_channel_tls(
        SecurityConfig(broker_tls=True, broker_tls_ca_file=str(ca.cert))
    )
    with pytest.raises(UnavailableError):  # the broker requires a client certificate
        runner.run(_topics(address, without_cert))
    full = broker_channel_tls(proxy_security(ca))
    assert runner.run(_topics(address, full)) == []


def test_broker_tls_settings_are_checked_when_the_proxy_starts(
    ca: CertificateAuthority, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="set broker_tls = true"):
        SecurityConfig(broker_tls_ca_file=str(ca.cert))
    with pytest.raises(TLSFilesError, match=r"broker_tls_ca_file .*cannot read it"):
        broker_channel_tls(
            SecurityConfig(broker_tls=True, broker_tls_ca_file=str(tmp_path / "missing.pem"))
        )
    one, two = ca.client("one"), ca.client("two")
    with pytest.raises(TLSFilesError, match="is not the private key"):
        broker_channel_tls(
            SecurityConfig(
                broker_tls=True,
                broker_tls_cert_file=str(one.cert),
                broker_tls_key_file=str(two.key),
            )
        )


def test_popmq_broker_serves_tls_and_reloads_its_certificate_on_sighup(
    tmp_path: Path, ca: CertificateAuthority
) -> None:
    security = broker_security(ca)
    process = BrokerProcess(
        tmp_path / "b1",
        free_port(),
        f"--set=security.tls_cert_file={security.tls_cert_file}",
        f"--set=security.tls_key_file={security.tls_key_file}",
        f"--set=security.tls_client_ca_file={security.tls_client_ca_file}",
        "--set=security.tls_reload_check_s=0",
    )
    address = process.start()
    try:
        full = broker_channel_tls(proxy_security(ca))
        assert asyncio.run(_topics(address, full)) == []
        new_ca = CertificateAuthority(tmp_path / "new-ca", "new-ca")
        renewed = new_ca.server("renewed")
        shutil.copy(renewed.cert, security.tls_cert_file)
        shutil.copy(renewed.key, security.tls_key_file)
        client = ca.client("proxy-again")  # the broker still verifies clients with `ca`
        trusting_new = broker_channel_tls(
            SecurityConfig(
                broker_tls=True,
                broker_tls_ca_file=str(new_ca.cert),
                broker_tls_cert_file=str(client.cert),
                broker_tls_key_file=str(client.key),
            )
        )
        assert process.process is not None
        process.process.send_signal(signal.SIGHUP)
        give_up = time.monotonic() + 20
        while True:
            try:
                assert asyncio.run(_topics(address, trusting_new)) == []
                break
            except UnavailableError:
                assert time.monotonic() < give_up, "SIGHUP did not reload the certificate"
                time.sleep(0.1)
        assert process.terminate() == 0  # SIGHUP did not stop it
    finally:
        process.stop()


def test_popmq_broker_with_an_unreadable_certificate_exits_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable, "-m", "popmq.cli", "broker", "--name", "b1",
            "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "b1"),
            f"--set=security.tls_cert_file={tmp_path / 'missing.pem'}",
            f"--set=security.tls_key_file={tmp_path / 'missing.key'}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result
    assert result.stderr.strip().splitlines() == [
        f"error: security.tls_cert_file {tmp_path / 'missing.pem'}: cannot read it "
        "(No such file or directory)"
    ]
