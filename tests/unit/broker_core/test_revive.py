"""Revive's durability rules (docs/durability.md), one test each."""

from __future__ import annotations

import asyncio

from popmq.broker_core import keys
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import PopConfig
from popmq.broker_core.errors import UnavailableError
from popmq.broker_core.pop.revive import RETRY_DELAY_MS
from popmq.broker_core.store import Store
from popmq.broker_core.types import NewMessage
from tests.support.waiting import until
from tests.unit.conftest import OpenBroker, settle

_LONG_BUFFER = PopConfig(ck_buffer_time_s=600, ck_persist_ahead_s=1)


def _persisted_ids(store: Store) -> set[int]:
    return {keys.decode_u64(k) for k, _ in store.scan("checkpoints", b"", b"\xff" * 9)}


def test_unacked_message_is_visible_again_at_its_deadline_and_not_before(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(pop=_LONG_BUFFER, clock=clock) as broker:
            await broker.create_topic("t", 1)
            await broker.send([NewMessage("t", b"x")])
            (first,) = await broker.pop("g", "t", invisible_s=1, wait_s=0)
            held = asyncio.create_task(broker.pop("g", "t", invisible_s=30, wait_s=5))
            clock.advance(999)
            await settle()
            assert not held.done()
            clock.advance(1)  # the deadline: the revive wakes the held pop
            (again,) = await held
            assert again.delivery_attempt == 2
            assert again.record.body == b"x"
            assert clock.now_ms() == first.invisible_until_ms

    asyncio.run(scenario())


def test_a_failed_revive_write_leaves_the_checkpoint_and_no_copy_then_revives_once(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(pop=_LONG_BUFFER, clock=clock) as broker:
            await broker.create_topic("t", 1)
            await broker.send([NewMessage("t", b"x")])
            await broker.pop("g", "t", invisible_s=1, wait_s=0)
            real_write = broker.store.write
            failed = []

            def failing_once(batch, *, sync):  # type: ignore[no-untyped-def]
                if not failed:
                    failed.append(True)
                    raise UnavailableError("injected I/O error")
                return real_write(batch, sync=sync)

            broker.store.write = failing_once  # type: ignore[method-assign]
            clock.advance(1000)  # the deadline
            await until(lambda: bool(failed), "the injected write failure", 5.0)
            retry = broker.catalog.retry_topics[(1, 1)]
            assert broker.offsets.max_offset(retry.topic_id, 0) == 0  # no copy written
            assert broker.live_checkpoints == 1  # still owed by its checkpoint
            broker.store.write = real_write  # type: ignore[method-assign]
            clock.advance(RETRY_DELAY_MS)  # the revive is tried again a second later
            (again,) = await broker.pop("g", "t", invisible_s=30, wait_s=5)
            assert (again.record.body, again.delivery_attempt) == (b"x", 2)
            assert broker.offsets.max_offset(retry.topic_id, 0) == 1  # exactly one copy

    asyncio.run(scenario())


def test_recovery_reads_no_message_records_however_many_are_stored(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker(pop=_LONG_BUFFER) as broker:
            await broker.create_topic("t", 4)
            for _ in range(20):
                await broker.send([NewMessage("t", b"m" * 100) for _ in range(500)])
            await broker.pop("g", "t", max_messages=8, invisible_s=600, wait_s=0)
        reads: list[str] = []
        real_get, real_scan = Store.get, Store.scan

        def counting_get(self, family, key):  # type: ignore[no-untyped-def]
            reads.append(family)
            return real_get(self, family, key)

        def counting_scan(self, family, start, end):  # type: ignore[no-untyped-def]
            for item in real_scan(self, family, start, end):
                reads.append(family)
                yield item

        Store.get = counting_get  # type: ignore[method-assign]
        Store.scan = counting_scan  # type: ignore[method-assign]
        try:
            async with open_broker(pop=_LONG_BUFFER) as broker:
                assert broker.live_checkpoints >= 1
                message_reads = reads.count("messages")
        finally:
            Store.get = real_get  # type: ignore[method-assign]
            Store.scan = real_scan  # type: ignore[method-assign]
        # 10,000 stored messages; recovery touches at most one key per queue to find starts.
        assert message_reads <= 4 * 2

    asyncio.run(scenario())


def test_a_revive_storm_is_moved_in_small_chunks_each_message_once(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    """Chunks keep the loop free for pops during a storm (bench.revive_lag measures it)."""

    async def scenario() -> None:
        async with open_broker(pop=_LONG_BUFFER, clock=clock) as broker:
            await broker.create_topic("t", 2)
            await broker.send([NewMessage("t", b"%d" % i) for i in range(1000)])
            popped = 0
            while popped < 1000:
                got = await broker.pop("g", "t", max_messages=32, invisible_s=1, wait_s=0)
                popped += len(got)
            chunks: list[int] = []
            real_revive = broker._reviver.revive

            async def counting_revive(due):  # type: ignore[no-untyped-def]
                chunks.append(sum(len(ck.unresolved()) for ck in due))
                await real_revive(due)

            broker._reviver.revive = counting_revive  # type: ignore[method-assign]
            clock.advance(1000)  # every delivery's deadline at once
            await until(
                lambda: broker.stats.revived[("g", "t")] == 1000, "1000 messages revived", 10
            )
            assert sum(chunks) == 1000
            # A chunk of ~2,000 held the loop ~90 ms; 128 (+ one checkpoint) holds it a few ms.
            assert len(chunks) > 1 and max(chunks) < 128 + 32
            again = []
            while len(again) < 1000:
                got = await broker.pop("g", "t", max_messages=32, invisible_s=60, wait_s=1)
                assert got, f"only {len(again)} of 1000 came back"
                again.extend(got)
            assert sorted(m.record.body for m in again) == sorted(b"%d" % i for i in range(1000))
            assert {m.delivery_attempt for m in again} == {2}

    asyncio.run(scenario())
