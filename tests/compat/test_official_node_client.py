"""The official RocketMQ 5 Node.js client (rocketmq-client-nodejs) against a real server.

Runs tests/compat/node_runner.js in a `node` subprocess. The client comes from npm
(tools/node_modules, or the directory named by POPMQ_NODE_MODULES); without it these tests
are skipped, saying what to install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from popmq.broker_core.types import NewMessage
from popmq.security.config import SecurityConfig
from tests.support.certs import CertificateAuthority
from tests.support.server_thread import ServerThread

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("node_runner.js")
MODULES = Path(os.environ.get("POPMQ_NODE_MODULES", ROOT / "tools" / "node_modules"))

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (MODULES / "rocketmq-client-nodejs").is_dir(),
    reason=f"needs node and rocketmq-client-nodejs in {MODULES} (npm install it there)",
)


def run_node(
    scenario: str,
    endpoint: str,
    env: dict[str, str] | None = None,
    *,
    runner: Path = RUNNER,
    **params: Any,
) -> dict[str, Any]:
    """Run one scenario of a node script (node_runner.js unless `runner`) and return the JSON
    line it printed last; a crash or a non-zero exit fails the test."""
    spec = json.dumps({"scenario": scenario, "endpoint": endpoint, **params})
    done = subprocess.run(
        ["node", str(runner), spec],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "NODE_PATH": str(MODULES), **(env or {})},
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, f"{done.stdout}\n{done.stderr}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


@pytest.mark.slow
def test_a_node_push_consumer_retries_a_failed_message_then_dead_letters_it(
    server: ServerThread,
) -> None:
    """Its retry delays are 0 s..1 s ChangeInvisibleDurations, which popmq must accept."""

    async def setup() -> None:
        await server.broker.create_topic("orders", 2)
        await server.broker.create_group_with_settings(
            "node-g", max_delivery_attempts=3, retry_backoff_s=[1, 2]
        )

    server.call(setup)
    result = run_node("push_fail", server.endpoint, group="node-g", topic="orders", wait_ms=8000)
    assert [seen["attempt"] for seen in result["seen"]] == [1, 2, 3]
    _, queues = server.call(lambda: server.broker.get_topic("%DLQ%node-g"))
    assert sum(q.max_offset for q in queues) == 1
    # It hung on the refused call before. A shutdown waits for the in-flight long poll
    # (20 s, from popmq's settings, + the 3 s request timeout), so ~14 s here is normal.
    assert result["shutdown_ms"] < 30000


def test_a_namespaced_node_simple_consumer_is_refused_not_served_another_topic(
    server: ServerThread,
) -> None:
    async def setup() -> None:
        await server.broker.create_topic("orders", 1)
        await server.broker.send([NewMessage(topic="orders", body=b"un-namespaced")])

    server.call(setup)
    result = run_node(
        "simple_namespaced", server.endpoint, group="ns-g", topic="orders", namespace="tenant-a"
    )
    assert "received" not in result, result
    assert result["error"]


def test_a_node_producer_with_several_topics_starts_at_once(server: ServerThread) -> None:
    """rocketmq-client-nodejs waits for its settings reply only after every topic's route
    query; popmq's first reply comes before that, so the server sends it again once the
    queries settle (telemetry.Telemetry.nudge). Without it startup waits 5 minutes."""
    topics = ["t1", "t2", "t3", "t4"]

    async def setup() -> None:
        for topic in topics:
            await server.broker.create_topic(topic, 1)

    server.call(setup)
    for _ in range(2):  # without the resend it hung in almost every try
        result = run_node("producer_topics", server.endpoint, topics=topics, cap_ms=30000)
        assert result["started"], result
        assert result["sent"] == len(topics)


def test_a_node_client_with_ssl_enabled_sends_and_receives_over_tls(tmp_path: Path) -> None:
    """sslEnabled verifies the server with grpc-js's default roots: given the test's CA
    through GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, as an operator's CA bundle would be."""
    ca = CertificateAuthority(tmp_path / "ca")
    pair = ca.server()
    security = SecurityConfig(tls_cert_file=str(pair.cert), tls_key_file=str(pair.key))
    server = ServerThread(tmp_path / "data", security=security)
    server.start()
    try:
        server.call(lambda: server.broker.create_topic("orders", 1))
        result = run_node(
            "tls_roundtrip",
            server.endpoint,
            env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(ca.cert)},
            group="node-tls",
            topic="orders",
            body="over TLS",
        )
    finally:
        server.stop()
    assert result["received"] == ["over TLS"], result
