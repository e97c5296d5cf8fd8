"""bench.load.measure_rate bounds what a measurement takes, so a fast machine cannot run a
scenario's backlog dry during its warm-ups (docs/benchmarks.md of 2026-11-24 had a 10k
backlog measured at 0 msg/s that way)."""

from __future__ import annotations

import asyncio
import time

from bench.load import Meter, Worker, measure_rate


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
