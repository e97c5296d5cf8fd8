"""Scenario 8, cluster mode: the price of the proxy → broker hop, and two brokers.

Three deployments, each its own processes, started once and measured side by side, run by
run (the deployments alternate within each run):

- (a) ``popmq serve --flush sync``: local mode, the server of scenarios 1 to 7;
- (b) an etcd, one ``popmq broker --flush sync`` and one ``popmq proxy`` (clients reach the
  proxy; it routes every request to the broker over BrokerService);
- (c) the same with two brokers.

Every topic has 8 queues in all three (a cluster topic's queue count is per broker: 8 on one
broker, 4 on each of two). The load is scenarios 1 and 2's (``produce.produce_rate``,
``pop_ack.consume_rate``): produce batch 32 and batch 1 from 8 producers, and pop + ack
batch 32 from 4 consumers on a backlog (written through the deployment's own endpoint before
the first window, not timed, and topped up after each window by what it took); plus scenario
3b's paced send (single messages at a fixed rate over 8 senders) for the round trip's
p50 / p99.

For each window: msg/s, and the CPU seconds per message of each process (utime + stime of
every thread, from /proc/PID/stat, over the measured window only): ``serve``, ``proxy``,
each broker, etcd, and the load generator (``client``). The server CPU per message is what
a message costs the deployment, so ``1e6 / server µs/msg`` is messages per second per core,
and (b) minus (a) is the hop's cost per message.

This machine has 2 cores shared by every process and the load generator: throughput cannot
grow with brokers here, so the report computes, from the per-message CPU measured in (c),
what N brokers would give on a machine with a core per process, and says what it assumes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass

from bench.load import CPU_CLIENT, CpuWindow, machine_info, proc_sample
from bench.peers.cluster import etcd_binary, launch_cluster
from bench.peers.servers import PopmqServer
from bench.peers.targets import PopmqTarget, prefill
from bench.results import ScenarioResult, format_number, markdown_table, percentile
from bench.scenarios._common import body_of, format_ratio, with_notes
from bench.scenarios.paced_cost import paced_sends
from bench.scenarios.pop_ack import consume_rate
from bench.scenarios.produce import produce_rate
from popmq import AsyncAdmin

__all__ = [
    "ONE_BROKER",
    "SERVE",
    "SYSTEMS",
    "TWO_BROKERS",
    "ClusterSettings",
    "Deployment",
    "main",
    "projection",
    "render",
    "run",
    "settings",
]

NAME = "cluster"
SERVE = "(a) serve"
ONE_BROKER = "(b) proxy + 1 broker"
TWO_BROKERS = "(c) proxy + 2 brokers"
SYSTEMS = (SERVE, ONE_BROKER, TWO_BROKERS)
_BROKERS = {ONE_BROKER: 1, TWO_BROKERS: 2}
PRODUCE_TOPIC = "produce"
POP_TOPIC = "popack"
PACED_TOPIC = "paced"
GROUP = "bench"
PROJECTED_BROKERS = (1, 2, 4, 8)

# Metric names. A process's CPU is f"{name} us/msg"; names: "serve", "proxy", "b1", "b2",
# "etcd", CPU_CLIENT.
MSG_S = "msg/s"
SERVER = "server us/msg"
"""serve's, or the proxy's plus every broker's."""
BROKERS = "brokers us/msg"
"""Every broker's CPU over the deployment's messages (each message is on one broker)."""
CORES = "cores busy"
"""All the measured processes' CPU (load generator included) over the window's wall time."""
P50, P99 = "p50 ms", "p99 ms"


def cpu_metric(process: str) -> str:
    return f"{process} us/msg"


