"""Scenario 7, revive storm: 100k messages popped and never acked (popmq).

4 consumers pop all of a pre-filled topic with one invisible time (30 s) and ack nothing.
When the deadlines pass, the revive loop writes every message to the group's retry queue;
the admin lag report's retry-queue max offset says how many are visible again, polled every
50 ms. Reported: the time from the *last* deadline until all are visible again (how far the
revive loop trails the clock), and the time from the first deadline (the storm's length,
since deadlines are spread over the popping). Meanwhile a probe consumer of another group and
topic pops (no wait) and acks every 20 ms; its pop latency during the storm is compared with
its latency before the popping began.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.peers.popmq_store import Backlog, prefill_store
from bench.peers.systems import launch
from bench.results import ScenarioResult, format_number, markdown_table, percentile
from bench.scenarios._common import body_of, with_notes
from popmq import AsyncAdmin, AsyncSimpleConsumer

__all__ = ["ReviveSettings", "main", "render", "run", "settings"]

NAME = "revive-storm"
TOPIC = "storm"
GROUP = "storm"
PROBE_TOPIC = "probe"
PROBE_GROUP = "probe"
_POLL_S = 0.05
_PROBE_INTERVAL_S = 0.02
_POP_CONSUMERS = 4
METRICS = (
    "popping s",
    "visible after last deadline s",
    "storm s",
    "probe p50 before ms",
    "probe p99 before ms",
    "probe p50 during ms",
    "probe p99 during ms",
)


@dataclass(frozen=True, kw_only=True)
class ReviveSettings:
    runs: int
    messages: int
    invisible_s: float
    baseline_s: float
    timeout_s: float
    """Give up waiting for the revive after this long past the last deadline."""
    body_bytes: int = 1024


def settings(quick: bool) -> ReviveSettings:
    if quick:
        return ReviveSettings(runs=1, messages=1_000, invisible_s=1.0, baseline_s=0.3, timeout_s=20)
    return ReviveSettings(runs=1, messages=100_000, invisible_s=30.0, baseline_s=3.0, timeout_s=120)


async def _pop_all(endpoint: str, config: ReviveSettings) -> tuple[float, float]:
    """Pop every message once without acking; return (first, last) pop time."""
    popped = 0
    first = last = 0.0

    async def worker() -> None:
        nonlocal popped, first, last
        async with AsyncSimpleConsumer(endpoint, group=GROUP, topic=TOPIC) as consumer:
            while popped < config.messages:
                started = time.perf_counter()
                messages = await consumer.receive(
                    max_messages=32, invisible_duration_s=config.invisible_s, wait_s=0
                )
                if not first:
                    first = started
                fresh = sum(1 for m in messages if m.delivery_attempt == 1)
                popped += fresh
                if fresh:
                    last = time.perf_counter()
                if not messages:
                    await asyncio.sleep(0.01)

    await asyncio.gather(*(worker() for _ in range(_POP_CONSUMERS)))
    return first, last


async def _revived(admin: AsyncAdmin) -> int:
    lags = await admin.get_group_lag(GROUP, TOPIC)
    return sum(q.max_offset for q in lags if q.retry)


async def measure(endpoint: str, config: ReviveSettings) -> dict[str, float]:
    probe_latencies: list[tuple[float, float]] = []  # (at, seconds)
    stop = asyncio.Event()

    async def probe() -> None:
        async with AsyncSimpleConsumer(endpoint, group=PROBE_GROUP, topic=PROBE_TOPIC) as consumer:
            while not stop.is_set():
                started = time.perf_counter()
                messages = await consumer.receive(max_messages=8, wait_s=0)
                probe_latencies.append((started, time.perf_counter() - started))
                await consumer.ack(messages)
                await asyncio.sleep(_PROBE_INTERVAL_S)

    probe_task = asyncio.create_task(probe())
    try:
        async with AsyncAdmin(endpoint) as admin:
            await admin.create_group(GROUP)
            await admin.create_group(PROBE_GROUP)
            baseline_from = time.perf_counter()
            await asyncio.sleep(config.baseline_s)
            first, last = await _pop_all(endpoint, config)
            first_deadline = first + config.invisible_s
            last_deadline = last + config.invisible_s
            await asyncio.sleep(max(0.0, first_deadline - time.perf_counter()))
            give_up = last_deadline + config.timeout_s
            while await _revived(admin) < config.messages:
                if time.perf_counter() > give_up:
                    raise TimeoutError(
                        f"only {await _revived(admin):,} of {config.messages:,} revived "
                        f"{config.timeout_s:g} s after the last deadline"
                    )
                await asyncio.sleep(_POLL_S)
            visible = time.perf_counter()
    finally:
        stop.set()
        await probe_task
    before = sorted(s for at, s in probe_latencies if baseline_from <= at < first)
    during = sorted(s for at, s in probe_latencies if first_deadline <= at <= visible)
    return {
        "popping s": last - first,
        "visible after last deadline s": visible - last_deadline,
        "storm s": visible - first_deadline,
        "probe p50 before ms": percentile(before, 0.5) * 1000,
        "probe p99 before ms": percentile(before, 0.99) * 1000,
        "probe p50 during ms": percentile(during, 0.5) * 1000,
        "probe p99 during ms": percentile(during, 0.99) * 1000,
    }


def run(config: ReviveSettings, *, require_peers: bool = False) -> ScenarioResult:
    began = time.perf_counter()
    result = ScenarioResult(NAME, "7. Revive storm", settings=asdict(config))
    body = body_of(config.body_bytes)
    probe_backlog = 20_000 if config.messages >= 10_000 else 2_000

    def fill(data_dir: Path) -> None:
        prefill_store(
            data_dir,
            {TOPIC: Backlog(8, config.messages), PROBE_TOPIC: Backlog(8, probe_backlog)},
            body,
        )

    case = f"{config.messages:,} popped, never acked"
    for _ in range(config.runs):
        with launch("popmq", prepare=fill) as launched:
            values = asyncio.run(measure(launched.server.endpoint, config))
        for metric, value in values.items():
            result.add(case, "popmq", metric, value)
    result.notes.append(
        f"Invisible time {config.invisible_s:g} s; the probe pops up to 8 (no wait) and acks "
        f"every {_PROBE_INTERVAL_S * 1000:g} ms on its own topic and group. If popping took "
        "longer than the invisible time, the storm overlapped it."
    )
    result.seconds = time.perf_counter() - began
    return result


def render(result: ScenarioResult) -> str:
    rows = [
        [case, *(format_number(result.median(case, "popmq", m)) for m in METRICS)]
        for case in result.cases()
    ]
    table = markdown_table(["case", *METRICS], rows)
    lines = []
    for case in result.cases():
        during = result.median(case, "popmq", "probe p99 during ms")
        before = result.median(case, "popmq", "probe p99 before ms")
        if before:
            lines.append(f"Probe pop p99 during ÷ before the storm: **{during / before:.2f}x**")
    return with_notes("\n\n".join([table, *lines]), result)


def main(*, quick: bool) -> str:
    return render(run(settings(quick)))
