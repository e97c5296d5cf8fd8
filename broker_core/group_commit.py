"""Group commit: every write of the broker goes through one writer, one batch at a time.

Writes submitted while the event loop is busy are coalesced: the first submit schedules a
flush with `call_soon`, later submits in the same loop iteration join it, and the flush
writes them all in one WriteBatch with one fsync (when any of them asked for sync). So many
concurrent sends cost one fsync, not one each.

The WriteBatch is written on the event loop thread without sync (memtable plus the WAL in
the page cache: tens of microseconds). The fsync runs on a thread of its own through
`Store.sync_wal`, which releases the GIL, while the loop keeps serving (`_SyncThread`: one
long-lived thread, handed each fsync through a queue and answering with one
`call_soon_threadsafe`); jobs submitted
meanwhile wait and go out together as the next batch once it returns, and so does a flush
asked for meanwhile with no job (`request_flush`: flush hooks' offsets and checkpoints),
which would otherwise wait for the next job to come. One sync is in flight
at a time, so the batch grows with the disk's fsync latency (classic group commit). A
synced write itself (`write(sync=True)`) would hold the GIL through the fsync and stall
the loop (tools/gil_probe.py shows both). A lone job with no contention (one job in the
batch, none queued behind the previous fsync) is synced inline instead: the hand-off to the
thread and back costs a sequential producer more than the loop gains.

Nothing of a synced batch is visible before its fsync returned: its offsets are published
and its futures resolved only then, so a reader or a long poll never sees a message a
power loss could take back. Nor after the fsync failed: the batch's offsets stay allocated
(later batches go past them, so no key is written twice) but unpublished, and so do those
of later batches in the same queues (`QueueOffsets.unsettle`). The store refuses to fsync
after a failed fsync (its WAL cannot be trusted) until it reopens, which replays the WAL and
flushes it: then each held queue ends where the store's messages do, and that is published
(`QueueOffsets.reload_unsettled`); what the failed fsync lost is gone, and its offsets,
never shown to a reader, go to later messages. (A failure that leaves the store writable,
such as one a test injects, is settled by the next successful fsync instead, which covers
every write before it: `QueueOffsets.settle`.)

With replication (docs/replication.md), a `barrier` may hold a written batch back until the
shard's in-sync followers hold it too: its completion then waits for the local fsync (if
any) and the barrier's future together, off the loop, as a contended fsync does. A failed
barrier holds the batch's offsets back the same way, until a later batch of sends completes
after its own barrier (the in-sync followers then hold every batch before it), or until a
follower joins the in-sync set (`follower_joined` confirms them with an empty batch of
sends); a reopen of the store alone does not publish them, and with replication it does
not give the offsets of what it lost to new messages (the followers may hold that batch:
`QueueOffsets.reload_unsettled(shipped=True)`).

A job that writes nothing (a repeated send answered as a duplicate) completes at once,
unless what it answers from may be in doubt (`_confirm`): after a failed fsync, until a
synced batch succeeds or the store reopens, it waits for an fsync of its own; with
replication, it waits until the followers hold the last batch owed to them.

Queue offsets are assigned inside the flush, so they are dense and in commit order; a failed
write rolls them back and fails every job of the batch (nothing is half-written); a failed
fsync or barrier fails every job and holds its offsets back (above).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from popmq.broker_core import jobs as write_jobs
from popmq.broker_core.errors import OutcomeUnknownError, PopMQError, UnavailableError
from popmq.broker_core.log_limit import RepeatedWarning
from popmq.broker_core.offsets import QueueOffsets
from popmq.broker_core.stats import BATCH_JOBS_BUCKETS, WRITE_SECONDS_BUCKETS, Histogram
from popmq.broker_core.store import Batch, Store

log = logging.getLogger(__name__)


class _Job:
    """One submitted write. A plain class: a dataclass's generated __init__ runs as Python
    even compiled (about 1,900 instructions a job)."""

    __slots__ = ("apply", "committed", "future", "sync")

    def __init__(
        self,
        apply: Callable[[Batch, QueueOffsets], Any],
        sync: bool,
        future: asyncio.Future[Any],
        committed: Callable[[Any], None] | None = None,
    ) -> None:
        self.apply = apply
        self.sync = sync
        self.future = future
        self.committed = committed


_SyncDone = Callable[[BaseException | None], None]
"""Told, on the loop, how an fsync went: None, or what `Store.sync_wal` raised."""


class _SyncThread:
    """The thread that runs the store's WAL fsyncs off the loop, in the order asked.

    One thread for the writer's life, fed through a SimpleQueue: a hand-off is one put (a
    futex wake) and the answer one `call_soon_threadsafe` of the caller's callback.
    ThreadPoolExecutor + run_in_executor cost 33 instead of 20 us of CPU a hand-off (`python
    -m bench.wal_sync_handoff`): a concurrent future with its condition, an asyncio future
    chained to it, and one more loop iteration before the callback ran.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        # Fsyncs asked for, as (loop, done), and None to stop: the loop puts, the thread alone
        # gets. `_worker` and `_closed` are touched on the loop only.
        self._requests: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, _SyncDone] | None] = (
            queue.SimpleQueue()
        )
        self._worker: threading.Thread | None = None
        self._closed = False

    def sync(self, loop: asyncio.AbstractEventLoop, done: _SyncDone) -> None:
        """fsync the WAL on the thread, then call `done(error)` on `loop`."""
        if self._closed:
            # The batch is written, unsynced: whether it survives a crash is unknown.
            loop.call_soon(
                done,
                OutcomeUnknownError(
                    "the store's writer closed before this write was synced; it may or may "
                    "not be stored (a retried send is deduplicated)"
                ),
            )
            return
        if self._worker is None:
            # A daemon: a writer never closed must not hold the interpreter at exit; an fsync
            # cut short there was never acknowledged.
            self._worker = threading.Thread(target=self._run, name="popmq-wal-sync", daemon=True)
            self._worker.start()
        self._requests.put((loop, done))

    def close(self) -> None:
        """Stop the thread once the fsyncs asked for have run."""
        self._closed = True
        if self._worker is not None:
            self._requests.put(None)
            self._worker.join()
            self._worker = None

    def _run(self) -> None:
        while (request := self._requests.get()) is not None:
            loop, done = request
            error: BaseException | None = None
            try:
                self._store.sync_wal()
            except BaseException as exc:  # noqa: BLE001 - handed to the loop, which answers
                error = exc
            # A closed loop has nobody left waiting for the answer.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(done, error)


