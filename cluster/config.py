"""`[cluster]`: where a broker or proxy finds etcd, its session's TTL, and how a proxy
names and advertises itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from popmq.cluster.coordination import DEFAULT_SESSION_TTL_S
from popmq.cluster.etcd import MAX_LEASE_TTL_S, MIN_LEASE_TTL_S


@dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    """Cluster mode's settings (`popmq broker`, `popmq proxy`; `popmq serve` ignores them)."""

    etcd: str = ""
    """etcd client endpoints, "HOST:PORT[,HOST:PORT...]"; empty: no etcd (a standalone
    broker, not registered anywhere)."""
    name: str = "default"
    """The cluster's name: its keys live under /popmq/<name>/ in etcd."""
    session_ttl_s: int = DEFAULT_SESSION_TTL_S
    """TTL of the broker's registration lease, whole seconds: a broker whose process dies
    is gone from etcd this long after, and one that cannot renew its lease for this long
    stops taking writes (fencing)."""
    catalog_ready_timeout_s: float = 10.0
    """How long a starting broker waits for its catalog sync to take in the first listing
    of topics and groups before it prints that it listens. Health stays NOT_SERVING until
    that listing is applied, however long it takes (docs/cluster.md, Catalog sync)."""

    proxy_name: str = ""
    """`popmq proxy`: its member name in etcd (proxies/<name>); empty: its advertised
    address. Two live proxies cannot share a name."""
    advertise: str = ""
    """`popmq proxy`: the HOST:PORT clients reach this proxy at, registered in etcd and
    given to RocketMQ clients in routes; empty: the listen address (with the real port)."""

    def __post_init__(self) -> None:
        if not MIN_LEASE_TTL_S <= self.session_ttl_s <= MAX_LEASE_TTL_S:
            raise ValueError(
                f"cluster.session_ttl_s {self.session_ttl_s} must be within "
                f"{MIN_LEASE_TTL_S}..{MAX_LEASE_TTL_S} s"
            )
        if not 0 < self.catalog_ready_timeout_s <= 3600:
            raise ValueError(
                f"cluster.catalog_ready_timeout_s {self.catalog_ready_timeout_s} must be "
                "above 0 and at most 3600 s"
            )
        for endpoint in filter(None, (e.strip() for e in self.etcd.split(","))):
            host, sep, port = endpoint.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"cluster.etcd endpoint {endpoint!r} is not HOST:PORT")

    @property
    def etcd_endpoints(self) -> list[str]:
        return [e.strip() for e in self.etcd.split(",") if e.strip()]


@dataclass(frozen=True, kw_only=True)
class ReplicationConfig:
    """`[replication]`: a broker that is one replica of a shard (`popmq broker --shard`).

    docs/replication.md has the guarantees of each setting.
    """

    replica: str = ""
    """This replica's name within its shard (`--name` with `--shard`); empty: a standalone
    broker, not replicated."""
    mode: Literal["sync", "async"] = "sync"
    """sync: a send is acknowledged once the leader and every in-sync follower have fsynced
    it. async: once the leader has; followers copy it within milliseconds, and a failover
    loses the acknowledged sends the new leader had not received yet (docs/replication.md,
    "Guarantees")."""
    min_insync: int = 1
    """In-sync followers a send needs: it is acknowledged once the leader and every in-sync
    follower (at least this many) have fsynced it, and refused while fewer are in sync. 0
    lets a leader alone acknowledge sends (they may be lost with its disk)."""
    lag_timeout_s: float = 10.0
    """A follower that has not held the whole log for this long leaves the in-sync set
    (RocketMQ's haMaxTimeSlaveNotCatchup is 15 s, Kafka's replica.lag.time.max.ms 30 s); it
    rejoins once it has caught up. A follower whose stream ends leaves at once."""
    log_buffer_bytes: int = 64 * 1024 * 1024
    """How much of its recent log a leader keeps in memory for followers that fall behind
    or reconnect; one further behind gets a snapshot of the whole store instead."""

    persist_checkpoints: bool = True
    """Pops persist their checkpoints at once (pop.ck_buffer_time_s = 0), so the followers
    hold every delivery and handles issued before a failover can still be acked on the new
    leader. false keeps the checkpoint buffer: fewer writes, but a failover forgets what
    was popped in the last `pop.ck_buffer_time_s` and redelivers it."""

    def __post_init__(self) -> None:
        if self.replica and not all(c.isalnum() or c in "_.-" for c in self.replica):
            raise ValueError(
                f"replication.replica {self.replica!r} must be letters, digits, '_', '.', '-'"
            )
        if not 0 <= self.min_insync <= 16:
            raise ValueError(f"replication.min_insync {self.min_insync} must be within 0..16")
        if not 0.5 <= self.lag_timeout_s <= 3600:
            raise ValueError(
                f"replication.lag_timeout_s {self.lag_timeout_s} must be within 0.5..3600 s"
            )
        if not 1024 * 1024 <= self.log_buffer_bytes <= 16 * 1024**3:
            raise ValueError(
                f"replication.log_buffer_bytes {self.log_buffer_bytes} must be within 1 MiB..16 GiB"
            )
