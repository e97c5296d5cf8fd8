"""The official RocketMQ 5 Python client with `tls_enable=True` against a TLS listener.

The client verifies the server with grpc's default roots (`grpc.ssl_channel_credentials()`
without arguments); GRPC_DEFAULT_SSL_ROOTS_FILE_PATH in its process points them at the
test's CA, as an operator's CA bundle would be installed. Its default, plaintext, works
against the plaintext listener beside the TLS one (docs/security.md, TLS).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from popmq import Producer, TLSConfig
from popmq.security.config import SecurityConfig
from tests.compat.conftest import OfficialClient
from tests.support.certs import CertificateAuthority
from tests.support.server_thread import ServerThread


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path / "ca")


@pytest.fixture
def server(tmp_path: Path, ca: CertificateAuthority) -> Iterator[ServerThread]:
    """A server whose main listener takes TLS only, with a plaintext listener beside it."""
    pair = ca.server()
    security = SecurityConfig(
        tls_cert_file=str(pair.cert),
        tls_key_file=str(pair.key),
        plaintext_listen="127.0.0.1:0",
    )
    thread = ServerThread(tmp_path / "data", security=security)
    thread.start()
    thread.call(lambda: thread.broker.create_topic("orders", 2))
    yield thread
    thread.stop()


@pytest.fixture
def official(
    server: ServerThread, tmp_path: Path, ca: CertificateAuthority
) -> Iterator[OfficialClient]:
    client = OfficialClient(
        server.endpoint, tmp_path / "home", env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(ca.cert)}
    )
    yield client
    client.kill_all()


def test_official_client_with_tls_enable_sends_and_receives(
    server: ServerThread, official: OfficialClient, ca: CertificateAuthority
) -> None:
    sent = official.run(
        "produce", topic="orders", tls=True, messages=[{"body": "one"}, {"body": "two"}]
    )["receipts"]
    assert all("error" not in receipt for receipt in sent), sent
    received = official.run("simple", group="billing", topic="orders", want=2, tls=True)
    assert sorted(m["body"] for m in received["messages"]) == ["one", "two"]
    assert {m["message_id"] for m in received["messages"]} == {r["message_id"] for r in sent}


def test_official_client_in_plaintext_uses_the_plaintext_listener(
    server: ServerThread, official: OfficialClient, ca: CertificateAuthority
) -> None:
    assert server.server is not None
    official.endpoint = f"127.0.0.1:{server.server.plaintext_port}"
    with Producer(server.endpoint, tls=TLSConfig(ca_file=ca.cert)) as producer:
        producer.send("orders", b"sent over TLS")
    received = official.run("simple", group="billing", topic="orders", want=1)
    assert [m["body"] for m in received["messages"]] == ["sent over TLS"]
