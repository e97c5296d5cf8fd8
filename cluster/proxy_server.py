"""`popmq proxy`: a stateless proxy of a cluster, serving what `popmq serve` serves.

It is a PopMQServer (popmq.v1 Messaging and Admin, apache.rocketmq.v2, health, reflection,
metrics) whose broker is a ClusterBroker routing to the brokers that etcd lists. Startup:
listen (health NOT_SERVING), wait for etcd to answer (logging `waiting for etcd at ...`
once, retrying every ETCD_RETRY_S), start the route and group caches from etcd, turn SERVING,
register as a proxy member (`proxies/<name>`, under a lease) and print `listening on
HOST:PORT`. SIGTERM or SIGINT: NOT_SERVING, held long polls answered, in-flight calls given
`server.shutdown_grace_s`, the registration revoked.

A proxy holds only soft state (caches, fault table, connections, client sessions), so any
number run side by side and a client may use any of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from popmq.broker_core import InvalidArgumentError, ServerInfo
from popmq.cluster.cluster_broker import ClusterBroker
from popmq.cluster.status import ClusterStatus
from popmq.coordination.coordinator import Session, member_path
from popmq.coordination.errors import CoordinationError, CoordinationUnavailableError
from popmq.coordination.etcd_coordinator import EtcdCoordinator
from popmq.coordination.routes import RoutesConfig
from popmq.proxy.server import PopMQServer
from popmq.runtime.collector import freeze_start_up_heap
from popmq.runtime.config import ServerConfig
from popmq.runtime.process import (
    print_plaintext_listener,
    run_process,
    split_listen,
    stop_signal,
    unless_stopped,
    wait_for_stop_signal,
)
from popmq.security.authn import cluster_signer
from popmq.security.tls import broker_channel_tls

log = logging.getLogger(__name__)

NO_BROKER = "no broker is registered in etcd: sends and receives through this proxy fail"
"""Why a proxy's health is NOT_SERVING while no broker is registered."""
NO_BROKER_REACHABLE = (
    "no registered broker can be reached (their connections have been down for {after_s:g}s"
    " or more: {brokers}): sends and receives through this proxy fail"
)
"""Why a proxy's health is NOT_SERVING while brokers are registered but none is reachable."""
UNREACHABLE_AFTER_S = 3.0
"""A registered broker whose connection has not been up for this long counts as unreachable:
longer than a restarted broker takes to be connected again (gRPC retries within 1 s)."""
ETCD_RETRY_S = 1.0
"""How often a proxy started while etcd does not answer asks it again."""
_HEALTH_POLL_S = 1.0
"""How often the brokers' connections are looked at, besides every change of the members."""


def proxy_info(config: ServerConfig) -> ServerInfo:
    """The limits a proxy checks and reports: its own `[pop]`, `[long_polling]`, `[groups]`
    and `[messages]` (give brokers the same), under the cluster's name."""
    broker = config.broker
    return ServerInfo(
        broker_name=config.cluster.name,
        data_dir="",
        pop=broker.pop,
        long_polling=broker.long_polling,
        groups=broker.groups,
        max_delay_s=broker.messages.max_delay_s,
        auto_create_topics=broker.auto_create_topics,
    )


