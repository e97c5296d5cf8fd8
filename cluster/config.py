"""`[cluster]`: where a broker or proxy finds etcd, its session's TTL, and how a proxy
names and advertises itself."""

from __future__ import annotations

from dataclasses import dataclass

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
