"""`popmq cluster local` as a real subprocess: it starts etcd, brokers and proxies, prints
their endpoints, serves clients through every proxy, and on SIGINT stops every child it
started and exits 0; a child that dies ends it with exit 1; bad arguments exit 2."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from popmq import Admin, Producer, SimpleConsumer
from tests.support.cluster import REPO_ROOT

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

READY_TIMEOUT_S = 180.0
"""Generous: a 2-core machine starts etcd and every process at once."""
_CHILD = re.compile(r"^(proxy|broker|etcd)\s+(\S+)\s+(\S+:\d+)\s+pid (\d+)$")
_DATA = re.compile(r"^data and logs: (\S+) \((removed at exit|kept)\)$")


@dataclass
class LocalRun:
    """One `popmq cluster local` process and what it printed."""

    process: subprocess.Popen[str]
    stderr_path: Path
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    stdout: list[str] = field(default_factory=list)
    children: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    """name -> (kind, address, pid), in the printed order."""
    data_dir: Path | None = None
    pump: threading.Thread | None = None
    """Reads its stdout into `lines`."""

    def read_until_ready(self) -> None:
        """Read stdout until the line saying how to stop (fails with the output if the
        process ends first or stays silent)."""
        give_up = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, give_up - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"not ready after {READY_TIMEOUT_S}s\n{self.output()}"
                ) from None
            if line is None:
                code = self.process.wait(30)
                raise AssertionError(f"exited with {code} before ready\n{self.output()}")
            self.stdout.append(line)
            if match := _CHILD.match(line):
                kind, name, address, pid = match.groups()
                self.children[name] = (kind, address, int(pid))
            elif match := _DATA.match(line):
                self.data_dir = Path(match.group(1))
            elif "stops the cluster" in line:
                return

    def of_kind(self, kind: str) -> dict[str, str]:
        return {name: address for name, (k, address, _) in self.children.items() if k == kind}

    @property
    def pids(self) -> list[int]:
        return [pid for _, _, pid in self.children.values()]

    def output(self) -> str:
        return "stdout:\n" + "".join(self.stdout) + "stderr:\n" + self.stderr()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def interrupt(self) -> int:
        """SIGINT (what Ctrl-C sends) and wait for the exit code."""
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(120)


StartLocal = Callable[..., LocalRun]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _env(tmp_path: Path) -> dict[str, str]:
    # TMPDIR: the command's default temporary data dir lands in the test's own directory.
    return {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT / "src"),
        "PYTHONUNBUFFERED": "1",
        "TMPDIR": str(tmp_path),
    }


def _cli(tmp_path: Path, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "popmq.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=_env(tmp_path),
        cwd=tmp_path,
    )


@pytest.fixture
def start_local(tmp_path: Path) -> Iterator[StartLocal]:
    """Start `popmq cluster local ARGS` (call `start_local(*args)`) and wait until it is
    ready; at teardown anything still running is killed, children by their printed pids."""
    runs: list[LocalRun] = []

    def start(*args: str, closed_stderr: bool = False) -> LocalRun:
        stderr_path = tmp_path / f"cluster-local-{len(runs)}.stderr"
        with stderr_path.open("w") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "popmq.cli", "cluster", "local", *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE if closed_stderr else stderr,
                text=True,
                env=_env(tmp_path),
                cwd=tmp_path,
            )
        run = LocalRun(process, stderr_path)
        runs.append(run)
        run.pump = threading.Thread(target=_pump, args=(process, run.lines), daemon=True)
        run.pump.start()
        run.read_until_ready()
        if closed_stderr:  # as a closed terminal or a dead `| tee` leaves it
            assert process.stderr is not None
            process.stderr.close()
        return run

    yield start
    for run in runs:
        if run.process.poll() is None:
            run.process.kill()
            run.process.wait(30)
        for pid in run.pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if run.pump is not None:
            run.pump.join(30)
        if run.process.stdout is not None:
            run.process.stdout.close()


def _pump(process: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        lines.put(line)
    lines.put(None)


def _send_receive_ack(endpoint: str, topic: str, count: int) -> None:
    """Send `count` messages through `endpoint`, then receive and ack them there."""
    bodies = {f"{topic}-{n}".encode() for n in range(count)}
    with Producer(endpoint) as producer:
        for body in sorted(bodies):
            producer.send(topic, body)
    got: set[bytes] = set()
    with SimpleConsumer(endpoint, group=f"{topic}-billing", topic=topic) as consumer:
        give_up = time.monotonic() + 60
        while got != bodies and time.monotonic() < give_up:
            batch = consumer.receive(max_messages=32, invisible_duration_s=30, wait_s=2)
            consumer.ack(batch)
            got.update(m.body for m in batch)
    assert got == bodies


def test_cluster_local_serves_through_every_proxy_and_stops_every_child_on_sigint(
    start_local: StartLocal, tmp_path: Path
) -> None:
    run = start_local("--brokers", "2", "--proxies", "2")
    assert list(run.children) == ["p1", "p2", "b1", "b2", "etcd"], run.output()  # proxies first
    assert all(_alive(pid) for pid in run.pids)
    assert run.data_dir is not None and run.data_dir.is_dir()
    proxies = run.of_kind("proxy")
    endpoints = ",".join(proxies.values())
    assert f"export POPMQ_ENDPOINT={endpoints}\n" in run.stdout

    for name, endpoint in proxies.items():
        with Admin(endpoint) as admin:
            admin.create_topic(f"orders-{name}", queues=2)
            queues = admin.get_topic(f"orders-{name}").queues
        assert sorted(q.broker for q in queues) == ["b1", "b1", "b2", "b2"]  # 2 per broker
        _send_receive_ack(endpoint, f"orders-{name}", count=10)

    status = _cli(tmp_path, "cluster", "status", "--json", "--endpoint", endpoints)
    assert status.returncode == 0, status.stderr
    seen = json.loads(status.stdout)
    assert {b["name"]: (b["address"], b["live"]) for b in seen["brokers"]} == {
        name: (address, True) for name, address in run.of_kind("broker").items()
    }
    assert {p["name"]: p["address"] for p in seen["proxies"]} == proxies
    assert [e["endpoint"] for e in seen["etcd"]] == list(run.of_kind("etcd").values())

    assert run.interrupt() == 0, run.output()
    assert [pid for pid in run.pids if _alive(pid)] == []
    assert not run.data_dir.exists()  # the temporary data dir is removed
    stderr = run.stderr()
    assert stderr.endswith("popmq cluster local: stopped\n"), stderr
    assert "on SIGTERM" not in stderr and "killed" not in stderr  # every child stopped cleanly


def test_cluster_local_with_replicas_starts_shards_that_keep_their_data_across_runs(
    start_local: StartLocal, tmp_path: Path
) -> None:
    data_dir = tmp_path / "kept"
    args = ("--brokers", "2", "--proxies", "1", "--replicas", "2", "--data-dir", str(data_dir))
    run = start_local(*args)
    assert list(run.children) == ["p1", "s1-r1", "s1-r2", "s2-r1", "s2-r2", "etcd"]
    (endpoint,) = run.of_kind("proxy").values()
    with Admin(endpoint) as admin:
        shards = {b.name: b.replication for b in admin.cluster_status().brokers}
        admin.create_topic("payments", queues=1)
        queues = admin.get_topic("payments").queues
    assert sorted(shards) == ["s1", "s2"]
    for shard, replication in shards.items():
        assert replication is not None, shard
        assert [f.in_sync for f in replication.followers] == [True], replication
    assert sorted(q.broker for q in queues) == ["s1", "s2"]
    _send_receive_ack(endpoint, "payments", count=10)
    with Producer(endpoint) as producer:
        kept = {producer.send("payments", f"kept-{n}".encode()).message_id for n in range(5)}

    assert run.interrupt() == 0, run.output()
    assert [pid for pid in run.pids if _alive(pid)] == []
    # --data-dir keeps every process's data and log; a second run starts on them.
    assert run.data_dir == data_dir
    for name in ("etcd", "s1-r1", "s1-r2", "s2-r1", "s2-r2", "p1"):
        assert (data_dir / f"{name}.log").is_file(), name

    again = start_local(*args)
    (endpoint,) = again.of_kind("proxy").values()
    got: set[str] = set()
    with SimpleConsumer(endpoint, group="payments-billing", topic="payments") as consumer:
        give_up = time.monotonic() + 60
        while got != kept and time.monotonic() < give_up:
            # Served at once: each shard's last leader stopped cleanly, so the one taking
            # over (most often the same replica) does not fence writes to reconcile.
            batch = consumer.receive(max_messages=32, invisible_duration_s=30, wait_s=2)
            consumer.ack(batch)
            got.update(m.message_id for m in batch)
    assert got == kept  # acknowledged sends survive the stop; the acked ones stay acked
    assert again.interrupt() == 0, again.output()
    assert [pid for pid in again.pids if _alive(pid)] == []


def test_a_child_that_dies_ends_the_cluster_with_exit_1_and_stops_the_rest(
    start_local: StartLocal,
) -> None:
    run = start_local("--brokers", "2", "--proxies", "1")
    b2 = run.children["b2"][2]
    os.kill(b2, signal.SIGKILL)
    assert run.process.wait(120) == 1, run.output()
    assert f"broker b2 (pid {b2}) was killed by SIGKILL" in run.stderr()
    assert [pid for pid in run.pids if _alive(pid)] == []
    # The logs say why, so a temporary data dir is kept after a failure.
    assert run.data_dir is not None and (run.data_dir / "b2.log").is_file()
    assert f"the logs stay in {run.data_dir}" in run.stderr()


def test_a_closed_stderr_does_not_keep_the_ordered_stop_from_running(
    start_local: StartLocal,
) -> None:
    run = start_local("--brokers", "1", "--proxies", "1", closed_stderr=True)
    assert run.interrupt() == 0
    assert [pid for pid in run.pids if _alive(pid)] == []
    assert run.data_dir is not None and not run.data_dir.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--brokers", "0"], "argument --brokers: 0 is out of range: allowed 1 to 16"),
        (["--brokers", "17"], "argument --brokers: 17 is out of range: allowed 1 to 16"),
        (["--brokers", "two"], "argument --brokers: 'two' is not a whole number"),
        (["--proxies", "9"], "argument --proxies: 9 is out of range: allowed 1 to 8"),
        (["--replicas", "6"], "argument --replicas: 6 is out of range: allowed 1 to 5"),
        (
            ["--brokers", "4", "--replicas", "5"],
            "--brokers 4 --replicas 5 would start 20 broker processes; at most 16",
        ),
        (["--set", "nonsense"], "--set 'nonsense' is not SECTION.KEY=VALUE"),
        (["--set", "pop.no_such=1"], "unknown setting pop.no_such"),
        (["--start-timeout", "0"], "--start-timeout 0 must be above 0"),
    ],
)
def test_bad_arguments_exit_2_saying_what_is_allowed(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = _cli(tmp_path, "cluster", "local", *args)
    assert result.returncode == 2, result
    assert message in result.stderr
    assert list(tmp_path.glob("popmq-cluster-*")) == []  # nothing was started


def test_a_data_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = _cli(tmp_path, "cluster", "local", "--data-dir", str(tmp_path / "file"))
    assert result.returncode == 2, result
    assert "is not a directory" in result.stderr


def test_without_etcd_it_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POPMQ_ETCD", str(tmp_path / "no-etcd-here"))
    result = _cli(tmp_path, "cluster", "local", "--brokers", "1", "--proxies", "1")
    assert result.returncode == 1, result
    assert "etcd is not installed: run `make setup`" in result.stderr
    assert "etcd-server" in result.stderr
    assert list(tmp_path.glob("popmq-cluster-*")) == []
