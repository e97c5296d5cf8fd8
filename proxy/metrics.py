"""Prometheus metrics and the server's one interceptor (readiness, RPC latency, RPC log line).

The endpoint (`--metrics-listen HOST:PORT`, off by default) is a small asyncio HTTP server
on the server's own event loop: a scrape awaits the broker's reads on the loop that owns
the broker's state (so it never sees a table half-updated and needs no exporter thread),
then renders. The broker's counters, gauges and write-batch histograms are pulled at scrape
time from its metrics snapshot (BrokerAPI.metrics_snapshot: nothing is copied on the hot
path, and nothing calls back into the proxy), its lag from BrokerAPI.lag_report; RPC latency
is a histogram observed here as calls end. `_LoopReadings` says what a `collect()` called
elsewhere (another thread) does. A cluster proxy's broker is the sum over its brokers; it
also exports series per broker (`ClusterBrokersCollector`, labelled `broker`), read from
its status provider (proxy/status.py). `popmq broker --metrics-listen` serves its own
broker's families in the same format as `popmq serve`. Every registry also exports the
process's denied requests and audit lines (popmq.security.audit.SecurityCollector)
and the standard `process_*` and `python_*` families (prometheus_client's ProcessCollector,
PlatformCollector, GCCollector).
The endpoint may require basic auth or a bearer token (`[security] metrics_*`).

`RpcInterceptor` is the only gRPC interceptor of the server (but for the security gate's,
security/gate.py, installed only when authentication is on), because each one costs on
every call: grpc.aio runs the chain as one coroutine and one `functools.partial`
continuation per interceptor, and whatever the interceptor builds for a call (a closure, a
method handler) lives as long as the call, which for a held long poll is up to 30 s, times
thousands of polls. So the readiness gate (while the store is not open; what it refuses and
how is `popmq.proxy.health.refusal`) is a flag check in the same interceptor, and each method's
observed handler is built once, on its first call, and reused. It lives here, beside the
histogram it feeds and the log line it writes, rather than in a module of its own: the
readiness part is one flag check and one call into proxy/health.py.

Everything here runs on the event loop; nothing blocks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, TypeVar

import grpc
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
    MAX_SEND_MESSAGES,
    BrokerAPI,
    HistogramSnapshot,
    LagReport,
    MetricsSnapshot,
    PopMQError,
)
from popmq.grpc_calls.errors import (
    Undecodable,
    UndecodableRequestError,
    checked_deserializer,
    request_limit,
)
from popmq.proxy.health import Health, refusal
from popmq.proxy.status import StatusProvider, message_totals
from popmq.security.audit import SecurityCollector, denied
from popmq.security.http_auth import HttpAuth

log = logging.getLogger(__name__)
rpc_log = logging.getLogger("popmq.rpc")

_RPC_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30,
)  # fmt: skip
"""Seconds; long polls legitimately take up to 30 s."""
_CLIENT_ERRORS = frozenset(
    {"INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "FAILED_PRECONDITION", "CANCELLED"}
)
"""Codes that mean the caller asked for something wrong (logged at info, not warning)."""
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


class _LoopReadings(Generic[_R]):
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


class BrokerCollector(Collector):
    """Exports the broker's counters, gauges and lag when Prometheus scrapes (read as
    `_LoopReadings` says: fresh on the endpoint and on other threads, the last reading from
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
        self._readings = _LoopReadings(lambda: _read(broker), loop, "the broker")

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


