"""A cluster's status as `Admin.cluster_status()` returns it: brokers, replicated shards,
proxies and etcd endpoints; with their proto conversions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from popmq._gen.popmq.v1 import admin_pb2
from popmq.sdk.types import datetime_from_timestamp, seconds_from_duration

__all__ = [
    "BrokerStatus",
    "ClusterStatus",
    "EtcdEndpointStatus",
    "ProxyStatus",
    "ReplicaStatus",
    "ShardReplication",
]


def format_age(seconds: float) -> str:
    """A short human age: 0s, 42s, 3m07s, 2h05m (the CLI's tables show ages so too)."""
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.0f}s" if seconds < 10 else f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _unanswered(broker: BrokerStatus) -> str:
    """What the problem of a held broker adds when it did not answer the status call."""
    return "" if broker.reachable else ", and it does not answer the proxy's status call"


def _optional(message: admin_pb2.BrokerStatus, name: str) -> int | None:
    return getattr(message, name) if message.HasField(name) else None


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """One follower of a replicated shard, as its leader sees it.

    Attributes:
        name: Its replica name.
        in_sync: In the in-sync set: sends wait for it, and it may be elected.
        lag_batches: Batches of the leader's log it lacks.
        lag_bytes: Bytes of those batches.
        lag_s: Age of the oldest batch it lacks (0 when only batches in flight).
    """

    name: str
    in_sync: bool
    lag_batches: int
    lag_bytes: int
    lag_s: float


