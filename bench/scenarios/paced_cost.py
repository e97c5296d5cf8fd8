"""Scenario 3b, the cost of a paced send: CPU per message beside Redis and NATS.

Why scenario 3's latency is what it is. At a steady paced rate (scenario 3's 1,000 msg/s
over 8 senders) sends rarely meet, so each costs a whole request on both sides. This sends
single 1 KiB messages at that rate through each system's client (the scenarios' ``Target``
senders, each send on its own task, round-robin over the connections) and reports:

- the send round trip (p50 / p99, from the scheduled time, so a slipping schedule counts);
- server CPU per message (utime + stime of the server process, every thread, from
  ``/proc/PID/stat``) and this process's CPU per message (the client side);
- cores busy (server + client CPU over wall time) and the machine's steal share
  (``/proc/stat``): CPU time the hypervisor gave elsewhere while this machine wanted it.

Beside the systems, a ``grpc echo`` row: the bare grpc.aio echo server of scenario 1, each
sender on its own bidi stream (as the SDK's SendStream), returning the bytes popmq's producer
would send. It is the transport's share of the cost, with no parsing and no storage.

Latency at a fixed rate is queueing: as server + client CPU per message times the rate nears
the machine's cores (2 here), every request waits behind others.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass

from bench.load import proc_sample
from bench.peers.systems import ALL_SYSTEMS, choose_systems, launch
from bench.peers.targets import Sender, Target
from bench.reference import EchoServer, stream_echo_sender
from bench.results import ScenarioResult, format_number, markdown_table, percentile
from bench.scenarios._common import body_of, format_ratio, with_notes

__all__ = ["PacedSettings", "main", "paced_sends", "render", "run", "settings"]

NAME = "paced-cost"
TOPIC = "paced"
ECHO = "grpc echo"
_MAX_IN_FLIGHT = 256
METRICS = ("p50 ms", "p99 ms", "server us/msg", "client us/msg", "cores busy", "steal %")


@dataclass(frozen=True, kw_only=True)
class PacedSettings:
    runs: int
    rate: int
    seconds: float
    warmup_s: float
    senders: int = 8
    body_bytes: int = 1024


def settings(quick: bool) -> PacedSettings:
    if quick:
        return PacedSettings(runs=1, rate=200, seconds=0.5, warmup_s=0.1)
    return PacedSettings(runs=3, rate=1000, seconds=5.0, warmup_s=0.5)


def _machine_ticks() -> tuple[int, int]:
    """(all ticks, steal ticks) of the whole machine so far."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:9]]
    return sum(values), values[7]


async def paced_sends(
    senders: list[Sender], *, rate: int, seconds: float, body: bytes
) -> list[float]:
    """Round trips (s) of ``rate * seconds`` sends scheduled ``1 / rate`` apart, each on its
    own task, round-robin over ``senders``, at most 256 unfinished; a trip is timed from its
    scheduled time, so a slipping schedule counts."""
    window = asyncio.Semaphore(_MAX_IN_FLIGHT)
    trips: list[float] = []
    tasks: list[asyncio.Task[None]] = []

    async def send(sender: Sender, due: float) -> None:
        try:
            await sender.send([body])
            trips.append(time.perf_counter() - due)
        finally:
            window.release()

    start = time.perf_counter()
    for i in range(round(rate * seconds)):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await window.acquire()
        tasks.append(asyncio.create_task(send(senders[i % len(senders)], due)))
    await asyncio.gather(*tasks)
    return trips


async def measure(
    open_sender: Callable[[], AbstractAsyncContextManager[Sender]],
    server_pid: int,
    config: PacedSettings,
) -> dict[str, float]:
    """One paced window over ``config.senders`` senders that ``open_sender`` connects."""
    body = body_of(config.body_bytes)
    async with contextlib.AsyncExitStack() as stack:
        senders = [await stack.enter_async_context(open_sender()) for _ in range(config.senders)]
        await paced_sends(senders, rate=config.rate, seconds=config.warmup_s, body=body)
        server_cpu = proc_sample(server_pid).cpu_s
        client_cpu = time.process_time()
        ticks, steal = _machine_ticks()
        began = time.perf_counter()
        trips = await paced_sends(senders, rate=config.rate, seconds=config.seconds, body=body)
        wall = time.perf_counter() - began
        server_cpu = proc_sample(server_pid).cpu_s - server_cpu
        client_cpu = time.process_time() - client_cpu
        ticks_now, steal_now = _machine_ticks()
    trips.sort()
    return {
        "p50 ms": percentile(trips, 0.5) * 1000,
        "p99 ms": percentile(trips, 0.99) * 1000,
        "server us/msg": server_cpu / len(trips) * 1e6,
        "client us/msg": client_cpu / len(trips) * 1e6,
        "cores busy": (server_cpu + client_cpu) / wall,
        "steal %": 100 * (steal_now - steal) / max(1, ticks_now - ticks),
    }


async def _measure_target(
    target: Target, server_pid: int, config: PacedSettings
) -> dict[str, float]:
    await target.create_topic(TOPIC)
    return await measure(lambda: target.sender(TOPIC), server_pid, config)


def run(
    config: PacedSettings,
    *,
    systems: tuple[str, ...] = ALL_SYSTEMS,
    require_peers: bool = False,
) -> ScenarioResult:
    began = time.perf_counter()
    chosen, notes = choose_systems(systems, require_peers=require_peers)
    result = ScenarioResult(NAME, "3b. Cost of a paced send", settings=asdict(config), notes=notes)
    case = f"{config.rate:,} msg/s · {config.senders} senders"
    for _ in range(config.runs):
        for system in chosen:  # systems alternate within each run
            with launch(system) as launched:
                values = asyncio.run(_measure_target(launched.target, launched.server.pid, config))
            for metric, value in values.items():
                result.add(case, system, metric, value)
        with EchoServer() as echo:
            values = asyncio.run(
                measure(functools.partial(stream_echo_sender, echo.endpoint), echo.pid, config)
            )
        for metric, value in values.items():
            result.add(case, ECHO, metric, value)
    result.notes.append(
        "Single-message sends, each on its own task, round-robin over the senders' "
        "connections; CPU is the server process's (every thread) and this load-generator "
        "process's, per message sent. Steal is the whole machine's. grpc echo is the bare "
        "grpc.aio echo server of scenario 1, each sender on its own bidi stream (as popmq's "
        "SDK sends on a SendStream), returning the bytes of the SendMessagesRequest popmq's "
        "producer would send: the transport's share, with no parsing and no storage."
    )
    result.seconds = time.perf_counter() - began
    return result


def render(result: ScenarioResult) -> str:
    headers = ["system", *METRICS, "popmq server CPU ÷ this"]
    sections = []
    for case in result.cases():
        rows = [
            [
                system,
                *(format_number(result.median(case, system, m)) for m in METRICS),
                format_ratio(result.ratio(case, "server us/msg", "popmq", system)),
            ]
            for system in result.systems(case)
        ]
        sections.append(f"{case}:\n\n{markdown_table(headers, rows)}")
    return with_notes("\n\n".join(sections), result)


def main(*, quick: bool) -> str:
    return render(run(settings(quick)))
