"""Scenario 4, long-poll scale: 10,000 held Pops on 100 topics (popmq only).

100 consumers (one channel each, one per topic) each hold 100 receives with the longest wait
(30 s), re-issued as soon as one returns. Each consumer multiplexes its receives over one
PopStream call (AsyncSimpleConsumer's default), so the server holds 100 calls, not 10,000
(``LongPollSettings(multiplex=False)`` measures one unary Pop call per receive instead). With
all of them held, the server's RSS and its CPU over an idle window are read from /proc. Then
single messages are sent to the topics in turn, 20 ms apart, and each wake latency is taken
from just before the send to the moment a held receive returned it. The receives are started
in steps of 250 every 0.25 s: with unary Pops a grpc.aio server cancels calls beyond
``grpc.server.max_pending_requests`` that it has not yet picked up, so a burst of 10,000 at
once would measure that limit rather than long polling; receives that fail anyway are
counted and re-issued. Peers are not run: their held requests are of another kind (a
blocked XREADGROUP holds a whole Redis connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from dataclasses import asdict, dataclass

from bench.load import proc_sample
from bench.peers.systems import launch
from bench.peers.targets import INVISIBLE_S
from bench.results import ScenarioResult, format_number, markdown_table, percentile
from bench.scenarios._common import body_of, with_notes
from popmq import AsyncAdmin, AsyncProducer, AsyncSimpleConsumer, PopMQError

__all__ = ["LongPollSettings", "main", "render", "run", "settings"]

NAME = "long-poll"
GROUP = "bench"
_STAMP = struct.Struct(">d")
_HOLD_S = 30.0
_RAMP_STEP = 250
_RAMP_PAUSE_S = 0.25
_SETTLE_S = 1.0
"""After the ramp, wait until no Pop failed for this long (at most _DRAIN_TIMEOUT_S)."""
_DRAIN_TIMEOUT_S = 10.0
METRICS = (
    "held",
    "rss MB",
    "rss growth MB",
    "idle cpu %",
    "wake p50 ms",
    "wake p99 ms",
    "failed pops",
)


@dataclass(frozen=True, kw_only=True)
class LongPollSettings:
    runs: int
    topics: int
    pops_per_topic: int
    idle_s: float
    wakes: int
    wake_interval_s: float = 0.02
    body_bytes: int = 1024
    multiplex: bool = True
    """Receives over one PopStream per consumer (the SDK's default); False: unary Pops."""


def settings(quick: bool) -> LongPollSettings:
    if quick:
        return LongPollSettings(runs=1, topics=5, pops_per_topic=10, idle_s=0.3, wakes=20)
    return LongPollSettings(runs=2, topics=100, pops_per_topic=100, idle_s=5.0, wakes=300)


async def measure(endpoint: str, pid: int, config: LongPollSettings) -> dict[str, float]:
    """Hold the pops, read RSS and idle CPU, then time the wakes."""
    topics = [f"lp{i}" for i in range(config.topics)]
    async with AsyncAdmin(endpoint) as admin:
        for topic in topics:
            await admin.create_topic(topic, queues=1)
        await admin.create_group(GROUP)
    before = proc_sample(pid)
    pad = body_of(config.body_bytes)[_STAMP.size :]
    wakes: list[float] = []
    held = 0
    failed = 0
    stop = asyncio.Event()
    all_woken = asyncio.Event()

    async def hold(consumer: AsyncSimpleConsumer) -> None:
        nonlocal held, failed
        while not stop.is_set():
            held += 1
            try:
                messages = await consumer.receive(
                    max_messages=1, invisible_duration_s=INVISIBLE_S, wait_s=_HOLD_S
                )
            except PopMQError:
                failed += 1
                await asyncio.sleep(0.05)
                continue
            finally:
                held -= 1
            now = time.perf_counter()
            for message in messages:
                wakes.append(now - _STAMP.unpack_from(message.body)[0])
            if len(wakes) >= config.wakes:
                all_woken.set()
            if messages:
                await consumer.ack(messages)

    consumers = [
        AsyncSimpleConsumer(endpoint, group=GROUP, topic=t, multiplex=config.multiplex)
        for t in topics
    ]
    holders: list[asyncio.Task[None]] = []
    try:
        for _ in range(config.pops_per_topic):
            for consumer in consumers:
                holders.append(asyncio.create_task(hold(consumer)))
                if len(holders) % _RAMP_STEP == 0:
                    await asyncio.sleep(_RAMP_PAUSE_S)
        settle_deadline = time.perf_counter() + _DRAIN_TIMEOUT_S
        while time.perf_counter() < settle_deadline:
            failed_before = failed
            await asyncio.sleep(_SETTLE_S)
            if failed == failed_before:
                break
        idle_from = proc_sample(pid)
        await asyncio.sleep(config.idle_s)
        idle_to = proc_sample(pid)
        held_now = held
        async with AsyncProducer(endpoint) as producer:
            for i in range(config.wakes):
                body = _STAMP.pack(time.perf_counter()) + pad
                await producer.send(topics[i % len(topics)], body)
                await asyncio.sleep(config.wake_interval_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_woken.wait(), _DRAIN_TIMEOUT_S)
    finally:
        stop.set()
        for task in holders:
            task.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
        for consumer in consumers:
            await consumer.close()
    ordered = sorted(wakes)
    return {
        "held": held_now,
        "rss MB": idle_to.rss_bytes / 2**20,
        "rss growth MB": (idle_to.rss_bytes - before.rss_bytes) / 2**20,
        "idle cpu %": 100 * idle_to.cpu_share_since(idle_from),
        "wake p50 ms": percentile(ordered, 0.5) * 1000,
        "wake p99 ms": percentile(ordered, 0.99) * 1000,
        "failed pops": failed,
        "woken": len(wakes),
    }


def run(config: LongPollSettings, *, require_peers: bool = False) -> ScenarioResult:
    began = time.perf_counter()
    result = ScenarioResult(NAME, "4. Long-poll scale", settings=asdict(config))
    case = f"{config.topics * config.pops_per_topic:,} held Pops on {config.topics} topics"
    for _ in range(config.runs):
        with launch("popmq") as launched:
            values = asyncio.run(measure(launched.server.endpoint, launched.server.pid, config))
        for metric, value in values.items():
            result.add(case, "popmq", metric, value)
    transport = (
        "Each consumer multiplexes its Pops on one PopStream call (AsyncSimpleConsumer's "
        f"default): the server holds {config.topics} calls, not one per Pop."
        if config.multiplex
        else "Each Pop is its own unary call (AsyncSimpleConsumer(multiplex=False))."
    )
    result.notes.append(
        f"{transport} rss is the server's VmRSS with every Pop held; growth is over the server "
        "before the Pops (topics created). idle cpu is the server's user+system time over "
        f"{config.idle_s:g} s with nothing arriving, in % of one core. Wake latency is send "
        "start to receive return (it includes the sync-flushed send)."
    )
    result.seconds = time.perf_counter() - began
    return result


def render(result: ScenarioResult) -> str:
    rows = []
    for case in result.cases():
        rows.append([case, *(format_number(result.median(case, "popmq", m)) for m in METRICS)])
    headers = ["case", *(f"{m} (median)" for m in METRICS)]
    return with_notes(markdown_table(headers, rows), result)


def main(*, quick: bool) -> str:
    return render(run(settings(quick)))
