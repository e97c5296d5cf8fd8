"""Streaming `pop` mode: executors pop in parallel under lease tokens, acked after commit.

Offsets are synthetic: ``{"run", "batch", "parts", "max"}``. partitions(start, end) turns a
batch into lease tokens ``spark/<run>/<batch>/<i>``, a pure function of the offsets, so a
task retry, a stage retry or a replay after a restart pops under the same tokens and gets
the same messages while the leases live (the proxy remembers what each token popped).

Acks happen only after Spark committed a batch: in latestOffset(start), for every batch up
to start (Spark asks for the next batch only once batch `start` is in its commit log, and
commit() is not called when the stream goes idle or at the end of AvailableNow), and again
in commit(). A daemon thread in the driver renews the leases of planned, unacked batches, so
a long batch keeps its messages; invisibleDuration must still cover the time from planning a
batch to the next latestOffset when the driver cannot renew (it died).

Several topics (subscribe, subscribePattern) are popped by one group: each topic with a
backlog gets its own partitions in a batch (numPartitions each, default its queue count),
and the batch's offset lists them so its tokens map to the same topics on a replay.

With leaseEndpoints every call on a token (its reads, renewals and ack) goes to one proxy,
chosen by hashing the token over that ordered list (`lease_endpoint`), with LeasePop and
AckLease `pinned`: that proxy then serves and acks the token from its memory while etcd is
down (proxy/lease_pinning.py). A token's proxy never changes while the query runs: a read
whose proxy does not answer fails retriably (Spark retries the task, then fails the query),
and its acks and renewals are retried at later triggers (an ack only while its lease may
live, _ack_retries.py). Restarting the query with another
list re-pins the tokens: the attempts of the run before are gone, and a new proxy's pages
take the place of those stored for a token when it served it from memory (lease_pinning.py),
so its ack acks what the committed attempt read. Each item of the list must reach one proxy
process (checked when options are parsed, as far as a target shows it).

Guarantee: at-least-once; exactly-once with an idempotent sink (keyed by message_id) as
long as replays happen while the leases live.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from popmq import (
    DeadlineExceededError,
    LeaseResult,
    NotFoundError,
    PopMQError,
    ReceivedMessage,
    SimpleConsumer,
    Sql,
    UnavailableError,
)
from popmq.spark import _clients
from popmq.spark._ack_retries import AckRetries
from popmq.spark.offsets import PopOffset, behind_latest, lease_token, split_by_backlog
from popmq.spark.options import ReadOptions
from popmq.spark.schema import to_record_batch
from popmq.spark.topics import topics_now

__all__ = ["LeasePartition", "PopMQPopStreamReader", "lease_endpoint", "read_lease"]

log = logging.getLogger(__name__)

_ARROW_BATCH_ROWS = 1024
"""Rows per Arrow batch a partition yields (pages of 32 would make tiny batches)."""
_BACKLOG_MAX_AGE_S = 0.25
"""Spark polls latestOffset about 60 times a second when idle; the backlog is fetched at
most this often."""


@dataclass(frozen=True)
class LeasePartition(InputPartition):
    """One Spark partition: what one lease token pops from one topic, up to max_messages."""

    token: str
    max_messages: int
    topic: str


def lease_endpoint(endpoints: tuple[str, ...], token: str) -> str:
    """The proxy of `endpoints` that lease `token` is pinned to: a hash of the token (the
    same in every process and run, unlike hash()) modulo the list's length."""
    digest = hashlib.sha256(token.encode()).digest()
    return endpoints[int.from_bytes(digest[:8], "big") % len(endpoints)]


def read_lease(options: ReadOptions, part: LeasePartition) -> Iterator[pa.RecordBatch]:
    """Executor side: pop (or replay) the pages of one lease, in Arrow batches of up to
    1,024 rows.

    Only page 0 long-polls; later pages take what is there and the lease stops at the
    first short page, so a replay stops at the same page.
    """
    pinned = bool(options.lease_endpoints)
    endpoint = lease_endpoint(options.lease_endpoints, part.token) if pinned else None
    try:
        yield from _read_pages(options, part, endpoint)
    except (UnavailableError, DeadlineExceededError) as exc:
        if endpoint is None:
            raise
        raise type(exc)(
            f"lease {part.token} is pinned to proxy {endpoint} (leaseEndpoints), which could "
            f"not serve it: {exc}; the task is retried against the same proxy, never another "
            "(another could not know the pages this one served from memory while etcd was "
            "down); only if that proxy is gone for good, restart the query without it in "
            "leaseEndpoints"
        ) from exc