class ClusterBrokersCollector(Collector):
    """A cluster proxy's series per broker, labelled `broker="<name>"`: one series per broker
    in each family (topics and groups are summed), so the label's values are bounded by the
    cluster's brokers. Read from `StatusProvider.brokers()` (each broker asked with a short
    deadline), as `_LoopReadings` says."""

    def __init__(self, provider: StatusProvider, loop: asyncio.AbstractEventLoop) -> None:
        self._readings = _LoopReadings(provider.brokers, loop, "the cluster's brokers")

    async def refresh(self) -> None:
        await self._readings.refresh()

    def collect(self) -> Iterable[Metric]:
        brokers = self._readings.current()
        if brokers is None:
            return
        labels = ["broker"]
        up = GaugeMetricFamily(
            "popmq_broker_up", "1 when the broker answered this proxy just now", labels=labels
        )
        live = GaugeMetricFamily(
            "popmq_broker_live", "1 when the broker is registered in etcd", labels=labels
        )
        store = GaugeMetricFamily(
            "popmq_broker_store_bytes", "Bytes of the broker's store files", labels=labels
        )
        free = GaugeMetricFamily(
            "popmq_broker_disk_free_bytes",
            "Bytes still free for the broker's store on its filesystem",
            labels=labels,
        )
        sent = CounterMetricFamily(
            "popmq_broker_messages_sent", "Messages stored by sends on the broker", labels=labels
        )
        popped = CounterMetricFamily(
            "popmq_broker_messages_popped", "Deliveries by pops on the broker", labels=labels
        )
        acked = CounterMetricFamily(
            "popmq_broker_messages_acked", "Deliveries acked on the broker", labels=labels
        )
        held = GaugeMetricFamily(
            "popmq_broker_long_polls_held", "Pops held waiting on the broker", labels=labels
        )
        isolated = GaugeMetricFamily(
            "popmq_broker_isolated_seconds",
            "Seconds until this proxy's sends use the broker again (0: they do)",
            labels=labels,
        )
        failures = CounterMetricFamily(
            "popmq_broker_send_failures",
            "Failed sends this proxy recorded on the broker",
            labels=labels,
        )
        isolations = CounterMetricFamily(
            "popmq_broker_isolations", "Times this proxy isolated the broker", labels=labels
        )
        epoch = GaugeMetricFamily(
            "popmq_broker_epoch",
            "The broker's registration epoch: it changes when the broker registers again "
            "(a restart, or a replicated shard's failover: count them with changes())",
            labels=labels,
        )
        replica_labels = ["broker", "replica"]
        in_sync = GaugeMetricFamily(
            "popmq_replication_in_sync",
            "1 when the replicated shard's follower is in its in-sync set",
            labels=replica_labels,
        )
        lag_batches = GaugeMetricFamily(
            "popmq_replication_lag_batches",
            "Batches of the shard leader's log the follower lacks",
            labels=replica_labels,
        )
        lag_bytes = GaugeMetricFamily(
            "popmq_replication_lag_bytes",
            "Bytes of the batches of the shard leader's log the follower lacks",
            labels=replica_labels,
        )
        lag_seconds = GaugeMetricFamily(
            "popmq_replication_lag_seconds",
            "Age of the oldest batch the follower lacks (0 when only batches in flight)",
            labels=replica_labels,
        )
        terms = CounterMetricFamily(
            "popmq_replication_leader_terms",
            "Times the shard leader's process became its leader",
            labels=labels,
        )
        for broker in brokers:
            name = [broker.name]
            if broker.live:
                epoch.add_metric(name, broker.epoch)
            up.add_metric(name, 1 if broker.reachable else 0)
            live.add_metric(name, 1 if broker.live else 0)
            snapshot = broker.metrics
            if snapshot is not None:  # an unreachable broker's values are absent, not 0
                store.add_metric(name, snapshot.store_bytes)
                if snapshot.disk_free_bytes is not None:
                    free.add_metric(name, snapshot.disk_free_bytes)
                totals = message_totals(snapshot)
                for family, total in zip((sent, popped, acked), totals, strict=True):
                    family.add_metric(name, total)
                held.add_metric(name, snapshot.long_polls_held)
                replication = snapshot.replication
                if replication is not None:
                    terms.add_metric(name, replication.terms)
                    for f in replication.followers:
                        key = [broker.name, f.replica]
                        in_sync.add_metric(key, 1 if f.in_sync else 0)
                        lag_batches.add_metric(key, f.lag_batches)
                        lag_bytes.add_metric(key, f.lag_bytes)
                        lag_seconds.add_metric(key, f.lag_s)
            faults = broker.faults
            isolated.add_metric(name, faults.isolated_for_s if faults is not None else 0.0)
            failures.add_metric(name, faults.failures if faults is not None else 0)
            isolations.add_metric(name, faults.isolations if faults is not None else 0)
        yield from (up, live, epoch, store, free, sent, popped, acked, held)
        yield from (isolated, failures, isolations)
        yield from (in_sync, lag_batches, lag_bytes, lag_seconds, terms)


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
        self._collectors: list[BrokerCollector | ClusterBrokersCollector] = []
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
        collector = BrokerCollector(broker, time.time(), version, asyncio.get_running_loop())
        self.registry.register(collector)
        self._collectors.append(collector)

    def watch_brokers(self, provider: StatusProvider) -> None:
        """Export a cluster's series per broker (`ClusterBrokersCollector`), read from
        `provider` at each scrape. Called on the event loop the provider runs on."""
        collector = ClusterBrokersCollector(provider, asyncio.get_running_loop())
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
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, self._host, self._port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            server.close()
            await server.wait_closed()

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
            await self._metrics.refresh()  # the broker's reads are async: see _LoopReadings
            return "200 OK", CONTENT_TYPE_LATEST, self._metrics.render()
        if path == "/":
            return "200 OK", text, b"popmq metrics: GET /metrics\n"
        return "404 Not Found", text, b"not found; metrics are at /metrics\n"


