"""The broker: POP semantics over the RocksDB store, usable without gRPC.

`Broker` is a facade: it opens the store, wires the components (one per mechanism, see
docs/architecture.md "Mechanism -> module") and holds the public API the proxy, the CLI and
the tests call. Components are plain classes given the shared state they use (store,
catalog, writer, live checkpoints ...) in their constructor; none imports this module.

Threading: everything runs on one asyncio loop. Point reads, small scans and the group
commit flush are short blocking calls on the loop (see group_commit.py for why there is no writer
thread). The reads of the broker API are async (api.py: a remote broker answers them over
the wire) but do their work inline: a storage read is not moved to a thread, since rocksdict
holds the GIL through it (tools/gil_probe_batch.py), so a thread would add a hop and let
nothing else run meanwhile. Background tasks: the revive loop (pop/revive.py: redelivers
what is due), the checkpoint buffer loop (pop/checkpoint_buffer.py: persists checkpoints
that linger), the retention loop (retention.py) and the timer loop (timer.py: delivers
delayed messages when due).

Crash safety rests on three rules:
1. A message is stored only by a committed write; offsets are assigned inside that write
   (group_commit.py; the send path, send.py, and every copy: revive, timers, redrive).
2. A consumer offset is written only in a batch that also holds (or follows) the record of
   every persisted checkpoint it passes, so an offset never outruns in-flight state
   (enforced by the live checkpoints' flush hook, pop/live_checkpoints.py).
3. A revive writes the retry (or dead-letter) copies and deletes the checkpoint in one
   batch, and touches memory only after that batch committed (pop/revive.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence

from popmq.broker_core import crash_tail, jobs, security_records
from popmq.broker_core.admin import Admin
from popmq.broker_core.api import (
    BrokerAPI,
    MetricsSnapshot,
    ServerInfo,
    TransactionAPI,
)
from popmq.broker_core.autocreate import AutoCreate
from popmq.broker_core.catalog import Catalog, GroupInfo, TopicInfo
from popmq.broker_core.clock import Clock, SystemClock
from popmq.broker_core.clock import now_ms as now_ms  # re-exported: the proxy and tests use it
from popmq.broker_core.config import BrokerConfig
from popmq.broker_core.consume_queue import ConsumeQueue
from popmq.broker_core.consume_queues import ConsumeQueues
from popmq.broker_core.crash_tail import TailMessage
from popmq.broker_core.errors import InvalidArgumentError, PopMQError, UnavailableError
from popmq.broker_core.group_commit import GroupCommitWriter
from popmq.broker_core.group_rules import GroupState
from popmq.broker_core.group_settings import GroupSettingsStore
from popmq.broker_core.groups import Groups
from popmq.broker_core.inspection import DeliveryEvent, GroupInspection, Inspection
from popmq.broker_core.lag import Lag
from popmq.broker_core.lifecycle import Lifecycle
from popmq.broker_core.long_polling import LongPolling
from popmq.broker_core.metrics_snapshot import broker_metrics
from popmq.broker_core.offsets import PULL_DEFAULT_MESSAGES as PULL_DEFAULT_MESSAGES
from popmq.broker_core.offsets import PULL_MAX_MESSAGES as PULL_MAX_MESSAGES
from popmq.broker_core.offsets import OffsetReads, QueueOffsets
from popmq.broker_core.pop.ack import Acks
from popmq.broker_core.pop.checkpoint_buffer import CheckpointBuffer
from popmq.broker_core.pop.deliveries import Deliveries
from popmq.broker_core.pop.fifo import Fifo
from popmq.broker_core.pop.live_checkpoints import LiveCheckpoints
from popmq.broker_core.pop.reader import Reader
from popmq.broker_core.pop.receipt import ReceiptCodec
from popmq.broker_core.pop.retry import Retries
from popmq.broker_core.pop.revive import Reviver
from popmq.broker_core.pop.superseded import SupersededHandles
from popmq.broker_core.query import MessageQueries
from popmq.broker_core.queue_lock import QueueLocks
from popmq.broker_core.recovery import BootIdentity, recover
from popmq.broker_core.retention import Retention
from popmq.broker_core.send import QueueChooser, Sender, SendTicket
from popmq.broker_core.stats import BrokerStats
from popmq.broker_core.store import Store, WriteTap
from popmq.broker_core.timer import DelayedMessages, RecallCodec
from popmq.broker_core.topics import Topics
from popmq.broker_core.transaction_id import TransactionIdCodec
from popmq.broker_core.transactions import Transactions
from popmq.broker_core.types import (
    ConsumerOffset,
    ExponentialBackoff,
    GroupSettings,
    LagReport,
    NewMessage,
    PeekedMessage,
    PoppedMessage,
    PulledMessages,
    QueueDetails,
    QueueLag,
    QueueStats,
    RedriveResult,
    ResetResult,
    SendResult,
    Subscription,
    TransactionCheck,
    TransactionInfo,
)

log = logging.getLogger(__name__)


class Broker:
    """Topics, groups, send, pop, ack, change-invisible, nack, revive: the whole core."""

    def __init__(
        self,
        config: BrokerConfig | None = None,
        *,
        tap: Callable[[Store], WriteTap] | None = None,
        view_of: Store | None = None,
        clock: Clock | None = None,
        reconciles_crash_tail: bool = False,
    ) -> None:
        """
        Args:
            config: The broker's settings.
            tap: Makes what sees every write of the store, before the first one (a
                replicating leader's log, broker/replication); its `barrier`, if it has
                one, holds batches back until followers hold them.
            view_of: A store someone else writes (a replicated shard's follower): the broker
                is a read-only view of it as of `start()`. It writes nothing (every write
                is refused), runs no background task, and leaves the store open at close.
            clock: What every deadline, store time and timer of the core is read from
                (clock.py): the system clock by default, a ManualClock in tests.
            reconciles_crash_tail: The caller reconciles the crash tail (a cluster broker):
                after an unclean end, close() keeps the run marker until
                `crash_tail_reconciled()`, so a start cut short still reconciles next time.
        """
        self.config = config or BrokerConfig()
        self.clock: Clock = SystemClock() if clock is None else clock
        self._tap = tap
        self._reconciles = reconciles_crash_tail
        self._view_of = view_of
        self._store: Store | None = None
        self._started = False
        self._life = Lifecycle()
        self._tasks: list[asyncio.Task[None]] = []
        self.locks = QueueLocks()
        self.polling = LongPolling(self.config.long_polling)
        self.recovery_seconds = 0.0
        self.stats = BrokerStats()
        self._server_info = ServerInfo.of(self.config)
        # The store's last run did not end cleanly (crash_tail.py), as found by start(),
        # and (tail_pending) its crash tail is not reconciled yet: close() keeps the marker.
        self.unclean_end = self._marks_runs = self._tail_pending = False
        self.failure: str | None = None
        """Why the broker stopped doing its job (a background task died), or None."""
        # Set once, with `failure`: what wait_failure() awaits (the server's health).
        self._failed = asyncio.Event()

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
        view = self._view_of is not None
        store = self._view_of or Store(self.config.store.data_dir)
        if self._tap is not None:
            store.tap = self._tap(store)
        try:
            identity = BootIdentity(
                store,
                self.config.store.data_dir,
                broker_name=self.config.broker_name,
                allow_rename=self.config.allow_rename,
                save=not view,
            )
        except BaseException:
            if not view:
                store.close()  # release RocksDB's LOCK: the caller may fix the config and retry
            raise
        self._store = store
        # A replicating store and a view keep no run marker (crash_tail.py).
        self._marks_runs = not view and store.tap is None
        self.unclean_end = self._marks_runs and crash_tail.open_run(store)
        self._tail_pending = self.unclean_end and self._reconciles
        self.catalog = Catalog(store)
        self.offsets = QueueOffsets(store)
        self.writer = GroupCommitWriter(store, self.offsets)
        self.writer.replicate(store.tap)
        if view:
            self.writer.refusal = "this is a read-only view of a replica's store"
        self._wire(store, identity)
        if identity.unsaved and not view:
            self.writer.add_flush_hook(identity.save_boot)
            self.writer.add_commit_listener(identity.boot_saved)
        recovered = recover(
            store,
            queues=self._queues,
            checkpoints=self._checkpoints,
            superseded=self._superseded,
            offsets=self.offsets,
            now=self.clock.now_ms(),
            write=not view,
        )
        self.recovery_seconds = time.perf_counter() - began
        log.log(
            logging.DEBUG if view else logging.INFO,
            "store %s opened in %.3fs: %d topics, %d groups, %d in-flight checkpoints recovered",
            self.config.store.data_dir,
            self.recovery_seconds,
            len(self.catalog.topics),
            len(self.catalog.groups),
            recovered,
        )
        self._started = True
        if view:
            return
        self._tasks = [
            asyncio.create_task(self._reviver.loop(), name="popmq-revive"),
            asyncio.create_task(
                self._buffer.loop(self._checkpoints.persist), name="popmq-ck-buffer"
            ),
            asyncio.create_task(self._retention.loop(), name="popmq-retention"),
            asyncio.create_task(self._timers.loop(), name="popmq-timers"),
            asyncio.create_task(self._transactions.loop(), name="popmq-transactions"),
        ]
        for task in self._tasks:
            task.add_done_callback(self._task_done)

    def _wire(self, store: Store, identity: BootIdentity) -> None:
        """Build the components, each given the shared state it uses."""
        config, catalog, offsets, writer = self.config, self.catalog, self.offsets, self.writer
        polling, stats, locks, life = self.polling, self.stats, self.locks, self._life
        clock = self.clock
        buffer = self._buffer = CheckpointBuffer(config.pop, clock=clock)
        checkpoints = self._checkpoints = LiveCheckpoints(
            writer=writer,
            catalog=catalog,
            polling=polling,
            buffer=buffer,
            clock=clock,
            epoch=identity.epoch,
        )
        writer.add_flush_hook(checkpoints.flush_state)
        writer.add_failure_listener(checkpoints.flush_failed)
        settings = self._settings = GroupSettingsStore(store=store, catalog=catalog)
        queues = self._queues = ConsumeQueues(
            catalog=catalog, offsets=offsets, checkpoints=checkpoints, settings_of=settings.load
        )
        superseded = self._superseded = SupersededHandles()
        codec = ReceiptCodec(identity.secret, broker_name=config.broker_name)
        recall_codec = RecallCodec(identity.secret, broker_name=config.broker_name)
        create = AutoCreate(config, catalog=catalog, writer=writer, clock=clock)
        retries = Retries(catalog=catalog, writer=writer, create=create, stats=stats, clock=clock)
        chooser = QueueChooser()
        fifo = Fifo(config.pop, store=store, checkpoints=checkpoints, queues=queues, codec=codec)
        self._timers = DelayedMessages(
            config,
            store=store,
            catalog=catalog,
            writer=writer,
            polling=polling,
            codec=recall_codec,
            epoch=identity.epoch,
            clock=clock,
        )
        self._sender = Sender(
            config,
            store=store,
            catalog=catalog,
            writer=writer,
            create=create,
            chooser=chooser,
            timers=self._timers,
            recall_codec=recall_codec,
            polling=polling,
            stats=stats,
            clock=clock,
        )
        self._transactions = Transactions(
            config,
            store=store,
            catalog=catalog,
            writer=writer,
            sender=self._sender,
            timers=self._timers,
            create=create,
            codec=TransactionIdCodec(identity.secret, broker_name=config.broker_name),
            polling=polling,
            stats=stats,
            life=life,
            epoch=identity.epoch,
            clock=clock,
        )
        self._queries = MessageQueries(
            store=store, catalog=catalog, offsets=self.offsets, recall_codec=recall_codec
        )
        self._reader = Reader(
            config,
            store=store,
            catalog=catalog,
            offsets=offsets,
            checkpoints=checkpoints,
            buffer=buffer,
            queues=queues,
            fifo=fifo,
            create=create,
            retries=retries,
            settings=settings,
            codec=codec,
            locks=locks,
            polling=polling,
            stats=stats,
            life=life,
            clock=clock,
        )
        self._acks = Acks(
            config,
            store=store,
            catalog=catalog,
            writer=writer,
            checkpoints=checkpoints,
            queues=queues,
            superseded=superseded,
            fifo=fifo,
            retries=retries,
            codec=codec,
            polling=polling,
            stats=stats,
            clock=clock,
        )
        self._deliveries = Deliveries(store=store, catalog=catalog, acks=self._acks, clock=clock)
        self._reviver = Reviver(
            store=store,
            catalog=catalog,
            writer=writer,
            checkpoints=checkpoints,
            superseded=superseded,
            fifo=fifo,
            retries=retries,
            polling=polling,
            stats=stats,
            clock=clock,
        )
        self._offset_reads = OffsetReads(
            config,
            store=store,
            catalog=catalog,
            offsets=offsets,
            writer=writer,
            checkpoints=checkpoints,
            queues=queues,
            create=create,
            polling=polling,
            life=life,
        )
        self._topics = Topics(
            config,
            catalog=catalog,
            writer=writer,
            offsets=offsets,
            queues=queues,
            checkpoints=checkpoints,
            create=create,
            polling=polling,
        )
        self._groups = Groups(
            config,
            catalog=catalog,
            writer=writer,
            offsets=offsets,
            offset_reads=self._offset_reads,
            queues=queues,
            checkpoints=checkpoints,
            settings=settings,
            locks=locks,
            polling=polling,
            create=create,
            forget_pop_counts=self._reader.forget_group,
            clock=clock,
        )
        self._admin = Admin(
            config,
            store=store,
            catalog=catalog,
            writer=writer,
            offsets=offsets,
            offset_reads=self._offset_reads,
            queues=queues,
            checkpoints=checkpoints,
            superseded=superseded,
            topics=self._topics,
            chooser=chooser,
            locks=locks,
            polling=polling,
            clock=clock,
        )
        self._retention = Retention(
            config, store=store, catalog=catalog, offsets=offsets, writer=writer, clock=clock
        )
        self._lag = Lag(catalog=catalog, offsets=offsets, queues=queues, store=store)
        self._inspection = Inspection(
            store=store,
            catalog=catalog,
            queues=queues,
            checkpoints=checkpoints,
            polling=polling,
            history=checkpoints.history,
            clock=clock,
        )

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """A background task ended: unless close() stopped it, the broker has failed (what
        it did, redelivery, persisting checkpoints, retention or timers, no longer happens)."""
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None and self._life.closing:
            return
        why = f"{exc!r}" if exc is not None else "it returned"
        log.error("background task %s died: %s", task.get_name(), why, exc_info=exc)
        self._fail(f"background task {task.get_name()} died: {why}")

    def _fail(self, reason: str) -> None:
        if self.failure is not None:
            return  # the first failure is the one to report
        self.failure = reason
        self._failed.set()

    def report_failure(self, reason: str) -> None:
        """Record that the broker can no longer do its job because work outside the core
        died (cluster mode's catalog sync or fencing loop): wait_failure() answers `reason`
        (the first reported failure wins), so health and proxies learn of it. The caller
        has logged what happened."""
        self._fail(reason)

    async def wait_failure(self) -> str:
        """Return why the broker failed, once it has (at once if it already has): a long
        poll rather than a callback, so a broker in another process can answer it."""
        await self._failed.wait()
        assert self.failure is not None
        return self.failure

    def release_waiters(self) -> None:
        """Answer every held pop now (empty) and hold no new ones: shutdown is coming.

        Called before the server's grace period, so in-flight RPCs can finish while the
        store is still open and no long poll keeps the grace period waiting.
        """
        self._life.draining = True
        self._transactions.release()
        for topic in list(self.catalog.topics):
            self.polling.notify_all(topic)

    async def close(self) -> None:
        """Persist buffered checkpoints and offsets, stop tasks, close the store."""
        if not self._started or self._life.closing:
            return
        self._life.closing = True
        self.release_waiters()
        if self._view_of is not None:
            self.writer.close()
            self._started = False
            return  # nothing of its own to persist; the store is its owner's
        for task in self._tasks:
            task.cancel()
        # A task that died has reported why (_task_done): close the store all the same.
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # A clean shutdown keeps every in-flight deadline: persist what is still buffered.
        self._checkpoints.persist_buffered()
        with contextlib.suppress(PopMQError):
            await self.writer.submit(jobs.noop, sync=True)
        self.writer.close()
        if self._marks_runs and not self._tail_pending:
            crash_tail.close_run(self.store)
        self.store.close()
        self._started = False

    async def crash_tail(self, *, takeover: bool = False) -> list[TailMessage]:
        """After an unclean end or on a shard's `takeover`, its last messages stored
        (crash_tail.py); else none."""
        messages = self.config.messages
        tail_ms = round(min(messages.crash_tail_s, messages.dedup_window_s) * 1000)
        if not (self.unclean_end or takeover) or tail_ms <= 0:
            return []
        return await crash_tail.select(self.store, self.catalog, self.offsets, tail_ms)

    async def remove_crash_tail(self, messages: list[TailMessage]) -> None:
        """Remove messages of the crash tail that other brokers hold (before serving)."""
        await crash_tail.remove(self.store, self.writer, self.offsets, messages, self._transactions)

    def crash_tail_reconciled(self) -> None:
        """The crash tail is reconciled: a clean close may clear the run marker now."""
        self._tail_pending = False

    # -- topics (topics.py) ---------------------------------------------------------------

    async def create_topic(
        self, name: str, queues: int | None = None, *, message_type: str = "normal"
    ) -> TopicInfo:
        """Create a topic accepting one message type: normal, fifo, delay, transaction, mixed."""
        return await self._topics.create_topic(name, queues, message_type=message_type)

    def topic_info(self, name: str) -> TopicInfo:
        """A topic's settings without its queues' stats (a lookup, for hot paths)."""
        return self._topics.topic_info(name)

    async def get_topic(self, name: str) -> tuple[TopicInfo, list[QueueStats]]:
        return self._topics.get_topic(name)

    async def list_topics(self) -> list[TopicInfo]:
        return self._topics.list_topics()

    async def delete_topic(self, name: str) -> None:
        """Delete a topic with its messages, retry queues, offsets and in-flight state."""
        await self._topics.delete_topic(name)

    async def apply_topic(
        self, name: str, *, queues: int, message_type: str, route_create_time_ms: int
    ) -> TopicInfo | None:
        """Make the local topic its route's incarnation (cluster-internal): Topics.apply_route."""
        return await self._topics.apply_route(name, queues, message_type, route_create_time_ms)

    # -- groups (groups.py) ---------------------------------------------------------------

    async def create_group(
        self,
        name: str,
        *,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
    ) -> GroupInfo:
        """Create a group with default settings; an implicitly created one takes the given
        settings (the same path as create_group_with_settings)."""
        return await self._groups.create(
            name, max_delivery_attempts=max_delivery_attempts, retry_backoff_s=retry_backoff_s
        )

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
        return await self._groups.create(
            name,
            max_delivery_attempts=max_delivery_attempts,
            retry_backoff_s=retry_backoff_s,
            settings=settings,
        )

    def get_group(self, name: str) -> GroupInfo:
        return self._groups.get_group(name)

    async def list_groups(self) -> list[GroupInfo]:
        return self._groups.list_groups()

    def group_settings(self, name: str) -> GroupSettings:
        """A group's FIFO flag, subscriptions, consume_from and backoff policy."""
        return self._groups.group_settings(name)

    def subscription_filter(self, group: str, topic: str) -> tuple[str, str] | None:
        """(filter_type, expression) the group declared for the topic, if any."""
        return self._settings.subscription_filter(group, topic)

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
        """Change a group's settings; None / empty arguments keep the current value."""
        return await self._groups.update(
            name,
            max_delivery_attempts=max_delivery_attempts,
            retry_backoff_s=retry_backoff_s,
            exponential_backoff=exponential_backoff,
            fifo=fifo,
            set_subscriptions=set_subscriptions,
            remove_subscriptions=remove_subscriptions,
            consume_from=consume_from,
            consume_from_ms=consume_from_ms,
        )

    async def delete_group(self, name: str, *, force: bool = False) -> None:
        """Delete a group, its offsets, settings, retry queues and in-flight state."""
        await self._groups.delete(name, force=force)

    async def delete_group_record(self, name: str, *, revision: int) -> None:
        """Delete a group as cluster mode's record was deleted, at cluster `revision`
        (cluster-internal, not part of BrokerAPI): forced, and `apply_group` ignores the
        group's records at or below `revision` from now on, even when the group is not
        here (groups.py). NotFoundError when it is not here."""
        await self._groups.delete(name, force=True, revision=revision)

    async def apply_group(
        self, name: str, state: GroupState, *, create_time_ms: int, revision: int
    ) -> GroupInfo:
        """Set a group to exactly `state`, cluster mode's group record at `revision`
        (cluster-internal, not part of BrokerAPI): created if absent, an existing one taken
        over with its group_id, a record older than the last applied one ignored.

        Subscriptions naming topics this broker does not hold are left out of the local
        copy (the cluster's record keeps them); the catalog sync applies the record again
        when such a topic arrives. Details in groups.py `Groups.apply`.
        """
        return await self._groups.apply(
            name, state, create_time_ms=create_time_ms, revision=revision
        )

    # -- send, delayed messages, queries (send.py, timer.py, query.py) -------------------

    async def send(self, messages: Sequence[NewMessage]) -> list[SendResult]:
        """Store the messages atomically; with sync flush, return after the fsync."""
        return await self._sender.send(messages)

    def send_now(self, messages: Sequence[NewMessage]) -> SendTicket | None:
        """`send` handed to group commit now, its wait left to the caller; None when a topic
        must be created first (send.py `Sender.send_now`)."""
        return self._sender.send_now(messages)

    def lookup_sends(
        self, topic: str, sent: Sequence[tuple[str, str]], *, stored_only: bool = False
    ) -> list[bool]:
        """Whether each (message id, dedup id) of `topic` is in the dedup window (send.py)."""
        return self._sender.lookup(topic, sent, stored_only=stored_only)

    # -- transactions (transactions.py) ---------------------------------------------------

    async def send_half(
        self,
        messages: Sequence[NewMessage],
        *,
        producer_group: str = "",
        check_first_s: float | None = None,
    ) -> list[SendResult]:
        """Store half messages, one transaction each, invisible to every reader until
        committed; each result carries its transaction id (offset -1)."""
        return await self._transactions.send_half(
            messages, producer_group=producer_group, check_first_s=check_first_s
        )

    async def end_transaction(
        self,
        transaction_id: str,
        *,
        commit: bool,
        source: str = "client",
        topic: str = "",
        message_id: str = "",
    ) -> TransactionInfo:
        """Commit or roll back an open transaction; the same resolution again is a no-op,
        the other one (or any after a discard) FAILED_PRECONDITION."""
        return await self._transactions.end_transaction(
            transaction_id, commit=commit, source=source, topic=topic, message_id=message_id
        )

    async def due_checks(
        self,
        max_checks: int = 32,
        *,
        wait_s: float = 0.0,
        topics: Collection[str] | None = None,
    ) -> list[TransactionCheck]:
        """Claim due checks of open transactions (each counted as sent), waiting up to
        wait_s for one to come due; with `topics`, only checks of those topics (a proxy
        claims the checks it has a producer for)."""
        return await self._transactions.due_checks(max_checks, wait_s=wait_s, topics=topics)

    async def get_transaction(self, transaction_id: str, *, half: bool = False) -> TransactionInfo:
        return await self._transactions.get_transaction(transaction_id, half=half)

    async def list_transactions(
        self, state: str, *, topic: str | None = None, limit: int = 100
    ) -> list[TransactionInfo]:
        """Open or discarded transactions, of one topic or all."""
        return await self._transactions.list_transactions(state, topic=topic, limit=limit)

    async def resume_discarded(self, transaction_id: str) -> TransactionInfo:
        """Reopen a discarded transaction with a fresh check count."""
        return await self._transactions.resume_discarded(transaction_id)

    async def recall(self, topic: str, recall_handle: str) -> str:
        """Cancel a delayed message before it is due; returns its message id."""
        return await self._timers.recall(topic, recall_handle)

    async def query_message(self, topic: str, message_id: str) -> PeekedMessage:
        """The stored message with this id (offset -1: a delayed message not yet due)."""
        return self._queries.query_message(topic, message_id)

    async def query_messages_by_key(
        self, topic: str, key: str, limit: int = 64
    ) -> list[PeekedMessage]:
        """Stored messages carrying business key `key`, oldest first, at most `limit`."""
        return self._queries.query_messages_by_key(topic, key, limit)

    # -- pop, ack, nack, change invisible time, dead letter (pop/) ------------------------

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
        reserve: Callable[[int], int] | None = None,
        client_id: str = "",
    ) -> list[PoppedMessage]:
        """Pop up to max_messages; wait up to wait_s for an arrival when nothing is there.

        max_bytes bounds what the answer takes (pop/reader.py); None is the usual ~4 MiB.
        reserve, with max_bytes, is asked for more bytes when the first message found does
        not fit them (broker_core/budget.py). client_id names the popping client, recorded
        with the deliveries ("" unknown).
        """
        return await self._reader.pop(
            group,
            topic,
            max_messages=max_messages,
            invisible_s=invisible_s,
            wait_s=wait_s,
            filter_expression=filter_expression,
            filter_type=filter_type,
            queue_id=queue_id,
            max_bytes=max_bytes,
            reserve=reserve,
            client_id=client_id,
        )

    async def ack(self, group: str, handles: Sequence[str]) -> list[PopMQError | None]:
        """Acknowledge deliveries; one result per handle (None = acked, or acked before)."""
        return await self._acks.ack(group, handles)

    async def get_deliveries(
        self, group: str, handles: Sequence[str]
    ) -> list[PoppedMessage | PopMQError]:
        """The in-flight deliveries the handles name, as their pops returned them (or the
        error an ack of each would get); changes nothing (pop/deliveries.py)."""
        return await self._deliveries.get(group, handles)

    async def follow_handles(
        self, group: str, handles: Sequence[str]
    ) -> list[tuple[str, int] | PopMQError]:
        """The newest handle of each handle's delivery and its deadline (pop/deliveries.py)."""
        return await self._deliveries.follow(group, handles)

    async def change_invisible_time(
        self, group: str, handle: str, invisible_s: float
    ) -> tuple[str, int]:
        """Give one delivery a new deadline; returns (new handle, invisible_until_ms)."""
        return await self._acks.change_invisible_time(group, handle, invisible_s)

    async def nack(self, group: str, handle: str, delay_s: float | None = None) -> int:
        """Redeliver after delay_s, or after the group's backoff; returns the redeliver time."""
        return await self._acks.nack(group, handle, delay_s)

    async def dead_letter(self, group: str, handle: str) -> str:
        """Move one delivery to `%DLQ%<group>` now; returns the DLQ topic's name."""
        return await self._acks.dead_letter(group, handle)

    # -- reads by offset (offsets.py) -----------------------------------------------------

    async def pull(
        self, topic: str, queue_id: int, offset: int, max_messages: int = PULL_DEFAULT_MESSAGES
    ) -> PulledMessages:
        """Read one queue from `offset` on, without a group and without changing any state."""
        return self._offset_reads.pull(topic, queue_id, offset, max_messages)

    async def pull_wait(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int = PULL_DEFAULT_MESSAGES,
        *,
        wait_s: float = 0.0,
        filter_expression: str = "",
        filter_type: str = "tag",
    ) -> PulledMessages:
        """`pull` with a filter, waiting up to wait_s for an arrival when the queue is read up."""
        return await self._offset_reads.pull_wait(
            topic,
            queue_id,
            offset,
            max_messages,
            wait_s=wait_s,
            filter_expression=filter_expression,
            filter_type=filter_type,
        )

    async def await_messages(
        self, topic: str, positions: Mapping[int, int], wait_s: float
    ) -> list[tuple[int, int]]:
        """Wait until a queue of `topic` holds messages past its position in `positions`."""
        return await self._offset_reads.await_messages(topic, positions, wait_s)

    async def commit_offsets(
        self, group: str, topic: str, offsets: Sequence[tuple[int, int]]
    ) -> None:
        """Set the group's offset in some queues of a topic, all or none, durably."""
        await self._offset_reads.commit_offsets(group, topic, offsets)

    async def get_offsets(self, group: str, topic: str) -> list[ConsumerOffset]:
        """The group's offset in every queue of the topic (where it would start if none)."""
        return self._offset_reads.get_offsets(group, topic)

    async def offsets_at(self, topic: str, timestamp_ms: int) -> list[tuple[int, int]]:
        """(queue_id, first offset stored at or after timestamp_ms) per queue."""
        return self._offset_reads.offsets_at(topic, timestamp_ms)

    # -- admin (admin.py) -----------------------------------------------------------------

    async def inflight_count(self, *, group: str | None = None, topic: str | None = None) -> int:
        """Messages popped and neither acked nor redelivered yet, for a group and/or topic."""
        return self._admin.inflight_count(group=group, topic=topic)

    async def update_topic(self, name: str, queues: int, *, broker: str | None = None) -> TopicInfo:
        """Grow a topic to `queues` queues (queues are never removed). `broker`, if given,
        must be this broker's name (cluster mode's proxy gives queues to one broker)."""
        if broker is not None and broker != self.config.broker_name:
            raise InvalidArgumentError(
                f"this server has one broker, {self.config.broker_name!r}, not {broker!r}",
                field="broker",
                value=broker,
                allowed=self.config.broker_name,
            )
        return await self._admin.update_topic(name, queues)

    async def delete_topic_guarded(self, name: str, *, force: bool = False) -> None:
        """Delete a topic, refusing while groups have its messages in flight unless forced."""
        await self._admin.delete_topic_guarded(name, force=force)

    async def describe_topic(self, name: str) -> tuple[TopicInfo, list[QueueDetails], list[str]]:
        """A topic, its queues (offsets, count, newest store time) and the groups that read it."""
        return self._admin.describe_topic(name)

    async def purge(self, topic: str, queue_id: int | None = None) -> int:
        """Delete every stored message of one queue (or all queues); returns how many."""
        return await self._admin.purge(topic, queue_id)

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
        """Move a group's consumer offsets in a topic's queues (its retry queue is untouched)."""
        return await self._admin.reset_offsets(
            group, topic, target=target, timestamp_ms=timestamp_ms, offsets=offsets, force=force
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
        """Read stored messages without consuming them: no checkpoint, no offset change."""
        return self._admin.peek(
            topic, queue_id=queue_id, offset=offset, group=group, max_messages=max_messages
        )

    async def redrive(
        self, group: str, *, max_messages: int | None = None, only: Sequence[tuple[int, int]] = ()
    ) -> RedriveResult:
        """Move messages of `%DLQ%<group>` back to the topics they were first sent to."""
        return await self._admin.redrive(group, max_messages=max_messages, only=only)

    # -- retention (retention.py) ---------------------------------------------------------

    async def apply_retention(self, now: int | None = None) -> int:
        """Delete messages stored before now - retention_s; returns how many."""
        return await self._retention.apply_retention(now)

    async def apply_size_limit(self) -> int:
        """When stored messages exceed retention.max_disk_bytes, delete the oldest first."""
        return await self._retention.apply_size_limit()

    def stored_bytes_estimate(self) -> int:
        """Bytes of stored messages, estimated per queue as count x sampled record size."""
        return self._retention.stored_bytes_estimate()

    async def sweep_index(self, now: int | None = None) -> int:
        """Delete index entries past their lifetime (retention or dedup window); returns count."""
        return await self._retention.sweep_index(now)

    # -- lag (lag.py) ---------------------------------------------------------------------

    async def group_lag(self, group: str, topic: str = "") -> list[QueueLag]:
        return self._lag.group_lag(group, topic)

    async def lag_report(self, group: str, topic: str = "") -> LagReport:
        """Lag per queue with the age of the oldest unacked message, per-topic sums (with
        the retry backlog) and the depth of the group's dead-letter topic."""
        return self._lag.lag_report(group, topic)

    # -- a group's runtime view (inspection.py) -------------------------------------------

    async def inspect_group(
        self, group: str, topic: str = "", *, page_size: int = 0, page_token: str = ""
    ) -> GroupInspection:
        """Held long polls, a page of messages in flight, revive lag and blocked FIFO heads
        of a group now (inspection.py says what each costs)."""
        return self._inspection.inspect_group(
            group, topic, page_size=page_size, page_token=page_token
        )

    async def message_history(
        self, topic: str, message_id: str, *, group: str = ""
    ) -> list[DeliveryEvent]:
        """A stored message's recent pops, nacks, invisible-time changes, retry copies and
        dead-lettering on this broker (pop/history.py: an in-memory ring)."""
        return await self._inspection.message_history(topic, message_id, group=group)

    # -- security records (security_records.py) ------------------------------------------

    def security_records(self) -> dict[str, bytes]:
        """Every stored security record (a user with its policies) by name. Only the
        embedded broker has this, not BrokerAPI: in cluster mode they live in etcd."""
        return security_records.read_all(self.store)

    async def put_security_record(self, name: str, value: bytes | None) -> None:
        """Store one security record, or delete it (None): one write batch, fsynced."""
        await security_records.put(self.writer, name, value)

    # -- server info and metrics (api.py) -------------------------------------------------

    def server_info(self) -> ServerInfo:
        """The broker's name and the limits a front end checks against (built once: the
        configuration is frozen, and hot paths read it)."""
        return self._server_info

    async def metrics_snapshot(self) -> MetricsSnapshot:
        """Counters and gauges now, copied: the caller keeps nothing that changes under it."""
        return broker_metrics(
            self.stats,
            self.writer.stats,
            self.store,
            self.config.store.data_dir,
            long_polls_held=self.polling.held,
            buffered_checkpoints=self.buffered_checkpoints,
            live_checkpoints=self.live_checkpoints,
            topics=len(self._topics.list_topics()),
            groups=len(self._groups.list_groups()),
            transactions_open=self._transactions.open_count,
        )

    # -- introspection for tests and metrics ---------------------------------------------

    @property
    def buffered_checkpoints(self) -> int:
        return self._buffer.count

    @property
    def live_checkpoints(self) -> int:
        return self._checkpoints.live_count

    def consume_queue(self, group: str, topic: str, queue_id: int) -> ConsumeQueue | None:
        g = self.catalog.groups.get(group)
        t = self.catalog.topics.get(topic)
        return self._queues.get(g.group_id, t.topic_id, queue_id) if g and t else None


def _implements_api(broker: Broker) -> BrokerAPI:
    """Never called: mypy checks here that Broker conforms to the BrokerAPI Protocol."""
    return broker


def _implements_transactions(broker: Broker) -> TransactionAPI:
    """Never called: mypy checks here that Broker conforms to the TransactionAPI Protocol."""
    return broker
