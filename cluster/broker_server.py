"""`popmq broker`: one broker core serving BrokerService (and grpc health), nothing public.

Startup: open the store (recovery), listen, register with etcd when `[cluster] etcd` is set,
turn health SERVING, print `listening on HOST:PORT`. SIGTERM or SIGINT: health NOT_SERVING,
held long polls answered, in-flight calls given `server.shutdown_grace_s`, the etcd
registration revoked, the store closed.

With `[metrics] listen` (`--metrics-listen HOST:PORT`) it also serves GET /metrics: its
broker's families in `popmq serve`'s format (proxy/metrics.py), for scraping each broker
directly rather than through a proxy.

Fencing (docs/cluster.md): with etcd, the broker takes writes only while its registration
is alive. When the session is lost (its lease expired or was revoked, or etcd was
unreachable for a whole TTL) every RPC that changes the store fails with a retriable
UNAVAILABLE until the session has registered again (it does so by itself, with a new epoch).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from popmq.broker_core import Broker, InvalidArgumentError
from popmq.cluster.broker_service import BrokerServicer, add_broker_service
from popmq.cluster.coordination import EtcdCoordinator, Session
from popmq.cluster.errors import CoordinationError, MemberExistsError
from popmq.proxy.metrics import Metrics, MetricsEndpoint
from popmq.proxy.server import (
    MAX_MESSAGE_BYTES,
    MAX_RECEIVE_BYTES,
    ServerConfig,
    _version,
    run_process,
    split_listen,
    wait_for_stop_signal,
)

log = logging.getLogger(__name__)

SERVICE = "popmq.broker.v1.BrokerService"


class BrokerServer:
    """A Broker behind BrokerService on `config.listen`, registered with etcd if configured."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.broker = Broker(config.broker)
        self.health = health_aio.HealthServicer()
        self.servicer: BrokerServicer | None = None
        self.port = 0
        self._server: grpc.aio.Server | None = None
        self._coordinator: EtcdCoordinator | None = None
        self.session: Session | None = None
        # Follows the etcd session: fences writes while it is lost (held so it runs).
        self._fencing: asyncio.Task[None] | None = None
        self._metrics_endpoint: MetricsEndpoint | None = None
        self.metrics_port = 0
        """Bound port of the Prometheus endpoint (0 when it is off)."""

    @property
    def address(self) -> str:
        host, _ = split_listen(self.config.listen)
        return f"{host}:{self.port}"

    async def start(self) -> int:
        """Open the store, listen, register, turn SERVING; returns the bound port."""
        host, port = split_listen(self.config.listen)
        await self.broker.start()
        try:
            server = grpc.aio.server(
                options=[
                    ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
                    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                    ("grpc.so_reuseport", 0),
                    *self.config.connections.grpc_options(),
                ]
            )
            health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
            self.servicer = BrokerServicer(self.broker)
            add_broker_service(server, self.servicer)
            try:
                self.port = server.add_insecure_port(f"{host}:{port}")
            except RuntimeError as exc:
                raise InvalidArgumentError(f"cannot listen on {self.config.listen}: {exc}") from exc
            await server.start()
            self._server = server
            if self.config.metrics.listen:
                await self._serve_metrics()
            if self.config.cluster.etcd_endpoints:
                await self._register()
            await self.health.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
            await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        except BaseException:
            await self.stop()
            raise
        return self.port

    async def _serve_metrics(self) -> None:
        metrics = Metrics()
        metrics.watch(self.broker, _version())
        host, port = split_listen(self.config.metrics.listen)
        endpoint = MetricsEndpoint(metrics, host, port)
        try:
            self.metrics_port = await endpoint.start()
        except OSError as exc:
            raise InvalidArgumentError(
                f"cannot serve metrics on {self.config.metrics.listen}: {exc}"
            ) from exc
        self._metrics_endpoint = endpoint

    async def _register(self) -> None:
        cluster = self.config.cluster
        self._coordinator = EtcdCoordinator(cluster.etcd_endpoints, cluster=cluster.name)
        name = self.config.broker.broker_name
        loop = asyncio.get_running_loop()
        # A broker restarted at once after a crash finds its old lease still alive: wait
        # for it to lapse (one TTL) rather than fail, so a supervisor's restart succeeds.
        give_up = loop.time() + cluster.session_ttl_s + 2
        while True:
            try:
                self.session = await self._coordinator.register(
                    "broker", name, {"addr": self.address}, ttl_s=cluster.session_ttl_s
                )
                break
            except MemberExistsError as exc:
                if loop.time() >= give_up:
                    raise InvalidArgumentError(
                        f"broker {name!r} cannot register with etcd {cluster.etcd}: {exc} "
                        "(another live broker has this name)"
                    ) from exc
                log.warning(
                    "broker %r is still registered (an earlier run's lease has not lapsed); "
                    "waiting for it",
                    name,
                )
                await asyncio.sleep(0.5)
            except CoordinationError as exc:
                raise InvalidArgumentError(
                    f"broker {name!r} cannot register with etcd {cluster.etcd}: {exc}"
                ) from exc
        log.info("registered as broker %r of cluster %r in etcd", name, cluster.name)
        self._fencing = asyncio.get_running_loop().create_task(
            self._fence_loop(self.session), name="popmq-broker-fencing"
        )

    async def _fence_loop(self, session: Session) -> None:
        """Refuse writes while the registration is lost; take them again once it is back."""
        assert self.servicer is not None
        while True:
            epoch = await session.wait_registered()
            self.servicer.unfence()
            reason = await session.wait_lost(epoch)
            log.warning("etcd session lost (%s): refusing writes until registered again", reason)
            self.servicer.fence(f"its etcd registration was lost ({reason})")

    async def stop(self) -> None:
        """NOT_SERVING, answer held polls, drain calls, deregister, close the store."""
        await self.health.enter_graceful_shutdown()
        if self._server is not None:
            server, self._server = self._server, None
            self.broker.release_waiters()
            await server.stop(self.config.shutdown_grace_s)
        if self._fencing is not None:
            fencing, self._fencing = self._fencing, None
            fencing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await fencing
        if self.session is not None:
            session, self.session = self.session, None
            with contextlib.suppress(CoordinationError):
                await session.close()
        if self._coordinator is not None:
            coordinator, self._coordinator = self._coordinator, None
            await coordinator.close()
        if self._metrics_endpoint is not None:
            endpoint, self._metrics_endpoint = self._metrics_endpoint, None
            await endpoint.stop()
        await self.broker.close()


async def serve_broker(config: ServerConfig) -> None:
    """Run until SIGTERM or SIGINT."""
    server = BrokerServer(config)
    await server.start()
    print(f"listening on {server.address}", flush=True)
    if server.metrics_port:
        metrics_host, _ = split_listen(config.metrics.listen)
        print(f"popmq metrics on http://{metrics_host}:{server.metrics_port}/metrics", flush=True)
    await wait_for_stop_signal()
    log.info("shutting down")
    await server.stop()
    log.info("stopped")


def run_broker(config: ServerConfig) -> int:
    """Blocking entry point of `popmq broker`; returns the process exit code (2 for a bad
    listen address, an unusable data dir or an etcd that refuses the registration)."""
    return run_process(serve_broker, config)