Behavior = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]
Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]
_MAX_CACHED_METHODS = 4096
"""Observed handlers kept; a method beyond it (only a catch-all generic handler resolves
that many names) is wrapped per call, as correct and only slower."""


class RpcInterceptor(grpc.aio.ServerInterceptor):
    """The server's one interceptor: the readiness gate, then RPC timing and the log line.

    Until `health.ready`, calls that `popmq.proxy.health.refusal` refuses get its UNAVAILABLE
    answer (neither timed nor logged). Every unary-unary RPC is timed by method and status
    code and logged; streaming RPCs are not timed (PopStream and SendStream report each
    request to a StreamObserver instead). Log levels: admin RPCs and failed RPCs at info
    (server-side failures at warning), successful messaging RPCs and health/reflection calls
    at debug.

    Every method's request decoding is checked, streaming ones included: a body that does not
    parse is answered INVALID_ARGUMENT naming the expected message, counted with that code,
    and logged at warning at most once a minute per method (grpc.aio would answer UNKNOWN and
    log a traceback per call). That costs one function call per decoded request, and for a
    streaming call one coroutine frame living with the call.

    Per call, once ready: one flag check, grpc's handler lookup (the continuation) and one
    dict lookup; the only object of ours that lives with the call is its `observed`
    coroutine. The observed handler of a method is cached with the handler it wraps and reused
    while the lookup returns that handler: the same object or an equal one (same behavior,
    serializers and shape; a generic handler may build a new handler per call around the same
    functions). A different handler replaces the entry. Only methods that resolved to a
    unary-unary handler are cached, so unknown method names never grow the cache.
    """

    def __init__(self, health: Health, metrics: Metrics | None) -> None:
        self._health = health
        self._histogram = metrics.rpc_duration if metrics is not None else None
        # "/pkg.Service/Method" -> (the handler resolved for it, its observed handler).
        # Touched on the event loop only; at most _MAX_CACHED_METHODS entries.
        self._observed: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}
        self._undecodable = _UndecodableRequests(self._histogram)

    @property
    def cached_methods(self) -> frozenset[str]:
        """Methods whose observed handler is cached ("/pkg.Service/Method")."""
        return frozenset(self._observed)

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        if not self._health.ready:
            refused = refusal(handler_call_details.method)
            if refused is not None:
                return refused
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        key: str = handler_call_details.method
        cached = self._observed.get(key)
        if cached is not None and (cached[0] is handler or cached[0] == handler):
            return cached[1]
        observed = self._wrap(key.lstrip("/"), handler)
        if observed is None:
            return handler
        if cached is not None or len(self._observed) < _MAX_CACHED_METHODS:
            self._observed[key] = (handler, observed)
        return observed

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler | None:
        """The handler that checks request decoding (and times unary-unary calls).

        A body that does not parse is answered INVALID_ARGUMENT, counted and logged by
        `_UndecodableRequests`, instead of grpc's UNKNOWN with a traceback per call. None for
        handlers of a shape this does not wrap (synchronous ones: the server has none).
        """
        deserializer = handler.request_deserializer
        serializer = handler.response_serializer
        refuse = functools.partial(self._undecodable.refuse, method)
        limit = request_limit(method)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _observed(method, handler.unary_unary, self._histogram, refuse),
                request_deserializer=checked_deserializer(
                    deserializer, unary=True, max_bytes=limit
                ),
                response_serializer=serializer,
            )
        if handler.unary_stream is not None:
            behavior = _checked_stream(handler.unary_stream, refuse)
            if behavior is None:
                return None
            return grpc.unary_stream_rpc_method_handler(
                behavior,
                request_deserializer=checked_deserializer(
                    deserializer, unary=True, max_bytes=limit
                ),
                response_serializer=serializer,
            )
        stream_stream = handler.stream_stream is not None
        behavior = _checked_stream(handler.stream_stream or handler.stream_unary, refuse)
        if behavior is None:
            return None
        make = (
            grpc.stream_stream_rpc_method_handler
            if stream_stream
            else grpc.stream_unary_rpc_method_handler
        )
        return make(
            behavior,
            request_deserializer=checked_deserializer(deserializer, unary=False, max_bytes=limit),
            response_serializer=serializer,
        )