@dataclass(frozen=True, kw_only=True)
class ClusterSettings:
    runs: int
    warmup_s: float
    duration_s: float
    backlog: int
    """Messages in the pop + ack topic at the start of every window."""
    paced_rate: int
    paced_s: float
    paced_warmup_s: float
    producers: int = 8
    produce_batches: tuple[int, ...] = (32, 1)
    consumers: int = 4
    pop_batch: int = 32
    queues: int = 8
    """Queues of each topic, in total (split evenly over a cluster's brokers)."""
    paced_senders: int = 8
    body_bytes: int = 1024


def settings(quick: bool) -> ClusterSettings:
    if quick:
        return ClusterSettings(
            runs=1,
            warmup_s=0.1,
            duration_s=0.3,
            backlog=2_000,
            paced_rate=200,
            paced_s=0.3,
            paced_warmup_s=0.1,
        )
    return ClusterSettings(
        runs=3,
        warmup_s=0.5,
        duration_s=2.5,
        backlog=100_000,
        paced_rate=500,
        paced_s=5.0,
        paced_warmup_s=0.5,
    )


def produce_case(batch: int, producers: int) -> str:
    return f"produce batch {batch} · {producers} producers"


def pop_case(batch: int, consumers: int) -> str:
    return f"pop + ack batch {batch} · {consumers} consumers"


def paced_case(rate: int, senders: int) -> str:
    return f"paced send {rate:,} msg/s · {senders} senders"


@dataclass(frozen=True, slots=True)
class Deployment:
    """A started deployment: the SDK target its clients use and its server processes."""

    name: str
    target: PopmqTarget
    servers: dict[str, int]
    """Process name -> pid of the processes that serve messages (serve; proxy, b1, ...)."""
    etcd_pid: int | None = None

    @property
    def pids(self) -> dict[str, int]:
        extra = {"etcd": self.etcd_pid} if self.etcd_pid is not None else {}
        return {**self.servers, **extra}

    @property
    def brokers(self) -> list[str]:
        return [name for name in self.servers if name not in ("serve", "proxy")]


@contextlib.contextmanager
def deploy(name: str) -> Iterator[Deployment]:
    """Start deployment ``name`` (one of SYSTEMS); stop every process of it on exit."""
    if name == SERVE:
        with PopmqServer(flush="sync") as server:
            yield Deployment(name, PopmqTarget(server.endpoint, name), {"serve": server.pid})
        return
    if name not in _BROKERS:
        raise ValueError(f"unknown deployment {name!r}; known: {', '.join(SYSTEMS)}")
    with launch_cluster(brokers=_BROKERS[name], name=name) as cluster:
        yield Deployment(
            name,
            cluster.target,
            {"proxy": cluster.proxy_pid, **cluster.broker_pids},
            cluster.etcd_pid,
        )


def deploy_all(stack: contextlib.ExitStack) -> dict[str, Deployment]:
    """Start the three deployments at once (threads: each mostly waits for its children),
    each stopped by ``stack``; the first failure is raised once every start has ended."""

    def enter(name: str) -> tuple[contextlib.AbstractContextManager[Deployment], Deployment]:
        manager = deploy(name)
        return manager, manager.__enter__()

    with concurrent.futures.ThreadPoolExecutor(len(SYSTEMS)) as pool:
        futures = [pool.submit(enter, name) for name in SYSTEMS]
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
    return deployments


def record(result: ScenarioResult, case: str, deployment: Deployment, window: CpuWindow) -> None:
    """Each process's CPU per message, the server's sum, the brokers' sum, cores busy."""
    for process in window.cpu_s:
        result.add(case, deployment.name, cpu_metric(process), window.us_per_item(process))
    server = sum(window.us_per_item(p) for p in deployment.servers)
    result.add(case, deployment.name, SERVER, server)
    if deployment.brokers:
        brokers = sum(window.us_per_item(p) for p in deployment.brokers)
        result.add(case, deployment.name, BROKERS, brokers)
    result.add(case, deployment.name, CORES, window.cores_busy())


