"""Fixtures of the RocketMQ 5 compatibility tests: a real server and the official client.

The official client runs in a subprocess (rmq_runner.py): it keeps its threads, logs and exit
codes out of pytest. The two apache.rocketmq.v2 copies could share a process: popmq keeps its
own in a private descriptor pool (tests/unit/test_packaging.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from popmq.broker_core.config import BrokerConfig
from tests.support.server_thread import ServerThread

RUNNER = Path(__file__).with_name("rmq_runner.py")


class OfficialClient:
    """Starts rmq_runner.py scenarios against one endpoint and collects their results."""

    def __init__(self, endpoint: str, home: Path, env: Mapping[str, str] | None = None) -> None:
        self.endpoint = endpoint
        self.home = home  # the official client logs to ~/logs/rocketmq_python
        self.env = dict(env or {})  # more environment of the runner (TLS roots)
        home.mkdir(parents=True, exist_ok=True)
        self._running: list[subprocess.Popen[str]] = []

    def start(self, scenario: str, **params: Any) -> subprocess.Popen[str]:
        """Start a scenario without waiting for it (see `result`)."""
        env = {**os.environ, **self.env, "HOME": str(self.home)}
        spec = json.dumps({"scenario": scenario, "endpoint": self.endpoint, **params})
        proc = subprocess.Popen(
            [sys.executable, str(RUNNER), spec],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._running.append(proc)
        return proc

    def result(
        self, proc: subprocess.Popen[str], timeout: float = 100, *, may_fail: bool = False
    ) -> dict[str, Any]:
        """Wait for a scenario and return its JSON result; a crash fails the test, and so
        does a scenario that failed unless `may_fail` (its result then holds "failed")."""
        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            self._running.remove(proc)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        assert proc.returncode == 0 and lines, (
            f"runner exited {proc.returncode}\nstdout:\n{out}\nstderr:\n{err}\n{self.log_tail()}"
        )
        result: dict[str, Any] = json.loads(lines[-1])
        assert may_fail or "failed" not in result, f"{result}\n{self.log_tail()}"
        return result

    def run(self, scenario: str, timeout: float = 100, **params: Any) -> dict[str, Any]:
        return self.result(self.start(scenario, **params), timeout)

    def log_tail(self, lines: int = 40) -> str:
        log = self.home / "logs" / "rocketmq_python" / "rocketmq_client.log"
        if not log.exists():
            return "(no client log)"
        return "client log tail:\n" + "\n".join(log.read_text().splitlines()[-lines:])

    def kill_all(self) -> None:
        for proc in self._running:
            proc.kill()
            proc.communicate()
        self._running.clear()


@pytest.fixture
def broker_config() -> BrokerConfig:
    """Overridden by tests that need other broker settings."""
    return BrokerConfig()


@pytest.fixture
def server(tmp_path: Path, broker_config: BrokerConfig) -> Iterator[ServerThread]:
    thread = ServerThread(tmp_path / "data", broker_config)
    thread.start()
    yield thread
    thread.stop()


@pytest.fixture
def official(server: ServerThread, tmp_path: Path) -> Iterator[OfficialClient]:
    client = OfficialClient(server.endpoint, tmp_path / "home")
    yield client
    client.kill_all()


@pytest.fixture
def admin(server: ServerThread) -> Callable[..., Any]:
    """Run a broker coroutine on the server's loop: `admin(lambda b: b.create_topic("t"))`."""

    def call(fn: Callable[[Any], Any]) -> Any:
        return server.call(lambda: fn(server.broker))

    return call
