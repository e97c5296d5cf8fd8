"""Reads and admin operations that span a cluster's brokers, gathered and merged.

Each operation asks the brokers concerned (those the topic's route names, or every broker
the cluster knows for a group-wide one) at once and merges their answers, with every queue
id translated to the route's global id and every queue row naming its broker.

An answer is never silently partial: when a broker concerned is not live or does not
answer, the operation fails with a retriable UnavailableError naming it (and saying what the
others already did, for a write). Metrics are the one exception: an exporter wants what
can be read now, so a broker that does not answer is left out of the sums and logged.

Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from popmq.broker_core import (
    ConsumerOffset,
    DeliveryEvent,
    GroupInspection,
    HistogramSnapshot,
    InflightMessage,
    InvalidArgumentError,
    LagReport,
    MetricsSnapshot,
    NotFoundError,
    PopMQError,
    QueueDetails,
    QueueLag,
    QueueStats,
    ResetResult,
    TopicInfo,
    UnavailableError,
    check_name,
)
from popmq.broker_core.catalog import KIND_DLQ, dlq_topic_name
from popmq.broker_core.inspection import (
    MAX_CONSUMERS,
    check_message_id,
    check_page_size,
    merge_consumers,
    merged_consumer_count,
)
from popmq.broker_core.types import (
    OffsetChange,
    PeekedMessage,
    QueueBacklog,
    RedriveOutcome,
    RedriveResult,
    TopicBacklog,
)
from popmq.broker_core.validation import check_redrive_selection
from popmq.cluster.broker_pool import BrokerPool
from popmq.cluster.follower_reads import FollowerReads
from popmq.cluster.remote_broker import RemoteBroker
from popmq.cluster.topology import Topology, topic_info

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_K = TypeVar("_K")

METRICS_DEADLINE_S = 2.0
"""How long a metrics read waits for each broker (a scrape must not wait for a stuck one)."""


class ClusterAdmin:
    """Gathers reads and admin operations over brokers (module docstring)."""

    def __init__(
        self, topology: Topology, pool: BrokerPool, followers: FollowerReads | None = None
    ) -> None:
        self._topology = topology
        self._pool = pool
        self._followers = followers
        """Where reads of a shard without a reachable leader go (follower_reads.py)."""

    # -- gathering --------------------------------------------------------------------------

    async def _gather(
        self,
        brokers: Sequence[str],
        call: Callable[[str, RemoteBroker], Awaitable[_T]],
        *,
        what: str,
        reads: bool = False,
    ) -> dict[str, _T]:
        """`call` on each broker at once; every one must answer (UnavailableError naming
        those that did not). A request error is raised as it is. With `reads` (the call
        only reads), a replicated shard whose leader is not live or does not answer is
        read from one of its followers."""
        remotes, missing = self._connections(brokers)
        followers = self._followers if reads else None
        if missing and followers is None:
            raise _not_live(what, missing)
        names = list(remotes)
        answers = await asyncio.gather(
            *(call(n, remotes[n]) for n in names), return_exceptions=True
        )
        results: dict[str, _T] = {}
        unanswered: dict[str, str] = {name: "not a live member now" for name in missing}
        for name, answer in zip(names, answers, strict=True):
            if isinstance(answer, UnavailableError):
                unanswered[name] = str(answer)
            elif isinstance(answer, BaseException):
                raise answer
            else:
                results[name] = answer
        if followers is not None:
            for name in sorted(unanswered):
                try:
                    results[name] = await followers.read(name, functools.partial(call, name))
                except UnavailableError as error:
                    unanswered[name] += f"; {error}"
                else:
                    del unanswered[name]
        failed = [f"{name} ({why})" for name, why in sorted(unanswered.items())]
        if failed:
            done = sorted(results)
            raise UnavailableError(
                f"cannot {what}: no answer from broker(s) {'; '.join(failed)}"
                + (f" (done on {', '.join(done)})" if done else "")
                + "; retry"
            )
        return results

    def _connections(self, brokers: Sequence[str]) -> tuple[dict[str, RemoteBroker], list[str]]:
        """The connections to those of `brokers` that are live members now, and the names
        of the others."""
        remotes: dict[str, RemoteBroker] = {}
        missing: list[str] = []
        for broker in brokers:
            try:
                remotes[broker] = self._pool.get(broker)
            except UnavailableError:
                missing.append(broker)
        return remotes, missing

    def _require_live(self, brokers: Sequence[str], *, what: str) -> None:
        """UnavailableError naming those of `brokers` that are not live members now, before
        a write that goes to each in turn: it then starts only when all of them can take
        their part, rather than stopping midway."""
        _, missing = self._connections(brokers)
        if missing:
            raise _not_live(what, missing)

    def _known_brokers(self) -> list[str]:
        """Every broker the cluster knows: named by a route or live now."""
        return list(self._topology.dlq_brokers())

    def _global(self, topic: str, broker: str, local_id: int) -> int:
        return self._topology.global_id(topic, broker, local_id)

    # -- topics -----------------------------------------------------------------------------

    async def get_topic(self, name: str) -> tuple[TopicInfo, list[QueueStats]]:
        info = self._topology.info(name)
        holders = self._topology.holders(name)
        answers = await self._gather(
            holders,
            lambda _, r: _or_none(r.get_topic(name)),
            what=f"read topic {name!r}",
            reads=True,
        )
        stats: list[QueueStats] = []
        for broker, answer in answers.items():
            for queue in answer[1] if answer is not None else ():
                stats.append(
                    dataclasses.replace(
                        queue,
                        queue_id=self._global(name, broker, queue.queue_id),
                        broker=broker,
                    )
                )
        return info, sorted(stats, key=lambda q: q.queue_id)

    async def list_topics(self) -> list[TopicInfo]:
        """Every routed topic, and the dead-letter topics the brokers hold for live groups."""
        topics = {name: topic_info(route) for name, route in self._topology.routes.routes.items()}
        live = self._pool.names()
        answers = await self._gather(live, lambda _, r: r.list_topics(), what="list topics")
        groups = self._topology.groups.groups
        for listed in answers.values():
            for info in listed:
                if info.kind == KIND_DLQ and info.owner_group in groups and info.name not in topics:
                    with contextlib.suppress(PopMQError):
                        topics[info.name] = self._topology.info(info.name)
        return [topics[name] for name in sorted(topics)]

    async def describe_topic(self, name: str) -> tuple[TopicInfo, list[QueueDetails], list[str]]:
        info = self._topology.info(name)
        answers = await self._gather(
            self._topology.holders(name),
            lambda _, r: _or_none(r.describe_topic(name)),
            what=f"describe topic {name!r}",
            reads=True,
        )
        queues: list[QueueDetails] = []
        groups: set[str] = set()
        for broker, answer in answers.items():
            if answer is None:
                continue
            _, details, readers = answer
            groups.update(readers)
            queues.extend(
                dataclasses.replace(
                    q, queue_id=self._global(name, broker, q.queue_id), broker=broker
                )
                for q in details
            )
        return info, sorted(queues, key=lambda q: q.queue_id), sorted(groups)

    # -- queries ----------------------------------------------------------------------------

    async def query_message(self, topic: str, message_id: str) -> PeekedMessage:
        self._topology.route(topic)
        answers = await self._gather(
            self._topology.holders(topic),
            lambda _, r: _or_none(r.query_message(topic, message_id)),
            what=f"query message {message_id!r}",
            reads=True,
        )
        for broker, found in sorted(answers.items()):
            if found is not None:
                return self._peeked(topic, broker, found)
        raise NotFoundError(
            f"message {message_id!r} is not stored in topic {topic!r}",
            field="message_id",
            value=message_id,
        )

    async def query_messages_by_key(
        self, topic: str, key: str, limit: int = 64
    ) -> list[PeekedMessage]:
        self._topology.route(topic)
        answers = await self._gather(
            self._topology.holders(topic),
            lambda _, r: _or_empty(r.query_messages_by_key(topic, key, limit)),
            what=f"query key {key!r}",
            reads=True,
        )
        found = [
            self._peeked(topic, broker, message)
            for broker, messages in answers.items()
            for message in messages
        ]
        found.sort(key=lambda m: (m.record.store_time_ms, m.queue_id, m.offset))
        return found[:limit]

    def _peeked(self, topic: str, broker: str, message: PeekedMessage) -> PeekedMessage:
        return dataclasses.replace(
            message, queue_id=self._global(message.topic or topic, broker, message.queue_id)
        )

    # -- offsets ----------------------------------------------------------------------------

    async def await_messages(
        self, topic: str, positions: Mapping[int, int], wait_s: float
    ) -> list[tuple[int, int]]:
        """Wait on every broker holding one of the queues at once; the first to report
        arrivals answers (the others are cancelled)."""
        route = self._topology.route(topic)
        by_broker: dict[str, dict[int, int]] = {}
        for global_id, offset in positions.items():
            queue = route.queue(global_id)
            by_broker.setdefault(queue.broker, {})[queue.queue_id] = offset
        waits: dict[asyncio.Task[list[tuple[int, int]]], str] = {}
        for broker, local in by_broker.items():
            remote = self._pool.get(broker)
            waits[asyncio.ensure_future(remote.await_messages(topic, local, wait_s))] = broker
        pending = set(waits)
        failure: PopMQError | None = None
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    error = task.exception()
                    if isinstance(error, UnavailableError):
                        failure = error
                        continue
                    if error is not None:
                        raise error
                    ready = task.result()
                    if ready:
                        broker = waits[task]
                        return [(self._global(topic, broker, q), o) for q, o in ready]
            if failure is not None:
                raise failure
            return []
        finally:
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError, PopMQError):
                    await task

    async def commit_offsets(
        self, group: str, topic: str, offsets: Sequence[tuple[int, int]]
    ) -> None:
        route = self._topology.route(topic)
        by_broker: dict[str, list[tuple[int, int]]] = {}
        for global_id, offset in offsets:
            queue = route.queue(global_id)
            by_broker.setdefault(queue.broker, []).append((queue.queue_id, offset))
        await self._gather(
            list(by_broker),
            lambda b, r: r.commit_offsets(group, topic, by_broker[b]),
            what=f"commit offsets of group {group!r}",
        )

    async def get_offsets(self, group: str, topic: str) -> list[ConsumerOffset]:
        self._topology.route(topic)
        answers = await self._gather(
            self._topology.holders(topic),
            lambda _, r: _or_empty(r.get_offsets(group, topic)),
            what=f"read offsets of group {group!r}",
            reads=True,
        )
        offsets = [
            dataclasses.replace(o, queue_id=self._global(topic, broker, o.queue_id))
            for broker, found in answers.items()
            for o in found
        ]
        return sorted(offsets, key=lambda o: o.queue_id)

    async def offsets_at(self, topic: str, timestamp_ms: int) -> list[tuple[int, int]]:
        self._topology.route(topic)
        answers = await self._gather(
            self._topology.holders(topic),
            lambda _, r: _or_empty(r.offsets_at(topic, timestamp_ms)),
            what=f"find offsets of topic {topic!r}",
            reads=True,
        )
        return sorted(
            (self._global(topic, broker, q), o)
            for broker, found in answers.items()
            for q, o in found
        )

    # -- admin ------------------------------------------------------------------------------

    async def inflight_count(self, *, group: str | None = None, topic: str | None = None) -> int:
        brokers = self._known_brokers()
        if topic is not None:
            brokers = self._topology.holders(topic)
        if group is not None:
            check_name("group", group)
        answers = await self._gather(
            brokers,
            lambda _, r: _or_zero(r.inflight_count(group=group, topic=topic)),
            what="count messages in flight",
        )
        return sum(answers.values())

    async def purge(self, topic: str, queue_id: int | None = None) -> int:
        if queue_id is not None:
            queue = self._topology.locate(topic, queue_id)
            return await self._pool.get(queue.broker).purge(topic, queue.queue_id)
        answers = await self._gather(
            self._topology.holders(topic),
            lambda _, r: _or_zero(r.purge(topic)),
            what=f"purge topic {topic!r}",
        )
        return sum(answers.values())

    async def reset_offsets(
        self,
        group: str,
        topic: str,
        *,
        target: str,
        timestamp_ms: int = 0,
        offsets: dict[int, int] | None = None,
        force: bool = False,
    ) -> ResetResult:
        check_name("group", group)
        self._topology.groups.get(group)
        route = self._topology.route(topic)
        local: dict[str, dict[int, int] | None]
        if target == "offsets":
            if not offsets:
                raise InvalidArgumentError("a reset to explicit offsets needs at least one")
            local = {}
            for global_id, offset in offsets.items():
                queue = route.queue(global_id)
                mine = local.get(queue.broker) or {}
                mine[queue.queue_id] = offset
                local[queue.broker] = mine
        else:
            local = dict.fromkeys(route.queue_counts)
        answers = await self._gather(
            list(local),
            lambda b, r: r.reset_offsets(
                group,
                topic,
                target=target,
                timestamp_ms=timestamp_ms,
                offsets=local[b],
                force=force,
            ),
            what=f"reset offsets of group {group!r}",
        )
        changes = [
            OffsetChange(self._global(topic, broker, c.queue_id), c.old_offset, c.new_offset)
            for broker, result in answers.items()
            for c in result.queues
        ]
        return ResetResult(
            sorted(changes, key=lambda c: c.queue_id),
            sum(result.dropped_inflight for result in answers.values()),
        )

    async def peek(
        self,
        topic: str,
        *,
        queue_id: int | None = None,
        offset: int | None = None,
        group: str = "",
        max_messages: int = 16,
    ) -> list[PeekedMessage]:
        if offset is not None and queue_id is None:
            raise InvalidArgumentError("an offset needs a queue_id: offsets are per queue")
        if queue_id is not None:
            queue = self._topology.locate(topic, queue_id)
            found = await self._pool.get(queue.broker).peek(
                topic,
                queue_id=queue.queue_id,
                offset=offset,
                group=group,
                max_messages=max_messages,
            )
            return [self._peeked(topic, queue.broker, m) for m in found]
        answers = await self._gather(
            self._topology.holders(topic),
            lambda _, r: _or_empty(r.peek(topic, group=group, max_messages=max_messages)),
            what=f"peek topic {topic!r}",
            reads=True,
        )
        found = [
            self._peeked(topic, broker, m) for broker, messages in answers.items() for m in messages
        ]
        found.sort(key=lambda m: (m.queue_id, m.offset))
        return found[:max_messages]

    async def redrive(
        self, group: str, *, max_messages: int | None = None, only: Sequence[tuple[int, int]] = ()
    ) -> RedriveResult:
        """Each broker moves its own dead letters of the group back (up to max_messages in
        all, broker by broker); `remaining` counts what every broker still holds.

        Named dead letters go to the broker of their global queue id, as its local queue."""
        if only:
            return await self._redrive_selected(group, max_messages, only)
        moved = dropped = remaining = 0
        brokers = self._known_brokers()
        self._require_live(brokers, what=f"redrive group {group!r}")
        for broker in brokers:
            remote = self._pool.get(broker)
            left = None if max_messages is None else max_messages - moved - dropped
            if left is not None and left <= 0:
                report = await _or_none(remote.lag_report(group))
                remaining += report.dlq_depth if report is not None else 0
                continue
            result = await _or_none(remote.redrive(group, max_messages=left))
            if result is None:
                continue
            moved += result.moved
            dropped += result.dropped
            remaining += result.remaining
        return RedriveResult(moved, dropped, remaining)

    async def _redrive_selected(
        self, group: str, max_messages: int | None, selected: Sequence[tuple[int, int]]
    ) -> RedriveResult:
        check_name("group", group)
        check_redrive_selection(max_messages, selected)
        topic = dlq_topic_name(group)
        parts: dict[str, list[tuple[int, int]]] = {}
        for queue_id, offset in selected:
            queue = self._topology.locate(topic, queue_id)
            parts.setdefault(queue.broker, []).append((queue.queue_id, offset))
        brokers = self._known_brokers()
        self._require_live(list(parts), what=f"redrive dead letters of group {group!r}")
        outcome: dict[tuple[int, int], str] = {}
        remaining = 0
        for broker in brokers:
            remote = self._pool.get(broker)
            if broker not in parts:
                report = await _or_none(remote.lag_report(group))
                remaining += report.dlq_depth if report is not None else 0
                continue
            result = await _or_none(remote.redrive(group, only=parts[broker]))
            if result is None:
                continue  # a broker that does not know the group yet stores none of them
            remaining += result.remaining
            for o in result.outcomes:
                outcome[(self._global(topic, broker, o.queue_id), o.offset)] = o.outcome
        outcomes = tuple(
            RedriveOutcome(q, o, outcome.get((q, o), "not_found")) for q, o in selected
        )
        return RedriveResult(
            sum(1 for o in outcomes if o.outcome == "moved"),
            sum(1 for o in outcomes if o.outcome == "dropped"),
            remaining,
            outcomes,
        )

    async def group_lag(self, group: str, topic: str = "") -> list[QueueLag]:
        brokers = self._topology.holders(topic) if topic else self._known_brokers()
        answers = await self._gather(
            brokers,
            lambda _, r: _or_empty(r.group_lag(group, topic)),
            what="read lag",
            reads=True,
        )
        rows = [self._lag_row(broker, row) for broker, found in answers.items() for row in found]
        return sorted(rows, key=lambda q: (q.topic, q.retry, q.queue_id, q.broker))

    def _lag_row(self, broker: str, row: QueueLag) -> QueueLag:
        queue_id = row.queue_id if row.retry else self._global(row.topic, broker, row.queue_id)
        return dataclasses.replace(row, queue_id=queue_id, broker=broker)

    async def lag_report(self, group: str, topic: str = "") -> LagReport:
        brokers = self._topology.holders(topic) if topic else self._known_brokers()
        answers = await self._gather(
            brokers,
            lambda _, r: _or_none(r.lag_report(group, topic)),
            what="read lag",
            reads=True,
        )
        reports = {b: r for b, r in answers.items() if r is not None}
        if not reports:
            raise NotFoundError(f"group {group!r} does not exist", field="group", value=group)
        queues = [
            QueueBacklog(self._lag_row(broker, q.lag), q.oldest_unacked_ms)
            for broker, report in reports.items()
            for q in report.queues
        ]
        queues.sort(key=lambda q: (q.lag.topic, q.lag.retry, q.lag.queue_id, q.lag.broker))
        topics: dict[str, TopicBacklog] = {}
        for report in reports.values():
            for t in report.topics:
                seen = topics.get(t.topic)
                topics[t.topic] = (
                    t
                    if seen is None
                    else TopicBacklog(
                        t.topic,
                        seen.lag + t.lag,
                        seen.inflight + t.inflight,
                        seen.retry_backlog + t.retry_backlog,
                        min(filter(None, (seen.oldest_unacked_ms, t.oldest_unacked_ms)), default=0),
                    )
                )
        return LagReport(
            group,
            queues,
            [topics[name] for name in sorted(topics)],
            sum(report.dlq_depth for report in reports.values()),
        )

    async def inspect_group(
        self, group: str, topic: str = "", *, page_size: int = 0, page_token: str = ""
    ) -> GroupInspection:
        """Every broker concerned's view at once; the in-flight page runs through them in
        name order, so its token names the broker it stops in ("broker/its token").

        Each broker answers a page of up to `page_size` rows; when the page fills in the
        middle of one broker's rows, that broker is asked once more for just the rows that
        fit (at most one extra call)."""
        check_name("group", group)
        size = check_page_size(page_size)
        if topic:
            check_name("topic", topic, allow_dlq=True)
        brokers = sorted(self._topology.holders(topic) if topic else self._known_brokers())
        start, inner = self._page_start(brokers, page_token)
        tokens = {b: (inner if b == start else "") for b in brokers}
        answers = await self._gather(
            brokers,
            lambda b, r: _or_none(
                r.inspect_group(group, topic, page_size=size, page_token=tokens[b])
            ),
            what=f"inspect group {group!r}",
            reads=True,
        )
        views = {b: v for b, v in sorted(answers.items()) if v is not None}
        if not views:
            raise NotFoundError(f"group {group!r} does not exist", field="group", value=group)
        inflight: list[InflightMessage] = []
        token = ""
        order = [b for b in brokers if b in views and brokers.index(b) >= brokers.index(start)]
        for i, broker in enumerate(order):
            view = views[broker]
            rows, later = view.inflight, view.next_page_token
            left = size - len(inflight)
            if len(rows) > left:
                remote = self._pool.get(broker)
                again = await remote.inspect_group(
                    group, topic, page_size=left, page_token=tokens[broker]
                )
                rows, later = again.inflight, again.next_page_token
            inflight += [self._inflight_row(broker, m) for m in rows]
            if later:
                token = f"{broker}/{later}"
                break
            if len(inflight) >= size:
                token = f"{order[i + 1]}/" if i + 1 < len(order) else ""
                break
        consumers = merge_consumers(v.consumers for v in views.values())
        return GroupInspection(
            group=group,
            now_ms=max(v.now_ms for v in views.values()),
            held_polls=[
                dataclasses.replace(
                    h,
                    queue_id=h.queue_id if h.queue_id < 0 else self._global(h.topic, b, h.queue_id),
                    broker=b,
                )
                for b, v in views.items()
                for h in v.held_polls
            ],
            inflight=inflight,
            next_page_token=token,
            revive=[dataclasses.replace(r, broker=b) for b, v in views.items() for r in v.revive],
            blocked_heads=[
                dataclasses.replace(h, queue_id=self._global(h.topic, b, h.queue_id), broker=b)
                for b, v in views.items()
                for h in v.blocked_heads
            ],
            blocked_groups=sum(v.blocked_groups for v in views.values()),
            consumers=consumers[:MAX_CONSUMERS],
            consumer_count=merged_consumer_count(views.values(), len(consumers)),
        )

    async def message_history(
        self, topic: str, message_id: str, *, group: str = ""
    ) -> list[DeliveryEvent]:
        """The history each holder of the topic keeps of the message: the broker that
        stored it has every step (its retry copies stay on it), the others none."""
        check_name("topic", topic, allow_dlq=True)
        check_message_id(message_id)
        if group:
            check_name("group", group)
        answers = await self._gather(
            self._topology.holders(topic),
            lambda _, r: _or_empty(r.message_history(topic, message_id, group=group)),
            what=f"read the history of message {message_id!r}",
            reads=True,
        )
        events = [
            dataclasses.replace(
                e,
                queue_id=e.queue_id if e.retry else self._global(e.topic, b, e.queue_id),
                broker=b,
            )
            for b, found in sorted(answers.items())
            for e in found
        ]
        if not events:
            raise NotFoundError(
                f"no message {message_id!r} stored in topic {topic!r} (never sent, not due "
                "yet, or deleted by retention)",
                field="message_id",
                value=message_id,
            )
        return sorted(events, key=lambda e: e.time_ms)

    @staticmethod
    def _page_start(brokers: Sequence[str], token: str) -> tuple[str, str]:
        """(broker, its page token) where a cluster page token says the page starts."""
        if not token:
            return (brokers[0] if brokers else ""), ""
        broker, sep, inner = token.partition("/")
        if not sep or broker not in brokers:
            raise InvalidArgumentError(
                f"page_token {token[:80]!r} is not one this cluster issued for this group: "
                "pass the next_page_token of the previous answer, or none for the first page",
                field="page_token",
                value=token,
            )
        return broker, inner

    def _inflight_row(self, broker: str, row: InflightMessage) -> InflightMessage:
        queue_id = row.queue_id if row.retry else self._global(row.topic, broker, row.queue_id)
        return dataclasses.replace(row, queue_id=queue_id, broker=broker)

    async def metrics_snapshot(self) -> MetricsSnapshot:
        """The sum over the live brokers that answer within METRICS_DEADLINE_S (those that
        do not are logged and left out: a stuck broker must not stall a scrape)."""
        names = self._pool.names()
        answers = await asyncio.gather(
            *(
                asyncio.wait_for(self._pool.get(n).metrics_snapshot(), METRICS_DEADLINE_S)
                for n in names
            ),
            return_exceptions=True,
        )
        snapshots: list[MetricsSnapshot] = []
        for name, answer in zip(names, answers, strict=True):
            if isinstance(answer, PopMQError | TimeoutError):
                log.debug("metrics of broker %s left out: %s", name, answer)
            elif isinstance(answer, BaseException):
                raise answer
            else:
                snapshots.append(answer)
        return merge_metrics(snapshots)


def merge_metrics(snapshots: Sequence[MetricsSnapshot]) -> MetricsSnapshot:
    """Counters and gauges summed; histograms with equal bounds summed bucket by bucket."""

    def counters(pick: Callable[[MetricsSnapshot], Mapping[_K, int]]) -> dict[_K, int]:
        total: dict[_K, int] = {}
        for snapshot in snapshots:
            for key, value in pick(snapshot).items():
                total[key] = total.get(key, 0) + value
        return total

    def histogram(pick: Callable[[MetricsSnapshot], HistogramSnapshot]) -> HistogramSnapshot:
        parts = [pick(s) for s in snapshots]
        if not parts:
            return HistogramSnapshot((), (0,), 0.0)
        bounds = parts[0].bounds
        counts = [0] * (len(bounds) + 1)
        total = 0.0
        for part in parts:
            if part.bounds != bounds:
                continue  # another popmq version's buckets: not summable
            counts = [a + b for a, b in zip(counts, part.counts, strict=True)]
            total += part.total
        return HistogramSnapshot(bounds, tuple(counts), total)

    def total(pick: Callable[[MetricsSnapshot], int]) -> int:
        return sum(pick(s) for s in snapshots)

    return MetricsSnapshot(
        sent=counters(lambda s: s.sent),
        popped=counters(lambda s: s.popped),
        acked=counters(lambda s: s.acked),
        nacked=counters(lambda s: s.nacked),
        revived=counters(lambda s: s.revived),
        dead_lettered=counters(lambda s: s.dead_lettered),
        long_polls_held=total(lambda s: s.long_polls_held),
        buffered_checkpoints=total(lambda s: s.buffered_checkpoints),
        live_checkpoints=total(lambda s: s.live_checkpoints),
        write_batches=total(lambda s: s.write_batches),
        write_batches_failed=total(lambda s: s.write_batches_failed),
        write_jobs=total(lambda s: s.write_jobs),
        batch_jobs=histogram(lambda s: s.batch_jobs),
        write_seconds_synced=histogram(lambda s: s.write_seconds_synced),
        write_seconds_unsynced=histogram(lambda s: s.write_seconds_unsynced),
        store_bytes=total(lambda s: s.store_bytes),
        topics=max((s.topics for s in snapshots), default=0),
        groups=max((s.groups for s in snapshots), default=0),
    )


async def _or_none(work: Awaitable[_T]) -> _T | None:
    """The answer, or None from a broker that does not have the topic or group (yet)."""
    try:
        return await work
    except NotFoundError:
        return None


async def _or_empty(work: Awaitable[list[_T]]) -> list[_T]:
    found = await _or_none(work)
    return [] if found is None else found


async def _or_zero(work: Awaitable[int]) -> int:
    found = await _or_none(work)
    return 0 if found is None else found


def _not_live(what: str, missing: Sequence[str]) -> UnavailableError:
    return UnavailableError(
        f"cannot {what}: broker(s) {', '.join(sorted(missing))} are not live members "
        "now; retry when they are back"
    )
