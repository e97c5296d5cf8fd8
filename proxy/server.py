"""The popmq server: the gRPC proxy and the embedded broker core in one process.

`run_server` is what `popmq serve` calls; `PopMQServer` is the same server as an object, for
tests and embedding (start on port 0, read the real port, stop).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import grpc

from broker_core.broker import Broker
from broker_core.config import BrokerConfig, StoreConfig
from broker_core.errors import InvalidArgumentError
from popmq.v1 import admin_pb2_grpc, messaging_pb2_grpc
from proxy.admin import AdminServicer
from proxy.messaging import MessagingServicer
from proxy.rocketmq import RocketMQService

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 130 * 1024 * 1024
"""Largest gRPC message in either direction (RocketMQ proxy: 130 MiB inbound)."""


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """How the proxy listens and shuts down."""

    listen: str = "127.0.0.1:8081"
    """HOST:PORT to listen on; port 0 picks a free port (RocketMQ proxy gRPC port: 8081)."""
    shutdown_grace_s: float = 5.0
    """On SIGTERM/SIGINT, in-flight RPCs get this long to finish."""
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    """The embedded broker core."""


def split_listen(listen: str) -> tuple[str, int]:
    """Parse HOST:PORT (IPv6 as [::1]:PORT)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidArgumentError(f"listen address {listen!r} is not HOST:PORT (port 0..65535)")
    return host, int(port)


class PopMQServer:
    """One proxy over one embedded broker."""

    def __init__(self, config: ServerConfig | None = None) -> None:
        self.config = config or ServerConfig()
        self.broker = Broker(self.config.broker)
        self._server: grpc.aio.Server | None = None
        self.port = 0
        self.rocketmq: RocketMQService | None = None

    @property
    def address(self) -> str:
        host, _ = split_listen(self.config.listen)
        return f"{host}:{self.port}"

    async def start(self) -> int:
        """Open the store, bind, and start serving; returns the bound port."""
        host, port = split_listen(self.config.listen)
        await self.broker.start()
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ]
        )
        messaging_pb2_grpc.add_MessagingServiceServicer_to_server(
            MessagingServicer(self.broker), server
        )
        admin_pb2_grpc.add_AdminServiceServicer_to_server(AdminServicer(self.broker), server)
        try:
            self.port = server.add_insecure_port(f"{host}:{port}")
        except RuntimeError as exc:
            await self.broker.close()
            raise InvalidArgumentError(f"cannot listen on {self.config.listen}: {exc}") from exc
        # RocketMQ 5 clients (apache.rocketmq.v2) on the same port, over the same broker.
        self.rocketmq = await RocketMQService.serve_on(
            server, self.broker, address=lambda: self.address
        )
        await server.start()
        self._server = server
        return self.port

    async def stop(self) -> None:
        """Stop accepting RPCs, let in-flight ones finish, then close the store cleanly."""
        if self._server is not None:
            server, self._server = self._server, None
            if self.rocketmq is not None:
                await self.rocketmq.close()  # ends Telemetry streams: stop() need not wait
            # Held long polls answer at once (empty), so the grace period is spent only on
            # RPCs doing work, which finish while the store is still open.
            self.broker.release_waiters()
            await server.stop(self.config.shutdown_grace_s)
        await self.broker.close()


async def serve(config: ServerConfig) -> None:
    """Run until SIGTERM or SIGINT."""
    server = PopMQServer(config)
    port = await server.start()
    host, _ = split_listen(config.listen)
    print(f"popmq listening on {host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await server.stop()
    log.info("stopped")


def run_server(*, listen: str, data_dir: Path, flush: Literal["sync", "async"] = "sync") -> int:
    """Blocking entry point of `popmq serve`; returns the process exit code."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    config = ServerConfig(
        listen=listen,
        broker=BrokerConfig(store=StoreConfig(data_dir=data_dir, flush=flush)),
    )
    try:
        asyncio.run(serve(config))
    except InvalidArgumentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
