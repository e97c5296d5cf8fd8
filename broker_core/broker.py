"""The broker: POP semantics over the RocksDB store, usable without gRPC.

Threading: everything runs on one asyncio loop. Point reads, small scans and the group
commit flush are short blocking calls on the loop (see writer.py for why there is no writer
thread). Background tasks: the revive loop (redelivers what is due) and the checkpoint
buffer loop (persists checkpoints that linger).

Crash safety rests on three rules:
1. A message is stored only by a committed write; offsets are assigned inside that write.
2. A consumer offset is written only in a batch that also holds (or follows) the record of
   every persisted checkpoint it passes, so an offset never outruns in-flight state.
3. A revive writes the retry (or dead-letter) copies and deletes the checkpoint in one
   batch, and touches memory only after that batch committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import heapq
import itertools
import logging
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from popmq._gen.popmq.store.v1 import group_settings_pb2, records_pb2
from popmq.broker_core import data_dir, keys, message_index, validation
from popmq.broker_core.budget import ResponseBudget
from popmq.broker_core.catalog import (
    KIND_DLQ,
    KIND_NORMAL,
    KIND_RETRY,
    MESSAGE_TYPE_MIXED,
    MESSAGE_TYPE_NORMAL,
    MESSAGE_TYPES,
    Catalog,
    GroupInfo,
    TopicInfo,
    dlq_topic_name,
    retry_topic_name,
)
from popmq.broker_core.config import BrokerConfig
from popmq.broker_core.consume_queue import ConsumeQueue
from popmq.broker_core.errors import (
    AlreadyExistsError,
    AnswerBoundError,
    FailedPreconditionError,
    InvalidArgumentError,
    InvalidReceiptHandleError,
    NotFoundError,
    PopMQError,
    ReceiptHandleExpiredError,
    ReceiptHandleLostError,
    ReceiptHandleSupersededError,
    StoreFullError,
    UnavailableError,
)
from popmq.broker_core.filters import RecordFilter, parse_filter
from popmq.broker_core.log_limit import RepeatedWarning
from popmq.broker_core.long_polling import LongPolling
from popmq.broker_core.message_id import MessageIdGenerator
from popmq.broker_core.pop.checkpoint import Checkpoint
from popmq.broker_core.pop.receipt import ReceiptCodec, ReceiptHandle
from popmq.broker_core.queue_lock import QueueLocks
from popmq.broker_core.stats import BrokerStats
from popmq.broker_core.store import Batch, Store
from popmq.broker_core.timer import RecallCodec, RecallHandle
from popmq.broker_core.types import (
    ConsumerOffset,
    ExponentialBackoff,
    GroupSettings,
    LagReport,
    NewMessage,
    OffsetChange,
    PeekedMessage,
    PoppedMessage,
    PulledMessages,
    QueueBacklog,
    QueueDetails,
    QueueLag,
    QueueStats,
    RedriveResult,
    ResetResult,
    SendResult,
    Subscription,
    TopicBacklog,
)
from popmq.broker_core.wakeup import Wakeup
from popmq.broker_core.writer import GroupCommitWriter, QueueOffsets

log = logging.getLogger(__name__)
_T = TypeVar("_T")

_SECRET_KEY = b"secret:receipt"
_BOOT_KEY = b"boot:epoch"
_CK_SEQ_BITS = 40
_REVIVE_CHUNK = 128
"""Messages revived (or delayed messages fired) per write batch: each chunk holds the event
loop for a few ms, so pops and acks keep flowing through a revive storm."""
_REVIVE_RETRY_MS = 1000
"""Delay before a revive that failed to write is tried again."""
_PEEK_MAX = 256
"""Most messages one peek returns."""
_REDRIVE_CHUNK = 256
"""Dead letters moved per write batch."""
_REDRIVE_MAX = 1_000_000
"""Most dead letters one redrive call moves."""
_CONSUME_FROM_CODES = {"first": 1, "last": 2, "timestamp": 3}
"""consume_from names -> popmq.v1.ConsumeFrom values (0 also means first)."""
_CONSUME_FROM_NAMES = {0: "first", **{code: name for name, code in _CONSUME_FROM_CODES.items()}}
_KEY_OVERHEAD = 16
"""Bytes of a message key, added to each record in the stored-size estimate."""
_RECORD_OVERHEAD = 1024
"""Bytes a send stores beyond its bodies, per message (record fields, index entries), as
`Store.check_room` counts them."""
_NEVER = 2**63 - 1
"""A time after every real deadline (no timer pending)."""
PULL_MAX_MESSAGES = 1024
"""Most messages one pull returns."""
PULL_DEFAULT_MESSAGES = 256
"""A pull stops once it read this many body bytes (it returns at least one message)."""
_PULL_CHUNK = 64
"""Keys read per multi_get of a pull, so 4 MiB bodies never pile up beyond the byte cap."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Broker:
    """Topics, groups, send, pop, ack, change-invisible, nack, revive: the whole core."""

    def __init__(self, config: BrokerConfig | None = None) -> None:
        self.config = config or BrokerConfig()
        self._store: Store | None = None
        self._started = False
        self._closing = False
        self._draining = False
        self._tasks: list[asyncio.Task[None]] = []
        # Background retries while writes fail (a full disk): a warning per change or 30 s.
        self._revive_warning = RepeatedWarning(log)
        self._timer_warning = RepeatedWarning(log)
        self._ids = MessageIdGenerator()
        self.locks = QueueLocks()
        self.polling = LongPolling(self.config.long_polling)
        # (group_id, topic_id, queue_id) -> ConsumeQueue; created on first pop or recovery.
        self._queues: dict[tuple[int, int, int], ConsumeQueue] = {}
        # Live checkpoints by id: every one that still owes a message.
        self._cks: dict[int, Checkpoint] = {}
        # Revive timer: (deadline_ms, ck_id) of live checkpoints; stale entries are skipped.
        self._revive_heap: list[tuple[int, int]] = []
        self._revive_wakeup = Wakeup()
        # Buffered (unpersisted) chained checkpoints: (persist_at_ms, ck_id) and the live set.
        self._buffer_heap: list[tuple[int, int]] = []
        self._buffered: dict[int, Checkpoint] = {}
        self._buffer_wakeup = Wakeup()
        # State written by the next flush: persisted checkpoints to rewrite or delete, and
        # consume queues whose committed offset moved. See _flush_state.
        self._dirty_cks: dict[int, Checkpoint] = {}
        self._dirty_queues: dict[tuple[int, int, int], ConsumeQueue] = {}
        self._in_flush: tuple[list[Checkpoint], list[ConsumeQueue]] = ([], [])
        self._send_rr: dict[int, int] = {}
        self._pop_count: dict[tuple[int, int], int] = {}
        # Creations in progress (group name / retry key), so concurrent first uses share one.
        self._creating: dict[object, asyncio.Future[Any]] = {}
        # Handles replaced by ChangeInvisibleTime/Nack, kept until their old deadline so a
        # stale handle is refused even after its checkpoint finished: (ck_id, index) -> deadline.
        self._superseded: dict[tuple[int, int], int] = {}
        self._superseded_expiry: list[tuple[int, int, int]] = []
        self._ck_seq = 0
        self._epoch = 0
        self.recovery_seconds = 0.0
        self.stats = BrokerStats()
        # Group settings as last written (see _load_settings): group_id -> settings.
        self._settings_cache: dict[int, GroupSettings] = {}
        # Sends storing a dedup id right now, so a concurrent repeat waits for the first:
        # (topic_id, dedup_id) -> (the first send's future of its stored results, the
        # message's index in them).
        self._dedup_pending: dict[
            tuple[int, str], tuple[asyncio.Future[list[SendResult]], int]
        ] = {}
        # Delayed messages: earliest due time in the timers family (a lower bound), the
        # loop's wakeup, and timer keys a move or recall is writing right now.
        self._next_timer_ms = _NEVER
        self._timer_wakeup = Wakeup()
        self._timers_moving: set[bytes] = set()
        self._timer_seq = 0

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        if self._store is None:
            raise UnavailableError("the broker is not started")
        return self._store

    async def start(self) -> None:
        """Open the store, recover in-flight state and start the background tasks."""
        if self._started:
            return
        began = time.perf_counter()
        store = Store(self.config.store.data_dir)
        self._store = store
        self._load_identity(store)
        self.catalog = Catalog(store)
        self.offsets = QueueOffsets(store)
        self.writer = GroupCommitWriter(store, self.offsets)
        self.writer.add_flush_hook(self._flush_state)
        self.writer.add_failure_listener(self._flush_failed)
        if self._boot_unsaved:
            self.writer.add_flush_hook(self._save_boot)
            self.writer.add_commit_listener(self._boot_saved)
        self._codec = ReceiptCodec(self._secret, broker_name=self.config.broker_name)
        self._recall_codec = RecallCodec(self._secret, broker_name=self.config.broker_name)
        first_timer = store.first_key("timers", b"", keys.timer_key(_NEVER, 0))
        self._next_timer_ms = keys.parse_timer_key(first_timer)[0] if first_timer else _NEVER
        recovered = self._recover(store)
        self.recovery_seconds = time.perf_counter() - began
        log.info(
            "store %s opened in %.3fs: %d topics, %d groups, %d in-flight checkpoints recovered",
            self.config.store.data_dir,
            self.recovery_seconds,
            len(self.catalog.topics),
            len(self.catalog.groups),
            recovered,
        )
        self._started = True
        self._tasks = [
            asyncio.create_task(self._revive_loop(), name="popmq-revive"),
            asyncio.create_task(self._buffer_loop(), name="popmq-ck-buffer"),
            asyncio.create_task(self._retention_loop(), name="popmq-retention"),
            asyncio.create_task(self._timer_loop(), name="popmq-timers"),
        ]
        for task in self._tasks:
            task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s died", task.get_name(), exc_info=task.exception())

    def release_waiters(self) -> None:
        """Answer every held pop now (empty) and hold no new ones: shutdown is coming.

        Called before the server's grace period, so in-flight RPCs can finish while the
        store is still open and no long poll keeps the grace period waiting.
        """
        self._draining = True
        for topic in list(self.catalog.topics):
            self.polling.notify_all(topic)

    async def close(self) -> None:
        """Persist buffered checkpoints and offsets, stop tasks, close the store."""
        if not self._started or self._closing:
            return
        self._closing = True
        self.release_waiters()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # A clean shutdown keeps every in-flight deadline: persist what is still buffered.
        for ck in list(self._buffered.values()):
            self._mark_persisted(ck)
        with contextlib.suppress(PopMQError):
            await self.writer.submit(_noop, sync=True)
        self.writer.close()
        self.store.close()
        self._started = False

    def _load_identity(self, store: Store) -> None:
        """Load the receipt key (data_dir.py) and count this boot in the epoch.

        An older store's key moves out of RocksDB into `receipt.key` (its handles stay
        valid) and is purged from the database files. On a store that opened read-only
        (full disk) the new epoch rides along with the first write that succeeds
        (`_save_boot`): ids made before it are never persisted without it.
        """
        legacy = store.get("meta", _SECRET_KEY)
        self._secret = data_dir.load_receipt_key(self.config.store.data_dir, legacy)
        epoch_bytes = store.get("meta", _BOOT_KEY)
        self._epoch = (keys.decode_u32(epoch_bytes) if epoch_bytes else 0) + 1
        self._boot_unsaved = True
        if store.read_only:
            return
        batch = store.batch()
        self._save_boot(batch)
        try:
            store.write(batch, sync=True)
        except StoreFullError:
            return  # the disk filled since the open: the first write that succeeds saves it
        self._boot_unsaved = False
        if legacy is not None:
            store.purge("meta")
            log.info("receipt key moved from the database to %s", data_dir.KEY_FILE)

    def _save_boot(self, batch: Batch) -> None:
        """Flush hook: put the boot epoch (and drop a legacy key) until a write carried it."""
        if self._boot_unsaved:
            batch.put("meta", _BOOT_KEY, keys.encode_u32(self._epoch))
            batch.delete("meta", _SECRET_KEY)

    def _boot_saved(self, grown: list[tuple[int, int]]) -> None:
        self._boot_unsaved = False

    def _recover(self, store: Store) -> int:
        """Rebuild offsets and persisted checkpoints; cost grows with in-flight state only."""
        for key, value in store.scan("offsets", b"", b"\xff" * 13):
            group_id, topic_id, queue_id = keys.parse_offset_key(key)
            self._new_queue(group_id, topic_id, queue_id, keys.decode_u64(value))
        count = 0
        stale = store.batch()
        now = now_ms()
        prefix = keys.SUPERSEDED_PREFIX
        for key, value in store.scan("meta", prefix, prefix[:-1] + b";"):
            deadline = keys.decode_u64(value)
            if deadline <= now:
                stale.delete("meta", key)
                continue
            ck_id, index = keys.parse_superseded_key(key)
            self._superseded[(ck_id, index)] = deadline
            heapq.heappush(self._superseded_expiry, (deadline, ck_id, index))
        for key, _ in store.scan("revive", b"", b"\xff" * 17):
            _, ck_id = keys.parse_revive_key(key)
            data = store.get("checkpoints", keys.checkpoint_key(ck_id))
            record = records_pb2.CheckpointRecord.FromString(data) if data else None
            cq = None
            if record is not None:
                where = (record.group_id, record.topic_id, record.queue_id)
                cq = self._queue_for(*where)
                if cq is None:
                    # The group never committed an offset in this queue: it starts where a
                    # new group starts, the earliest retained message.
                    cq = self._new_queue(*where, self._min_offset(*where[1:]))
            if record is None or cq is None:
                stale.delete("revive", key)
                stale.delete("checkpoints", keys.checkpoint_key(ck_id))
                continue
            ck = Checkpoint.from_record(record, cq)
            if ck.done:
                stale.delete("revive", key)
                stale.delete("checkpoints", keys.checkpoint_key(ck_id))
                continue
            if ck.chained and ck.range_start >= cq.committed:
                cq.recovered.append((ck.range_start, ck.range_end))
            cq.add(ck)
            if ck.fifo_group:
                cq.fifo_enqueue(ck)
            self._cks[ck.ck_id] = ck
            heapq.heappush(self._revive_heap, (ck.deadline_ms, ck.ck_id))
            count += 1
        for cq in self._queues.values():
            cq.recovered.sort()
            cq.pop_offset = cq.committed
            cq.advance()
        if len(stale) and not store.read_only:  # else the next start drops them
            store.write(stale, sync=False)
        return count

    # -- topics and groups ----------------------------------------------------------------

    def _user_topic_name(self, topic_id: int) -> str:
        """The user topic a (possibly retry) topic id belongs to, for counters."""
        info = self.catalog.topics_by_id.get(topic_id)
        if info is None:
            return ""
        return info.owner_topic if info.kind == KIND_RETRY else info.name

    def _topic(self, name: str) -> TopicInfo:
        info = self.catalog.topics.get(name)
        if info is None:
            raise NotFoundError(f"topic {name!r} does not exist; create it first")
        return info

    def _group(self, name: str) -> GroupInfo:
        info = self.catalog.groups.get(name)
        if info is None:
            raise NotFoundError(f"group {name!r} does not exist")
        return info

    async def create_topic(
        self, name: str, queues: int | None = None, *, message_type: str = "normal"
    ) -> TopicInfo:
        """Create a topic accepting one message type: normal, fifo, delay, transaction, mixed."""
        validation.check_name("topic", name)
        count = self.config.default_topic_queues if queues is None else queues
        validation.check_range("queues", count, 1, validation.MAX_QUEUES)
        code = MESSAGE_TYPES.get(message_type)
        if code is None:
            raise InvalidArgumentError(
                f"message_type {message_type!r} is not one of {', '.join(MESSAGE_TYPES)}"
            )
        if name in self.catalog.topics:
            raise AlreadyExistsError(f"topic {name!r} already exists")
        return await self._create_topic(name, count, KIND_NORMAL, code)

    async def _create_topic(
        self, name: str, queues: int, kind: int, message_type: int = MESSAGE_TYPE_NORMAL
    ) -> TopicInfo:
        info = self.catalog.new_topic(
            name, queues, kind=kind, message_type=message_type, now_ms=now_ms()
        )
        await self.writer.submit(lambda b, _: self.catalog.write_topic(b, info), sync=True)
        if name in self.catalog.topics:  # created concurrently while we wrote
            raise AlreadyExistsError(f"topic {name!r} already exists")
        self.catalog.register_topic(info)
        return info

    def topic_info(self, name: str) -> TopicInfo:
        """A topic's settings without its queues' stats (a lookup, for hot paths)."""
        validation.check_name("topic", name, allow_dlq=True)
        return self._topic(name)

    def get_topic(self, name: str) -> tuple[TopicInfo, list[QueueStats]]:
        validation.check_name("topic", name, allow_dlq=True)
        info = self._topic(name)
        return info, [
            QueueStats(q, self._min_offset(info.topic_id, q), self._max_offset(info.topic_id, q))
            for q in range(info.queues)
        ]

    def list_topics(self) -> list[TopicInfo]:
        return sorted(self.catalog.topics.values(), key=lambda t: t.name)

    async def delete_topic(self, name: str) -> None:
        """Delete a topic with its messages, retry queues, offsets and in-flight state."""
        validation.check_name("topic", name, allow_dlq=True)
        info = self._topic(name)
        removed_ids: set[int] = set()

        def apply(batch: Batch, _: QueueOffsets) -> None:
            removed = self.catalog.remove_topic(batch, info)
            for topic in removed:
                removed_ids.add(topic.topic_id)
                start, end = keys.topic_range(topic.topic_id)
                batch.delete_range("messages", start, end)
            for key, cq in list(self._queues.items()):
                if cq.topic_id in removed_ids:
                    batch.delete("offsets", keys.offset_key(*key))
            for ck in list(self._cks.values()):
                if ck.queue.topic_id in removed_ids and ck.persisted:
                    batch.delete("checkpoints", keys.checkpoint_key(ck.ck_id))
                    batch.delete("revive", keys.revive_key(ck.deadline_ms, ck.ck_id))

        await self.writer.submit(apply, sync=True)
        for key in [k for k, cq in self._queues.items() if cq.topic_id in removed_ids]:
            del self._queues[key]
            self._dirty_queues.pop(key, None)
        for ck_id in [i for i, ck in self._cks.items() if ck.queue.topic_id in removed_ids]:
            self._cks.pop(ck_id)
            self._buffered.pop(ck_id, None)
            self._dirty_cks.pop(ck_id, None)
        for topic_id in removed_ids:
            self.offsets.forget_topic(topic_id)
        self.polling.notify_all(name)
        log.info("deleted topic %s (ids %s)", name, sorted(removed_ids))

    async def create_group(
        self,
        name: str,
        *,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
    ) -> GroupInfo:
        """Create a group; an implicitly created one takes the given settings."""
        validation.check_name("group", name)
        defaults = self.config.groups
        attempts = defaults.max_delivery_attempts
        if max_delivery_attempts is not None:
            attempts = max_delivery_attempts
        validation.check_range(
            "max_delivery_attempts", attempts, 1, validation.MAX_DELIVERY_ATTEMPTS
        )
        backoff = tuple(retry_backoff_s) if retry_backoff_s else defaults.retry_backoff_s
        if len(backoff) > validation.MAX_BACKOFF_ENTRIES:
            raise InvalidArgumentError(
                f"retry_backoff has {len(backoff)} entries: at most "
                f"{validation.MAX_BACKOFF_ENTRIES} are allowed"
            )
        for i, delay in enumerate(backoff):
            validation.check_range(
                f"retry_backoff[{i}]",
                delay,
                1,
                self.config.pop.max_invisible_s,
                "s",
                field="retry_backoff",
            )
        existing = self.catalog.groups.get(name)
        if existing is not None and not existing.auto_created:
            raise AlreadyExistsError(f"group {name!r} already exists")
        info = self.catalog.new_group(
            name,
            max_delivery_attempts=attempts,
            retry_backoff_ms=tuple(round(d * 1000) for d in backoff),
            now_ms=existing.create_time_ms if existing else now_ms(),
            auto_created=False,
            group_id=existing.group_id if existing else None,
        )
        await self.writer.submit(lambda b, _: self.catalog.write_group(b, info), sync=True)
        current = self.catalog.groups.get(name)
        if current is not None and not current.auto_created:
            raise AlreadyExistsError(f"group {name!r} already exists")
        self.catalog.register_group(info)
        return info

    def get_group(self, name: str) -> GroupInfo:
        validation.check_name("group", name)
        return self._group(name)

    def list_groups(self) -> list[GroupInfo]:
        return sorted(self.catalog.groups.values(), key=lambda g: g.name)

    async def _once(self, key: object, create: Callable[[], Awaitable[_T]]) -> _T:
        """Run `create` once for concurrent first users of `key`; they all get its result."""
        pending = self._creating.get(key)
        if pending is not None:
            shared: _T = await asyncio.shield(pending)
            return shared
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._creating[key] = future
        try:
            result = await create()
        except PopMQError as exc:
            future.set_exception(exc)
            future.exception()  # marked retrieved: concurrent waiters re-raise it themselves
            raise
        else:
            future.set_result(result)
            return result
        finally:
            del self._creating[key]

    async def _ensure_group(self, name: str) -> GroupInfo:
        """The group, created with default settings on first use (RocketMQ auto-create)."""
        info = self.catalog.groups.get(name)
        if info is not None:
            return info

        async def create() -> GroupInfo:
            defaults = self.config.groups
            new = self.catalog.new_group(
                name,
                max_delivery_attempts=defaults.max_delivery_attempts,
                retry_backoff_ms=tuple(round(d * 1000) for d in defaults.retry_backoff_s),
                now_ms=now_ms(),
                auto_created=True,
            )
            await self.writer.submit(lambda b, _: self.catalog.write_group(b, new), sync=True)
            self.catalog.register_group(new)
            log.info("group %s created on first use", name)
            return new

        return await self._once(("group", name), create)

    async def _ensure_retry_topic(self, group: GroupInfo, topic: TopicInfo) -> TopicInfo:
        """The group's retry queue for `topic` (one queue), created on first use."""
        key = (group.group_id, topic.topic_id)
        info = self.catalog.retry_topics.get(key)
        if info is not None:
            return info

        async def create() -> TopicInfo:
            new = self.catalog.new_topic(
                retry_topic_name(group.name, topic.name),
                1,
                kind=KIND_RETRY,
                now_ms=now_ms(),
                owner_group=group.name,
                owner_topic=topic.name,
            )
            await self.writer.submit(
                lambda b, _: self.catalog.write_topic(b, new, group_id=group.group_id), sync=True
            )
            self.catalog.register_topic(new, group_id=group.group_id)
            return new

        return await self._once(("retry", key), create)

    async def _ensure_dlq(self, group: GroupInfo) -> TopicInfo:
        """`%DLQ%<group>` (one queue), created when the group first dead-letters."""
        name = dlq_topic_name(group.name)
        info = self.catalog.topics.get(name)
        if info is not None:
            return info
        return await self._once(("dlq", name), lambda: self._create_topic(name, 1, KIND_DLQ))

    # -- send -----------------------------------------------------------------------------

    async def send(self, messages: Sequence[NewMessage]) -> list[SendResult]:
        """Store the messages atomically; with sync flush, return after the fsync.

        A message whose dedup id was sent to the same topic within the dedup window is not
        stored again: its result is the first send's, with `duplicate` set. A message due in
        the future waits in the timers family and gets a recall handle instead of an offset.
        """
        if not messages:
            raise InvalidArgumentError("a send needs at least one message")
        validation.check_count("messages", len(messages), validation.MAX_SEND_MESSAGES, "messages")
        # Counted first: the sum below is then over at most MAX_SEND_MESSAGES bodies.
        validation.check_send_size(len(messages), sum(len(m.body) for m in messages))
        stamp = now_ms()
        cfg = self.config.messages
        names = {msg.topic for msg in messages}
        for name in names:
            validation.check_name("topic", name)
        for i, msg in enumerate(messages):
            validation.check_message(
                i,
                body=msg.body,
                tag=msg.tag,
                keys=msg.keys,
                properties=msg.properties,
                message_id=msg.message_id,
            )
            validation.check_message_extras(
                i,
                message_group=msg.message_group,
                dedup_id=msg.dedup_id,
                body_encoding=msg.body_encoding,
                born_host=msg.born_host,
            )
            validation.check_delivery_time(i, msg.deliver_at_ms, stamp, cfg.max_delay_s)
        # A full disk refuses sends first, keeping its last megabytes for acks and nacks.
        self.store.check_room(sum(len(msg.body) + _RECORD_OVERHEAD for msg in messages))
        topics = {name: await self._topic_for_send(name) for name in names}
        for i, msg in enumerate(messages):
            kind = _message_type(msg)
            topic = topics[msg.topic]
            if not topic.accepts(kind):
                raise FailedPreconditionError(
                    f"messages[{i}] is a {kind} message but topic {topic.name!r} is a "
                    f"{topic.message_type_name} topic"
                    + (
                        "; transactional sends are not supported yet"
                        if topic.message_type_name == "transaction"
                        else f" and accepts only {topic.message_type_name} messages"
                        if topic.message_type_name != "mixed"
                        else ""
                    )
                )
        window_ms = round(cfg.dedup_window_s * 1000)
        results: list[SendResult | None] = [None] * len(messages)
        # One future for the whole send: a concurrent send repeating one of its dedup ids
        # waits on it and reads its entry (index into the stored list) from _dedup_pending.
        done: asyncio.Future[list[SendResult]] = asyncio.get_running_loop().create_future()
        done.add_done_callback(_ignore_result)
        later: list[tuple[int, asyncio.Future[list[SendResult]], int]] = []
        mine: list[tuple[int, str]] = []
        plan: list[_Planned] = []
        ids = [msg.message_id or self._ids.next() for msg in messages]
        hits = message_index.find_duplicates(
            self.store,
            [
                (topics[msg.topic].topic_id, msg.dedup_id or mid, mid)
                for msg, mid in zip(messages, ids, strict=True)
            ],
            stamp,
            window_ms,
        )
        pending_sends = self._dedup_pending
        for i, msg in enumerate(messages):
            topic = topics[msg.topic]
            message_id = ids[i]
            dedup_id = msg.dedup_id or message_id
            dkey = (topic.topic_id, dedup_id)
            pending = pending_sends.get(dkey)
            if pending is not None:
                later.append((i, *pending))  # the same dedup id is being stored right now
                continue
            hit = hits[i]
            if hit is not None:
                results[i] = SendResult(
                    hit.message_id, topic.name, hit.queue_id, hit.offset,
                    hit.recall_handle, duplicate=True,
                )  # fmt: skip
                continue
            pending_sends[dkey] = (done, len(plan))
            mine.append(dkey)
            timer_seq = self._next_timer_seq() if msg.deliver_at_ms > stamp else 0
            plan.append(
                _Planned(i, topic, self._queue_for_send(topic, msg.message_group),
                         _stored_record(msg, message_id, stamp), dedup_id, timer_seq)
            )  # fmt: skip
        retention_ms = round(self.config.retention.retention_s * 1000)

        def apply(batch: Batch, offsets: QueueOffsets) -> list[SendResult]:
            out = []
            expiries = message_index.Expiries()
            for p in plan:
                r = p.record
                recall = ""
                if p.timer_seq:
                    recall = self._recall_codec.encode(
                        RecallHandle(p.topic.topic_id, r.deliver_at_ms, p.timer_seq)
                    )
                    timer = records_pb2.TimerRecord(
                        topic_id=p.topic.topic_id,
                        queue_id=p.queue_id,
                        message=r.SerializeToString(),
                    )
                    key = keys.timer_key(r.deliver_at_ms, p.timer_seq)
                    batch.put("timers", key, timer.SerializeToString())
                    offset = -1
                else:
                    offset = offsets.allocate(p.topic.topic_id, p.queue_id)
                    batch.put(
                        "messages",
                        keys.message_key(p.topic.topic_id, p.queue_id, offset),
                        r.SerializeToString(),
                    )
                message_index.write_entries(
                    batch,
                    expiries,
                    topic_id=p.topic.topic_id,
                    queue_id=p.queue_id,
                    offset=offset,
                    message_id=r.message_id,
                    dedup_id=p.dedup_id,
                    message_keys=r.keys,
                    stamp_ms=stamp,
                    retention_ms=retention_ms,
                    dedup_window_ms=window_ms,
                    recall_handle=recall,
                )
                out.append(SendResult(r.message_id, p.topic.name, p.queue_id, offset, recall))
            expiries.put(batch)
            return out

        try:
            stored: list[SendResult] = await self.writer.submit(
                apply, sync=self.config.store.flush == "sync"
            )
        except BaseException as exc:
            done.set_exception(
                exc if isinstance(exc, Exception) else UnavailableError("the send was cancelled")
            )
            raise
        else:
            done.set_result(stored)
        finally:
            for dkey in mine:
                entry = pending_sends.get(dkey)
                if entry is not None and entry[0] is done:
                    del pending_sends[dkey]
        for p, result in zip(plan, stored, strict=True):
            results[p.index] = result
        for i, earlier, j in later:
            first = (await earlier)[j]
            results[i] = SendResult(
                first.message_id, first.topic, first.queue_id, first.offset,
                first.recall_handle, duplicate=True,
            )  # fmt: skip
        counts: dict[str, int] = {}
        arrivals: dict[tuple[str, int], int] = {}
        due_soon = self._next_timer_ms
        for result, p in zip(stored, plan, strict=True):
            if p.timer_seq:
                due_soon = min(due_soon, p.record.deliver_at_ms)
                continue
            counts[result.topic] = counts.get(result.topic, 0) + 1
            grew = (result.topic, result.queue_id)
            arrivals[grew] = arrivals.get(grew, 0) + 1
        if due_soon < self._next_timer_ms:
            self._next_timer_ms = due_soon
            self._timer_wakeup.set()
        self.stats.sent.update(counts)
        # Per queue, so a pop held on one queue is woken by what lands there and never
        # spends a wake-up meant for a pop held on another.
        for (topic_name, queue_id), count in arrivals.items():
            self.polling.notify(topic_name, count, queue_id=queue_id)
        return [r for r in results if r is not None]

    def _queue_for_send(self, topic: TopicInfo, message_group: str) -> int:
        """A message group always goes to the same queue (stable hash); others round-robin."""
        if message_group:
            return zlib.crc32(message_group.encode()) % topic.queues
        queue_id = self._send_rr.get(topic.topic_id, 0) % topic.queues
        self._send_rr[topic.topic_id] = queue_id + 1
        return queue_id

    def _next_timer_seq(self) -> int:
        self._timer_seq += 1
        return (self._epoch << _CK_SEQ_BITS) | self._timer_seq

    async def _topic_for_send(self, name: str) -> TopicInfo:
        info = self.catalog.topics.get(name)
        if info is not None and info.kind == KIND_NORMAL:
            return info
        if info is not None:
            raise InvalidArgumentError(
                f"topic {name!r} is a dead-letter topic; it can only be read"
            )
        if not self.config.auto_create_topics:
            raise NotFoundError(f"topic {name!r} does not exist; create it first")
        try:
            return await self._create_topic(
                name, self.config.default_topic_queues, KIND_NORMAL, MESSAGE_TYPE_MIXED
            )
        except AlreadyExistsError:
            return self._topic(name)

    # -- delayed messages -----------------------------------------------------------------

    async def recall(self, topic: str, recall_handle: str) -> str:
        """Cancel a delayed message before it is due; returns its message id."""
        validation.check_name("topic", topic)
        info = self._topic(topic)
        handle = self._recall_codec.decode(recall_handle)
        if handle.topic_id != info.topic_id:
            raise InvalidArgumentError(f"recall_handle belongs to another topic, not {topic!r}")
        key = keys.timer_key(handle.due_ms, handle.seq)
        if key in self._timers_moving:
            raise NotFoundError("the delayed message is being delivered now; it cannot be recalled")
        data = self.store.get("timers", key)
        if data is None:
            raise NotFoundError(
                "no delayed message waits for this recall_handle: it was delivered or recalled"
            )
        record = records_pb2.StoredMessage.FromString(
            records_pb2.TimerRecord.FromString(data).message
        )
        self._timers_moving.add(key)
        try:
            await self.writer.submit(lambda b, _: b.delete("timers", key), sync=True)
        finally:
            self._timers_moving.discard(key)
        return record.message_id

    # -- query by id and key ---------------------------------------------------------------

    def query_message(self, topic: str, message_id: str) -> PeekedMessage:
        """The stored message with this id (offset -1: a delayed message not yet due)."""
        validation.check_name("topic", topic, allow_dlq=True)
        if not message_id:
            raise InvalidArgumentError("message_id is empty")
        info = self._topic(topic)
        entry = message_index.lookup_id(self.store, info.topic_id, message_id)
        record = None
        if entry is not None and entry.offset >= 0:
            data = self.store.get(
                "messages", keys.message_key(info.topic_id, entry.queue_id, entry.offset)
            )
            record = records_pb2.StoredMessage.FromString(data) if data is not None else None
        elif entry is not None and entry.recall_handle:
            handle = self._recall_codec.decode(entry.recall_handle, any_issuer=True)
            data = self.store.get("timers", keys.timer_key(handle.due_ms, handle.seq))
            if data is not None:
                timer = records_pb2.TimerRecord.FromString(data)
                record = records_pb2.StoredMessage.FromString(timer.message)
        if entry is None or record is None or record.message_id != message_id:
            raise NotFoundError(
                f"no message {message_id!r} in topic {topic!r} (never sent, recalled, or "
                "deleted by retention)"
            )
        return PeekedMessage(info.name, entry.queue_id, entry.offset, record)

    def query_messages_by_key(self, topic: str, key: str, limit: int = 64) -> list[PeekedMessage]:
        """Stored messages carrying business key `key`, oldest first, at most `limit`."""
        validation.check_name("topic", topic, allow_dlq=True)
        if not key:
            raise InvalidArgumentError("key is empty")
        validation.check_range("limit", limit, 1, 1024)
        info = self._topic(topic)
        places = message_index.lookup_key(self.store, info.topic_id, key, limit)
        found: list[PeekedMessage] = []
        response = ResponseBudget()
        while places:
            count = response.reads(len(places))
            chunk, places = places[:count], places[count:]
            values = self.store.multi_get(
                "messages", [keys.message_key(info.topic_id, q, o) for q, o in chunk]
            )
            for (q, o), value in zip(chunk, values, strict=True):
                if value is None:
                    continue
                response.saw(len(value))
                if not response.take(len(value)):
                    return found  # the answer is full (budget.py): oldest first, rest left out
                record = records_pb2.StoredMessage.FromString(value)
                found.append(PeekedMessage(info.name, q, o, record))
        return found

    async def sweep_index(self, now: int | None = None) -> int:
        """Delete index entries past their lifetime (retention or dedup window); returns count."""
        now = now_ms() if now is None else now
        ttl = {
            b"i": round(self.config.retention.retention_s * 1000),
            b"k": round(self.config.retention.retention_s * 1000),
            b"d": round(self.config.messages.dedup_window_s * 1000),
        }
        removed = 0
        while True:
            markers = message_index.expired_entries(self.store, now)
            if not markers:
                return removed
            await self.writer.submit(
                functools.partial(_sweep, self.store, markers, now, ttl), sync=False
            )
            removed += sum(len(entries) for _, entries in markers)

    async def _timer_loop(self) -> None:
        """Append due delayed messages to their queues: a batch per chunk, then wake pollers."""
        while True:
            now = now_ms()
            if self._next_timer_ms <= now:
                try:
                    more = await self._fire_timers(now)
                except PopMQError as exc:
                    self._timer_warning.warn("delayed-message delivery failed, retrying: %s", exc)
                    await asyncio.sleep(_REVIVE_RETRY_MS / 1000)
                    continue
                if more:
                    continue
            timeout = 1.0
            if self._next_timer_ms < _NEVER:
                timeout = min(timeout, max(0.0, (self._next_timer_ms - now_ms()) / 1000))
            await self._timer_wakeup.wait(timeout)

    async def _fire_timers(self, now: int) -> bool:
        """Move one chunk of due timers; True when more are due."""
        store = self.store
        due: list[tuple[bytes, records_pb2.TimerRecord]] = []
        next_due = _NEVER
        for key, value in store.scan("timers", b"", keys.timer_key(_NEVER, 0)):
            due_ms, _ = keys.parse_timer_key(key)
            if due_ms > now or len(due) >= _REVIVE_CHUNK:
                next_due = due_ms
                break
            if key in self._timers_moving:
                continue
            due.append((key, records_pb2.TimerRecord.FromString(value)))
        self._next_timer_ms = next_due
        if not due:
            return False
        moving = {key for key, _ in due}
        self._timers_moving |= moving
        retention_ms = round(self.config.retention.retention_s * 1000)
        stamp = now_ms()

        def apply(batch: Batch, offsets: QueueOffsets) -> list[tuple[str, int]]:
            notify = []
            for key, timer in due:
                batch.delete("timers", key)
                topic = self.catalog.topics_by_id.get(timer.topic_id)
                if topic is None:
                    continue  # the topic was deleted while the message waited
                queue_id = timer.queue_id % topic.queues
                record = records_pb2.StoredMessage.FromString(timer.message)
                record.store_time_ms = stamp
                _store_indexed(
                    batch, offsets, topic.topic_id, queue_id, record, stamp, retention_ms
                )
                notify.append((topic.name, queue_id))
            return notify

        try:
            moved: list[tuple[str, int]] = await self.writer.submit(apply, sync=False)
        finally:
            self._timers_moving -= moving
        counts: dict[tuple[str, int], int] = {}
        for where in moved:
            counts[where] = counts.get(where, 0) + 1
        for (name, queue_id), count in counts.items():
            self.polling.notify(name, count, queue_id=queue_id)
        return next_due <= now_ms()

    # -- pop ------------------------------------------------------------------------------

    def check_pop_arguments(self, *, max_messages: int, invisible_s: float, wait_s: float) -> None:
        pop = self.config.pop
        validation.check_pop_arguments(
            max_messages=max_messages,
            invisible_s=invisible_s,
            wait_s=wait_s,
            max_batch=pop.max_batch,
            min_invisible_s=pop.min_invisible_s,
            max_invisible_s=pop.max_invisible_s,
            max_wait_s=self.config.long_polling.max_timeout_s,
        )

    async def pop(
        self,
        group: str,
        topic: str,
        *,
        max_messages: int | None = None,
        invisible_s: float | None = None,
        wait_s: float | None = None,
        filter_expression: str = "",
        filter_type: str = "tag",
        queue_id: int | None = None,
        max_bytes: int | None = None,
    ) -> list[PoppedMessage]:
        """Pop up to max_messages; wait up to wait_s for an arrival when nothing is there.

        filter_type "tag" takes a tag expression, "sql" a SQL92 expression over properties.
        queue_id limits the pop to one queue of the topic plus the group's retry queue for
        it, whose copies belong to no queue (RocketMQ PopMessageRequestHeader.queueId);
        None pops every queue.

        max_bytes bounds what the answer takes (budget.py), the first message included:
        bytes the caller reserved for it (proxy/stream_session.py's admission); None is the
        usual ~4 MiB answer. A pop that finds messages none of which fit raises
        AnswerBoundError with the bytes needed, having taken nothing; so 0 makes a probe
        that takes nothing and answers once there is something to take.
        """
        validation.check_name("group", group)
        validation.check_name("topic", topic, allow_dlq=True)
        if max_bytes is not None:
            validation.check_range("max_bytes", max_bytes, 0, validation.MAX_RESPONSE_BYTES)
        if max_messages is None:
            max_messages = min(32, self.config.pop.max_batch)
        invisible = self.config.pop.default_invisible_s if invisible_s is None else invisible_s
        wait = self.config.long_polling.default_timeout_s if wait_s is None else wait_s
        self.check_pop_arguments(max_messages=max_messages, invisible_s=invisible, wait_s=wait)
        if not filter_expression.strip() and filter_type == "tag":
            # A pop without a filter of its own uses the group's declared subscription.
            declared = self.subscription_filter(group, topic)
            if declared is not None:
                filter_type, filter_expression = declared
        record_filter = parse_filter(filter_expression, filter_type)
        topic_info = self._topic(topic)
        if queue_id is not None:
            self._check_queue_id(topic_info, queue_id)
        group_info = await self._ensure_group(group)
        retry_info = await self._ensure_retry_topic(group_info, topic_info)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait
        invisible_ms = round(invisible * 1000)
        while True:
            if self._closing:
                return []
            topic_info = self._topic(topic)  # raises if deleted while we waited
            if queue_id is not None:
                self._check_queue_id(topic_info, queue_id)  # recreated with fewer queues
            response = (
                ResponseBudget() if max_bytes is None else ResponseBudget(max_bytes, strict=True)
            )
            found, contended = self._pop_once(
                group_info,
                topic_info,
                retry_info,
                max_messages,
                invisible_ms,
                record_filter,
                queue_id,
                response,
            )
            if not found and response.refused:
                raise AnswerBoundError(
                    f"the next message needs {response.refused} bytes: more than max_bytes "
                    f"{max_bytes}",
                    response.refused,
                )
            remaining = give_up - loop.time()
            if found:
                self.stats.popped[(group, topic)] += len(found)
            if found or remaining <= 0 or self._draining:
                return found
            # A queue skipped because its lock was held may have messages, and a FIFO head
            # held back by a nack's backoff becomes due without any arrival.
            retry_in = min(remaining, 0.005) if contended else remaining
            fifo_due = self._fifo_next_due(group_info, topic_info, queue_id)
            if fifo_due is not None:
                retry_in = min(retry_in, max(0.001, (fifo_due - now_ms()) / 1000))
            # A timer handle resolving the parked future, not asyncio.wait: a held pop then
            # costs its future and one handle, not a coroutine, set, closure and future more.
            waiter = self.polling.park(group, topic, queue_id)
            timer = loop.call_later(retry_in, _resolve, waiter, context=_TIMER_CONTEXT)
            try:
                await waiter
            except asyncio.CancelledError:
                if not waiter.cancelled() and loop.time() < timer.when():
                    # Woken for an arrival, then cancelled before popping it: hand the
                    # wake-up on, so another held pop takes the message now.
                    self.polling.notify(topic, 1, group=group, queue_id=queue_id)
                raise
            finally:
                timer.cancel()
                self.polling.unpark(group, topic, waiter, queue_id)

    def _fifo_next_due(
        self, group: GroupInfo, topic: TopicInfo, queue_id: int | None = None
    ) -> int | None:
        """Earliest not-before time of a held FIFO head of this (group, topic), if any (of
        one queue when the pop is limited to it: another queue's head is not its to wait
        for)."""
        due: int | None = None
        for q in range(topic.queues) if queue_id is None else (queue_id,):
            cq = self._queue_for(group.group_id, topic.topic_id, q)
            if cq is None or not cq.fifo_ready:
                continue
            for name in cq.fifo_ready:
                lane = cq.fifo.get(name)
                if lane and lane[0].held:
                    at = lane[0].not_before_ms
                    due = at if due is None else min(due, at)
        return due

    def _pop_once(
        self,
        group: GroupInfo,
        topic: TopicInfo,
        retry: TopicInfo,
        max_messages: int,
        invisible_ms: int,
        record_filter: RecordFilter,
        queue_id: int | None = None,
        response: ResponseBudget | None = None,
    ) -> tuple[list[PoppedMessage], bool]:
        count_key = (group.group_id, topic.topic_id)
        count = self._pop_count.get(count_key, 0)
        self._pop_count[count_key] = count + 1
        if queue_id is None:
            start = count % topic.queues
            order = [(topic, (start + i) % topic.queues) for i in range(topic.queues)]
        else:
            order = [(topic, queue_id)]
        if count % self.config.pop.retry_first_every == 0:
            order.insert(0, (retry, 0))
        else:
            order.append((retry, 0))
        found: list[PoppedMessage] = []
        contended = False
        now = now_ms()
        deadline = now + invisible_ms
        if response is None:
            response = ResponseBudget()
        for source, source_queue in order:
            want = max_messages - len(found)
            # A reserved bound (strict) stops at its first refusal, not at the last byte.
            if want <= 0 or (response.refused if response.strict else response.left <= 0):
                break
            cq = self._queue(group, source, source_queue)
            if not self.locks.try_acquire(cq.lock_key):
                contended = True
                continue
            try:
                if cq.fifo_ready:
                    self._deliver_fifo_heads(
                        cq, source, topic, want, now, deadline, record_filter, found, response
                    )
                    want = max_messages - len(found)
                if want > 0:
                    self._read_queue(
                        cq, source, topic, want, now, deadline, record_filter, found, response
                    )
            finally:
                self.locks.release(cq.lock_key)
        return found, contended

    def _read_queue(
        self,
        cq: ConsumeQueue,
        source: TopicInfo,
        user_topic: TopicInfo,
        want: int,
        now: int,
        deadline: int,
        record_filter: RecordFilter,
        found: list[PoppedMessage],
        response: ResponseBudget,
    ) -> None:
        """Read up to `want` matching messages of one queue under its lock; record a checkpoint.

        Stops before a message that does not fit the answer's byte budget (it stays for the
        next pop). A message of a FIFO message group gets its own checkpoint instead (see
        _take_fifo): delivered when its group has nothing in flight, held behind the group's
        head otherwise. Either way the chained checkpoint's range passes it.
        """
        start, limit = cq.read_window(self._max_offset(source.topic_id, cq.queue_id))
        if start >= limit:
            return
        oldest = self._min_offset(source.topic_id, cq.queue_id)
        if start < oldest:
            # Retention deleted [start, oldest) before this group read it: skip, and count it.
            gone = Checkpoint(
                ck_id=self._next_ck_id(),
                queue=cq,
                range_start=start,
                range_end=oldest,
                offsets=[],
                pop_time_ms=now,
                deadline_ms=deadline,
                chained=True,
            )
            cq.add(gone)
            cq.retention_skipped += oldest - start
            self._advance(cq)
            start = oldest
            if start >= limit:
                return
        store = self.store
        position = start
        budget = self.config.pop.max_scan_per_pop
        offsets: list[int] = []
        records: list[records_pb2.StoredMessage] = []
        delivered = 0
        stopped = False  # a FIFO group is full, or the answer is: stop before this message
        max_held = self.config.messages.fifo_max_held
        while position < limit and delivered < want and budget > 0 and not stopped:
            step = want - delivered if record_filter.matches_all else max(want, 64)
            chunk_end = min(limit, position + min(response.reads(step), budget))
            values = store.multi_get(
                "messages",
                [
                    keys.message_key(source.topic_id, cq.queue_id, o)
                    for o in range(position, chunk_end)
                ],
            )
            for offset, value in zip(range(position, chunk_end), values, strict=True):
                # None: deleted by retention after we looked at the max offset. In flight:
                # owned by a live checkpoint recovered after a crash (a nack's, a
                # ChangeInvisibleTime's or a FIFO one), and delivered from there.
                record = None
                if value is not None:
                    response.saw(len(value))
                if value is not None and offset not in cq.inflight:
                    record = records_pb2.StoredMessage.FromString(value)
                    if record.message_group in cq.fifo and cq.fifo_held >= max_held:
                        stopped = True  # stop before it: read on once groups move
                        break
                    if not record_filter.accepts(record):
                        record = None
                    elif not response.take(len(value)):
                        stopped = True  # the answer is full: the next pop starts here
                        break
                position = offset + 1
                budget -= 1
                if record is None:
                    continue
                if record.message_group:
                    message = self._take_fifo(cq, source, user_topic, offset, record, now, deadline)
                    if message is not None:
                        found.append(message)
                        delivered += 1
                else:
                    offsets.append(offset)
                    records.append(record)
                    delivered += 1
                if delivered >= want:
                    break
        ck = Checkpoint(
            ck_id=self._next_ck_id(),
            queue=cq,
            range_start=start,
            range_end=position,
            offsets=offsets,
            pop_time_ms=now,
            deadline_ms=deadline,
            chained=True,
        )
        cq.add(ck)
        if not offsets:
            self._advance(cq)  # the range held only filtered-out or FIFO messages
            return
        self._track(ck)
        self._buffer(ck)
        topic_name = user_topic.name
        for index, (offset, record) in enumerate(zip(offsets, records, strict=True)):
            handle = self._codec.encode(
                ReceiptHandle(
                    cq.group_id, source.topic_id, cq.queue_id, offset, ck.ck_id, index, deadline
                )
            )
            found.append(PoppedMessage(topic_name, cq.queue_id, offset, record, handle, deadline))

    # -- FIFO message groups ----------------------------------------------------------------

    def _fifo_ck(
        self,
        cq: ConsumeQueue,
        offset: int,
        *,
        group: str,
        attempt: int,
        held: bool,
        now: int,
        deadline: int,
        not_before: int = 0,
    ) -> Checkpoint:
        """A persisted single-message FIFO checkpoint (written by the next flush).

        FIFO checkpoints skip the buffer: the chained checkpoint passing their offset may be
        persisted at once, so their own record must be in the same flush or an earlier one.
        A held one's deadline only re-arms it (see _revive_fifo).
        """
        ck = Checkpoint(
            ck_id=self._next_ck_id(),
            queue=cq,
            range_start=offset,
            range_end=offset + 1,
            offsets=[offset],
            pop_time_ms=now,
            deadline_ms=now + self._fifo_hold_ms() if held else deadline,
            chained=False,
        )
        ck.fifo_group = group
        ck.attempt = attempt
        ck.held = held
        ck.not_before_ms = not_before
        ck.persisted = True
        self._dirty_cks[ck.ck_id] = ck
        self.writer.request_flush()
        self._track(ck)
        return ck

    def _fifo_hold_ms(self) -> int:
        return round(self.config.pop.max_invisible_s * 1000)

    def _take_fifo(
        self,
        cq: ConsumeQueue,
        source: TopicInfo,
        user_topic: TopicInfo,
        offset: int,
        record: records_pb2.StoredMessage,
        now: int,
        deadline: int,
    ) -> PoppedMessage | None:
        """Queue a FIFO message behind its group; the delivery when the group was idle."""
        held = record.message_group in cq.fifo
        ck = self._fifo_ck(
            cq, offset, group=record.message_group, attempt=max(1, record.delivery_attempt),
            held=held, now=now, deadline=deadline,
        )  # fmt: skip
        cq.add(ck)
        cq.fifo_enqueue(ck)
        if held:
            return None
        return self._fifo_delivery(cq, source, user_topic, ck, record)

    def _fifo_delivery(
        self,
        cq: ConsumeQueue,
        source: TopicInfo,
        user_topic: TopicInfo,
        ck: Checkpoint,
        record: records_pb2.StoredMessage,
    ) -> PoppedMessage:
        offset = ck.offsets[0]
        if record.delivery_attempt != ck.attempt:
            copy = records_pb2.StoredMessage()
            copy.CopyFrom(record)
            copy.delivery_attempt = ck.attempt
            record = copy
        handle = self._codec.encode(
            ReceiptHandle(
                cq.group_id, source.topic_id, cq.queue_id, offset, ck.ck_id, 0, ck.deadline_ms
            )
        )
        return PoppedMessage(user_topic.name, cq.queue_id, offset, record, handle, ck.deadline_ms)

    def _deliver_fifo_heads(
        self,
        cq: ConsumeQueue,
        source: TopicInfo,
        user_topic: TopicInfo,
        want: int,
        now: int,
        deadline: int,
        record_filter: RecordFilter,
        found: list[PoppedMessage],
        response: ResponseBudget,
    ) -> None:
        """Deliver held heads whose group is free again (previous message acked or expired),
        as many as fit the answer's byte budget."""
        heads = list(itertools.islice(cq.fifo_ready_heads(now), want))
        if not heads:
            return
        values = self.store.multi_get(
            "messages",
            [keys.message_key(source.topic_id, cq.queue_id, h.offsets[0]) for h in heads],
        )
        for head, value in zip(heads, values, strict=True):
            record = records_pb2.StoredMessage.FromString(value) if value is not None else None
            if record is None or not record_filter.accepts(record):
                # Deleted by retention, or filtered out by this pop's (changed) filter.
                self._fifo_finish(head, acked=record is not None)
                continue
            if value is not None and not response.take(len(value)):
                break  # the answer is full: the head stays ready for the next pop
            new = self._fifo_ck(
                cq, head.offsets[0], group=head.fifo_group, attempt=head.attempt, held=False,
                now=now, deadline=deadline,
            )  # fmt: skip
            cq.inflight[head.offsets[0]] = new
            cq.fifo_replace(head, new)
            head.resolved = head.full
            self._finish(head)
            found.append(self._fifo_delivery(cq, source, user_topic, new, record))

    def _fifo_finish(self, ck: Checkpoint, *, acked: bool) -> None:
        """Resolve a FIFO checkpoint outside ack (skipped or dead-lettered) and free its group."""
        ck.resolved = ck.full
        if acked:
            ck.acked = ck.full
        ck.queue.release(ck, 0)
        self._finish(ck)

    def _next_ck_id(self) -> int:
        self._ck_seq += 1
        return (self._epoch << _CK_SEQ_BITS) | self._ck_seq

    def _queue(self, group: GroupInfo, topic: TopicInfo, queue_id: int) -> ConsumeQueue:
        key = (group.group_id, topic.topic_id, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            self._start_topic(group, topic)
            cq = self._queues.get(key)
        if cq is None:
            # Retry queues, groups consuming from the first message, and queues added to a
            # topic the group already consumes start at the earliest retained message:
            # nothing in them predates the group, so skipping any would lose messages.
            start = self._min_offset(topic.topic_id, queue_id)
            cq = self._new_queue(group.group_id, topic.topic_id, queue_id, start)
            if cq is None:
                raise NotFoundError(f"topic {topic.name!r} or group {group.name!r} was deleted")
        return cq

    def _start_topic(self, group: GroupInfo, topic: TopicInfo) -> None:
        """Place a group new to a topic where its consume_from says (RocketMQ
        ConsumeFromWhere): the end ("last") or the first message stored at a time, in every
        queue at once, so queue-exclusive consumers that reach the queues one by one still
        start the topic at one moment. The starts are written by the next flush: a message
        sent after them is in that flush or a later one, so a restart cannot skip it.
        """
        if topic.kind != KIND_NORMAL:
            return
        settings = self._load_settings(group.group_id)
        if settings.consume_from not in ("last", "timestamp"):
            return
        gid, tid = group.group_id, topic.topic_id
        if any((gid, tid, q) in self._queues for q in range(topic.queues)):
            return
        for queue_id in range(topic.queues):
            if settings.consume_from == "last":
                start = self._max_offset(tid, queue_id)
            else:
                start = self._offset_at(tid, queue_id, settings.consume_from_ms)
            cq = self._new_queue(gid, tid, queue_id, start)
            if cq is not None:
                self._dirty_queues[(gid, tid, queue_id)] = cq

    def _queue_for(self, group_id: int, topic_id: int, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((group_id, topic_id, queue_id))

    def _new_queue(
        self, group_id: int, topic_id: int, queue_id: int, committed: int
    ) -> ConsumeQueue | None:
        group = self.catalog.groups_by_id.get(group_id)
        topic = self.catalog.topics_by_id.get(topic_id)
        if group is None or topic is None:
            return None
        cq = ConsumeQueue(
            group=group.name,
            group_id=group_id,
            topic=topic.name,
            topic_id=topic_id,
            queue_id=queue_id,
            committed=committed,
        )
        self._queues[(group_id, topic_id, queue_id)] = cq
        return cq

    def _max_offset(self, topic_id: int, queue_id: int) -> int:
        return self.offsets.max_offset(topic_id, queue_id)

    def _min_offset(self, topic_id: int, queue_id: int) -> int:
        return self.offsets.min_offset(topic_id, queue_id)

    # -- checkpoint bookkeeping -----------------------------------------------------------

    def _track(self, ck: Checkpoint) -> None:
        """Make a live checkpoint findable by id and put it on the revive timer."""
        self._cks[ck.ck_id] = ck
        if not self._revive_heap or ck.deadline_ms < self._revive_heap[0][0]:
            self._revive_wakeup.set()
        heapq.heappush(self._revive_heap, (ck.deadline_ms, ck.ck_id))

    def _buffer(self, ck: Checkpoint) -> None:
        pop = self.config.pop
        persist_at = min(
            ck.pop_time_ms + round(pop.ck_buffer_time_s * 1000),
            ck.deadline_ms - round(pop.ck_persist_ahead_s * 1000),
        )
        self._buffered[ck.ck_id] = ck
        if not self._buffer_heap or persist_at < self._buffer_heap[0][0]:
            self._buffer_wakeup.set()
        heapq.heappush(self._buffer_heap, (persist_at, ck.ck_id))

    def _mark_persisted(self, ck: Checkpoint) -> None:
        """Persist a buffered checkpoint in the next flush (record + revive entry).

        Its record is in the next batch, so the offset may pass it at once: an offset write
        is always in the same batch as, or a later one than, the checkpoints it passes.
        """
        self._buffered.pop(ck.ck_id, None)
        if ck.done or ck.persisted:
            return
        ck.persisted = True
        self._dirty_cks[ck.ck_id] = ck
        self.writer.request_flush()
        self._advance(ck.queue)

    def _advance(self, cq: ConsumeQueue) -> None:
        if cq.advance():
            self._dirty_queues[(cq.group_id, cq.topic_id, cq.queue_id)] = cq
            self.writer.request_flush()

    def _finish(self, ck: Checkpoint) -> None:
        """A checkpoint's state changed: forget it when done, schedule its writes."""
        if ck.done:
            self._cks.pop(ck.ck_id, None)
            self._buffered.pop(ck.ck_id, None)
        if ck.persisted:
            self._dirty_cks[ck.ck_id] = ck
            self.writer.request_flush()
        if ck.chained:
            self._advance(ck.queue)
        elif ck.fifo_group and ck.done and ck.queue.fifo_remove(ck):
            # The group's next message may go now: wake a held pop of this group.
            cq = ck.queue
            self.polling.notify(self._user_topic_name(cq.topic_id), 1, group=cq.group)

    def _flush_state(self, batch: Batch) -> None:
        """Flush hook: write dirty persisted checkpoints and moved offsets into this batch."""
        cks = list(self._dirty_cks.values())
        queues = list(self._dirty_queues.values())
        self._dirty_cks.clear()
        self._dirty_queues.clear()
        for ck in cks:
            ck_key = keys.checkpoint_key(ck.ck_id)
            if ck.done:
                batch.delete("checkpoints", ck_key)
                batch.delete("revive", keys.revive_key(ck.deadline_ms, ck.ck_id))
            else:
                batch.put("checkpoints", ck_key, ck.to_record())
                batch.put("revive", keys.revive_key(ck.deadline_ms, ck.ck_id), b"")
        for cq in queues:
            key = keys.offset_key(cq.group_id, cq.topic_id, cq.queue_id)
            batch.put("offsets", key, keys.encode_u64(cq.committed))
        self._in_flush = (cks, queues)

    def _flush_failed(self) -> None:
        """The batch failed: what the hook took must be written by the next flush."""
        cks, queues = self._in_flush
        for ck in cks:
            self._dirty_cks.setdefault(ck.ck_id, ck)
        for cq in queues:
            self._dirty_queues.setdefault((cq.group_id, cq.topic_id, cq.queue_id), cq)
        self._in_flush = ([], [])

    # -- ack, change invisible time, nack -------------------------------------------------

    def _resolve_handle(
        self, group: GroupInfo, text: str, now: int
    ) -> tuple[Checkpoint, int] | None:
        """The live checkpoint and index a handle refers to; None when already acked."""
        handle = self._codec.decode(text)
        if handle.group_id != group.group_id:
            other = self.catalog.groups_by_id.get(handle.group_id)
            raise InvalidReceiptHandleError(
                f"receipt handle belongs to group {other.name if other else '(deleted)'!r}, "
                f"not {group.name!r}"
            )
        if (handle.ck_id, handle.ck_index) in self._superseded:
            raise _superseded()
        if handle.topic_id not in self.catalog.topics_by_id:
            raise FailedPreconditionError(
                "the topic of this receipt handle was deleted; there is nothing to acknowledge"
            )
        cq = self._queue_for(handle.group_id, handle.topic_id, handle.queue_id)
        owner = cq.inflight.get(handle.offset) if cq is not None else None
        ck = self._cks.get(handle.ck_id)
        if (
            ck is None
            or handle.ck_index >= len(ck.offsets)
            or ck.offsets[handle.ck_index] != handle.offset
        ):
            # No live checkpoint. In this boot that means finished (acked, or moved and then
            # superseded above). A handle of an earlier boot may instead name a checkpoint
            # the crash lost before it was persisted: then the consumer offset never passed
            # the message and it will be popped again, so "acked" would be a lie.
            earlier_boot = handle.ck_id >> _CK_SEQ_BITS != self._epoch
            if owner is not None:
                raise _lost() if earlier_boot else _superseded()
            if handle.deadline_ms <= now:
                raise _expired(now - handle.deadline_ms)
            if earlier_boot and (cq is None or handle.offset >= cq.committed):
                raise _lost()
            return None
        bit = 1 << handle.ck_index
        if ck.acked & bit:
            return None  # acked before: a repeated ack is idempotent
        if ck.revived & bit:
            raise _expired(now - handle.deadline_ms)
        if ck.resolved & bit or owner is not ck:
            raise _superseded()
        if handle.deadline_ms <= now:
            raise _expired(now - handle.deadline_ms)
        return ck, handle.ck_index

    async def ack(self, group: str, handles: Sequence[str]) -> list[PopMQError | None]:
        """Acknowledge deliveries; one result per handle (None = acked, or acked before)."""
        validation.check_name("group", group)
        if not handles:
            raise InvalidArgumentError("ack needs at least one receipt handle")
        group_info = self._group(group)
        now = now_ms()
        results: list[PopMQError | None] = []
        touched: dict[int, Checkpoint] = {}
        acked: dict[int, int] = {}  # topic id -> acks
        for text in handles:
            try:
                found = self._resolve_handle(group_info, text, now)
            except PopMQError as exc:
                results.append(exc)
                continue
            results.append(None)
            if found is None:
                continue
            ck, index = found
            topic_id = ck.queue.topic_id
            acked[topic_id] = acked.get(topic_id, 0) + 1
            ck.resolved |= 1 << index
            ck.acked |= 1 << index
            ck.queue.release(ck, index)
            touched[ck.ck_id] = ck
        for topic_id, count in acked.items():
            self.stats.acked[(group, self._user_topic_name(topic_id))] += count
        must_write = any(ck.persisted for ck in touched.values())
        for ck in touched.values():
            self._finish(ck)
        if must_write:
            await self.writer.submit(_noop, sync=False)
        return results

    async def change_invisible_time(
        self, group: str, handle: str, invisible_s: float
    ) -> tuple[str, int]:
        """Give one delivery a new deadline; returns (new handle, invisible_until_ms).

        Unlike a pop's, the new invisible time may be below the minimum, down to 0 s
        (visible at once), as RocketMQ's ChangeInvisibleDuration allows: clients use it to
        give a failed message back with a short retry delay.
        """
        validation.check_name("group", group)
        validation.check_invisible(invisible_s, 0, self.config.pop.max_invisible_s)
        return await self._move(self._group(group), handle, round(invisible_s * 1000))

    async def nack(self, group: str, handle: str, delay_s: float | None = None) -> int:
        """Redeliver after delay_s, or after the group's backoff; returns the redeliver time."""
        validation.check_name("group", group)
        group_info = self._group(group)
        if delay_s is not None:
            validation.check_range("delay", delay_s, 0, self.config.pop.max_invisible_s, "s")
            delay_ms = round(delay_s * 1000)
        else:
            found = self._resolve_handle(group_info, handle, now_ms())
            if found is None:
                raise FailedPreconditionError("the message was already acknowledged")
            ck, index = found
            data = self.store.get(
                "messages",
                keys.message_key(ck.queue.topic_id, ck.queue.queue_id, ck.offsets[index]),
            )
            attempt = records_pb2.StoredMessage.FromString(data).delivery_attempt if data else 1
            if ck.fifo_group:
                attempt = ck.attempt  # redelivered in place: the record keeps the first
            delay_ms = group_info.backoff_ms(attempt)
        _, until = await self._move(group_info, handle, delay_ms)
        topic_name = self._user_topic_name(self._codec.decode(handle).topic_id)
        self.stats.nacked[(group, topic_name)] += 1
        return until

    async def dead_letter(self, group: str, handle: str) -> str:
        """Move one delivery to `%DLQ%<group>` now (RocketMQ ForwardMessageToDeadLetterQueue).

        The copy is written first and the delivery resolved after the write commits, so a
        failure leaves the message with its consumer; returns the DLQ topic's name.
        """
        validation.check_name("group", group)
        group_info = self._group(group)
        found = self._resolve_handle(group_info, handle, now_ms())
        if found is None:
            raise FailedPreconditionError("the message was already acknowledged")
        ck, index = found
        cq = ck.queue
        offset = ck.offsets[index]
        data = self.store.get("messages", keys.message_key(cq.topic_id, cq.queue_id, offset))
        source = self.catalog.topics_by_id.get(cq.topic_id)
        if data is None or source is None:
            raise NotFoundError("the message was deleted (retention or topic deletion)")
        copy = _redelivery_copy(data, source.name, cq.queue_id, offset, now_ms())
        copy.delivery_attempt = 1
        target = await self._ensure_dlq(group_info)
        payload = copy.SerializeToString()

        def apply(batch: Batch, offsets: QueueOffsets) -> None:
            at = offsets.allocate(target.topic_id, 0)
            batch.put("messages", keys.message_key(target.topic_id, 0, at), payload)

        await self.writer.submit(apply, sync=self.config.store.flush == "sync")
        bit = 1 << index
        if not ck.resolved & bit and cq.inflight.get(offset) is ck:
            self.stats.dead_lettered[(group, self._user_topic_name(cq.topic_id))] += 1
            if ck.fifo_group:
                ck.revived = ck.full
                self._fifo_finish(ck, acked=False)
            else:
                ck.resolved |= bit
                ck.revived |= bit
                cq.release(ck, index)
                self._finish(ck)
        self.polling.notify(target.name, 1)
        return target.name

    async def _move(self, group: GroupInfo, text: str, invisible_ms: int) -> tuple[str, int]:
        """Move one delivery to a new single-message checkpoint with a new deadline.

        Like RocketMQ's ChangeInvisibleTime: a fresh checkpoint, persisted at once, then the
        old entry resolved. Until the write commits the old entry is "moving": its handle is
        already refused, but the offset cannot pass it yet.
        """
        now = now_ms()
        found = self._resolve_handle(group, text, now)
        if found is None:
            raise FailedPreconditionError("the message was already acknowledged")
        old, index = found
        bit = 1 << index
        offset = old.offsets[index]
        cq = old.queue
        new = Checkpoint(
            ck_id=self._next_ck_id(),
            queue=cq,
            range_start=offset,
            range_end=offset + 1,
            offsets=[offset],
            pop_time_ms=now,
            deadline_ms=now + invisible_ms,
            chained=False,
        )
        new.persisted = True
        new.fifo_group = old.fifo_group
        new.attempt = old.attempt
        cq.inflight[offset] = new  # refuses the old handle from now on (superseded)
        record = new.to_record()

        def apply(batch: Batch, _: QueueOffsets) -> None:
            batch.put("checkpoints", keys.checkpoint_key(new.ck_id), record)
            batch.put("revive", keys.revive_key(new.deadline_ms, new.ck_id), b"")
            # Remembered across restarts until the old deadline: a stale handle stays refused.
            batch.put(
                "meta", keys.superseded_key(old.ck_id, index), keys.encode_u64(old.deadline_ms)
            )

        try:
            await self.writer.submit(apply, sync=False)
        except PopMQError:
            if cq.inflight.get(offset) is new:
                cq.inflight[offset] = old
            raise
        old.resolved |= bit
        self._superseded[(old.ck_id, index)] = old.deadline_ms
        heapq.heappush(self._superseded_expiry, (old.deadline_ms, old.ck_id, index))
        self._track(new)
        if old.fifo_group:
            cq.fifo_replace(old, new)  # the group stays blocked behind the moved delivery
        self._finish(old)
        handle = self._codec.encode(
            ReceiptHandle(
                cq.group_id, cq.topic_id, cq.queue_id, offset, new.ck_id, 0, new.deadline_ms
            )
        )
        return handle, new.deadline_ms

    # -- offset reads ---------------------------------------------------------------------
    # Group-less reads by offset, offset commits and offset-at-time lookups, for readers that
    # keep their own position (the Spark connector's offset mode, queue-exclusive consumers).

    def _check_queue_id(self, info: TopicInfo, queue_id: int) -> None:
        validation.check_queue_id(info.name, info.queues, queue_id)

    def pull(
        self, topic: str, queue_id: int, offset: int, max_messages: int = PULL_DEFAULT_MESSAGES
    ) -> PulledMessages:
        """Read one queue from `offset` on, without a group and without changing any state.

        Stops after max_messages, at the end of the queue, or before the message that would
        pass the answer's byte budget (budget.py: always at least one message), so a client
        with gRPC's default receive limit can read the answer.
        A read below the queue's min offset (deleted by retention) starts at the min offset;
        the caller compares and decides whether that is data loss.
        """
        validation.check_name("topic", topic, allow_dlq=True)
        info = self._topic(topic)
        self._check_queue_id(info, queue_id)
        validation.check_range("max_messages", max_messages, 1, PULL_MAX_MESSAGES)
        low = self._min_offset(info.topic_id, queue_id)
        high = self._max_offset(info.topic_id, queue_id)
        validation.check_offset(topic, queue_id, offset, high)
        position = max(offset, low)
        end = min(high, position + max_messages)
        found: list[tuple[int, records_pb2.StoredMessage]] = []
        response = ResponseBudget()
        full = False
        while position < end and not full:
            chunk_end = min(end, position + response.reads(_PULL_CHUNK))
            values = self.store.multi_get(
                "messages",
                [keys.message_key(info.topic_id, queue_id, o) for o in range(position, chunk_end)],
            )
            for at, value in zip(range(position, chunk_end), values, strict=True):
                if value is not None:
                    response.saw(len(value))
                if value is not None and not response.take(len(value)):
                    full = True  # the answer is full: next_offset is this message
                    break
                position = at + 1
                if value is None:
                    continue  # deleted by retention after we read the min offset
                found.append((at, records_pb2.StoredMessage.FromString(value)))
        return PulledMessages(
            topic=info.name,
            queue_id=queue_id,
            messages=found,
            min_offset=low,
            max_offset=high,
            next_offset=position,
        )

    async def await_messages(
        self, topic: str, positions: Mapping[int, int], wait_s: float
    ) -> list[tuple[int, int]]:
        """Wait until a queue of `topic` holds messages past its position in `positions`
        (queue id -> offset), or `wait_s` passed; returns (queue id, max offset) of each
        queue that did, in queue order (empty after the wait).

        The whole request is checked before any waiting; a wake-up checks only the queues
        that received messages (LongPolling.watch), so many held calls cost a send only
        the calls that watch its queue.
        """
        validation.check_name("topic", topic, allow_dlq=True)
        info = self._topic(topic)
        validation.check_range(
            "long_polling_timeout", wait_s, 0, self.config.long_polling.max_timeout_s, "s"
        )
        if not positions:
            raise InvalidArgumentError("positions is empty: give at least one queue and offset")
        for queue_id, offset in positions.items():
            if not 0 <= queue_id < info.queues:
                raise InvalidArgumentError(
                    f"positions has queue id {queue_id}: the topic's queues are "
                    f"0..{info.queues - 1}"
                )
            if offset < 0:
                raise InvalidArgumentError(f"positions has offset {offset}: use >= 0")

        def ready(queue_ids: Iterable[int]) -> list[tuple[int, int]]:
            found = []
            for queue_id in queue_ids:
                high = self._max_offset(info.topic_id, queue_id)
                if high > positions[queue_id]:
                    found.append((queue_id, high))
            return found

        found = ready(sorted(positions))
        if found or wait_s <= 0 or self._draining:
            return found
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait_s
        # No await between the check above and watching: an arrival cannot slip between.
        watch = self.polling.watch(topic, positions)
        try:
            while not found:
                remaining = give_up - loop.time()
                if remaining <= 0 or self._draining:
                    break
                await asyncio.wait([watch.future], timeout=remaining)
                if self.catalog.topics.get(topic) is not info:
                    raise NotFoundError(f"topic {topic!r} was deleted while waiting")
                found = ready(watch.take_moved())
        finally:
            self.polling.unwatch(watch)
        return found

    async def commit_offsets(
        self, group: str, topic: str, offsets: Sequence[tuple[int, int]]
    ) -> None:
        """Set the group's offset in some queues of a topic, all or none, durably.

        For groups that read by offset. A queue where the group has popped messages still in
        flight is refused: moving its offset would break the POP bookkeeping of those.
        """
        validation.check_name("group", group)
        validation.check_name("topic", topic, allow_dlq=True)
        if not offsets:
            raise InvalidArgumentError("a commit needs at least one queue offset")
        info = self._topic(topic)
        seen: set[int] = set()
        for queue_id, offset in offsets:
            self._check_queue_id(info, queue_id)
            if queue_id in seen:
                raise InvalidArgumentError(
                    f"queue {queue_id} appears twice; commit one offset per queue"
                )
            seen.add(queue_id)
            high = self._max_offset(info.topic_id, queue_id)
            validation.check_range(f"offset of queue {queue_id}", offset, 0, high, field="offset")
        group_info = await self._ensure_group(group)
        info = self._topic(topic)  # deleted while the group was created?
        moves: list[tuple[ConsumeQueue, int]] = []
        for queue_id, offset in offsets:
            cq = self._queue(group_info, info, queue_id)
            if cq.chain or cq.inflight:
                raise FailedPreconditionError(
                    f"group {group!r} has popped messages in flight in topic {topic!r} queue "
                    f"{queue_id}; commit offsets only where the group reads by offset, not "
                    "by Pop"
                )
            moves.append((cq, offset))
        for cq, offset in moves:
            cq.committed = cq.pop_offset = offset
            cq.recovered.clear()
            self._dirty_queues[(cq.group_id, cq.topic_id, cq.queue_id)] = cq
        await self.writer.submit(_noop, sync=True)

    def get_offsets(self, group: str, topic: str) -> list[ConsumerOffset]:
        """The group's offset in every queue of the topic (where it would start if none)."""
        validation.check_name("group", group)
        validation.check_name("topic", topic, allow_dlq=True)
        group_info = self._group(group)
        info = self._topic(topic)
        result = []
        for queue_id in range(info.queues):
            cq = self._queue_for(group_info.group_id, info.topic_id, queue_id)
            if cq is None:
                result.append(
                    ConsumerOffset(queue_id, self._min_offset(info.topic_id, queue_id), False)
                )
            else:
                result.append(ConsumerOffset(queue_id, cq.committed, True))
        return result

    def offsets_at(self, topic: str, timestamp_ms: int) -> list[tuple[int, int]]:
        """(queue_id, first offset stored at or after timestamp_ms) per queue (RocketMQ
        searchOffset); max_offset when nothing is. A binary search of point reads per queue:
        store times grow with offsets within a queue.
        """
        validation.check_name("topic", topic, allow_dlq=True)
        validation.check_range("timestamp_ms", timestamp_ms, 0, keys.MAX_OFFSET)
        info = self._topic(topic)
        return [
            (queue_id, self._offset_at(info.topic_id, queue_id, timestamp_ms))
            for queue_id in range(info.queues)
        ]

    def _offset_at(self, topic_id: int, queue_id: int, timestamp_ms: int) -> int:
        lo = self._min_offset(topic_id, queue_id)
        hi = self._max_offset(topic_id, queue_id)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._store_time(topic_id, queue_id, mid) < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # -- admin operations -----------------------------------------------------------------
    # What AdminService does beyond create/get/list: topic growth, guarded deletes, purges,
    # group settings, offset resets, peeks and dead-letter redrive. Each checks everything
    # first, writes one batch (redrive: one per chunk) and changes memory only after that
    # batch committed. Queues an operation changes are try-locked meanwhile, so pops skip
    # them instead of reading state that is about to move.

    def inflight_count(self, *, group: str | None = None, topic: str | None = None) -> int:
        """Messages popped and neither acked nor redelivered yet, for one group and/or one
        topic (a topic's count includes its retry queues)."""
        group_id = self._group(group).group_id if group is not None else None
        topic_ids = self._topic_ids(self._topic(topic)) if topic is not None else None
        return sum(
            len(cq.inflight)
            for (gid, tid, _), cq in self._queues.items()
            if (group_id is None or gid == group_id) and (topic_ids is None or tid in topic_ids)
        )

    def _topic_ids(self, info: TopicInfo) -> set[int]:
        """A user topic's id plus the ids of its retry topics."""
        ids = {info.topic_id}
        ids.update(
            retry.topic_id
            for (_, tid), retry in self.catalog.retry_topics.items()
            if tid == info.topic_id
        )
        return ids

    async def update_topic(self, name: str, queues: int) -> TopicInfo:
        """Grow a topic to `queues` queues. Queues are never removed: that would strand the
        messages stored in them and the offsets groups hold there."""
        validation.check_name("topic", name)
        info = self._topic(name)
        if queues < info.queues:
            raise InvalidArgumentError(
                f"queues {queues} is below the topic's current {info.queues}: queues can only "
                "be added (removing one would strand its messages)"
            )
        validation.check_range("queues", queues, 1, validation.MAX_QUEUES)
        if queues == info.queues:
            return info
        grown = dataclasses.replace(info, queues=queues)
        await self.writer.submit(lambda b, _: self.catalog.write_topic(b, grown), sync=True)
        if self.catalog.topics.get(name) is not info:
            raise FailedPreconditionError(f"topic {name!r} changed while it grew; retry")
        self.catalog.register_topic(grown)
        log.info("topic %s grown from %d to %d queues", name, info.queues, queues)
        return grown

    async def delete_topic_guarded(self, name: str, *, force: bool = False) -> None:
        """Delete a topic, refusing while groups have its messages in flight unless forced."""
        validation.check_name("topic", name, allow_dlq=True)
        info = self._topic(name)
        ids = self._topic_ids(info)
        busy: dict[str, int] = {}
        for (gid, tid, _), cq in self._queues.items():
            group = self.catalog.groups_by_id.get(gid)
            if tid in ids and cq.inflight and group is not None:
                busy[group.name] = busy.get(group.name, 0) + len(cq.inflight)
        if busy and not force:
            detail = ", ".join(f"{g} ({n})" for g, n in sorted(busy.items()))
            raise FailedPreconditionError(
                f"topic {name!r} has messages in flight for groups {detail}; wait until they "
                "are acked or redelivered, or delete with force"
            )
        await self.delete_topic(name)

    def describe_topic(self, name: str) -> tuple[TopicInfo, list[QueueDetails], list[str]]:
        """A topic, its queues (offsets, count, newest store time) and the groups that read it."""
        validation.check_name("topic", name, allow_dlq=True)
        info = self._topic(name)
        queues = []
        for queue_id in range(info.queues):
            low = self._min_offset(info.topic_id, queue_id)
            high = self._max_offset(info.topic_id, queue_id)
            last = self._store_time(info.topic_id, queue_id, high - 1) if high > low else 0
            queues.append(QueueDetails(queue_id, low, high, max(last, 0)))
        ids = self._topic_ids(info)
        groups = sorted(
            {
                self.catalog.groups_by_id[gid].name
                for (gid, tid, _) in self._queues
                if tid in ids and gid in self.catalog.groups_by_id
            }
        )
        return info, queues, groups

    async def purge(self, topic: str, queue_id: int | None = None) -> int:
        """Delete every stored message of one queue (or all queues); returns how many.

        Offsets stay: a group behind the purge point skips what was purged, exactly as after
        retention (counted in its retention_skipped). Messages sent meanwhile are kept.
        """
        validation.check_name("topic", topic, allow_dlq=True)
        info = self._topic(topic)
        if queue_id is not None and not 0 <= queue_id < info.queues:
            raise InvalidArgumentError(
                f"queue_id {queue_id} is outside 0..{info.queues - 1}: topic {topic!r} has "
                f"{info.queues} queues"
            )
        tid = info.topic_id
        queue_ids = [queue_id] if queue_id is not None else list(range(info.queues))
        cuts = [(q, self._min_offset(tid, q), self._max_offset(tid, q)) for q in queue_ids]
        cuts = [(q, low, high) for q, low, high in cuts if high > low]
        if not cuts:
            return 0

        def apply(batch: Batch, _: QueueOffsets) -> None:
            for q, low, high in cuts:
                batch.delete_range(
                    "messages", keys.message_key(tid, q, low), keys.message_key(tid, q, high)
                )

        await self.writer.submit(apply, sync=True)
        if tid in self.catalog.topics_by_id:
            for q, _, high in cuts:
                if self._min_offset(tid, q) < high:
                    self.offsets.set_min_offset(tid, q, high)
        purged = sum(high - low for _, low, high in cuts)
        log.info("purged %d messages of topic %s (queues %s)", purged, topic, queue_ids)
        return purged

    # Group settings beyond GroupRecord live in their own meta record (see
    # protos/popmq/store/v1/group_settings.proto).

    @staticmethod
    def _settings_key(group_id: int) -> bytes:
        return b"gsettings:" + keys.encode_u32(group_id)

    def group_settings(self, name: str) -> GroupSettings:
        """A group's FIFO flag, subscriptions, consume_from and backoff policy."""
        validation.check_name("group", name)
        return self._load_settings(self._group(name).group_id)

    def subscription_filter(self, group: str, topic: str) -> tuple[str, str] | None:
        """(filter_type, expression) the group declared for the topic, if any: the filter a
        pop that carries none of its own should apply."""
        info = self.catalog.groups.get(group)
        if info is None:
            return None
        sub = self._load_settings(info.group_id).subscription(topic)
        return (sub.filter_type, sub.expression) if sub is not None else None

    def _load_settings(self, group_id: int) -> GroupSettings:
        """Settings of a group, read once and then kept: every pop without its own filter
        asks for the subscription, so this stays off RocksDB on the hot path."""
        cached = self._settings_cache.get(group_id)
        if cached is None:
            cached = self._settings_cache[group_id] = self._read_settings(group_id)
        return cached

    def _read_settings(self, group_id: int) -> GroupSettings:
        data = self.store.get("meta", self._settings_key(group_id))
        if data is None:
            return GroupSettings()
        r = group_settings_pb2.GroupSettingsRecord.FromString(data)
        exp = r.exponential_backoff if r.HasField("exponential_backoff") else None
        return GroupSettings(
            fifo=r.fifo,
            subscriptions=tuple(
                Subscription(s.topic, s.filter_type or "tag", s.expression) for s in r.subscriptions
            ),
            consume_from=_CONSUME_FROM_NAMES.get(r.consume_from, "first"),
            consume_from_ms=r.consume_from_time_ms,
            exponential_backoff=(
                ExponentialBackoff(exp.initial_ms / 1000, exp.max_ms / 1000, exp.multiplier)
                if exp is not None
                else None
            ),
        )

    @staticmethod
    def _settings_record(settings: GroupSettings) -> bytes:
        record = group_settings_pb2.GroupSettingsRecord(
            fifo=settings.fifo,
            subscriptions=[
                group_settings_pb2.SubscriptionRecord(
                    topic=s.topic, filter_type=s.filter_type, expression=s.expression
                )
                for s in settings.subscriptions
            ],
            consume_from=_CONSUME_FROM_CODES[settings.consume_from],
            consume_from_time_ms=settings.consume_from_ms,
        )
        exp = settings.exponential_backoff
        if exp is not None:
            record.exponential_backoff.CopyFrom(
                group_settings_pb2.ExponentialBackoffRecord(
                    initial_ms=round(exp.initial_s * 1000),
                    max_ms=round(exp.max_s * 1000),
                    multiplier=exp.multiplier,
                )
            )
        return record.SerializeToString()

    def _backoff_delays(
        self, retry_backoff_s: Sequence[float] | None, exponential: ExponentialBackoff | None
    ) -> tuple[float, ...] | None:
        """The nack delay list from a list or an exponential policy; None when neither."""
        if retry_backoff_s and exponential is not None:
            raise InvalidArgumentError(
                "give either retry_backoff (a list) or exponential_backoff, not both"
            )
        if exponential is None:
            return tuple(retry_backoff_s) if retry_backoff_s else None
        top = self.config.pop.max_invisible_s
        validation.check_range("exponential_backoff.initial", exponential.initial_s, 1, top, "s")
        validation.check_range(
            "exponential_backoff.max", exponential.max_s, exponential.initial_s, top, "s"
        )
        validation.check_range("exponential_backoff.multiplier", exponential.multiplier, 1, 10)
        delays: list[float] = []
        delay = exponential.initial_s
        # The last entry repeats, so the list stops at the cap (RocketMQ: 32 exponents).
        while len(delays) < validation.MAX_BACKOFF_ENTRIES:
            delays.append(min(delay, exponential.max_s))
            if delay >= exponential.max_s or exponential.multiplier == 1:
                break
            delay *= exponential.multiplier
        return tuple(delays)

    def _check_backoff(self, backoff: Sequence[float]) -> None:
        if len(backoff) > validation.MAX_BACKOFF_ENTRIES:
            raise InvalidArgumentError(
                f"retry_backoff has {len(backoff)} entries: at most "
                f"{validation.MAX_BACKOFF_ENTRIES} are allowed"
            )
        for i, delay in enumerate(backoff):
            validation.check_range(
                f"retry_backoff[{i}]", delay, 1, self.config.pop.max_invisible_s, "s"
            )

    def _check_settings(self, settings: GroupSettings) -> GroupSettings:
        """Validate subscriptions and consume_from; returns them with subscriptions sorted."""
        seen: set[str] = set()
        for i, sub in enumerate(settings.subscriptions):
            validation.check_name(f"subscriptions[{i}].topic", sub.topic, allow_dlq=True)
            if sub.topic in seen:
                raise InvalidArgumentError(
                    f"topic {sub.topic!r} is subscribed twice: give each topic once"
                )
            seen.add(sub.topic)
            self._topic(sub.topic)
            parse_filter(sub.expression, sub.filter_type)
        if settings.consume_from not in _CONSUME_FROM_CODES:
            raise InvalidArgumentError(
                f"consume_from {settings.consume_from!r} is not one of "
                f"{', '.join(_CONSUME_FROM_CODES)}"
            )
        if settings.consume_from == "timestamp" and settings.consume_from_ms <= 0:
            raise InvalidArgumentError("consume_from timestamp needs consume_from_time")
        return dataclasses.replace(
            settings, subscriptions=tuple(sorted(settings.subscriptions, key=lambda s: s.topic))
        )

    def _consume_from_starts(
        self, group_id: int, settings: GroupSettings
    ) -> list[tuple[int, int, int]]:
        """(topic_id, queue_id, offset) where the group starts in every queue of its
        subscribed topics that it has never consumed (RocketMQ ConsumeFromWhere)."""
        starts: list[tuple[int, int, int]] = []
        for sub in settings.subscriptions:
            info = self._topic(sub.topic)
            at: dict[int, int] = {}
            if settings.consume_from == "timestamp":
                at = dict(self.offsets_at(sub.topic, settings.consume_from_ms))
            for queue_id in range(info.queues):
                if (group_id, info.topic_id, queue_id) in self._queues:
                    continue
                if settings.consume_from == "last":
                    offset = self._max_offset(info.topic_id, queue_id)
                elif settings.consume_from == "timestamp":
                    offset = at[queue_id]
                else:
                    offset = self._min_offset(info.topic_id, queue_id)
                starts.append((info.topic_id, queue_id, offset))
        return starts

    async def _write_group(
        self, info: GroupInfo, settings: GroupSettings, starts: list[tuple[int, int, int]]
    ) -> None:
        """Write the group record, its settings and its starting offsets in one batch."""
        record = self._settings_record(settings)

        def apply(batch: Batch, _: QueueOffsets) -> None:
            self.catalog.write_group(batch, info)
            batch.put("meta", self._settings_key(info.group_id), record)
            for topic_id, queue_id, offset in starts:
                batch.put(
                    "offsets",
                    keys.offset_key(info.group_id, topic_id, queue_id),
                    keys.encode_u64(offset),
                )

        await self.writer.submit(apply, sync=True)
        self._settings_cache[info.group_id] = settings

    def _place_queues(self, group_id: int, starts: list[tuple[int, int, int]]) -> None:
        for topic_id, queue_id, offset in starts:
            if (group_id, topic_id, queue_id) not in self._queues:
                self._new_queue(group_id, topic_id, queue_id, offset)

    async def create_group_with_settings(
        self,
        name: str,
        *,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
        settings: GroupSettings | None = None,
    ) -> GroupInfo:
        """Create a group with every admin setting, atomically; a group that exists only
        because it was used (auto-created) takes the settings."""
        validation.check_name("group", name)
        settings = self._check_settings(settings or GroupSettings())
        defaults = self.config.groups
        attempts = (
            defaults.max_delivery_attempts
            if max_delivery_attempts is None
            else max_delivery_attempts
        )
        validation.check_range(
            "max_delivery_attempts", attempts, 1, validation.MAX_DELIVERY_ATTEMPTS
        )
        backoff = (
            self._backoff_delays(retry_backoff_s, settings.exponential_backoff)
            or defaults.retry_backoff_s
        )
        self._check_backoff(backoff)
        existing = self.catalog.groups.get(name)
        if existing is not None and not existing.auto_created:
            raise AlreadyExistsError(f"group {name!r} already exists")
        info = self.catalog.new_group(
            name,
            max_delivery_attempts=attempts,
            retry_backoff_ms=tuple(round(d * 1000) for d in backoff),
            now_ms=existing.create_time_ms if existing else now_ms(),
            auto_created=False,
            group_id=existing.group_id if existing else None,
        )
        starts = self._consume_from_starts(info.group_id, settings)
        await self._write_group(info, settings, starts)
        current = self.catalog.groups.get(name)
        if current is not None and not current.auto_created:
            raise AlreadyExistsError(f"group {name!r} already exists")
        self.catalog.register_group(info)
        self._place_queues(info.group_id, starts)
        log.info(
            "group %s created: fifo=%s subscriptions=%s consume_from=%s",
            name,
            settings.fifo,
            [s.topic for s in settings.subscriptions],
            settings.consume_from,
        )
        return info

    async def update_group(
        self,
        name: str,
        *,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
        exponential_backoff: ExponentialBackoff | None = None,
        fifo: bool | None = None,
        set_subscriptions: Sequence[Subscription] = (),
        remove_subscriptions: Sequence[str] = (),
        consume_from: str | None = None,
        consume_from_ms: int = 0,
    ) -> GroupInfo:
        """Change a group's settings; None / empty arguments keep the current value.

        A newly subscribed topic starts where consume_from says; queues the group already
        consumed keep their offsets. Deliveries in flight keep their deadlines.
        """
        validation.check_name("group", name)
        current = self._group(name)
        old = self._load_settings(current.group_id)
        attempts = (
            current.max_delivery_attempts
            if max_delivery_attempts is None
            else max_delivery_attempts
        )
        validation.check_range(
            "max_delivery_attempts", attempts, 1, validation.MAX_DELIVERY_ATTEMPTS
        )
        backoff_ms = current.retry_backoff_ms
        exponential = old.exponential_backoff
        delays = self._backoff_delays(retry_backoff_s, exponential_backoff)
        if delays is not None:
            self._check_backoff(delays)
            backoff_ms = tuple(round(d * 1000) for d in delays)
            exponential = exponential_backoff
        subs = {s.topic: s for s in old.subscriptions}
        for topic in remove_subscriptions:
            if topic not in subs:
                raise InvalidArgumentError(
                    f"group {name!r} does not subscribe to topic {topic!r}; it subscribes to "
                    f"{', '.join(sorted(subs)) or 'nothing'}"
                )
            del subs[topic]
        for i, sub in enumerate(set_subscriptions):
            if any(s.topic == sub.topic for s in set_subscriptions[:i]):
                raise InvalidArgumentError(
                    f"topic {sub.topic!r} is subscribed twice: give each topic once"
                )
            subs[sub.topic] = sub
        settings = self._check_settings(
            GroupSettings(
                fifo=old.fifo if fifo is None else fifo,
                subscriptions=tuple(subs.values()),
                consume_from=old.consume_from if consume_from is None else consume_from,
                consume_from_ms=old.consume_from_ms if consume_from is None else consume_from_ms,
                exponential_backoff=exponential,
            )
        )
        info = self.catalog.new_group(
            name,
            max_delivery_attempts=attempts,
            retry_backoff_ms=backoff_ms,
            now_ms=current.create_time_ms,
            auto_created=False,
            group_id=current.group_id,
        )
        starts = self._consume_from_starts(info.group_id, settings)
        await self._write_group(info, settings, starts)
        if self.catalog.groups.get(name) is not current:
            raise FailedPreconditionError(f"group {name!r} changed while it was updated; retry")
        self.catalog.register_group(info)
        self._place_queues(info.group_id, starts)
        log.info("group %s updated", name)
        return info

    def _lock_queues(self, queues: Sequence[ConsumeQueue]) -> list[str]:
        """Try-lock queues an admin operation changes; refuse if another one holds any."""
        taken: list[str] = []
        for cq in queues:
            if not self.locks.try_acquire(cq.lock_key):
                for key in taken:
                    self.locks.release(key)
                raise FailedPreconditionError(
                    f"another admin operation is changing {cq.lock_key}; retry when it is done"
                )
            taken.append(cq.lock_key)
        return taken

    def _drop_checkpoints(self, cks: Sequence[Checkpoint]) -> None:
        """Forget checkpoints whose records a committed batch deleted."""
        for ck in cks:
            self._cks.pop(ck.ck_id, None)
            self._buffered.pop(ck.ck_id, None)
            self._dirty_cks.pop(ck.ck_id, None)

    async def delete_group(self, name: str, *, force: bool = False) -> None:
        """Delete a group, its offsets, settings, retry queues and in-flight state.

        Refused while the group has messages in flight unless forced. Its dead-letter topic
        stays: it is an ordinary topic, deleted on its own.
        """
        validation.check_name("group", name)
        info = self._group(name)
        gid = info.group_id
        queues = [cq for (g, _, _), cq in self._queues.items() if g == gid]
        inflight = sum(len(cq.inflight) for cq in queues)
        if inflight and not force:
            raise FailedPreconditionError(
                f"group {name!r} has {inflight} messages in flight; wait until they are "
                "acked or redelivered, or delete with force"
            )
        retries = {k: t for k, t in self.catalog.retry_topics.items() if k[0] == gid}
        cks = [ck for ck in self._cks.values() if ck.queue.group_id == gid]
        locked = self._lock_queues(queues)
        try:

            def apply(batch: Batch, _: QueueOffsets) -> None:
                batch.delete("meta", keys.group_meta_key(name))
                batch.delete("meta", self._settings_key(gid))
                for (g, tid), retry in retries.items():
                    batch.delete("meta", keys.retry_meta_key(g, tid))
                    start, end = keys.topic_range(retry.topic_id)
                    batch.delete_range("messages", start, end)
                batch.delete_range(
                    "offsets", keys.offset_key(gid, 0, 0), keys.offset_key(gid + 1, 0, 0)
                )
                for ck in cks:
                    if ck.persisted:
                        batch.delete("checkpoints", keys.checkpoint_key(ck.ck_id))
                        batch.delete("revive", keys.revive_key(ck.deadline_ms, ck.ck_id))

            await self.writer.submit(apply, sync=True)
        finally:
            for lock_key in locked:
                self.locks.release(lock_key)
        if self.catalog.groups.get(name) is info:
            del self.catalog.groups[name]
            self._settings_cache.pop(gid, None)
        self.catalog.groups_by_id.pop(gid, None)
        for retry_key, retry in retries.items():
            self.catalog.retry_topics.pop(retry_key, None)
            self.catalog.topics_by_id.pop(retry.topic_id, None)
            self.offsets.forget_topic(retry.topic_id)
        topics = {cq.topic for cq in queues}
        for queue_key in [k for k in self._queues if k[0] == gid]:
            del self._queues[queue_key]
            self._dirty_queues.pop(queue_key, None)
        self._drop_checkpoints([ck for ck in self._cks.values() if ck.queue.group_id == gid])
        for count_key in [k for k in self._pop_count if k[0] == gid]:
            del self._pop_count[count_key]
        for topic in topics:
            # Held pops of the group look again and find it gone.
            self.polling.notify(topic, self.config.long_polling.max_per_key, group=name)
        log.info("deleted group %s (%d in-flight messages dropped)", name, inflight)

    def lag_report(self, group: str, topic: str = "") -> LagReport:
        """Lag per queue with the age of the oldest unacked message, per-topic sums (with
        the retry backlog) and the depth of the group's dead-letter topic."""
        rows = self.group_lag(group, topic)
        info = self._group(group)
        gid = info.group_id
        backlog: list[QueueBacklog] = []
        for row in rows:
            user = self.catalog.topics[row.topic]
            source = (
                self.catalog.retry_topics.get((gid, user.topic_id)) if row.retry else user
            ) or user
            cq = self._queues.get((gid, source.topic_id, row.queue_id))
            candidates = [min(cq.inflight)] if cq is not None and cq.inflight else []
            low = self._min_offset(source.topic_id, row.queue_id)
            if row.consumer_offset < row.max_offset:
                candidates.append(max(row.consumer_offset, low))
            oldest = 0
            if candidates:
                oldest = max(0, self._store_time(source.topic_id, row.queue_id, min(candidates)))
            backlog.append(QueueBacklog(row, oldest))
        topics: list[TopicBacklog] = []
        for name in sorted({row.topic for row in rows}):
            mine = [b for b in backlog if b.lag.topic == name]
            ages = [b.oldest_unacked_ms for b in mine if b.oldest_unacked_ms]
            topics.append(
                TopicBacklog(
                    topic=name,
                    lag=sum(b.lag.lag for b in mine if not b.lag.retry),
                    inflight=sum(b.lag.inflight for b in mine),
                    retry_backlog=sum(b.lag.lag for b in mine if b.lag.retry),
                    oldest_unacked_ms=min(ages) if ages else 0,
                )
            )
        dlq = self.catalog.topics.get(dlq_topic_name(group))
        depth = 0
        if dlq is not None:
            depth = self._max_offset(dlq.topic_id, 0) - self._min_offset(dlq.topic_id, 0)
        return LagReport(group, backlog, topics, depth)

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
        """Move a group's consumer offsets in a topic's queues (its retry queue is untouched).

        target: "earliest", "latest", "timestamp" (first message stored at or after
        timestamp_ms) or "offsets" (explicit, per queue id). Refused while the group has
        messages of the topic in flight, unless forced: then those deliveries are dropped and
        their receipt handles are refused from then on.
        """
        validation.check_name("group", group)
        validation.check_name("topic", topic, allow_dlq=True)
        group_info = self._group(group)
        info = self._topic(topic)
        tid = info.topic_id
        bounds = {
            q: (self._min_offset(tid, q), self._max_offset(tid, q)) for q in range(info.queues)
        }
        if target == "earliest":
            new = {q: low for q, (low, _) in bounds.items()}
        elif target == "latest":
            new = {q: high for q, (_, high) in bounds.items()}
        elif target == "timestamp":
            if timestamp_ms <= 0:
                raise InvalidArgumentError("a reset to a timestamp needs the timestamp")
            new = dict(self.offsets_at(topic, timestamp_ms))
        elif target == "offsets":
            if not offsets:
                raise InvalidArgumentError("a reset to explicit offsets needs at least one")
            new = {}
            for q, offset in sorted(offsets.items()):
                if q not in bounds:
                    raise InvalidArgumentError(
                        f"queue_id {q} is outside 0..{info.queues - 1}: topic {topic!r} has "
                        f"{info.queues} queues"
                    )
                low, high = bounds[q]
                if not low <= offset <= high:
                    raise InvalidArgumentError(
                        f"offset {offset} of queue {q} is outside {low}..{high} (the "
                        "queue's min and max offsets)"
                    )
                new[q] = offset
        else:
            raise InvalidArgumentError(
                f"reset target {target!r} is not one of earliest, latest, timestamp, offsets"
            )
        queues = {q: self._queue(group_info, info, q) for q in new}
        retry = self.catalog.retry_topics.get((group_info.group_id, tid))
        retry_cq = self._queues.get((group_info.group_id, retry.topic_id, 0)) if retry else None
        held = sum(len(cq.inflight) for cq in queues.values())
        held += len(retry_cq.inflight) if retry_cq is not None else 0
        if held and not force:
            raise FailedPreconditionError(
                f"group {group!r} has {held} messages of topic {topic!r} in flight; wait until "
                "they are acked or redelivered, or reset with force (their receipt handles "
                "then stop working)"
            )
        owned = {id(cq) for cq in queues.values()}
        cks = [ck for ck in self._cks.values() if id(ck.queue) in owned]
        dropped = [(ck, index) for ck in cks for index in ck.unresolved()]
        old = {q: cq.committed for q, cq in queues.items()}
        gid = group_info.group_id
        locked = self._lock_queues(list(queues.values()))
        try:

            def apply(batch: Batch, _: QueueOffsets) -> None:
                for q, offset in new.items():
                    batch.put("offsets", keys.offset_key(gid, tid, q), keys.encode_u64(offset))
                for ck in cks:
                    if ck.persisted:
                        batch.delete("checkpoints", keys.checkpoint_key(ck.ck_id))
                        batch.delete("revive", keys.revive_key(ck.deadline_ms, ck.ck_id))
                for ck, index in dropped:
                    # Refused until its old deadline, across restarts, like a superseded one.
                    batch.put(
                        "meta",
                        keys.superseded_key(ck.ck_id, index),
                        keys.encode_u64(ck.deadline_ms),
                    )

            await self.writer.submit(apply, sync=True)
            self._drop_checkpoints(cks)
            for ck, index in dropped:
                self._superseded[(ck.ck_id, index)] = ck.deadline_ms
                heapq.heappush(self._superseded_expiry, (ck.deadline_ms, ck.ck_id, index))
            for q, cq in queues.items():
                cq.chain.clear()
                cq.inflight.clear()
                cq.recovered.clear()
                cq.fifo.clear()
                cq.fifo_ready.clear()
                cq.fifo_held = 0
                cq.committed = cq.pop_offset = new[q]
                self._dirty_queues[(gid, tid, q)] = cq
            self.writer.request_flush()
        finally:
            for lock_key in locked:
                self.locks.release(lock_key)
        self.polling.notify(topic, self.config.long_polling.max_per_key, group=group)
        log.info(
            "reset group %s on topic %s to %s (%d in-flight dropped)",
            group,
            topic,
            target,
            len(dropped),
        )
        return ResetResult(
            [OffsetChange(q, old[q], new[q]) for q in sorted(new)], dropped_inflight=len(dropped)
        )

    def peek(
        self,
        topic: str,
        *,
        queue_id: int | None = None,
        offset: int | None = None,
        group: str = "",
        max_messages: int = 16,
    ) -> list[PeekedMessage]:
        """Read stored messages without consuming them: no checkpoint, no offset change.

        Starts at `offset` (one queue only), else at the group's consumer offset when a
        group is given, else at each queue's min offset.
        """
        validation.check_name("topic", topic, allow_dlq=True)
        validation.check_range("max_messages", max_messages, 1, _PEEK_MAX)
        info = self._topic(topic)
        group_info = None
        if group:
            validation.check_name("group", group)
            group_info = self._group(group)
        if queue_id is not None and not 0 <= queue_id < info.queues:
            raise InvalidArgumentError(
                f"queue_id {queue_id} is outside 0..{info.queues - 1}: topic {topic!r} has "
                f"{info.queues} queues"
            )
        if offset is not None and queue_id is None:
            raise InvalidArgumentError("an offset needs a queue_id: offsets are per queue")
        tid = info.topic_id
        found: list[PeekedMessage] = []
        response = ResponseBudget()
        for q in [queue_id] if queue_id is not None else range(info.queues):
            low, high = self._min_offset(tid, q), self._max_offset(tid, q)
            start = low
            if offset is not None:
                if not 0 <= offset <= high:
                    raise InvalidArgumentError(
                        f"offset {offset} is outside 0..{high} (queue {q}'s max offset)"
                    )
                start = max(offset, low)
            elif group_info is not None:
                cq = self._queues.get((group_info.group_id, tid, q))
                start = max(cq.committed, low) if cq is not None else low
            end = min(high, start + max_messages - len(found))
            while start < end:
                chunk_end = start + response.reads(end - start)
                values = self.store.multi_get(
                    "messages", [keys.message_key(tid, q, o) for o in range(start, chunk_end)]
                )
                for at, value in zip(range(start, chunk_end), values, strict=True):
                    if value is None:
                        continue
                    response.saw(len(value))
                    if not response.take(len(value)):
                        return found  # the answer is full (budget.py)
                    record = records_pb2.StoredMessage.FromString(value)
                    found.append(PeekedMessage(info.name, q, at, record))
                start = chunk_end
            if len(found) >= max_messages:
                break
        return found

    async def redrive(self, group: str, *, max_messages: int | None = None) -> RedriveResult:
        """Move messages of `%DLQ%<group>` back to the topics they were first sent to (SQS
        redrive), oldest first, as new messages with delivery_attempt 1.

        Each chunk is one atomic batch: the copies and the removal from the dead-letter
        topic, so a crash neither loses nor duplicates a message. A message whose topic was
        deleted is removed and counted as dropped (its topic's messages are gone too).
        """
        validation.check_name("group", group)
        if max_messages is not None:
            validation.check_range("max_messages", max_messages, 1, _REDRIVE_MAX)
        dlq = self.catalog.topics.get(dlq_topic_name(group))
        if dlq is None:
            self._group(group)  # NOT_FOUND for an unknown group
            return RedriveResult(0, 0, 0)
        tid = dlq.topic_id
        lock = f"{dlq.name}@redrive"
        if not self.locks.try_acquire(lock):
            raise FailedPreconditionError(f"a redrive of {dlq.name} is already running")
        moved = dropped = 0
        retention_ms = round(self.config.retention.retention_s * 1000)
        try:
            position = self._min_offset(tid, 0)
            limit = self._max_offset(tid, 0)
            if max_messages is not None:
                limit = min(limit, position + max_messages)
            while position < limit and tid in self.catalog.topics_by_id:
                end = min(limit, position + _REDRIVE_CHUNK)
                values = self.store.multi_get(
                    "messages", [keys.message_key(tid, 0, o) for o in range(position, end)]
                )
                stamp = now_ms()
                copies: list[tuple[TopicInfo, int, records_pb2.StoredMessage]] = []
                for value in values:
                    if value is None:
                        continue
                    record = records_pb2.StoredMessage.FromString(value)
                    target = self.catalog.topics.get(record.origin_topic)
                    if target is None or target.kind != KIND_NORMAL:
                        dropped += 1
                        continue
                    queue_id = record.origin_queue_id
                    if not 0 <= queue_id < target.queues:
                        queue_id = self._send_rr.get(target.topic_id, 0) % target.queues
                        self._send_rr[target.topic_id] = queue_id + 1
                    record.delivery_attempt = 1
                    record.store_time_ms = stamp
                    record.deliver_at_ms = 0
                    record.ClearField("origin_topic")
                    record.ClearField("origin_queue_id")
                    record.ClearField("origin_offset")
                    copies.append((target, queue_id, record))
                start_key = keys.message_key(tid, 0, position)
                end_key = keys.message_key(tid, 0, end)

                def apply(
                    batch: Batch,
                    offsets: QueueOffsets,
                    copies: list[tuple[TopicInfo, int, records_pb2.StoredMessage]] = copies,
                    start_key: bytes = start_key,
                    end_key: bytes = end_key,
                    stamp: int = stamp,
                ) -> None:
                    for target, queue_id, record in copies:
                        # Query by id and key finds the live copy, not only the dead letter.
                        _store_indexed(
                            batch, offsets, target.topic_id, queue_id, record, stamp, retention_ms
                        )
                    batch.delete_range("messages", start_key, end_key)

                await self.writer.submit(apply, sync=self.config.store.flush == "sync")
                if tid in self.catalog.topics_by_id and self._min_offset(tid, 0) < end:
                    self.offsets.set_min_offset(tid, 0, end)
                moved += len(copies)
                counts: dict[str, int] = {}
                for target, _, _ in copies:
                    counts[target.name] = counts.get(target.name, 0) + 1
                for name, count in counts.items():
                    self.polling.notify(name, count)
                position = end
        finally:
            self.locks.release(lock)
        remaining = 0
        if tid in self.catalog.topics_by_id:
            remaining = self._max_offset(tid, 0) - self._min_offset(tid, 0)
        log.info(
            "redrove %s: %d moved, %d dropped (topic gone), %d remaining",
            dlq.name,
            moved,
            dropped,
            remaining,
        )
        return RedriveResult(moved, dropped, remaining)

    # -- revive ---------------------------------------------------------------------------

    async def _revive_loop(self) -> None:
        while True:
            now = now_ms()
            expiry = self._superseded_expiry
            expired: list[bytes] = []
            while expiry and expiry[0][0] <= now:
                _, ck_id, index = heapq.heappop(expiry)
                self._superseded.pop((ck_id, index), None)
                expired.append(keys.superseded_key(ck_id, index))
            if expired:
                self.writer.submit(_delete_meta(expired), sync=False).add_done_callback(
                    _ignore_result
                )
            due: list[Checkpoint] = []
            pending = 0
            while self._revive_heap and self._revive_heap[0][0] <= now and pending < _REVIVE_CHUNK:
                deadline, ck_id = heapq.heappop(self._revive_heap)
                ck = self._cks.get(ck_id)
                if ck is None or ck.deadline_ms != deadline or ck.done:
                    continue
                due.append(ck)
                pending += len(ck.offsets)
            if due:
                try:
                    await self._revive(due)
                except PopMQError as exc:
                    self._revive_warning.warn("revive of checkpoints failed, retrying: %s", exc)
                    for ck in due:
                        ck.deadline_ms += _REVIVE_RETRY_MS
                        heapq.heappush(self._revive_heap, (ck.deadline_ms, ck.ck_id))
                continue
            timeout = 1.0
            if self._revive_heap:
                timeout = min(timeout, max(0.0, (self._revive_heap[0][0] - now) / 1000))
            await self._revive_wakeup.wait(timeout)

    async def _revive(self, due: list[Checkpoint]) -> None:
        """Copy every unresolved message of the due checkpoints to its retry queue (or DLQ)."""
        plan: list[tuple[Checkpoint, list[tuple[int, TopicInfo, bytes]]]] = []
        notify: list[tuple[str, str | None]] = []
        stamp = now_ms()
        stored = self._revived_records(due)
        for ck in due:
            cq = ck.queue
            group = self.catalog.groups_by_id.get(cq.group_id)
            source = self.catalog.topics_by_id.get(cq.topic_id)
            if group is None or source is None:
                self._cks.pop(ck.ck_id, None)
                continue
            user_topic = (
                self.catalog.topics.get(source.owner_topic) if source.kind == KIND_RETRY else source
            )
            if ck.fifo_group:
                fifo_moves = await self._revive_fifo(ck, group, source, user_topic, stamp, notify)
                if fifo_moves:
                    plan.append((ck, fifo_moves))
                continue
            moves: list[tuple[int, TopicInfo, bytes]] = []
            for index in ck.unresolved():
                offset = ck.offsets[index]
                owner = cq.inflight.get(offset)
                if owner is not ck:
                    if owner is not None and owner.ck_id not in self._cks:
                        continue  # being moved by ChangeInvisibleTime right now
                    # Another live checkpoint owns the message (or nobody does): this entry
                    # is stale and must neither redeliver it nor linger in the store.
                    moves.append((index, source, b""))
                    continue
                data = stored.get((cq.topic_id, cq.queue_id, offset))
                if data is None or user_topic is None:
                    moves.append((index, source, b""))  # deleted meanwhile: nothing to redeliver
                    continue
                copy = _redelivery_copy(data, source.name, cq.queue_id, offset, stamp)
                record_attempt = copy.delivery_attempt
                counted = (group.name, user_topic.name)
                if record_attempt >= group.max_delivery_attempts:
                    target = await self._ensure_dlq(group)
                    copy.delivery_attempt = 1
                    notify.append((target.name, None))
                    self.stats.dead_lettered[counted] += 1
                else:
                    self.stats.revived[counted] += 1
                    target = await self._ensure_retry_topic(group, user_topic)
                    copy.delivery_attempt = record_attempt + 1
                    notify.append((user_topic.name, group.name))
                moves.append((index, target, copy.SerializeToString()))
            plan.append((ck, moves))

        def apply(batch: Batch, offsets: QueueOffsets) -> None:
            for ck, moves in plan:
                for _, target, data in moves:
                    if data:
                        offset = offsets.allocate(target.topic_id, 0)
                        batch.put("messages", keys.message_key(target.topic_id, 0, offset), data)
                if ck.persisted and len(moves) == len(ck.unresolved()):
                    batch.delete("checkpoints", keys.checkpoint_key(ck.ck_id))
                    batch.delete("revive", keys.revive_key(ck.deadline_ms, ck.ck_id))
                    self._dirty_cks.pop(ck.ck_id, None)

        await self.writer.submit(apply, sync=False)
        for ck, moves in plan:
            for index, _, _ in moves:
                ck.resolved |= 1 << index
                ck.revived |= 1 << index
                ck.queue.release(ck, index)
            if ck.done:
                self._cks.pop(ck.ck_id, None)
                self._buffered.pop(ck.ck_id, None)
                if ck.chained:
                    self._advance(ck.queue)
                elif ck.fifo_group and ck.queue.fifo_remove(ck):
                    user_topic_name = self._user_topic_name(ck.queue.topic_id)
                    notify.append((user_topic_name, ck.queue.group))
            else:
                self._finish(ck)
        for (topic_name, group_name), count in Counter(notify).items():
            self.polling.notify(topic_name, count, group=group_name)

    def _revived_records(self, due: list[Checkpoint]) -> dict[tuple[int, int, int], bytes]:
        """The stored messages the due (non-FIFO) checkpoints still own, read in one multi-get.

        Keyed by (topic id, queue id, offset); a message deleted meanwhile is absent.
        """
        wanted: list[tuple[int, int, int]] = []
        for ck in due:
            cq = ck.queue
            if ck.fifo_group:
                continue
            for index in ck.unresolved():
                offset = ck.offsets[index]
                if cq.inflight.get(offset) is ck:
                    wanted.append((cq.topic_id, cq.queue_id, offset))
        if not wanted:
            return {}
        values = self.store.multi_get("messages", [keys.message_key(*at) for at in wanted])
        return {at: value for at, value in zip(wanted, values, strict=True) if value is not None}

    async def _revive_fifo(
        self,
        ck: Checkpoint,
        group: GroupInfo,
        source: TopicInfo,
        user_topic: TopicInfo | None,
        stamp: int,
        notify: list[tuple[str, str | None]],
    ) -> list[tuple[int, TopicInfo, bytes]]:
        """A FIFO checkpoint is due: redeliver in place, re-arm a held one, or dead-letter.

        Returns the dead-letter move for the revive batch (the checkpoint is resolved only
        after that batch commits); in-place changes are memory plus the next flush.
        """
        cq = ck.queue
        offset = ck.offsets[0]
        if ck.done:
            return []
        owner = cq.inflight.get(offset)
        if owner is not ck:
            if owner is not None and owner.ck_id not in self._cks:
                return []  # being moved by ChangeInvisibleTime right now
            self._fifo_finish(ck, acked=False)  # stale: another checkpoint owns it
            return []
        if not ck.held and ck.attempt >= group.max_delivery_attempts:
            data = self.store.get("messages", keys.message_key(cq.topic_id, cq.queue_id, offset))
            if data is None:
                self._fifo_finish(ck, acked=False)
                return []
            copy = _redelivery_copy(data, source.name, cq.queue_id, offset, stamp)
            copy.delivery_attempt = 1
            target = await self._ensure_dlq(group)
            notify.append((target.name, None))
            self.stats.dead_lettered[(group.name, user_topic.name if user_topic else "")] += 1
            return [(0, target, copy.SerializeToString())]
        if ck.held:  # only the hold timer ran out: hold again, same attempt
            attempt, not_before = ck.attempt, ck.not_before_ms
        else:  # invisible time passed unacked: redeliver in place, next attempt
            attempt, not_before = ck.attempt + 1, stamp
            self.stats.revived[(group.name, user_topic.name if user_topic else "")] += 1
        new = self._fifo_ck(
            cq, offset, group=ck.fifo_group, attempt=attempt, held=True, now=stamp,
            deadline=0, not_before=not_before,
        )  # fmt: skip
        cq.inflight[offset] = new
        cq.fifo_replace(ck, new)
        ck.resolved = ck.full
        ck.revived = ck.full
        self._finish(ck)
        if user_topic is not None and cq.fifo.get(ck.fifo_group, [None])[0] is new:
            notify.append((user_topic.name, group.name))
        return []

    # -- checkpoint buffer ----------------------------------------------------------------

    async def _buffer_loop(self) -> None:
        while True:
            now = now_ms()
            due = 0
            while self._buffer_heap and (
                self._buffer_heap[0][0] <= now
                or len(self._buffered) > self.config.pop.ck_buffer_max
            ):
                _, ck_id = heapq.heappop(self._buffer_heap)
                ck = self._buffered.get(ck_id)
                if ck is not None:
                    self._mark_persisted(ck)
                    due += 1
            timeout = 1.0
            if self._buffer_heap:
                timeout = min(timeout, max(0.0, (self._buffer_heap[0][0] - now) / 1000))
            await self._buffer_wakeup.wait(timeout)

    # -- retention ------------------------------------------------------------------------

    async def _retention_loop(self) -> None:
        interval = self.config.retention.check_interval_s
        while True:
            await asyncio.sleep(interval)
            try:
                await self.apply_retention()
                await self.apply_size_limit()
                await self.sweep_index()
            except PopMQError as exc:
                log.warning("retention pass failed, will retry: %s", exc)

    async def apply_retention(self, now: int | None = None) -> int:
        """Delete messages stored before now - retention_s, one range per queue.

        Returns the number of messages deleted. Each queue costs one binary search of point
        reads and one delete_range, whatever the number of messages removed, so a pass never
        holds the loop for long and sends wait at most one small write.
        """
        cutoff = (now if now is not None else now_ms()) - round(
            self.config.retention.retention_s * 1000
        )
        deleted = 0
        for topic in list(self.catalog.topics_by_id.values()):
            for queue_id in range(topic.queues):
                cut = self._retention_cut(topic.topic_id, queue_id, cutoff)
                if cut is None:
                    continue
                deleted += await self._delete_head(topic, queue_id, cut, "retention_s")
        return deleted

    async def _delete_head(self, topic: TopicInfo, queue_id: int, cut: int, why: str) -> int:
        """Delete [min offset, cut) of one queue with one range tombstone; returns the count."""
        low = self._min_offset(topic.topic_id, queue_id)
        if cut <= low:
            return 0
        start_key = keys.message_key(topic.topic_id, queue_id, low)
        end_key = keys.message_key(topic.topic_id, queue_id, cut)
        await self.writer.submit(_delete_range(start_key, end_key), sync=False)
        if self.catalog.topics_by_id.get(topic.topic_id) is topic:
            self.offsets.set_min_offset(topic.topic_id, queue_id, cut)
        log.info("%s: deleted %s queue %d offsets [%d, %d)", why, topic.name, queue_id, low, cut)
        return cut - low

    def stored_bytes_estimate(self) -> int:
        """Bytes of stored messages, estimated per queue as count x sampled record size.

        RocksDB's own size figures lag deletes until compaction reclaims the space, so
        max_disk_bytes is enforced on this estimate of the live data instead.
        """
        return sum(count * size for _, _, count, size in self._queue_sizes())

    def _queue_sizes(self) -> list[tuple[TopicInfo, int, int, int]]:
        """(topic, queue, message count, mean record bytes from head and tail samples)."""
        sizes = []
        for topic in list(self.catalog.topics_by_id.values()):
            for queue_id in range(topic.queues):
                low = self._min_offset(topic.topic_id, queue_id)
                high = self._max_offset(topic.topic_id, queue_id)
                if low >= high:
                    continue
                samples = self.store.multi_get(
                    "messages",
                    [keys.message_key(topic.topic_id, queue_id, o) for o in {low, high - 1}],
                )
                lengths = [len(v) for v in samples if v is not None]
                size = (sum(lengths) // len(lengths) if lengths else 0) + _KEY_OVERHEAD
                sizes.append((topic, queue_id, high - low, size))
        return sizes

    async def apply_size_limit(self) -> int:
        """When stored messages exceed retention.max_disk_bytes, delete the oldest first.

        Oldest across all queues: the queue whose head is oldest loses its messages up to the
        next-oldest head (or what the excess needs), and so on. Returns messages deleted.
        """
        limit = self.config.retention.max_disk_bytes
        if not limit:
            return 0
        sizes = self._queue_sizes()
        excess = sum(count * size for _, _, count, size in sizes) - limit
        if excess <= 0:
            return 0
        heads: list[tuple[int, int, int, TopicInfo, int]] = []
        for topic, queue_id, _, size in sizes:
            low = self._min_offset(topic.topic_id, queue_id)
            born = self._store_time(topic.topic_id, queue_id, low)
            heads.append((born, topic.topic_id, queue_id, topic, size))
        heapq.heapify(heads)
        deleted = 0
        while excess > 0 and heads:
            _, _, queue_id, topic, size = heapq.heappop(heads)
            low = self._min_offset(topic.topic_id, queue_id)
            high = self._max_offset(topic.topic_id, queue_id)
            cut = min(high, low + max(1, -(-excess // size)))
            if heads:  # stop at the next-oldest head so deletion stays oldest first
                by_time = self._retention_cut(topic.topic_id, queue_id, heads[0][0] + 1)
                cut = min(cut, by_time if by_time is not None else low + 1)
            cut = max(cut, low + 1)
            removed = await self._delete_head(topic, queue_id, cut, "max_disk_bytes")
            deleted += removed
            excess -= removed * size
            if cut < high:
                born = self._store_time(topic.topic_id, queue_id, cut)
                heapq.heappush(heads, (born, topic.topic_id, queue_id, topic, size))
        return deleted

    def _retention_cut(self, topic_id: int, queue_id: int, cutoff_ms: int) -> int | None:
        """First offset stored at or after cutoff_ms, when something below it can go."""
        low = self._min_offset(topic_id, queue_id)
        high = self._max_offset(topic_id, queue_id)
        if low >= high or self._store_time(topic_id, queue_id, low) >= cutoff_ms:
            return None
        # Store times grow with offsets within a queue: binary search the first one to keep.
        lo, hi = low + 1, high
        while lo < hi:
            mid = (lo + hi) // 2
            if self._store_time(topic_id, queue_id, mid) < cutoff_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _store_time(self, topic_id: int, queue_id: int, offset: int) -> int:
        data = self.store.get("messages", keys.message_key(topic_id, queue_id, offset))
        if data is None:
            return -1  # already gone: treat as old
        return records_pb2.StoredMessage.FromString(data).store_time_ms

    # -- lag ------------------------------------------------------------------------------

    def group_lag(self, group: str, topic: str = "") -> list[QueueLag]:
        validation.check_name("group", group)
        group_info = self._group(group)
        if topic:
            validation.check_name("topic", topic, allow_dlq=True)
            topics = [self._topic(topic)]
        else:
            ids = {tid for (gid, tid, _) in self._queues if gid == group_info.group_id}
            topics = sorted(
                (t for t in self.catalog.topics.values() if t.topic_id in ids),
                key=lambda t: t.name,
            )
        rows: list[QueueLag] = []
        for info in topics:
            for queue_id in range(info.queues):
                rows.append(self._lag_row(group_info, info, info, queue_id, retry=False))
            retry = self.catalog.retry_topics.get((group_info.group_id, info.topic_id))
            if retry is not None:
                rows.append(self._lag_row(group_info, retry, info, 0, retry=True))
        return rows

    def _lag_row(
        self, group: GroupInfo, source: TopicInfo, user: TopicInfo, queue_id: int, *, retry: bool
    ) -> QueueLag:
        cq = self._queues.get((group.group_id, source.topic_id, queue_id))
        max_offset = self._max_offset(source.topic_id, queue_id)
        oldest = self._min_offset(source.topic_id, queue_id)
        committed = cq.committed if cq else oldest
        inflight = len(cq.inflight) if cq else 0
        skipped = (cq.retention_skipped if cq else 0) + max(0, oldest - committed)
        return QueueLag(user.name, queue_id, retry, committed, max_offset, inflight, skipped)

    # -- introspection for tests and metrics ---------------------------------------------

    @property
    def buffered_checkpoints(self) -> int:
        return len(self._buffered)

    @property
    def live_checkpoints(self) -> int:
        return len(self._cks)

    def consume_queue(self, group: str, topic: str, queue_id: int) -> ConsumeQueue | None:
        g = self.catalog.groups.get(group)
        t = self.catalog.topics.get(topic)
        return self._queue_for(g.group_id, t.topic_id, queue_id) if g and t else None


def _delete_meta(meta_keys: list[bytes]) -> Callable[[Batch, QueueOffsets], None]:
    def apply(batch: Batch, offsets: QueueOffsets) -> None:
        for key in meta_keys:
            batch.delete("meta", key)

    return apply


def _store_indexed(
    batch: Batch,
    offsets: QueueOffsets,
    topic_id: int,
    queue_id: int,
    record: records_pb2.StoredMessage,
    stamp_ms: int,
    retention_ms: int,
) -> int:
    """Store a message that was sent before (a due timer, a redriven dead letter) at the end
    of a queue, with its id and key index entries; its dedup entry from the send stays as it
    is. Returns its offset."""
    offset = offsets.allocate(topic_id, queue_id)
    batch.put("messages", keys.message_key(topic_id, queue_id, offset), record.SerializeToString())
    expiries = message_index.Expiries()
    message_index.write_entries(
        batch,
        expiries,
        topic_id=topic_id,
        queue_id=queue_id,
        offset=offset,
        message_id=record.message_id,
        dedup_id="",
        message_keys=record.keys,
        stamp_ms=stamp_ms,
        retention_ms=retention_ms,
        dedup_window_ms=0,
    )
    expiries.put(batch)
    return offset


def _ignore_result(future: asyncio.Future[Any]) -> None:
    """Housekeeping writes may fail (disk full); they are redone by the next recovery."""
    if not future.cancelled():
        future.exception()


def _delete_range(start: bytes, end: bytes) -> Callable[[Batch, QueueOffsets], None]:
    def apply(batch: Batch, offsets: QueueOffsets) -> None:
        batch.delete_range("messages", start, end)

    return apply


_TIMER_CONTEXT = contextvars.Context()
"""The context of held pops' timers: _resolve reads no context variable, so they share one
instead of each copying the current context (a held pop's memory, see docs/pop-stream.md)."""


def _resolve(future: asyncio.Future[None]) -> None:
    """A held pop's timer fired: it pops again, and returns if its wait is over."""
    if not future.done():
        future.set_result(None)


def _superseded() -> ReceiptHandleSupersededError:
    return ReceiptHandleSupersededError(
        "receipt handle was superseded by ChangeInvisibleTime or Nack; use the newest handle"
    )


def _lost() -> ReceiptHandleLostError:
    return ReceiptHandleLostError(
        "this delivery is no longer tracked (the server restarted before recording it); the "
        "message is delivered again with a new handle"
    )


def _expired(ago_ms: int) -> ReceiptHandleExpiredError:
    return ReceiptHandleExpiredError(
        f"receipt handle expired {ago_ms / 1000:.3f}s ago (its invisible time passed); the "
        "message is delivered again with a new handle"
    )


def _noop(batch: Batch, offsets: QueueOffsets) -> None:
    """A job that only waits for the flush (the flush hook writes the state)."""


@dataclass(slots=True)
class _Planned:
    """One message of a send that will be stored (not a duplicate)."""

    index: int
    topic: TopicInfo
    queue_id: int
    record: records_pb2.StoredMessage
    dedup_id: str
    timer_seq: int
    """Non-zero for a delayed message: its timers-family sequence."""


def _stored_record(msg: NewMessage, message_id: str, stamp_ms: int) -> records_pb2.StoredMessage:
    """The record a sent message is stored as.

    Empty fields are left out of the constructor: upb converts every keyword it is given, and
    the empty ones cost 4x the rest (7.3 vs 1.9 us for a plain 1 KiB message).
    """
    record = records_pb2.StoredMessage(
        message_id=message_id,
        body=msg.body,
        born_time_ms=msg.born_time_ms or stamp_ms,
        store_time_ms=stamp_ms,
        delivery_attempt=1,
    )
    if msg.tag:
        record.tag = msg.tag
    if msg.keys:
        record.keys.extend(msg.keys)
    if msg.properties:
        record.properties.update(msg.properties)
    if msg.message_group:
        record.message_group = msg.message_group
    if msg.deliver_at_ms:
        record.deliver_at_ms = msg.deliver_at_ms
    if msg.body_encoding:
        record.body_encoding = msg.body_encoding
    if msg.dedup_id:
        record.dedup_id = msg.dedup_id
    if msg.born_host:
        record.born_host = msg.born_host
    return record


def _message_type(msg: NewMessage) -> str:
    """RocketMQ's rule: a message group makes it FIFO, a delivery time makes it DELAY."""
    if msg.message_group:
        return "fifo"
    if msg.deliver_at_ms:
        return "delay"
    return "normal"


def _sweep(
    store: Store,
    markers: list[tuple[bytes, list[bytes]]],
    now: int,
    ttl: dict[bytes, int],
    batch: Batch,
    _: QueueOffsets,
) -> None:
    message_index.sweep_batch(store, batch, markers, now, ttl)


def _redelivery_copy(
    data: bytes, source: str, queue_id: int, offset: int, stamp_ms: int
) -> records_pb2.StoredMessage:
    """A stored message copied for a retry or dead-letter topic: stored now, and pointing
    at where it first lived (a copy of a copy keeps the first origin)."""
    copy = records_pb2.StoredMessage.FromString(data)
    copy.store_time_ms = stamp_ms
    if not copy.origin_topic:
        copy.origin_topic = source
        copy.origin_queue_id = queue_id
        copy.origin_offset = offset
    return copy