@dataclass(frozen=True, slots=True)
class ShardReplication:
    """A replicated shard's leader (``popmq broker --shard``; docs/replication.md).

    Attributes:
        leader: The leader replica's name.
        epoch: Its epoch (fencing token).
        lsn: The last batch of its log.
        mode: ``"sync"`` or ``"async"``.
        min_insync: In-sync followers a send needs.
        followers: Its followers.
        terms: Times the leader's process became the shard's leader.
    """

    leader: str
    epoch: int
    lsn: int
    mode: str
    min_insync: int
    followers: tuple[ReplicaStatus, ...]
    terms: int

    @classmethod
    def from_proto(cls, message: admin_pb2.ShardReplication) -> ShardReplication:
        return cls(
            leader=message.leader,
            epoch=message.epoch,
            lsn=message.lsn,
            mode=message.mode,
            min_insync=message.min_insync,
            followers=tuple(
                ReplicaStatus(
                    name=f.name,
                    in_sync=f.in_sync,
                    lag_batches=f.lag_batches,
                    lag_bytes=f.lag_bytes,
                    lag_s=seconds_from_duration(f.lag),
                )
                for f in message.followers
            ),
            terms=message.terms,
        )


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    """One broker as the answering proxy sees it (``Admin.cluster_status``).

    Values measured by the broker are None when it did not answer just now.

    Attributes:
        name: Broker name.
        address: Its BrokerService ``HOST:PORT``; for a broker not registered now, the last
            one the proxy saw, or ``""``.
        live: Registered in etcd now (as the proxy's watch last saw it). A broker that
            routes name but that is not registered is listed with ``live`` false.
        reachable: Answered the proxy's status call just now, within a short deadline.
        error: Why it is not live or not reachable; ``""`` when it is both.
        epoch: Its registration's epoch; 0 when it is not registered, and the vanished
            registration's epoch while the proxy holds it (``held``, ``live`` false).
        lease_ttl_s: Seconds its registration lease has left; None when etcd did not say.
        data_dir: Its store's directory (local mode only).
        store_bytes: Bytes of its store's files.
        disk_free_bytes: Bytes still free for the store on its data dir's filesystem.
        topics: Topics whose route gives it queues.
        queues: Queues it holds over those topics.
        messages_sent: Messages stored by sends since it started.
        messages_popped: Deliveries by pops since it started.
        messages_acked: Deliveries acked since it started.
        long_polls_held: Pops held waiting for a message now.
        isolated_for_s: Seconds until the proxy's sends use it again (0: they do).
        send_failures: Failed sends the proxy recorded on it.
        isolations: Times the proxy isolated it.
        send_latency_s: Latency of the proxy's last send to it.
        replication: For a replicated shard, its leader's replication state; None for a
            standalone broker or when it did not answer.
        quarantined_for_s: Seconds the proxy has held it quarantined: a send to it went
            unanswered while its connection was down, and no new send goes there until the
            connection is up again (``isolated_for_s`` then says at least 1 s, its end being
            unknown); None when the proxy reaches it.
        held_for_s: Seconds since its registration vanished while the proxy's connection to
            it stayed up: the proxy holds it, routing to it until it registers again
            (``live`` is false; an etcd resumed after a pause longer than the session TTL
            revokes every lease at once); None when it is registered, or not held.
        hold_left_s: The longest the proxy goes on holding it (its ``[cluster]
            vanished_grace_s`` less ``held_for_s``; sooner if its connection drops); None
            when not held.
    """

    name: str
    address: str
    live: bool
    reachable: bool
    error: str
    epoch: int
    lease_ttl_s: float | None
    data_dir: str
    store_bytes: int | None
    disk_free_bytes: int | None
    topics: int
    queues: int
    messages_sent: int | None
    messages_popped: int | None
    messages_acked: int | None
    long_polls_held: int | None
    isolated_for_s: float
    send_failures: int
    isolations: int
    send_latency_s: float
    replication: ShardReplication | None = None
    quarantined_for_s: float | None = None
    held_for_s: float | None = None
    hold_left_s: float | None = None

    @property
    def quarantined(self) -> bool:
        """Whether the proxy cannot reach it now (its sends go to other brokers)."""
        return self.quarantined_for_s is not None

    @property
    def held(self) -> bool:
        """Whether its registration is gone but the proxy still routes to it."""
        return self.held_for_s is not None

    @classmethod
    def from_proto(cls, message: admin_pb2.BrokerStatus) -> BrokerStatus:
        """Build a broker's status from its GetClusterStatus entry."""
        return cls(
            name=message.name,
            address=message.address,
            live=message.live,
            reachable=message.reachable,
            error=message.error,
            epoch=message.epoch,
            lease_ttl_s=(
                seconds_from_duration(message.lease_ttl) if message.HasField("lease_ttl") else None
            ),
            data_dir=message.data_dir,
            store_bytes=_optional(message, "store_bytes"),
            disk_free_bytes=_optional(message, "disk_free_bytes"),
            topics=message.topics,
            queues=message.queues,
            messages_sent=_optional(message, "messages_sent"),
            messages_popped=_optional(message, "messages_popped"),
            messages_acked=_optional(message, "messages_acked"),
            long_polls_held=_optional(message, "long_polls_held"),
            isolated_for_s=seconds_from_duration(message.isolated_for),
            send_failures=message.send_failures,
            isolations=message.isolations,
            send_latency_s=seconds_from_duration(message.send_latency),
            replication=(
                ShardReplication.from_proto(message.replication)
                if message.HasField("replication")
                else None
            ),
            quarantined_for_s=(
                seconds_from_duration(message.quarantined_for)
                if message.HasField("quarantined_for")
                else None
            ),
            held_for_s=(
                seconds_from_duration(message.held_for) if message.HasField("held_for") else None
            ),
            hold_left_s=(
                seconds_from_duration(message.hold_left) if message.HasField("hold_left") else None
            ),
        )


@dataclass(frozen=True, slots=True)
class ProxyStatus:
    """One registered proxy.

    Attributes:
        name: Proxy name.
        address: The ``HOST:PORT`` clients reach it at.
        epoch: Its registration's epoch.
        this_proxy: True for the proxy that answered.
    """

    name: str
    address: str
    epoch: int
    this_proxy: bool


@dataclass(frozen=True, slots=True)
class EtcdEndpointStatus:
    """What one etcd endpoint said about itself, or why it said nothing.

    Attributes:
        endpoint: ``HOST:PORT``.
        reachable: Answered within the deadline.
        error: Why it is not reachable; ``""`` when it is.
        version: etcd version.
        db_size_bytes: Bytes of its backend database.
        leader: Member id of the leader it knows (0: none).
        member_id: Its own member id.
        revision: Its current revision.
        raft_term: Raft term.
        errors: Alarms and errors it reports.
    """

    endpoint: str
    reachable: bool
    error: str
    version: str
    db_size_bytes: int
    leader: int
    member_id: int
    revision: int
    raft_term: int
    errors: list[str]

    @property
    def is_leader(self) -> bool:
        """True when this endpoint's member is the leader."""
        return self.reachable and self.leader != 0 and self.leader == self.member_id


