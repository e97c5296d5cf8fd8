"""Reads from a shard's followers, for a proxy whose shard has no reachable leader.

Every replica is registered under `replicas/<shard>.<replica>` while it runs
(broker/replication/replica.py). When a read (a peek, a topic's offsets, a group's offsets
or lag, a message by id or key) cannot reach a shard's leader (none is registered: a
failover is under way, or no in-sync replica is left), ClusterAdmin asks one of the
shard's other replicas instead: a follower answers reads from a read-only view of its
copy, which may lag the leader by a second or so plus the replication lag (RocketMQ's
reading from a slave while the master is away). Writes never go to a follower.

The replicas are listed from etcd when a fallback is needed (not watched: the path is rare),
and a connection per replica address is kept for later fallbacks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from popmq.broker_core import UnavailableError
from popmq.cluster.remote_broker import RemoteBroker
from popmq.coordination.coordinator import Coordinator
from popmq.coordination.errors import CoordinationError
from popmq.security.signing import Signer
from popmq.security.tls import ChannelTLS

log = logging.getLogger(__name__)

_T = TypeVar("_T")

LIST_TIMEOUT_S = 2.0
"""Deadline of the etcd read that lists a shard's replicas."""


class FollowerReads:
    """Runs a read on some replica of a shard (module docstring).

    Args:
        coordinator: The cluster's coordinator (lists `replicas/`).
        call_timeout_s: Deadline of each call to a replica.
        tls: TLS of the connections to replicas (None: plaintext).
        signer: Signs the calls (brokers with authentication).
    """

    def __init__(
        self,
        coordinator: Coordinator,
        *,
        call_timeout_s: float = 10.0,
        tls: ChannelTLS | None = None,
        signer: Signer | None = None,
    ) -> None:
        self._coordinator = coordinator
        self._call_timeout_s = call_timeout_s
        self._tls = tls
        self._signer = signer
        # Replica address -> its connection (opened on first use, kept).
        self._remotes: dict[str, RemoteBroker] = {}

    async def replicas(self, shard: str) -> list[str]:
        """Addresses of the shard's registered replicas (none for a standalone broker)."""
        try:
            async with asyncio.timeout(LIST_TIMEOUT_S):
                members = await self._coordinator.members("replica")
        except (CoordinationError, TimeoutError) as exc:
            log.info("cannot list the replicas of %s: %s", shard, exc)
            return []
        found = []
        for name, member in sorted(members.items()):
            addr = member.info.get("addr")
            if name.partition(".")[0] == shard and isinstance(addr, str) and addr:
                found.append(addr)
        return found

    async def read(self, shard: str, call: Callable[[RemoteBroker], Awaitable[_T]]) -> _T:
        """`call` on the first replica of `shard` that answers.

        Raises:
            UnavailableError: the shard has no replica, or none answered.
        """
        failures: list[str] = []
        for address in await self.replicas(shard):
            remote = self._remotes.get(address)
            if remote is None:
                remote = RemoteBroker(
                    address,
                    call_timeout_s=self._call_timeout_s,
                    catalog=False,
                    name=shard,
                    tls=self._tls,
                    signer=self._signer,
                )
                await remote.start()
                self._remotes[address] = remote
            try:
                return await call(remote)
            except UnavailableError as exc:
                failures.append(f"{address}: {exc}")
        raise UnavailableError(
            f"no replica of {shard!r} could answer"
            + (f" ({'; '.join(failures)})" if failures else " (it has none registered)")
        )

    async def close(self) -> None:
        remotes, self._remotes = list(self._remotes.values()), {}
        await asyncio.gather(*(remote.close() for remote in remotes))
