"""A call whose caller is cancelled while its write is in flight (a gRPC handler grpc cancels
because the proxy died or its call's deadline passed): the batch commits all the same, so
what must follow it in memory must happen too.

A ChangeInvisibleTime, Nack or dead letter must leave the delivery moved (the old handle
superseded with its link to the new one, the new checkpoint tracked), never half-moved (the
offset owned by a checkpoint nobody tracks: in flight for good, its old handle neither live
nor followable); a creation on first use must register what it wrote and answer the users
that share it; a transaction's resolution, and a claim of its checks, must hold the
transaction until its write commits; a revive and a redrive must end what they copied; an
admin change (offset reset, a group's update or deletion, a topic's growth,
deletion or purge) must change memory as it changed the store (the security store's users:
tests/unit/security/test_store.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable

from popmq.broker_core.broker import Broker
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import TransactionsConfig
from popmq.broker_core.types import NewMessage, PoppedMessage
from tests.unit.conftest import OpenBroker


async def _cancelled_mid_write(call: Awaitable[object]) -> None:
    """Run `call` up to its wait for the writer's batch, cancel it there (as grpc cancels a
    handler whose client went away), and let the batch commit."""
    task = asyncio.ensure_future(call)
    await asyncio.sleep(0)
    assert not task.done()
    task.cancel()
    # Waited for, not awaited: a cancellation of this caller itself must not be swallowed.
    await asyncio.wait([task])
    assert task.cancelled()
    await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _a_loaded_disk(broker: Broker) -> AsyncIterator[None]:
    """A batch fsynced on the sync thread for 0.3 s meanwhile: what is submitted inside
    waits for the next batch, as on a loaded disk (the broker needs a topic "other")."""
    store = broker.store
    synced = store.sync_wal

    def slow_sync() -> None:
        time.sleep(0.3)
        synced()

    store.sync_wal = slow_sync  # type: ignore[method-assign]
    try:
        # Two sends in one batch: its fsync runs on the sync thread.
        sends = asyncio.gather(
            broker.send([NewMessage("other", b"a")]), broker.send([NewMessage("other", b"b")])
        )
        await asyncio.sleep(0)
        yield
        await sends
    finally:
        del store.sync_wal


def test_a_change_invisible_time_cancelled_mid_write_leaves_a_followable_handle(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", f"m{i}".encode()) for i in range(2)])
            first, other = await broker.pop("g", "orders", max_messages=2, invisible_s=30, wait_s=0)
            h0 = first.receipt_handle
            await _cancelled_mid_write(broker.change_invisible_time("g", h0, 60))

            (followed,) = await broker.follow_handles("g", [h0])
            assert isinstance(followed, tuple), followed  # not a refusal
            newest, until = followed
            assert newest != h0 and until > first.invisible_until_ms
            (found,) = await broker.get_deliveries("g", [newest])
            assert isinstance(found, PoppedMessage) and found.offset == first.offset
            # A proxy renewing the lease afterwards (follow, then move the newest) works.
            renewed, _ = await broker.change_invisible_time("g", newest, 60)
            assert await broker.ack("g", [renewed, other.receipt_handle]) == [None, None]
            assert await broker.inflight_count(group="g") == 0

    asyncio.run(scenario())


def test_a_nack_cancelled_mid_write_still_redelivers(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", b"again")])
            (first,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            await _cancelled_mid_write(broker.nack("g", first.receipt_handle, delay_s=0))
            (again,) = await broker.pop("g", "orders", invisible_s=30, wait_s=5)
            assert (again.record.body, again.delivery_attempt) == (b"again", 2)
            assert await broker.ack("g", [again.receipt_handle]) == [None]
            assert await broker.inflight_count(group="g") == 0

    asyncio.run(scenario())


def test_a_dead_letter_cancelled_mid_write_ends_the_delivery(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", b"first"), NewMessage("orders", b"bad")])
            first, bad = await broker.pop("c", "orders", max_messages=2, invisible_s=1, wait_s=0)
            await broker.dead_letter("c", first.receipt_handle)  # the DLQ topic exists now
            await _cancelled_mid_write(broker.dead_letter("c", bad.receipt_handle))
            await asyncio.sleep(1.2)  # past the pop's invisible time
            assert await broker.pop("c", "orders", wait_s=0) == []  # no second copy comes back
            dead = await broker.pop("ops", "%DLQ%c", max_messages=8, wait_s=1)
            assert sorted(m.record.body for m in dead) == [b"bad", b"first"]
            assert broker.stats.dead_lettered[("c", "orders")] == 2

    asyncio.run(scenario())


def test_a_first_user_cancelled_mid_creation_leaves_the_group_to_the_others(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", b"m")])
            first = asyncio.ensure_future(broker.pop("new", "orders", wait_s=0))
            await asyncio.sleep(0)  # it waits for the group's synced record
            second = asyncio.ensure_future(broker.pop("new", "orders", wait_s=0))
            await asyncio.sleep(0)  # it shares that creation
            first.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await first
            (popped,) = await asyncio.wait_for(second, 5)
            assert popped.record.body == b"m"
            assert [g.name for g in await broker.list_groups()] == ["new"]

    asyncio.run(scenario())


def test_an_offset_reset_cancelled_mid_write_moves_the_offsets_in_memory_too(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", f"m{i}".encode()) for i in range(3)])
            (m0,) = await broker.pop("g", "orders", max_messages=1, wait_s=0)
            assert await broker.ack("g", [m0.receipt_handle]) == [None]
            await _cancelled_mid_write(broker.reset_offsets("g", "orders", target="earliest"))
            (again,) = await broker.pop("g", "orders", max_messages=1, wait_s=0)
            assert again.record.body == b"m0"

    asyncio.run(scenario())


def test_a_group_deletion_cancelled_mid_write_forgets_the_group(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.create_group("old")
            await _cancelled_mid_write(broker.delete_group("old"))
            assert await broker.list_groups() == []

    asyncio.run(scenario())


def test_a_commit_cancelled_while_its_write_waits_is_not_stored_twice_by_a_repeat(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("tx", 1, message_type="transaction")
            await broker.create_topic("other", 1)
            [half] = await broker.send_half([NewMessage("tx", b"order-1")])
            async with _a_loaded_disk(broker):
                first = asyncio.ensure_future(
                    broker.end_transaction(half.transaction_id, commit=True)
                )
                await asyncio.sleep(0)  # its write waits for the next batch
                first.cancel()  # as grpc cancels a handler whose client went away
                await asyncio.wait([first])
                repeat = broker.end_transaction(half.transaction_id, commit=True)
                info = await asyncio.wait_for(repeat, 5)
            assert info.state == "committed"
            stored = await broker.pop("g", "tx", max_messages=8, wait_s=0)
            assert [m.record.body for m in stored] == [b"order-1"]

    asyncio.run(scenario())


def test_admin_changes_cancelled_mid_write_change_memory_too(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.create_topic("old", 1)
            await broker.create_group("g")
            await _cancelled_mid_write(broker.update_group("g", max_delivery_attempts=3))
            [group] = await broker.list_groups()
            assert group.max_delivery_attempts == 3
            await broker.send([NewMessage("old", b"m")])
            assert len(await broker.pop("g", "old", wait_s=0)) == 1
            await _cancelled_mid_write(broker.delete_topic("old"))
            assert [t.name for t in await broker.list_topics()] == ["orders"]
            assert await broker.inflight_count(group="g") == 0  # its delivery went with it
            await _cancelled_mid_write(broker.update_topic("orders", 3))
            assert [t.queues for t in await broker.list_topics()] == [3]
            await broker.send([NewMessage("orders", b"m", queue_id=0)])
            await _cancelled_mid_write(broker.purge("orders"))
            _, queues, _ = await broker.describe_topic("orders")
            assert (queues[0].min_offset, queues[0].max_offset) == (1, 1)

    asyncio.run(scenario())


def test_a_revive_cancelled_mid_write_copies_each_delivery_once(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("t", 1)
            await broker.send([NewMessage("t", b"first")])
            await broker.pop("g", "t", invisible_s=1, wait_s=0)
            clock.advance(1000)  # a first revive, which makes the group's retry topic
            (again,) = await broker.pop("g", "t", invisible_s=60, wait_s=5)
            assert again.record.body == b"first"
            await broker.send([NewMessage("t", b"second")])
            await broker.pop("g", "t", invisible_s=1, wait_s=0)
            revive = broker._reviver.revive
            cut: list[bool] = []

            async def cut_short(due):  # type: ignore[no-untyped-def]
                if cut:
                    await revive(due)
                else:  # as Broker.close stops the revive loop
                    cut.append(True)
                    await _cancelled_mid_write(revive(due))

            broker._reviver.revive = cut_short  # type: ignore[method-assign]
            clock.advance(1000)
            (back,) = await broker.pop("g", "t", max_messages=8, invisible_s=60, wait_s=5)
            assert back.record.body == b"second" and cut
            assert await broker.ack("g", [back.receipt_handle]) == [None]
            assert await broker.inflight_count(group="g") == 1  # "first", not the revived one
        async with open_broker(clock=clock) as broker:  # a restart
            clock.advance(1000)
            await asyncio.sleep(0.2)  # a revive pass, which finds nothing left to copy
            assert await broker.pop("g", "t", max_messages=8, wait_s=0) == []

    asyncio.run(scenario())


def test_a_redrive_cancelled_mid_write_moves_the_dead_letters_once(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", b"%d" % i) for i in range(4)])
            for message in await broker.pop("c", "orders", max_messages=4, wait_s=0):
                await broker.dead_letter("c", message.receipt_handle)
            await _cancelled_mid_write(broker.redrive("c", max_messages=2))  # offsets 0, 1
            _, queues, _ = await broker.describe_topic("%DLQ%c")
            assert queues[0].min_offset == 2  # past the chunk
            await _cancelled_mid_write(broker.redrive("c", only=[(0, 2)]))
            _, queues, _ = await broker.describe_topic("%DLQ%c")
            assert queues[0].min_offset == 3  # past the one selected at the front
            result = await broker.redrive("c")
            assert (result.moved, result.remaining) == (1, 0)
            back = await broker.pop("c", "orders", max_messages=8, wait_s=0)
            assert sorted(m.record.body for m in back) == [b"0", b"1", b"2", b"3"]

    asyncio.run(scenario())


def test_a_check_claim_cancelled_while_its_write_waits_is_not_claimed_again(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        fast = TransactionsConfig(check_first_s=0.1, check_interval_s=60)
        async with open_broker(transactions=fast) as broker:
            await broker.create_topic("tx", 1, message_type="transaction")
            await broker.create_topic("other", 1)
            await broker.send_half([NewMessage("tx", b"order-1")])
            await asyncio.sleep(0.2)  # its first check is due
            async with _a_loaded_disk(broker):
                first = asyncio.ensure_future(broker.due_checks(8))
                await asyncio.sleep(0)  # its claim's write waits for the next batch
                first.cancel()  # as grpc cancels a handler whose client went away
                await asyncio.wait([first])
                assert await broker.due_checks(8) == []  # claimed already, once
            [info] = await broker.list_transactions("open")
            assert info.checks == 1

    asyncio.run(scenario())
