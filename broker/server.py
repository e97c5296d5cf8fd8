"""`popmq broker`: one broker core serving BrokerService (and grpc health), nothing public.

Startup: open the store (recovery), listen, and when `[cluster] etcd` is set wait until
etcd answers (logging that it waits for etcd at its endpoints, and retrying every
`ETCD_RETRY_S`: a broker started before etcd, or during an outage, starts once etcd is
back; SIGTERM meanwhile stops it cleanly), then start the catalog sync (catalog_sync.py),
waiting up to `cluster.catalog_ready_timeout_s` for it to apply the first listing of topics
and groups; after a run that did not end cleanly, remove the messages of its crash tail
that other brokers hold, its writes fenced meanwhile (crash_tail_sync.py, up to
`cluster.crash_tail_wait_s` for silent peers; a start stopped or failed before that is
done leaves the store marked as ended uncleanly, so the next start reconciles, and the TLS
files and credential it calls the peers with are read before the store opens, on every
start, so a bad one fails each start alike); and only then register with etcd (proxies
route to a broker from its registration on, so it must hold its routed topics by then,
and no longer hold sends moved elsewhere); turn health SERVING once that
listing is applied (later, by itself, if etcd was slower than the wait), print `listening
on HOST:PORT`. SIGTERM or SIGINT: health NOT_SERVING, held long polls answered, in-flight
calls given `server.shutdown_grace_s`, the catalog sync stopped, the etcd registration
revoked, the store closed.

Health turns NOT_SERVING for good when the broker fails (a background task of the core
died), and in cluster mode when the catalog sync or the fencing loop dies: the broker's
`report_failure` records why, so WaitFailure tells proxies too. A dead fencing loop also
fences writes for good (nothing follows the registration any more).

A cluster broker ignores `broker.auto_create_topics` (and says so at start): its topics
come from the routes in etcd, and a topic created by a send would exist on one broker with
no route. The proxies read the same setting to create a route on first send, so one config
file may serve both.

With `[metrics] listen` (`--metrics-listen HOST:PORT`) it also serves GET /metrics: its
broker's families in `popmq serve`'s format (runtime/metrics.py), for scraping each broker
directly rather than through a proxy.

With `[security] authentication` (docs/security.md, "Authentication"), every BrokerService
call must carry the `authorization` header signed by the root user, as the proxies sign
them (`[security] root_access_key` and its secret: the same on proxies and brokers); health
stays open. Without it, BrokerService answers whoever reaches it (protected mode keeps it
on loopback unless `allow_anonymous`).

Fencing (fencing.py, docs/cluster.md): a standalone broker keeps taking writes through an
etcd outage of any length (no other process can serve its queues meanwhile) and registers
again by itself once etcd answers. Every RPC that changes the store fails with a retriable
UNAVAILABLE only while another live member holds its name (found when it registers again).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Coroutine
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from popmq.broker.catalog_sync import CatalogSync
from popmq.broker.crash_tail_sync import reconcile_crash_tail
from popmq.broker.fencing import start_fencing
from popmq.broker.peer_pings import peer_pings_allowed
from popmq.broker.service import BrokerServicer, add_broker_service
from popmq.broker_core import Broker, InvalidArgumentError
from popmq.coordination.coordinator import Coordinator, Session, member_path
from popmq.coordination.errors import (
    CoordinationError,
    CoordinationUnavailableError,
    MemberExistsError,
)
from popmq.coordination.etcd_coordinator import EtcdCoordinator
from popmq.runtime.collector import freeze_start_up_heap
from popmq.runtime.config import ServerConfig
from popmq.runtime.metrics import Metrics, MetricsEndpoint
from popmq.runtime.process import (
    bind_listeners,
    grpc_server,
    print_plaintext_listener,
    run_process,
    split_listen,
    start_metrics,
    stop_signal,
    unless_stopped,
    version,
    wait_for_stop_signal,
)
from popmq.security.authn import cluster_signer
from popmq.security.gate import Gate
from popmq.security.protected import check_protected_mode
from popmq.security.signing import Signer
from popmq.security.tls import ChannelTLS, ServerTLS, broker_channel_tls

log = logging.getLogger(__name__)

SERVICE = "popmq.broker.v1.BrokerService"
ETCD_RETRY_S = 1.0
"""How often a starting broker asks etcd again while it does not answer."""


class BrokerServer:
    """A Broker behind BrokerService on `config.listen`, registered with etcd if configured.

    Args:
        config: The server's settings; `[cluster] etcd` makes it a cluster broker.
        coordinator: A coordinator to register with and follow instead of an etcd client
            made from `[cluster] etcd` (it makes the server a cluster broker too). The
            caller keeps it: stop() does not close it.
    """

    def __init__(self, config: ServerConfig, *, coordinator: Coordinator | None = None) -> None:
        self.config = config
        self._given_coordinator = coordinator
        broker = config.broker
        if self.in_cluster and broker.auto_create_topics:
            broker = dataclasses.replace(broker, auto_create_topics=False)
        # A cluster broker reconciles its crash tail before it serves: until it has, its
        # store keeps the unclean-end marker, so a start cut short reconciles next time.
        self.broker = Broker(broker, reconciles_crash_tail=self.in_cluster)
        self.gate = Gate.from_config(config.security)
        """With `[security] authentication`: every BrokerService call must be signed by the
        root user (the proxies' cluster credential); it knows no other user, so a client
        cannot go around the proxies' access control. Health stays open."""
        self.health = health_aio.HealthServicer()
        self.servicer: BrokerServicer | None = None
        self.port = 0
        self.tls: ServerTLS | None = None
        """BrokerService's certificate with `[security] tls_cert_file` (once started)."""
        self.plaintext_port = 0
        """Bound port of `[security] plaintext_listen` (0 when there is none)."""
        self._server: grpc.aio.Server | None = None
        self._coordinator: Coordinator | None = None
        self.session: Session | None = None
        # Follows the etcd session: fences writes while it is lost (fencing.py; held so it
        # runs).
        self._fencing: asyncio.Task[None] | None = None
        self._metrics_endpoint: MetricsEndpoint | None = None
        self.metrics_port = 0
        """Bound port of the Prometheus endpoint (0 when it is off)."""
        self.catalog_sync: CatalogSync | None = None
        """Keeps the broker's topics and groups in step with etcd (cluster mode)."""
        # Background watchers held so they run: the broker's failure -> health; the
        # catalog sync's failure -> the broker's; SERVING once the sync is ready.
        self._watchers: list[asyncio.Task[None]] = []
        # How a crash-tail reconciliation reaches the other brokers (cluster mode; read by
        # start() before the store opens).
        self._peer_tls: ChannelTLS | None = None
        self._peer_signer: Signer | None = None

    @property
    def coordinator(self) -> Coordinator | None:
        """What the broker registers with and follows (cluster mode, once started)."""
        return self._coordinator

    @property
    def in_cluster(self) -> bool:
        return bool(self.config.cluster.etcd_endpoints) or self._given_coordinator is not None

    @property
    def address(self) -> str:
        host, _ = split_listen(self.config.listen)
        return f"{host}:{self.port}"

    @property
    def advertised(self) -> str:
        """The address it registers, which proxies dial: `[cluster] advertise`, else the
        listen address with the bound port."""
        return self.config.cluster.advertise or self.address

    async def start(self) -> int:
        """Open the store, listen, register and sync the catalog (cluster mode), turn
        SERVING; returns the bound port."""
        split_listen(self.config.listen)  # a bad address fails before the store opens
        security = self.config.security
        # BrokerService reads and writes every topic for whoever calls: protected mode
        # applies as to a proxy (docs/security.md#protected-mode), to both listeners.
        check_protected_mode(
            security, (self.config.listen, security.plaintext_listen), server="popmq broker"
        )
        if security.tls:  # before the store opens: bad files fail fast
            self.tls = ServerTLS(security, what="broker")
        if self.in_cluster:
            # Read on every start, not only after an unclean end: a bad file fails every
            # start alike, and never one that would then leave the crash tail unreconciled.
            self._peer_tls = broker_channel_tls(security)
            self._peer_signer = cluster_signer(security)
        if self.in_cluster and self.config.broker.auto_create_topics:
            log.warning(
                "broker.auto_create_topics is true, but a cluster broker creates topics only "
                "from their routes in etcd: a send to a topic without a route is refused "
                "here (the proxies' own broker.auto_create_topics creates routes on first send)"
            )
        await self.broker.start()
        try:
            gate = self.gate.interceptor()
            server = grpc_server(peer_pings_allowed(self.config), () if gate is None else (gate,))
            health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
            # grpc's servicer starts with "" SERVING: not before the broker is ready.
            await self._health_to(health_pb2.HealthCheckResponse.NOT_SERVING)
            self.servicer = BrokerServicer(self.broker)
            if self.in_cluster and self.broker.unclean_end:
                # Until its crash tail is reconciled (crash_tail_sync.py): a send stored now
                # could be removed, and a peer's lookup of a tail message answered now
                # could be wrong.
                self.servicer.writes.fence(
                    "it is starting after an unclean stop and is checking whether other "
                    "brokers hold the messages it stored last",
                    reconciling=True,
                )
            add_broker_service(server, self.servicer)
            listeners = bind_listeners(server, self.config, self.tls)
            self.port, self.plaintext_port = listeners.port, listeners.plaintext_port
            await server.start()
            self._server = server
            if self.tls is not None:
                self.tls.start()
            if self.config.metrics.listen:
                await self._serve_metrics()
            self._watch(self._health_follows_failure(), "popmq-broker-health")
            if self.in_cluster:
                cluster = self.config.cluster
                self._coordinator = self._given_coordinator or EtcdCoordinator(
                    cluster.etcd_endpoints, cluster=cluster.name
                )
                await self._wait_for_etcd()
                # The catalog first: once registered, proxies route sends and pops here,
                # which must find every topic its routes give it (not NOT_FOUND after a
                # restart that missed a topic's creation).
                ready = await self._start_catalog_sync()
                await self._reconcile_crash_tail()
                await self._register()
                if ready:
                    await self._serving()
            else:
                await self._serving()
        except BaseException:
            await self.stop()
            raise
        return self.port

    async def _serve_metrics(self) -> None:
        metrics = Metrics()
        metrics.watch(self.broker, version())
        self._metrics_endpoint = await start_metrics(metrics, self.config)
        self.metrics_port = self._metrics_endpoint.port

    def _watch(self, work: Coroutine[Any, Any, None], name: str) -> None:
        self._watchers.append(asyncio.get_running_loop().create_task(work, name=name))

    async def _serving(self) -> None:
        """Turn SERVING, unless the broker failed meanwhile (then it stays NOT_SERVING)."""
        if self.broker.failure is not None or self._server is None:
            return
        await self._health_to(health_pb2.HealthCheckResponse.SERVING)

    async def _health_to(self, status: health_pb2.HealthCheckResponse.ServingStatus) -> None:
        for service in (SERVICE, ""):
            await self.health.set(service, status)

    async def _health_follows_failure(self) -> None:
        """When the broker fails, health turns NOT_SERVING for good, and the log says why."""
        reason = await self.broker.wait_failure()
        log.error("health turns NOT_SERVING: %s", reason)
        await self._health_to(health_pb2.HealthCheckResponse.NOT_SERVING)

    async def _start_catalog_sync(self) -> bool:
        """Start the catalog sync and wait (bounded) for its first listing: a proxy should
        not find this broker SERVING while it lacks a topic routed to it. If etcd is slower
        than `catalog_ready_timeout_s`, start() goes on and health turns SERVING when the
        listing is applied."""
        assert self._coordinator is not None
        sync = self.catalog_sync = CatalogSync(
            self._coordinator, self.broker, self.config.broker.broker_name
        )
        await sync.start()
        self._watch(self._fail_with_catalog_sync(sync), "popmq-broker-catalog-watch")
        timeout_s = self.config.cluster.catalog_ready_timeout_s
        try:
            await sync.wait_ready(timeout_s=timeout_s)
        except TimeoutError:
            log.warning(
                "the catalog sync has not applied the first listing of topics and groups "
                "within %gs (is etcd slow?): health stays NOT_SERVING until it has",
                timeout_s,
            )
            self._watch(self._serve_when_ready(sync), "popmq-broker-catalog-ready")
            return False
        return True

    async def _serve_when_ready(self, sync: CatalogSync) -> None:
        await sync.wait_ready()
        log.info("the catalog sync applied its first listing: serving")
        await self._serving()

    async def _fail_with_catalog_sync(self, sync: CatalogSync) -> None:
        reason = await sync.wait_failure()
        self.broker.report_failure(f"its catalog sync stopped ({reason})")

    async def _reconcile_crash_tail(self) -> None:
        """After an unclean end, remove the sends other brokers hold (crash_tail_sync.py),
        then take writes (the fencing loop follows the registration from then on)."""
        assert self._coordinator is not None and self.servicer is not None
        if not self.broker.unclean_end:
            return
        await reconcile_crash_tail(
            self.broker,
            self._coordinator,
            name=self.config.broker.broker_name,
            wait_s=self.config.cluster.crash_tail_wait_s,
            tls=self._peer_tls,
            signer=self._peer_signer,
            fence=self.servicer.writes,
        )
        self.broker.crash_tail_reconciled()
        self.servicer.writes.unfence()

    async def _wait_for_etcd(self) -> None:
        """Return once the coordinator answers a read, asking every ETCD_RETRY_S meanwhile:
        a broker started while etcd is down waits for it instead of exiting."""
        assert self._coordinator is not None
        name = self.config.broker.broker_name
        waited = False
        while True:
            try:
                await self._coordinator.get(member_path("broker", name))
            except CoordinationUnavailableError as exc:
                if not waited:
                    log.warning(
                        "waiting for etcd at %s: it does not answer (%s); retrying every %gs "
                        "(SIGTERM stops the broker)",
                        self.config.cluster.etcd or "the given coordinator",
                        exc,
                        ETCD_RETRY_S,
                    )
                    waited = True
                await asyncio.sleep(ETCD_RETRY_S)
            else:
                if waited:
                    log.info("etcd at %s answers: starting", self.config.cluster.etcd)
                return

    async def _register(self) -> None:
        cluster = self.config.cluster
        assert self._coordinator is not None
        name = self.config.broker.broker_name
        loop = asyncio.get_running_loop()
        # A broker restarted at once after a crash finds its old lease still alive: wait
        # for it to lapse (one TTL) rather than fail, so a supervisor's restart succeeds.
        give_up = loop.time() + cluster.session_ttl_s + 2
        while True:
            try:
                self.session = await self._coordinator.register(
                    "broker", name, {"addr": self.advertised}, ttl_s=cluster.session_ttl_s
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
            except CoordinationUnavailableError as exc:  # gone again since it answered
                log.warning("cannot register with etcd yet (%s); retrying", exc)
                await asyncio.sleep(ETCD_RETRY_S)
            except CoordinationError as exc:
                raise InvalidArgumentError(
                    f"broker {name!r} cannot register with etcd {cluster.etcd}: {exc}"
                ) from exc
        log.info("registered as broker %r of cluster %r in etcd", name, cluster.name)
        assert self.servicer is not None
        self._fencing = start_fencing(
            self.session, self.servicer.writes, failed=self.broker.report_failure
        )

    async def stop(self) -> None:
        """NOT_SERVING, answer held polls, drain calls, deregister, close the store."""
        await self.health.enter_graceful_shutdown()
        if self._server is not None:
            server, self._server = self._server, None
            self.broker.release_waiters()
            if self.servicer is not None:
                self.servicer.end_streams()  # the proxies' hop streams never end by themselves
            await server.stop(self.config.shutdown_grace_s)
        if self.tls is not None:
            await self.tls.close()
        if self.catalog_sync is not None:
            sync, self.catalog_sync = self.catalog_sync, None
            await sync.close()
        tasks, self._watchers = self._watchers, []
        if self._fencing is not None:
            tasks.append(self._fencing)
            self._fencing = None
        for task in tasks:
            task.cancel()
        # A task that died has been reported already (the fencing task's own callback, the
        # health watcher).
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.session is not None:
            session, self.session = self.session, None
            with contextlib.suppress(CoordinationError):
                await session.close()
        if self._coordinator is not None:
            coordinator, self._coordinator = self._coordinator, None
            if coordinator is not self._given_coordinator:
                await coordinator.close()
        if self._metrics_endpoint is not None:
            endpoint, self._metrics_endpoint = self._metrics_endpoint, None
            await endpoint.stop()
        await self.broker.close()


async def serve_broker(config: ServerConfig) -> None:
    """Run until SIGTERM or SIGINT (one during the start, while it waits for etcd, stops
    it cleanly too)."""
    server = BrokerServer(config)
    stop = stop_signal()
    if not await unless_stopped(server.start(), stop):
        log.info("stopped before it started")
        return
    freeze_start_up_heap(config.gc)
    print(f"listening on {server.address}", flush=True)
    print_plaintext_listener(config, server.plaintext_port)
    if server.metrics_port:
        metrics_host, _ = split_listen(config.metrics.listen)
        print(f"popmq metrics on http://{metrics_host}:{server.metrics_port}/metrics", flush=True)
    await wait_for_stop_signal(hangup=server.tls.reload_soon if server.tls else None, stop=stop)
    log.info("shutting down")
    await server.stop()
    log.info("stopped")


def run_broker(config: ServerConfig) -> int:
    """Blocking entry point of `popmq broker`; returns the process exit code (2 for a bad
    listen address, an unusable data dir or a name another live broker holds; an etcd
    that does not answer is waited for). With
    `replication.replica` (`--shard`), one replica of a shard (broker/replication)."""
    if config.replication.replica:
        from popmq.broker.replication.replica import serve_replica

        return run_process(serve_replica, config)
    return run_process(serve_broker, config)
