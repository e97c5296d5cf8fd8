"""Cluster mode's settings sections: `[cluster]` (where a broker or proxy finds etcd, its
session's TTL, how a proxy names and advertises itself), `[replication]` (a broker that is one
replica of a shard) and `[fault_tolerance]` (how a proxy's sends avoid slow or failing
brokers; the mechanism is cluster/fault_tolerance.py). `popmq serve` reads and ignores them."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Literal

from popmq.coordination.coordinator import DEFAULT_SESSION_TTL_S
from popmq.coordination.etcd import MAX_LEASE_TTL_S, MIN_LEASE_TTL_S
from popmq.coordination.routes import MAX_VANISHED_GRACE_S, VANISHED_GRACE_S

HOP_KEEPALIVE_S = 1.0
"""The default of `[cluster] hop_keepalive_s`: how often a proxy pings a broker's connection
(with or without calls), and how long it waits for the answer before it counts the
connection lost: a cut that silences it (a one-way partition, a paused host) fails the calls
in flight within about twice this, not at their deadline, and the proxy sends elsewhere
meanwhile (cluster/quarantine.py)."""
MIN_HOP_KEEPALIVE_S = 0.5
"""The shortest `hop_keepalive_s`. A broker lets its clients ping at twice this rate
(broker/peer_pings.py), since grpc closes a connection pinged more often than its server
allows: a proxy pinging more often than the brokers allow would lose every connection."""
MAX_HOP_KEEPALIVE_S = 4.0
"""The longest `hop_keepalive_s`. A silent cut drops the connection up to twice this after
it (a ping's wait, then its answer's): that must come before a broker call's 10 s deadline
ends the sends in flight, since a send that ends on its deadline while the connection still
counts as up quarantines nothing (cluster/quarantine.py). 4 s leaves 2 s for the call to
have started before the cut; from about 5 s, the quarantine would never begin."""


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
    that listing is applied, however long it takes (docs/coordination.md, Catalog sync)."""
    crash_tail_wait_s: float = 10.0
    """How long a broker restarting after an unclean end (or a shard's replica taking over)
    keeps asking the other live brokers that do not answer whether they hold its last
    messages (`messages.crash_tail_s`) before it serves anyway, logging which may be stored
    twice (docs/cluster.md, "A retried send is stored once"). Within 0..600 s; 0: ask
    once."""

    proxy_name: str = ""
    """`popmq proxy`: its member name in etcd (proxies/<name>); empty: its advertised
    address. Two live proxies cannot share a name."""
    advertise: str = ""
    """`popmq proxy`: the HOST:PORT clients reach this proxy at, registered in etcd and
    given to RocketMQ clients in routes. `popmq broker`: the HOST:PORT proxies (and a
    shard's other replicas) reach it at, registered in etcd (a broker behind NAT, or
    listening on 0.0.0.0). Empty: the listen address (with the real port)."""
    hop_keepalive_s: float = HOP_KEEPALIVE_S
    """`popmq proxy`: how often it pings each broker's connection, with or without calls,
    and how long it waits for the answer before it drops the connection: a
    silent cut (a one-way partition, a paused host) fails the calls in flight about twice
    this after it and quarantines the broker (docs/cluster.md). Shorter finds cuts sooner;
    longer spares a slow network false alarms. Within 0.5..4 s: brokers allow pings every
    0.25 s (broker/peer_pings.py), twice the fastest a proxy may ping at; above 4 s a cut
    would not drop the connection before the 10 s deadline of the sends in flight, and
    nothing would be quarantined (MAX_HOP_KEEPALIVE_S)."""
    vanished_grace_s: float = VANISHED_GRACE_S
    """`popmq proxy`: how long it keeps routing to a broker whose etcd registration
    vanished while its connection stayed up, waiting for it to register again: an etcd that
    resumes after a pause longer than the session TTL revokes every lease at once although
    every broker is serving (docs/cluster.md); `popmq cluster status` shows such a broker as
    HELD. 0: drop it at once; at most 60 s (MAX_VANISHED_GRACE_S)."""

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
        if not 0 <= self.crash_tail_wait_s <= 600:
            raise ValueError(
                f"cluster.crash_tail_wait_s {self.crash_tail_wait_s} must be within 0..600 s"
            )
        if not (
            math.isfinite(self.hop_keepalive_s)
            and MIN_HOP_KEEPALIVE_S <= self.hop_keepalive_s <= MAX_HOP_KEEPALIVE_S
        ):
            raise ValueError(
                f"cluster.hop_keepalive_s {self.hop_keepalive_s} must be within"
                f" {MIN_HOP_KEEPALIVE_S:g}..{MAX_HOP_KEEPALIVE_S:g} s: a proxy may ping every"
                f" {MIN_HOP_KEEPALIVE_S:g} s at the fastest (brokers allow one every"
                f" {MIN_HOP_KEEPALIVE_S / 2:g} s), and every {MAX_HOP_KEEPALIVE_S:g} s at the"
                " slowest (a cut must drop the connection before the 10 s deadline of the"
                " sends in flight, or no broker is ever quarantined)"
            )
        if not (
            math.isfinite(self.vanished_grace_s)
            and 0 <= self.vanished_grace_s <= MAX_VANISHED_GRACE_S
        ):
            raise ValueError(
                f"cluster.vanished_grace_s {self.vanished_grace_s} must be within"
                f" 0..{MAX_VANISHED_GRACE_S:g} s: 0 drops a broker whose registration vanished"
                " at once; a held broker that was really replaced answers NOT_LEADER until the"
                " grace ends, and members register again within seconds of etcd's return"
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


@dataclass(frozen=True, kw_only=True)
class FaultToleranceConfig:
    """How sends avoid slow or failing brokers, and how often a send is tried.

    Defaults are RocketMQ 5's MQFaultStrategy tables (the proxy's and the 5.x client's), not
    the 4.x client's `{50, 100, 550, 1000, 2000, 3000, 15000} ms -> {0, 0, 30, 60, 120, 180,
    600} s`: a proxy retries for its clients on another broker at once, so a broker that
    failed once needs to be avoided for seconds, not for 30 s to 10 min; and a broker that
    recovered gets its share of the load back quickly.
    """

    enabled: bool = True
    """Record latencies and avoid isolated brokers. When off, sends rotate over every queue
    and a failed send is still retried on another broker (RocketMQ with
    sendLatencyFaultEnable off avoids the last failed broker the same way)."""
    latency_thresholds_s: tuple[float, ...] = (0.05, 0.1, 0.55, 1.8, 3.0, 5.0, 15.0)
    """Latency steps, ascending (RocketMQ 5's latencyMax, 50 ms .. 15 s). A send that took at
    least step i (and less than step i + 1) isolates its broker for isolation_s[i]."""
    isolation_s: tuple[float, ...] = (0.0, 0.0, 2.0, 5.0, 6.0, 10.0, 30.0)
    """How long a broker is avoided after a send of each latency step (RocketMQ 5's
    notAvailableDuration, 0 .. 30 s). Below the first step: 0 (not isolated)."""
    failure_latency_s: float = 10.0
    """A failed send counts as a send that took this long (RocketMQ 5: 10,000 ms). With the
    default table that isolates the broker for 10 s (10 s is past the 5 s step, not yet the
    15 s one). A failure that really took longer (a timeout after 20 s) is charged its real
    time: it never isolates for less than a success as slow would."""
    max_attempts: int = 3
    """Tries of one send, each on a different broker (RocketMQ: retryTimesWhenSendFailed 2,
    + 1). 1 = no retry inside the proxy. A FIFO send is tried once (its queue is fixed)."""
    in_doubt_retry_s: float = 5.0
    """How long a send whose outcome is unknown (its broker timed out, or dropped the
    connection after the request went out) is tried again on that same broker, whose dedup
    window answers a copy stored after all, before the client is told the outcome is
    unknown (a retriable UNAVAILABLE). It never goes to another broker, where it could be
    stored a second time, unless its broker is known down (its address refuses connections).
    0: told at once."""
    in_doubt_keep_s: float = 300.0
    """How long a proxy remembers the broker of a send that was slow (over 1 s) or whose
    outcome is unknown, so that the client's repeat of it goes to the same broker: the
    brokers' dedup window (messages.dedup_window_s, 300 s)."""
    in_doubt_max_sends: int = 100_000
    """Messages whose broker a proxy remembers at most (the oldest are forgotten first)."""
    quarantine_max_waiting: int = 1000
    """Sends at most that wait at once for a quarantined broker to be reachable again (a
    client's repeat of a send that may be stored there waits up to in_doubt_retry_s rather
    than fail at once); beyond, a repeat fails at once as of unknown outcome. Each waiting
    send holds its request's messages, up to 5 MiB (a request's limit): 1,000 hold about
    5 GiB at worst (a cut under a load of large batches). 0: never wait."""
    max_tracked_topics: int = 20_000
    """Topics whose rotation position is remembered; the least recently sent-to beyond this
    are forgotten and restart their rotation (RocketMQ proxy's route cache: 20,000 topics)."""

    def __post_init__(self) -> None:
        steps, isolation = self.latency_thresholds_s, self.isolation_s
        if not steps:
            raise ValueError("latency_thresholds_s must have at least one step")
        for name, values in (("latency_thresholds_s", steps), ("isolation_s", isolation)):
            bad = [v for v in values if not (math.isfinite(v) and v >= 0)]
            if bad:
                raise ValueError(
                    f"{name} {values} has {bad[0]}: every entry must be a finite number >= 0"
                )
        if len(isolation) != len(steps):
            raise ValueError(
                f"isolation_s has {len(isolation)} entries for {len(steps)} latency_thresholds_s:"
                " give one isolation per latency step"
            )
        if any(a >= b for a, b in itertools.pairwise(steps)):
            raise ValueError(f"latency_thresholds_s {steps} must be strictly ascending")
        if any(a > b for a, b in itertools.pairwise(isolation)):
            raise ValueError(
                f"isolation_s {isolation} must not decrease: a slower send must not isolate"
                " its broker for less than a faster one"
            )
        if not (math.isfinite(self.failure_latency_s) and self.failure_latency_s > 0):
            raise ValueError(
                f"failure_latency_s {self.failure_latency_s} must be a finite number > 0"
                " (to stop isolating brokers, set enabled = false)"
            )
        if not (math.isfinite(self.in_doubt_retry_s) and self.in_doubt_retry_s >= 0):
            raise ValueError(
                f"in_doubt_retry_s {self.in_doubt_retry_s} must be a finite number >= 0"
            )
        if not (math.isfinite(self.in_doubt_keep_s) and self.in_doubt_keep_s > 0):
            raise ValueError(f"in_doubt_keep_s {self.in_doubt_keep_s} must be a finite number > 0")
        if self.in_doubt_max_sends < 1:
            raise ValueError(f"in_doubt_max_sends {self.in_doubt_max_sends} must be at least 1")
        if self.quarantine_max_waiting < 0:
            raise ValueError(
                f"quarantine_max_waiting {self.quarantine_max_waiting} must be at least 0"
                " (0: a repeat for a quarantined broker fails at once)"
            )
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts {self.max_attempts} must be at least 1 (1 = no retry)")
        if self.max_tracked_topics < 1:
            raise ValueError(f"max_tracked_topics {self.max_tracked_topics} must be at least 1")

    def isolation_for(self, latency_s: float) -> float:
        """Seconds a broker is avoided after a send that took `latency_s`: the entry of the
        largest step not above it (0 below the first step), as RocketMQ computes it."""
        for step, isolation in zip(
            reversed(self.latency_thresholds_s), reversed(self.isolation_s), strict=True
        ):
            if latency_s >= step:
                return isolation
        return 0.0
