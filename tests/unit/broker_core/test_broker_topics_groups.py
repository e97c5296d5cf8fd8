"""Topics and groups: creation rules, deletion with all its state, and group lag."""

from __future__ import annotations

import asyncio

import pytest

from popmq.broker_core import keys
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import PopConfig
from popmq.broker_core.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
)
from popmq.broker_core.types import NewMessage
from tests.support.waiting import until
from tests.unit.conftest import OpenBroker

ALL = b"\xff" * 32


def _msg(body: bytes = b"x", topic: str = "orders") -> NewMessage:
    return NewMessage(topic, body)


# -- creation -------------------------------------------------------------------------------


def test_create_topic_validates_its_name_and_queue_count(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            with pytest.raises(InvalidArgumentError, match="reserved prefix '%RETRY%'"):
                await broker.create_topic("%RETRY%g_orders")
            with pytest.raises(InvalidArgumentError, match="reserved prefix '%DLQ%'"):
                await broker.create_topic("%DLQ%g")
            with pytest.raises(InvalidArgumentError) as info:
                await broker.create_topic("orders", 0)
            assert str(info.value) == "queues 0 is below the minimum 1"
            with pytest.raises(InvalidArgumentError, match="queues 1025 is above the maximum 1024"):
                await broker.create_topic("orders", 1025)
            assert await broker.list_topics() == []

    asyncio.run(scenario())


def test_create_topic_twice_is_already_exists(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            created = await broker.create_topic("orders")
            assert created.queues == 8
            with pytest.raises(AlreadyExistsError, match="topic 'orders' already exists"):
                await broker.create_topic("orders", 2)
            assert (await broker.get_topic("orders"))[0] == created

    asyncio.run(scenario())


def test_concurrent_creations_of_a_topic_keep_one_id_across_a_restart(
    open_broker: OpenBroker,
) -> None:
    # A cluster proxy's CreateTopic and the catalog sync following its route create the same
    # topic at once: the id in memory must be the id in the store, or after a restart the
    # messages sent meanwhile belong to an id the store no longer knows.
    async def scenario() -> None:
        async with open_broker() as broker:
            results = await asyncio.gather(
                broker.create_topic("orders", 2),
                broker.create_topic("orders", 2),
                return_exceptions=True,
            )
            created = [r for r in results if not isinstance(r, BaseException)]
            assert len(created) == 1, results
            assert isinstance(next(r for r in results if r not in created), AlreadyExistsError)
            await broker.send([_msg(b"kept")])
        async with open_broker() as broker:
            info, queues = await broker.get_topic("orders")
            assert info.topic_id == created[0].topic_id
            assert sum(q.max_offset for q in queues) == 1

    asyncio.run(scenario())


def test_a_group_created_while_a_first_pop_creates_it_keeps_one_id(
    open_broker: OpenBroker,
) -> None:
    # A consumer's first pop auto-creates its group while an admin creates it: both must
    # end with one id, or the pop's handles name a group id the catalog no longer has.
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(b"one")])
            popped, created = await asyncio.gather(
                broker.pop("probe", "orders", max_messages=1, wait_s=0),
                broker.create_group("probe"),
            )
            assert broker.get_group("probe").group_id == created.group_id
            assert await broker.ack("probe", [m.receipt_handle for m in popped]) == [None] * len(
                popped
            )
        async with open_broker() as broker:
            assert broker.get_group("probe").group_id == created.group_id

    asyncio.run(scenario())


