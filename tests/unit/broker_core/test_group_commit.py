"""Group commit: one batch per loop iteration, dense offsets, all-or-nothing failures."""

from __future__ import annotations

import asyncio
import errno
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from popmq.broker_core import jobs, keys
from popmq.broker_core.errors import OutcomeUnknownError, UnavailableError
from popmq.broker_core.group_commit import GroupCommitWriter, QueueOffsets
from popmq.broker_core.store import Batch, Store
from tests.support.waiting import until

TOPIC, QUEUE = 1, 0


def _append(body: bytes) -> Callable[[Batch, QueueOffsets], int]:
    """A job that stores one message in (TOPIC, QUEUE) and returns its offset."""

    def apply(batch: Batch, offsets: QueueOffsets) -> int:
        offset = offsets.allocate(TOPIC, QUEUE)
        batch.put("messages", keys.message_key(TOPIC, QUEUE, offset), body)
        return offset

    return apply


def _stored(store: Store) -> list[tuple[int, bytes]]:
    start, end = keys.topic_range(TOPIC)
    return [(keys.message_offset(k), v) for k, v in store.scan("messages", start, end)]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(tmp_path / "db")
    yield store
    store.close()


def test_submits_of_one_loop_iteration_are_one_synced_batch(store: Store) -> None:
    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        futures = [writer.submit(_append(b"m%d" % i), sync=True) for i in range(50)]
        offsets = await asyncio.gather(*futures)
        assert offsets == list(range(50))
        assert (writer.stats.batches, writer.stats.jobs, writer.stats.synced_batches) == (1, 50, 1)

    asyncio.run(scenario())
    assert _stored(store) == [(i, b"m%d" % i) for i in range(50)]


def test_submits_of_separate_iterations_get_dense_offsets_in_commit_order(store: Store) -> None:
    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        first = await asyncio.gather(*(writer.submit(_append(b"a"), sync=False) for _ in range(3)))
        second = await writer.submit(_append(b"b"), sync=False)
        third = await asyncio.gather(*(writer.submit(_append(b"c"), sync=True) for _ in range(2)))
        assert (first, second, third) == ([0, 1, 2], 3, [4, 5])
        assert writer.stats.batches == 3
        assert writer.stats.synced_batches == 1
        assert writer.offsets.max_offset(TOPIC, QUEUE) == 6

    asyncio.run(scenario())
    assert [offset for offset, _ in _stored(store)] == list(range(6))


def test_offsets_continue_after_reopening_the_store(tmp_path: Path) -> None:
    async def fill(store: Store, count: int) -> list[int]:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        return list(
            await asyncio.gather(*(writer.submit(_append(b"x"), sync=True) for _ in range(count)))
        )

    store = Store(tmp_path / "db")
    assert asyncio.run(fill(store, 3)) == [0, 1, 2]
    store.close()
    store = Store(tmp_path / "db")
    try:
        assert asyncio.run(fill(store, 2)) == [3, 4]
    finally:
        store.close()


