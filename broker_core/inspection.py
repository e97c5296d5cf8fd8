"""A group's runtime view: what only the broker knows about it right now.

`inspect_group` answers, for one group (and optionally one topic):
- the long polls its consumers hold now, per topic and queue (long_polling.py);
- a page of its messages in flight, per queue in offset order: offset, message id, delivery
  attempt, the client that popped it, when and until when it is invisible (the consume
  queues' in-flight maps and their checkpoints);
- every message in flight summed up per client that popped it: how many, and the earliest
  deadline among them;
- how late redelivery runs now: the oldest due checkpoint not revived yet against now (the
  live checkpoints' revive timer);
- its FIFO message groups blocked behind a head in flight (or held back by a nack's
  backoff), the head and how many wait behind it.

A pop names its client (BrokerAPI.pop's client_id, "" when it names none); each
checkpoint records it, in memory and in its stored record, so it survives a restart.

Cost, all inline on the loop (nothing here touches the store but one multi-get of the
shown rows' records):
- held polls: one dict lookup per topic with held pops (every topic with one when no
  topic is given), then the group's sets;
- in flight: per call at most `page_size` rows and a bounded walk: a queue with up to
  SORT_LIMIT messages in flight is sorted (its keys only, charged to the budget); a bigger
  one is walked offset by offset from where the page token points, at most SCAN_BUDGET
  offsets per call, so a sparse queue answers a short page with a token (its first page
  starts at its lowest offset in flight: one pass over its keys at C speed, ~3 ms per
  100,000, as GetGroupLag's oldest-unacked age already takes);
- per client: one pass over the in-flight maps of the group's queues, counting them by
  checkpoint at C speed (collections.Counter), then one step per checkpoint: ~4 ms CPU
  per 100,000 messages in flight popped 32 a pop, 20-28 ms when each is its own checkpoint
  (FIFO messages, nacked or changed deliveries), on this machine (bench/inflight_consumers.py);
- revive lag: the revive timer's earliest entries (stale ones are dropped, as the revive
  loop would);
- blocked heads: one pass over the FIFO lanes of the group's queues (bounded by the held
  FIFO messages, `messages.fifo_max_held` per queue), keeping the MAX_BLOCKED_HEADS oldest.

`message_history` looks one message up in the message index (one point read) and follows
it through the delivery history ring (pop/history.py says what that costs).
"""

from __future__ import annotations

import heapq
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import keys, message_index, validation
from popmq.broker_core.catalog import KIND_RETRY, Catalog, GroupInfo, TopicInfo
from popmq.broker_core.clock import Clock
from popmq.broker_core.consume_queue import ConsumeQueue
from popmq.broker_core.consume_queues import ConsumeQueues
from popmq.broker_core.errors import InvalidArgumentError, NotFoundError
from popmq.broker_core.long_polling import LongPolling
from popmq.broker_core.pop.checkpoint import Checkpoint
from popmq.broker_core.pop.history import DeliveryHistory
from popmq.broker_core.pop.live_checkpoints import LiveCheckpoints
from popmq.broker_core.store import Store

DEFAULT_INFLIGHT_PAGE = 100
"""In-flight rows per page when the request names no page size."""
MAX_INFLIGHT_PAGE = 1000
"""The largest in-flight page a request may ask for."""
SORT_LIMIT = 8192
"""A queue with at most this many messages in flight is paged by sorting its offsets."""
SCAN_BUDGET = 8192
"""Offsets a page walks at most in bigger queues, however few of them are in flight."""
MAX_BLOCKED_HEADS = 100
"""Blocked FIFO heads shown (the longest-held first); `blocked_groups` counts them all."""
MAX_CONSUMERS = 1000
"""Per-client in-flight rows shown (the most messages first); `consumer_count` counts them
all, so that an answer stays small however many client ids hold messages."""

_QUEUE_DONE = 2**63 - 1
"""A page token's offset once a queue was paged to its end."""
_TOKEN = re.compile(r"^([0-9]{1,10})\.([0-9]{1,10})\.(-1|[0-9]{1,19})$")


@dataclass(frozen=True, slots=True)
class HeldPolls:
    """Pops of a group held (long polling) on one queue now."""

    topic: str
    queue_id: int
    """The queue they pop, or -1 for pops of every queue of the topic."""
    count: int
    broker: str = ""
    """The broker holding them, in cluster mode ("" from a broker itself)."""