class ProxyServer:
    """A PopMQServer over a ClusterBroker, registered in etcd as a proxy."""

    def __init__(self, config: ServerConfig) -> None:
        cluster = config.cluster
        if not cluster.etcd_endpoints:
            raise InvalidArgumentError(
                "popmq proxy needs etcd: give --etcd HOST:PORT[,HOST:PORT...] ([cluster] etcd)"
            )
        host, _ = split_listen(config.listen)
        if host.strip("[]") in ("0.0.0.0", "::") and not cluster.advertise:
            raise InvalidArgumentError(
                f"popmq proxy listens on {config.listen}, which clients cannot dial: give "
                "--advertise HOST:PORT ([cluster] advertise), the address clients use"
            )
        self.config = config
        # Brokers with authentication on accept calls signed by the root user only.
        signer = cluster_signer(config.security)
        if signer is not None and not config.security.broker_tls:
            # The signed header is the root user's, and only the date-time is signed.
            log.warning(
                "popmq proxy signs its broker calls with the root credential over plaintext: "
                "anyone on the network between proxies and brokers can capture a header that "
                "signs in as root%s; set [security] broker_tls = true (brokers with "
                "tls_cert_file) unless proxies and brokers share one host",
                ""
                if config.security.max_clock_skew_s
                else " for ever (no [security] max_clock_skew_s)",
            )
        self.coordinator = EtcdCoordinator(cluster.etcd_endpoints, cluster=cluster.name)
        self.broker = ClusterBroker(
            self.coordinator,
            proxy_info(config),
            faults=config.fault_tolerance,
            hop_keepalive_s=cluster.hop_keepalive_s,
            routes=RoutesConfig(
                default_queues_per_broker=config.broker.default_topic_queues,
                vanished_grace_s=cluster.vanished_grace_s,
            ),
            broker_tls=broker_channel_tls(config.security),
            signer=signer,
        )
        self.status = ClusterStatus(self.broker, proxy_name=lambda: self.name)
        self.server = PopMQServer(
            config,
            broker=self.broker,
            coordinator=self.coordinator,
            peers=self.broker.proxy_addresses,
            status=self.status,
        )
        self.session: Session | None = None
        self.port = 0
        # Turns health NOT_SERVING while no broker is registered or reachable (held so it
        # runs).
        self._brokers_watch: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return self.server.address

    @property
    def advertised(self) -> str:
        return self.config.cluster.advertise or self.address

    @property
    def name(self) -> str:
        """Its member name in etcd: `[cluster] proxy_name`, or the advertised address."""
        return self.config.cluster.proxy_name or self.advertised

    async def start(self) -> int:
        """Listen (health NOT_SERVING), wait for etcd to answer, follow it, turn SERVING,
        register; returns the bound port."""
        try:
            await self.server.listen()
            await self._wait_for_etcd()
            self.port = await self.server.start()
        except CoordinationError as exc:
            await self.stop()
            raise InvalidArgumentError(
                f"the proxy cannot read the cluster from etcd {self.config.cluster.etcd}: {exc}"
            ) from exc
        except BaseException:
            await self.stop()
            raise
        name = self.name
        try:
            self.session = await self.coordinator.register(
                "proxy",
                name,
                {"addr": self.advertised},
                ttl_s=self.config.cluster.session_ttl_s,
            )
        except CoordinationError as exc:
            await self.stop()
            raise InvalidArgumentError(
                f"proxy {name!r} cannot register with etcd {self.config.cluster.etcd}: {exc}"
            ) from exc
        log.info("registered as proxy %r of cluster %r", name, self.config.cluster.name)
        self._brokers_watch = asyncio.get_running_loop().create_task(
            self._follow_brokers(), name="popmq-proxy-brokers-health"
        )
        return self.port

    async def _wait_for_etcd(self) -> None:
        """Return once etcd answers a read, asking every ETCD_RETRY_S meanwhile: a proxy
        started while etcd is down waits for it (listening, health NOT_SERVING) instead of
        exiting, as `popmq broker` does. It has no view of the cluster to serve from until
        then: every route, group and member comes from etcd."""
        waited = False
        while True:
            try:
                await self.coordinator.get(member_path("proxy", self.name))
            except CoordinationUnavailableError as exc:
                if not waited:
                    log.warning(
                        "waiting for etcd at %s: it does not answer (%s); retrying every %gs "
                        "(SIGTERM stops the proxy)",
                        self.config.cluster.etcd,
                        exc,
                        ETCD_RETRY_S,
                    )
                    waited = True
                await asyncio.sleep(ETCD_RETRY_S)
            else:
                if waited:
                    log.info("etcd at %s answers: starting", self.config.cluster.etcd)
                return

    async def _follow_brokers(self) -> None:
        """Health NOT_SERVING while no broker is live (registered, or held: its
        registration vanished but its connection stayed up, RouteCache), or while none of
        the live ones can be reached (every request would fail: a load balancer should send
        clients to a proxy that can serve them), SERVING again when one is back. Through an
        etcd outage the cached members stand, so a proxy that still reaches its brokers
        stays SERVING."""
        routes = self.broker.routes
        pool = self.broker.pool
        health = self.server.health
        while True:
            reason: str | None = None
            if not routes.live_brokers:
                reason = NO_BROKER
            else:
                down = pool.unreachable(UNREACHABLE_AFTER_S)
                if down and set(down) >= set(routes.live_brokers):
                    reason = NO_BROKER_REACHABLE.format(
                        after_s=UNREACHABLE_AFTER_S, brokers=", ".join(down)
                    )
            if reason is None:
                if health.degradation is not None:
                    log.info("health SERVING again: a broker is registered and reachable")
                await health.restored()
            elif health.degradation != reason:
                log.warning("health turns NOT_SERVING: %s", reason)
                await health.degraded(reason)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_HEALTH_POLL_S):
                    await routes.wait_changed()

    async def stop(self) -> None:
        """NOT_SERVING, drain, deregister, close the caches and etcd."""
        if self._brokers_watch is not None:
            self._brokers_watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._brokers_watch
            self._brokers_watch = None
        await self.server.stop()
        if self.session is not None:
            session, self.session = self.session, None
            with contextlib.suppress(CoordinationError):
                await session.close()
        await self.coordinator.close()


async def serve_proxy(config: ServerConfig) -> None:
    """Run until SIGTERM or SIGINT (one during the start, while it waits for etcd, stops
    it cleanly too)."""
    proxy = ProxyServer(config)
    stop = stop_signal()
    if not await unless_stopped(proxy.start(), stop):
        log.info("stopped before it started")
        return
    freeze_start_up_heap(config.gc)
    host, _ = split_listen(config.listen)
    print(f"listening on {host}:{proxy.port}", flush=True)
    print_plaintext_listener(config, proxy.server.plaintext_port)
    if proxy.server.console is not None:  # PopMQServer serves it (`[console] listen`)
        print(f"console listening on {proxy.server.console.url}", flush=True)
    if proxy.server.metrics_port:
        metrics_host, _ = split_listen(config.metrics.listen)
        print(f"popmq metrics on http://{metrics_host}:{proxy.server.metrics_port}/metrics")
    tls = proxy.server.tls
    await wait_for_stop_signal(hangup=tls.reload_soon if tls else None, stop=stop)
    log.info("shutting down")
    await proxy.stop()
    log.info("stopped")


def run_proxy(config: ServerConfig) -> int:
    """Blocking entry point of `popmq proxy`; returns the process exit code (2 for a bad
    listen address, no etcd given, or a name another live proxy holds; an etcd that does
    not answer is waited for)."""
    return run_process(serve_proxy, config)
