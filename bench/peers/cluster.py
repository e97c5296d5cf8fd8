"""Cluster mode as child processes: an etcd, `popmq broker` processes and a `popmq proxy`.

Each is a ``ServerProcess`` (servers.py): its own temp dir, a free loopback port, stopped
(SIGTERM, then SIGKILL) and cleaned up on exit, so a failed benchmark leaves nothing running.
``launch_cluster(brokers=N)`` starts etcd, then the N brokers at once (each registers in etcd
before it prints its address), then the proxy (which reads the live brokers from etcd as it
starts, so a topic it creates spans them all),
and yields the proxy's SDK target beside the pid of every process, so the scenario can read
each one's CPU from /proc.

``launch_shard(replicas=N)`` does the same for one replicated shard (`popmq broker --shard
s1 --name rN`, docs/replication.md): it waits for etcd to name a leader before the proxy
starts, and ``wait_in_sync`` waits for the followers to join the in-sync set.

etcd is started here, not by tests/support/etcd.py: bench code does not import tests/, and
that helper is built for tests (``pytest.fail`` on a missing binary, restarts on the same
ports), while a benchmark wants a ``ServerProcess`` like its other servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import grpc

from bench.peers.servers import (
    PeerMissingError,
    ServerProcess,
    find_binary,
    free_port,
    popmq_command,
    read_port_line,
)
from bench.peers.targets import PopmqTarget
from popmq._gen.etcd.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from popmq.broker.replication.election import ShardElection, ShardState
from popmq.coordination import EtcdCoordinator

__all__ = [
    "ClusterLaunch",
    "EtcdProcess",
    "PopmqBrokerProcess",
    "PopmqProxyProcess",
    "PopmqReplicaProcess",
    "ShardLaunch",
    "etcd_binary",
    "launch_cluster",
    "launch_shard",
    "replication_events",
    "shard_state",
    "wait_in_sync",
]

_SHARD_TIMEOUT_S = 60.0

ETCD_HINT = (
    "etcd is not installed: run `make setup` (tools/install_etcd.sh installs Debian's "
    "etcd-server), or set POPMQ_ETCD to an etcd 3.4+ binary"
)


def etcd_binary() -> str:
    """$POPMQ_ETCD, else ``etcd`` on PATH or in the usual bin dirs.

    Raises:
        PeerMissingError: there is none (the message says how to install it).
    """
    configured = os.environ.get("POPMQ_ETCD")
    found = configured or find_binary("etcd")
    if not found or not os.access(found, os.X_OK):
        raise PeerMissingError(ETCD_HINT)
    return found


class EtcdProcess(ServerProcess):
    """One single-member etcd on free loopback ports; ready once it has a leader."""

    name = "etcd"

    def __init__(self) -> None:
        super().__init__()
        self.peer_port = 0

    def _command(self, data_dir: Path) -> list[str]:
        self.peer_port = free_port()
        client = f"http://127.0.0.1:{self.port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        return [
            etcd_binary(),
            "--name=popmq-bench",
            f"--data-dir={data_dir}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=popmq-bench={peer}",
            "--initial-cluster-state=new",
            "--logger=zap",
            "--log-outputs=stderr",
        ]

    def _wait_ready(self, proc: subprocess.Popen[bytes], deadline: float) -> None:
        with grpc.insecure_channel(self.endpoint) as channel:
            stub = rpc_pb2_grpc.MaintenanceStub(channel)  # type: ignore[no-untyped-call]
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise RuntimeError(f"etcd exited with {proc.returncode}: {self._log_tail()}")
                try:
                    status = stub.Status(rpc_pb2.StatusRequest(), timeout=1.0)
                except grpc.RpcError:
                    time.sleep(0.05)
                    continue
                if status.leader:
                    return
                time.sleep(0.05)
        raise TimeoutError(f"etcd did not elect itself leader in time: {self._log_tail()}")


class _PopmqMember(ServerProcess):
    """A cluster member that binds port 0 and prints ``listening on HOST:PORT`` when ready."""

    picks_own_port = True
    # A deployment starts several Python processes at once; beside other work on two
    # cores, 30 s has not always been enough for the last of them.
    start_timeout_s = 90.0

    def __init__(self, etcd: str) -> None:
        super().__init__()
        self.etcd = etcd

    def _stdout(self) -> int | IO[bytes]:
        return subprocess.PIPE

    def _wait_ready(self, proc: subprocess.Popen[bytes], deadline: float) -> None:
        self.port = read_port_line(proc, deadline, "listening on ", self._log_tail)


class PopmqBrokerProcess(_PopmqMember):
    """``popmq broker --flush sync`` (as the bench's ``popmq serve``), registered in etcd."""

    def __init__(self, broker_name: str, etcd: str) -> None:
        super().__init__(etcd)
        self.broker_name = broker_name
        self.name = f"broker-{broker_name}"

    def _command(self, data_dir: Path) -> list[str]:
        return [
            *popmq_command(),
            "broker",
            "--name", self.broker_name,
            "--listen", "127.0.0.1:0",
            "--data-dir", str(data_dir),
            "--etcd", self.etcd,
            "--flush", "sync",
        ]  # fmt: skip


class PopmqReplicaProcess(_PopmqMember):
    """``popmq broker --shard SHARD --name REPLICA --flush sync``: one replica of a shard.

    It prints its address at once, as a follower; etcd decides which replica leads.
    ``settings`` are ``--set`` values (e.g. ``replication.mode=async``).
    """

    def __init__(self, shard: str, replica: str, etcd: str, settings: Sequence[str] = ()) -> None:
        super().__init__(etcd)
        self.shard = shard
        self.replica = replica
        self.settings = tuple(settings)
        self.name = f"replica-{shard}-{replica}"

    def _command(self, data_dir: Path) -> list[str]:
        extra = [arg for setting in self.settings for arg in ("--set", setting)]
        return [
            *popmq_command(),
            "broker",
            "--shard", self.shard,
            "--name", self.replica,
            "--listen", "127.0.0.1:0",
            "--data-dir", str(data_dir),
            "--etcd", self.etcd,
            "--flush", "sync",
            *extra,
        ]  # fmt: skip


class PopmqProxyProcess(_PopmqMember):
    """``popmq proxy``: the endpoint clients use; it routes to the brokers etcd lists."""

    name = "proxy"

    def _command(self, data_dir: Path) -> list[str]:
        return [
            *popmq_command(),
            "proxy",
            "--listen", "127.0.0.1:0",
            "--etcd", self.etcd,
            "--name", "bench-proxy",
        ]  # fmt: skip


@dataclass(frozen=True, slots=True)
class ClusterLaunch:
    """A started cluster: the proxy's target and the pid of each process."""

    target: PopmqTarget
    proxy_pid: int
    broker_pids: dict[str, int]
    """Broker name -> pid, in start order (b1, b2, ...)."""
    etcd_pid: int
    logs: dict[str, Path]
    """Process name -> its stderr log (kept while the cluster runs)."""


@contextlib.contextmanager
def launch_cluster(*, brokers: int, name: str = "popmq-cluster") -> Iterator[ClusterLaunch]:
    """etcd, ``brokers`` brokers (b1, b2, ...) and one proxy; all stopped on exit.

    Raises:
        PeerMissingError: etcd is not installed.
        ValueError: ``brokers`` below 1.
    """
    if brokers < 1:
        raise ValueError(f"a cluster needs at least 1 broker, not {brokers}")
    etcd_binary()  # fail before starting anything
    with contextlib.ExitStack() as stack:
        etcd = stack.enter_context(EtcdProcess())
        members = [PopmqBrokerProcess(f"b{i}", etcd.endpoint) for i in range(1, brokers + 1)]
        for member in members:  # all at once: they need only etcd
            stack.callback(member.stop)
            member.spawn()
        for member in members:
            member.wait_until_ready()
        proxy = stack.enter_context(PopmqProxyProcess(etcd.endpoint))
        yield ClusterLaunch(
            target=PopmqTarget(proxy.endpoint, name),
            proxy_pid=proxy.pid,
            broker_pids={m.broker_name: m.pid for m in members},
            etcd_pid=etcd.pid,
            logs={p.name: p.log_path for p in (etcd, *members, proxy)},
        )


@dataclass(frozen=True, slots=True)
class ShardLaunch:
    """A started replicated shard: the proxy's target and the pid of each process."""

    target: PopmqTarget
    shard: str
    proxy_pid: int
    leader: str
    """The replica etcd named leader once all had started."""
    replica_pids: dict[str, int]
    """Replica name -> pid (r1, r2, ...)."""
    etcd_pid: int
    etcd_endpoint: str
    logs: dict[str, Path]

    @property
    def followers(self) -> list[str]:
        return [name for name in self.replica_pids if name != self.leader]


async def shard_state(etcd: str, shard: str) -> ShardState:
    """What etcd says of ``shard`` now: its leader and in-sync set (replication's own read)."""
    async with EtcdCoordinator(etcd) as coordinator:
        election = ShardElection(coordinator, shard=shard, replica="bench", address="", ttl_s=10)
        return await election.read()


def _wait_shard(etcd: str, shard: str, what: str, ok: Callable[[ShardState], bool]) -> ShardState:
    deadline = time.monotonic() + _SHARD_TIMEOUT_S
    while True:
        state = asyncio.run(shard_state(etcd, shard))
        if ok(state):
            return state
        if time.monotonic() > deadline:
            raise TimeoutError(f"shard {shard}: no {what} after {_SHARD_TIMEOUT_S:.0f}s: {state}")
        time.sleep(0.05)


_REPLICATION_EVENTS = ("in-sync set", "stops leading", " leads (epoch", "following ")


def replication_events(shard: ShardLaunch) -> list[str]:
    """The replicas' log lines about leadership, following and the in-sync set, in order."""
    lines: list[str] = []
    for name, path in shard.logs.items():
        if not name.startswith("replica-"):
            continue
        with contextlib.suppress(OSError), path.open(errors="replace") as log:
            lines += [
                f"{name}: {line.rstrip()}"
                for line in log
                if any(event in line for event in _REPLICATION_EVENTS)
            ]
    return sorted(lines, key=lambda line: line.partition(": ")[2])


def wait_in_sync(
    shard: ShardLaunch, count: int, timeout_s: float = _SHARD_TIMEOUT_S
) -> tuple[str, ...]:
    """Wait until ``count`` followers are in the shard's in-sync set; returns the set.

    A follower joins once it acknowledged the leader's last batch, so some write must have
    happened since it connected (creating the topics does).

    Raises:
        TimeoutError: fewer were in sync after ``timeout_s`` (with the replicas' events).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        state = asyncio.run(shard_state(shard.etcd_endpoint, shard.shard))
        if len(state.isr) >= count:
            return state.isr
        if time.monotonic() > deadline:
            events = "\n".join(replication_events(shard)[-20:])
            raise TimeoutError(
                f"shard {shard.shard}: {len(state.isr)} in-sync followers, not {count}, after "
                f"{timeout_s:.0f}s: {state}; the replicas' last events:\n{events}"
            )
        time.sleep(0.05)


def _stop_leader_last(
    etcd: str, shard: str, members: Sequence[PopmqReplicaProcess], leader: str
) -> None:
    """Stop the followers, then the leader (the one etcd names now, else ``leader``).

    The other order is slow: a stopping leader gives its followers' Follow streams the
    whole shutdown grace (they never end on their own), and a follower whose leader is
    gone has been seen to ignore SIGTERM until killed (the bench's report has why).
    """
    with contextlib.suppress(Exception):
        leader = asyncio.run(asyncio.wait_for(shard_state(etcd, shard), 5.0)).leader or leader
    for member in sorted(members, key=lambda m: m.replica == leader):
        member.stop()


@contextlib.contextmanager
def launch_shard(
    *,
    replicas: int = 2,
    shard: str = "s1",
    settings: Sequence[str] = (),
    name: str = "popmq-shard",
) -> Iterator[ShardLaunch]:
    """etcd, ``replicas`` replicas of ``shard`` (r1, r2, ...) and one proxy; all stopped on exit.

    The proxy starts once etcd names a leader, so it routes the shard to it from the start.

    Raises:
        PeerMissingError: etcd is not installed.
        ValueError: ``replicas`` below 1.
        TimeoutError: no leader within 60 s.
    """
    if replicas < 1:
        raise ValueError(f"a shard needs at least 1 replica, not {replicas}")
    etcd_binary()
    with contextlib.ExitStack() as stack:
        etcd = stack.enter_context(EtcdProcess())
        members = [
            PopmqReplicaProcess(shard, f"r{i}", etcd.endpoint, settings)
            for i in range(1, replicas + 1)
        ]
        for member in members:
            stack.callback(member.stop)
            member.spawn()
        for member in members:
            member.wait_until_ready()
        state = _wait_shard(etcd.endpoint, shard, "leader", lambda s: bool(s.leader))
        stack.callback(_stop_leader_last, etcd.endpoint, shard, members, state.leader)
        proxy = stack.enter_context(PopmqProxyProcess(etcd.endpoint))
        yield ShardLaunch(
            target=PopmqTarget(proxy.endpoint, name),
            shard=shard,
            proxy_pid=proxy.pid,
            leader=state.leader,
            replica_pids={m.replica: m.pid for m in members},
            etcd_pid=etcd.pid,
            etcd_endpoint=etcd.endpoint,
            logs={p.name: p.log_path for p in (etcd, *members, proxy)},
        )
