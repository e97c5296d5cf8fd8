"""Protected mode, secret redaction, metrics auth and the audit log on a real server."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from popmq import Admin, AsyncAdmin, PopMQError
from popmq.broker.server import BrokerServer
from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.proxy.server import PopMQServer
from popmq.runtime.config import ServerConfig
from popmq.runtime.metrics import MetricsConfig
from popmq.security.audit import denied_count
from popmq.security.config import SecurityConfig
from tests.support.thread_loops import stop_thread_loop

_T = TypeVar("_T")
_REFUSAL = re.compile(
    r"^error: popmq( broker)? refuses to listen on 0\.0\.0\.0:0 without authentication "
    r"\(protected mode\): .*allow_anonymous = true.*$"
)
_SECRETS = {
    "POPMQ_SECURITY_ROOT_ACCESS_KEY": "root",
    "POPMQ_SECURITY_ROOT_SECRET_KEY": "s3cr3t-root-key",
    "POPMQ_SECURITY_METRICS_USERNAME": "prometheus",
    "POPMQ_SECURITY_METRICS_PASSWORD": "s3cr3t-metrics-password",
    "POPMQ_SECURITY_METRICS_BEARER_TOKEN": "s3cr3t-metrics-token",
}


def _popmq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "popmq.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def _spawn(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "popmq.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
    )


def _wait_for(process: subprocess.Popen[str], pattern: str) -> tuple[re.Match[str], str]:
    """The first match of `pattern` in what the process prints, and all it printed so far."""
    assert process.stdout is not None
    printed = ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        printed += line
        match = re.search(pattern, line)
        if match:
            return match, printed
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError(f"no line matching {pattern!r}; printed:\n{printed}")


def _stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    return output


# -- protected mode ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["serve", "--data-dir", "{tmp}/data"],
        ["broker", "--name", "b1", "--data-dir", "{tmp}/b1"],
        ["proxy", "--etcd", "127.0.0.1:1", "--advertise", "127.0.0.1:1"],
    ],
    ids=["serve", "broker", "proxy"],
)
def test_an_anonymous_server_on_a_public_address_refuses_to_start_with_one_line(
    tmp_path: Path, command: list[str]
) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    result = _popmq(*args[:1], "--listen", "0.0.0.0:0", *args[1:])
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and _REFUSAL.match(lines[0]), result.stderr
    assert not any(tmp_path.iterdir())  # nothing opened: refused before the store


def test_allow_anonymous_serves_on_a_public_address(tmp_path: Path) -> None:
    process = _spawn(
        "serve", "--listen", "0.0.0.0:0", "--data-dir", str(tmp_path / "data"),
        env={"POPMQ_SECURITY_ALLOW_ANONYMOUS": "true"},
    )  # fmt: skip
    try:
        match, _ = _wait_for(process, r"popmq listening on 0\.0\.0\.0:(\d+)")
        with Admin(f"127.0.0.1:{match.group(1)}") as admin:
            admin.create_topic("orders", queues=1)
    finally:
        _stop(process)


# -- secrets are never shown -------------------------------------------------------------------


def _get(port: int, path: str, authorization: str | None = None) -> tuple[int, str, bytes]:
    async def get() -> tuple[int, str, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        auth = f"Authorization: {authorization}\r\n" if authorization is not None else ""
        writer.write(f"GET {path} HTTP/1.1\r\nHost: test\r\n{auth}\r\n".encode())
        await writer.drain()
        response = await reader.read()
        writer.close()
        await writer.wait_closed()
        head, _, body = response.partition(b"\r\n\r\n")
        return int(head.split()[1]), head.decode("latin-1"), body

    return asyncio.run(get())


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_print_config_never_shows_a_secret() -> None:
    result = _popmq("serve", "--print-config", env=_SECRETS)
    assert result.returncode == 0, result.stderr
    assert "s3cr3t" not in result.stdout + result.stderr
    assert "# root_secret_key = <redacted>" in result.stdout
    assert 'metrics_username = "prometheus"' in result.stdout


def test_a_serving_server_never_shows_a_secret_in_its_log_info_or_audit(tmp_path: Path) -> None:
    audit_file = tmp_path / "audit.log"
    process = _spawn(
        "serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"),
        "--metrics-listen", "127.0.0.1:0", "--log-level", "debug",
        env={**_SECRETS, "POPMQ_SECURITY_AUDIT_LOG_FILE": str(audit_file)},
    )  # fmt: skip
    output = ""
    try:
        match, output = _wait_for(process, r"popmq listening on (127\.0\.0\.1:\d+)")
        metrics, printed = _wait_for(process, r"popmq metrics on http://127\.0\.0\.1:(\d+)/")
        output += printed
        endpoint, metrics_port = match.group(1), int(metrics.group(1))
        with Admin(endpoint) as admin:
            info = admin.server_info()
            admin.create_topic("orders", queues=1)
            with pytest.raises(PopMQError):
                admin.create_topic("orders", queues=1)
        assert info.config["security.root_secret_key"] == '"<redacted>"'
        assert info.config["security.root_access_key"] == '"root"'
        assert "s3cr3t" not in repr(info)
        assert _get(metrics_port, "/metrics", _basic("prometheus", "wrong"))[0] == 401
        assert _get(metrics_port, "/metrics", "Bearer s3cr3t-metrics-token")[0] == 200
    finally:
        output += _stop(process)
    audit_lines = audit_file.read_text().splitlines()
    assert [json.loads(line)["result"] for line in audit_lines] == ["ok", "ALREADY_EXISTS"]
    assert "popmq.audit" in output and "denied UNAUTHENTICATED" in output  # logs were written
    assert "s3cr3t" not in output + audit_file.read_text()


# -- the metrics endpoint's auth ---------------------------------------------------------------


def _server_config(tmp_path: Path, security: SecurityConfig, **extra: Any) -> ServerConfig:
    return ServerConfig(
        listen="127.0.0.1:0",
        shutdown_grace_s=1.0,
        broker=BrokerConfig(store=StoreConfig(data_dir=tmp_path / "data")),
        metrics=MetricsConfig(listen="127.0.0.1:0"),
        security=security,
        **extra,
    )


def _check_metrics_auth(port: int, *, basic: bool, bearer: bool) -> None:
    before = denied_count("/metrics", "UNAUTHENTICATED")
    status, head, body = _get(port, "/metrics")
    assert status == 401 and b"popmq_" not in body
    challenges = re.findall(r"WWW-Authenticate: (\w+)", head)
    assert challenges == ["Basic"] * basic + ["Bearer"] * bearer
    assert _get(port, "/metrics", _basic("prom", "nope"))[0] == 401
    assert _get(port, "/metrics", "Bearer nope")[0] == 401
    assert denied_count("/metrics", "UNAUTHENTICATED") == before + 3
    if basic:
        status, _, body = _get(port, "/metrics", _basic("prom", "pw"))
        assert status == 200 and b"popmq_build_info" in body
    if bearer:
        status, _, body = _get(port, "/metrics", "Bearer tok")
        assert status == 200 and b"popmq_requests_denied_total" in body


@contextlib.contextmanager
def _loop_thread() -> Iterator[Callable[[Coroutine[Any, Any, _T]], _T]]:
    """Run coroutines on an event loop in another thread (a server there, clients here)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="popmq-test-loop")
    thread.start()

    def run(work: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(work, loop).result(60)

    try:
        yield run
    finally:
        stop_thread_loop(loop, thread)


@pytest.mark.parametrize(
    ("basic", "bearer"),
    [(True, False), (False, True), (True, True)],
    ids=["basic", "bearer", "both"],
)
def test_the_metrics_endpoint_asks_for_the_configured_credentials(
    tmp_path: Path, basic: bool, bearer: bool
) -> None:
    security = SecurityConfig(
        metrics_username="prom" if basic else "",
        metrics_password="pw" if basic else "",
        metrics_bearer_token="tok" if bearer else "",
    )
    server = PopMQServer(_server_config(tmp_path, security))
    with _loop_thread() as run:
        run(server.start())
        try:
            _check_metrics_auth(server.metrics_port, basic=basic, bearer=bearer)
        finally:
            run(server.stop())


def test_a_brokers_metrics_endpoint_asks_for_credentials_too(tmp_path: Path) -> None:
    config = _server_config(tmp_path, SecurityConfig(metrics_bearer_token="tok"))
    broker = BrokerServer(config)
    with _loop_thread() as run:
        run(broker.start())
        try:
            _check_metrics_auth(broker.metrics_port, basic=False, bearer=True)
        finally:
            run(broker.stop())


# -- the audit log -----------------------------------------------------------------------------


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.entries: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.entries.append(json.loads(record.getMessage()))


@pytest.fixture
def audit_log() -> Iterator[_Lines]:
    handler = _Lines()
    logger = logging.getLogger("popmq.audit")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_every_admin_mutation_writes_an_audit_line_on_success_and_failure(
    tmp_path: Path, audit_log: _Lines
) -> None:
    audit_file = tmp_path / "audit.log"
    config = _server_config(tmp_path, SecurityConfig(audit_log_file=str(audit_file)))

    async def scenario() -> None:
        server = PopMQServer(config)
        port = await server.start()
        try:
            async with AsyncAdmin(f"127.0.0.1:{port}") as admin:
                calls = [
                    (admin.create_topic("orders", queues=2), admin.create_topic("orders")),
                    (admin.update_topic("orders", 4), admin.update_topic("missing", 4)),
                    (admin.create_group("billing"), admin.create_group("billing")),
                    (
                        admin.update_group("billing", max_delivery_attempts=3),
                        admin.update_group("missing", max_delivery_attempts=3),
                    ),
                    (
                        admin.reset_offsets("billing", "orders", "earliest"),
                        admin.reset_offsets("billing", "missing", "earliest"),
                    ),
                    (
                        admin.redrive_dead_letters("billing"),
                        admin.redrive_dead_letters("missing"),
                    ),
                    (admin.purge_topic("orders"), admin.purge_topic("missing")),
                    (admin.delete_group("billing"), admin.delete_group("billing")),
                    (admin.delete_topic("orders"), admin.delete_topic("orders")),
                ]
                for ok, failing in calls:
                    await ok
                    with pytest.raises(PopMQError):
                        await failing
                await admin.list_topics()  # reads are not audited
                await admin.server_info()
        finally:
            await server.stop()

    asyncio.run(scenario())
    events = [
        "topic.create", "topic.update", "group.create", "group.update", "offsets.reset",
        "dlq.redrive", "topic.purge", "group.delete", "topic.delete",
    ]  # fmt: skip
    entries = audit_log.entries
    assert [e["event"] for e in entries] == [e for e in events for _ in range(2)]
    for ok, failed in zip(entries[::2], entries[1::2], strict=True):
        assert ok["result"] == "ok" and ok["error"] == "", ok
        assert failed["result"] not in ("ok", "INTERNAL") and failed["error"], failed
        for entry in (ok, failed):
            assert entry["user"] == "anonymous"
            assert entry["source"].startswith("ipv4:127.0.0.1:")
    assert entries[0]["request"] == {"name": "orders", "queues": 2}
    assert entries[1]["result"] == "ALREADY_EXISTS"
    assert entries[9]["request"] == {
        "group": "billing",
        "topic": "missing",
        "target": "RESET_TARGET_EARLIEST",
    }
    in_file = [json.loads(line) for line in audit_file.read_text().splitlines()]
    assert in_file == entries