_CLUSTER_MODES = {admin_pb2.CLUSTER_MODE_LOCAL: "local", admin_pb2.CLUSTER_MODE_CLUSTER: "cluster"}


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """The cluster as the answering server sees it (``Admin.cluster_status``).

    Attributes:
        mode: ``"local"`` (``popmq serve``: one embedded broker, no proxies, no etcd) or
            ``"cluster"`` (``popmq proxy``).
        cluster: The cluster's name; ``""`` in local mode.
        proxy: The answering proxy's name (local mode: the server's address).
        brokers: Brokers by name: the live ones and those routes name.
        proxies: Registered proxies by name.
        proxies_stale: etcd did not answer: ``proxies`` is the last list read.
        proxies_read_time: When ``proxies`` was read from etcd; None when it never was.
        etcd: One entry per configured etcd endpoint; None in local mode.
    """

    mode: str
    cluster: str
    proxy: str
    brokers: list[BrokerStatus]
    proxies: list[ProxyStatus]
    proxies_stale: bool
    proxies_read_time: datetime | None
    etcd: list[EtcdEndpointStatus] | None

    @property
    def etcd_reachable(self) -> bool | None:
        """True when an etcd endpoint answered; None in local mode."""
        return None if self.etcd is None else any(e.reachable for e in self.etcd)

    @property
    def problems(self) -> list[str]:
        """What is not healthy, one line each; empty when every broker is registered and
        answering and every etcd endpoint answered (``popmq cluster status`` exits non-zero
        when there is any, as ``etcdctl endpoint health`` does)."""
        found = []
        for broker in self.brokers:
            if broker.held_for_s is not None:
                found.append(
                    f"broker {broker.name}'s registration was lost"
                    f" {format_age(broker.held_for_s)} ago: proxy {self.proxy} holds it for up"
                    f" to {format_age(broker.hold_left_s or 0.0)} more while its connection"
                    f" stays up, until it registers again{_unanswered(broker)}"
                )
            elif not broker.live:
                found.append(f"broker {broker.name} is down (not registered): {broker.error}")
            elif not broker.reachable:
                found.append(f"broker {broker.name} is unreachable: {broker.error}")
            if broker.quarantined_for_s is not None:
                found.append(
                    f"broker {broker.name} is quarantined by proxy {self.proxy} for"
                    f" {format_age(broker.quarantined_for_s)}: a send to it went unanswered and its"
                    " connection is down, so sends go to other brokers until it is up again"
                )
        for endpoint in self.etcd or []:
            if not endpoint.reachable:
                found.append(f"etcd endpoint {endpoint.endpoint} is unreachable: {endpoint.error}")
        if self.proxies_stale:
            found.append("the proxy list is stale: etcd did not answer")
        return found

    @classmethod
    def from_proto(cls, response: admin_pb2.GetClusterStatusResponse) -> ClusterStatus:
        """Build the status from a GetClusterStatus response."""
        return cls(
            mode=_CLUSTER_MODES.get(response.mode, "unspecified"),
            cluster=response.cluster,
            proxy=response.proxy,
            brokers=[BrokerStatus.from_proto(b) for b in response.brokers],
            proxies=[
                ProxyStatus(name=p.name, address=p.address, epoch=p.epoch, this_proxy=p.this_proxy)
                for p in response.proxies
            ],
            proxies_stale=response.proxies_stale,
            proxies_read_time=(
                datetime_from_timestamp(response.proxies_read_time)
                if response.HasField("proxies_read_time")
                else None
            ),
            etcd=(
                [
                    EtcdEndpointStatus(
                        endpoint=e.endpoint,
                        reachable=e.reachable,
                        error=e.error,
                        version=e.version,
                        db_size_bytes=e.db_size_bytes,
                        leader=e.leader,
                        member_id=e.member_id,
                        revision=e.revision,
                        raft_term=e.raft_term,
                        errors=list(e.errors),
                    )
                    for e in response.etcd.endpoints
                ]
                if response.HasField("etcd")
                else None
            ),
        )
