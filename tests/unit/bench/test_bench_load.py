"""bench.load.measure_rate bounds what a measurement takes, so a fast machine cannot run a
scenario's backlog dry during its warm-ups (docs/benchmarks.md of 2026-11-24 had a 10k
backlog measured at 0 msg/s that way); its observer and CpuWindow give a window's CPU per
item."""

from __future__ import annotations

import asyncio
import math
import os
import time

import pytest

from bench.load import CPU_CLIENT, CpuWindow, Meter, Worker, measure_rate


def _fast_worker(done: list[int]) -> Worker:
    async def run(meter: Meter) -> None:
        while meter.running:
            await asyncio.sleep(0.001)
            meter.add(1)
        done.append(meter.total)

    return run


def test_a_limit_ends_the_warm_up_and_the_window_long_before_their_durations() -> None:
    done: list[int] = []
    began = time.perf_counter()
    rate = asyncio.run(measure_rate([_fast_worker(done)], warmup_s=30.0, duration_s=30.0, limit=50))
    assert time.perf_counter() - began < 10.0  # neither phase waited for its 30 s
    assert rate > 0
    (total,) = done
    # 50 warming up, 50 counted, and what came between two checks (every 10 ms)
    assert 100 <= total < 150


def test_without_a_limit_the_warm_up_lasts_its_duration() -> None:
    done: list[int] = []
    began = time.perf_counter()
    asyncio.run(measure_rate([_fast_worker(done)], warmup_s=0.3, duration_s=0.1))
    assert time.perf_counter() - began >= 0.4


class _Recorder:
    def __init__(self, meter_counts: list[int]) -> None:
        self.events: list[str] = []
        self.meter_counts = meter_counts

    def window_started(self) -> None:
        self.events.append("started")

    def window_ended(self, count: int) -> None:
        self.events.append("ended")
        self.meter_counts.append(count)


def test_the_observer_sees_the_window_and_the_count_the_rate_is_made_of() -> None:
    counts: list[int] = []
    recorder = _Recorder(counts)
    done: list[int] = []
    rate = asyncio.run(
        measure_rate(
            # Durations far beyond what 40 items take, so both phases end on the limit even
            # on a loaded machine (where each 1 ms sleep may take ten).
            [_fast_worker(done)],
            warmup_s=30.0,
            duration_s=30.0,
            limit=40,
            observer=recorder,
        )
    )
    assert recorder.events == ["started", "ended"]
    (count,) = counts
    assert count >= 40  # the window ended on the limit, not before
    assert count < done[0]  # the warm-up's items are not in it
    assert rate > 0


def test_cpu_window_charges_each_process_its_own_cpu_per_item() -> None:
    window = CpuWindow({"me": os.getpid()})
    window.window_started()
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:  # burn 0.2 s of CPU in this process
        pass
    window.window_ended(1_000)
    # /proc/PID/stat counts in clock ticks (10 ms); process_time is exact.
    assert window.cpu_s[CPU_CLIENT] >= 0.2
    assert abs(window.cpu_s["me"] - window.cpu_s[CPU_CLIENT]) <= 0.05
    assert window.us_per_item(CPU_CLIENT) == window.cpu_s[CPU_CLIENT] / 1_000 * 1e6
    assert window.cores_busy() > 0


def test_cpu_window_refuses_misuse() -> None:
    with pytest.raises(ValueError, match="'client' names this process"):
        CpuWindow({CPU_CLIENT: os.getpid()})
    with pytest.raises(RuntimeError, match="before window_started"):
        CpuWindow({}).window_ended(1)
    empty = CpuWindow({})
    empty.window_started()
    empty.window_ended(0)
    assert math.isnan(empty.us_per_item(CPU_CLIENT))
