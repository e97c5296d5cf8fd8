"""What a popmq server process is configured with: `ServerConfig`, and the sections of it
that no lower package owns.

One config serves `popmq serve`, `popmq proxy`, `popmq broker` and a shard's replicas (one
file may serve them all; each process reads the sections it uses). Each section is the
dataclass of the package that owns the mechanism: `BrokerConfig` (broker_core), the cluster
mode sections (`ClusterConfig`, `ReplicationConfig`, `FaultToleranceConfig`: coordination),
`SecurityConfig` (security), `ConsoleConfig` (console), `MetricsConfig`, `LogConfig` and
`CollectorConfig` (metrics.py, logs.py, collector.py here); and these two, kept here so
that the config of every process can hold them without importing the proxy:

- `ConnectionConfig` (`[connections]`): keepalive pings and idle limits of client
  connections, which every process's gRPC server applies (process.py);
- `ClientRegistryConfig` (`[clients]`): consumer heartbeats and queue assignment of a
  proxy's client registry (proxy/clients.py).

settings.py reads them from a TOML file, POPMQ_* variables and flags.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from popmq.broker_core import BrokerConfig
from popmq.console.config import ConsoleConfig
from popmq.coordination.config import ClusterConfig, FaultToleranceConfig, ReplicationConfig
from popmq.runtime.collector import CollectorConfig
from popmq.runtime.logs import LogConfig
from popmq.runtime.metrics import MetricsConfig
from popmq.security.config import SecurityConfig

MACHINE_ROOM = re.compile(r"^[A-Za-z0-9_.-]+$")
"""What a machine room's name may hold (`clients.machine_room`, a client's own)."""


@dataclass(frozen=True, kw_only=True)
class ClientRegistryConfig:
    """Heartbeat timing, limits, and the machine room of this server's queues.

    The broker name in the queues' ``MessageQueue`` strings is not set here: it is the
    broker's own (``[broker] broker_name``), given to ClientRegistry by the server.
    """

    default_heartbeat_interval_s: float = 10.0
    """Interval of a client that asks for none (RocketMQ 5 clients: 10 s)."""
    min_heartbeat_interval_s: float = 0.05
    """Shortest interval a client may ask for (short intervals are for tests)."""
    max_heartbeat_interval_s: float = 30.0
    """Longest interval a client may ask for (RocketMQ 4 clients: 30 s)."""
    missed_heartbeats: int = 3
    """A client silent for this many of its intervals is gone; also its claim time."""
    restart_grace_s: float | None = None
    """After a restart, queues of existing groups that no member reports holding are not
    granted for this long. None: missed_heartbeats * max_heartbeat_interval_s, the
    longest claim a member may still hold from before the restart, plus outage_hold_s
    (a claim may be renewed in a proxy's memory that long past its recorded deadline)."""
    machine_room: str = ""
    """Machine room of this server's queues, for BY_MACHINE_ROOM. Empty: not in any room,
    so no member is near and every member shares them (AVERAGE)."""
    max_clients: int = 100_000
    """Registered (group, client) pairs at most (of the clients this server heard from);
    past it Heartbeat is RESOURCE_EXHAUSTED."""
    max_group_members: int = 1024
    """Live queue-exclusive members of one group at most, through all proxies (they share
    one coordinator entry); past it Heartbeat is RESOURCE_EXHAUSTED. A topic has at most
    1,024 queues, so more members would only wait."""
    clock_skew_s: float | None = None
    """How far the wall clocks of the proxies sharing a coordinator may disagree: another
    member's claim blocks a grant this long past its deadline. None: 0 with the in-process
    coordinator (one clock), 1 s with etcd."""
    sweep_interval_s: float = 60.0
    """How often the coordinator entries of groups whose members and claims all ran out
    are deleted; 0: never (they go when their group is next used)."""
    outage_hold_s: float | None = None
    """How long past its recorded deadline a member's queue claim may still be renewed, in
    the proxy's memory, while the coordinator does not answer; so also how long past that
    deadline (and the clock skew) another member waits for the queue. None: 0 with the
    in-process coordinator (it cannot be away), 60 s with etcd (docs/cluster.md, "When
    etcd is down")."""

    def __post_init__(self) -> None:
        if not 0 < self.min_heartbeat_interval_s <= self.default_heartbeat_interval_s:
            raise ValueError("heartbeat intervals must satisfy 0 < min <= default")
        if self.default_heartbeat_interval_s > self.max_heartbeat_interval_s:
            raise ValueError("heartbeat intervals must satisfy default <= max")
        if self.missed_heartbeats < 1:
            raise ValueError("missed_heartbeats must be at least 1")
        if self.restart_grace_s is not None and self.restart_grace_s < 0:
            raise ValueError("restart_grace_s must be >= 0")
        if self.machine_room and not MACHINE_ROOM.match(self.machine_room):
            raise ValueError(
                f"machine_room {self.machine_room!r} must match {MACHINE_ROOM.pattern}"
            )
        if self.max_clients < 1:
            raise ValueError("max_clients must be at least 1")
        if self.max_group_members < 1:
            raise ValueError("max_group_members must be at least 1")
        if self.clock_skew_s is not None and not 0 <= self.clock_skew_s <= 60:
            raise ValueError("clock_skew_s must be within 0..60 (seconds)")
        if self.sweep_interval_s < 0:
            raise ValueError("sweep_interval_s must be >= 0")
        if self.outage_hold_s is not None and not 0 <= self.outage_hold_s <= 3600:
            raise ValueError("outage_hold_s must be within 0..3600 (seconds)")

    @property
    def grace_s(self) -> float:
        """The restart grace in effect."""
        if self.restart_grace_s is not None:
            return self.restart_grace_s
        return self.missed_heartbeats * self.max_heartbeat_interval_s


@dataclass(frozen=True, kw_only=True)
class ConnectionConfig:
    """How long the server keeps a client connection: keepalive pings and idle limits.

    Without them a connection the client never closes stays open forever, with its buffers
    (2,000 idle ones were never closed). The defaults close a connection with no call for
    5 min, which never touches a working client: a long poll lasts at most 30 s, RocketMQ
    clients heartbeat every 10 s, and an idle SDK channel reconnects by itself on its next
    call.
    """

    max_idle_s: float = 300.0
    """A connection with no call in progress for this long is closed (GOAWAY); 0 keeps it
    forever (grpc.max_connection_idle_ms)."""
    max_age_s: float = 0.0
    """A connection is closed after this long whatever it does, so clients spread over new
    servers; 0 (the default) never (grpc.max_connection_age_ms). Streams open then get
    `max_age_grace_s` to finish."""
    max_age_grace_s: float = 35.0
    """Calls still running when a connection reaches `max_age_s` get this long before they
    are cancelled: longer than the longest long poll, 30 s (grpc.max_connection_age_grace_ms)."""
    keepalive_time_s: float = 60.0
    """The server pings a connection that has been quiet this long, to find clients that
    vanished without closing it (grpc.keepalive_time_ms; grpc's own default is 2 h)."""
    keepalive_timeout_s: float = 20.0
    """A ping not answered within this long closes the connection (grpc.keepalive_timeout_ms)."""
    min_client_ping_interval_s: float = 10.0
    """Clients may ping this often, with or without calls; more often is answered GOAWAY
    too_many_pings. grpc's default, 5 min, refuses clients that keep their connection alive
    with pings every 30 s or so, as official RocketMQ clients do
    (grpc.http2.min_ping_interval_without_data_ms, grpc.keepalive_permit_without_calls)."""

    def __post_init__(self) -> None:
        for name in ("max_idle_s", "max_age_s", "max_age_grace_s", "min_client_ping_interval_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"connections.{name} {getattr(self, name)} must be 0 or more")
        for name in ("keepalive_time_s", "keepalive_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"connections.{name} {getattr(self, name)} must be positive")

    def grpc_options(self) -> list[tuple[str, int]]:
        """These limits as grpc server options."""

        def ms(seconds: float) -> int:
            return round(seconds * 1000)

        options = [
            ("grpc.keepalive_time_ms", ms(self.keepalive_time_s)),
            ("grpc.keepalive_timeout_ms", ms(self.keepalive_timeout_s)),
            ("grpc.keepalive_permit_without_calls", 1),
            (
                "grpc.http2.min_ping_interval_without_data_ms",
                ms(self.min_client_ping_interval_s),
            ),
            ("grpc.http2.max_pings_without_data", 0),
        ]
        if self.max_idle_s:
            options.append(("grpc.max_connection_idle_ms", ms(self.max_idle_s)))
        if self.max_age_s:
            options.append(("grpc.max_connection_age_ms", ms(self.max_age_s)))
            options.append(("grpc.max_connection_age_grace_ms", ms(self.max_age_grace_s)))
        return options


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """How a server process listens and shuts down (`[server]`), and its other sections."""

    listen: str = "127.0.0.1:8081"
    """HOST:PORT to listen on; port 0 picks a free port (RocketMQ proxy gRPC port: 8081)."""
    shutdown_grace_s: float = 5.0
    """On SIGTERM/SIGINT, in-flight RPCs get this long to finish."""
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    """`popmq serve`'s event loop. uvloop (where installed: not on Windows) costs ~10% less
    server CPU per RPC than asyncio's own loop (docs/benchmarks.md); "asyncio" is the
    fallback, and what a server embedded in another program's loop runs on anyway."""
    connections: ConnectionConfig = field(default_factory=ConnectionConfig)
    """Keepalive pings and idle limits of client connections."""
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    """The embedded broker core."""
    clients: ClientRegistryConfig = field(default_factory=ClientRegistryConfig)
    """Consumer heartbeats and queue assignment (queue-exclusive consumers)."""
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    """The Prometheus endpoint (off by default)."""
    console: ConsoleConfig = field(default_factory=ConsoleConfig)
    """The web console (off by default; docs/console.md)."""
    log: LogConfig = field(default_factory=LogConfig)
    """Log level and format (text or JSON)."""
    gc: CollectorConfig = field(default_factory=CollectorConfig)
    """Python's garbage collector: the start-up heap frozen, the young threshold."""
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    """etcd, the session TTL and the proxy's name of cluster mode (`popmq broker`, `popmq
    proxy`; `popmq serve` ignores it)."""
    security: SecurityConfig = field(default_factory=SecurityConfig)
    """TLS, authentication, access control, protected mode, audit (docs/security.md)."""
    fault_tolerance: FaultToleranceConfig = field(default_factory=FaultToleranceConfig)
    """How a cluster proxy avoids slow or failing brokers for sends (`popmq proxy`)."""
    replication: ReplicationConfig = field(default_factory=ReplicationConfig)
    """A broker that is one replica of a shard (`popmq broker --shard`)."""
