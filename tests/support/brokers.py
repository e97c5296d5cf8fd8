"""A BrokerService over a real Broker on 127.0.0.1:0, in the test's own event loop, and a
`popmq broker` subprocess: what the RemoteBroker tests talk to."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from popmq.broker import BrokerServicer, add_broker_service
from popmq.broker.server import BrokerServer
from popmq.broker_core import Broker, BrokerConfig, StoreConfig
from popmq.cluster import RemoteBroker
from popmq.proxy.server import PopMQServer
from popmq.runtime.config import ServerConfig
from popmq.runtime.tracked_server import TrackedServer
from tests.support.server_thread import ServerThread
from tests.support.thread_loops import stop_thread_loop

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    broker: Broker
    servicer: BrokerServicer
    server: grpc.aio.Server
    address: str


@contextlib.asynccontextmanager
async def served_broker(
    data_dir: Path,
    servicer_class: Callable[[Broker], BrokerServicer] = BrokerServicer,
    **config: object,
) -> AsyncIterator[Served]:
    """A started Broker behind BrokerService (`servicer_class`'s) on a free loopback port
    (this event loop)."""
    broker = Broker(
        BrokerConfig(broker_name="b1", store=StoreConfig(data_dir=data_dir), **config)  # type: ignore[arg-type]
    )
    await broker.start()
    server = grpc.aio.server()
    servicer = servicer_class(broker)
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
async def remote(
    address: str, *, call_timeout_s: float = 10.0, catalog_refresh_s: float = 10.0
) -> AsyncIterator[RemoteBroker]:
    broker = RemoteBroker(
        address, call_timeout_s=call_timeout_s, catalog_refresh_s=catalog_refresh_s
    )
    await broker.start()
    try:
        yield broker
    finally:
        await broker.close()


class GatedPort:
    """A loopback port in front of a broker that accepts connections but answers nothing
    until `open()`, then forwards each connection to the broker: what a broker that is up
    but slow to accept looks like to a client (its connect attempts get no HTTP/2 answer
    and are given up, as on a starved machine)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.address = ""
        self._tracked = TrackedServer(self._serve)
        self._opened = asyncio.Event()
        # Counts accepted connections; waited on by `connections`.
        self._accepted = asyncio.Condition()
        self._count = 0
        # Its connections to the broker: a closed one whose peer never takes the bytes left
        # stays open, so close() aborts them all.
        self._upstreams: list[asyncio.StreamWriter] = []

    async def start(self) -> str:
        await self._tracked.start()
        self.address = f"127.0.0.1:{self._tracked.port}"
        return self.address

    def open(self) -> None:
        """From now on connections reach the broker (held ones too)."""
        self._opened.set()

    async def connections(self, count: int) -> None:
        """Return once `count` connections were accepted."""
        async with self._accepted:
            await self._accepted.wait_for(lambda: self._count >= count)

    async def close(self) -> None:
        self._tracked.stop_listening()
        await self._tracked.end_handlers(0)  # cancelled at once
        for upstream in self._upstreams:
            upstream.transport.abort()
        await self._tracked.close()  # what is still open (popmq/runtime/tracked_server.py)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with self._accepted:
                self._count += 1
                self._accepted.notify_all()
            await self._opened.wait()
            host, port = self.target.rsplit(":", 1)
            upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
            self._upstreams.append(upstream_writer)
            try:
                await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
            finally:
                upstream_writer.close()
        finally:
            writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy `reader` to `writer` until either side ends."""
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def gated_port(target: str) -> AsyncIterator[GatedPort]:
    """A started GatedPort in front of the broker at `target` (this event loop)."""
    gate = GatedPort(target)
    await gate.start()
    try:
        yield gate
    finally:
        await gate.close()


class BrokerProcess:
    """`popmq broker` as a subprocess on a fixed port (so a restart keeps its address)."""

    def __init__(self, data_dir: Path, port: int, *extra: str) -> None:
        self.data_dir = data_dir
        self.port = port
        self.extra = extra
        self.process: subprocess.Popen[str] | None = None
        self.address = f"127.0.0.1:{port}"
        self.output: list[str] = []
        """What the last start printed (its log lines included): up to the line waited for
        while it runs, everything once it was stopped."""

    def start(self) -> str:
        self.spawn()
        self.wait_for("listening on ")
        assert self.output[-1].strip() == f"listening on {self.address}"
        return self.address

    def spawn(self) -> None:
        """Start the process without waiting for it (`wait_for` reads what it prints)."""
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "popmq.cli", "broker", "--name", "b1",
             "--listen", self.address, "--data-dir", str(self.data_dir), *self.extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )  # fmt: skip
        self.output = []

    def wait_for(self, text: str) -> str:
        """Read what the process prints until a line containing `text`; returns that line
        (AssertionError with the output if the process ends first)."""
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            if text in line:
                return line
        raise AssertionError(f"popmq broker never printed {text!r}: {''.join(self.output)}")

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
        """Keep the rest of what the ended process printed (in `output`), then close."""
        if self.process is not None and self.process.stdout is not None:
            if not self.process.stdout.closed:
                self.output.append(self.process.stdout.read())
            self.process.stdout.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()


class RemoteServerThread(ServerThread):
    """ServerThread whose proxy serves a RemoteBroker over a BrokerServer (`popmq broker`'s
    server, on 127.0.0.1:0) in the same loop thread: the integration tests run unchanged
    against the broker API over the wire."""

    broker_address = ""
    """When set (before start), the proxy uses the broker there instead of its own."""

    def start(self, *, listen_only: bool = False) -> str:
        if listen_only:
            raise ValueError("a RemoteServerThread starts whole: listen_only is not supported")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="popmq-test-server")
        self._thread.start()
        self.broker_server: BrokerServer | None = None
        address = self.broker_address
        if not address:
            self.broker_server = BrokerServer(
                ServerConfig(listen="127.0.0.1:0", shutdown_grace_s=1.0, broker=self._config.broker)
            )
            address = f"127.0.0.1:{self.call(self.broker_server.start)}"
        self.server = PopMQServer(
            self._config,
            broker=RemoteBroker(address, call_timeout_s=5.0, catalog_refresh_s=1.0),
        )
        port = self.call(self.server.start)
        self.endpoint = f"127.0.0.1:{port}"
        return self.endpoint

    def stop(self) -> None:
        if self._loop is None or self.server is None:
            return
        self.call(self.server.stop)
        if self.broker_server is not None:
            self.call(self.broker_server.stop)
        assert self._thread is not None
        stop_thread_loop(self._loop, self._thread)
        self._loop = None
        self.server = None

    @property
    def core(self) -> Broker:
        """The broker core behind the wire (its internals, for assertions)."""
        assert self.broker_server is not None
        return self.broker_server.broker