@dataclass(frozen=True, slots=True)
class InflightMessage:
    """A message of the group popped and not acked, nacked back or revived yet."""

    topic: str
    queue_id: int
    retry: bool
    """In the group's retry queue of `topic` (its queue id is then 0)."""
    offset: int
    message_id: str
    attempt: int
    """Delivery attempt of this delivery (1 for the first)."""
    popped_ms: int
    """When this delivery was made (or its invisible time last changed)."""
    invisible_until_ms: int
    """When it becomes visible again unless acked first."""
    waiting: bool = False
    """A FIFO message read but not delivered: it waits behind its message group's head."""
    broker: str = ""
    client_id: str = ""
    """The client that popped it ("" when its pop named none, or a waiting FIFO message)."""


@dataclass(frozen=True, slots=True)
class ConsumerInflight:
    """The messages of the group in flight that one client popped."""

    client_id: str
    """"" for pops that named no client."""
    count: int
    earliest_until_ms: int
    """The earliest invisible-until deadline among them."""


@dataclass(frozen=True, slots=True)
class ReviveLag:
    """How late redelivery runs on one broker now."""

    lag_ms: int
    """Now minus the deadline of the oldest due checkpoint not revived yet; 0 when none is."""
    oldest_due_ms: int
    """That deadline (0 when nothing is due)."""
    next_deadline_ms: int
    """The earliest deadline on the revive timer (0 when nothing is in flight)."""
    live_checkpoints: int
    """Checkpoints that still owe a message (every group)."""
    broker: str = ""


@dataclass(frozen=True, slots=True)
class BlockedHead:
    """A FIFO message group of the group waiting for its head message."""

    topic: str
    queue_id: int
    message_group: str
    offset: int
    message_id: str
    attempt: int
    invisible_until_ms: int
    """Delivered head: when it becomes visible again. Held head: when it may go (backoff)."""
    delivered: bool
    """True: the head is in flight; False: it waits for a nack's backoff to end."""
    waiting: int
    """Messages of the message group read behind the head, not delivered yet."""
    broker: str = ""


@dataclass(frozen=True, slots=True)
class DeliveryEvent:
    """One step of a message's delivery history (pop/history.py)."""

    time_ms: int
    event: str
    """stored, pop, nack, change_invisible_time, retry, dead_letter or redeliver (FIFO)."""
    group: str
    """The group it concerns ("" for stored)."""
    topic: str
    """The user topic."""
    queue_id: int
    retry: bool
    """The step concerns a copy in the group's retry queue of `topic` (queue 0)."""
    offset: int
    attempt: int
    """Delivery attempt concerned (a pop's, or the one that expired for retry and
    dead_letter)."""
    invisible_until_ms: int = 0
    """pop, nack, change_invisible_time: when it becomes visible again unless acked."""
    to_topic: str = ""
    """retry, dead_letter: the topic of the copy (its retry or dead-letter topic)."""
    to_offset: int = -1
    """retry, dead_letter: the copy's offset there (queue 0)."""
    broker: str = ""
    client_id: str = ""
    """pop, nack, change_invisible_time: the client holding the delivery; retry,
    dead_letter, redeliver: the client whose delivery expired ("" unknown)."""


@dataclass(frozen=True, slots=True)
class GroupInspection:
    """What `inspect_group` found (module docstring)."""

    group: str
    now_ms: int
    held_polls: list[HeldPolls]
    inflight: list[InflightMessage]
    next_page_token: str
    """Where the next in-flight page starts; "" when this page was the last."""
    revive: list[ReviveLag]
    """One row per broker."""
    blocked_heads: list[BlockedHead]
    blocked_groups: int
    """Blocked message groups in all (more than `blocked_heads` shows when above its cap)."""
    consumers: list[ConsumerInflight] = field(default_factory=list)
    """Every message in flight (not only this page's) per client, the most first, at most
    MAX_CONSUMERS clients; waiting FIFO messages are not counted."""
    consumer_count: int = 0
    """Clients holding messages in all (more than `consumers` shows when above its cap)."""


def check_page_size(page_size: int) -> int:
    """The in-flight page size a request asks for (0: the default), checked."""
    if page_size == 0:
        return DEFAULT_INFLIGHT_PAGE
    if page_size < 0 or page_size > MAX_INFLIGHT_PAGE:
        raise InvalidArgumentError(
            f"page_size {page_size} is out of range: 1..{MAX_INFLIGHT_PAGE} (0: "
            f"{DEFAULT_INFLIGHT_PAGE})",
            field="page_size",
            value=page_size,
            allowed=f"1..{MAX_INFLIGHT_PAGE}",
        )
    return page_size


