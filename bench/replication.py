"""Replicated shards: what sync and async replication cost sends and pops.

Four deployments of one shard, each its own processes (an etcd, its brokers, one
``popmq proxy`` that the clients reach), all started before the first window and measured
side by side: within a run, each case on every deployment in turn:

- (a) standalone: one ``popmq broker --flush sync``, not replicated (the baseline);
- (b) sync: ``popmq broker --shard s1 --name r1`` and ``r2``, the defaults
  (``[replication] mode = "sync"``, ``min_insync = 1``, ``persist_checkpoints = true``):
  a send is acknowledged once the leader and the in-sync follower have fsynced its batch;
- (c) async: the same with ``mode = "async"``: acknowledged after the leader's fsync, the
  follower copies it meanwhile;
- (d) sync with ``persist_checkpoints = false``: (b) keeping the pop checkpoint buffer
  (``pop.ck_buffer_time_s``, 10 s, as the standalone broker does), measured on the consume
  side only (its sends are (b)'s).

Every broker and replica runs ``--flush sync``. Cases: single-message sends (1 KiB) from 1
and 16 producers, each waiting for its acknowledgement (1 and 16 sends in flight), with
every send's round trip in the window (p50, p99); and pop + ack (batch 32, 4 consumers;
acks are synced, so under sync replication they wait for the follower too) on a backlog
that is topped up after each window. For each window: msg/s and each process's CPU per
message (utime + stime from /proc), so the follower's and the leader's replication work is
visible beside the proxy's.

Everything shares this machine's two cores and one disk: the follower's fsync competes
with the leader's, and its CPU with the proxy's and the load generator's. Replicas on
machines of their own do not take CPU from each other (so the CPU-bound ratios here
overstate the cost), but a real network adds its round trip to every replicated batch
(which loopback does not show).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from bench.load import CPU_CLIENT, CpuWindow, Meter, Worker, machine_info, measure_rate
from bench.peers.cluster import (
    ShardLaunch,
    etcd_binary,
    launch_cluster,
    launch_shard,
    replication_events,
    shard_state,
    wait_in_sync,
)
from bench.peers.targets import PopmqTarget, prefill
from bench.results import ScenarioResult, format_number, markdown_table, percentile
from bench.scenarios._common import body_of, format_ratio, with_notes
from bench.scenarios.pop_ack import consume_rate
from popmq import AsyncAdmin

__all__ = [
    "ASYNC",
    "DEPLOYMENTS",
    "STANDALONE",
    "SYNC",
    "SYNC_BUFFERED",
    "Deployment",
    "ReplicationSettings",
    "main",
    "pop_case",
    "render",
    "run",
    "send_case",
    "settings",
]

NAME = "replication"
STANDALONE = "(a) standalone"
SYNC = "(b) sync"
ASYNC = "(c) async"
SYNC_BUFFERED = "(d) sync, persist_checkpoints=false"
DEPLOYMENTS = (STANDALONE, SYNC, ASYNC, SYNC_BUFFERED)
_SETTINGS = {
    SYNC: (),
    ASYNC: ("replication.mode=async",),
    SYNC_BUFFERED: ("replication.persist_checkpoints=false",),
}
"""``--set`` values of each replicated deployment's replicas."""
SEND_DEPLOYMENTS = (STANDALONE, SYNC, ASYNC)
"""(d) differs from (b) on the consume side only."""
SEND_TOPIC = "send"
POP_TOPIC = "popack"
GROUP = "bench"

MSG_S = "msg/s"
P50, P99 = "p50 ms", "p99 ms"
SERVER = "server us/msg"
"""The proxy's, the leader's (or standalone broker's) and the follower's CPU per message."""
CORES = "cores busy"
IN_SYNC = "follower in sync"
"""1 when the follower was in the in-sync set as the window ended, else 0."""
NUDGED = "follower nudged"
"""1 when the follower had to be given a write to rejoin the in-sync set before the window."""
PROCESSES = ("proxy", "leader", "follower", "etcd", CPU_CLIENT)


def cpu_metric(process: str) -> str:
    return f"{process} us/msg"


@dataclass(frozen=True, kw_only=True)
class ReplicationSettings:
    runs: int
    warmup_s: float
    duration_s: float
    backlog: int
    """Messages in the pop + ack topic at the start of every window."""
    producers: tuple[int, ...] = (1, 16)
    """Concurrent single-message producers of each send case (= sends in flight)."""
    consumers: int = 4
    pop_batch: int = 32
    queues: int = 8
    body_bytes: int = 1024
    deployments: tuple[str, ...] = DEPLOYMENTS


