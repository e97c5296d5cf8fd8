"""Scenario 5, backlog independence: pop + ack rate with 10k vs 2M messages of backlog (popmq).

One server holds both topics (written by the embedded broker before it starts). Each run
measures 4 consumers (batch 32) on each topic, the two in alternating order. A window and its
warm-up each stop after their duration or after a quarter of the small backlog (on both
topics, so the two windows are alike), and the small topic is topped up through the SDK after
each window to its size again (by the group's lag), so both stay at their size. The ratio
large/small is taken per run; near 1 means the pop path does not slow down as the store grows.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.peers.popmq_store import Backlog, prefill_store
from bench.peers.systems import launch
from bench.peers.targets import prefill
from bench.results import ScenarioResult, format_number, markdown_table
from bench.scenarios._common import body_of, format_ratio, with_notes
from bench.scenarios.pop_ack import consume_rate
from popmq import AsyncAdmin

__all__ = ["BacklogSettings", "main", "render", "run", "settings"]

NAME = "backlog"
GROUP = "bench"


@dataclass(frozen=True, kw_only=True)
class BacklogSettings:
    runs: int
    small: int
    large: int
    warmup_s: float
    duration_s: float
    consumers: int = 4
    batch: int = 32
    body_bytes: int = 1024


def settings(quick: bool) -> BacklogSettings:
    if quick:
        return BacklogSettings(runs=1, small=4_000, large=20_000, warmup_s=0.1, duration_s=0.3)
    return BacklogSettings(runs=9, small=10_000, large=2_000_000, warmup_s=0.3, duration_s=2.0)


async def _backlog_left(endpoint: str, topic: str) -> int:
    """Messages of ``topic`` the group has not finished (its lag over the normal queues)."""
    async with AsyncAdmin(endpoint) as admin:
        return sum(q.lag for q in await admin.get_group_lag(GROUP, topic) if not q.retry)


def run(config: BacklogSettings, *, require_peers: bool = False) -> ScenarioResult:
    began = time.perf_counter()
    result = ScenarioResult(NAME, "5. Backlog independence", settings=asdict(config))
    body = body_of(config.body_bytes)
    topics = {"small": config.small, "large": config.large}
    limit = config.small // 4

    def fill(data_dir: Path) -> None:
        prefill_store(data_dir, {t: Backlog(8, n) for t, n in topics.items()}, body)

    filled = time.perf_counter()
    with launch("popmq", prepare=fill) as launched:
        filled = time.perf_counter() - filled
        target = launched.target
        for topic in topics:
            asyncio.run(target.create_group(topic, GROUP))
        for run_index in range(config.runs):
            # Alternate which backlog goes first, so drift within a run cancels out.
            order = list(topics.items())
            for topic, size in order if run_index % 2 == 0 else order[::-1]:
                rate = asyncio.run(
                    consume_rate(
                        target,
                        topic=topic,
                        group=GROUP,
                        consumers=config.consumers,
                        batch=config.batch,
                        warmup_s=config.warmup_s,
                        duration_s=config.duration_s,
                        limit=limit,
                    )
                ).rate
                result.add(f"{size:,} backlog", "popmq", "msg/s", rate)
                if topic == "small":  # back to its size (the warm-up took some too)
                    left = asyncio.run(_backlog_left(launched.server.endpoint, topic))
                    if left < size:
                        asyncio.run(prefill(target, topic, size - left, body))
    result.notes.append(
        f"{config.consumers} consumers, batch {config.batch}; each window (and its warm-up) "
        f"stops after {config.duration_s:g} s ({config.warmup_s:g} s) or {limit:,} messages. "
        "Pre-filling both topics took "
        f"{filled:.0f} s (embedded broker, not timed)."
    )
    result.seconds = time.perf_counter() - began
    return result


def render(result: ScenarioResult) -> str:
    cases = result.cases()
    rows = [[case, format_number(result.median(case, "popmq", "msg/s"))] for case in cases]
    table = markdown_table(["backlog", "popmq pop+ack msg/s (median)"], rows)
    if len(cases) == 2:
        ratio = result.cross_ratio("msg/s", cases[1], cases[0])
        table += f"\n\nRatio {cases[1]} ÷ {cases[0]} (median of per-run ratios): "
        table += f"**{format_ratio(ratio)}**"
    return with_notes(table, result)


def main(*, quick: bool) -> str:
    return render(run(settings(quick)))
