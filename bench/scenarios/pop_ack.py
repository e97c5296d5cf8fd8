"""Scenario 2, pop + ack: batch 32, 1 and 4 consumers, a topic pre-filled with 200k messages.

Each consumer loops: receive up to 32 (long poll 1 s), then ack them in one call (popmq: one
ack on the consumer's PopStream; Redis: one XACK; NATS: one ack per message, its only
per-message form). The "acks on the next receive" cases ack each batch in the round trip of
the next receive where the client can (popmq: `receive(ack=...)`; Redis: XACK and
XREADGROUP pipelined; NATS: unchanged, its `ack()` never waits). All systems are started and
pre-filled first, then measured run by run, so the runs interleave. A window and its warm-up
each end after their duration or once they took a quarter of the backlog, and after each
window the topic is topped up by what it took, through the system's own client (not timed):
every window starts at the full backlog, however fast the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.load import Meter, WindowObserver, Worker, measure_rate
from bench.peers.popmq_store import Backlog, prefill_store
from bench.peers.systems import ALL_SYSTEMS, Launched, choose_systems, launch
from bench.peers.targets import Received, Target, prefill
from bench.profile import PySpy
from bench.results import ScenarioResult
from bench.scenarios._common import PEERS, body_of, ratio_table, with_notes

__all__ = ["Consumed", "PopAckSettings", "consume_rate", "main", "render", "run", "settings"]

NAME = "pop-ack"
TOPIC = "popack"
GROUP = "bench"


@dataclass(frozen=True, kw_only=True)
class PopAckSettings:
    runs: int
    warmup_s: float
    duration_s: float
    backlog: int
    batch: int = 32
    consumers: tuple[int, ...] = (1, 4)
    ack_on_receive: tuple[bool, ...] = (False, True)
    body_bytes: int = 1024


def settings(quick: bool) -> PopAckSettings:
    if quick:
        return PopAckSettings(runs=1, warmup_s=0.1, duration_s=0.3, backlog=20_000)
    return PopAckSettings(runs=3, warmup_s=0.3, duration_s=2.5, backlog=200_000)


ACK_ON_RECEIVE = "acks on the next receive"
"""What names the cases whose consumers ack on their next receive."""


def case_name(consumers: int, ack_on_receive: bool = False) -> str:
    plural = "s" if consumers > 1 else ""
    suffix = f" · {ACK_ON_RECEIVE}" if ack_on_receive else ""
    return f"batch 32 · {consumers} consumer{plural}{suffix}"


@dataclass(frozen=True, slots=True)
class Consumed:
    """One measurement of ``consume_rate``."""

    rate: float
    """Acked messages per second in the window."""
    taken: int
    """Messages received over the warm-up and the window (acked or still held at the end)."""


async def consume_rate(
    target: Target,
    *,
    topic: str,
    group: str,
    consumers: int,
    batch: int,
    warmup_s: float,
    duration_s: float,
    limit: int | None = None,
    work_s: float = 0.0,
    ack_on_receive: bool = False,
    observer: WindowObserver | None = None,
) -> Consumed:
    """Acked messages per second from ``consumers`` concurrent consumers of one group.

    ``work_s`` is slept per message between receive and ack (simulated processing). With
    ``ack_on_receive`` each batch is acked with the next receive (``ack_and_receive``) and
    counted once that returned. ``observer``: see ``measure_rate``.
    """
    taken = 0

    def worker(index: int) -> Worker:
        async def run(meter: Meter) -> None:
            nonlocal taken
            async with target.receiver(topic, group, f"c{index}") as receiver:
                messages: list[Received] = []
                while meter.running:
                    if ack_on_receive:
                        acked = messages
                        messages = await receiver.ack_and_receive(acked, batch, 1.0)
                    else:
                        messages = await receiver.receive(batch, 1.0)
                    taken += len(messages)
                    for _ in messages if work_s else ():
                        await asyncio.sleep(work_s)
                    if ack_on_receive:
                        meter.add(len(acked))
                    else:
                        await receiver.ack(messages)
                        meter.add(len(messages))

        return run

    rate = await measure_rate(
        [worker(i) for i in range(consumers)],
        warmup_s=warmup_s,
        duration_s=duration_s,
        limit=limit,
        observer=observer,
    )
    return Consumed(rate, taken)


def prepare(launched: Launched, config: PopAckSettings, body: bytes) -> None:
    """Create the topic and group and store the backlog (popmq's was stored before start)."""

    async def setup() -> None:
        target = launched.target
        if launched.target.name != "popmq":
            await target.create_topic(TOPIC)
        await target.create_group(TOPIC, GROUP)
        if launched.target.name != "popmq":
            await prefill(target, TOPIC, config.backlog, body)

    asyncio.run(setup())


def run(
    config: PopAckSettings,
    *,
    systems: tuple[str, ...] = ALL_SYSTEMS,
    require_peers: bool = False,
    profile_out: Path | None = None,
) -> ScenarioResult:
    """Start and fill every system, then measure them run by run.

    With ``profile_out``, one more popmq window with 4 consumers is recorded with py-spy.
    """
    began = time.perf_counter()
    chosen, notes = choose_systems(systems, require_peers=require_peers)
    result = ScenarioResult(NAME, "2. Pop + ack", settings=asdict(config), notes=notes)
    body = body_of(config.body_bytes)
    cases = [(c, a) for a in config.ack_on_receive for c in config.consumers]
    # A warm-up and its window take at most half the backlog; the top-up restores it.
    limit = max(1, config.backlog // 4)

    def fill_popmq(data_dir: Path) -> None:
        prefill_store(data_dir, {TOPIC: Backlog(8, config.backlog)}, body)

    with contextlib.ExitStack() as stack:
        launched: dict[str, Launched] = {}
        for system in chosen:
            prepare_store = fill_popmq if system == "popmq" else None
            launched[system] = stack.enter_context(launch(system, prepare=prepare_store))
            prepare(launched[system], config, body)
        for _ in range(config.runs):
            for system in chosen:
                for consumers, ack_on_receive in cases:
                    target = launched[system].target
                    consumed = asyncio.run(
                        consume_rate(
                            target,
                            topic=TOPIC,
                            group=GROUP,
                            consumers=consumers,
                            batch=config.batch,
                            warmup_s=config.warmup_s,
                            duration_s=config.duration_s,
                            limit=limit,
                            ack_on_receive=ack_on_receive,
                        )
                    )
                    result.add(case_name(consumers, ack_on_receive), system, "msg/s", consumed.rate)
                    asyncio.run(prefill(target, TOPIC, consumed.taken, body))
        if profile_out is not None and "popmq" in launched:
            with PySpy(launched["popmq"].server.pid, profile_out):
                asyncio.run(
                    consume_rate(
                        launched["popmq"].target,
                        topic=TOPIC,
                        group=GROUP,
                        consumers=4,
                        batch=config.batch,
                        warmup_s=0.0,
                        duration_s=max(config.duration_s, 5.0),
                        limit=limit,
                    )
                )
    result.notes.append(
        f"Each window (and its warm-up) stops after {config.duration_s:g} s "
        f"({config.warmup_s:g} s) or {limit:,} messages; then what it took is sent again "
        f"(not timed), so every window starts on a {config.backlog:,}-message backlog. "
        "popmq's first backlog is written by its embedded broker before the server starts "
        "(faster than gRPC; not timed), the peers' and every top-up through their clients."
    )
    if True in config.ack_on_receive:
        result.notes.append(
            f"*{ACK_ON_RECEIVE}*: each batch is acked in the round trip of the next "
            "receive where the client can: popmq `receive(ack=...)` (the handles ride on the "
            "Pop and their results come back with it), Redis XACK and the next XREADGROUP "
            "in one pipeline. NATS is unchanged: its `ack()` never waits, so its two rows "
            "measure the same loop."
        )
    result.seconds = time.perf_counter() - began
    return result


def render(result: ScenarioResult) -> str:
    table = ratio_table(
        result, "msg/s", columns=["popmq", *PEERS], ratio_to=PEERS, first_header="case"
    )
    return with_notes(table, result)


def main(*, quick: bool) -> str:
    return render(run(settings(quick)))