def check_message_id(message_id: str) -> None:
    """A message id to look up: 1..MAX_MESSAGE_ID_LENGTH characters."""
    if not 0 < len(message_id) <= validation.MAX_MESSAGE_ID_LENGTH:
        raise InvalidArgumentError(
            f"message_id of {len(message_id)} characters: 1 to "
            f"{validation.MAX_MESSAGE_ID_LENGTH} allowed",
            field="message_id",
            value=message_id,
            allowed=f"1..{validation.MAX_MESSAGE_ID_LENGTH} characters",
        )


def _parse_token(token: str) -> tuple[int, int, int]:
    """(source topic id, queue id, last offset shown) of a page token."""
    match = _TOKEN.match(token)
    if match is None:
        raise InvalidArgumentError(
            f"page_token {token[:80]!r} is not one this server issued: pass the "
            "next_page_token of the previous answer, or none for the first page",
            field="page_token",
            value=token,
        )
    return int(match[1]), int(match[2]), int(match[3])


class Inspection:
    """Runtime views of a group; they read memory (and the shown rows' records) only."""

    def __init__(
        self,
        *,
        store: Store,
        catalog: Catalog,
        queues: ConsumeQueues,
        checkpoints: LiveCheckpoints,
        polling: LongPolling,
        history: DeliveryHistory,
        clock: Clock,
    ) -> None:
        self._history = history
        self._store = store
        self._catalog = catalog
        self._queues = queues
        self._checkpoints = checkpoints
        self._polling = polling
        self._clock = clock

    def inspect_group(
        self, group: str, topic: str = "", *, page_size: int = 0, page_token: str = ""
    ) -> GroupInspection:
        validation.check_name("group", group)
        size = check_page_size(page_size)
        after = _parse_token(page_token) if page_token else None
        info = self._catalog.group(group)
        if topic:
            validation.check_name("topic", topic, allow_dlq=True)
            topics = [self._catalog.topic(topic)]
        else:
            ids = {tid for (gid, tid, _) in self._queues if gid == info.group_id}
            topics = sorted(
                (
                    t
                    for t in self._catalog.topics.values()
                    if t.topic_id in ids and t.kind != KIND_RETRY
                ),
                key=lambda t: t.name,
            )
        now = self._clock.now_ms()
        sources = self._sources(info, topics)
        inflight, token = self._inflight_page(sources, size, after)
        heads, blocked = self._blocked_heads(sources)
        consumers = consumers_inflight([cq for _, _, cq in sources])
        return GroupInspection(
            group=group,
            now_ms=now,
            held_polls=self._held_polls(group, [t.name for t in topics] if topic else None),
            inflight=inflight,
            next_page_token=token,
            revive=[self.revive_lag(now)],
            blocked_heads=heads,
            blocked_groups=blocked,
            consumers=consumers[:MAX_CONSUMERS],
            consumer_count=len(consumers),
        )

    async def message_history(
        self, topic: str, message_id: str, *, group: str = ""
    ) -> list[DeliveryEvent]:
        """What happened to one stored message on this broker, oldest first: stored, then
        each pop, nack, invisible-time change, retry copy (and that copy's pops) and
        dead-lettering the history ring still holds; only `group`'s when given."""
        validation.check_name("topic", topic, allow_dlq=True)
        check_message_id(message_id)
        group_id = None
        if group:
            validation.check_name("group", group)
            group_id = self._catalog.group(group).group_id
        info = self._catalog.topic(topic)
        entry = message_index.lookup_id(self._store, info.topic_id, message_id)
        if entry is None or entry.offset < 0:
            raise NotFoundError(
                f"no message {message_id!r} stored in topic {topic!r} (never sent, not due "
                "yet, or deleted by retention)",
                field="message_id",
                value=message_id,
            )
        rows = [
            DeliveryEvent(entry.store_time_ms, "stored", "", info.name, entry.queue_id, False,
                          entry.offset, 1)
        ]  # fmt: skip
        found = await self._history.find(info.topic_id, entry.queue_id, entry.offset, group_id)
        for event, offset, attempt in found:
            time_ms, kind, gid, tid, qid, _, _, until, to_tid, to_offset, client = event
            at = self._catalog.topics_by_id.get(tid)
            to = self._catalog.topics_by_id.get(to_tid) if to_tid else None
            owner = self._catalog.groups_by_id.get(gid)
            rows.append(
                DeliveryEvent(
                    time_ms=time_ms,
                    event=kind,
                    group=owner.name if owner else "",
                    topic=self._catalog.user_topic_name(tid) or info.name,
                    queue_id=qid,
                    retry=at is not None and at.kind == KIND_RETRY,
                    offset=offset,
                    attempt=attempt,
                    invisible_until_ms=until,
                    to_topic=to.name if to else "",
                    to_offset=to_offset if to_tid else -1,
                    client_id=client,
                )
            )
        return rows

    # -- parts ------------------------------------------------------------------------------

    def _sources(
        self, group: GroupInfo, topics: Sequence[TopicInfo]
    ) -> list[tuple[TopicInfo, bool, ConsumeQueue]]:
        """(user topic, retry, consume queue) of every queue of the group on `topics` it
        has state for, by (source topic id, queue id): the page order, stable while topics
        come and go, since ids are never reused."""
        found: list[tuple[TopicInfo, bool, ConsumeQueue]] = []
        for user in topics:
            for queue_id in range(user.queues):
                cq = self._queues.get(group.group_id, user.topic_id, queue_id)
                if cq is not None:
                    found.append((user, False, cq))
            retry = self._catalog.retry_topics.get((group.group_id, user.topic_id))
            if retry is not None:
                cq = self._queues.get(group.group_id, retry.topic_id, 0)
                if cq is not None:
                    found.append((user, True, cq))
        found.sort(key=lambda s: (s[2].topic_id, s[2].queue_id))
        return found

    def _held_polls(self, group: str, topics: list[str] | None) -> list[HeldPolls]:
        rows: list[HeldPolls] = []
        for name, queue_id, count in self._polling.held_of(group, topics):
            rows.append(HeldPolls(name, queue_id, count))
        return rows

    def revive_lag(self, now: int) -> ReviveLag:
        oldest = self._checkpoints.earliest_deadline()
        due = oldest if oldest is not None and oldest <= now else 0
        return ReviveLag(
            lag_ms=now - due if due else 0,
            oldest_due_ms=due,
            next_deadline_ms=oldest or 0,
            live_checkpoints=self._checkpoints.live_count,
        )

    def _inflight_page(
        self,
        sources: list[tuple[TopicInfo, bool, ConsumeQueue]],
        size: int,
        after: tuple[int, int, int] | None,
    ) -> tuple[list[InflightMessage], str]:
        picked: list[tuple[TopicInfo, bool, ConsumeQueue, Checkpoint, int]] = []
        budget = SCAN_BUDGET
        cursor = ""
        for user, retry, cq in sources:
            key = (cq.topic_id, cq.queue_id)
            start = -1
            if after is not None:
                if key < after[:2]:
                    continue
                if key == after[:2]:
                    start = after[2]
            if len(picked) >= size or budget <= 0:
                return self._rows(picked), cursor
            offsets, last, budget = queue_page(cq, start, size - len(picked), budget)
            picked.extend((user, retry, cq, cq.inflight[o], o) for o in offsets)
            if last is not None:
                return self._rows(picked), f"{key[0]}.{key[1]}.{last}"
            cursor = f"{key[0]}.{key[1]}.{_QUEUE_DONE}"
        return self._rows(picked), ""

    def _rows(
        self, picked: list[tuple[TopicInfo, bool, ConsumeQueue, Checkpoint, int]]
    ) -> list[InflightMessage]:
        records = self._records([(cq, offset) for _, _, cq, _, offset in picked])
        rows: list[InflightMessage] = []
        for (user, retry, cq, ck, offset), record in zip(picked, records, strict=True):
            attempt = ck.attempt if ck.fifo_group else max(1, record.delivery_attempt)
            rows.append(
                InflightMessage(
                    topic=user.name,
                    queue_id=cq.queue_id,
                    retry=retry,
                    offset=offset,
                    message_id=record.message_id,
                    attempt=attempt,
                    popped_ms=ck.pop_time_ms,
                    invisible_until_ms=ck.not_before_ms if ck.held else ck.deadline_ms,
                    waiting=ck.held,
                    client_id=ck.client_id,
                )
            )
        return rows

    def _records(self, at: Sequence[tuple[ConsumeQueue, int]]) -> list[records_pb2.StoredMessage]:
        """The stored records at (queue, offset), an empty one for a message retention
        deleted meanwhile: one multi-get of the rows shown."""
        if not at:
            return []
        values = self._store.multi_get(
            "messages", [keys.message_key(cq.topic_id, cq.queue_id, o) for cq, o in at]
        )
        return [
            records_pb2.StoredMessage.FromString(v)
            if v is not None
            else records_pb2.StoredMessage()
            for v in values
        ]

    def _blocked_heads(
        self, sources: list[tuple[TopicInfo, bool, ConsumeQueue]]
    ) -> tuple[list[BlockedHead], int]:
        blocked = 0
        candidates: list[tuple[int, int, TopicInfo, ConsumeQueue, Checkpoint, int]] = []
        for user, retry, cq in sources:
            if retry or not cq.fifo:
                continue
            for lane in cq.fifo.values():
                head = lane[0]
                if len(lane) < 2 and (not head.held or head.not_before_ms == 0):
                    continue  # nothing waits behind it, and it is not held back itself
                blocked += 1
                candidates.append((head.pop_time_ms, head.ck_id, user, cq, head, len(lane) - 1))
        shown = heapq.nsmallest(MAX_BLOCKED_HEADS, candidates, key=lambda c: (c[0], c[1]))
        records = self._records([(cq, head.queue_offset()) for _, _, _, cq, head, _ in shown])
        heads = [
            BlockedHead(
                topic=user.name,
                queue_id=cq.queue_id,
                message_group=head.fifo_group,
                offset=head.queue_offset(),
                message_id=record.message_id,
                attempt=head.attempt,
                invisible_until_ms=head.not_before_ms if head.held else head.deadline_ms,
                delivered=not head.held,
                waiting=waiting,
            )
            for (_, _, user, cq, head, waiting), record in zip(shown, records, strict=True)
        ]
        return heads, blocked


