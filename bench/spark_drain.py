"""spark-drain: Spark pop mode vs one SDK SimpleConsumer draining the same backlog.

    python -m bench --scenario spark-drain [--quick]     # one run, in the bench's table
    python -m bench.spark_drain [--runs 3] [--messages 200000] [--batches 4]
        [--master local[2] | spark://127.0.0.1:7077] [--partitions 4] [--pop-batch 32]

One topic (8 queues) is filled with 1 KiB messages, then drained twice by two groups:
- Spark: readStream pop mode (lease tokens, acks after commit), trigger AvailableNow, noop
  sink, `--partitions` partitions of about messages / (partitions x batches) each, driven
  from a spawned process on `--master` (default local[2]; a standalone master such as the
  one docs/spark.md starts runs it on that cluster's workers). The total time includes
  starting the query and its Python workers, which the first batch pays for; the steady
  rate is the batches after the first over their own trigger durations.
- SDK: one SimpleConsumer in a spawned process (no GIL shared with the server), receive
  `--pop-batch` with a 1 s long poll, ack them in one call, until the backlog is gone.

The server runs in this process on its own loop thread (default settings but
`pop.max_batch` = `--pop-batch`: 32 is popmq's and RocketMQ's default; sync flush). Spark's
session start-up is not counted. Each run starts a fresh server and data dir, and reports
the machine's load average around it, since other work changes these numbers by tens of
percent. A full run's output, with its command: bench/results/spark_drain*.txt
(force-added: the folder is git-ignored for make bench's raw samples).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import shlex
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from popmq import Admin, Message, Producer, SimpleConsumer
from popmq.broker_core.config import BrokerConfig, PopConfig
from tests.support.server_thread import ServerThread

TOPIC = "drain"
SPARK = "spark"
SDK = "sdk"


@dataclass(frozen=True)
class DrainResult:
    consumer: str
    messages: int
    seconds: float
    steady_rate: float | None = None

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


def _fill(endpoint: str, count: int, body_bytes: int) -> None:
    body = os.urandom(body_bytes)  # incompressible: sent and stored as 1 KiB
    with Producer(endpoint) as producer:
        for start in range(0, count, 500):
            producer.send_batch(TOPIC, [Message(body)] * min(500, count - start))


def _sdk_drain(endpoint: str, count: int, pop_batch: int = 32) -> tuple[int, float]:
    """Runs in a spawned process: one consumer, receive and ack `pop_batch` at a time."""
    done = 0
    started = time.perf_counter()
    with SimpleConsumer(endpoint, group="sdk-drain", topic=TOPIC) as consumer:
        while done < count:
            messages = consumer.receive(max_messages=pop_batch, invisible_duration_s=60, wait_s=1)
            if messages:
                consumer.ack(messages)
                done += len(messages)
    return done, time.perf_counter() - started


def _spark_drain(
    endpoint: str,
    per_partition: int,
    checkpoint: Path,
    master: str = "local[2]",
    partitions: int = 4,
    pop_batch: int = 32,
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
        .option("popBatchSize", str(pop_batch))
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
) -> list[DrainResult]:
    """Fill `count` messages, drain them with Spark (in about `batches` micro-batches), then
    with one SimpleConsumer."""
    with tempfile.TemporaryDirectory(prefix="popmq-bench-spark-") as tmp:
        server = ServerThread(Path(tmp) / "data", BrokerConfig(pop=PopConfig(max_batch=pop_batch)))
        endpoint = server.start()
        try:
            with Admin(endpoint) as admin:
                admin.create_topic(TOPIC, queues=8)
            _fill(endpoint, count, body_bytes)
            context = multiprocessing.get_context("spawn")
            with context.Pool(1) as pool:
                per_partition = max(1, -(-count // (partitions * batches)))
                spark = pool.apply(
                    _spark_drain,
                    (
                        endpoint,
                        per_partition,
                        Path(tmp) / "checkpoint",
                        master,
                        partitions,
                        pop_batch,
                    ),
                )
            with context.Pool(1) as pool:
                drained, seconds = pool.apply(_sdk_drain, (endpoint, count, pop_batch))
            sdk = DrainResult(
                f"one SDK SimpleConsumer (receive {pop_batch}, ack)", drained, seconds
            )
            lag = {group: _unfinished(server, group) for group in ("spark-drain", "sdk-drain")}
        finally:
            server.stop()
    if spark.messages != count or lag != {"spark-drain": 0, "sdk-drain": 0}:
        raise RuntimeError(f"a drain was incomplete: spark {spark.messages}/{count}, lag {lag}")
    return [spark, sdk]


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
    spark, sdk = results
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


def _row(number: int, r: RunResult) -> str:
    steady = f"{r.spark.steady_rate:,.0f}" if r.spark.steady_rate is not None else "-"
    return (
        f"| {number} | {r.load_min:.1f} to {r.load_max:.1f} | {r.spark.seconds:.1f} "
        f"| {r.spark.rate:,.0f} | {steady} | {r.sdk.seconds:.1f} | {r.sdk.rate:,.0f} "
        f"| {r.spark.rate / r.sdk.rate:.2f} |"
    )


def render(runs: Sequence[RunResult]) -> str:
    """One markdown row per run, then min to max (median) over the runs."""
    lines = [
        "| run | load (1 min) | Spark s | Spark msg/s | Spark steady msg/s (after batch 1) "
        "| SDK s | SDK msg/s | Spark / SDK |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [_row(number, r) for number, r in enumerate(runs, start=1)]
    if len(runs) > 1:
        steadies = [r.spark.steady_rate for r in runs if r.spark.steady_rate is not None]
        cells = [
            f"{min(r.load_min for r in runs):.1f} to {max(r.load_max for r in runs):.1f}",
            _spread([r.spark.seconds for r in runs], ".1f"),
            _spread([r.spark.rate for r in runs], ",.0f"),
            _spread(steadies, ",.0f") if steadies else "-",
            _spread([r.sdk.seconds for r in runs], ".1f"),
            _spread([r.sdk.rate for r in runs], ",.0f"),
            _spread([r.spark.rate / r.sdk.rate for r in runs], ".2f"),
        ]
        lines.append(f"| min to max (median) | {' | '.join(cells)} |")
    return "\n".join(lines)


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
        help="messages per pop: the server's pop.max_batch, Spark's popBatchSize and the "
        "SDK's receive (32, the default of all three)",
    )
    args = parser.parse_args(argv)
    for name in ("runs", "messages", "batches", "partitions", "pop_batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    print(f"$ python -m bench.spark_drain {shlex.join(sys.argv[1:] if argv is None else argv)}")
    print(
        f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; {args.messages:,} messages of 1 KiB, 8 queues, "
        f"{args.batches} Spark batches; master {args.master}, {args.partitions} partitions, "
        f"{args.pop_batch} messages per pop",
        flush=True,
    )
    runs: list[RunResult] = []
    for number in range(1, args.runs + 1):
        with _LoadSampler() as load:
            spark, sdk = run(
                args.messages,
                batches=args.batches,
                master=args.master,
                partitions=args.partitions,
                pop_batch=args.pop_batch,
            )
        runs.append(RunResult(spark, sdk, min(load.samples), max(load.samples)))
        # Each run as it ends: a run cut short by the machine still leaves its numbers.
        print(f"{time.strftime('%H:%M:%S')} {_row(number, runs[-1])}", flush=True)
    print()
    print(render(runs))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