class ReplicationTap(Protocol):
    """What the writer uses of a replicating store's tap (the leader's replication log)."""

    joined: Callable[[], None] | None
    """Called when a follower joined the in-sync set."""

    def barrier(self, batch: Batch, synced: bool) -> asyncio.Future[None] | None:
        """What a written batch's jobs wait for (`GroupCommitWriter.barrier`)."""


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


@dataclass(slots=True)
class WriterStats:
    """Counters for metrics and the benchmarks."""

    batches: int = 0
    jobs: int = 0
    synced_batches: int = 0
    failed_batches: int = 0
    batch_jobs: Histogram = field(default_factory=lambda: Histogram(BATCH_JOBS_BUCKETS))
    """Jobs per committed batch."""
    write_seconds: dict[bool, Histogram] = field(
        default_factory=lambda: {
            True: Histogram(WRITE_SECONDS_BUCKETS),
            False: Histogram(WRITE_SECONDS_BUCKETS),
        }
    )
    """Seconds per committed batch write, by whether it was fsynced."""


class GroupCommitWriter:
    """Coalesces write jobs submitted in one loop iteration into one atomic, synced write."""

    def __init__(self, store: Store, offsets: QueueOffsets) -> None:
        self._store = store
        self.offsets = offsets
        # Jobs waiting for the next flush; only touched on the loop thread.
        self._pending: list[_Job] = []
        self._scheduled = False
        # A written batch waiting for its fsync; the next flush starts when it is done.
        self._syncing = False
        # A flush was asked for (jobs or hooks' changes) while the fsync was in flight: the
        # flush after it must run even with no job pending, or hooks' changes (acks' offsets,
        # persisted checkpoints) would wait for some later job.
        self._wanted = False
        self._sync_thread = _SyncThread(store)
        # Whether writes queued behind the last fsync on the thread (see flush).
        self._contended = False
        # A batch's fsync failed and neither a synced batch succeeded nor the store reopened
        # since: what it wrote is readable but may not be durable (see `_confirm`).
        self._unsynced = False
        # A batch's barrier failed and no batch of sends completed after a successful one
        # since: what it wrote may be missing on the followers (held back, see `_complete`).
        self._unreplicated = False
        # The store's generation when the oldest failure still in doubt (a failed fsync, or
        # offsets held back) happened, 0 when none is: a flush that finds the store
        # reopened read-write since settles it (`_settle_reopened`).
        self._unsettled_in = 0
        # The store's generation of the batch being written or waited for (one at a time).
        self._batch_generation = 0
        # Called at the start of each flush to add changes that ride along (offset commits).
        self._flush_hooks: list[Callable[[Batch], None]] = []
        self._after_commit: list[Callable[[list[tuple[int, int]]], None]] = []
        self._on_failure: list[Callable[[], None]] = []
        self._on_settled: list[Callable[[dict[tuple[int, int], int]], None]] = []
        # Told (jobs, write seconds, fsynced) after every successful write (metrics).
        self.stats = WriterStats()
        self._failure_warning = RepeatedWarning(log)
        self.refusal: str | None = None
        """Set: every job is refused with an UnavailableError saying this (a read-only
        view of a store another writer owns)."""
        self.barrier: Callable[[Batch, bool], asyncio.Future[None] | None] | None = None
        """`barrier(batch, synced)`: a future that must resolve before the batch's jobs
        complete (replication to in-sync followers), or None when it need not wait. Also
        asked for an empty batch of sends (nothing written, `batch.lsn` 0): what repeats
        answered from earlier writes wait for (`_confirm`)."""

    def replicate(self, tap: object) -> None:
        """Wait for `tap`'s barrier when it is a replication log (else for nothing), and
        confirm the sends a failed barrier held back whenever a follower joins its in-sync
        set (`follower_joined`)."""
        # Duck-typed (a runtime-checkable Protocol does not compile with mypyc).
        if hasattr(tap, "barrier") and hasattr(tap, "joined"):
            replicating = cast(ReplicationTap, tap)
            self.barrier = replicating.barrier
            replicating.joined = self.follower_joined
        else:
            self.barrier = None

    def in_doubt(self) -> bool:
        """Whether a write's fsync or its wait for the followers failed and nothing vouched
        for it since: what the store holds may not be durable (or replicated)."""
        return self._unsynced or self._unreplicated

    def follower_joined(self) -> None:
        """A follower joined the in-sync set: sends held back by a failed barrier are
        confirmed now by an empty batch of sends (`_confirm`: it waits until the in-sync
        followers hold the last batch owed to them, then publishes what was held), not only
        when the next send completes, which on an idle shard may be never."""
        if self._unreplicated and self.refusal is None:
            future = self.submit(write_jobs.confirm, sync=False)
            future.add_done_callback(write_jobs.ignore_result)

    def add_flush_hook(self, hook: Callable[[Batch], None]) -> None:
        self._flush_hooks.append(hook)

    def add_commit_listener(self, listener: Callable[[list[tuple[int, int]]], None]) -> None:
        """`listener(grown_queues)` runs after every successful write."""
        self._after_commit.append(listener)

    def add_failure_listener(self, listener: Callable[[], None]) -> None:
        """`listener()` runs after a write failed (flush hooks re-queue what they took)."""
        self._on_failure.append(listener)

    def add_settle_listener(self, listener: Callable[[dict[tuple[int, int], int]], None]) -> None:
        """`listener(grown)` runs when offsets held back after a failed fsync or barrier are
        published (`QueueOffsets.settle`: queue -> offsets it grew by), to wake long polls."""
        self._on_settled.append(listener)

    def submit(
        self,
        apply: Callable[[Batch, QueueOffsets], Any],
        *,
        sync: bool,
        committed: Callable[[Any], None] | None = None,
    ) -> asyncio.Future[Any]:
        """Queue a job; `apply(batch, offsets)` adds its changes and returns its result.

        `committed(result)`, when given, runs once the job's batch is durable and its
        offsets are published, before any future of the batch resolves: what must follow
        the commit at once (waking long polls) then runs in the flush's own callback, not a
        loop iteration later when the submitter resumes, and runs even if the submitter was
        cancelled meanwhile.

        `apply` and `committed` must not fail: callers check preconditions before submitting.
        """
        if self.refusal is not None:
            raise UnavailableError(f"writes are refused: {self.refusal}")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append(_Job(apply, sync, future, committed))
        self._schedule(loop)
        return future

    def request_flush(self) -> None:
        """Make sure a flush runs soon even with no job (for hooks' pending changes)."""
        self._schedule(asyncio.get_running_loop())

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._syncing:
            self._wanted = True
        elif not self._scheduled:
            self._scheduled = True
            loop.call_soon(self.flush)

    def close(self) -> None:
        """Stop the sync thread (after the last flush completed)."""
        self._sync_thread.close()

    def flush(self) -> None:
        """Write everything pending now, in one batch; a synced one completes after its fsync."""
        self._scheduled = False
        jobs, self._pending = self._pending, []
        try:
            batch = self._store.batch()
            self._batch_generation = batch.generation
            if (
                self._unsettled_in
                and batch.generation != self._unsettled_in
                and not self._store.read_only
            ):
                self._settle_reopened(batch.generation)
            for hook in self._flush_hooks:
                hook(batch)
            results = [job.apply(batch, self.offsets) for job in jobs]
            if len(batch) == 0:
                self.offsets.rollback()
                if self._unsynced or (batch.quorum and self.barrier is not None):
                    self._confirm(batch, jobs, results)
                    return
                self._resolve(jobs, results)
                return
            synced = any(job.sync for job in jobs)
            began = time.perf_counter()
            self._store.write(batch, sync=False)
        except PopMQError as exc:
            self._fail(jobs, exc)
            return
        barrier = self.barrier(batch, synced) if self.barrier is not None else None
        if barrier is not None:
            self._wait_barrier(barrier, jobs, results, began, synced=synced, quorum=batch.quorum)
            return
        if not synced:
            self._complete(jobs, results, began, synced=False)
            return
        self._sync(jobs, results, began)

    def _confirm(self, batch: Batch, jobs: list[_Job], results: list[Any]) -> None:
        """Answer jobs that wrote nothing only once what they may answer from earlier
        writes is as safe as their own write would have been.

        A repeated send answered as a duplicate writes nothing, yet acknowledges its first
        copy, which a failed fsync or a failed barrier may have left written (so readable)
        but neither durable nor replicated. After a failed fsync, an empty batch of synced
        jobs fsyncs the WAL (and fails if that fails) until a synced batch succeeds or the
        store reopens;
        with replication, an empty batch of sends waits for the followers to hold the last
        batch owed to them (`barrier` answers None at once when they do, the common case).
        """
        synced = self._unsynced and any(job.sync for job in jobs)
        barrier = self.barrier(batch, synced) if self.barrier is not None else None
        if barrier is not None:
            self._wait_barrier(
                barrier, jobs, results, time.perf_counter(), synced=synced, quorum=batch.quorum
            )
        elif synced:
            self._sync(jobs, results, time.perf_counter())
        else:
            self._resolve(jobs, results)

    def _sync(self, jobs: list[_Job], results: list[Any], began: float) -> None:
        """fsync the written batch, then complete its jobs (or fail them)."""
        if len(jobs) == 1 and not self._contended:
            # A lone writer: the loop has nothing else to do meanwhile, and the hand-off to
            # the sync thread and back costs more than the fsync itself (measured: a single
            # sequential producer ~20 % slower).
            try:
                self._store.sync_wal()
            except PopMQError as exc:
                self._sync_failed(jobs, exc, fsync_failed=True)
                return
            self._complete(jobs, results, began, synced=True)
            return
        self._syncing = True
        # The jobs' loop, the running one: asyncio.get_running_loop() costs a getpid
        # syscall on Python 3.11.
        self._sync_thread.sync(
            jobs[0].future.get_loop(), lambda error: self._synced(error, jobs, results, began)
        )

    def _wait_barrier(
        self,
        barrier: asyncio.Future[None],
        jobs: list[_Job],
        results: list[Any],
        began: float,
        *,
        synced: bool,
        quorum: bool,
    ) -> None:
        """Complete the batch once its fsync (if synced) and the barrier are both done.

        Both, even when one failed first: which of them failed decides what stays in doubt
        (`_unsynced`, `_unreplicated`), and a barrier still pending could yet fail.
        """
        self._syncing = True
        loop = asyncio.get_running_loop()
        waits: list[asyncio.Future[Any]] = [barrier]
        if synced:
            fsynced: asyncio.Future[None] = loop.create_future()
            self._sync_thread.sync(loop, lambda error: _settle(fsynced, error))
            waits.append(fsynced)
        done = asyncio.gather(*waits, return_exceptions=True)
        done.add_done_callback(
            lambda f: self._waited(f.result(), jobs, results, began, synced=synced, quorum=quorum)
        )

    def _waited(
        self,
        outcomes: list[Any],
        jobs: list[_Job],
        results: list[Any],
        began: float,
        *,
        synced: bool,
        quorum: bool,
    ) -> None:
        """The barrier (`outcomes[0]`) and the fsync (if any) are done: record what is in
        doubt, then complete or fail the batch."""
        replicated, *fsynced = outcomes
        fsync_error = fsynced[0] if fsynced and isinstance(fsynced[0], BaseException) else None
        if synced and fsync_error is None:
            # This fsync covered every write before it, whatever became of the barrier.
            self._unsynced = False
        if isinstance(replicated, BaseException):
            self._unreplicated = True
        elif quorum:
            # The in-sync followers (at least min_insync of them) hold this batch, and so
            # every batch before it: none is in doubt for want of replication any more. A
            # batch that is not a send's is acknowledged by whichever followers are in sync,
            # however few, so it proves nothing for the sends held back.
            self._unreplicated = False
        error = fsync_error or (replicated if isinstance(replicated, BaseException) else None)
        self._synced(
            error, jobs, results, began, synced=synced, fsync_failed=fsync_error is not None
        )

    def _synced(
        self,
        exc: BaseException | None,
        jobs: list[_Job],
        results: list[Any],
        began: float,
        *,
        synced: bool = True,
        fsync_failed: bool = True,
    ) -> None:
        self._syncing = False
        wanted, self._wanted = self._wanted, False
        # Writes arrived during this fsync: keep the next one off the loop too.
        self._contended = bool(self._pending)
        if exc is None:
            self._complete(jobs, results, began, synced=synced)
        else:
            # Store.sync_wal maps store errors already; anything else is a bug, but the jobs
            # still get an answer and later writes still flush.
            if not isinstance(exc, PopMQError):
                log.error("WAL sync failed unexpectedly", exc_info=exc)
                exc = OutcomeUnknownError(f"the store could not sync ({exc!r}); retry later")
            self._sync_failed(jobs, exc, fsync_failed=synced and fsync_failed)
        if wanted or self._pending:
            self._schedule(asyncio.get_running_loop())

    def _sync_failed(self, jobs: list[_Job], exc: PopMQError, *, fsync_failed: bool) -> None:
        # The batch may or may not survive a crash: its senders get the error and retry
        # (dedup makes the retry safe). Its offsets stay taken, so a later write never lands
        # on a key this batch may have written, and unpublished, so no reader is handed a
        # message the store may lose (and its offset with it) until the batch proves safe
        # or the store reopens (`_complete`, `_settle_reopened`).
        if fsync_failed:
            # Written, readable, perhaps not durable: a retry that finds it (and so writes
            # nothing) must not be answered before an fsync succeeds (`_confirm`).
            self._unsynced = True
        self.offsets.unsettle()
        if (fsync_failed or self.offsets.unsettled) and not self._unsettled_in:
            # The batch's own generation, not the store's now: a reopen that ran before
            # this answer came (a send's `check_room`) still counts as one after it.
            self._unsettled_in = self._batch_generation
        self._fail(jobs, exc)

    def _settle_reopened(self, generation: int) -> None:
        """The store reopened read-write since a batch's fsync failed or offsets were held
        back: it replayed its WAL (what a failed fsync lost is gone from it) and flushed it,
        so what it holds now is durable. Each held queue ends where the store's messages do;
        publish that and wake the long polls, unless replication is still in doubt (the
        sends held back then wait for a batch of sends the followers hold, `_waited`).
        (A read-only open after a failed reopen flushes nothing: it waits.)"""
        self._unsynced = False
        publish = not self._unreplicated
        grown = self.offsets.reload_unsettled(publish=publish, shipped=self.barrier is not None)
        self._unsettled_in = generation if self.offsets.unsettled else 0
        if grown:
            self._settled(grown)

    def _settled(self, grown: dict[tuple[int, int], int]) -> None:
        for listener in self._on_settled:
            listener(grown)

    def _complete(
        self, jobs: list[_Job], results: list[Any], began: float, *, synced: bool
    ) -> None:
        took = time.perf_counter() - began
        grown = self.offsets.commit()
        self.stats.batches += 1
        self.stats.jobs += len(jobs)
        if synced:
            # This fsync covered every write before it. (The store refuses to fsync after a
            # failed fsync until it reopens, `_settle_reopened`; this is for other failures.)
            self._unsynced = False
            self.stats.synced_batches += 1
        self.stats.batch_jobs.observe(len(jobs))
        self.stats.write_seconds[synced].observe(took)
        settled = None
        if self._unsettled_in and not self._unsynced and not self._unreplicated:
            # No failed fsync is in doubt any more (a synced batch succeeded since, short of
            # a reopen), nor a failed barrier (a batch of sends completed its own since):
            # the writes held back are as safe as this batch.
            self._unsettled_in = 0
            settled = self.offsets.settle()
        self._resolve(jobs, results)
        for listener in self._after_commit:
            listener(grown)
        if settled:
            self._settled(settled)

    def _fail(self, jobs: list[_Job], exc: PopMQError) -> None:
        self.offsets.rollback()
        self.stats.failed_batches += 1
        # A full disk fails every write until space returns: say so when the error changes
        # and then every 30 s, not for each of the background tasks' retries.
        self._failure_warning.warn("write failed: %s", exc)
        for on_failure in self._on_failure:
            on_failure()
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(exc)

    @staticmethod
    def _resolve(jobs: list[_Job], results: list[Any]) -> None:
        # Every job's `committed` first: a long poll it wakes runs before the submitters.
        # Indexed (`results` has one per job): compiled, a zip(..., strict=True) is a
        # builtins look-up and a keyword call, about 3,000 instructions each.
        for i, job in enumerate(jobs):
            committed = job.committed
            if committed is not None:
                committed(results[i])
        for i, job in enumerate(jobs):
            future = job.future
            if not future.done():
                future.set_result(results[i])