def consumers_inflight(queues: Sequence[ConsumeQueue]) -> list[ConsumerInflight]:
    """The delivered messages in flight in `queues`, per client that popped them, the most
    first (then by client id): one C-speed count of each in-flight map by checkpoint, then
    one step per checkpoint (module docstring)."""
    per_ck: Counter[Checkpoint] = Counter()
    for cq in queues:
        if cq.inflight:
            per_ck.update(cq.inflight.values())
    counts: dict[str, int] = {}
    earliest: dict[str, int] = {}
    for ck, count in per_ck.items():
        if ck.held:
            continue  # read, not delivered: no client holds it
        client = ck.client_id
        counts[client] = counts.get(client, 0) + count
        at = earliest.get(client)
        if at is None or ck.deadline_ms < at:
            earliest[client] = ck.deadline_ms
    return sorted(
        (ConsumerInflight(c, n, earliest[c]) for c, n in counts.items()),
        key=lambda row: (-row.count, row.client_id),
    )


def merge_consumers(parts: Iterable[Sequence[ConsumerInflight]]) -> list[ConsumerInflight]:
    """Per-client rows of several brokers as one: counts summed, the earliest deadline kept,
    the most messages first (then by client id). All of them: the caller cuts."""
    merged: dict[str, ConsumerInflight] = {}
    for rows in parts:
        for row in rows:
            seen = merged.get(row.client_id)
            if seen is not None:
                row = ConsumerInflight(
                    row.client_id,
                    seen.count + row.count,
                    min(seen.earliest_until_ms, row.earliest_until_ms),
                )
            merged[row.client_id] = row
    return sorted(merged.values(), key=lambda row: (-row.count, row.client_id))


