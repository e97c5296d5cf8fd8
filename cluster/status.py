"""`ClusterStatus`: what a `popmq proxy` reports to `popmq cluster status` and exports as its
per-broker metrics (proxy/status.py's StatusProvider).

It reads what the proxy holds and asks what it does not, never waiting long:
- brokers: every broker that is a live member (the route cache's view of `brokers/`), that
  a route gives queues, or that the pool connects to. A live one is asked for its metrics
  snapshot with a short deadline (`probe_timeout_s`), at most `max_probes` at a time;
  its answer says it is reachable and carries its store size, free disk and counters. A
  broker a route names that is not registered is listed as not live; one whose
  registration vanished while the proxy holds it (its connection stayed up: RouteCache's
  `held`) as not live and held, with how long it may still be held, and is asked too (the
  proxy routes to it). Its topics and queues come from the routes, its fault state from the
  proxy's fault table;
- proxies: the `proxies/` members, read from etcd with the same short deadline; when etcd
  does not answer, the last list read is reported, marked stale;
- etcd: Maintenance.Status of every configured endpoint (version, db size, leader), and the
  remaining TTL of each live broker's lease (one range read and one LeaseTimeToLive each).
Everything is read concurrently, so a report takes about one deadline (two when etcd
answers slowly: the lease TTLs follow the range read) however many brokers are down. The
route cache keeps its last state while etcd is down, so the brokers are still listed from
the proxy's cached view.

Everything runs on the proxy's event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from popmq.broker_core import PopMQError, now_ms
from popmq.cluster.cluster_broker import ClusterBroker
from popmq.coordination.coordinator import decode_value, member_folder
from popmq.coordination.errors import CoordinationError, CorruptValueError
from popmq.coordination.etcd_coordinator import EtcdCoordinator
from popmq.proxy.status import BrokerStatus, EtcdEndpointHealth, ProxyStatus, StatusReport

log = logging.getLogger(__name__)

_T = TypeVar("_T")


def _epoch(registration: Mapping[str, object], create_revision: int) -> int:
    """A broker's epoch: the one its registration names (a shard leader registered again
    under its term, broker/replication/election.py), else the key's create revision."""
    named = registration.get("epoch")
    return named if isinstance(named, int) and 0 < named <= create_revision else create_revision


def _stored_epoch(raw: bytes, create_revision: int) -> int:
    """`_epoch` of a value as etcd stores it (a value that is no JSON object names none)."""
    try:
        return _epoch(decode_value("brokers/", raw), create_revision)
    except CorruptValueError:
        return create_revision


def _failed(status: BrokerStatus, error: str) -> BrokerStatus:
    """`status` of a broker that did not answer its status call with `error` (after the
    reason it is held, if it is)."""
    return dataclasses.replace(status, error=f"{status.error}; {error}" if status.error else error)


PROBE_TIMEOUT_S = 2.0
"""Deadline of each call a status report makes (a broker's metrics, an etcd read)."""
MAX_PROBES = 16
"""Calls to brokers (or etcd lease reads) one report makes at a time."""