def settings(quick: bool) -> ReplicationSettings:
    if quick:  # for CI (~20 s, mostly process starts): (d) is (b) with one setting changed
        return ReplicationSettings(
            runs=1,
            warmup_s=0.1,
            duration_s=0.3,
            backlog=1_000,
            producers=(16,),
            deployments=(STANDALONE, SYNC, ASYNC),
        )
    return ReplicationSettings(runs=5, warmup_s=0.5, duration_s=3.0, backlog=60_000)


def send_case(producers: int) -> str:
    return f"send · {producers} producer{'s' if producers > 1 else ''}"


def pop_case(batch: int, consumers: int) -> str:
    return f"pop + ack batch {batch} · {consumers} consumers"


@dataclass(frozen=True, slots=True)
class Deployment:
    """A started deployment: the proxy's SDK target and the pid of each process."""

    name: str
    target: PopmqTarget
    pids: dict[str, int]
    """"proxy", "leader" (the standalone broker in (a)), "follower" if any, "etcd"."""
    shard: ShardLaunch | None = None
    """The replicated shard ((b) to (d))."""


@contextlib.contextmanager
def deploy(name: str) -> Iterator[Deployment]:
    """Start deployment ``name`` (one of DEPLOYMENTS); stop every process of it on exit."""
    if name == STANDALONE:
        with launch_cluster(brokers=1, name=name) as cluster:
            yield Deployment(
                name,
                cluster.target,
                {
                    "proxy": cluster.proxy_pid,
                    "leader": cluster.broker_pids["b1"],
                    "etcd": cluster.etcd_pid,
                },
            )
        return
    if name not in _SETTINGS:
        raise ValueError(f"unknown deployment {name!r}; known: {', '.join(DEPLOYMENTS)}")
    with launch_shard(replicas=2, settings=_SETTINGS[name], name=name) as shard:
        (follower,) = shard.followers
        yield Deployment(
            name,
            shard.target,
            {
                "proxy": shard.proxy_pid,
                "leader": shard.replica_pids[shard.leader],
                "follower": shard.replica_pids[follower],
                "etcd": shard.etcd_pid,
            },
            shard,
        )


def deploy_all(stack: contextlib.ExitStack, names: tuple[str, ...]) -> dict[str, Deployment]:
    """Start the deployments at once (threads: each mostly waits for its children), each
    stopped by ``stack``; the first failure is raised once every start has ended."""

    def enter(name: str) -> tuple[contextlib.AbstractContextManager[Deployment], Deployment]:
        manager = deploy(name)
        return manager, manager.__enter__()

    with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
        futures = [pool.submit(enter, name) for name in names]
    deployments: dict[str, Deployment] = {}
    failure: BaseException | None = None
    for future in futures:
        try:
            manager, deployment = future.result()
        except BaseException as exc:  # noqa: BLE001 - raised below, after the others are held
            failure = failure or exc
            continue
        stack.push(manager.__exit__)
        deployments[deployment.name] = deployment
    if failure is not None:
        raise failure
    return {name: deployments[name] for name in names}


async def _setup(deployment: Deployment, config: ReplicationSettings, body: bytes) -> None:
    target = deployment.target
    for topic in (SEND_TOPIC, POP_TOPIC):
        await target.create_topic(topic, queues=config.queues)
    await target.create_group(POP_TOPIC, GROUP)
    await prefill(target, POP_TOPIC, config.backlog, body)


async def send_window(
    target: PopmqTarget,
    *,
    producers: int,
    body: bytes,
    warmup_s: float,
    duration_s: float,
    observer: CpuWindow,
) -> tuple[float, list[float]]:
    """(acknowledged msg/s, sorted round trips in s) of ``producers`` single-message
    producers, each sending the next once the last is acknowledged."""
    trips: list[float] = []

    def worker() -> Worker:
        async def run(meter: Meter) -> None:
            async with target.sender(SEND_TOPIC) as sender:
                while meter.running:
                    began = time.perf_counter()
                    await sender.send([body])
                    if meter.counting:
                        trips.append(time.perf_counter() - began)
                    meter.add(1)

        return run

    rate = await measure_rate(
        [worker() for _ in range(producers)],
        warmup_s=warmup_s,
        duration_s=duration_s,
        observer=observer,
    )
    return rate, sorted(trips)


