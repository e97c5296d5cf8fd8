"""Scenario 6, consumers beyond queues: a 4-queue topic, 4 vs 16 consumers (popmq).

Each consumer receives up to 32, "works" 5 ms per message (an asyncio sleep: waiting on
something, as most consumers do), then acks the batch. With POP, consumers are not bound to
queues, so 16 consumers on 4 queues should do close to 4x the work of 4; a queue-bound
(Kafka-style) group would stay at 4 consumers' worth. The ratio is taken per run.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.peers.popmq_store import Backlog, prefill_store
from bench.peers.systems import launch
from bench.results import ScenarioResult, format_number, markdown_table
from bench.scenarios._common import body_of, format_ratio, with_notes
from bench.scenarios.pop_ack import consume_rate

__all__ = ["ConsumersSettings", "main", "render", "run", "settings"]

NAME = "consumers-beyond-queues"
TOPIC = "fourqueues"
GROUP = "bench"


@dataclass(frozen=True, kw_only=True)
class ConsumersSettings:
    runs: int
    backlog: int
    warmup_s: float
    duration_s: float
    queues: int = 4
    consumers: tuple[int, int] = (4, 16)
    work_s: float = 0.005
    batch: int = 32
    body_bytes: int = 1024


def settings(quick: bool) -> ConsumersSettings:
    if quick:
        return ConsumersSettings(runs=1, backlog=3_000, warmup_s=0.1, duration_s=0.4)
    return ConsumersSettings(runs=3, backlog=60_000, warmup_s=0.5, duration_s=3.0)


def run(config: ConsumersSettings, *, require_peers: bool = False) -> ScenarioResult:
    began = time.perf_counter()
    result = ScenarioResult(NAME, "6. Consumers beyond queues", settings=asdict(config))
    body = body_of(config.body_bytes)

    def fill(data_dir: Path) -> None:
        prefill_store(data_dir, {TOPIC: Backlog(config.queues, config.backlog)}, body)

    with launch("popmq", prepare=fill) as launched:
        asyncio.run(launched.target.create_group(TOPIC, GROUP))
        for _ in range(config.runs):
            for consumers in config.consumers:
                rate = asyncio.run(
                    consume_rate(
                        launched.target,
                        topic=TOPIC,
                        group=GROUP,
                        consumers=consumers,
                        batch=config.batch,
                        warmup_s=config.warmup_s,
                        duration_s=config.duration_s,
                        work_s=config.work_s,
                    )
                ).rate
                result.add(f"{consumers} consumers", "popmq", "msg/s", rate)
    ideal = 1 / config.work_s
    result.notes.append(
        f"{config.queues} queues, {config.work_s * 1000:g} ms of work per message: one "
        f"consumer can do at most {ideal:,.0f} msg/s, so {config.consumers[0]} consumers at "
        f"most {ideal * config.consumers[0]:,.0f} and {config.consumers[1]} at most "
        f"{ideal * config.consumers[1]:,.0f}."
    )
    result.seconds = time.perf_counter() - began
    return result


def render(result: ScenarioResult) -> str:
    cases = result.cases()
    rows = [[case, format_number(result.median(case, "popmq", "msg/s"))] for case in cases]
    table = markdown_table(["consumers", "popmq msg/s (median)"], rows)
    if len(cases) == 2:
        ratio = result.cross_ratio("msg/s", cases[1], cases[0])
        table += f"\n\nRatio {cases[1]} ÷ {cases[0]} (median of per-run ratios): "
        table += f"**{format_ratio(ratio)}**"
    return with_notes(table, result)


def main(*, quick: bool) -> str:
    return render(run(settings(quick)))
