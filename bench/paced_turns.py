"""What one paced send costs the server in loop turns, callbacks, tasks and syscalls.

``python -m bench.paced_turns [--popmq-src CHECKOUT/src] [--rate 1000] [--seconds 3]``

Scenario 3b's paced sends (single 1 KiB messages, 8 senders on their own streams, round
robin) against ``popmq serve`` (``--flush sync``) and against the bench's grpc echo
server, each run under `bench.loop_probe`. Per request (the SDK coalesces sends made while
one is on the wire, so a loaded run has fewer requests than messages), for each:

- the loop's scheduling calls (`bench.loop_probe`): callbacks (``call_soon``; each task
  step and each future callback is one), thread wakes (``call_soon_threadsafe``), tasks and
  futures created, and which callbacks they were;
- per thread (its name from /proc): the syscalls it made (``perf trace -s``), among them
  ``epoll_wait`` of the loop's thread, which is one per event-loop iteration (a turn);
- CPU per thread (schedstat, and utime / stime from /proc/PID/task) a message and a request,
  in a window of its own, untraced (perf's tracing costs CPU; the counts do not depend on it).

``--popmq-src`` runs the server from another checkout's ``src`` (an earlier commit, for an
A/B); the probe and the load generator are this checkout's. Counts, not times, are the point:
they say which turns a send takes that the echo does not.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from bench.peers.servers import PopmqServer, ServerProcess
from bench.peers.targets import PopmqTarget, Sender
from bench.reference import EchoServer, stream_echo_sender
from bench.scenarios._common import body_of
from bench.scenarios.paced_cost import paced_sends

_REPO = Path(__file__).resolve().parents[1]
_TOPIC = "paced"


def _probe_env(src: Path | None, probe_file: Path) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(_REPO)]
    if src is not None:
        paths.insert(0, str(src))
    elif env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["BENCH_LOOP_PROBE"] = str(probe_file)
    return env


class _ProbedPopmq(PopmqServer):
    def __init__(self, src: Path | None, probe_file: Path) -> None:
        super().__init__(flush="sync")
        self._src = src
        self._probe_file = probe_file

    def _command(self, data_dir: Path) -> list[str]:
        return [sys.executable, "-m", "bench.loop_probe", "popmq", *super()._command(data_dir)[-7:]]

    def _env(self) -> dict[str, str] | None:
        return _probe_env(self._src, self._probe_file)


class _ProbedEcho(EchoServer):
    def __init__(self, probe_file: Path) -> None:
        super().__init__()
        self._probe_file = probe_file

    def _command(self, data_dir: Path) -> list[str]:
        return [sys.executable, "-m", "bench.loop_probe", "echo"]

    def _env(self) -> dict[str, str] | None:
        return _probe_env(None, self._probe_file)


def _threads(pid: int) -> dict[int, tuple[str, float, float, float]]:
    """tid -> (thread name, CPU seconds so far (schedstat, ns-exact), user and system CPU
    seconds so far (stat, in clock ticks))."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rpartition(")")[2].split()
            ran = int((task / "schedstat").read_text().split()[0]) / 1e9
            out[int(task.name)] = (
                name, ran, int(fields[11]) / ticks, int(fields[12]) / ticks
            )  # fmt: skip
    return out


def _probe_counts(pid: int, probe_file: Path) -> tuple[Counter[str], dict[str, str]]:
    """The probe's counters so far, and its Python threads' names by native id."""
    with contextlib.suppress(FileNotFoundError):
        probe_file.unlink()
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 10
    while not probe_file.exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the probed server did not write its counters")
        time.sleep(0.01)
    dumped = json.loads(probe_file.read_text())
    return Counter(dumped["counts"]), dumped["threads"]


_THREAD_HEAD = re.compile(r"^\s*(\S.*) \((\d+)\), (\d+) events")
_SYSCALL_ROW = re.compile(r"^\s+([a-z_0-9]+)\s+(\d+)\s+(\d+)\s")


