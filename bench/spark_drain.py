"""spark-drain: Spark pop mode vs one SDK SimpleConsumer draining the same backlog.

    python -m bench --scenario spark-drain [--quick]     # one run, in the bench's table
    python -m bench.spark_drain [--runs 3] [--messages 200000] [--batches 4]
        [--master local[2] | spark://127.0.0.1:7077] [--partitions 4] [--pop-batch 32]
        [--page N] [--base CHECKOUT]

One topic (8 queues) is filled with 1 KiB messages, then drained three times by three
groups:
- Spark: readStream pop mode (lease tokens, acks after commit), trigger AvailableNow, noop
  sink, `--partitions` partitions of about messages / (partitions x batches) each, driven
  from a spawned process on `--master` (default local[2]; a standalone master such as the
  one docs/spark.md starts runs it on that cluster's workers). The total time includes
  starting the query and its Python workers, which the first batch pays for; the steady
  rate is the batches after the first over their own trigger durations.
- SDK: one SimpleConsumer in a spawned process (no GIL shared with the server), receive
  `--pop-batch` with a 1 s long poll, ack them in one call, until the backlog is gone.
- SDK lease: the same consumer on Spark's path, as one partition reads: LeasePop pages of
  `--page` messages under a token until it holds about messages / (partitions x batches)
  or a page comes back short, then AckLease of the token, and the next token.

`--page` is Spark's popBatchSize and the lease loop's page (default: the connector's own
default popBatchSize, so a checkout is measured as it reads by default). With `--base
CHECKOUT` each run is made twice, by that checkout's popmq and by this one's (each a child
`python -m bench.spark_drain --runs 1` with its `src` on PYTHONPATH), in alternating
order, so both see the same machine: the A/B of bench/results/spark_drain_ab.txt.

The server runs in this process on its own loop thread (default settings but
`pop.max_batch` = `--pop-batch`: 32 is popmq's and RocketMQ's default; sync flush). Spark's
session start-up is not counted. Each run starts a fresh server and data dir, and reports
the machine's load average around it, since other work changes these numbers by tens of
percent. A full run's output, with its command: bench/results/spark_drain*.txt
(force-added: the folder is git-ignored for make bench's raw samples).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from popmq import Admin, Message, Producer, SimpleConsumer
from popmq.broker_core.config import BrokerConfig, PopConfig
from tests.support.server_thread import ServerThread

THIS = Path(__file__).resolve().parents[1]
TOPIC = "drain"
SPARK = "spark"
SDK = "sdk"


@dataclass(frozen=True)
class DrainResult:
    consumer: str
    messages: int
    seconds: float
    steady_rate: float | None = None
    server_us: float | None = None
    """CPU of the server's process (its loop and store threads) per message, in µs: what
    the drain cost the server whatever else ran on the machine."""
    client_us: float | None = None
    """CPU of the consumer's process per message, in µs (SDK drains only)."""

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


@dataclass(frozen=True)
class RunResult:
    """One run: both drains and the 1-minute load average seen around and during it."""

    spark: DrainResult
    sdk: DrainResult
    load_min: float
    load_max: float
    lease: DrainResult | None = None


def _fill(endpoint: str, count: int, body_bytes: int) -> None:
    body = os.urandom(body_bytes)  # incompressible: sent and stored as 1 KiB
    with Producer(endpoint) as producer:
        for start in range(0, count, 500):
            producer.send_batch(TOPIC, [Message(body)] * min(500, count - start))


def _sdk_drain(endpoint: str, count: int, pop_batch: int = 32) -> tuple[int, float, float]:
    """Runs in a spawned process: one consumer, receive and ack `pop_batch` at a time."""
    done = 0
    started, cpu = time.perf_counter(), time.process_time()
    with SimpleConsumer(endpoint, group="sdk-drain", topic=TOPIC) as consumer:
        while done < count:
            messages = consumer.receive(max_messages=pop_batch, invisible_duration_s=60, wait_s=1)
            if messages:
                consumer.ack(messages)
                done += len(messages)
    return done, time.perf_counter() - started, time.process_time() - cpu