_UNDECODABLE_LOG_INTERVAL_S = 60.0
"""Undecodable requests of one method are logged at most once per this many seconds."""


class _UndecodableRequests:
    """Answers, counts and logs requests whose body does not parse.

    Each is counted in the RPC histogram with code INVALID_ARGUMENT; the warning is
    rate-limited per method, since a broken or hostile client can send them in a loop.
    """

    def __init__(self, histogram: Histogram | None) -> None:
        self._histogram = histogram
        # method -> (time.monotonic() of its last warning, refusals not logged since).
        # Touched on the event loop only; one entry per method that got such a request.
        self._logged: dict[str, tuple[float, int]] = {}

    async def refuse(
        self,
        method: str,
        error: UndecodableRequestError,
        context: grpc.aio.ServicerContext,
        began: float,
        *,
        observe: bool = True,
    ) -> NoReturn:
        """Abort the call with INVALID_ARGUMENT (`observe`: count it here; unary-unary calls
        are counted by their observed handler)."""
        now = time.monotonic()
        last, suppressed = self._logged.get(method, (-_UNDECODABLE_LOG_INTERVAL_S, 0))
        if now - last >= _UNDECODABLE_LOG_INTERVAL_S:
            self._logged[method] = (now, 0)
            log.warning(
                "%s from %s: %s (%d more such requests since the last line; at most one "
                "line a minute per method)",
                method,
                context.peer(),
                error,
                suppressed,
            )
        else:
            self._logged[method] = (last, suppressed + 1)
        if observe and self._histogram is not None:
            self._histogram.labels(method, "INVALID_ARGUMENT").observe(time.perf_counter() - began)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        raise error  # abort raises; this line is never reached


Refuse = Callable[..., Awaitable[NoReturn]]


def _checked_stream(behavior: Any, refuse: Refuse) -> Any:
    """A streaming `behavior` that answers an undecodable request INVALID_ARGUMENT: the
    `Undecodable` request of a unary-stream call, or the UndecodableRequestError a read of
    a stream-request call raises. Keeps the shape grpc dispatches on (coroutine function or
    async generator function); None for any other (synchronous) behavior."""
    if inspect.isasyncgenfunction(behavior):

        async def generator(request: Any, context: grpc.aio.ServicerContext) -> Any:
            began = time.perf_counter()
            if isinstance(request, Undecodable):
                await refuse(request.error, context, began)
            try:
                async for response in behavior(request, context):
                    yield response
            except UndecodableRequestError as exc:
                await refuse(exc, context, began)

        return generator
    if inspect.iscoroutinefunction(behavior):

        async def coroutine(request: Any, context: grpc.aio.ServicerContext) -> Any:
            began = time.perf_counter()
            if isinstance(request, Undecodable):
                await refuse(request.error, context, began)
            try:
                return await behavior(request, context)
            except UndecodableRequestError as exc:
                await refuse(exc, context, began)

        return coroutine
    return None