class ClusterStatus:
    """The status of the cluster a ClusterBroker routes to (module docstring).

    Args:
        broker: The proxy's ClusterBroker (its route cache, pool, fault table and
            coordinator are read).
        proxy_name: This proxy's member name (known once it registers).
        probe_timeout_s: Deadline of each broker call and etcd read.
        max_probes: Broker calls (and lease reads) in flight at once, per report.
    """

    def __init__(
        self,
        broker: ClusterBroker,
        *,
        proxy_name: Callable[[], str],
        probe_timeout_s: float = PROBE_TIMEOUT_S,
        max_probes: int = MAX_PROBES,
    ) -> None:
        if probe_timeout_s <= 0:
            raise ValueError(f"probe_timeout_s {probe_timeout_s} must be positive")
        if max_probes < 1:
            raise ValueError(f"max_probes {max_probes} must be at least 1")
        self._broker = broker
        self._proxy_name = proxy_name
        self._timeout_s = probe_timeout_s
        self._max_probes = max_probes
        # Soft state, changed on the loop only. Broker name -> the last address it
        # registered, for brokers still listed (so a down broker shows where it was).
        self._addresses: dict[str, str] = {}
        # The last proxies read from etcd, and when (Unix ms; 0: never).
        self._proxies: tuple[ProxyStatus, ...] = ()
        self._proxies_read_ms = 0

    # -- brokers ----------------------------------------------------------------------------

    async def brokers(self) -> list[BrokerStatus]:
        """Every known broker, each live one asked for its metrics (module docstring)."""
        cluster = self._broker
        live = cluster.routes.live_brokers
        topics: dict[str, int] = {}
        queues: dict[str, int] = {}
        for route in cluster.routes.routes.values():
            for name, count in route.queue_counts.items():
                topics[name] = topics.get(name, 0) + 1
                queues[name] = queues.get(name, 0) + count
        faults = {state.broker: state for state in cluster.faults.snapshot().brokers}
        held = cluster.routes.held
        grace = cluster.routes.config.vanished_grace_s
        names = sorted({*live, *topics, *cluster.pool.names()})
        for name, entry in live.items():
            addr = entry.value.get("addr")
            if isinstance(addr, str) and addr:
                self._addresses[name] = addr
        self._addresses = {n: a for n, a in self._addresses.items() if n in names}
        limit = asyncio.Semaphore(self._max_probes)  # this report's broker calls in flight

        async def one(name: str) -> BrokerStatus:
            entry = live.get(name)
            status = BrokerStatus(
                name=name,
                address=self._addresses.get(name, ""),
                live=entry is not None,
                reachable=False,
                epoch=_epoch(entry.value, entry.created_revision) if entry is not None else 0,
                topics=topics.get(name, 0),
                queues=queues.get(name, 0),
                faults=faults.get(name),
            )
            if entry is None:
                return dataclasses.replace(
                    status,
                    error="not registered in etcd now (its lease lapsed, or it never "
                    "registered); routes still give it queues",
                )
            if name in held:  # routed to, but its registration is gone: not a live member
                left = max(0.0, grace - held[name])
                status = dataclasses.replace(
                    status,
                    live=False,
                    held_for_s=held[name],
                    hold_left_s=left,
                    error=f"registration lost {held[name]:.0f}s ago (not in etcd now): proxy "
                    f"{self._proxy_name()} holds it, routing to it for up to {left:.0f}s more "
                    "while its connection stays up, until it registers again",
                )
            async with limit:
                try:
                    remote = cluster.pool.get(name)
                    async with asyncio.timeout(self._timeout_s):
                        snapshot = await remote.metrics_snapshot()
                except TimeoutError:
                    return _failed(status, f"no answer within {self._timeout_s:g}s")
                except PopMQError as error:
                    return _failed(status, str(error))
            return dataclasses.replace(status, reachable=True, metrics=snapshot)

        return list(await asyncio.gather(*(one(name) for name in names)))

    # -- the whole report -------------------------------------------------------------------

    async def report(self) -> StatusReport:
        """Brokers, proxies and etcd, now (module docstring); answers while etcd is down."""
        brokers, etcd, proxies_read, leases = await asyncio.gather(
            self.brokers(), self._etcd(), self._read_proxies(), self._lease_ttls()
        )
        if leases:
            brokers = [
                dataclasses.replace(b, lease_ttl_s=leases[(b.name, b.epoch)])
                if (b.name, b.epoch) in leases
                else b
                for b in brokers
            ]
        return StatusReport(
            mode="cluster",
            cluster=self._broker.coordinator.cluster,
            proxy=self._proxy_name(),
            brokers=tuple(brokers),
            proxies=self._proxies,
            proxies_stale=not proxies_read,
            proxies_read_ms=self._proxies_read_ms,
            etcd=etcd,
        )

    async def _etcd(self) -> tuple[EtcdEndpointHealth, ...] | None:
        """Every configured endpoint's Maintenance.Status (None: not coordinated by etcd)."""
        coordinator = self._broker.coordinator
        if not isinstance(coordinator, EtcdCoordinator):
            return None
        client = coordinator.client

        async def one(endpoint: str) -> EtcdEndpointHealth:
            try:
                found = await client.status(endpoint, timeout_s=self._timeout_s)
            except CoordinationError as error:
                return EtcdEndpointHealth(endpoint=endpoint, reachable=False, error=str(error))
            return EtcdEndpointHealth(
                endpoint=endpoint,
                reachable=True,
                version=found.version,
                db_size_bytes=found.db_size,
                leader=found.leader,
                member_id=found.member_id,
                revision=found.revision,
                raft_term=found.raft_term,
                errors=found.errors,
            )

        return tuple(await asyncio.gather(*(one(e) for e in client.endpoints)))

    async def _read_proxies(self) -> bool:
        """Read the proxy members into `_proxies`; False (the last list kept) when the
        coordinator did not answer in time."""
        read = await self._bounded(self._broker.coordinator.members("proxy"), "proxies")
        if read is None:
            return False
        me = self._proxy_name()
        self._proxies = tuple(
            ProxyStatus(
                name=name,
                address=str(member.info.get("addr", "")),
                epoch=member.epoch,
                this_proxy=name == me,
            )
            for name, member in sorted(read.items())
        )
        self._proxies_read_ms = now_ms()
        return True

    async def _lease_ttls(self) -> Mapping[tuple[str, int], float]:
        """(broker, epoch) -> seconds its lease has left, for the brokers etcd holds a
        leased member key of; empty without etcd or when it does not answer."""
        coordinator = self._broker.coordinator
        if not isinstance(coordinator, EtcdCoordinator):
            return {}
        client = coordinator.client
        folder = coordinator.root + member_folder("broker")
        found = await self._bounded(
            client.get(folder, prefix=True, timeout_s=self._timeout_s), "broker leases"
        )
        if found is None:
            return {}
        limit = asyncio.Semaphore(self._max_probes)  # this report's lease reads in flight

        async def ttl(lease: int) -> int | None:
            async with limit:
                return await self._bounded(
                    client.lease_time_to_live(lease, timeout_s=self._timeout_s), "a lease TTL"
                )

        keys = [
            (
                (kv.key.decode()[len(folder) :], _stored_epoch(kv.value, kv.create_revision)),
                kv.lease,
            )
            for kv in found.kvs
            if kv.lease
        ]
        ttls = await asyncio.gather(*(ttl(lease) for _, lease in keys))
        return {
            key: float(left)
            for (key, _), left in zip(keys, ttls, strict=True)
            if left is not None and left >= 0  # -1: the lease ended since the read
        }

    async def _bounded(self, call: Awaitable[_T], what: str) -> _T | None:
        """`call`'s answer within the deadline, or None (logged) when the coordinator did
        not give one."""
        try:
            async with asyncio.timeout(self._timeout_s):
                return await call
        except (TimeoutError, CoordinationError) as error:
            log.info("cluster status: %s not read from the coordinator: %s", what, error)
            return None
