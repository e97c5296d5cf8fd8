"""A real cluster of replicated shards: etcd, `popmq broker --shard` replicas, proxies.

`ReplicaCluster(root, shards=2, replicas=2, proxies=2).start()` is a `Cluster`
(tests/support/cluster.py) whose brokers are replicas: shard `s1` has processes `s1-r1`,
`s1-r2`, ... each started as `popmq broker --shard s1 --name r1`. Proxies route to each
shard's leader (its registration `brokers/<shard>`); `leader(shard)` reads which replica
that is from etcd, and `wait_leader` waits for one (another than a given one, after a
kill). A replica can be restarted at once after a kill -9: it starts as a follower.
`in_sync_shard(root, session_ttl_s=...)` is the common case: one shard of two replicas
behind one proxy, its follower in sync; `running_in_sync(cluster)` starts and stops any
other such cluster the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Literal, TypeVar

import grpc

from popmq import Credentials
from popmq._gen.etcd.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from popmq.coordination import EtcdCoordinator, RouteAdmin
from tests.support.cluster import PROBE_TOPIC, Cluster, ClusterProcess

__all__ = ["ReplicaCluster", "in_sync_shard", "running_in_sync"]


class ReplicaCluster(Cluster):
    """etcd + `shards` x `replicas` broker replicas + proxies (module docstring).

    Args:
        root: A directory of this cluster alone.
        shards: Number of shards, s1..sN.
        replicas: Replicas per shard, r1..rM (process names `s1-r1`...).
        proxies: Number of proxies, p1..pK.
        session_ttl_s: The leader lease's TTL (and every member's).
        flush: The replicas' `--flush`.
        broker_args: More arguments of every replica (e.g. `--set replication.x=...`).
        proxy_args: More arguments of every proxy.
        env: More environment of every process.
        credentials: What the cluster's own calls to the proxies sign with.
    """

    def __init__(
        self,
        root: Path,
        *,
        shards: int = 2,
        replicas: int = 2,
        proxies: int = 2,
        session_ttl_s: int = 3,
        flush: Literal["sync", "async"] = "sync",
        broker_args: Sequence[str] = (),
        proxy_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        super().__init__(
            root,
            brokers=0,
            proxies=0,
            session_ttl_s=session_ttl_s,
            flush=flush,
            env=env,
            credentials=credentials,
        )
        self.shards = [f"s{n}" for n in range(1, shards + 1)]
        self.shard_of: dict[str, tuple[str, str]] = {}
        for shard in self.shards:
            for m in range(1, replicas + 1):
                name = f"{shard}-r{m}"
                self.shard_of[name] = (shard, f"r{m}")
                self._add(name, "broker", broker_args)
        for n in range(1, proxies + 1):
            self._add(f"p{n}", "proxy", proxy_args)

    def replicas(self, shard: str) -> list[str]:
        return [name for name, (s, _) in self.shard_of.items() if s == shard]

    def _command(self, process: ClusterProcess) -> list[str]:
        if process.kind != "broker":
            return super()._command(process)
        shard, replica = self.shard_of[process.name]
        return [
            sys.executable, "-m", "popmq.cli", "broker", "--shard", shard, "--name", replica,
            "--listen", process.address, "--data-dir", str(process.data_dir),
            "--flush", self.flush, "--etcd", self.etcd.endpoint,
            "--set", f"cluster.session_ttl_s={self.session_ttl_s}", *process.extra,
        ]  # fmt: skip

    def start(self) -> ReplicaCluster:
        try:
            self.etcd.start()
            self._start_all(self.brokers)
            for shard in self.shards:
                self.wait_leader(shard)
            self._start_all(self.proxies)
            asyncio.run(self._make_probe())
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, name: str) -> None:
        """Wait until the process listens (a replica serves only once it leads)."""
        process = self._process(name)
        assert process.process is not None, f"{name} was not started"
        self._wait_listening(process, process.log_offsets[-1])

    def restart(self, name: str) -> None:
        """Start a replica or proxy again at once (a replica starts as a follower)."""
        process = self._process(name)
        if process.running:
            self.terminate(name)
        self._spawn(process)
        self.wait_ready(name)

    async def _make_probe(self) -> None:
        async with self._admin() as admin:
            await admin.create_topic(PROBE_TOPIC, queues=1)
        async with EtcdCoordinator(self.etcd.endpoint) as coordinator:
            route = await RouteAdmin(coordinator).get(PROBE_TOPIC)
        self._probe_queue = {queue.broker: n for n, queue in enumerate(route.queues)}
        assert sorted(self._probe_queue) == sorted(self.shards), route
        for shard in self.shards:
            await self._wait_served(shard, 30.0)

    def _admin(self):  # type: ignore[no-untyped-def]
        from popmq import AsyncAdmin

        return AsyncAdmin(self.endpoints[0], timeout_s=20, credentials=self.credentials)

    def wait_served(self, broker: str, timeout_s: float = 30.0) -> None:
        """Wait until every running proxy serves `broker` (a shard name)."""
        asyncio.run(self._wait_served(broker, timeout_s))

    # -- leadership -----------------------------------------------------------------------

    def shard_keys(self, shard: str) -> tuple[dict[str, object] | None, int, dict[str, object]]:
        """(the leader's registration or None, its epoch, the shards/<shard> record)."""
        with grpc.insecure_channel(self.etcd.endpoint) as channel:
            kv = rpc_pb2_grpc.KVStub(channel)
            leader = kv.Range(
                rpc_pb2.RangeRequest(key=f"/popmq/default/brokers/{shard}".encode()), timeout=5
            )
            record = kv.Range(
                rpc_pb2.RangeRequest(key=f"/popmq/default/shards/{shard}".encode()), timeout=5
            )
        registration = json.loads(leader.kvs[0].value) if leader.kvs else None
        epoch = leader.kvs[0].create_revision if leader.kvs else 0
        if registration is not None and isinstance(registration.get("epoch"), int):
            epoch = registration["epoch"]  # registered again under its term (election.py)
        return registration, epoch, json.loads(record.kvs[0].value) if record.kvs else {}

    def leader(self, shard: str) -> str | None:
        """The process name of the shard's registered leader, or None."""
        registration, _, _ = self.shard_keys(shard)
        if registration is None:
            return None
        return f"{shard}-{registration['replica']}"

    def epoch(self, shard: str) -> int:
        return self.shard_keys(shard)[1]

    def in_sync(self, shard: str) -> list[str]:
        """Process names of the followers shards/<shard> names in sync."""
        _, _, record = self.shard_keys(shard)
        isr = record.get("isr", [])
        assert isinstance(isr, list)
        return [f"{shard}-{name}" for name in isr]

    def wait_leader(
        self, shard: str, *, other_than: str | None = None, timeout_s: float = 60.0
    ) -> str:
        """Wait for a registered leader of `shard` (not `other_than`); returns its name."""
        deadline = time.monotonic() + timeout_s
        while True:
            leader = self.leader(shard)
            if leader is not None and leader != other_than:
                return leader
            assert time.monotonic() < deadline, (
                f"shard {shard} has no leader (other than {other_than}) after {timeout_s:g}s\n"
                + self.logs()
            )
            time.sleep(0.05)

    def wait_in_sync(self, shard: str, count: int = 1, timeout_s: float = 60.0) -> list[str]:
        """Wait until `count` followers of `shard` are in sync; returns them."""
        deadline = time.monotonic() + timeout_s
        while True:
            isr = self.in_sync(shard)
            if len(isr) >= count:
                return isr
            assert time.monotonic() < deadline, (
                f"shard {shard} has {isr} in sync after {timeout_s:g}s\n" + self.logs()
            )
            time.sleep(0.05)


ReplicaClusterT = TypeVar("ReplicaClusterT", bound=ReplicaCluster)


@contextlib.contextmanager
def in_sync_shard(
    root: Path,
    *,
    session_ttl_s: int,
    broker_args: Sequence[str] = (),
    proxy_args: Sequence[str] = (),
) -> Iterator[ReplicaCluster]:
    """A started cluster of one shard s1 (replicas s1-r1, s1-r2) behind one proxy p1, its
    follower in sync; stopped on exit."""
    cluster = ReplicaCluster(
        root,
        shards=1,
        replicas=2,
        proxies=1,
        session_ttl_s=session_ttl_s,
        broker_args=broker_args,
        proxy_args=proxy_args,
    )
    with running_in_sync(cluster) as running:
        yield running


@contextlib.contextmanager
def running_in_sync(cluster: ReplicaClusterT) -> Iterator[ReplicaClusterT]:
    """Starts `cluster` and waits until shard s1 has a follower in sync; stops it on exit."""
    cluster.start()
    try:
        cluster.wait_in_sync("s1", 1)
        yield cluster
    finally:
        cluster.stop()