def _read_pages(
    options: ReadOptions, part: LeasePartition, endpoint: str | None
) -> Iterator[pa.RecordBatch]:
    consumer = _consumer(options, part.topic, endpoint)
    remaining = part.max_messages
    page = 0
    rows: list[ReceivedMessage] = []  # pages are small: hand Spark fewer, larger batches
    while remaining > 0:
        want = min(options.pop_batch_size, remaining)
        result = consumer.receive_lease(
            part.token,
            page,
            max_messages=want,
            invisible_duration_s=options.invisible_duration_s,
            wait_s=options.wait_s if page == 0 else 0.0,
            pinned=endpoint is not None,
        )
        rows += result.messages
        if len(rows) >= _ARROW_BATCH_ROWS:
            yield to_record_batch(rows)
            rows = []
        remaining -= len(result.messages)
        page += 1
        if len(result.messages) < want:
            break
    if rows:
        yield to_record_batch(rows)


def _consumer(options: ReadOptions, topic: str, endpoint: str | None = None) -> SimpleConsumer:
    selector: str | Sql = Sql(options.sql_filter) if options.sql_filter else options.filter
    return _clients.simple_consumer(options, options.group, topic, selector, endpoint)


def _by_lease_client(
    options: ReadOptions,
    tokens: list[str],
    call: Callable[[SimpleConsumer, list[str], bool], list[LeaseResult]],
) -> tuple[list[LeaseResult], list[tuple[list[str], PopMQError]]]:
    """`call(client, tokens, pinned)` of the clients that ack and renew leases (those calls
    name the group, not a topic): `endpoint`'s for every token, or with leaseEndpoints each
    token's own proxy's. Answers the results and, per proxy that failed, its tokens and
    the error (the other proxies' calls are made all the same)."""
    if not options.lease_endpoints:
        try:
            return call(_consumer(options, options.topic), tokens, False), []
        except PopMQError as exc:
            return [], [(tokens, exc)]
    by_proxy: dict[str, list[str]] = {}
    for token in tokens:
        by_proxy.setdefault(lease_endpoint(options.lease_endpoints, token), []).append(token)
    results: list[LeaseResult] = []
    failed: list[tuple[list[str], PopMQError]] = []
    for endpoint, mine in by_proxy.items():
        try:  # a bad item is refused when options are parsed; never kill the keeper
            client = _consumer(options, options.topic, endpoint)
        except PopMQError as exc:
            failed.append((mine, exc))
            continue
        try:
            results += call(client, mine, True)
        except UnavailableError as exc:
            if len(mine) == 1:
                failed.append((mine, exc))
                continue
            # While etcd is down a proxy refuses a whole RenewLease for one token it cannot
            # answer from memory (an AckLease answers per token): call token by token.
            for token in mine:
                try:
                    results += call(client, [token], True)
                except PopMQError as one:
                    failed.append(([token], one))
        except PopMQError as exc:
            failed.append((mine, exc))
    return results, failed


