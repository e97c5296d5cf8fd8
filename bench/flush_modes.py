"""Send throughput with flush = sync vs async, and the group-commit batch size achieved.

The real server runs in this process (its own loop thread, a temp data dir), so its writer's
batch counters can be read; the producers run in a spawned process (no shared GIL), as
AsyncProducer clients over gRPC on loopback, each sending one message per call so that group
commit is what batches the fsyncs.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from popmq import Admin, AsyncProducer
from popmq.broker_core.config import BrokerConfig, StoreConfig
from tests.support.server_thread import ServerThread


@dataclass(frozen=True)
class FlushResult:
    flush: str
    producers: int
    messages: int
    seconds: float
    batches: int
    synced_batches: int

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    @property
    def jobs_per_batch(self) -> float:
        return self.messages / max(1, self.batches)


def _load(endpoint: str, producers: int, seconds: float, body_bytes: int) -> int:
    """Runs in a separate process, so clients and server do not share a GIL."""

    async def load() -> int:
        body = b"x" * body_bytes
        sent = 0
        deadline = time.perf_counter() + seconds

        async def producer() -> None:
            nonlocal sent
            async with AsyncProducer(endpoint) as client:
                while time.perf_counter() < deadline:
                    await client.send("bench", body)
                    sent += 1

        await asyncio.gather(*(producer() for _ in range(producers)))
        return sent

    return asyncio.run(load())


def run_once(
    flush: Literal["sync", "async"], *, producers: int, seconds: float, body_bytes: int = 1024
) -> FlushResult:
    with tempfile.TemporaryDirectory(prefix="popmq-bench-") as tmp:
        config = BrokerConfig(store=StoreConfig(data_dir=Path(tmp), flush=flush))
        server = ServerThread(Path(tmp) / "data", config)
        endpoint = server.start()
        try:
            with Admin(endpoint) as admin:
                admin.create_topic("bench", queues=8)
            stats = server.broker.writer.stats
            before = (stats.batches, stats.synced_batches)
            context = multiprocessing.get_context("spawn")
            with context.Pool(1) as pool:
                started = time.perf_counter()
                messages = pool.apply(_load, (endpoint, producers, seconds, body_bytes))
                elapsed = time.perf_counter() - started
            batches = stats.batches - before[0]
            synced = stats.synced_batches - before[1]
        finally:
            server.stop()
    return FlushResult(flush, producers, messages, min(elapsed, seconds), batches, synced)


def main(*, quick: bool) -> str:
    seconds = 0.5 if quick else 5.0
    runs = 1 if quick else 3
    lines = [
        f"| flush | producers | msg/s (median of {runs}) | messages per write batch "
        "| synced batches |",
        "|---|---|---|---|---|",
    ]
    medians: dict[tuple[str, int], float] = {}
    for producers in (1, 8):
        for flush in ("sync", "async"):
            results = [run_once(flush, producers=producers, seconds=seconds) for _ in range(runs)]
            rate = statistics.median(r.rate for r in results)
            medians[(flush, producers)] = rate
            per_batch = statistics.median(r.jobs_per_batch for r in results)
            synced = statistics.median(r.synced_batches for r in results)
            lines.append(
                f"| {flush} | {producers} | {rate:,.0f} | {per_batch:.1f} | {synced:,.0f} |"
            )
    for producers in (1, 8):
        ratio = medians[("sync", producers)] / medians[("async", producers)]
        lines.append(f"\nsync/async throughput ratio with {producers} producer(s): {ratio:.2f}")
    return "\n".join(lines)
