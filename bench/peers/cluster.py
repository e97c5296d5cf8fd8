"""Cluster mode as child processes: an etcd, `popmq broker` processes and a `popmq proxy`.

Each is a ``ServerProcess`` (servers.py): its own temp dir, a free loopback port, stopped
(SIGTERM, then SIGKILL) and cleaned up on exit, so a failed benchmark leaves nothing running.
``launch_cluster(brokers=N)`` starts etcd, then the N brokers at once (each registers in etcd
before it prints its address), then the proxy (which reads the live brokers from etcd as it
starts, so a topic it creates spans them all),
and yields the proxy's SDK target beside the pid of every process, so the scenario can read
each one's CPU from /proc.

etcd is started here, not by tests/support/etcd.py: bench code does not import tests/, and
that helper is built for tests (``pytest.fail`` on a missing binary, restarts on the same
ports), while a benchmark wants a ``ServerProcess`` like its other servers.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
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

__all__ = [
    "ClusterLaunch",
    "EtcdProcess",
    "PopmqBrokerProcess",
    "PopmqProxyProcess",
    "etcd_binary",
    "launch_cluster",
]

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
