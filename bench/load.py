"""Load generation and measurement helpers shared by the scenarios.

Throughput is counted over a fixed window after a warm-up (connections open, caches warm),
by workers that loop until told to stop. Server RSS and CPU come from /proc, because the
server is a child process we know the pid of (no psutil needed).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import platform
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "CPU_CLIENT",
    "CpuWindow",
    "Meter",
    "ProcSample",
    "WindowObserver",
    "Worker",
    "machine_info",
    "measure_rate",
    "proc_sample",
]


class Meter:
    """Shared by the workers of one measurement: whether to go on, and what to count."""

    def __init__(self) -> None:
        self.running = True
        self.counting = False
        self.count = 0
        """Items done inside the measured window."""
        self.total = 0
        """Items done since the start, warm-up included."""

    def add(self, n: int) -> None:
        self.total += n
        if self.counting:
            self.count += n


Worker = Callable[[Meter], Coroutine[Any, Any, None]]


class WindowObserver(Protocol):
    """Told when ``measure_rate``'s measured window starts and ends (e.g. to read CPU)."""

    def window_started(self) -> None: ...

    def window_ended(self, count: int) -> None:
        """``count``: the items counted in the window."""


async def measure_rate(
    workers: Sequence[Worker],
    *,
    warmup_s: float,
    duration_s: float,
    limit: int | None = None,
    observer: WindowObserver | None = None,
) -> float:
    """Run the workers; return what they counted per second during the window.

    The warm-up ends after ``warmup_s`` or once ``limit`` items were done in it; the window
    after ``duration_s``, once ``limit`` items were counted in it, or when every worker
    returned. So a measurement takes at most twice ``limit`` items (plus what the workers
    hold when told to stop), however fast the machine: a caller sizes its backlog by that.
    A worker's exception is raised here. ``observer`` is told right as the window starts
    and ends (not after an error).
    """
    meter = Meter()
    tasks = [asyncio.create_task(worker(meter)) for worker in workers]

    def warm() -> bool:
        return limit is not None and meter.total >= limit

    def reached() -> bool:
        return limit is not None and meter.count >= limit

    try:
        await _wait(tasks, warmup_s, warm)
        meter.counting = True
        if observer is not None:
            observer.window_started()
        started = time.perf_counter()
        await _wait(tasks, duration_s, reached)
        elapsed = time.perf_counter() - started
        meter.counting = False
        if observer is not None:
            observer.window_ended(meter.count)
        meter.running = False
        await asyncio.gather(*tasks)
    finally:
        meter.running = False
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return meter.count / elapsed if elapsed > 0 else 0.0


async def _wait(tasks: list[asyncio.Task[None]], seconds: float, done: Callable[[], bool]) -> None:
    deadline = time.perf_counter() + seconds
    while not done():
        left = deadline - time.perf_counter()
        if left <= 0:
            return
        finished, _ = await asyncio.wait(tasks, timeout=min(left, 0.01))
        for task in finished:
            task.result()  # raises a worker's error at once
        if len(finished) == len(tasks):
            return


@dataclass(frozen=True, slots=True)
class ProcSample:
    """A process's resident memory and consumed CPU time at one moment."""

    at: float
    rss_bytes: int
    cpu_s: float

    def cpu_share_since(self, earlier: ProcSample) -> float:
        """CPU used between two samples, as a fraction of one core."""
        wall = self.at - earlier.at
        return (self.cpu_s - earlier.cpu_s) / wall if wall > 0 else 0.0


def proc_sample(pid: int) -> ProcSample:
    """RSS (VmRSS) and user+system CPU seconds of ``pid``, from /proc (Linux)."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
            break
    # Fields after the command name (which may hold spaces) start after the last ")".
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return ProcSample(time.perf_counter(), rss, cpu)


def thread_cpu_s(pid: int) -> dict[int, tuple[str, float]]:
    """Each thread of ``pid`` (its tid): its name and user+system CPU seconds so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # ended since the listing
            stat = (task / "stat").read_text()
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat.rpartition(")")[2].split()
            found[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / ticks)
    return found


def cpu_s_by_thread_name(
    before: Mapping[int, tuple[str, float]], after: Mapping[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds between two ``thread_cpu_s`` readings, summed by thread name (threads
    started in between count from zero)."""
    used: dict[str, float] = {}
    for tid, (name, now) in after.items():
        used[name] = used.get(name, 0.0) + now - before.get(tid, (name, 0.0))[1]
    return used


CPU_CLIENT = "client"
"""``CpuWindow``'s name for this process (the load generator)."""


class CpuWindow:
    """CPU seconds that given processes, and this one, used over a window, per item.

    A ``WindowObserver`` for ``measure_rate``, or called by hand around any window. A
    process's CPU is its utime + stime from /proc/PID/stat (every thread); this process's
    is ``time.process_time()``.
    """

    def __init__(self, pids: Mapping[str, int]) -> None:
        """``pids``: name -> pid of each process to read (not ``CPU_CLIENT``)."""
        if CPU_CLIENT in pids:
            raise ValueError(f"{CPU_CLIENT!r} names this process; give the others other names")
        self.pids = dict(pids)
        self.cpu_s: dict[str, float] = {}
        """Name -> CPU seconds used in the window (``CPU_CLIENT`` included), once ended."""
        self.count = 0
        self.wall_s = 0.0
        self._start: dict[str, float] = {}
        self._started_at = 0.0

    def _now(self) -> dict[str, float]:
        now = {name: proc_sample(pid).cpu_s for name, pid in self.pids.items()}
        now[CPU_CLIENT] = time.process_time()
        return now

    def window_started(self) -> None:
        self._start = self._now()
        self._started_at = time.perf_counter()

    def window_ended(self, count: int) -> None:
        if not self._start:
            raise RuntimeError("window_ended before window_started")
        self.wall_s = time.perf_counter() - self._started_at
        end = self._now()
        self.cpu_s = {name: end[name] - self._start[name] for name in end}
        self.count = count

    def us_per_item(self, name: str) -> float:
        """Microseconds of ``name``'s CPU per item counted; NaN when nothing was counted."""
        return self.cpu_s[name] / self.count * 1e6 if self.count else math.nan

    def cores_busy(self) -> float:
        """All the processes' CPU over the window's wall time (this process's included)."""
        return sum(self.cpu_s.values()) / self.wall_s if self.wall_s > 0 else math.nan


def machine_info() -> dict[str, str]:
    """Cores, CPU model, memory, OS and Python: the doc states them with every table."""
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    memory = ""
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        total_kib = int(meminfo.read_text().split()[1])
        memory = f"{total_kib / 1024 / 1024:.0f} GiB"
    load = ""
    if hasattr(os, "getloadavg"):
        load = " / ".join(f"{v:.1f}" for v in os.getloadavg())
    return {
        "cores": str(os.cpu_count() or 0),
        "cpu": model,
        "memory": memory,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "load": load,
    }
