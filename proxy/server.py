"""The popmq server: the gRPC proxy and the embedded broker core in one process.

`run_server` is what `popmq serve` calls; `PopMQServer` is the same server as an object, for
tests and embedding (start on port 0, read the real port, stop).

Startup order: listen first (grpc.health.v1 answers NOT_SERVING, reflection works, other RPCs
get UNAVAILABLE), then open the store (recovery), register the services, and turn SERVING.
Shutdown turns NOT_SERVING before draining in-flight RPCs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

import grpc

from popmq._gen.popmq.v1 import admin_pb2_grpc
from popmq.broker_core import (
    Broker,
    BrokerAPI,
    TransactionAPI,
)
from popmq.console import ConsoleServer
from popmq.coordination.coordinator import Coordinator
from popmq.coordination.local_coordinator import LocalCoordinator
from popmq.proxy.admin import AdminServicer
from popmq.proxy.broker_metrics import ClusterBrokersCollector
from popmq.proxy.clients import ClientRegistry
from popmq.proxy.health import Health, LateServices, add_ops_services
from popmq.proxy.memory import return_large_blocks
from popmq.proxy.messaging import MessagingServicer, add_messaging_service
from popmq.proxy.rocketmq import RocketMQService
from popmq.proxy.rocketmq.refusals import ROCKETMQ
from popmq.proxy.rpc_observer import RpcInterceptor, StreamObserver
from popmq.proxy.status import LocalStatus, StatusProvider
from popmq.proxy.transaction_checks import TransactionCheckLoop
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
    version,
    wait_for_stop_signal,
)
from popmq.runtime.settings import items
from popmq.security.audit import AuditFile
from popmq.security.gate import Gate
from popmq.security.protected import check_protected_mode
from popmq.security.store import (
    AclAuthorizer,
    ClusterSecurityStore,
    LocalSecurityStore,
    SecurityStore,
)
from popmq.security.tls import ServerTLS

log = logging.getLogger(__name__)


class PopMQServer:
    """One proxy over one broker: the embedded one, or the `broker` given (a BrokerAPI,
    e.g. a popmq.cluster.RemoteBroker over a `popmq broker` in another process, or a
    ClusterBroker; then `config.broker` is not used). The server starts and closes the
    broker it serves. `peers`, in cluster mode, gives every proxy's HOST:PORT for RocketMQ
    routes.

    `coordinator` is where the proxy keeps what other proxies must see (Spark lease tokens,
    proxy/leases.py; the queue-exclusive consumers and their queue claims,
    proxy/clients.py): a cluster's proxies share an EtcdCoordinator, which the caller owns
    (opens and closes). Without one the server makes and closes its own LocalCoordinator,
    in memory (`popmq serve`).

    `status` answers GetClusterStatus and feeds the per-broker metrics (a cluster proxy
    passes popmq.cluster.status.ClusterStatus); without it the broker is reported as the one
    local broker and there are no per-broker series."""

    def __init__(
        self,
        config: ServerConfig | None = None,
        *,
        broker: BrokerAPI | None = None,
        coordinator: Coordinator | None = None,
        peers: Callable[[], Sequence[str]] | None = None,
        status: StatusProvider | None = None,
    ) -> None:
        self.config = config or ServerConfig()
        # Cluster mode: every proxy's HOST:PORT, which RocketMQ routes list.
        self._peers = peers
        self.broker: BrokerAPI = Broker(self.config.broker) if broker is None else broker
        self.coordinator: Coordinator = LocalCoordinator() if coordinator is None else coordinator
        self._owns_coordinator = coordinator is None
        self.status = status
        self._server: grpc.aio.Server | None = None
        self.port = 0
        self.rocketmq: RocketMQService | None = None
        self.clients: ClientRegistry | None = None
        """Registered consumer clients; created at start (it needs the groups on disk)."""
        self.messaging: MessagingServicer | None = None
        self.transaction_checks: TransactionCheckLoop | None = None
        """Hands due transaction checks to online producers (transaction_checks.py)."""
        self.security_store: SecurityStore | None = None
        """Users and policies (created at start): over the embedded broker's store, or in
        the coordinator when one was given (cluster mode: every proxy shares them)."""
        self.health = Health()
        self._late = LateServices()
        self.metrics = Metrics() if self.config.metrics.listen else None
        self._metrics_endpoint: MetricsEndpoint | None = None
        self.metrics_port = 0
        """Bound port of the Prometheus endpoint (0 when it is off)."""
        self.tls: ServerTLS | None = None
        """The listener's certificate with `[security] tls_cert_file` (from listen() on)."""
        self.plaintext_port = 0
        """Bound port of `[security] plaintext_listen` (0 when there is none)."""
        self.gate = Gate.from_config(self.config.security, dialects=(ROCKETMQ,))
        """Authentication and access control of every call but health and reflection
        (security/gate.py; RocketMQ clients' refusals in their protocol's shape,
        proxy/rocketmq/refusals.py); off unless `[security] authentication`."""
        self._audit_file: AuditFile | None = None
        """`[security] audit_log_file`, open from start to stop."""
        self.console = (
            ConsoleServer(self.config.console, self.config.security)
            if self.config.console.enabled
            else None
        )
        """The web console (`[console] listen`; None when off): bound with the gRPC
        listener, serving from the end of start(), stopped first (docs/console.md)."""
        self._opened = False
        # Waits for a broker failure and turns health NOT_SERVING (held so it runs).
        self._failure_watch: asyncio.Task[None] | None = None

    @property
    def embedded_broker(self) -> Broker:
        """The in-process broker, for benchmarks that read its internals (held polls)."""
        if not isinstance(self.broker, Broker):
            raise TypeError(f"this server serves a {type(self.broker).__name__}, not a Broker")
        return self.broker

    @property
    def services(self) -> list[str]:
        """Services registered beside health and reflection (what `grpcurl list` shows)."""
        return self._late.service_names

    @property
    def address(self) -> str:
        host, _ = split_listen(self.config.listen)
        return f"{host}:{self.port}"

    async def listen(self) -> int:
        """Bind and serve health (NOT_SERVING) and reflection only; returns the bound port."""
        if self._server is not None:
            return self.port
        split_listen(self.config.listen)  # a bad address is named as such, before the rest
        security = self.config.security
        check_protected_mode(security, (self.config.listen, security.plaintext_listen))
        if self.console is not None:
            self.console.bind()  # its protected mode and address fail the start here too
        try:
            # else the memory of a burst of large bodies stays with the process once freed
            return_large_blocks()
            interceptors: list[grpc.aio.ServerInterceptor] = [
                RpcInterceptor(self.health, self.metrics)
            ]
            gate = self.gate.interceptor()
            if gate is not None:  # none when authentication is off: the gate then costs nothing
                interceptors.append(gate)
            server = grpc_server(self.config, interceptors)
            add_ops_services(server, self.health, self._late)
            if security.tls:  # TLS only on `listen`; plaintext only on its own listener
                self.tls = ServerTLS(security, what="proxy")
            listeners = bind_listeners(server, self.config, self.tls)
            self.port, self.plaintext_port = listeners.port, listeners.plaintext_port
            if self.metrics is not None:
                self._metrics_endpoint = await start_metrics(self.metrics, self.config)
                self.metrics_port = self._metrics_endpoint.port
            await self.health.starting()
            await server.start()
            self._server = server
            if self.tls is not None:
                self.tls.start()
        except BaseException:
            # What this call opened closes with it (a bound console socket, the metrics
            # endpoint), not when the process exits or the collector finds it.
            if self.console is not None:
                await self.console.stop()
            if self._metrics_endpoint is not None:
                endpoint, self._metrics_endpoint = self._metrics_endpoint, None
                await endpoint.stop()
            raise
        return self.port

    async def start(self) -> int:
        """Listen, open the store, register the services and turn SERVING; returns the port."""
        await self.listen()
        try:
            if self.config.security.audit_log_file:
                self._audit_file = AuditFile(self.config.security.audit_log_file)
            await self.broker.start()
        except BaseException:
            await self.stop()
            raise
        self._opened = True
        self._failure_watch = asyncio.get_running_loop().create_task(
            self._watch_failure(), name="popmq-health-watch"
        )
        if self.metrics is not None:
            self.metrics.watch(self.broker, version())
            if self.status is not None:
                collector = ClusterBrokersCollector(self.status, asyncio.get_running_loop())
                self.metrics.add(collector)
        # Servicers registered on `server` from here join the running gRPC server.
        server = self._late
        self.clients = ClientRegistry(
            self.config.clients,
            broker_name=self.broker.server_info().broker_name,
            coordinator=self.coordinator,
            existing_groups=[g.name for g in await self.broker.list_groups()],
        )
        await self.clients.start()
        # Transaction check-back: due checks go to the producers the front ends register.
        if isinstance(self.broker, TransactionAPI):
            self.transaction_checks = TransactionCheckLoop(self.broker)
            self.transaction_checks.start()
        self.messaging = MessagingServicer(
            self.broker,
            self.clients,
            self.coordinator,
            observe_pop=StreamObserver(self.metrics, "popmq.v1.MessagingService/PopStream"),
            observe_send=StreamObserver(self.metrics, "popmq.v1.MessagingService/SendStream"),
            observe_stream_ack=StreamObserver(
                self.metrics, "popmq.v1.MessagingService/PopStream/Ack"
            ),
            transaction_checks=self.transaction_checks,
        )
        add_messaging_service(self.messaging, server)
        self.security_store = self._security_store()
        await self.security_store.start()
        # Access control from here on. Before, the gate knows root only (a SUPER user, never
        # checked), so nothing a stored user could do slips through while the store opens.
        self.gate.use(authorizer=AclAuthorizer(self.security_store), directory=self.security_store)
        admin = AdminServicer(
            self.broker,
            config_items=items(self.config),
            status=self.status or LocalStatus(self.broker, lambda: self.address),
            security_store=self.security_store,
        )
        admin_pb2_grpc.add_AdminServiceServicer_to_server(admin, server)
        # RocketMQ 5 clients (apache.rocketmq.v2) on the same port, over the same broker.
        self.rocketmq = await RocketMQService.serve_on(
            server,
            self.broker,
            address=lambda: self.address,
            clients=self.clients,
            popped_bytes=self.messaging.popped_bytes,  # one budget for v1 and v2 consumers
            peers=self._peers,
            transaction_checks=self.transaction_checks,
        )
        await self.health.serving(self._late.service_names)
        if self.console is not None:
            # Its actions go through the same admin servicer and gate as gRPC calls.
            await self.console.start(
                broker=self.broker,
                admin=admin,
                gate=self.gate,
                security_store=self.security_store,
                serving=lambda: self.health.failure or self.health.degradation,
            )
        loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
        log.info("serving %s (event loop: %s)", ", ".join(self._late.service_names), loop)
        return self.port

    def _security_store(self) -> SecurityStore:
        reserved = (self.config.security.root_access_key,)
        if self._owns_coordinator and isinstance(self.broker, Broker):
            return LocalSecurityStore(self.broker, reserved=reserved)
        return ClusterSecurityStore(self.coordinator, reserved=reserved)

    async def _watch_failure(self) -> None:
        """When a background task of the broker dies, health turns NOT_SERVING, saying why."""
        reason = await self.broker.wait_failure()
        log.error("health turns NOT_SERVING: %s", reason)
        await self.health.failed(reason)

    async def stop(self) -> None:
        """Stop accepting RPCs, let in-flight ones finish, then close the store cleanly."""
        if self.console is not None:
            await self.console.stop()
        if self._server is not None:
            server, self._server = self._server, None
            await self.health.shutting_down()
            if self.rocketmq is not None:
                await self.rocketmq.close()  # ends Telemetry streams: stop() need not wait
            # Before the broker drains: a draining broker answers due_checks at once, and the
            # check loop would then spin without yielding to the loop.
            if self.transaction_checks is not None:
                await self.transaction_checks.close()
            # Held long polls answer at once (empty), so the grace period is spent only on
            # RPCs doing work, which finish while the store is still open.
            if self._opened:
                self.broker.release_waiters()
            if self.messaging is not None:
                self.messaging.release_waiters()
            await server.stop(self.config.shutdown_grace_s)
        if self.transaction_checks is not None:
            await self.transaction_checks.close()  # a server that never listened
        if self.tls is not None:
            await self.tls.close()
        if self._metrics_endpoint is not None:
            endpoint, self._metrics_endpoint = self._metrics_endpoint, None
            await endpoint.stop()
        if self._failure_watch is not None:
            watch, self._failure_watch = self._failure_watch, None
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        if self.clients is not None:
            await self.clients.close()
        if self.messaging is not None:
            await self.messaging.close()
        if self.security_store is not None:
            await self.security_store.close()
        await self.broker.close()
        if self._owns_coordinator:
            await self.coordinator.close()
        if self._audit_file is not None:
            self._audit_file.close()


async def serve(config: ServerConfig) -> None:
    """Run until SIGTERM or SIGINT."""
    server = PopMQServer(config)
    port = await server.start()
    freeze_start_up_heap(config.gc)
    host, _ = split_listen(config.listen)
    # Handlers first: a SIGTERM sent as soon as the listening line is read stops cleanly.
    stop = stop_signal()
    print(f"popmq listening on {host}:{port}", flush=True)
    print_plaintext_listener(config, server.plaintext_port)
    if server.console is not None:
        print(f"console listening on {server.console.url}", flush=True)
    if server.metrics_port:
        metrics_host, _ = split_listen(config.metrics.listen)
        print(f"popmq metrics on http://{metrics_host}:{server.metrics_port}/metrics", flush=True)
    await wait_for_stop_signal(hangup=server.tls.reload_soon if server.tls else None, stop=stop)
    log.info("shutting down")
    await server.stop()
    log.info("stopped")


def run_server(config: ServerConfig) -> int:
    """Blocking entry point of `popmq serve`; returns the process exit code.

    A bad listen address, a busy port or an unusable data dir (a file, read-only, not
    permitted, in use by another popmq) print one line and exit 2.
    """
    return run_process(serve, config)
