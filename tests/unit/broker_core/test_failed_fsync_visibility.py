"""What readers see of a batch whose fsync failed: nothing, until an fsync that covers it
succeeds or the store reopens; and its offsets are never given to another message.

Real broker on a real store, its fsync failed in the store's `sync_wal`. Through the
store's own failure path (`through_store`), as a real EIO fails it: the store then refuses
writes and fsyncs until it reopens, and the reopen settles. Or as an injected error that
leaves the store writable: the writer's other settling path, a later successful fsync.
"""

from __future__ import annotations

import asyncio
import errno

import pytest

from popmq.broker_core import Broker, keys
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.errors import NotFoundError, OutcomeUnknownError, PopMQError
from popmq.broker_core.pop.retry import store_copy
from popmq.broker_core.timer import NEVER
from popmq.broker_core.types import NewMessage
from tests.support.waiting import until
from tests.unit.conftest import OpenBroker, settle


class _Fsyncs:
    """The broker's store fsyncs, failing while `failing` is set; `events` records them."""

    def __init__(self, broker: Broker, *, through_store: bool = False) -> None:
        self.failing = False
        self.events: list[str] = []
        store = broker.store
        real_sync = store.sync_wal

        def sync() -> None:
            if self.failing:
                self.events.append("fsync failed")
                if through_store:
                    # As a real EIO would: the store refuses writes until it reopens.
                    raise store._failed("sync", OSError(errno.EIO, "Input/output error"))
                raise OutcomeUnknownError("the store could not sync (injected)")
            real_sync()
            self.events.append("fsync")

        store.sync_wal = sync  # type: ignore[method-assign]


async def _pulled(broker: Broker, topic: str) -> list[tuple[int, bytes]]:
    pulled = await broker.pull(topic, 0, 0)
    return [(offset, record.body) for offset, record in pulled.messages]


