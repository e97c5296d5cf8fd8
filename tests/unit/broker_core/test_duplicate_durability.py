"""A repeated send answered as a duplicate writes nothing, yet acknowledges its first copy:
never before that copy is durable (and, replicated, held by the in-sync followers), even
when the first copy's own fsync or replication failed after it was written (and so became
readable to the repeat's dedup lookup).

Real broker on a real store; the replicated cases use the real ReplicationLog as the
store's tap, with the follower's acknowledgements given by the test (as its stream would).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from popmq.broker.replication.log import ReplicationLog
from popmq.broker_core import Broker, BrokerConfig, StoreConfig
from popmq.broker_core.clock import Clock, ManualClock
from popmq.broker_core.errors import OutcomeUnknownError, PopMQError, UnavailableError
from popmq.broker_core.store import Store
from popmq.broker_core.types import NewMessage, SendResult
from tests.support.waiting import until
from tests.unit.conftest import OpenBroker, settle


def _send(broker: Broker, body: bytes) -> asyncio.Future[list[SendResult]]:
    return asyncio.ensure_future(broker.send([NewMessage("orders", body, message_id="M")]))


class _FailingFsync:
    """Installed as `store.sync_wal`: fails (logging "fsync failed") while `failing`, then
    syncs for real (logging "fsync"); the test adds its own events to `events`."""

    def __init__(self, store: Store) -> None:
        self.events: list[str] = []
        self.failing = True
        self._real_sync = store.sync_wal
        store.sync_wal = self  # type: ignore[method-assign]

    def __call__(self) -> None:
        if self.failing:
            self.events.append("fsync failed")
            raise OutcomeUnknownError("the store could not sync (injected)")
        self._real_sync()
        self.events.append("fsync")


def test_a_repeat_after_a_failed_fsync_is_answered_only_after_an_fsync_succeeds(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            fsync = _FailingFsync(broker.store)
            events = fsync.events
            with pytest.raises(OutcomeUnknownError):
                await broker.send([NewMessage("orders", b"first", message_id="M")])
            # Written, so the repeat finds it; not durable, so the repeat is not answered
            # OK while the fsync keeps failing.
            with pytest.raises(OutcomeUnknownError, match="could not sync"):
                await broker.send([NewMessage("orders", b"retry", message_id="M")])
            assert events == ["fsync failed", "fsync failed"]
            fsync.failing = False
            (retried,) = await broker.send([NewMessage("orders", b"retry", message_id="M")])
            events.append("answered")
            assert retried.duplicate and (retried.queue_id, retried.offset) == (0, 0)
            assert events[2:] == ["fsync", "answered"]
            # Nothing is in doubt any more: a further repeat costs no fsync.
            (again,) = await broker.send([NewMessage("orders", b"again", message_id="M")])
            assert again.duplicate and events[2:] == ["fsync", "answered"]
            stored = await broker.peek("orders", queue_id=0, max_messages=8)
            assert [m.record.body for m in stored] == [b"first"]

    asyncio.run(scenario())


def test_a_repeat_of_a_durable_send_is_answered_without_an_fsync(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            real_sync = broker.store.sync_wal
            syncs: list[int] = []

            def sync() -> None:
                syncs.append(1)
                real_sync()

            broker.store.sync_wal = sync  # type: ignore[method-assign]
            (first,) = await broker.send([NewMessage("orders", b"first", message_id="M")])
            assert not first.duplicate and len(syncs) == 1
            batches = broker.writer.stats.batches
            for _ in range(3):
                (repeat,) = await broker.send([NewMessage("orders", b"again", message_id="M")])
                assert repeat.duplicate and repeat.offset == first.offset
            assert len(syncs) == 1
            assert broker.writer.stats.batches == batches

    asyncio.run(scenario())


def _delayed(due_ms: int, body: bytes = b"first") -> list[NewMessage]:
    return [NewMessage("later", body, message_id="D", deliver_at_ms=due_ms)]


def test_a_fired_delayed_message_answers_a_repeat_only_once_its_fire_is_synced(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    """The fire rewrites the message's id entry, which answers a repeat of the send from
    then on: the fire's batch is fsynced like a send's, so neither a consumer nor a repeat
    is given the fired offset before it would survive a crash."""

    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("later", 1, message_type="delay")
            due = clock.now_ms() + 500
            await broker.send(_delayed(due))
            assert await broker.pop("g", "later", wait_s=0) == []  # the group exists
            fsync = _FailingFsync(broker.store)
            events = fsync.events
            clock.advance(500)
            await until(lambda: events, "the fire's batch to be fsynced", 10)
            assert await broker.pop("g", "later", wait_s=0) == []
            with pytest.raises(OutcomeUnknownError, match="could not sync"):
                await broker.send(_delayed(due + 1000, b"retry"))
            fsync.failing = False
            (repeat,) = await broker.send(_delayed(due + 1000, b"retry"))
            assert repeat.duplicate and (repeat.queue_id, repeat.offset) == (0, 0)
            (got,) = await broker.pop("g", "later", wait_s=0)
            assert (got.offset, got.record.body) == (0, b"first")

    asyncio.run(scenario())


def test_a_fired_delayed_message_is_visible_only_once_the_followers_hold_it(
    data_dir: Path, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with _shard(data_dir, clock) as shard:
            broker, log = shard.broker, shard.log
            due = clock.now_ms() + 500
            await broker.send(_delayed(due))
            assert await broker.pop("g", "later", wait_s=0) == []  # the group exists
            shard.acking.clear()
            written = log.lsn
            clock.advance(500)
            await until(lambda: log.lsn > written, "the fire written", 10)
            await settle()
            assert await broker.pop("g", "later", wait_s=0) == []
            repeat = asyncio.ensure_future(broker.send(_delayed(due + 1000, b"retry")))
            await settle()
            assert not repeat.done(), "a repeat was answered before r2 held the fire"
            shard.acking.set()
            (answer,) = await repeat
            assert answer.duplicate and answer.offset == 0
            (got,) = await broker.pop("g", "later", wait_s=5)
            assert (got.offset, got.record.body) == (0, b"first")

    asyncio.run(scenario())


def test_a_due_delayed_message_waits_while_too_few_followers_are_in_sync(
    data_dir: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused like a send, before anything is written: its timer stays, and it is
    delivered once a follower is back in sync (and holds the delivery)."""

    async def scenario() -> None:
        async with _shard(data_dir, clock) as shard:
            broker, log = shard.broker, shard.log
            due = clock.now_ms() + 500
            await broker.send(_delayed(due))
            assert await broker.pop("g", "later", wait_s=0) == []  # the group exists
            written = log.lsn
            log.disconnected(shard.r2, "killed")
            clock.advance(500)
            await until(
                lambda: "delayed-message delivery failed" in caplog.text, "the fire refused", 10
            )
            assert log.lsn == written, "the fire was written with too few in-sync followers"
            assert await broker.pop("g", "later", wait_s=0) == []
            r2 = log.connected("r2", written)
            log.acked(r2, written)
            await until(lambda: log.isr == {"r2"}, "r2 back in sync", 10)
            await until(lambda: log.lsn > written, "the fire written", 10)
            log.acked(r2, log.lsn)
            (got,) = await broker.pop("g", "later", wait_s=5)
            assert (got.offset, got.record.body) == (0, b"first")

    asyncio.run(scenario())