def merged_consumer_count(views: Iterable[GroupInspection], merged: int) -> int:
    """Clients holding messages across brokers whose rows merged into `merged` clients:
    exact when no broker cut its list; otherwise the most that is certain (a client that
    holds messages on two brokers is one client, and a cut list does not say which)."""
    counts = [(v.consumer_count, len(v.consumers)) for v in views]
    if all(total <= shown for total, shown in counts):
        return merged
    return max([merged, *(total for total, _ in counts)])


def queue_page(
    cq: ConsumeQueue, after: int, want: int, budget: int, *, sort_limit: int = SORT_LIMIT
) -> tuple[list[int], int | None, int]:
    """Up to `want` in-flight offsets of `cq` above `after` in order, the last offset
    looked at when the page stopped short of the queue's end (None: the queue is done),
    and the scan budget left (module docstring)."""
    inflight = cq.inflight
    if not inflight or want <= 0:
        return [], None, budget
    if len(inflight) <= sort_limit:
        budget -= len(inflight)
        offsets = sorted(o for o in inflight if o > after)
        if len(offsets) <= want:
            return offsets, None, budget
        return offsets[:want], offsets[want - 1], budget
    # A big queue: walk offsets upward, at most `budget` of them.
    start = after + 1 if after >= 0 else min(inflight)
    end = max(cq.pop_offset, cq.recovered[-1][1] if cq.recovered else 0)
    found: list[int] = []
    offset = start
    while offset < end and budget > 0 and len(found) < want:
        if offset in inflight:
            found.append(offset)
        offset += 1
        budget -= 1
    if offset >= end:
        return found, None, budget
    return found, offset - 1, budget