def test_a_batch_whose_fsync_failed_is_invisible_until_an_fsync_covers_it(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            fsyncs = _Fsyncs(broker)
            await broker.send([NewMessage("orders", b"durable")])
            (first,) = await broker.pop("billing", "orders", wait_s=0)
            assert first.offset == 0
            held = asyncio.ensure_future(broker.pop("billing", "orders", wait_s=10))
            await settle()
            fsyncs.failing = True
            with pytest.raises(OutcomeUnknownError):
                await broker.send([NewMessage("orders", b"ghost")])
            # Written to the memtable and the WAL, perhaps not durable: no reader sees it.
            await settle()
            assert not held.done(), "a held pop was woken by a batch whose fsync failed"
            assert await broker.pop("billing", "orders", wait_s=0) == []
            assert await _pulled(broker, "orders") == [(0, b"durable")]
            assert (await broker.pull("orders", 0, 0)).max_offset == 1
            waited = await broker.pull_wait(
                "orders", 0, 1, 8, wait_s=0, filter_expression="", filter_type="tag"
            )
            assert (waited.messages, waited.max_offset) == ([], 1)
            # Nor while fsyncs keep failing, however many batches try.
            with pytest.raises(OutcomeUnknownError):
                await broker.send([NewMessage("orders", b"ghost 2")])
            assert await _pulled(broker, "orders") == [(0, b"durable")]
            fsyncs.failing = False
            # The next fsync covers every write before it: the ghosts are durable now, and
            # the new message lands past them (no key is written twice).
            (after,) = await broker.send([NewMessage("orders", b"after")])
            assert after.offset == 3
            assert await _pulled(broker, "orders") == [
                (0, b"durable"),
                (1, b"ghost"),
                (2, b"ghost 2"),
                (3, b"after"),
            ]
            woken = await held
            assert [m.offset for m in woken] == [1, 2, 3]

    asyncio.run(scenario())


def test_messages_held_back_by_a_failed_fsync_wake_a_long_poll_when_an_fsync_covers_them(
    open_broker: OpenBroker,
) -> None:
    """A repeat of the failed send writes nothing, yet its confirming fsync publishes the
    first copy: the pop held meanwhile is woken by that, not by a later send."""

    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            fsyncs = _Fsyncs(broker)
            held = asyncio.ensure_future(broker.pop("billing", "orders", wait_s=10))
            await settle()
            fsyncs.failing = True
            with pytest.raises(OutcomeUnknownError):
                await broker.send([NewMessage("orders", b"first", message_id="M")])
            await settle()
            assert not held.done()
            fsyncs.failing = False
            (repeat,) = await broker.send([NewMessage("orders", b"retry", message_id="M")])
            assert repeat.duplicate and repeat.offset == 0
            (got,) = await held
            assert (got.offset, got.record.body) == (0, b"first")

    asyncio.run(scenario())


def test_a_batch_whose_fsync_failed_becomes_visible_once_the_store_reopened(
    open_broker: OpenBroker,
) -> None:
    """The store refuses writes after a failed fsync until it reopens (which replays the WAL
    and flushes it to table files); then what it holds is durable, and readers see it."""

    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            fsyncs = _Fsyncs(broker, through_store=True)
            assert await broker.pop("billing", "orders", wait_s=0) == []  # the group exists
            await broker.send([NewMessage("orders", b"durable")])
            fsyncs.failing = True
            with pytest.raises(PopMQError):
                await broker.send([NewMessage("orders", b"ghost")])
            assert broker.store.read_only
            generation = broker.store.generation
            fsyncs.failing = False
            assert await _pulled(broker, "orders") == [(0, b"durable")]
            (first,) = await broker.pop("billing", "orders", wait_s=0)
            assert first.offset == 0  # the ghost is not handed out with it
            # Writes fail until the store reopens (it retries at most every half second).
            sent: list[int] = []

            async def send_once() -> bool:
                try:
                    (result,) = await broker.send([NewMessage("orders", b"after")])
                except PopMQError:
                    return False
                sent.append(result.offset)
                return True

            await until(send_once, "a send after the store reopened", 10)
            assert broker.store.generation > generation
            assert sent == [2]
            assert await _pulled(broker, "orders") == [
                (0, b"durable"),
                (1, b"ghost"),
                (2, b"after"),
            ]

    asyncio.run(scenario())


def test_a_tail_the_reopened_store_lost_is_never_published_nor_stepped_over_by_a_group(
    open_broker: OpenBroker,
) -> None:
    """The reopen replays the WAL, which may lack what the failed fsync did not make
    durable (an EIO that dropped its pages). The queue then ends where the store's messages
    do: no group steps past the lost offsets, so the message a restart stores there (the
    store's end) still reaches every group."""

    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            assert await broker.pop("billing", "orders", wait_s=0) == []  # the group exists
            await broker.send([NewMessage("orders", b"durable")])
            (first,) = await broker.pop("billing", "orders", wait_s=0)
            await broker.ack("billing", [first.receipt_handle])
            fsyncs = _Fsyncs(broker, through_store=True)
            fsyncs.failing = True
            with pytest.raises(PopMQError):
                await broker.send([NewMessage("orders", b"lost")])
            fsyncs.failing = False
            store = broker.store
            generation = store.generation
            await until(
                lambda: store.batch().generation > generation and not store.read_only,
                "the store reopened",
                10,
            )
            # What the reopened store lost of the failed batch.
            topic_id = broker.catalog.topic("orders").topic_id
            loss = store.batch()
            loss.delete("messages", keys.message_key(topic_id, 0, 1))
            store.write(loss, sync=True)
            # A write after the reopen (a new group's) lets the writer see the store again.
            await broker.pop("other", "orders", wait_s=0)
            assert (await broker.pull("orders", 0, 0)).max_offset == 1
            assert await broker.pop("billing", "orders", wait_s=0) == []
        async with open_broker() as broker:
            (new,) = await broker.send([NewMessage("orders", b"new")])
            assert new.offset == 1
            got = await broker.pop("billing", "orders", wait_s=0)
            assert [(m.offset, m.record.body) for m in got] == [(1, b"new")]

    asyncio.run(scenario())


def test_queries_by_id_and_key_do_not_find_a_message_held_back_by_a_failed_fsync(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            fsyncs = _Fsyncs(broker)
            fsyncs.failing = True
            with pytest.raises(OutcomeUnknownError):
                await broker.send(
                    [NewMessage("orders", b"ghost", message_id="M", keys=("order-7",))]
                )
            # In the store and its index, but held back: no read shows it.
            with pytest.raises(NotFoundError):
                await broker.query_message("orders", "M")
            assert await broker.query_messages_by_key("orders", "order-7") == []
            fsyncs.failing = False
            await broker.send([NewMessage("orders", b"after")])  # its fsync covers the ghost
            found = await broker.query_message("orders", "M")
            assert (found.offset, found.record.body) == (0, b"ghost")
            (by_key,) = await broker.query_messages_by_key("orders", "order-7")
            assert by_key.offset == 0

    asyncio.run(scenario())


def test_a_retry_copy_held_back_by_a_failed_fsync_wakes_its_groups_pop_when_settled(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    """A group's pops of a topic read its retry topic too: a held copy that settles wakes
    them, as its revive would have."""

    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.create_topic("other", 1)
            await broker.send([NewMessage("orders", b"x")])
            await broker.pop("billing", "orders", invisible_s=1, wait_s=0)
            clock.advance(1000)  # revived into the group's retry topic
            (copy,) = await broker.pop("billing", "orders", invisible_s=60, wait_s=5)
            assert copy.delivery_attempt == 2
            retry = broker.catalog.retry_topics[
                (broker.catalog.group("billing").group_id, broker.catalog.topic("orders").topic_id)
            ]
            held = asyncio.ensure_future(broker.pop("billing", "orders", wait_s=10))
            await settle()
            fsyncs = _Fsyncs(broker)
            fsyncs.failing = True
            with pytest.raises(OutcomeUnknownError):
                # A copy written in a batch whose fsync failed.
                await broker.writer.submit(
                    lambda batch, offsets: store_copy(batch, offsets, retry, b""), sync=True
                )
            await settle()
            assert not held.done()
            fsyncs.failing = False
            await broker.send([NewMessage("other", b"y")])  # its fsync covers the copy
            await settle()
            assert held.done(), "the settled copy did not wake the group's held pop"

    asyncio.run(scenario())


def test_a_delivery_the_reopened_store_lost_fires_again_without_waiting_for_a_later_timer(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    """A delayed message's delivery whose fsync failed is not in the reopened store when
    the failed fsync lost it: its timer is back, due already, and fires again at once, not
    when the next timer (here none) is due."""

    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            store = broker.store
            await broker.create_topic("later", 1, message_type="delay")
            await broker.send([NewMessage("later", b"first", deliver_at_ms=clock.now_ms() + 500)])
            assert await broker.pop("g", "later", wait_s=0) == []  # the group exists
            ((timer_key, timer),) = store.scan("timers", b"", keys.timer_key(NEVER, 0))
            fsyncs = _Fsyncs(broker, through_store=True)
            fsyncs.failing = True
            clock.advance(500)
            await until(lambda: fsyncs.events, "the delivery's fsync", 10)
            fsyncs.failing = False
            # The delivery loop retries, finds the timer gone (deleted in the memtable), and
            # then waits for no timer at all.
            await until(lambda: broker._timers.next_due_ms == NEVER, "the retry", 10)
            generation = store.generation
            await until(
                lambda: store.batch().generation > generation and not store.read_only,
                "the store reopened",
                10,
            )
            # What the reopened store lost: the delivery, the message and the timer's deletion.
            loss = store.batch()
            loss.put("timers", timer_key, timer)
            loss.delete("messages", keys.message_key(broker.catalog.topic("later").topic_id, 0, 0))
            store.write(loss, sync=True)
            (got,) = await asyncio.wait_for(broker.pop("g", "later", wait_s=5), 10)
            assert (got.offset, got.record.body) == (0, b"first")

    asyncio.run(scenario())
