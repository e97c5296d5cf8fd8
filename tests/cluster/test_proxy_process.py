"""`popmq proxy` as a real subprocess started while etcd is down: it waits for etcd, saying
so, instead of exiting; it starts once etcd answers, and SIGTERM stops it cleanly meanwhile."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.brokers import ROOT
from tests.support.etcd import EtcdServer
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(120)


class ProxyProcess:
    def __init__(self, port: int, *extra: str) -> None:
        self.address = f"127.0.0.1:{port}"
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "popmq.cli", "proxy", "--listen", self.address, *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.output: list[str] = []

    def wait_for(self, text: str) -> str:
        """Read what it prints until a line containing `text` (AssertionError with the
        output if it ends first)."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            if text in line:
                return line
        raise AssertionError(f"popmq proxy never printed {text!r}: {''.join(self.output)}")

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(30)
        assert self.process.stdout is not None
        self.output.append(self.process.stdout.read())
        return code

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    server = EtcdServer(tmp_path / "etcd")  # its ports are chosen; it is not running yet
    yield server
    server.stop()


def _health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status)


def test_a_proxy_started_while_etcd_is_down_waits_for_it_then_starts(etcd: EtcdServer) -> None:
    proxy = ProxyProcess(free_port(), "--etcd", etcd.endpoint, "--set", "cluster.name=pw")
    try:
        waiting = proxy.wait_for("waiting for etcd")
        assert f"waiting for etcd at {etcd.endpoint}" in waiting
        assert "retrying every 1s" in waiting
        assert proxy.process.poll() is None  # still running, not exited 2
        # It listens meanwhile, NOT_SERVING: a load balancer keeps clients away.
        assert _health(proxy.address) == health_pb2.HealthCheckResponse.NOT_SERVING
        etcd.start()
        started = time.monotonic()
        assert proxy.wait_for("listening on ").strip() == f"listening on {proxy.address}"
        assert time.monotonic() - started < 30
        assert proxy.terminate() == 0
    finally:
        proxy.stop()


def test_a_proxy_waiting_for_etcd_stops_cleanly_on_sigterm() -> None:
    proxy = ProxyProcess(free_port(), "--etcd", f"127.0.0.1:{free_port()}")
    try:
        proxy.wait_for("waiting for etcd")
        assert proxy.terminate() == 0
        assert "stopped before it started" in "".join(proxy.output)
    finally:
        proxy.stop()
