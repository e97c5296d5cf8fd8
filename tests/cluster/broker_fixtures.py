"""A BrokerService over a real Broker on 127.0.0.1:0, in the test's own event loop, and a
`popmq broker` subprocess: what the RemoteBroker tests talk to."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc

from popmq.broker_core import Broker, BrokerConfig, StoreConfig
from popmq.cluster import BrokerServicer, RemoteBroker, add_broker_service

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    broker: Broker
    servicer: BrokerServicer
    server: grpc.aio.Server
    address: str


@contextlib.asynccontextmanager
async def served_broker(data_dir: Path, **config: object) -> AsyncIterator[Served]:
    """A started Broker behind BrokerService on a free loopback port (this event loop)."""
    broker = Broker(
        BrokerConfig(broker_name="b1", store=StoreConfig(data_dir=data_dir), **config)  # type: ignore[arg-type]
    )
    await broker.start()
    server = grpc.aio.server()
    servicer = BrokerServicer(broker)
    add_broker_service(server, servicer)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield Served(broker, servicer, server, f"127.0.0.1:{port}")
    finally:
        broker.release_waiters()
        await server.stop(1.0)
        await broker.close()


@contextlib.asynccontextmanager
async def remote(address: str, **options: float) -> AsyncIterator[RemoteBroker]:
    broker = RemoteBroker(address, **options)
    await broker.start()
    try:
        yield broker
    finally:
        await broker.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    """`popmq broker` as a subprocess on a fixed port (so a restart keeps its address)."""

    def __init__(self, data_dir: Path, port: int, *extra: str) -> None:
        self.data_dir = data_dir
        self.port = port
        self.extra = extra
        self.process: subprocess.Popen[str] | None = None
        self.address = f"127.0.0.1:{port}"

    def start(self) -> str:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "popmq.cli", "broker", "--name", "b1",
             "--listen", self.address, "--data-dir", str(self.data_dir), *self.extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )  # fmt: skip
        assert self.process.stdout is not None
        lines = []
        for line in self.process.stdout:
            lines.append(line)
            if line.startswith("listening on "):
                assert line.strip() == f"listening on {self.address}"
                return self.address
        raise AssertionError(f"popmq broker did not start: {''.join(lines)}")

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(30)
        self._close()

    def terminate(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(30)
        self._close()
        return code

    def _close(self) -> None:
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()
