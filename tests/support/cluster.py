"""A real popmq cluster for tests: etcd, `popmq broker` and `popmq proxy` subprocesses.

`Cluster(root, brokers=3, proxies=2).start()` runs a real etcd (tests/support/etcd.py), then
N brokers (`python -m popmq.cli broker`, named b1..bN) and M proxies (`python -m popmq.cli
proxy`, named p1..pM), each on a loopback port chosen up front (so a restart keeps its
address) and with its own data dir under `root`. Everything a process prints (stdout and its
log on stderr) goes to `root/<name>.log`, appended across restarts with a marker line per
start; `logs()` gathers the tails for a failure message, and `stop()` ends everything (call
it from a fixture's teardown, also after a failure).

A process is ready (`wait_ready`) when it printed `listening on HOST:PORT`. A broker is ready
once every running proxy serves it: the cluster keeps a probe topic (`PROBE_TOPIC`, one
queue per broker) and peeks the broker's queue of it through each proxy until the peek
answers. That is what a client needs (the proxy has the broker as a live member and reaches
it), not a guess from log lines.

kill -9 and restart: a killed broker or proxy keeps its etcd registration until its lease
lapses (`cluster.session_ttl_s`, 3 s by default here), and a process cannot register a
name that is still held, so `restart` of a killed process first waits for the lease to lapse
(`wait_deregistered`). A stopped (SIGTERM) process revokes its lease itself.

The methods block; an asyncio test that keeps traffic running meanwhile calls them with
`asyncio.to_thread`. State is changed by one thread at a time (the test's).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import grpc

from popmq import AsyncAdmin, Credentials, NotFoundError, PopMQError
from popmq._gen.etcd.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from popmq.cluster import RemoteBroker
from popmq.coordination import EtcdCoordinator, RouteAdmin
from popmq.security.signing import Signer
from tests.support.etcd import EtcdCluster, EtcdServer
from tests.support.ports import free_port

__all__ = ["PROBE_TOPIC", "REPO_ROOT", "Cluster", "ClusterProcess", "Kind"]

REPO_ROOT = Path(__file__).resolve().parents[2]
PROBE_TOPIC = "cluster-probe"
"""A topic with one queue per broker, made by `Cluster.start`: peeking a broker's queue of it
through a proxy tells whether that proxy serves the broker."""
START_TIMEOUT_S = 60.0
"""Bound of one process start (interpreter, imports, store recovery, etcd registration);
generous because a 2-core machine runs seven processes here."""
_LISTENING = re.compile(r"^listening on (\S+:\d+)$", re.MULTILINE)
_METRICS = re.compile(r"^popmq metrics on (http://\S+/metrics)$", re.MULTILINE)

Kind = Literal["broker", "proxy"]


@dataclass
class ClusterProcess:
    """One broker or proxy: its fixed address, data dir, log and the running process.

    Attributes:
        name: b1.. for brokers (the broker name), p1.. for proxies (the member name).
        kind: "broker" or "proxy".
        port: The loopback port, the same for every start.
        data_dir: The broker's store (a proxy has none; its dir stays empty).
        log_path: stdout and stderr of every start, appended.
        extra: More command-line arguments of this process.
        host: The address it listens on (loopback unless a test puts it elsewhere, e.g.
            in a network namespace: tests/support/netns.py).
        starts: Seconds from spawn to the listening line, one per start.
        spawns: Starts so far (those that failed included).
        log_offsets: Where each start's output begins in the log.
        exit_codes: How each ended start exited (-9 after kill -9).
    """

    name: str
    kind: Kind
    port: int
    data_dir: Path
    log_path: Path
    extra: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    process: subprocess.Popen[bytes] | None = None
    spawns: int = 0
    log_offsets: list[int] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    exit_codes: list[int] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def died(self) -> bool:
        """Whether the process exited on its own (not killed or stopped by the cluster)."""
        return self.process is not None and self.process.poll() is not None

    def log_since(self, offset: int) -> str:
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


class Cluster:
    """etcd + brokers + proxies as subprocesses (module docstring).

    Args:
        root: A directory of this cluster alone (data dirs and logs go there).
        brokers: Number of brokers, named b1..bN.
        proxies: Number of proxies, named p1..pM.
        session_ttl_s: `cluster.session_ttl_s` of every process: how long a killed one
            stays registered.
        flush: The brokers' `--flush`.
        broker_args: More arguments of every broker (e.g. `--set`, `pop.x=...`).
        proxy_args: More arguments of every proxy.
        env: More environment of every process (e.g. POPMQ_SECURITY_* settings).
        credentials: What the cluster's own calls to the proxies (the probe topic) sign
            with, for a cluster with authentication on.
    """

    def __init__(
        self,
        root: Path,
        *,
        brokers: int = 3,
        proxies: int = 2,
        session_ttl_s: int = 3,
        flush: Literal["sync", "async"] = "sync",
        broker_args: Sequence[str] = (),
        proxy_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        credentials: Credentials | None = None,
        etcd_members: int = 1,
    ) -> None:
        self.root = root
        self.env = dict(env or {})
        self.credentials = credentials
        root.mkdir(parents=True, exist_ok=True)
        self.session_ttl_s = session_ttl_s
        self.flush = flush
        self.etcd: EtcdServer | EtcdCluster = (
            EtcdServer(root / "etcd")
            if etcd_members == 1
            else EtcdCluster(root / "etcd", members=etcd_members)
        )
        self.processes: dict[str, ClusterProcess] = {}
        for n in range(1, brokers + 1):
            self._add(f"b{n}", "broker", broker_args)
        for n in range(1, proxies + 1):
            self._add(f"p{n}", "proxy", proxy_args)
        # Global queue id of each broker's queue of PROBE_TOPIC (filled by start()).
        self._probe_queue: dict[str, int] = {}

    def _add(self, name: str, kind: Kind, extra: Sequence[str]) -> None:
        data_dir = self.root / name
        data_dir.mkdir(mode=0o700, exist_ok=True)
        self.processes[name] = ClusterProcess(
            name, kind, free_port(), data_dir, self.root / f"{name}.log", tuple(extra)
        )

    # -- names and addresses ------------------------------------------------------------

    @property
    def brokers(self) -> list[str]:
        return [p.name for p in self.processes.values() if p.kind == "broker"]

    @property
    def proxies(self) -> list[str]:
        return [p.name for p in self.processes.values() if p.kind == "proxy"]

    def endpoint(self, proxy: str) -> str:
        """HOST:PORT of a proxy (what a client connects to)."""
        return self._process(proxy, "proxy").address

    @property
    def endpoints(self) -> list[str]:
        """Every proxy's HOST:PORT, p1 first."""
        return [self.endpoint(p) for p in self.proxies]

    def broker_address(self, broker: str) -> str:
        """HOST:PORT of a broker's BrokerService (tests read a broker's own store there)."""
        return self._process(broker, "broker").address

    def _process(self, name: str, kind: Kind | None = None) -> ClusterProcess:
        found = self.processes.get(name)
        if found is None or (kind is not None and found.kind != kind):
            raise KeyError(f"no {kind or 'process'} {name!r}; have {sorted(self.processes)}")
        return found

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> Cluster:
        """etcd, then every broker (spawned together), then every proxy, then the probe
        topic. Stops what started if anything fails."""
        try:
            self.etcd.start()
            self._start_all(self.brokers)
            self._start_all(self.proxies)
            asyncio.run(self._make_probe())
        except BaseException:
            self.stop()
            raise
        return self

    def _start_all(self, names: Sequence[str]) -> None:
        for name in names:
            self._spawn(self._process(name))
        for name in names:
            self.wait_ready(name)

    def stop(self) -> None:
        """Kill every process and stop etcd; idempotent, never raises for a dead one."""
        for process in reversed(list(self.processes.values())):
            self._end(process, signal.SIGKILL)
        self.etcd.stop()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kill(self, name: str) -> None:
        """kill -9 a broker or proxy (it stays registered until its lease lapses)."""
        process = self._process(name)
        assert process.running, f"{name} is not running"
        self._end(process, signal.SIGKILL)

    def pause(self, name: str) -> None:
        """SIGSTOP a broker or proxy: it holds its connections and answers nothing (nor
        renews its lease) until `resume`."""
        process = self._process(name)
        assert process.running and process.process is not None, f"{name} is not running"
        process.process.send_signal(signal.SIGSTOP)

    def resume(self, name: str) -> None:
        """SIGCONT a paused process."""
        process = self._process(name)
        assert process.process is not None, f"{name} was never started"
        process.process.send_signal(signal.SIGCONT)

    def terminate(self, name: str, timeout_s: float = 30.0) -> int:
        """SIGTERM (a clean stop: deregisters, closes the store); returns the exit code."""
        process = self._process(name)
        assert process.running, f"{name} is not running"
        code = self._end(process, signal.SIGTERM, timeout_s)
        assert code is not None
        return code

    def terminate_together(self, names: Sequence[str], timeout_s: float = 60.0) -> list[int]:
        """SIGTERM to each of `names` at once (as `popmq cluster local` stops a group),
        then wait for each; their exit codes."""
        for name in names:
            process = self._process(name)
            assert process.running and process.process is not None, f"{name} is not running"
            process.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for name in names:  # not signalled twice: a second one may end a stopping process
            running = self._process(name).process
            assert running is not None
            with contextlib.suppress(subprocess.TimeoutExpired):
                running.wait(max(0.0, deadline - time.monotonic()))
        codes = [self._end(self._process(name), signal.SIGKILL) for name in names]
        return [code for code in codes if code is not None]

    def restart(self, name: str) -> None:
        """Start a process again on its address and data dir (stopping it first with
        SIGTERM if it runs). After a kill -9 it waits for the old lease to lapse first.
        Returns once it listens, and for a broker once every running proxy serves it."""
        process = self._process(name)
        if process.running:
            self.terminate(name)
        self.wait_deregistered(name)
        self._spawn(process)
        self.wait_ready(name)

    def wait_ready(self, name: str) -> None:
        """Wait until the process's current start printed `listening on` its address (it
        fails with the log if the process exits or stays silent for START_TIMEOUT_S), and
        for a broker until every running proxy serves it (once the probe topic exists)."""
        process = self._process(name)
        assert process.process is not None, f"{name} was not started"
        self._wait_listening(process, process.log_offsets[-1])
        if process.kind == "broker" and self._probe_queue:
            self.wait_served(name)

    def start_etcd(self) -> None:
        """Start etcd again after `stop_etcd` (same ports, same data dir)."""
        self.etcd.start()

    def stop_etcd(self) -> None:
        self.etcd.stop()

    def _command(self, process: ClusterProcess) -> list[str]:
        common = [
            "--etcd",
            self.etcd.endpoint,
            "--set",
            f"cluster.session_ttl_s={self.session_ttl_s}",
        ]
        if process.kind == "broker":
            return [
                sys.executable, "-m", "popmq.cli", "broker", "--name", process.name,
                "--listen", process.address, "--data-dir", str(process.data_dir),
                "--flush", self.flush, *common, *process.extra,
            ]  # fmt: skip
        return [
            sys.executable, "-m", "popmq.cli", "proxy", "--name", process.name,
            "--listen", process.address, *common, *process.extra,
        ]  # fmt: skip

    def _spawn(self, process: ClusterProcess) -> None:
        """Start the process with its output appended to its log (see `wait_ready`)."""
        assert not process.running, f"{process.name} is running already"
        env = {
            **os.environ,
            **self.env,
            "PYTHONPATH": str(REPO_ROOT / "src"),
            "PYTHONUNBUFFERED": "1",
        }
        with process.log_path.open("ab") as log:
            process.spawns += 1
            log.write(f"=== cluster: start {process.spawns} of {process.name} ===\n".encode())
            log.flush()
            offset = log.tell()
            process.log_offsets.append(offset)
            process.process = subprocess.Popen(
                self._command(process),
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        process.starts.append(-time.monotonic())  # turned into a duration once listening

    def _wait_listening(self, process: ClusterProcess, offset: int) -> None:
        assert process.process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            text = process.log_since(offset)
            match = _LISTENING.search(text)
            if match is not None:
                assert match.group(1) == process.address, (
                    f"{process.name} listens on {match.group(1)}, not {process.address}"
                )
                if process.starts[-1] < 0:
                    process.starts[-1] += time.monotonic()
                return
            if process.process.poll() is not None or time.monotonic() > deadline:
                code = process.process.poll()
                self._end(process, signal.SIGKILL)
                raise AssertionError(
                    f"{process.kind} {process.name} did not start (exit code {code}); "
                    f"its log:\n{text[-6000:]}"
                )
            time.sleep(0.05)

    def _end(
        self, process: ClusterProcess, sig: signal.Signals, timeout_s: float = 30.0
    ) -> int | None:
        running, process.process = process.process, None
        if running is None:
            return None
        if running.poll() is None:
            running.send_signal(sig)
            try:
                running.wait(timeout_s)
            except subprocess.TimeoutExpired:
                running.kill()
                running.wait(30)
        code = running.returncode
        process.exit_codes.append(code)
        if process.starts and process.starts[-1] < 0:
            process.starts.pop()  # it never listened
        return code

    # -- readiness ------------------------------------------------------------------------

    def registered(self, name: str) -> bool:
        """Whether etcd holds the member key of a broker or proxy (its lease is alive)."""
        process = self._process(name)
        folder = "brokers" if process.kind == "broker" else "proxies"
        key = f"/popmq/default/{folder}/{name}".encode()
        endpoints = self.etcd.endpoint.split(",")
        for endpoint in endpoints:  # the first member that answers
            with grpc.insecure_channel(endpoint) as channel:
                try:
                    answer = rpc_pb2_grpc.KVStub(channel).Range(
                        rpc_pb2.RangeRequest(key=key), timeout=5
                    )
                except grpc.RpcError:
                    if endpoint == endpoints[-1]:
                        raise
                    continue
            return bool(answer.kvs)
        return False

    def wait_deregistered(self, name: str, timeout_s: float | None = None) -> float:
        """Wait until etcd dropped the member (its lease lapsed or was revoked); returns
        the seconds waited. Fails after `timeout_s` (default: the TTL plus 10 s)."""
        began = time.monotonic()
        limit = self.session_ttl_s + 10.0 if timeout_s is None else timeout_s
        while self.registered(name):
            waited = time.monotonic() - began
            assert waited < limit, f"{name} is still registered in etcd after {waited:.1f}s"
            time.sleep(0.1)
        return time.monotonic() - began

    def wait_served(self, broker: str, timeout_s: float = 30.0) -> None:
        """Wait until every running proxy answers a peek at the broker's probe queue."""
        asyncio.run(self._wait_served(broker, timeout_s))

    async def _wait_served(self, broker: str, timeout_s: float) -> None:
        queue_id = self._probe_queue[broker]
        last: dict[str, str] = {}
        for proxy in self.proxies:
            if not self._process(proxy).running:
                continue
            async with AsyncAdmin(
                self.endpoint(proxy), timeout_s=5, credentials=self.credentials
            ) as admin:
                try:
                    async with asyncio.timeout(timeout_s):
                        while True:
                            try:
                                await admin.peek_messages(PROBE_TOPIC, queue_id=queue_id)
                                break
                            except PopMQError as exc:
                                last[proxy] = f"{exc.code}: {exc}"
                                await asyncio.sleep(0.1)
                except TimeoutError:
                    raise AssertionError(
                        f"proxy {proxy} does not serve broker {broker} after {timeout_s:g}s: "
                        f"{last.get(proxy)}\n{self.logs()}"
                    ) from None

    async def _make_probe(self) -> None:
        async with AsyncAdmin(
            self.endpoints[0], timeout_s=20, credentials=self.credentials
        ) as admin:
            await admin.create_topic(PROBE_TOPIC, queues=1)
        self._probe_queue = {}
        async with EtcdCoordinator(self.etcd.endpoint) as coordinator:
            route = await RouteAdmin(coordinator).get(PROBE_TOPIC)
        for global_id, queue in enumerate(route.queues):
            self._probe_queue[queue.broker] = global_id
        assert sorted(self._probe_queue) == sorted(self.brokers), route
        for broker in self.brokers:
            await self._wait_served(broker, 30.0)

    # -- looking inside -------------------------------------------------------------------

    async def route_queues(self, topic: str) -> list[tuple[str, int]]:
        """The topic's route from etcd: (broker, local queue id) by global queue id."""
        async with EtcdCoordinator(self.etcd.endpoint) as coordinator:
            route = await RouteAdmin(coordinator).get(topic)
        return [(q.broker, q.queue_id) for q in route.queues]

    async def live_brokers(self) -> list[str]:
        """The brokers etcd holds a registration of now."""
        async with EtcdCoordinator(self.etcd.endpoint) as coordinator:
            return sorted(await coordinator.members("broker"))

    async def stored_per_broker(self, topic: str) -> dict[str, int]:
        """Messages of `topic` in each running broker's own store (its BrokerService),
        counted as max_offset - min_offset over its local queues."""
        counts: dict[str, int] = {}
        credentials = self.credentials
        signer = (
            None if credentials is None else Signer(credentials.access_key, credentials.secret_key)
        )
        for broker in self.brokers:
            if not self._process(broker).running:
                continue
            remote = RemoteBroker(
                self.broker_address(broker), call_timeout_s=10.0, catalog=False, signer=signer
            )
            await remote.start()
            try:
                with contextlib.suppress(NotFoundError):
                    _, queues = await remote.get_topic(topic)
                    counts[broker] = sum(q.max_offset - q.min_offset for q in queues)
            finally:
                await remote.close()
        return counts

    def metrics(self, proxy: str) -> str:
        """The Prometheus text of a proxy started with `--metrics-listen` (in proxy_args)."""
        process = self._process(proxy, "proxy")
        match = _METRICS.search(process.log_since(process.log_offsets[-1]))
        assert match is not None, f"{proxy} serves no metrics: give --metrics-listen"
        with urllib.request.urlopen(match.group(1), timeout=10) as response:
            text: str = response.read().decode()
        return text

    def died(self) -> list[str]:
        """Processes that exited on their own since they were started."""
        return [p.name for p in self.processes.values() if p.died]

    def logs(self, lines: int = 40) -> str:
        """The tail of every process's log, for a failure message."""
        parts = [f"--- {p.name} ({p.kind}, {p.address}) ---\n{p.log_tail(lines)}"
                 for p in self.processes.values()]  # fmt: skip
        etcd_log = self.etcd.log_path
        if etcd_log.exists():
            tail = etcd_log.read_text(errors="replace").splitlines()[-10:]
            parts.append("--- etcd ---\n" + "\n".join(tail))
        return "\n".join(parts)