def record(result: ScenarioResult, case: str, deployment: Deployment, window: CpuWindow) -> None:
    """Each process's CPU per message, the server's sum, cores busy."""
    for process in window.cpu_s:
        result.add(case, deployment.name, cpu_metric(process), window.us_per_item(process))
    server = sum(
        window.us_per_item(p) for p in ("proxy", "leader", "follower") if p in deployment.pids
    )
    result.add(case, deployment.name, SERVER, server)
    result.add(case, deployment.name, CORES, window.cores_busy())


def _before_window(result: ScenarioResult, case: str, deployment: Deployment) -> None:
    """A replicated deployment's window starts with its follower in the in-sync set.

    The follower's stream ends now and then while the leader is idle (the leader's server
    answers its keepalive pings with GOAWAY too_many_pings); it reconnects caught up, and
    the leader's lag check puts it back within a second. On the code this bench was first
    run on, it came back only on acknowledging a new batch, which a sync leader refusing
    sends never wrote: if it is still out after 3 s, a write that is not a send (an empty
    group, through the proxy) gives it one, and ``NUDGED`` counts those windows.

    Raises:
        TimeoutError: it was not back 60 s after that (with the replicas' events).
    """
    shard = deployment.shard
    if shard is None:
        return
    nudged = 0.0
    try:
        wait_in_sync(shard, 1, timeout_s=3.0)
    except TimeoutError:
        nudged = 1.0
        asyncio.run(_nudge(deployment.target))
        wait_in_sync(shard, 1)
    result.add(case, deployment.name, NUDGED, nudged)


async def _nudge(target: PopmqTarget) -> None:
    async with AsyncAdmin(target.endpoint) as admin:
        await admin.create_group(f"bench-nudge-{time.monotonic_ns()}")


def _after_window(result: ScenarioResult, case: str, deployment: Deployment) -> None:
    """Whether the follower was still in the in-sync set as the window ended (1 or 0)."""
    if deployment.shard is not None:
        state = asyncio.run(shard_state(deployment.shard.etcd_endpoint, deployment.shard.shard))
        result.add(case, deployment.name, IN_SYNC, 1.0 if state.isr else 0.0)


def _measure_send(
    result: ScenarioResult,
    deployment: Deployment,
    config: ReplicationSettings,
    body: bytes,
    producers: int,
) -> None:
    case = send_case(producers)
    _before_window(result, case, deployment)
    window = CpuWindow(deployment.pids)
    rate, trips = asyncio.run(
        send_window(
            deployment.target,
            producers=producers,
            body=body,
            warmup_s=config.warmup_s,
            duration_s=config.duration_s,
            observer=window,
        )
    )
    result.add(case, deployment.name, MSG_S, rate)
    result.add(case, deployment.name, P50, percentile(trips, 0.5) * 1000)
    result.add(case, deployment.name, P99, percentile(trips, 0.99) * 1000)
    record(result, case, deployment, window)
    _after_window(result, case, deployment)


