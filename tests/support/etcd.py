"""A real etcd for tests: started on free loopback ports over a temp data dir.

`EtcdServer(data_dir).start()` runs the `etcd` binary (Debian's etcd-server, installed by
`make setup` through tools/install_etcd.sh; or the binary named by $POPMQ_ETCD) and waits
until it answers Maintenance.Status. `stop()` ends it (SIGTERM), `kill()` kills it (SIGKILL),
and `start()` again restarts it on the same ports and data dir, so its keys, revisions and
leases survive as they would in production.

A missing etcd is a failure that says how to install it, never a skip: cluster mode's tests
need it, and CI runs `make setup` first.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from pathlib import Path

import grpc
import pytest

from popmq._gen.etcd.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from popmq.cli.local_cluster import ETCD_INSTALL_HINT, find_etcd
from tests.support.ports import free_port

START_TIMEOUT_S = 20.0


def etcd_binary() -> str:
    """The etcd binary to run; fails the test with ETCD_INSTALL_HINT when there is none."""
    found = find_etcd()
    if found is None:
        pytest.fail(ETCD_INSTALL_HINT, pytrace=False)
    return found


class EtcdServer:
    """One single-member etcd; `endpoint` is its client `host:port`.

    `host` is the address its client URL listens on: loopback unless other network
    namespaces must reach it (tests/support/netns.py); the peer URL stays on loopback.
    """

    def __init__(
        self, data_dir: Path, *, name: str = "popmq-test", host: str = "127.0.0.1"
    ) -> None:
        self.data_dir = data_dir
        self.name = name
        self.host = host
        self.client_port = free_port()
        self.peer_port = free_port()
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        # name=peer URL of every member (EtcdCluster sets it); None: this one alone.
        self.initial_cluster: str | None = None

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.client_port}"

    def start(self) -> EtcdServer:
        """Start (or restart) etcd and wait until it answers."""
        self.spawn()
        self.wait_ready()
        return self

    def spawn(self) -> None:
        """Start the process without waiting (a member waits for its peers' quorum)."""
        assert self.process is None, "etcd is running already"
        client = f"http://{self.endpoint}"
        peer = self.peer_url
        args = [
            etcd_binary(),
            f"--name={self.name}",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster={self.initial_cluster or f'{self.name}={peer}'}",
            "--initial-cluster-state=new",
            "--logger=zap",
            "--log-outputs=stderr",
        ]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self) -> None:
        """Until it answers Maintenance.Status with a leader (killed and failed if not)."""
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        with grpc.insecure_channel(self.endpoint) as channel:
            stub = rpc_pb2_grpc.MaintenanceStub(channel)
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    break
                try:
                    status = stub.Status(rpc_pb2.StatusRequest(), timeout=1.0)
                except grpc.RpcError:
                    time.sleep(0.05)
                    continue
                if status.leader:
                    return
                time.sleep(0.05)
        self.kill()
        log = self.log_path.read_text(errors="replace")[-4000:]
        raise AssertionError(f"etcd did not become ready at {self.endpoint}; its log:\n{log}")

    def stop(self) -> None:
        """SIGTERM, then wait (SIGKILL after 10 s); idempotent."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL: a crash."""
        self._end(signal.SIGKILL)

    def _end(self, sig: signal.Signals) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def restart(self) -> None:
        """Stop, then start on the same ports and data dir."""
        self.stop()
        self.start()

    def pause(self) -> None:
        """SIGSTOP: etcd hangs (connections stay open, nothing answers). Returns once every
        thread of it is stopped: a thread still running on another core could otherwise
        answer a request the test makes right after."""
        assert self.process is not None, "etcd is not running"
        self.process.send_signal(signal.SIGSTOP)
        tasks = Path(f"/proc/{self.process.pid}/task")
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            states = []
            for task in tasks.iterdir():
                with contextlib.suppress(OSError):
                    # The state follows the command's closing parenthesis.
                    states.append((task / "stat").read_text().rpartition(")")[2].split()[0])
            if states and all(state in ("T", "t") for state in states):
                return
            time.sleep(0.001)
        raise AssertionError(f"etcd (pid {self.process.pid}) did not stop within 5 s of SIGSTOP")

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        assert self.process is not None, "etcd is not running"
        self.process.send_signal(signal.SIGCONT)

    def leader(self) -> bool:
        """Whether this member is the cluster's leader now (False if it does not answer)."""
        with grpc.insecure_channel(self.endpoint) as channel:
            try:
                status = rpc_pb2_grpc.MaintenanceStub(channel).Status(
                    rpc_pb2.StatusRequest(), timeout=2.0
                )
            except grpc.RpcError:
                return False
        return bool(status.leader) and status.leader == status.header.member_id


class EtcdCluster:
    """Several etcd members as one cluster (three, as docs/cluster.md advises), each on its
    own loopback ports and data dir; `endpoint` lists every member's, comma-separated, as
    `--etcd` and EtcdCoordinator take them. A member killed and started again rejoins with
    its data."""

    def __init__(self, root: Path, *, members: int = 3) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.members = [
            EtcdServer(root / f"etcd-{i}", name=f"popmq-test-{i}") for i in range(1, members + 1)
        ]
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        for member in self.members:
            member.initial_cluster = initial
        self.log_path = self.members[0].log_path

    @property
    def endpoint(self) -> str:
        return ",".join(m.endpoint for m in self.members)

    def start(self) -> EtcdCluster:
        """Start every member not running, then wait until each answers with a leader."""
        for member in self.members:
            if member.process is None:
                member.spawn()
        for member in self.members:
            member.wait_ready()
        return self

    def stop(self) -> None:
        for member in self.members:
            member.stop()

    def kill(self) -> None:
        for member in self.members:
            member.kill()

    def leader(self) -> EtcdServer:
        """The member that leads now (fails if none does within START_TIMEOUT_S)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for member in self.members:
                if member.process is not None and member.leader():
                    return member
            time.sleep(0.1)
        raise AssertionError("no etcd member leads")