def _sdk_lease_drain(
    endpoint: str, count: int, per_lease: int, page_size: int
) -> tuple[int, float, float]:
    """Runs in a spawned process: one consumer reading leases as a Spark partition does."""
    done = 0
    lease = 0
    started, cpu = time.perf_counter(), time.process_time()
    with SimpleConsumer(endpoint, group="sdk-lease-drain", topic=TOPIC) as consumer:
        while done < count:
            token = f"sdk/{lease}"
            page = held = 0
            while held < per_lease:
                want = min(page_size, per_lease - held)
                result = consumer.receive_lease(
                    token,
                    page,
                    max_messages=want,
                    invisible_duration_s=300,
                    wait_s=1 if page == 0 else 0,
                )
                held += len(result.messages)
                page += 1
                if len(result.messages) < want:
                    break
            if held:
                [acked] = consumer.ack_leases([token])
                if not acked.ok:
                    raise RuntimeError(f"lease {token} was not acked: {acked.message}")
            done += held
            lease += 1
    return done, time.perf_counter() - started, time.process_time() - cpu


def _default_page() -> int:
    """The connector's default popBatchSize, of the popmq being measured."""
    from popmq.spark.options import ReadOptions

    [field] = [f for f in dataclasses.fields(ReadOptions) if f.name == "pop_batch_size"]
    return int(field.default)  # type: ignore[arg-type]


def _spark_drain(
    endpoint: str,
    per_partition: int,
    checkpoint: Path,
    master: str = "local[2]",
    partitions: int = 4,
    page: int = 32,
) -> DrainResult:
    """Runs in a spawned process: its own SparkSession, stopped at the end."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import popmq.spark

    spark = (
        SparkSession.builder.master(master)
        .appName("popmq-bench-spark-drain")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    popmq.spark.register(spark)
    started = time.perf_counter()
    query = (
        spark.readStream.format("popmq")
        .option("endpoint", endpoint)
        .option("topic", TOPIC)
        .option("mode", "pop")
        .option("group", "spark-drain")
        .option("numPartitions", str(partitions))
        .option("maxMessagesPerPartition", str(per_partition))
        .option("popBatchSize", str(page))
        .option("invisibleDuration", "300s")
        .option("waitSeconds", "1")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    failure = query.exception()
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    spark.stop()
    if failure is not None:
        raise RuntimeError(f"the Spark drain failed: {failure}")
    drained = sum(p["numInputRows"] for p in progress)
    steady = None
    if len(progress) > 1:
        later = progress[1:]
        seconds = sum(p["durationMs"]["triggerExecution"] for p in later) / 1000
        steady = sum(p["numInputRows"] for p in later) / seconds
    return DrainResult(
        f"Spark pop mode, {master}, {partitions} partitions", drained, elapsed, steady
    )


def _us(cpu_before: float, messages: int) -> float:
    """This process's CPU since `cpu_before` per message, in µs (the server runs here)."""
    return (time.process_time() - cpu_before) * 1e6 / max(1, messages)


def _unfinished(server: ServerThread, group: str) -> int:
    """Messages the group has not acked (lag plus in flight), read on the server's loop."""

    async def count() -> int:
        return sum(r.lag + r.inflight for r in await server.broker.group_lag(group, TOPIC))

    return server.call(count)