def _measure_pop(
    result: ScenarioResult, deployment: Deployment, config: ReplicationSettings, body: bytes
) -> None:
    """One pop + ack window, then the backlog topped up again (not timed)."""
    case = pop_case(config.pop_batch, config.consumers)
    _before_window(result, case, deployment)
    window = CpuWindow(deployment.pids)
    consumed = asyncio.run(
        consume_rate(
            deployment.target,
            topic=POP_TOPIC,
            group=GROUP,
            consumers=config.consumers,
            batch=config.pop_batch,
            warmup_s=config.warmup_s,
            duration_s=config.duration_s,
            limit=max(1, config.backlog // 4),
            observer=window,
        )
    )
    result.add(case, deployment.name, MSG_S, consumed.rate)
    record(result, case, deployment, window)
    _after_window(result, case, deployment)
    asyncio.run(prefill(deployment.target, POP_TOPIC, consumed.taken, body))


def _measure_run(
    result: ScenarioResult,
    deployments: list[Deployment],
    config: ReplicationSettings,
    body: bytes,
) -> None:
    """One run: each case on every deployment in turn, so the windows compared in a ratio
    are seconds apart (the load of other work on the machine drifts)."""
    for producers in config.producers:
        for deployment in deployments:
            if deployment.name in SEND_DEPLOYMENTS:
                _measure_send(result, deployment, config, body, producers)
    for deployment in deployments:
        _measure_pop(result, deployment, config, body)


def isr_notes(result: ScenarioResult, deployments: dict[str, Deployment]) -> list[str]:
    """Per replicated deployment: windows that ended with the follower out of the in-sync
    set, and what the replicas logged about it (a window with it out is not (b)'s case)."""
    notes = []
    for deployment in deployments.values():
        if deployment.shard is None:
            continue
        ended = [
            v for case in result.cases() for v in result.samples(case, deployment.name, IN_SYNC)
        ]
        events = [
            line
            for line in replication_events(deployment.shard)
            if "left the in-sync set" in line or "stops leading" in line
        ]
        nudged = [
            v for case in result.cases() for v in result.samples(case, deployment.name, NUDGED)
        ]
        note = (
            f"{deployment.name}: the follower was in the in-sync set at the start of every "
            f"window ({sum(nudged):.0f} of {len(nudged)} after a nudge) and at the end of "
            f"{sum(ended):.0f} of {len(ended)}"
        )
        if sum(nudged):
            note += (
                " (it was still out 3 s after its stream ended: the bench created an empty "
                "group, a write that is not a send, for it to acknowledge and rejoin)"
            )
        if events:
            shown = "; ".join(line.partition(": ")[2] for line in events[:3])
            note += f"; the replicas logged {len(events)} departure(s) or resignation(s): {shown}"
        notes.append(note + ".")
    return notes


def run(config: ReplicationSettings) -> ScenarioResult:
    """Start the deployments, fill them, then measure them run by run.

    Raises:
        PeerMissingError: etcd is not installed.
    """
    began = time.perf_counter()
    etcd_binary()  # before starting anything
    result = ScenarioResult(
        NAME, "Replicated shards: sync and async replication", settings=asdict(config)
    )
    body = body_of(config.body_bytes)
    load_start = machine_info()["load"]
    with contextlib.ExitStack() as stack:
        deployments = deploy_all(stack, config.deployments)
        for deployment in deployments.values():
            asyncio.run(_setup(deployment, config, body))
        started = list(deployments.values())
        loads: list[str] = []
        for index in range(config.runs):
            loads.append(f"{os.getloadavg()[0]:.1f}")
            # Each run starts with the next deployment: none is always first after a top-up.
            shift = index % len(started)
            _measure_run(result, started[shift:] + started[:shift], config, body)
        result.notes += isr_notes(result, deployments)
    result.notes += [
        "Each deployment is an etcd, its broker(s) and one proxy, all on this machine, started "
        "before the first window and left running. Within a run each case is measured on "
        "every deployment in turn (the next run starts with the next deployment), so the "
        "windows of a ratio are seconds apart. A replicated deployment's window starts only "
        "once its follower is in the in-sync set (the proxy starts once etcd names the "
        "leader).",
        f"Pop + ack: each window and its warm-up stop after {config.duration_s:g} s "
        f"({config.warmup_s:g} s) or {max(1, config.backlog // 4):,} messages, then what it "
        f"took is sent again through the proxy (not timed), so every window starts on a "
        f"{config.backlog:,}-message backlog.",
        f"Load average (1 / 5 / 15 min) at the start {load_start}, at the end "
        f"{machine_info()['load']}; the 1-minute load as each run began: {', '.join(loads)}. "
        "Above 2, other work shared the two cores: the ranges show how much it moved the "
        "figures.",
    ]
    result.seconds = time.perf_counter() - began
    return result


# -- rendering ----------------------------------------------------------------------------


def _spread(result: ScenarioResult, case: str, system: str, metric: str) -> str:
    """``median (min-max)`` over the runs; the median alone with one run; "-" without any."""
    samples = result.samples(case, system, metric)
    if not samples:
        return "-"
    median = format_number(result.median(case, system, metric))
    if len(samples) == 1:
        return median
    return f"{median} ({format_number(min(samples))}-{format_number(max(samples))})"


def _present(result: ScenarioResult, case: str, metric: str) -> list[str]:
    return [s for s in DEPLOYMENTS if result.samples(case, s, metric)]


def throughput_table(result: ScenarioResult) -> str:
    """msg/s of each deployment (median and range over runs) and each ÷ (a), paired by run."""
    others = [s for s in DEPLOYMENTS if s != STANDALONE]
    headers = ["case", *(f"{s} msg/s" for s in DEPLOYMENTS), *(f"{s[:3]} ÷ (a)" for s in others)]
    rows = [
        [
            case,
            *(_spread(result, case, s, MSG_S) for s in DEPLOYMENTS),
            *(format_ratio(result.ratio(case, MSG_S, s, STANDALONE)) for s in others),
        ]
        for case in result.cases()
        if result.samples(case, STANDALONE, MSG_S)
    ]
    return markdown_table(headers, rows)


def latency_table(result: ScenarioResult) -> str:
    """Send round trips per deployment, with p50 and p99 ÷ (a)."""
    rows = []
    for case in result.cases():
        for system in _present(result, case, P99):
            rows.append(
                [
                    case,
                    system,
                    _spread(result, case, system, P50),
                    _spread(result, case, system, P99),
                    format_ratio(result.ratio(case, P50, system, STANDALONE)),
                    format_ratio(result.ratio(case, P99, system, STANDALONE)),
                ]
            )
    return markdown_table(
        ["case", "deployment", "p50 ms", "p99 ms", "p50 ÷ (a)", "p99 ÷ (a)"], rows
    )


def cpu_table(result: ScenarioResult) -> str:
    """Per case and deployment: each process's CPU per message (medians)."""
    rows = []
    for case in result.cases():
        for system in _present(result, case, SERVER):

            def cell(metric: str, system: str = system, case: str = case) -> str:
                value = result.median(case, system, metric)
                return "-" if math.isnan(value) else format_number(value)

            rows.append(
                [
                    case,
                    system,
                    cell(SERVER),
                    format_ratio(result.ratio(case, SERVER, system, STANDALONE)),
                    *(cell(cpu_metric(p)) for p in PROCESSES),
                    f"{result.median(case, system, CORES):.2f}",
                ]
            )
    return markdown_table(
        [
            "case",
            "deployment",
            "server µs/msg",
            "server ÷ (a)",
            *(f"{p} µs/msg" for p in PROCESSES),
            "cores busy",
        ],
        rows,
    )


def summary_lines(result: ScenarioResult) -> list[str]:
    """The replication cost per case in one sentence each (medians of paired ratios)."""
    lines = []
    for case in result.cases():
        if not result.samples(case, STANDALONE, MSG_S):
            continue
        parts = [
            f"{system} {format_ratio(result.ratio(case, MSG_S, system, STANDALONE))}"
            for system in DEPLOYMENTS[1:]
            if result.samples(case, system, MSG_S)
        ]
        extra = ""
        if result.samples(case, SYNC, P99):
            extra = (
                f"; p99 {result.median(case, STANDALONE, P99):.1f} ms standalone, "
                f"{result.median(case, SYNC, P99):.1f} ms sync"
            )
            if result.samples(case, ASYNC, P99):
                extra += f", {result.median(case, ASYNC, P99):.1f} ms async"
        cpu = [
            f"{system} {format_ratio(result.ratio(case, SERVER, system, STANDALONE))}"
            for system in DEPLOYMENTS[1:]
            if result.samples(case, system, SERVER)
        ]
        if cpu:
            extra += f"; server CPU per message vs (a): {', '.join(cpu)}"
        lines.append(f"{case}: throughput vs (a): {', '.join(parts)}{extra}.")
    pop = next((c for c in result.cases() if c.startswith("pop")), None)
    if pop is not None:
        ratio = result.ratio(pop, MSG_S, SYNC, SYNC_BUFFERED)
        cpu_ratio = result.ratio(pop, SERVER, SYNC, SYNC_BUFFERED)
        if not math.isnan(ratio):
            lines.append(
                f"persist_checkpoints under sync replication: (b) ÷ (d) = {format_ratio(ratio)} "
                f"in msg/s and {format_ratio(cpu_ratio)} in server CPU per message on {pop} "
                "(the same deployment with and without a checkpoint write per pop)."
            )
    return lines


def render(result: ScenarioResult) -> str:
    parts = [
        "Throughput, side by side (median over runs, the range in parentheses; ratios are "
        "medians of per-run ratios):",
        throughput_table(result),
        "Send round trips (each send from its start to its acknowledgement, in the measured "
        "window; medians over runs, the range in parentheses):",
        latency_table(result),
        "CPU per message of each process over the measured window (µs, medians); server = "
        "proxy + leader (the standalone broker in (a)) + follower, and its ratio to (a) is the "
        "figure least moved by other work on the machine (it counts CPU used, not CPU "
        "obtained); cores busy = every measured process's CPU (load generator and etcd "
        "included) over wall time:",
        cpu_table(result),
    ]
    lines = summary_lines(result)
    if lines:
        parts.append("In short:\n\n" + "\n".join(f"- {line}" for line in lines))
    return with_notes("\n\n".join(parts), result)


def main(*, quick: bool) -> str:
    return render(run(settings(quick)))