def test_failed_write_fails_every_job_rolls_offsets_back_and_calls_failure_listeners(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = store.write
    calls: list[int] = []

    def write_failing_once(batch: Batch, *, sync: bool) -> None:
        calls.append(len(batch))
        if len(calls) == 1:
            raise UnavailableError("the store could not write (injected)")
        real_write(batch, sync=sync)

    monkeypatch.setattr(store, "write", write_failing_once)

    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        failures: list[str] = []
        grown: list[list[tuple[int, int]]] = []
        writer.add_failure_listener(lambda: failures.append("failed"))
        writer.add_commit_listener(grown.append)

        futures = [writer.submit(_append(b"lost"), sync=True) for _ in range(3)]
        results = await asyncio.gather(*futures, return_exceptions=True)
        assert all(isinstance(r, UnavailableError) for r in results), results
        assert failures == ["failed"]
        assert grown == []
        assert writer.stats.failed_batches == 1
        assert writer.stats.batches == 0
        assert writer.offsets.max_offset(TOPIC, QUEUE) == 0

        again = await asyncio.gather(
            *(writer.submit(_append(b"kept"), sync=True) for _ in range(2))
        )
        assert again == [0, 1]  # the failed batch's offsets are reused: no hole
        assert grown == [[(TOPIC, QUEUE)]]
        assert failures == ["failed"]

    asyncio.run(scenario())
    assert calls == [3, 2]
    assert _stored(store) == [(0, b"kept"), (1, b"kept")]


def test_flush_hooks_ride_along_and_commit_listeners_see_grown_queues(store: Store) -> None:
    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        grown: list[list[tuple[int, int]]] = []
        writer.add_flush_hook(lambda batch: batch.put("meta", b"hook", b"ran"))
        writer.add_commit_listener(grown.append)
        await writer.submit(_append(b"x"), sync=False)
        assert grown == [[(TOPIC, QUEUE)]]

    asyncio.run(scenario())
    assert store.get("meta", b"hook") == b"ran"


def test_job_that_writes_nothing_resolves_without_a_store_write(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_write(batch: Batch, *, sync: bool) -> None:
        raise AssertionError("an empty batch must not be written")

    monkeypatch.setattr(store, "write", no_write)

    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        assert await writer.submit(lambda batch, offsets: "done", sync=True) == "done"

    asyncio.run(scenario())


def test_write_to_a_closed_store_fails_as_unavailable(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    store.close()

    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        future = writer.submit(lambda batch, offsets: batch.put("meta", b"k", b"v"), sync=True)
        with pytest.raises(UnavailableError, match="closed"):
            await asyncio.wait_for(future, 1)

    asyncio.run(scenario())


def test_a_synced_batch_completes_after_its_fsync_and_later_jobs_form_the_next_batch(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fsync runs off the loop: while it is in flight nothing of its batch is visible,
    the loop keeps running, and jobs submitted meanwhile go out together afterwards."""
    release = threading.Event()
    syncing = threading.Event()
    real_sync = store.sync_wal

    def slow_sync() -> None:
        syncing.set()
        assert release.wait(10)
        real_sync()

    monkeypatch.setattr(store, "sync_wal", slow_sync)

    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        first = [writer.submit(_append(b"a"), sync=True) for _ in range(2)]
        # The loop is free while the fsync waits: this coroutine runs meanwhile.
        assert await asyncio.to_thread(syncing.wait, 10)
        later = [writer.submit(_append(b"b"), sync=True) for _ in range(5)]
        await asyncio.sleep(0.05)
        assert not any(f.done() for f in first + later)
        assert writer.offsets.max_offset(TOPIC, QUEUE) == 0  # not visible before the fsync
        assert writer.stats.batches == 0
        release.set()
        assert await asyncio.gather(*first) == [0, 1]
        assert await asyncio.gather(*later) == [2, 3, 4, 5, 6]
        assert (writer.stats.batches, writer.stats.synced_batches) == (2, 2)
        assert writer.offsets.max_offset(TOPIC, QUEUE) == 7
        writer.close()

    asyncio.run(scenario())
    assert [offset for offset, _ in _stored(store)] == list(range(7))


def test_a_lone_job_is_synced_on_the_loop_and_contention_moves_the_fsync_off_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One sequential writer gains nothing from the sync thread (the hand-off costs more
    than the fsync); concurrent writers do."""
    threads: list[str] = []
    real_sync = store.sync_wal

    def recording_sync() -> None:
        threads.append(threading.current_thread().name)
        real_sync()

    monkeypatch.setattr(store, "sync_wal", recording_sync)

    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        for _ in range(3):
            await writer.submit(_append(b"alone"), sync=True)
        await asyncio.gather(*(writer.submit(_append(b"together"), sync=True) for _ in range(4)))
        writer.close()

    asyncio.run(scenario())
    main = threading.main_thread().name
    assert threads[:3] == [main] * 3
    assert threads[3].startswith("popmq-wal-sync")


def test_a_failed_fsync_fails_its_jobs_and_later_writes_never_reuse_its_offsets(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a failed fsync the batch may or may not be stored: its senders get the error
    (a retry is deduplicated) and offsets move past it, so nothing overwrites its keys."""
    real_sync = store.sync_wal
    calls: list[int] = []

    def sync_failing_once() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise UnavailableError("the store could not sync (injected)")
        real_sync()

    monkeypatch.setattr(store, "sync_wal", sync_failing_once)

    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        failures: list[str] = []
        writer.add_failure_listener(lambda: failures.append("failed"))
        results = await asyncio.gather(
            *(writer.submit(_append(b"unknown"), sync=True) for _ in range(2)),
            return_exceptions=True,
        )
        assert all(isinstance(r, UnavailableError) for r in results), results
        assert failures == ["failed"] and writer.stats.failed_batches == 1
        assert await writer.submit(_append(b"kept"), sync=True) == 2
        writer.close()

    asyncio.run(scenario())
    assert _stored(store) == [(0, b"unknown"), (1, b"unknown"), (2, b"kept")]


def test_offsets_of_a_failed_fsync_and_of_unsynced_writes_after_it_are_published_by_an_fsync(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Readers see up to `max_offset`: never a batch whose fsync failed, nor an unsynced
    batch past it in the same queue, until a synced batch succeeds (its fsync covers
    them); queues with nothing in doubt go on publishing unsynced batches at once."""
    real_sync = store.sync_wal
    failing = False

    def sync() -> None:
        if failing:
            raise OutcomeUnknownError("the store could not sync (injected)")
        real_sync()

    monkeypatch.setattr(store, "sync_wal", sync)

    def other_queue(batch: Batch, offsets: QueueOffsets) -> int:
        offset = offsets.allocate(TOPIC, QUEUE + 1)
        batch.put("messages", keys.message_key(TOPIC, QUEUE + 1, offset), b"other")
        return offset

    async def scenario() -> None:
        nonlocal failing
        writer = GroupCommitWriter(store, QueueOffsets(store))
        settled: list[dict[tuple[int, int], int]] = []
        writer.add_settle_listener(settled.append)
        assert await writer.submit(_append(b"durable"), sync=True) == 0
        failing = True
        with pytest.raises(OutcomeUnknownError):
            await writer.submit(_append(b"ghost"), sync=True)
        assert writer.offsets.max_offset(TOPIC, QUEUE) == 1
        assert await writer.submit(_append(b"unsynced"), sync=False) == 2
        assert writer.offsets.max_offset(TOPIC, QUEUE) == 1
        assert await writer.submit(other_queue, sync=False) == 0
        assert writer.offsets.max_offset(TOPIC, QUEUE + 1) == 1
        assert settled == []
        failing = False
        assert await writer.submit(_append(b"synced"), sync=True) == 3
        assert writer.offsets.max_offset(TOPIC, QUEUE) == 4
        assert settled == [{(TOPIC, QUEUE): 3}]
        writer.close()

    asyncio.run(scenario())
    assert _stored(store)[:4] == [(0, b"durable"), (1, b"ghost"), (2, b"unsynced"), (3, b"synced")]


def test_committed_runs_after_the_fsync_with_offsets_published_before_any_future_resolves(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_sync = store.sync_wal
    seen: list[str] = []

    def recording_sync() -> None:
        real_sync()
        seen.append("fsync")

    monkeypatch.setattr(store, "sync_wal", recording_sync)

    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))

        def committed(offset: int) -> None:
            published = writer.offsets.max_offset(TOPIC, QUEUE)
            resolved = sum(f.done() for f in futures)
            seen.append(f"committed {offset}: max offset {published}, {resolved} resolved")

        futures = [
            writer.submit(_append(b"m%d" % i), sync=True, committed=committed) for i in range(2)
        ]
        assert await asyncio.gather(*futures) == [0, 1]
        writer.close()

    asyncio.run(scenario())
    assert seen == [
        "fsync",
        "committed 0: max offset 2, 0 resolved",
        "committed 1: max offset 2, 0 resolved",
    ]


def test_committed_does_not_run_for_a_batch_whose_fsync_failed(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_sync() -> None:
        raise UnavailableError("the store could not sync (injected)")

    monkeypatch.setattr(store, "sync_wal", failing_sync)
    committed: list[int] = []

    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        with pytest.raises(UnavailableError):
            await writer.submit(_append(b"unknown"), sync=True, committed=committed.append)
        writer.close()

    asyncio.run(scenario())
    assert committed == []


def test_a_flush_requested_during_an_fsync_runs_after_it_without_a_job_to_carry_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a flush hook holds (acks' consumer offsets, persisted checkpoints) asks for a
    flush with no job of its own: asked while an fsync is in flight, that flush still comes
    once the fsync is done, not only when some later job happens to be submitted."""
    release = threading.Event()
    syncing = threading.Event()
    real_sync = store.sync_wal

    def slow_sync() -> None:
        syncing.set()
        assert release.wait(10)
        real_sync()

    monkeypatch.setattr(store, "sync_wal", slow_sync)
    dirty: list[bytes] = []

    def hook(batch: Batch) -> None:
        for key in dirty:
            batch.put("meta", key, b"written")
        dirty.clear()

    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        writer.add_flush_hook(hook)
        first = [writer.submit(_append(b"a"), sync=True) for _ in range(2)]
        assert await asyncio.to_thread(syncing.wait, 10)
        dirty.append(b"acked-offset")
        writer.request_flush()
        release.set()
        assert await asyncio.gather(*first) == [0, 1]
        await until(
            lambda: store.get("meta", b"acked-offset") == b"written",
            "the flush requested during the fsync",
            10.0,
        )
        writer.close()

    asyncio.run(scenario())


def test_closing_the_writer_during_an_fsync_still_answers_its_batch_and_refuses_later_ones(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() waits for the fsync in flight, whose jobs complete; a batch that would go to
    the sync thread after close fails (written, never synced), never left waiting."""
    release = threading.Event()
    syncing = threading.Event()
    real_sync = store.sync_wal

    def slow_sync() -> None:
        syncing.set()
        assert release.wait(10)
        real_sync()

    monkeypatch.setattr(store, "sync_wal", slow_sync)

    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        first = [writer.submit(_append(b"a"), sync=True) for _ in range(2)]
        assert await asyncio.to_thread(syncing.wait, 10)
        release.set()
        writer.close()
        assert await asyncio.gather(*first) == [0, 1]
        after = [writer.submit(_append(b"b"), sync=True) for _ in range(2)]
        for job in after:
            with pytest.raises(OutcomeUnknownError, match="closed before this write was synced"):
                await asyncio.wait_for(job, 5)

    asyncio.run(scenario())
    assert [offset for offset, _ in _stored(store)][:2] == [0, 1]


# -- what a failed barrier or a failed fsync leaves in doubt ----------------------------------


def _send(body: bytes) -> Callable[[Batch, QueueOffsets], int]:
    """`_append` as a send's job: its batch waits for the in-sync followers (`quorum`)."""
    append = _append(body)

    def apply(batch: Batch, offsets: QueueOffsets) -> int:
        batch.quorum = True
        return append(batch, offsets)

    return apply


def _create_group(batch: Batch, offsets: QueueOffsets) -> None:
    """A synced job that is no send's (a group created, as a pop of a new group does)."""
    batch.put("meta", b"group", b"billing")


class _Followers:
    """A writer's barrier as ReplicationLog.barrier answers it: a written batch waits for
    the followers when it is synced or a send's, and the wait fails while `failing`
    (the in-sync followers dropped below min_insync). `waits` records each wait asked."""

    def __init__(self) -> None:
        self.failing = False
        self.waits: list[str] = []

    def barrier(self, batch: Batch, synced: bool) -> asyncio.Future[None] | None:
        if batch.lsn == 0 and not batch.quorum and not synced:
            return None
        if not (synced or batch.quorum):
            return None
        self.waits.append("sends" if batch.quorum else "synced")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.failing:
            future.set_exception(OutcomeUnknownError("too few followers in sync (test)"))
        else:
            future.set_result(None)
        return future


def _failing_through_store(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fail the store's next fsync as an EIO does: the store refuses writes and fsyncs until
    it reopens. Returns the fsyncs' events."""
    real_sync = store.sync_wal
    events: list[str] = []

    def sync() -> None:
        if not events:
            events.append("fsync failed")
            raise store._failed("sync", OSError(errno.EIO, "Input/output error"))
        real_sync()
        events.append("fsync")

    monkeypatch.setattr(store, "sync_wal", sync)
    return events


async def _reopened(store: Store, generation: int) -> None:
    """Wait until the store reopened read-write (it tries at most every half second), as a
    send's `check_room` or the writer's next batch makes it."""
    await until(
        lambda: store.batch().generation > generation and not store.read_only,
        "the store reopened",
        10,
    )


def test_a_failed_barrier_does_not_hide_sends_acknowledged_after_the_followers_came_back(
    store: Store,
) -> None:
    """flush = async with replication: a batch of sends that also carries a synced job (a
    group created in the same flush) fails its barrier; its fsync succeeded, so only its
    replication is in doubt, and the next batch of sends the followers hold settles it."""

    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        followers = _Followers()
        writer.barrier = followers.barrier
        assert await writer.submit(_send(b"a"), sync=False) == 0
        followers.failing = True
        ghost = writer.submit(_send(b"ghost"), sync=False)
        group = writer.submit(_create_group, sync=True)
        for future in (ghost, group):
            with pytest.raises(OutcomeUnknownError):
                await future
        assert writer.offsets.max_offset(TOPIC, QUEUE) == 1
        followers.failing = False
        acked = [await writer.submit(_send(b"acked %d" % i), sync=False) for i in range(3)]
        assert acked == [2, 3, 4]
        assert writer.offsets.max_offset(TOPIC, QUEUE) == 5
        writer.close()

    asyncio.run(scenario())


def test_sends_held_back_by_a_failed_barrier_wait_for_a_batch_of_sends_the_followers_hold(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither a batch that waited for no follower (an ack's), nor a synced batch that is
    no send's (the followers in sync acknowledge it however few they are), nor a reopen of
    the store after an unrelated failed fsync shows that the followers hold the sends."""
    events = _failing_through_store(store, monkeypatch)
    events.append("no failure yet")

    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        followers = _Followers()
        writer.barrier = followers.barrier
        followers.failing = True
        with pytest.raises(OutcomeUnknownError):
            await writer.submit(_send(b"ghost"), sync=False)
        followers.failing = False
        waits = len(followers.waits)
        await writer.submit(lambda batch, _: batch.put("offsets", b"acked", b"1"), sync=False)
        assert len(followers.waits) == waits, "the ack's batch waited for the followers"
        assert writer.offsets.max_offset(TOPIC, QUEUE) == 0
        await writer.submit(_create_group, sync=True)
        assert followers.waits[-1] == "synced"
        assert writer.offsets.max_offset(TOPIC, QUEUE) == 0
        # An fsync fails through the store, which then reopens.
        events.clear()
        generation = store.generation
        with pytest.raises(OutcomeUnknownError):
            await writer.submit(_create_group, sync=True)
        await _reopened(store, generation)
        await writer.submit(lambda batch, _: batch.put("offsets", b"acked", b"2"), sync=False)
        assert writer.offsets.max_offset(TOPIC, QUEUE) == 0
        assert await writer.submit(_send(b"after"), sync=False) == 1
        assert followers.waits[-1] == "sends"
        assert writer.offsets.max_offset(TOPIC, QUEUE) == 2
        writer.close()

    asyncio.run(scenario())
    assert _stored(store) == [(0, b"ghost"), (1, b"after")]


def test_a_synced_batch_whose_barrier_failed_still_ends_an_earlier_fsyncs_doubt(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its own fsync succeeded and covered every write before it: a repeat answered after
    it needs no fsync of its own, though the batch's barrier failed."""
    real_sync = store.sync_wal
    events: list[str] = []

    def sync() -> None:
        if not events:
            events.append("fsync failed")
            raise UnavailableError("the store could not sync (injected)")
        real_sync()
        events.append("fsync")

    monkeypatch.setattr(store, "sync_wal", sync)

    def barrier(batch: Batch, synced: bool) -> asyncio.Future[None] | None:
        if len(batch) == 0:
            return None  # a repeat: the followers hold what it answers from
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_exception(OutcomeUnknownError("too few followers in sync (test)"))
        return future

    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        with pytest.raises(UnavailableError):
            await writer.submit(_append(b"unsynced"), sync=True)
        writer.barrier = barrier
        with pytest.raises(OutcomeUnknownError):
            await writer.submit(_append(b"unreplicated"), sync=True)
        assert events == ["fsync failed", "fsync"]
        await writer.submit(jobs.confirm, sync=True)
        assert events == ["fsync failed", "fsync"], "the repeat was fsynced again"
        writer.close()

    asyncio.run(scenario())


def test_a_reopen_before_a_failed_batch_is_answered_still_publishes_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch waits for its fsync and its barrier both; the store may reopen (a send's
    `check_room`) after the fsync failed and before the barrier answers. That reopen comes
    after the failure all the same: the next batch, unsynced (flush = async), finds it and
    publishes what the store holds."""
    events = _failing_through_store(store, monkeypatch)

    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        replicated: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        barriers = [replicated]
        writer.barrier = lambda batch, synced: barriers.pop() if barriers else None
        generation = store.generation
        ghost = writer.submit(_send(b"ghost"), sync=True)
        await until(lambda: events == ["fsync failed"], "the failed fsync", 10)
        await _reopened(store, generation)
        assert not ghost.done()
        replicated.set_result(None)
        with pytest.raises(OutcomeUnknownError):
            await ghost
        assert await writer.submit(_append(b"after"), sync=False) == 1
        assert writer.offsets.max_offset(TOPIC, QUEUE) == 2
        writer.close()

    asyncio.run(scenario())


def test_a_topic_deleted_while_its_batch_is_in_doubt_leaves_the_other_queues_to_settle(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = GroupCommitWriter(store, QueueOffsets(store))
    real_sync = store.sync_wal
    failing = True

    def sync() -> None:
        if failing:
            # The topic is deleted while the fsync runs, and then the fsync fails.
            writer.offsets.forget_topic(TOPIC)
            raise OutcomeUnknownError("the store could not sync (injected)")
        real_sync()

    monkeypatch.setattr(store, "sync_wal", sync)

    def to_queue(topic: int, body: bytes) -> Callable[[Batch, QueueOffsets], int]:
        def apply(batch: Batch, offsets: QueueOffsets) -> int:
            offset = offsets.allocate(topic, QUEUE)
            batch.put("messages", keys.message_key(topic, QUEUE, offset), body)
            return offset

        return apply

    def both_topics(batch: Batch, offsets: QueueOffsets) -> None:
        to_queue(TOPIC, b"ghost")(batch, offsets)
        to_queue(TOPIC + 1, b"ghost")(batch, offsets)

    async def scenario() -> None:
        nonlocal failing
        with pytest.raises(OutcomeUnknownError):
            await writer.submit(both_topics, sync=True)
        failing = False
        other = writer.submit(to_queue(TOPIC + 1, b"after"), sync=True)
        assert await asyncio.wait_for(other, 10) == 1
        assert writer.offsets.max_offset(TOPIC + 1, QUEUE) == 2
        writer.close()

    asyncio.run(scenario())


def test_settling_skips_the_queues_of_a_topic_deleted_meanwhile(store: Store) -> None:
    offsets = QueueOffsets(store)
    offsets.allocate(TOPIC, QUEUE)
    offsets.allocate(TOPIC + 1, QUEUE)
    offsets.forget_topic(TOPIC)  # while the batch's fsync is in flight
    offsets.unsettle()  # the fsync failed
    assert offsets.settle() == {(TOPIC + 1, QUEUE): 1}
    assert offsets.max_offset(TOPIC + 1, QUEUE) == 1
