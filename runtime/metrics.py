"""Prometheus metrics of a server process, and the endpoint that serves them.

The endpoint (`--metrics-listen HOST:PORT`, off by default) is a small asyncio HTTP server
on the server's own event loop: a scrape awaits the broker's reads on the loop that owns
the broker's state (so it never sees a table half-updated and needs no exporter thread),
then renders. The broker's counters, gauges and write-batch histograms are pulled at scrape
time from its metrics snapshot (BrokerAPI.metrics_snapshot: nothing is copied on the hot
path, and nothing calls back into the server), its lag from BrokerAPI.lag_report; RPC
latency is a histogram (`Metrics.rpc_duration`) the proxy's interceptor observes as calls
end (proxy/rpc_observer.py). `LoopReadings` says what a `collect()` called elsewhere
(another thread) does. A cluster proxy's broker is the sum over its brokers; it also
exports series per broker (proxy/broker_metrics.py, another `LoopCollector` it adds).
`popmq broker --metrics-listen` serves its own broker's families in the same format as
`popmq serve`. Every registry also exports the process's denied requests and audit lines
(popmq.security.audit.SecurityCollector) and the standard `process_*` and `python_*`
families (prometheus_client's ProcessCollector, PlatformCollector, GCCollector).
The endpoint may require basic auth or a bearer token (`[security] metrics_*`).

Everything here runs on the event loop; nothing blocks it.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from popmq.broker_core import (
    BrokerAPI,
    HistogramSnapshot,
    LagReport,
    MetricsSnapshot,
    PopMQError,
)
from popmq.runtime.tracked_server import TrackedServer
from popmq.security.audit import SecurityCollector, denied
from popmq.security.http_auth import HttpAuth

log = logging.getLogger(__name__)

_RPC_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30,
)  # fmt: skip
"""Seconds; long polls legitimately take up to 30 s."""
_HTTP_TIMEOUT_S = 10.0
_MAX_HEADER_LINES = 100


@dataclass(frozen=True, kw_only=True)
class MetricsConfig:
    """The Prometheus endpoint."""

    listen: str = ""
    """HOST:PORT serving GET /metrics; empty: no endpoint (the default). Port 0 picks one."""


def _add_histogram(
    family: HistogramMetricFamily, labels: list[str], histogram: HistogramSnapshot
) -> None:
    """Export the broker's per-bucket counts as Prometheus' cumulative buckets."""
    cumulative, buckets = 0, []
    for bound, count in zip((*histogram.bounds, float("inf")), histogram.counts, strict=True):
        cumulative += count
        buckets.append((floatToGoString(bound), cumulative))
    family.add_metric(labels, buckets, histogram.total)


_READ_TIMEOUT_S = 10.0
"""How long `collect()` on another thread waits for the event loop to read the broker."""
_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class _Reading:
    """What one scrape read from the broker: values only, so any thread may export it."""

    snapshot: MetricsSnapshot
    lag: tuple[tuple[str, LagReport], ...]
    """(group, its lag report) for every group that existed and still did when read."""
    at_ms: int
    """When the lag was read (unix ms), for the age of the oldest unacked message."""


async def _read(broker: BrokerAPI) -> _Reading:
    snapshot = await broker.metrics_snapshot()
    reports = []
    for group in await broker.list_groups():
        try:
            reports.append((group.name, await broker.lag_report(group.name)))
        except PopMQError:
            continue  # deleted between the listing and the report
    return _Reading(snapshot, tuple(reports), time.time_ns() // 1_000_000)


class LoopReadings(Generic[_R]):
    """The latest reading of something that lives on an event loop, for `collect()`.

    prometheus_client calls `collect()` synchronously, but the readings are async (a remote
    broker answers over the wire), so they are awaited apart from it:
    - the endpoint, on the event loop, awaits `refresh()` and then renders: the scrape
      exports what it has just read, and the loop never waits on itself;
    - `current()` on another thread (an application rendering the registry itself) asks the
      loop for a fresh reading (`run_coroutine_threadsafe`) and waits at most
      `_READ_TIMEOUT_S` for it, so it neither reads the state off the loop nor hangs;
    - `current()` on the loop outside the endpoint can neither await nor block the loop it
      would wait on: it returns the last reading (None before the first one). A reading
      that timed out or a stopped loop also falls back to it.
    """

    def __init__(
        self,
        read: Callable[[], Coroutine[Any, Any, _R]],
        loop: asyncio.AbstractEventLoop,
        what: str,
    ) -> None:
        self._read = read
        self._loop = loop
        """The loop the state lives on: readings are made there."""
        self._what = what
        self.last: _R | None = None
        """The latest reading; replaced whole (never changed), so any thread may read it."""

    async def refresh(self) -> None:
        """Read now (on the loop), for the next `current()`."""
        self.last = await self._read()

    def current(self) -> _R | None:
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop or self._loop.is_closed() or not self._loop.is_running():
            return self.last
        future = asyncio.run_coroutine_threadsafe(self._read(), self._loop)
        try:
            self.last = future.result(_READ_TIMEOUT_S)
        except TimeoutError:
            future.cancel()
            log.warning(
                "metrics: reading %s took over %.0fs; exporting the previous reading",
                self._what,
                _READ_TIMEOUT_S,
            )
        return self.last


class LoopCollector(Collector):
    """A collector of readings made on an event loop (`LoopReadings`): a scrape on the
    endpoint awaits `refresh()` of each before it renders."""

    @abc.abstractmethod
    async def refresh(self) -> None:
        """Read now (on the loop), for the next `collect()`."""


class BrokerCollector(LoopCollector):
    """Exports the broker's counters, gauges and lag when Prometheus scrapes (read as
    `LoopReadings` says: fresh on the endpoint and on other threads, the last reading from
    a `collect()` on the loop; the broker's families are left out before the first one)."""

    def __init__(
        self,
        broker: BrokerAPI,
        start_time: float,
        version: str,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._start_time = start_time
        self._version = version
        self._readings = LoopReadings(lambda: _read(broker), loop, "the broker")

    async def refresh(self) -> None:
        """Read the broker now (on its loop), for the next `collect()`."""
        await self._readings.refresh()

    def collect(self) -> Iterable[Metric]:
        info = GaugeMetricFamily("popmq_build_info", "popmq version", labels=["version"])
        info.add_metric([self._version], 1)
        yield info
        yield GaugeMetricFamily(
            "popmq_start_time_seconds", "When the server started (unix time)", self._start_time
        )
        reading = self._readings.current()
        if reading is None:
            return
        snapshot = reading.snapshot
        sent = CounterMetricFamily(
            "popmq_messages_sent", "Messages stored by sends", labels=["topic"]
        )
        for topic, count in sorted(snapshot.sent.items()):
            sent.add_metric([topic], count)
        yield sent
        for name, counter, text in (
            ("popmq_messages_popped", snapshot.popped, "Messages delivered by pops"),
            ("popmq_messages_acked", snapshot.acked, "Deliveries acknowledged"),
            ("popmq_messages_nacked", snapshot.nacked, "Deliveries given back by nack"),
            ("popmq_messages_revived", snapshot.revived, "Messages redelivered on timeout"),
            (
                "popmq_messages_dead_lettered", snapshot.dead_lettered,
                "Messages moved to %DLQ%<group>",
            ),
        ):  # fmt: skip
            family = CounterMetricFamily(name, text, labels=["group", "topic"])
            for (group, topic), count in sorted(counter.items()):
                family.add_metric([group, topic], count)
            yield family
        yield GaugeMetricFamily(
            "popmq_long_polls_held", "Pops parked waiting for a message", snapshot.long_polls_held
        )
        yield GaugeMetricFamily(
            "popmq_checkpoint_buffer_size",
            "Checkpoints held in memory, not yet persisted",
            snapshot.buffered_checkpoints,
        )
        yield GaugeMetricFamily(
            "popmq_live_checkpoints",
            "Checkpoints that still owe a message",
            snapshot.live_checkpoints,
        )
        yield from _lag(reading)
        yield CounterMetricFamily(
            "popmq_write_batches", "Write batches committed", snapshot.write_batches
        )
        yield CounterMetricFamily(
            "popmq_write_batches_failed", "Write batches that failed (nothing written)",
            snapshot.write_batches_failed,
        )  # fmt: skip
        jobs = HistogramMetricFamily(
            "popmq_write_batch_jobs",
            "Write jobs (sends, acks, checkpoint writes...) per group-commit batch",
        )
        _add_histogram(jobs, [], snapshot.batch_jobs)
        yield jobs
        seconds = HistogramMetricFamily(
            "popmq_store_write_seconds",
            "Time of one batch write; fsync=true includes the fsync",
            labels=["fsync"],
        )
        _add_histogram(seconds, ["false"], snapshot.write_seconds_unsynced)
        _add_histogram(seconds, ["true"], snapshot.write_seconds_synced)
        yield seconds
        yield GaugeMetricFamily(
            "popmq_store_bytes", "Bytes of the store's files on disk", snapshot.store_bytes
        )
        if snapshot.disk_free_bytes is not None:
            yield GaugeMetricFamily(
                "popmq_disk_free_bytes",
                "Bytes still free for the store on its data dir's filesystem",
                snapshot.disk_free_bytes,
            )
        yield GaugeMetricFamily("popmq_topics", "User and dead-letter topics", snapshot.topics)
        yield GaugeMetricFamily("popmq_groups", "Consumer groups", snapshot.groups)
        yield from _transactions(snapshot)


def _transactions(snapshot: MetricsSnapshot) -> Iterator[Metric]:
    """Transactional messages' families (broker_core/transactions.py)."""
    yield GaugeMetricFamily(
        "popmq_transactions_open",
        "Half messages waiting for a commit, a rollback or a check",
        snapshot.transactions_open,
    )
    for name, counter, text in (
        ("popmq_half_messages_sent", snapshot.half_sent, "Half messages stored"),
        ("popmq_transaction_checks", snapshot.transaction_checks, "Transaction checks sent"),
        (
            "popmq_transactions_discarded", snapshot.transactions_discarded,
            "Transactions discarded after check_max unanswered checks",
        ),
    ):  # fmt: skip
        family = CounterMetricFamily(name, text, labels=["topic"])
        for topic, count in sorted(counter.items()):
            family.add_metric([topic], count)
        yield family
    resolutions = CounterMetricFamily(
        "popmq_transaction_resolutions",
        "Transactions committed or rolled back, by who resolved them",
        labels=["resolution", "source"],
    )
    for (resolution, source), count in sorted(snapshot.transaction_resolutions.items()):
        resolutions.add_metric([resolution, source], count)
    yield resolutions


def _lag(reading: _Reading) -> Iterable[Metric]:
    lag = GaugeMetricFamily(
        "popmq_consumer_lag_messages",
        "Messages of the topic's queues the group has not finished (max - consumer offset)",
        labels=["group", "topic"],
    )
    retry = GaugeMetricFamily(
        "popmq_retry_backlog_messages",
        "Messages waiting in the group's retry queue of the topic",
        labels=["group", "topic"],
    )
    inflight = GaugeMetricFamily(
        "popmq_inflight_messages",
        "Messages popped and neither acked nor redelivered",
        labels=["group", "topic"],
    )
    age = GaugeMetricFamily(
        "popmq_oldest_unacked_age_seconds",
        "Age of the oldest message the group has not acked (0 when none)",
        labels=["group", "topic"],
    )
    dlq = GaugeMetricFamily(
        "popmq_dead_letter_messages",
        "Messages stored in the group's dead-letter topic",
        labels=["group"],
    )
    now_ms = reading.at_ms
    for group, report in reading.lag:
        for row in report.topics:
            labels = [group, row.topic]
            lag.add_metric(labels, row.lag)
            retry.add_metric(labels, row.retry_backlog)
            inflight.add_metric(labels, row.inflight)
            oldest = row.oldest_unacked_ms
            age.add_metric(labels, max(0, now_ms - oldest) / 1000 if oldest else 0.0)
        dlq.add_metric([group], report.dlq_depth)
    yield from (lag, retry, inflight, age, dlq)


class Metrics:
    """The registry of one server (never the process-global one, so servers can coexist)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.rpc_duration = Histogram(
            "popmq_rpc_duration_seconds",
            "RPC handling time by method and status code",
            ["method", "code"],
            buckets=_RPC_BUCKETS,
            registry=self.registry,
        )
        self._collectors: list[LoopCollector] = []
        # Denied requests and audit lines: the process's (popmq.security.audit).
        self.registry.register(SecurityCollector())
        # The standard process_* (CPU, memory, open fds; Linux only) and python_* (version,
        # GC) families every Prometheus client exports, which dashboards and alerts expect.
        # They describe the process, so two servers in one process export the same values.
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)

    def watch(self, broker: BrokerAPI, version: str) -> None:
        """Export a started broker's state (read from its metrics snapshot at each scrape).

        Called on the event loop the broker runs on, which is where its readings are made.
        """
        self.add(BrokerCollector(broker, time.time(), version, asyncio.get_running_loop()))

    def add(self, collector: LoopCollector) -> None:
        """Export `collector`'s families too, refreshed before each scrape renders (a
        cluster proxy's series per broker, proxy/broker_metrics.py)."""
        self.registry.register(collector)
        self._collectors.append(collector)

    async def refresh(self) -> None:
        """Read everything watched now, so that `render()` on the loop exports fresh values
        (the readings run side by side: a scrape waits for the slowest only)."""
        await asyncio.gather(*(collector.refresh() for collector in self._collectors))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsEndpoint:
    """GET /metrics over HTTP/1.1 on the event loop (one response per connection).

    With `auth` requiring credentials (`[security] metrics_*`: basic auth and/or a bearer
    token, popmq.security.http_auth), a request without matching ones is answered 401
    with a `WWW-Authenticate` challenge and counted as denied (method "/metrics").
    """

    def __init__(
        self, metrics: Metrics, host: str, port: int, *, auth: HttpAuth | None = None
    ) -> None:
        self._metrics = metrics
        self._host = host.strip("[]")
        self._port = port
        self._auth = auth or HttpAuth()
        self._server: TrackedServer | None = None
        self.port = 0

    async def start(self) -> int:
        server = TrackedServer(self._handle)
        await server.start(self._host, self._port)
        self._server = server
        self.port = server.port
        return self.port

    async def stop(self) -> None:
        """Stop listening and end every scrape still open (their sockets close now, not when
        the garbage collector finds them)."""
        if self._server is not None:
            server, self._server = self._server, None
            await server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            authorization: str | None = None
            async with asyncio.timeout(_HTTP_TIMEOUT_S):
                request_line = (await reader.readline()).decode("latin-1")
                for _ in range(_MAX_HEADER_LINES):
                    line = await reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.strip().lower() == "authorization":
                        authorization = value.strip()
            parts = request_line.split()
            method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            extra = ""
            if self._auth.allows(authorization):
                status, content_type, body = await self._answer(method, path.split("?", 1)[0])
            else:
                peer = writer.get_extra_info("peername")
                denied(
                    "/metrics",
                    "UNAUTHENTICATED",
                    peer=f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "",
                    detail="no credentials" if authorization is None else "wrong credentials",
                )
                status, content_type = "401 Unauthorized", "text/plain; charset=utf-8"
                body = b"authentication required: give the metrics credentials\n"
                extra = "".join(f"WWW-Authenticate: {c}\r\n" for c in self._auth.challenges())
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{extra}"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else body))
            await writer.drain()
        except (TimeoutError, ConnectionError) as exc:
            log.debug("metrics request dropped: %s", exc)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, method: str, path: str) -> tuple[str, str, bytes]:
        text = "text/plain; charset=utf-8"
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", text, b"only GET and HEAD are served\n"
        if path == "/metrics":
            await self._metrics.refresh()  # the broker's reads are async: see LoopReadings
            return "200 OK", CONTENT_TYPE_LATEST, self._metrics.render()
        if path == "/":
            return "200 OK", text, b"popmq metrics: GET /metrics\n"
        return "404 Not Found", text, b"not found; metrics are at /metrics\n"