def test_create_group_validates_its_settings(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            with pytest.raises(InvalidArgumentError) as info:
                await broker.create_group("g", max_delivery_attempts=0)
            assert str(info.value) == "max_delivery_attempts 0 is below the minimum 1"
            with pytest.raises(InvalidArgumentError) as info:
                await broker.create_group("g", retry_backoff_s=(1, 0.5))
            assert str(info.value) == "retry_backoff[1] 0.5s is below the minimum 1s"
            with pytest.raises(InvalidArgumentError, match="retry_backoff has 65 entries"):
                await broker.create_group("g", retry_backoff_s=[1] * 65)
            with pytest.raises(InvalidArgumentError, match="reserved prefix"):
                await broker.create_group("%DLQ%g")
            assert await broker.list_groups() == []

    asyncio.run(scenario())


def test_create_group_twice_is_already_exists(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_group("g", max_delivery_attempts=3)
            with pytest.raises(AlreadyExistsError, match="group 'g' already exists"):
                await broker.create_group("g")
            assert broker.get_group("g").max_delivery_attempts == 3

    asyncio.run(scenario())


def test_create_group_configures_a_group_created_implicitly_and_keeps_its_id(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            implicit = broker.get_group("g")
            explicit = await broker.create_group("g", max_delivery_attempts=4)
            assert explicit.group_id == implicit.group_id
            assert (explicit.auto_created, explicit.max_delivery_attempts) == (False, 4)
            assert await broker.ack("g", [msg.receipt_handle]) == [None]  # handle still valid

    asyncio.run(scenario())


# -- deletion -------------------------------------------------------------------------------


def test_deleting_a_topic_removes_its_messages_offsets_and_inflight_state(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(pop=PopConfig(ck_buffer_time_s=0.1), clock=clock) as broker:
            await broker.create_topic("orders", 2)
            await broker.create_topic("kept", 1)
            await broker.send([_msg(b"%d" % i) for i in range(4)] + [_msg(topic="kept")])
            popped = await broker.pop("g", "orders", max_messages=2, invisible_s=30, wait_s=0)
            await broker.nack("g", popped[0].receipt_handle, delay_s=0)  # a retry copy

            async def retried() -> bool:
                return any(
                    r.retry and r.max_offset == 1 for r in await broker.group_lag("g", "orders")
                )

            await until(retried, "the message revived into the retry topic", 5.0)
            await broker.pop("g", "orders", invisible_s=30, wait_s=0)  # in flight, persisted
            clock.advance(100)  # the buffer time
            await until(lambda: broker.buffered_checkpoints == 0, "every checkpoint persisted", 5.0)
            (kept,) = await broker.pop("g", "kept", invisible_s=30, wait_s=0)
            orders = (await broker.get_topic("orders"))[0]
            group_id = broker.get_group("g").group_id
            retry = broker.catalog.retry_topics[(group_id, orders.topic_id)]
            assert any(broker.store.scan("checkpoints", b"", ALL))

            await broker.delete_topic("orders")

            with pytest.raises(NotFoundError):
                await broker.get_topic("orders")
            with pytest.raises(NotFoundError):
                await broker.pop("g", "orders", wait_s=0)
            assert [t.name for t in await broker.list_topics()] == ["kept"]
            for topic_id in (orders.topic_id, retry.topic_id):  # the retry copy went too
                start, end = keys.topic_range(topic_id)
                assert list(broker.store.scan("messages", start, end)) == []
            offset_topics = {
                keys.parse_offset_key(k)[1] for k, _ in broker.store.scan("offsets", b"", ALL)
            }
            assert not offset_topics & {orders.topic_id, retry.topic_id}
            # Only the other topic's in-flight message is left, in memory and on disk.
            assert broker.live_checkpoints == 1
            # Leaving the buffer schedules the write; the flush that does it may come later.
            clock.advance(100)  # the kept message's buffer time
            await until(lambda: any(broker.store.scan("revive", b"", ALL)), "a revive record", 5.0)
            records = list(broker.store.scan("checkpoints", b"", ALL))
            assert len(records) == len(list(broker.store.scan("revive", b"", ALL))) == 1
            assert await broker.ack("g", [kept.receipt_handle]) == [None]

    asyncio.run(scenario())


def test_recreated_topic_starts_empty_and_old_handles_never_touch_it(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(b"old")])
            (old,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            await broker.delete_topic("orders")
            await broker.create_topic("orders", 1)
            _, (stats,) = await broker.get_topic("orders")
            assert (stats.min_offset, stats.max_offset) == (0, 0)
            assert await broker.pop("g", "orders", wait_s=0) == []

            (sent,) = await broker.send([_msg(b"new")])
            assert sent.offset == 0  # same queue position as the old message
            (new,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            assert new.record.body == b"new"
            (refused,) = await broker.ack("g", [old.receipt_handle])
            assert isinstance(refused, FailedPreconditionError)
            assert "topic of this receipt handle was deleted" in str(refused)
            cq = broker.consume_queue("g", "orders", 0)
            assert cq is not None
            assert cq.inflight.keys() == {0}  # the old handle did not ack the new message
            assert await broker.ack("g", [new.receipt_handle]) == [None]

    asyncio.run(scenario())


def test_long_poll_on_a_deleted_topic_ends_with_not_found(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            waiter = asyncio.create_task(broker.pop("g", "orders", wait_s=10))
            await until(lambda: broker.polling.held == 1, "1 pop held", 5.0)
            await broker.delete_topic("orders")
            with pytest.raises(NotFoundError):
                await asyncio.wait_for(waiter, 2)
            assert broker.polling.held == 0

    asyncio.run(scenario())


def test_delete_of_a_missing_topic_is_not_found(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            with pytest.raises(NotFoundError, match="topic 'nope' does not exist"):
                await broker.delete_topic("nope")

    asyncio.run(scenario())


# -- lag ------------------------------------------------------------------------------------


def test_group_lag_counts_backlog_and_inflight_per_queue(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2)
            await broker.send([_msg(b"%d" % i) for i in range(5)])  # q0: 3, q1: 2
            a, b = await broker.pop("g", "orders", max_messages=2, invisible_s=30, wait_s=0)
            assert (a.queue_id, b.queue_id) == (0, 0)
            await broker.ack("g", [a.receipt_handle])

            async def rows() -> list[tuple[str, int, bool, int, int, int, int]]:
                return [
                    (
                        r.topic,
                        r.queue_id,
                        r.retry,
                        r.consumer_offset,
                        r.max_offset,
                        r.inflight,
                        r.lag,
                    )
                    for r in await broker.group_lag("g", "orders")
                ]

            # The checkpoint of a and b is half acked: the offset waits for b.
            assert await rows() == [
                ("orders", 0, False, 0, 3, 1, 3),
                ("orders", 1, False, 0, 2, 0, 2),
                ("orders", 0, True, 0, 0, 0, 0),
            ]
            await broker.ack("g", [b.receipt_handle])
            assert (await rows())[0] == ("orders", 0, False, 2, 3, 0, 1)
            (c,) = await broker.pop("g", "orders", max_messages=1, wait_s=0)
            await broker.nack("g", c.receipt_handle, delay_s=0)

            async def revived() -> bool:
                return (await rows())[2][4] == 1

            await until(revived, "the message revived", 5.0)
            assert (await rows())[2] == ("orders", 0, True, 0, 1, 0, 1)
            assert await broker.group_lag("g") == await broker.group_lag("g", "orders")

    asyncio.run(scenario())


def test_group_lag_of_a_topic_the_group_never_read_is_its_whole_backlog(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.create_group("g")
            await broker.send([_msg(), _msg()])
            assert await broker.group_lag("g") == []  # the group reads no topic yet
            (row,) = await broker.group_lag("g", "orders")
            assert (row.consumer_offset, row.max_offset, row.lag, row.inflight) == (0, 2, 2, 0)
            with pytest.raises(NotFoundError):
                await broker.group_lag("nobody")

    asyncio.run(scenario())
