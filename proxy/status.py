"""What `popmq cluster status` (AdminService/GetClusterStatus) reports, and who answers it.

The AdminServicer asks a `StatusProvider` and converts its `StatusReport` to the wire
(proxy/convert.py). Two providers exist:
- `LocalStatus` here, for `popmq serve`: the one embedded broker, no proxies, no etcd;
- `popmq.cluster.status.ClusterStatus`, for `popmq proxy`: the brokers, proxies and etcd of
  a cluster as the proxy sees them.
The proxy's metrics also read `StatusProvider.brokers()` in cluster mode, for the series
labelled by broker (proxy/broker_metrics.py). Everything runs on the server's event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from popmq.broker_core import BrokerAPI, MetricsSnapshot

Mode = Literal["local", "cluster"]


@dataclass(frozen=True, slots=True)
class BrokerFaultState:
    """One broker as the fault table sees it (for metrics and `popmq cluster status`)."""

    broker: str
    latency_s: float
    """The latency of the last send recorded (the failure charge for a failure)."""
    isolated_for_s: float
    """Seconds until it is picked again; 0 when it is available."""
    isolations: int
    """Times it went from available to isolated since it was first seen."""
    failures: int
    """Failed sends recorded on it since it was first seen."""
    unknown_outcomes: int = 0
    """Tries of sends on it whose outcome this proxy did not learn (a timeout, a connection
    dropped mid-call), each tried again on it rather than elsewhere, since it was first seen."""
    quarantined_for_s: float | None = None
    """Seconds it has been quarantined (its connection down: no send goes there until a
    probe sees it up, cluster/quarantine.py); None when it is not."""
    quarantine_waiting: int = 0
    """Clients' repeats of sends that may be stored on it waiting now for its quarantine to
    end (each up to in_doubt_retry_s)."""
    quarantine_waits: int = 0
    """Such repeats that waited, since it was first seen."""
    quarantine_wait_refusals: int = 0
    """Such repeats failed at once since it was first seen, because
    fault_tolerance.quarantine_max_waiting repeats were waiting already."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerStatus:
    """One broker as the answering server sees it."""

    name: str
    address: str
    """BrokerService HOST:PORT; for a broker not registered now, the last one seen or ""."""
    live: bool
    """Registered now, as the proxy's watch of etcd last saw it (local mode: always)."""
    reachable: bool
    """Answered a status call just now, within the provider's deadline."""
    error: str = ""
    """Why it is not live or not reachable."""
    epoch: int = 0
    """Its registration's epoch (the one it names, else the member key's create revision);
    0 when not registered, and the vanished registration's while held (`held_for_s`)."""
    lease_ttl_s: float | None = None
    """Seconds its registration lease has left; None when etcd did not say."""
    data_dir: str = ""
    """Its store's directory (local mode only)."""
    topics: int = 0
    """Topics whose route gives it queues (local mode: its topics)."""
    queues: int = 0
    """Queues it holds over those topics."""
    metrics: MetricsSnapshot | None = None
    """What it answered the status call with; None when not reachable."""
    faults: BrokerFaultState | None = None
    """The proxy's send fault table entry for it; None when it has none."""
    held_for_s: float | None = None
    """Seconds since its registration vanished while the proxy's connection to it stayed
    up, the proxy routing to it meanwhile until it registers again (`live` is False); None
    when it is registered, or not held."""
    hold_left_s: float | None = None
    """Seconds at most the proxy goes on holding it (`[cluster] vanished_grace_s` less
    `held_for_s`; sooner if its connection drops); None when not held."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProxyStatus:
    """One registered proxy."""

    name: str
    address: str
    epoch: int
    this_proxy: bool
    """The proxy that answers."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EtcdEndpointHealth:
    """What one etcd endpoint said about itself, or why it said nothing."""

    endpoint: str
    reachable: bool
    error: str = ""
    version: str = ""
    db_size_bytes: int = 0
    leader: int = 0
    member_id: int = 0
    revision: int = 0
    raft_term: int = 0
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusReport:
    """The whole answer of GetClusterStatus."""

    mode: Mode
    cluster: str
    """The cluster's name; "" in local mode."""
    proxy: str
    """The answering proxy's name (local mode: the server's address)."""
    brokers: tuple[BrokerStatus, ...]
    proxies: tuple[ProxyStatus, ...] = ()
    proxies_stale: bool = False
    """etcd did not answer: `proxies` is the last list read, at `proxies_read_ms`."""
    proxies_read_ms: int = 0
    """When `proxies` was read from etcd (Unix ms); 0 when it never was."""
    etcd: tuple[EtcdEndpointHealth, ...] | None = None
    """One entry per configured endpoint; None in local mode."""


def message_totals(snapshot: MetricsSnapshot) -> tuple[int, int, int]:
    """Messages sent, popped and acked since the broker started, over all topics and groups
    (one number each, so a status row or a per-broker series stays one per broker)."""
    return (
        sum(snapshot.sent.values()),
        sum(snapshot.popped.values()),
        sum(snapshot.acked.values()),
    )


class StatusProvider(Protocol):
    """Answers GetClusterStatus, and the proxy's per-broker metrics in cluster mode."""

    async def report(self) -> StatusReport:
        """Brokers, proxies and etcd, now. Answers even when etcd or brokers do not."""
        ...

    async def brokers(self) -> list[BrokerStatus]:
        """The brokers only, each asked for its metrics with a short deadline."""
        ...


class LocalStatus:
    """`popmq serve`'s status: its one embedded broker.

    Args:
        broker: The embedded broker.
        address: The server's address (known once it listens).
    """

    def __init__(self, broker: BrokerAPI, address: Callable[[], str]) -> None:
        self._broker = broker
        self._address = address

    async def brokers(self) -> list[BrokerStatus]:
        info = self._broker.server_info()
        snapshot = await self._broker.metrics_snapshot()
        topics = await self._broker.list_topics()
        return [
            BrokerStatus(
                name=info.broker_name,
                address=self._address(),
                live=True,
                reachable=True,
                data_dir=info.data_dir,
                topics=len(topics),
                queues=sum(t.queues for t in topics),
                metrics=snapshot,
            )
        ]

    async def report(self) -> StatusReport:
        return StatusReport(
            mode="local", cluster="", proxy=self._address(), brokers=tuple(await self.brokers())
        )