def run(
    count: int,
    *,
    batches: int,
    body_bytes: int = 1024,
    master: str = "local[2]",
    partitions: int = 4,
    pop_batch: int = 32,
    page: int | None = None,
) -> list[DrainResult]:
    """Fill `count` messages, drain them with Spark (in about `batches` micro-batches), with
    one SimpleConsumer, then with one SimpleConsumer reading leases; `page`: Spark's
    popBatchSize and the lease loop's page (None: the connector's default)."""
    page = _default_page() if page is None else page
    with tempfile.TemporaryDirectory(prefix="popmq-bench-spark-") as tmp:
        server = ServerThread(Path(tmp) / "data", BrokerConfig(pop=PopConfig(max_batch=pop_batch)))
        endpoint = server.start()
        try:
            with Admin(endpoint) as admin:
                admin.create_topic(TOPIC, queues=8)
            _fill(endpoint, count, body_bytes)
            context = multiprocessing.get_context("spawn")
            per_partition = max(1, -(-count // (partitions * batches)))
            with context.Pool(1) as pool:
                cpu = time.process_time()
                spark = pool.apply(
                    _spark_drain,
                    (
                        endpoint,
                        per_partition,
                        Path(tmp) / "checkpoint",
                        master,
                        partitions,
                        page,
                    ),
                )
                spark = dataclasses.replace(spark, server_us=_us(cpu, spark.messages))
            with context.Pool(1) as pool:
                cpu = time.process_time()
                drained, seconds, client = pool.apply(_sdk_drain, (endpoint, count, pop_batch))
            sdk = DrainResult(
                f"one SDK SimpleConsumer (receive {pop_batch}, ack)",
                drained,
                seconds,
                server_us=_us(cpu, drained),
                client_us=client * 1e6 / max(1, drained),
            )
            with context.Pool(1) as pool:
                cpu = time.process_time()
                leased, seconds, client = pool.apply(
                    _sdk_lease_drain, (endpoint, count, per_partition, page)
                )
            lease = DrainResult(
                f"one SDK SimpleConsumer on leases (pages of {page}, AckLease)",
                leased,
                seconds,
                server_us=_us(cpu, leased),
                client_us=client * 1e6 / max(1, leased),
            )
            groups = ("spark-drain", "sdk-drain", "sdk-lease-drain")
            lag = {group: _unfinished(server, group) for group in groups}
        finally:
            server.stop()
    if spark.messages != count or lease.messages != count or any(lag.values()):
        raise RuntimeError(
            f"a drain was incomplete: spark {spark.messages}/{count}, lease "
            f"{lease.messages}/{count}, lag {lag}"
        )
    return [spark, sdk, lease]


def main(*, quick: bool) -> str:
    """`python -m bench --scenario spark-drain`: one run (quick: 1,000 messages, 1 batch)."""
    count = 1_000 if quick else 200_000
    results = run(count, batches=1 if quick else 4)
    lines = [
        f"{count:,} messages of 1 KiB, 8 queues; each drain acks everything.\n",
        "| consumer | messages | seconds | msg/s | steady msg/s (after batch 1) |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        steady = f"{r.steady_rate:,.0f}" if r.steady_rate is not None else "-"
        lines.append(
            f"| {r.consumer} | {r.messages:,} | {r.seconds:.1f} | {r.rate:,.0f} | {steady} |"
        )
    spark, sdk = results[:2]
    lines.append(f"\nSpark / SDK throughput ratio: {spark.rate / sdk.rate:.2f}")
    return "\n".join(lines)


class _LoadSampler:
    """Samples the 1-minute load average every few seconds while a run lasts."""

    def __init__(self, every_s: float = 2.0) -> None:
        self._every_s = every_s
        self._stop = threading.Event()
        # Appended to by the sampling thread only; read after join().
        self.samples: list[float] = [os.getloadavg()[0]]
        self._thread = threading.Thread(target=self._sample, name="load-sampler", daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self._every_s):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> _LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])


def _spread(values: Sequence[float], fmt: str) -> str:
    low, high, mid = min(values), max(values), statistics.median(values)
    return f"{low:{fmt}} to {high:{fmt}} ({mid:{fmt}})"


def _row(number: int | str, r: RunResult) -> str:
    steady = f"{r.spark.steady_rate:,.0f}" if r.spark.steady_rate is not None else "-"
    lease = f"{r.lease.rate:,.0f}" if r.lease is not None else "-"
    return (
        f"| {number} | {r.load_min:.1f} to {r.load_max:.1f} | {r.spark.seconds:.1f} "
        f"| {r.spark.rate:,.0f} | {steady} | {r.sdk.seconds:.1f} | {r.sdk.rate:,.0f} "
        f"| {r.spark.rate / r.sdk.rate:.2f} | {lease} | {_cpu(r.spark)} | {_cpu(r.sdk)} "
        f"| {_cpu(r.lease)} |"
    )


def _cpu(d: DrainResult | None) -> str:
    if d is None or d.server_us is None:
        return "-"
    client = f" + {d.client_us:.0f}" if d.client_us is not None else ""
    return f"{d.server_us:.0f}{client}"


_HEADER = [
    "| run | load (1 min) | Spark s | Spark msg/s | Spark steady msg/s (after batch 1) "
    "| SDK s | SDK msg/s | Spark / SDK | SDK lease msg/s | Spark CPU µs/msg (server) "
    "| SDK CPU µs/msg (server + client) | SDK lease CPU µs/msg (server + client) |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
]


def _summary(label: str, runs: Sequence[RunResult]) -> str:
    steadies = [r.spark.steady_rate for r in runs if r.spark.steady_rate is not None]
    leases = [r.lease.rate for r in runs if r.lease is not None]
    cells = [
        f"{min(r.load_min for r in runs):.1f} to {max(r.load_max for r in runs):.1f}",
        _spread([r.spark.seconds for r in runs], ".1f"),
        _spread([r.spark.rate for r in runs], ",.0f"),
        _spread(steadies, ",.0f") if steadies else "-",
        _spread([r.sdk.seconds for r in runs], ".1f"),
        _spread([r.sdk.rate for r in runs], ",.0f"),
        _spread([r.spark.rate / r.sdk.rate for r in runs], ".2f"),
        _spread(leases, ",.0f") if leases else "-",
        *(_cpu_spread([pick(r) for r in runs]) for pick in _DRAINS),
    ]
    return f"| {label} | {' | '.join(cells)} |"


_DRAINS: tuple[Callable[[RunResult], DrainResult | None], ...] = (
    lambda r: r.spark,
    lambda r: r.sdk,
    lambda r: r.lease,
)


def _cpu_spread(drains: Sequence[DrainResult | None]) -> str:
    server = [d.server_us for d in drains if d is not None and d.server_us is not None]
    if not server:
        return "-"
    client = [d.client_us for d in drains if d is not None and d.client_us is not None]
    return _spread(server, ".0f") + (f" + {_spread(client, '.0f')}" if client else "")


def render(runs: Sequence[RunResult]) -> str:
    """One markdown row per run, then min to max (median) over the runs."""
    lines = [*_HEADER, *(_row(number, r) for number, r in enumerate(runs, start=1))]
    if len(runs) > 1:
        lines.append(_summary("min to max (median)", runs))
    return "\n".join(lines)


def _to_json(r: RunResult) -> str:
    def drain(d: DrainResult | None) -> dict[str, object] | None:
        return None if d is None else dataclasses.asdict(d)

    return json.dumps(
        {"spark": drain(r.spark), "sdk": drain(r.sdk), "lease": drain(r.lease),
         "load_min": r.load_min, "load_max": r.load_max}
    )  # fmt: skip


def _from_json(text: str) -> RunResult:
    raw = json.loads(text)
    return RunResult(
        spark=DrainResult(**raw["spark"]),
        sdk=DrainResult(**raw["sdk"]),
        lease=None if raw["lease"] is None else DrainResult(**raw["lease"]),
        load_min=raw["load_min"],
        load_max=raw["load_max"],
    )


_JSON_PREFIX = "RUN-JSON "


def _child_run(checkout: Path, argv: list[str]) -> RunResult:
    """One run by `checkout`'s popmq: this bench in a child with its src on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": f"{checkout / 'src'}{os.pathsep}{THIS}"}
    done = subprocess.run(
        [sys.executable, "-m", "bench.spark_drain", *argv, "--runs", "1", "--json"],
        cwd=THIS,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith(_JSON_PREFIX):
            return _from_json(line[len(_JSON_PREFIX) :])
    raise RuntimeError(f"the run of {checkout.name} failed:\n{done.stdout}\n{done.stderr}")


def _ab(args: argparse.Namespace, passed: list[str]) -> int:
    """--base: each run by the base checkout and by this one, in alternating order."""
    base = args.base.resolve()
    print(
        "$ python -m bench.spark_drain "
        + shlex.join(_without_base(passed)).replace(str(base), "<start checkout>")
        + " --base <start checkout>"
    )
    print(
        f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; POPMQ_PURE_PYTHON="
        f"{os.environ.get('POPMQ_PURE_PYTHON', '')}; "
        f"{args.messages:,} messages of 1 KiB, 8 queues, {args.batches} Spark batches; master "
        f"{args.master}, {args.partitions} partitions, pop.max_batch {args.pop_batch}, "
        f"page: each checkout's default popBatchSize unless --page",
        flush=True,
    )
    child = _without_base(passed)
    results: dict[str, list[RunResult]] = {"base": [], "new": []}
    for number in range(1, args.runs + 1):
        order = [("base", base), ("new", THIS)]
        if number % 2 == 0:
            order.reverse()
        for name, checkout in order:
            result = _child_run(checkout, child)
            results[name].append(result)
            print(f"{time.strftime('%H:%M:%S')} {_row(f'{number} {name}', result)}", flush=True)
    print()
    lines = list(_HEADER)
    for name in ("base", "new"):
        lines += [_row(f"{n} {name}", r) for n, r in enumerate(results[name], start=1)]
    for name in ("base", "new"):
        lines.append(_summary(f"{name}: min to max (median)", results[name]))
    print("\n".join(lines))

    def ratio(pick: Callable[[RunResult], float | None], *, inverse: bool = False) -> str:
        old = [v for v in map(pick, results["base"]) if v is not None]
        new = [v for v in map(pick, results["new"]) if v is not None]
        if not old or not new:
            return "-"
        a, b = statistics.median(new), statistics.median(old)
        return f"{(b / a if inverse else a / b):.2f}x"

    print(
        "\nnew / base, medians: Spark msg/s "
        + ratio(lambda r: r.spark.rate)
        + ", Spark steady msg/s "
        + ratio(lambda r: r.spark.steady_rate)
        + ", SDK msg/s "
        + ratio(lambda r: r.sdk.rate)
        + ", SDK lease msg/s "
        + ratio(lambda r: r.lease.rate if r.lease is not None else None)
        + "; base / new, medians of CPU per message: server in the Spark drain "
        + ratio(lambda r: r.spark.server_us, inverse=True)
        + ", server in the SDK lease drain "
        + ratio(lambda r: r.lease.server_us if r.lease is not None else None, inverse=True)
        + ", client in the SDK lease drain "
        + ratio(lambda r: r.lease.client_us if r.lease is not None else None, inverse=True)
    )
    return 0


def _without_base(argv: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for item in argv:
        if skip:
            skip = False
            continue
        if item == "--base":
            skip = True
            continue
        if item.startswith("--base="):
            continue
        out.append(item)
    return out


def cli(argv: Sequence[str] | None = None) -> int:
    """`python -m bench.spark_drain`: several runs, each row with its load, and the spread."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.spark_drain", description=__doc__.split("\n", 1)[0]
    )
    parser.add_argument("--runs", type=int, default=3, help="fresh server each run (3)")
    parser.add_argument("--messages", type=int, default=200_000, help="backlog (200000)")
    parser.add_argument("--batches", type=int, default=4, help="Spark micro-batches (4)")
    parser.add_argument(
        "--master", default="local[2]", help="Spark master (local[2]; spark://HOST:PORT)"
    )
    parser.add_argument("--partitions", type=int, default=4, help="numPartitions (4)")
    parser.add_argument(
        "--pop-batch",
        type=int,
        default=32,
        help="messages per pop: the server's pop.max_batch and the SDK's receive (32, the "
        "default of both)",
    )
    parser.add_argument(
        "--page",
        type=int,
        default=None,
        help="Spark's popBatchSize and the lease loop's page (the connector's default)",
    )
    parser.add_argument(
        "--base",
        type=Path,
        default=None,
        help="another checkout: each run by its popmq and by this one's, alternately",
    )
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("runs", "messages", "batches", "partitions", "pop_batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.page is not None and args.page < 1:
        parser.error("--page must be at least 1")
    passed = list(sys.argv[1:] if argv is None else argv)
    if args.base is not None:
        return _ab(args, passed)
    page = _default_page() if args.page is None else args.page
    print(f"$ python -m bench.spark_drain {shlex.join(passed)}")
    print(
        f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; {args.messages:,} messages of 1 KiB, 8 queues, "
        f"{args.batches} Spark batches; master {args.master}, {args.partitions} partitions, "
        f"{args.pop_batch} messages per pop, Spark and lease pages of {page}",
        flush=True,
    )
    runs: list[RunResult] = []
    for number in range(1, args.runs + 1):
        with _LoadSampler() as load:
            spark, sdk, lease = run(
                args.messages,
                batches=args.batches,
                master=args.master,
                partitions=args.partitions,
                pop_batch=args.pop_batch,
                page=page,
            )
        runs.append(RunResult(spark, sdk, min(load.samples), max(load.samples), lease))
        if args.json:
            print(_JSON_PREFIX + _to_json(runs[-1]), flush=True)
        # Each run as it ends: a run cut short by the machine still leaves its numbers.
        print(f"{time.strftime('%H:%M:%S')} {_row(number, runs[-1])}", flush=True)
    print()
    print(render(runs))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
