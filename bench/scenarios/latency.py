"""Scenario 3, end-to-end latency: 1,000 msg/s steady for 20 s, consumers long-polling.

A second, lighter load (300 msg/s for 10 s) shows latency where every system keeps up.

A paced producer schedules one message per tick and sends each on its own task, over 8
connections used in turn, so a slow acknowledgement does not delay the next send. At most
256 sends are unfinished at once (a producer's in-flight window; above about 1,000 pending
calls grpc.aio servers start cancelling them); past that the schedule slips, and what is still
unsent when the schedule ends is never sent ("sent" is the share of the rate a system took,
"delivered" the share of those received). Latency is
measured from the *scheduled* send time to the moment the receive returned, so a system that
falls behind the rate shows it in its latency instead of hiding it (no coordinated omission).
Both times come from this process's monotonic clock (the scheduled time travels in the
body). Two consumers long-poll (up to 32 per receive, 1 s wait) and ack. Messages of the
first second are warm-up and not recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from dataclasses import asdict, dataclass

from bench.peers.systems import ALL_SYSTEMS, choose_systems, launch
from bench.peers.targets import Sender, Target
from bench.results import ScenarioResult, format_number, markdown_table, percentile
from bench.scenarios._common import body_of, format_ratio, with_notes

__all__ = ["LatencySettings", "main", "measure_latencies", "render", "run", "settings"]

NAME = "e2e-latency"
TOPIC = "latency"
GROUP = "bench"
_STAMP = struct.Struct(">dB")  # send time (perf_counter seconds), recorded flag
_SENDERS = 8
_MAX_IN_FLIGHT = 256
_DRAIN_TIMEOUT_S = 10.0
METRICS = ("p50 ms", "p99 ms", "p99.9 ms")


@dataclass(frozen=True, kw_only=True)
class LatencySettings:
    runs: int
    loads: tuple[tuple[int, float], ...]
    """(messages per second, recorded seconds after the warm-up), one case each."""
    warmup_s: float
    consumers: int = 2
    batch: int = 32
    body_bytes: int = 1024


def settings(quick: bool) -> LatencySettings:
    if quick:
        return LatencySettings(runs=1, loads=((200, 0.5),), warmup_s=0.2)
    return LatencySettings(runs=3, loads=((1000, 20.0), (300, 10.0)), warmup_s=1.0)


@dataclass(frozen=True, slots=True)
class LatencySample:
    latencies_s: list[float]
    """Sorted."""
    sent: int
    """Recorded messages sent."""
    scheduled: int
    """Recorded messages the schedule asked for."""


async def measure_latencies(
    target: Target, config: LatencySettings, *, rate: int, duration_s: float
) -> LatencySample:
    """Run one paced load against a target whose topic and group exist."""
    pad = body_of(config.body_bytes)[_STAMP.size :]
    latencies: list[float] = []
    scheduled = round(rate * duration_s)
    expected = scheduled  # lowered to what was sent once the producer is done
    producing = True
    stop = asyncio.Event()

    async def consume(index: int) -> None:
        async with target.receiver(TOPIC, GROUP, f"c{index}") as receiver:
            while not stop.is_set():
                messages = await receiver.receive(config.batch, 1.0)
                now = time.perf_counter()
                for message in messages:
                    sent_at, recorded = _STAMP.unpack_from(message.body)
                    if recorded:
                        latencies.append(now - sent_at)
                await receiver.ack(messages)
                if not producing and len(latencies) >= expected:
                    stop.set()

    async def produce(senders: list[Sender]) -> int:
        interval = 1.0 / rate
        total = round(rate * (config.warmup_s + duration_s))
        warmup = total - scheduled
        window = asyncio.Semaphore(_MAX_IN_FLIGHT)
        tasks: list[asyncio.Task[None]] = []
        sent = 0

        async def send(sender: Sender, body: bytes) -> None:
            try:
                await sender.send([body])
            finally:
                window.release()

        start = time.perf_counter()
        end = start + total * interval
        for i in range(total):
            due = start + i * interval
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await window.acquire()
            if time.perf_counter() > end:  # behind schedule: the rest is never sent
                window.release()
                break
            body = _STAMP.pack(due, i >= warmup) + pad
            tasks.append(asyncio.create_task(send(senders[i % len(senders)], body)))
            sent += i >= warmup
        await asyncio.gather(*tasks)
        return sent

    consumers = [asyncio.create_task(consume(i)) for i in range(config.consumers)]
    try:
        async with contextlib.AsyncExitStack() as stack:
            senders = [
                await stack.enter_async_context(target.sender(TOPIC)) for _ in range(_SENDERS)
            ]
            sent = await produce(senders)
        expected = sent
        producing = False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_wait_any(stop, consumers), _DRAIN_TIMEOUT_S)
        stop.set()
        await asyncio.gather(*consumers)
    finally:
        stop.set()
        for task in consumers:
            task.cancel()
        await asyncio.gather(*consumers, return_exceptions=True)
    return LatencySample(sorted(latencies), sent, scheduled)


async def _wait_any(stop: asyncio.Event, tasks: list[asyncio.Task[None]]) -> None:
    """Until ``stop`` is set or a consumer ended (with its error raised)."""
    stopper = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopper:
                task.result()
    finally:
        stopper.cancel()


def run(
    config: LatencySettings,
    *,
    systems: tuple[str, ...] = ALL_SYSTEMS,
    require_peers: bool = False,
) -> ScenarioResult:
    began = time.perf_counter()
    chosen, notes = choose_systems(systems, require_peers=require_peers)
    result = ScenarioResult(NAME, "3. End-to-end latency", settings=asdict(config), notes=notes)
    for _ in range(config.runs):
        for system in chosen:
            with launch(system) as launched:
                target = launched.target

                async def once(target: Target = target) -> list[LatencySample]:
                    await target.create_topic(TOPIC)
                    await target.create_group(TOPIC, GROUP)
                    return [
                        await measure_latencies(target, config, rate=rate, duration_s=seconds)
                        for rate, seconds in config.loads
                    ]

                samples = asyncio.run(once())
            for (rate, _), sample in zip(config.loads, samples, strict=True):
                case = f"{rate:,} msg/s · {config.consumers} consumers"
                values = sample.latencies_s
                for metric, fraction in zip(METRICS, (0.50, 0.99, 0.999), strict=True):
                    result.add(case, system, metric, percentile(values, fraction) * 1000)
                result.add(case, system, "sent", sample.sent / max(1, sample.scheduled))
                result.add(case, system, "delivered", len(values) / max(1, sample.sent))
    result.notes.append(
        "All clients share one Python load-generator process; on a loaded machine its own "
        "scheduling delays reach every row, so compare the rows with each other."
    )
    result.seconds = time.perf_counter() - began
    return result


def render(result: ScenarioResult) -> str:
    headers = ["system", *(f"{m} (median of runs)" for m in METRICS), "sent", "delivered"]
    headers.append("popmq p99 ÷ this p99 (below 1: popmq faster)")
    sections = []
    for case in result.cases():
        rows = [
            [
                system,
                *(format_number(result.median(case, system, m)) for m in METRICS),
                f"{result.median(case, system, 'sent'):.1%}",
                f"{result.median(case, system, 'delivered'):.1%}",
                format_ratio(result.ratio(case, "p99 ms", "popmq", system)),
            ]
            for system in result.systems(case)
        ]
        sections.append(f"{case}:\n\n{markdown_table(headers, rows)}")
    return with_notes("\n\n".join(sections), result)


def main(*, quick: bool) -> str:
    return render(run(settings(quick)))
