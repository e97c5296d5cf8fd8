"""Scenario 1, produce: batch 1 and 32, 1 and 8 concurrent producers, 1 KiB bodies.

Every producer has its own connection and sends one batch at a time, waiting for the
system's acknowledgement (popmq: after the fsync; Redis: after the AOF write, fsynced with
``always``; NATS: after the stream stored it). The reference rows bound what is possible:
raw RocksDB synced WriteBatch puts (one writer) and a bare grpc.aio echo of the same request.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.load import Meter, WindowObserver, Worker, measure_rate
from bench.peers.systems import ALL_SYSTEMS, choose_systems, launch
from bench.peers.targets import Target
from bench.profile import PySpy
from bench.reference import EchoServer, echo_rate, rocksdb_rate
from bench.results import ScenarioResult
from bench.scenarios._common import body_of, ratio_table, with_notes

__all__ = ["ProduceSettings", "main", "render", "run", "settings"]

NAME = "produce"
ROCKSDB = "rocksdb raw"
ECHO = "grpc echo"
TOPIC = "produce"


@dataclass(frozen=True, kw_only=True)
class ProduceSettings:
    runs: int
    warmup_s: float
    duration_s: float
    body_bytes: int = 1024
    cases: tuple[tuple[int, int], ...] = ((1, 1), (32, 1), (1, 8), (32, 8))
    """(batch, producers) pairs."""


def settings(quick: bool) -> ProduceSettings:
    if quick:
        return ProduceSettings(runs=1, warmup_s=0.1, duration_s=0.3)
    return ProduceSettings(runs=3, warmup_s=0.3, duration_s=1.5)


def case_name(batch: int, producers: int) -> str:
    return f"batch {batch} · {producers} producer{'s' if producers > 1 else ''}"


async def produce_rate(
    target: Target,
    *,
    batch: int,
    producers: int,
    body: bytes,
    warmup_s: float,
    duration_s: float,
    observer: WindowObserver | None = None,
) -> float:
    """Acknowledged messages per second from ``producers`` concurrent producers
    (``observer``: see ``measure_rate``)."""
    bodies = [body] * batch

    def worker() -> Worker:
        async def run(meter: Meter) -> None:
            async with target.sender(TOPIC) as sender:
                while meter.running:
                    await sender.send(bodies)
                    meter.add(batch)

        return run

    return await measure_rate(
        [worker() for _ in range(producers)],
        warmup_s=warmup_s,
        duration_s=duration_s,
        observer=observer,
    )


def run(
    config: ProduceSettings,
    *,
    systems: tuple[str, ...] = ALL_SYSTEMS,
    require_peers: bool = False,
    profile_out: Path | None = None,
) -> ScenarioResult:
    """Measure every system and the references, interleaved run by run.

    With ``profile_out``, one more popmq run of the batch 32 · 8 producers case is recorded
    with py-spy (not counted in the table).
    """
    began = time.perf_counter()
    chosen, notes = choose_systems(systems, require_peers=require_peers)
    result = ScenarioResult(NAME, "1. Produce", settings=asdict(config), notes=notes)
    body = body_of(config.body_bytes)
    for _ in range(config.runs):
        for system in chosen:
            with launch(system) as launched:
                asyncio.run(launched.target.create_topic(TOPIC))
                for batch, producers in config.cases:
                    rate = asyncio.run(
                        produce_rate(
                            launched.target,
                            batch=batch,
                            producers=producers,
                            body=body,
                            warmup_s=config.warmup_s,
                            duration_s=config.duration_s,
                        )
                    )
                    result.add(case_name(batch, producers), system, "msg/s", rate)
        with EchoServer() as echo:
            for batch, producers in config.cases:
                rate = asyncio.run(
                    echo_rate(
                        echo.endpoint,
                        batch=batch,
                        callers=producers,
                        body=body,
                        warmup_s=config.warmup_s,
                        duration_s=config.duration_s,
                    )
                )
                result.add(case_name(batch, producers), ECHO, "msg/s", rate)
        for batch, producers in config.cases:
            if producers == 1:  # one writer: rocksdict holds the GIL through a write
                rate = rocksdb_rate(batch=batch, seconds=config.duration_s, body=body)
                result.add(case_name(batch, producers), ROCKSDB, "msg/s", rate)
    if profile_out is not None and "popmq" in chosen:
        with launch("popmq") as launched:
            asyncio.run(launched.target.create_topic(TOPIC))
            with PySpy(launched.server.pid, profile_out):
                asyncio.run(
                    produce_rate(
                        launched.target,
                        batch=32,
                        producers=8,
                        body=body,
                        warmup_s=0.0,
                        duration_s=max(config.duration_s, 5.0),
                    )
                )
    result.notes.append(
        "rocksdb raw is one writer (rocksdict holds the GIL through a write, so more threads "
        "would only queue); grpc echo returns the same SendMessagesRequest bytes it receives."
    )
    result.seconds = time.perf_counter() - began
    return result


def render(result: ScenarioResult) -> str:
    table = ratio_table(
        result,
        "msg/s",
        columns=["popmq", "redis-always", "redis-everysec", "nats", ROCKSDB, ECHO],
        ratio_to=["redis-always", "redis-everysec", "nats", ROCKSDB, ECHO],
    )
    return with_notes(table, result)


def main(*, quick: bool) -> str:
    return render(run(settings(quick)))