class _Shard:
    """A broker whose store's tap is a ReplicationLog with one in-sync follower r2, which
    acknowledges what the leader writes while `acking` is set."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.fence: str | None = None
        self.acking = asyncio.Event()
        self.acking.set()

    @property
    def log(self) -> ReplicationLog:
        log = self.broker.store.tap
        assert isinstance(log, ReplicationLog)
        return log

    async def follow(self) -> None:
        state = self.log.connected("r2", 0)
        self.r2 = state
        while True:
            await self.acking.wait()
            if state.acked < self.log.lsn:
                self.log.acked(state, self.log.lsn)
            await self.log.wait_grown(state.acked)


@asynccontextmanager
async def _shard(data_dir: Path, clock: Clock | None = None) -> AsyncIterator[_Shard]:
    shard: _Shard | None = None

    async def persist(isr: frozenset[str]) -> None:
        return None

    def tap(store: Store) -> ReplicationLog:
        return ReplicationLog(
            store,
            shard="s1",
            epoch=1,
            isr=("r2",),
            min_insync=1,
            buffer_bytes=1 << 20,
            lag_timeout_s=10.0,
            fenced=lambda: None if shard is None else shard.fence,
            persist=persist,
        )

    broker = Broker(BrokerConfig(store=StoreConfig(data_dir=data_dir)), tap=tap, clock=clock)
    shard = _Shard(broker)
    await broker.start()
    follower = asyncio.ensure_future(shard.follow())
    try:
        await broker.create_topic("orders", 1)
        await broker.create_topic("later", 1, message_type="delay")
        yield shard
    finally:
        follower.cancel()
        shard.log.fail_all("the test is over")  # what still waits for r2 fails
        await broker.close()


def test_a_repeat_after_the_followers_were_lost_waits_until_they_hold_the_first_copy(
    data_dir: Path,
) -> None:
    async def scenario() -> None:
        async with _shard(data_dir) as shard:
            log = shard.log
            shard.acking.clear()
            first = _send(shard.broker, b"first")
            await until(lambda: log.lsn > shard.r2.acked, "the send written", 10)
            written = log.lsn
            # r2's stream ends: the ISR drops below min_insync and the send's outcome is
            # unknown (it is written here, readable, but not replicated).
            log.disconnected(shard.r2, "killed")
            with pytest.raises(OutcomeUnknownError, match="lost in-sync followers"):
                await first
            # r2 comes back without the batch, and joins at once (the batch is young).
            r2 = log.connected("r2", written - 1)
            log.acked(r2, written - 1)
            await until(lambda: log.isr == {"r2"}, "r2 back in sync", 10)
            retry = _send(shard.broker, b"retry")
            await settle()
            assert not retry.done(), "a repeat was answered before r2 held the first copy"
            log.acked(r2, written)
            (result,) = await retry
            assert result.duplicate and result.offset == 0

    asyncio.run(scenario())


def test_a_repeat_after_the_leader_was_fenced_waits_for_the_first_copys_replication(
    data_dir: Path,
) -> None:
    async def scenario() -> None:
        async with _shard(data_dir) as shard:
            log = shard.log
            shard.acking.clear()
            first = _send(shard.broker, b"first")
            await until(lambda: log.lsn > shard.r2.acked, "the send written", 10)
            written = log.lsn
            shard.fence = "its leader lease lapsed"
            log.settle()
            with pytest.raises(OutcomeUnknownError, match="lost its leadership"):
                await first
            # Fenced, a repeat is refused before anything; once the lease is back it is
            # answered only when r2 holds the first copy.
            with pytest.raises(UnavailableError, match="no longer its leader"):
                await _send(shard.broker, b"refused")
            shard.fence = None
            retry = _send(shard.broker, b"retry")
            await settle()
            assert not retry.done(), "a repeat was answered before r2 held the first copy"
            # Fenced again while it waits: it is refused, not answered.
            shard.fence = "it lost the election"
            log.settle()
            with pytest.raises(OutcomeUnknownError, match="lost its leadership"):
                await retry
            shard.fence = None
            shard.acking.set()
            log.acked(shard.r2, written)
            (result,) = await _send(shard.broker, b"retry")
            assert result.duplicate and result.offset == 0

    asyncio.run(scenario())


def test_a_repeat_of_a_replicated_send_is_answered_without_waiting(data_dir: Path) -> None:
    async def scenario() -> None:
        async with _shard(data_dir) as shard:
            (first,) = await _send(shard.broker, b"first")
            lsn = shard.log.lsn
            shard.acking.clear()  # the follower is slow now: a repeat need not wait for it
            (repeat,) = await asyncio.wait_for(_send(shard.broker, b"again"), 10)
            assert repeat.duplicate and repeat.offset == first.offset
            assert shard.log.lsn == lsn  # nothing written

    asyncio.run(scenario())


@pytest.mark.parametrize("message_id", ["M", "N"], ids=["repeat", "new send"])
def test_after_leadership_ends_a_send_is_refused_and_the_broker_closes(
    data_dir: Path, message_id: str
) -> None:
    """Once the leader's log failed every wait (its leadership ended while it stops, the
    lease still held), nothing settles a wait made later: a repeat (or a new send) must be
    refused at once, not wait forever and hold the writer and `close` with it."""

    async def scenario() -> None:
        async with _shard(data_dir) as shard:
            log, broker = shard.log, shard.broker
            shard.acking.clear()
            log.close_streams()  # stopping: its follower stays in the ISR when its stream ends
            first = asyncio.ensure_future(broker.send([NewMessage("orders", b"a", message_id="M")]))
            await until(lambda: log.lsn > shard.r2.acked, "the first copy written", 10)
            log.fail_all("leadership ended (it stopped)")
            with pytest.raises(OutcomeUnknownError):
                await first
            log.disconnected(shard.r2, "stream ended")
            with pytest.raises(PopMQError, match=r"no longer its leader|lost its leadership"):
                await asyncio.wait_for(
                    broker.send([NewMessage("orders", b"b", message_id=message_id)]), 30
                )
            await asyncio.wait_for(broker.close(), 30)

    asyncio.run(scenario())


def test_a_lookup_of_stored_copies_counts_only_durable_ones(open_broker: OpenBroker) -> None:
    """What a broker reconciling its crash tail asks (`stored_only`): a copy whose fsync
    failed is readable, and a repeat would wait for it, but it is not held until an fsync
    succeeds."""

    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            fsync = _FailingFsync(broker.store)
            with pytest.raises(OutcomeUnknownError):
                await broker.send([NewMessage("orders", b"first", message_id="M")])
            assert broker.lookup_sends("orders", [("M", "")]) == [True]
            with pytest.raises(UnavailableError, match="may not be durable"):
                broker.lookup_sends("orders", [("M", "")], stored_only=True)
            fsync.failing = False
            await broker.send([NewMessage("orders", b"other", message_id="N")])  # synced
            assert broker.lookup_sends("orders", [("M", "")], stored_only=True) == [True]

    asyncio.run(scenario())


def test_a_lookup_of_stored_copies_counts_a_replicated_one_only_once_the_followers_hold_it(
    data_dir: Path,
) -> None:
    async def scenario() -> None:
        async with _shard(data_dir) as shard:
            broker, log = shard.broker, shard.log
            shard.acking.clear()
            first = _send(broker, b"first")
            await until(lambda: log.lsn > shard.r2.acked, "the send written", 10)
            written = log.lsn
            # Written and readable, its wait for r2 in flight: a repeat would wait for it.
            assert broker.lookup_sends("orders", [("M", "")]) == [True]
            with pytest.raises(UnavailableError, match="being stored now"):
                broker.lookup_sends("orders", [("M", "")], stored_only=True)
            log.disconnected(shard.r2, "killed")
            with pytest.raises(OutcomeUnknownError):
                await first
            # Its wait failed: it may be on this replica alone.
            with pytest.raises(UnavailableError, match="may not be durable"):
                broker.lookup_sends("orders", [("M", "")], stored_only=True)
            r2 = log.connected("r2", written - 1)
            log.acked(r2, written - 1)
            await until(lambda: log.isr == {"r2"}, "r2 back in sync", 10)
            log.acked(r2, written)
            await until(lambda: not broker.writer.in_doubt(), "r2 vouching for the copy", 10)
            assert broker.lookup_sends("orders", [("M", "")], stored_only=True) == [True]

    asyncio.run(scenario())