def _parse_perf_summary(text: str) -> dict[int, Counter[str]]:
    """tid -> syscall -> calls, from ``perf trace -s`` output."""
    out: dict[int, Counter[str]] = {}
    current: Counter[str] | None = None
    for line in text.splitlines():
        head = _THREAD_HEAD.match(line)
        if head:
            current = out.setdefault(int(head.group(2)), Counter())
            continue
        row = _SYSCALL_ROW.match(line)
        if row and current is not None and row.group(1) != "syscall":
            current[row.group(1)] += int(row.group(2))
    return out


def _start_perf(pid: int, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["perf", "trace", "-s", "-p", str(pid), "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop_perf(perf: subprocess.Popen[bytes], out: Path) -> dict[int, Counter[str]]:
    perf.send_signal(signal.SIGINT)
    perf.wait(timeout=30)
    return _parse_perf_summary(out.read_text())


async def _saturating_sends(senders: list[Sender], *, seconds: float, body: bytes) -> list[float]:
    """Round trips (s) of each sender sending one message after another for `seconds`."""
    trips: list[float] = []
    end = time.perf_counter() + seconds

    async def loop(sender: Sender) -> None:
        while (began := time.perf_counter()) < end:
            await sender.send([body])
            trips.append(time.perf_counter() - began)

    await asyncio.gather(*(loop(sender) for sender in senders))
    return trips


async def _window(
    open_sender: Callable[[], AbstractAsyncContextManager[Sender]],
    pid: int,
    probe_file: Path,
    *,
    rate: int,
    seconds: float,
) -> dict[str, Any]:
    """`rate` 0: each sender sends one message after another (saturation)."""
    body = body_of(1024)

    async def load(senders: list[Sender], seconds: float) -> list[float]:
        if rate:
            return await paced_sends(senders, rate=rate, seconds=seconds, body=body)
        return await _saturating_sends(senders, seconds=seconds, body=body)

    async with contextlib.AsyncExitStack() as stack:
        senders = [await stack.enter_async_context(open_sender()) for _ in range(8)]
        await load(senders, 0.5)
        # Untraced: CPU per thread, and the probe's counters.
        cpu0 = _threads(pid)
        counts0, _ = _probe_counts(pid, probe_file)
        began = time.perf_counter()
        trips = await load(senders, seconds)
        wall = time.perf_counter() - began
        sent = len(trips)
        counts, py_threads = _probe_counts(pid, probe_file)
        counts -= counts0
        cpu1 = _threads(pid)
        # Traced: syscalls per thread.
        with tempfile.NamedTemporaryFile(prefix="perf-trace-", suffix=".txt") as out:
            perf = _start_perf(pid, Path(out.name))
            await asyncio.sleep(1.0)  # perf attaches to every thread
            before, _ = _probe_counts(pid, probe_file)
            traced_sent = len(await load(senders, seconds))
            after, _ = _probe_counts(pid, probe_file)
            traced = _stop_perf(perf, Path(out.name))
    traced_requests = _requests(after - before, traced_sent)
    requests = _requests(counts, sent)
    names = {tid: py_threads.get(str(tid), value[0]) for tid, value in cpu1.items()}
    cpu = {
        f"{names[tid]} ({'loop' if tid == pid else 'thread'})": (
            (cpu1[tid][1] - cpu0[tid][1]) / sent * 1e6,
            (cpu1[tid][2] - cpu0[tid][2]) / sent * 1e6,
            (cpu1[tid][3] - cpu0[tid][3]) / sent * 1e6,
        )
        for tid in cpu1
        if tid in cpu0 and cpu1[tid][1] > cpu0[tid][1]
    }
    syscalls: dict[str, dict[str, float]] = {}
    for tid, calls in traced.items():
        label = f"{names.get(tid, '?')} ({'loop' if tid == pid else 'thread'})"
        merged = syscalls.setdefault(label, {})
        for call, n in calls.items():
            merged[call] = merged.get(call, 0.0) + n / traced_requests
    trips.sort()
    return {
        "sent": sent,
        "requests": requests,
        "rate": sent / wall,
        "p50_ms": trips[len(trips) // 2] * 1e3,
        "p99_ms": trips[int(len(trips) * 0.99)] * 1e3,
        "cpu_us": cpu,
        "counts": {k: v / requests for k, v in counts.items()},
        "syscalls": syscalls,
    }


def _requests(counts: Counter[str], sent: int) -> int:
    """Requests the server took: the SDK coalesces sends made while one is on the wire, so
    a loaded run has fewer requests than messages (popmq's tasks for Broker.send count them;
    the echo's sender never coalesces)."""
    return counts.get("create_task Broker.send", 0) or sent


def _report(title: str, result: dict[str, Any]) -> str:
    per = result["sent"] / result["requests"]
    lines = [
        f"## {title}: {result['sent']:,} messages in {result['requests']:,} requests "
        f"({per:.2f} a request) in the untraced window, {result['rate']:,.0f} msg/s, "
        f"round trip p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms",
        "",
    ]
    lines.append(
        "CPU us a message by thread (schedstat), user / system (clock ticks), untraced "
        "window, the probe's own cost in; and a request:"
    )
    cpu = result["cpu_us"]
    for name, (ran, user, system) in sorted(cpu.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"  {ran:8.1f}  ({user:6.1f} / {system:6.1f})  {ran * per:8.1f}  {name}")
    total = sum(v[0] for v in cpu.values())
    lines.append(f"  {total:8.1f}  {'':17}  {total * per:8.1f}  all threads")
    lines.append("loop scheduling calls a request (bench.loop_probe):")
    for name, n in sorted(result["counts"].items(), key=lambda kv: (-kv[1], kv[0])):
        if n >= 0.005:
            lines.append(f"  {n:8.3f}  {name}")
    lines.append("syscalls a request by thread (perf trace -s, a traced window of its own):")
    for thread, calls in sorted(result["syscalls"].items()):
        total = sum(calls.values())
        if total < 0.01:
            continue
        lines.append(f"  {thread}: {total:.2f}")
        for call, n in sorted(calls.items(), key=lambda kv: -kv[1]):
            if n >= 0.005:
                lines.append(f"    {n:8.3f}  {call}")
    return "\n".join(lines)


async def _run_popmq(server: ServerProcess, probe_file: Path, rate: int, seconds: float) -> Any:
    target = PopmqTarget(server.endpoint)
    await target.create_topic(_TOPIC)
    return await _window(lambda: target.sender(_TOPIC), server.pid, probe_file,
                         rate=rate, seconds=seconds)  # fmt: skip


async def _run_echo(server: ServerProcess, probe_file: Path, rate: int, seconds: float) -> Any:
    def open_sender() -> AbstractAsyncContextManager[Sender]:
        return stream_echo_sender(server.endpoint)

    return await _window(open_sender, server.pid, probe_file, rate=rate, seconds=seconds)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.paced_turns", description=__doc__)
    parser.add_argument("--popmq-src", type=Path, help="run popmq serve from this src")
    parser.add_argument("--rate", type=int, default=1000, help="0: saturate (closed loop)")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--no-echo", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="popmq-turns-") as tmp:
        probe_file = Path(tmp) / "counts.json"
        print(f"load average: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
        load = f"{args.rate:,} msg/s" if args.rate else "saturated (8 closed-loop senders)"
        with _ProbedPopmq(args.popmq_src, probe_file) as popmq:
            result = asyncio.run(_run_popmq(popmq, probe_file, args.rate, args.seconds))
        print(_report(f"popmq serve --flush sync, {load}", result), flush=True)
        if not args.no_echo:
            with _ProbedEcho(probe_file) as echo:
                result = asyncio.run(_run_echo(echo, probe_file, args.rate, args.seconds))
            print(_report(f"grpc echo, {load}", result), flush=True)


if __name__ == "__main__":
    main()