async def _setup(deployment: Deployment, config: ClusterSettings, body: bytes) -> None:
    """Create the topics with ``config.queues`` queues in all; store the pop backlog.

    The group is created by its first pop (with the defaults, reading from the start), the
    same way in every deployment.
    """
    brokers = max(1, len(deployment.brokers))
    if config.queues % brokers:
        raise ValueError(f"{config.queues} queues do not split evenly over {brokers} brokers")
    target = deployment.target
    for topic in (PRODUCE_TOPIC, POP_TOPIC, PACED_TOPIC):
        await target.create_topic(topic, queues=config.queues // brokers)
        async with AsyncAdmin(target.endpoint) as admin:
            created = (await admin.get_topic(topic)).topic.queues
        if created != config.queues:  # a proxy that missed a broker would make fewer
            raise RuntimeError(
                f"{deployment.name}: topic {topic!r} got {created} queues, not "
                f"{config.queues} ({config.queues // brokers} on each of {brokers} brokers)"
            )
    await prefill(deployment.target, POP_TOPIC, config.backlog, body)


async def _paced(
    deployment: Deployment, config: ClusterSettings, body: bytes
) -> tuple[list[float], CpuWindow]:
    """Round trips of one paced window, and the CPU it took."""
    target = deployment.target
    async with contextlib.AsyncExitStack() as stack:
        senders = [
            await stack.enter_async_context(target.sender(PACED_TOPIC))
            for _ in range(config.paced_senders)
        ]
        await paced_sends(senders, rate=config.paced_rate, seconds=config.paced_warmup_s, body=body)
        window = CpuWindow(deployment.pids)
        window.window_started()
        trips = await paced_sends(
            senders, rate=config.paced_rate, seconds=config.paced_s, body=body
        )
        window.window_ended(len(trips))
    return sorted(trips), window


def _measure_run(
    result: ScenarioResult, deployment: Deployment, config: ClusterSettings, body: bytes
) -> None:
    """One run of every case against one deployment."""
    target = deployment.target
    for batch in config.produce_batches:
        window = CpuWindow(deployment.pids)
        rate = asyncio.run(
            produce_rate(
                target,
                batch=batch,
                producers=config.producers,
                body=body,
                warmup_s=config.warmup_s,
                duration_s=config.duration_s,
                observer=window,
            )
        )
        case = produce_case(batch, config.producers)
        result.add(case, deployment.name, MSG_S, rate)
        record(result, case, deployment, window)
    window = CpuWindow(deployment.pids)
    consumed = asyncio.run(
        consume_rate(
            target,
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
    case = pop_case(config.pop_batch, config.consumers)
    result.add(case, deployment.name, MSG_S, consumed.rate)
    record(result, case, deployment, window)
    asyncio.run(prefill(target, POP_TOPIC, consumed.taken, body))
    trips, window = asyncio.run(_paced(deployment, config, body))
    case = paced_case(config.paced_rate, config.paced_senders)
    result.add(case, deployment.name, P50, percentile(trips, 0.5) * 1000)
    result.add(case, deployment.name, P99, percentile(trips, 0.99) * 1000)
    record(result, case, deployment, window)


def _rss_note(deployments: Mapping[str, Deployment], when: str) -> str:
    parts = []
    for deployment in deployments.values():
        sizes = ", ".join(
            f"{process} {proc_sample(pid).rss_bytes / 2**20:.0f}"
            for process, pid in deployment.pids.items()
        )
        parts.append(f"{deployment.name}: {sizes}")
    return f"RSS (MB) {when}: " + "; ".join(parts) + "."


def run(config: ClusterSettings) -> ScenarioResult:
    """Start the three deployments, fill them, then measure them run by run.

    Raises:
        PeerMissingError: etcd is not installed.
    """
    began = time.perf_counter()
    etcd_binary()  # before starting anything
    result = ScenarioResult(NAME, "8. Cluster mode: the price of the hop", settings=asdict(config))
    body = body_of(config.body_bytes)
    load_start = machine_info()["load"]
    with contextlib.ExitStack() as stack:
        deployments = deploy_all(stack)
        for deployment in deployments.values():
            asyncio.run(_setup(deployment, config, body))
        rss_before = _rss_note(deployments, "after the pre-fill")
        for _ in range(config.runs):
            for deployment in deployments.values():
                _measure_run(result, deployment, config, body)
        rss_after = _rss_note(deployments, "after the last window")
    result.notes += [
        "Each deployment is its own processes, all started before the first window and left "
        "running (idle, a deployment used about 1% of a core, mostly etcd's); they alternate "
        "within each run. CPU is utime + stime of each process (every thread) over the "
        "measured window, divided by the messages counted in it.",
        f"Pop + ack: the group is created by its first pop (defaults, from the start) in all "
        f"three; each window and its warm-up stop after {config.duration_s:g} s "
        f"({config.warmup_s:g} s) or {max(1, config.backlog // 4):,} messages, then what it "
        f"took is sent again through the same endpoint (not timed), so every window starts "
        f"on a {config.backlog:,}-message backlog.",
        rss_before,
        rss_after,
        f"Load average (1 / 5 / 15 min) at the start {load_start}, at the end "
        f"{machine_info()['load']}: it counts this scenario's own processes (load generator, "
        "servers, etcd) as well as any other work, which shows as cores busy below 2 in "
        "saturated windows.",
    ]
    result.seconds = time.perf_counter() - began
    return result


# -- rendering ----------------------------------------------------------------------------


def _throughput_cases(result: ScenarioResult) -> list[str]:
    return [c for c in result.cases() if result.samples(c, SERVE, MSG_S)]


def _paced_cases(result: ScenarioResult) -> list[str]:
    return [c for c in result.cases() if result.samples(c, SERVE, P99)]


def _us(value: float) -> str:
    return format_number(value)


def throughput_table(result: ScenarioResult) -> str:
    """msg/s of the three side by side, with (b) ÷ (a) and (c) ÷ (b) (paired by run)."""
    headers = ["case", *(f"{s} msg/s" for s in SYSTEMS), "(b) ÷ (a)", "(c) ÷ (b)"]
    rows = [
        [
            case,
            *(format_number(result.median(case, s, MSG_S)) for s in SYSTEMS),
            format_ratio(result.ratio(case, MSG_S, ONE_BROKER, SERVE)),
            format_ratio(result.ratio(case, MSG_S, TWO_BROKERS, ONE_BROKER)),
        ]
        for case in _throughput_cases(result)
    ]
    return markdown_table(headers, rows)


def _brokers_cell(result: ScenarioResult, case: str, system: str) -> str:
    total = result.median(case, system, BROKERS)
    if math.isnan(total):
        return "-"
    each = [
        _us(result.median(case, system, cpu_metric(b)))
        for b in ("b1", "b2")
        if result.samples(case, system, cpu_metric(b))
    ]
    return _us(total) + (f" ({' + '.join(each)})" if len(each) > 1 else "")


def cpu_table(result: ScenarioResult, cases: list[str], *, paced: bool) -> str:
    """Per case and deployment: the rate (or the paced round trip) and each process's CPU."""
    lead = [P50, P99] if paced else [MSG_S]
    headers = [
        "case",
        "deployment",
        *lead,
        "server µs/msg",
        "proxy µs/msg",
        "brokers µs/msg",
        "serve µs/msg",
        "etcd µs/msg",
        "client µs/msg",
        *([] if paced else ["msg/s per server core"]),
        "cores busy",
    ]
    rows = []
    for case in cases:
        for system in SYSTEMS:
            if not result.samples(case, system, SERVER):
                continue
            server = result.median(case, system, SERVER)

            def cell(metric: str, system: str = system, case: str = case) -> str:
                value = result.median(case, system, metric)
                return "-" if math.isnan(value) else _us(value)

            rows.append(
                [
                    case,
                    system,
                    *(format_number(result.median(case, system, m)) for m in lead),
                    _us(server),
                    cell(cpu_metric("proxy")),
                    _brokers_cell(result, case, system),
                    cell(cpu_metric("serve")),
                    cell(cpu_metric("etcd")),
                    cell(cpu_metric(CPU_CLIENT)),
                    *([] if paced else [format_number(1e6 / server) if server > 0 else "n/a"]),
                    f"{result.median(case, system, CORES):.2f}",
                ]
            )
    return markdown_table(headers, rows)


def hop_lines(result: ScenarioResult) -> list[str]:
    """Per case: what the hop adds to a message's server CPU, and the proxy's share."""
    lines = []
    for case in [*_throughput_cases(result), *_paced_cases(result)]:
        serve = result.median(case, SERVE, SERVER)
        cluster = result.median(case, ONE_BROKER, SERVER)
        proxy = result.median(case, ONE_BROKER, cpu_metric("proxy"))
        broker = result.median(case, ONE_BROKER, BROKERS)
        if any(math.isnan(v) for v in (serve, cluster, proxy, broker)):
            continue
        lines.append(
            f"{case}: (b) spends {_us(cluster)} µs of server CPU per message against (a)'s "
            f"{_us(serve)} ({format_ratio(result.ratio(case, SERVER, ONE_BROKER, SERVE))}, "
            f"paired); the hop costs {_us(cluster - serve)} µs a message. Of (b)'s, the "
            f"proxy takes {_us(proxy)} µs ({proxy / cluster:.0%}), the broker {_us(broker)} µs "
            f"({broker / cluster:.0%}; (a)'s whole server is {_us(serve)})."
        )
    return lines


@dataclass(frozen=True, slots=True)
class Projection:
    """What N brokers would give at (c)'s per-message CPU, one core per process."""

    brokers: int
    proxies: int
    """Proxies needed so that the proxies are not the limit."""
    cores: int
    """Server cores: a core per broker and per proxy."""
    rate: float
    """msg/s with that many proxies (the brokers are the limit)."""
    one_proxy_rate: float
    """msg/s with a single proxy: the smaller of its limit and the brokers'."""


def projection(proxy_us: float, broker_us: float, brokers: int) -> Projection:
    """N brokers at ``broker_us`` (all brokers' CPU per message) and proxies at ``proxy_us``.

    A process saturates at one core (1e6 µs of CPU a second). A message is stored on one
    broker, so N brokers take ``N * 1e6 / broker_us`` msg/s; one proxy takes
    ``1e6 / proxy_us``, so ``ceil(N * proxy_us / broker_us)`` proxies keep up with them.

    Raises:
        ValueError: a CPU figure is not positive or ``brokers`` is below 1.
    """
    if not (proxy_us > 0 and broker_us > 0):
        raise ValueError(f"CPU per message must be above 0 µs, not {proxy_us}, {broker_us}")
    if brokers < 1:
        raise ValueError(f"brokers must be at least 1, not {brokers}")
    rate = brokers * 1e6 / broker_us
    proxies = math.ceil(brokers * proxy_us / broker_us - 1e-9)
    return Projection(
        brokers=brokers,
        proxies=proxies,
        cores=brokers + proxies,
        rate=rate,
        one_proxy_rate=min(rate, 1e6 / proxy_us),
    )


def projection_section(result: ScenarioResult) -> str:
    """The projection table from (c)'s per-message CPU, with its assumptions spelled out."""
    rows = []
    for case in _throughput_cases(result):
        proxy = result.median(case, TWO_BROKERS, cpu_metric("proxy"))
        broker = result.median(case, TWO_BROKERS, BROKERS)
        if math.isnan(proxy) or math.isnan(broker) or proxy <= 0 or broker <= 0:
            continue
        for n in PROJECTED_BROKERS:
            p = projection(proxy, broker, n)
            rows.append(
                [
                    case,
                    f"{_us(proxy)} / {_us(broker)}",
                    str(n),
                    str(p.proxies),
                    str(p.cores),
                    format_number(p.rate),
                    format_number(p.one_proxy_rate),
                ]
            )
    if not rows:
        return ""
    table = markdown_table(
        [
            "case",
            "(c) proxy / brokers µs/msg",
            "brokers",
            "proxies needed",
            "server cores",
            "projected msg/s",
            "with a single proxy",
        ],
        rows,
    )
    return "\n".join(
        [
            "**This 2-core machine cannot show scaling**: every deployment shares the same two "
            "cores with the load generator, so (c) ÷ (b) says what a second broker costs when "
            "there is no core for it, not what it would add. What carries over to a larger "
            "machine is the CPU per message, and the table computes from (c)'s:",
            "",
            table,
            "",
            "- projected msg/s = brokers * 1e6 / (c)'s brokers µs per message (a message is "
            "stored on one broker); proxies needed = ceil(brokers * proxy µs / brokers µs) so the "
            "proxies are not the limit; a single proxy caps at 1e6 / proxy µs per message.",
            "- Assumptions: each process has a core of its own and can use all of it (a Python "
            "process's event loop holds the GIL, so in practice somewhat less); the CPU per "
            "message stays at (c)'s as brokers are added (a send touches one broker, but a "
            "pop sweeps the brokers that hold the topic, so an emptier broker costs more "
            "probes as N grows: compare (b) and (c) above); each broker's disk keeps up with "
            "its synced writes; the clients run on other machines (their CPU is not "
            "counted); and the machine is not saturated, whereas these figures were measured "
            "on two busy cores (where a saturated group commit packs more per write and a "
            "descheduled process waits without spending CPU).",
        ]
    )


def etcd_line(result: ScenarioResult) -> str:
    """etcd's CPU as a share of a core: a fixed background, so not in the server's µs/msg."""
    shares = [
        result.median(case, system, cpu_metric("etcd")) * result.median(case, system, MSG_S) / 1e6
        for case in _throughput_cases(result)
        for system in _BROKERS
        if result.samples(case, system, cpu_metric("etcd"))
    ]
    shares = [s for s in shares if not math.isnan(s)]
    if not shares:
        return ""
    return (
        f"etcd used {min(shares):.1%} to {max(shares):.1%} of a core during the throughput "
        "windows, whatever their rate (lease keepalives, raft ticks, watches): a fixed "
        "cost, not a per-message one, so it is shown but left out of the server µs/msg."
    )


def render(result: ScenarioResult) -> str:
    throughput = _throughput_cases(result)
    paced = _paced_cases(result)
    parts = [
        "Throughput, side by side (median of runs; ratios are medians of per-run ratios):",
        throughput_table(result),
        "CPU per message of each process over the measured window (µs, medians); server = "
        "serve, or proxy + brokers; msg/s per server core = 1e6 / server µs; cores busy = "
        "every measured process's CPU (load generator included) over wall time:",
        cpu_table(result, throughput, paced=False),
    ]
    if paced:
        parts += [
            "The paced send (scenario 3b's pacing, single messages, round trip from the "
            "scheduled time):",
            cpu_table(result, paced, paced=True),
        ]
        for case in paced:
            parts.append(
                f"{case}: p99 (b) ÷ (a) "
                f"{format_ratio(result.ratio(case, P99, ONE_BROKER, SERVE))}, "
                f"p50 (b) ÷ (a) {format_ratio(result.ratio(case, P50, ONE_BROKER, SERVE))}."
            )
    hops = hop_lines(result)
    etcd = etcd_line(result)
    if etcd:
        hops.append(etcd)
    if hops:
        parts.append("The hop's price:\n\n" + "\n".join(f"- {line}" for line in hops))
    projected = projection_section(result)
    if projected:
        parts.append(projected)
    return with_notes("\n\n".join(parts), result)


def main(*, quick: bool) -> str:
    return render(run(settings(quick)))