def _observed(
    method: str, behavior: Behavior, histogram: Histogram | None, refuse: Refuse
) -> Behavior:
    """`behavior` timed into `histogram` and logged as `method` (built once per method); an
    undecodable request is answered by `refuse` instead."""
    admin = method.startswith("popmq.v1.AdminService/")
    # Status code name -> the histogram's child for (method, code): `labels()` validates,
    # converts and takes a lock on every call. Nothing removes histogram children.
    children: dict[str, Any] = {}

    async def observed(request: Any, context: grpc.aio.ServicerContext) -> Any:
        began = time.perf_counter()
        code = "OK"
        try:
            if isinstance(request, Undecodable):
                await refuse(request.error, context, began, observe=False)
            return await behavior(request, context)
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        except BaseException:
            status = context.code()
            code = status.name if isinstance(status, grpc.StatusCode) else "UNKNOWN"
            raise
        finally:
            elapsed = time.perf_counter() - began
            if histogram is not None:
                child = children.get(code)
                if child is None:
                    child = children[code] = histogram.labels(method, code)
                child.observe(elapsed)
            _log_rpc(method, code, elapsed, request, context, admin=admin)

    return observed


def _log_rpc(
    method: str,
    code: str,
    elapsed: float,
    request: Any,
    context: grpc.aio.ServicerContext,
    *,
    admin: bool,
) -> None:
    details = context.details() if code != "OK" else None
    log_call(method, code, elapsed, request, context.peer(), details or "", admin=admin)


def log_call(
    method: str,
    code: str,
    elapsed: float,
    request: Any,
    peer: str,
    detail: str,
    *,
    admin: bool = False,
) -> None:
    """The `popmq.rpc` log line of one call (or of one pop of a PopStream)."""
    if code == "OK":
        level = logging.INFO if admin else logging.DEBUG
    elif code in _CLIENT_ERRORS:
        level = logging.INFO
    else:
        level = logging.WARNING
    if not rpc_log.isEnabledFor(level):
        return
    context_fields = _request_context(method, request)
    rpc_log.log(
        level,
        "%s %s %.3fms",
        method,
        code,
        elapsed * 1000,
        extra={
            "rpc": method,
            "code": code,
            "duration_ms": round(elapsed * 1000, 3),
            "peer": peer,
            "detail": detail,
            **context_fields,
        },
    )


class StreamObserver:
    """Times and logs each request of a PopStream or SendStream as the interceptor does a call.

    The interceptor cannot time a stream's requests (only the whole stream), so the stream
    reports each answered request here: `popmq_rpc_duration_seconds{method=".../PopStream"}`
    counts pops (`.../SendStream`: sends), not streams, and each gets its `popmq.rpc` log line.
    """

    def __init__(self, metrics: Metrics | None, method: str) -> None:
        self.method = method
        """The stream's full method name, e.g. "popmq.v1.MessagingService/PopStream"."""
        self._histogram = metrics.rpc_duration if metrics is not None else None
        self._children: dict[str, Any] = {}

    def __call__(self, code: str, elapsed: float, request: Any, peer: str, detail: str) -> None:
        if self._histogram is not None:
            child = self._children.get(code)
            if child is None:
                child = self._children[code] = self._histogram.labels(self.method, code)
            child.observe(elapsed)
        log_call(self.method, code, elapsed, request, peer, detail)


def _request_context(method: str, request: Any) -> dict[str, str]:
    """The topic and group a request is about, for the log line."""
    found: dict[str, str] = {}
    fields = getattr(getattr(request, "DESCRIPTOR", None), "fields_by_name", {})
    for name in ("topic", "group"):
        if name in fields and getattr(request, name):
            found[name] = getattr(request, name)
    if "name" in fields and request.name:
        if "Topic" in method:
            found.setdefault("topic", request.name)
        elif "Group" in method:
            found.setdefault("group", request.name)
    if "messages" in fields and method.endswith(("/SendMessages", "/SendStream")):
        # A refused request may hold far more messages than a send may: name the topics of
        # the first MAX_SEND_MESSAGES only, so the log line costs what a valid send's does.
        first = itertools.islice(request.messages, MAX_SEND_MESSAGES)
        topics = sorted({m.topic for m in first})
        if topics:
            found["topic"] = ",".join(topics)
    return found