class _LeaseKeeper:
    """Renews the leases of planned, unacked batches from a daemon thread (driver side).

    latestOffset is not called while a batch runs, so the driver's main thread cannot renew
    a long batch's leases; this thread does, every third of the invisible duration.
    """

    def __init__(self, options: ReadOptions) -> None:
        self._options = options
        # Guards _batches: latestOffset/partitions (runner thread) vs the renewal thread.
        self._lock = threading.Lock()
        self._batches: dict[int, tuple[list[str], float]] = {}
        """batch -> (its lease tokens, when they were last renewed or planned)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def track(self, batch: int, tokens: list[str]) -> None:
        with self._lock:
            self._batches[batch] = (tokens, time.monotonic())
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="popmq-lease-keeper", daemon=True
                )
                self._thread.start()

    def take_through(self, batch: int) -> list[str]:
        """Forget batches up to `batch` and return their tokens (to ack them)."""
        with self._lock:
            done = sorted(b for b in self._batches if b <= batch)
            return [t for b in done for t in self._batches.pop(b)[0]]

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        every = self._options.invisible_duration_s / 3
        while not self._stop.wait(min(every, 5.0)):
            now = time.monotonic()
            with self._lock:
                due = [
                    (batch, tokens)
                    for batch, (tokens, renewed) in self._batches.items()
                    if now - renewed >= every
                ]
            for batch, tokens in due:
                self._renew(batch, tokens)

    def _renew(self, batch: int, tokens: list[str]) -> None:
        o = self._options
        results, failed = _by_lease_client(
            o, tokens, lambda client, mine, _: client.renew_leases(mine, o.invisible_duration_s)
        )
        for mine, exc in failed:
            log.warning(
                "renewing %d leases of batch %d failed (retried): %s", len(mine), batch, exc
            )
        for result in results:  # the proxies that answered, whether or not others failed
            # NOT_FOUND: that task has not popped yet. Anything else: the lease broke.
            if result.code not in ("OK", "NOT_FOUND"):
                log.warning("lease %s not renewed: %s", result.lease_token, result.message)
        if failed:
            return  # the whole batch is due again at the next round
        with self._lock:
            if batch in self._batches:
                self._batches[batch] = (tokens, time.monotonic())


class PopMQPopStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming `pop` mode (see the module docstring)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._init_runtime()

    def _init_runtime(self) -> None:
        # Driver-side state; never pickled (read() needs only the options).
        self._initial: dict[str, Any] | None = None
        self._keeper = _LeaseKeeper(self.options)
        self._first_ack = True
        o = self.options
        # A renewal under way when a token is taken for acking ends within one call's
        # timeout per endpoint it may try.
        renewing_s = o.timeout_s * (1 + o.endpoint.count(","))
        self._retry_acks = AckRetries(lease_s=o.invisible_duration_s + renewing_s)
        self._backlog: dict[str, int] = {}
        """Messages the group could pop now, per topic read (a pattern matched again)."""
        self._behind: dict[str, int] = {}
        """What _backlog sums: per queue ("<id>", or "retry" for the group's retry queue;
        prefixed "<topic>/" under subscribe or subscribePattern)."""
        self._backlog_at = float("-inf")
        self._parts: dict[str, int] = {}
        """Partitions per batch of each topic: numPartitions, or the topic's queue count."""
        self._target_left: int | None = None
        self._target_topics: frozenset[str] | None = None
        """AvailableNow: the topics read at its start (later ones wait for the next run)."""

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self._init_runtime()

    def initialOffset(self) -> dict[str, Any]:
        # Spark calls this twice for a new checkpoint: answer the same both times.
        if self._initial is None:
            run = uuid.uuid4().hex[:16]
            self._initial = PopOffset(run=run, batch=-1, parts=0, max=0).to_json()
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_messages_per_trigger is not None:
            return ReadMaxRows(self.options.max_messages_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        backlog = self._available(max_age_s=0.0)
        self._target_left = sum(backlog.values())
        self._target_topics = frozenset(backlog)

    def _available(self, max_age_s: float = _BACKLOG_MAX_AGE_S) -> dict[str, int]:
        """Messages the group could pop now per topic (an estimate: lag minus in-flight)."""
        now = time.monotonic()
        if now - self._backlog_at < max_age_s:
            return self._backlog
        o = self.options
        backlog: dict[str, int] = {}
        behind: dict[str, int] = {}
        prefix = o.by_topic
        for topic in topics_now(o):
            try:
                per_queue = self._topic_backlog(topic)
            except NotFoundError:
                if not o.subscribe_pattern:
                    raise
                continue  # matched, then deleted
            backlog[topic] = sum(per_queue.values())
            behind.update({(f"{topic}/{k}" if prefix else k): n for k, n in per_queue.items()})
        self._backlog, self._behind, self._backlog_at = backlog, behind, now
        return backlog

    def _topic_backlog(self, topic: str) -> dict[str, int]:
        """Per queue of `topic` (and "retry"), what the group could pop now."""
        o = self.options
        try:
            rows = _clients.admin(o).get_group_lag(o.group, topic)
        except NotFoundError:
            # The group does not exist yet: everything retained is there for it.
            puller = _clients.pull_consumer(o, topic, "")
            return {str(s.queue_id): s.max_offset - s.min_offset for s in puller.queue_offsets()}
        behind: dict[str, int] = {}
        for row in rows:
            key = "retry" if row.retry else str(row.queue_id)
            behind[key] = behind.get(key, 0) + max(0, row.lag - row.inflight)
        return behind

    def reportLatestOffset(self) -> dict[str, Any]:
        """The group's backlog (lag minus in-flight), per queue and in total: pop offsets
        are synthetic, so this is where the query progress shows lag."""
        backlog = self._available()
        o = self.options
        report: dict[str, Any] = {"v": 1, "mode": "pop"}
        if o.topic:
            report["topic"] = o.topic
        else:
            report["topics"] = sorted(backlog)
        return {**report, "group": o.group, "behind": behind_latest(self._behind)}

    def _partition_count(self, topic: str) -> int:
        if topic not in self._parts:
            o = self.options
            if o.num_partitions is not None:
                self._parts[topic] = o.num_partitions
            else:
                puller = _clients.pull_consumer(o, topic, "")
                self._parts[topic] = len(puller.queue_offsets())
        return self._parts[topic]

    def _ack_through(self, offset: PopOffset) -> None:
        """Ack every lease of the batches up to `offset.batch` (Spark committed them)."""
        tracked = self._keeper.take_through(offset.batch)
        now = time.monotonic()  # no renewal of `tracked` starts after this
        derived: list[str] = []
        if self._first_ack:
            # After a restart the committed batch was planned by the previous run.
            derived = [t for t in offset.tokens() if t not in tracked]
            self._first_ack = False
        retried = self._retry_acks.due(now)
        tokens = list(dict.fromkeys(retried + tracked + derived))
        if not tokens:
            return

        def ack(client: SimpleConsumer, mine: list[str], pinned: bool) -> list[LeaseResult]:
            return client.ack_leases(mine, pinned=pinned)

        results, failed = _by_lease_client(self.options, tokens, ack)
        # A pinned proxy answers UNAVAILABLE per token it cannot ack while etcd is down.
        later = [r for r in results if r.code == "UNAVAILABLE"]
        again = [t for mine, _ in failed for t in mine] + [r.lease_token for r in later]
        self._retry_acks.settle(tokens, again, now)
        for mine, exc in failed:
            log.warning("acking %d leases failed, retried next trigger: %s", len(mine), exc)
        for result in later:
            log.info("lease %s: %s; retried next trigger", result.lease_token, result.message)
        results = [r for r in results if r.code != "UNAVAILABLE"]
        self._backlog_at = float("-inf")  # acks changed the backlog
        planned_here = set(tracked)
        for result in results:
            if result.ok:
                continue
            if result.code == "NOT_FOUND" and result.lease_token not in planned_here:
                # Planned by the previous run: acked by it already, or forgotten.
                log.debug("lease %s unknown at ack: %s", result.lease_token, result.message)
            elif result.code == "NOT_FOUND":
                log.warning(
                    "lease %s was gone at ack (it expired, or popmq serve restarted); its "
                    "messages, if any, are delivered again",
                    result.lease_token,
                )
            else:
                log.warning(
                    "lease %s: %s; those messages are delivered again (raise invisibleDuration "
                    "above the trigger interval plus the batch time)",
                    result.lease_token,
                    result.message,
                )

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = PopOffset.from_json(start)
        self._ack_through(begin)
        if self._target_left is not None and self._target_left <= 0:
            return start  # AvailableNow: what was there at the start has been planned
        waiting = self._available()
        topics = sorted(t for t, n in waiting.items() if n > 0)
        if self._target_topics is not None:
            topics = [t for t in topics if t in self._target_topics]
        if not topics:
            return start
        parts = {t: self._partition_count(t) for t in topics}
        per = self.options.max_messages_per_partition
        if isinstance(limit, ReadMaxRows):
            total = sum(parts.values())
            if total > limit.max_rows:  # fewer partitions, shared as the topics' counts
                shares = split_by_backlog(dict.fromkeys(parts, 0), parts, limit.max_rows)
                parts = {t: n for t, n in shares.items() if n > 0}
            per = min(per, limit.max_rows // sum(parts.values()))
        count = sum(parts.values())
        if self._target_left is not None:
            self._target_left -= count * per
        listed = tuple(sorted(parts.items())) if self.options.by_topic else ()
        return PopOffset(begin.run, begin.batch + 1, count, per, listed).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[LeasePartition]:
        begin = PopOffset.from_json(start)
        finish = PopOffset.from_json(end)
        topics = finish.partition_topics(self.options.topic)
        result = []
        for batch in range(begin.batch + 1, finish.batch + 1):
            tokens = [lease_token(finish.run, batch, i) for i in range(finish.parts)]
            self._keeper.track(batch, tokens)
            result += [
                LeasePartition(token, finish.max, topic)
                for token, topic in zip(tokens, topics, strict=True)
            ]
        return result

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LeasePartition)
        return read_lease(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._ack_through(PopOffset.from_json(end))

    def stop(self) -> None:
        self._keeper.stop()
