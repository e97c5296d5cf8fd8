"""Broker.apply_topic: the local topic is the local part of one incarnation of cluster mode's
route (its create time); another incarnation's topic is deleted with its messages, offsets
and retry queues, and the birth is kept across a restart."""

from __future__ import annotations

import asyncio

import pytest

from popmq.broker_core import InvalidArgumentError, NewMessage, NotFoundError
from tests.unit.conftest import OpenBroker


def test_apply_creates_the_topic_with_the_routes_birth_and_keeps_it_across_a_restart(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            info = await broker.apply_topic(
                "orders", queues=2, message_type="fifo", route_create_time_ms=1000
            )
            assert info is not None
            assert (info.queues, info.message_type_name, info.route_create_time_ms) == (
                2,
                "fifo",
                1000,
            )
            # The same incarnation again: the topic as it is (the caller grows it).
            again = await broker.apply_topic(
                "orders", queues=4, message_type="fifo", route_create_time_ms=1000
            )
            assert again == info
            # Named by no queue here, and absent: nothing is created.
            assert (
                await broker.apply_topic(
                    "elsewhere", queues=0, message_type="normal", route_create_time_ms=1000
                )
                is None
            )
            with pytest.raises(NotFoundError):
                broker.topic_info("elsewhere")
        async with open_broker() as broker:
            assert broker.topic_info("orders").route_create_time_ms == 1000

    asyncio.run(scenario())


def test_another_incarnations_topic_is_deleted_with_its_messages_and_offsets(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            for topic in ("orders", "moved"):
                await broker.apply_topic(
                    topic, queues=1, message_type="normal", route_create_time_ms=1000
                )
                await broker.send([NewMessage(topic, b"old")])
            popped = await broker.pop("g", "orders", max_messages=1, invisible_s=60)
            assert [m.record.body for m in popped] == [b"old"]
            await broker.nack("g", popped[0].receipt_handle)  # a retry queue of the old topic
            old_id = broker.topic_info("orders").topic_id
            old_ids = {
                t.topic_id
                for t in broker.catalog.topics_by_id.values()
                if "orders" in (t.name, t.owner_topic)
            }
            assert len(old_ids) == 2  # the topic and g's retry topic of it

            info = await broker.apply_topic(
                "orders", queues=1, message_type="normal", route_create_time_ms=2000
            )
            assert info is not None
            assert (info.route_create_time_ms, info.topic_id != old_id) == (2000, True)
            assert await broker.peek("orders") == []
            assert await broker.pop("g", "orders", max_messages=8, invisible_s=60) == []
            assert [o.offset for o in await broker.get_offsets("g", "orders")] == [0]
            assert not old_ids & broker.catalog.topics_by_id.keys()
            # The route of the new incarnation names no queue here: the old one just goes.
            assert (
                await broker.apply_topic(
                    "moved", queues=0, message_type="normal", route_create_time_ms=2000
                )
                is None
            )
            with pytest.raises(NotFoundError):
                broker.topic_info("moved")
        async with open_broker() as broker:  # and it stays gone after a restart
            assert await broker.peek("orders") == []
            with pytest.raises(NotFoundError):
                broker.topic_info("moved")

    asyncio.run(scenario())


def test_a_topic_without_a_birth_is_taken_as_the_routes_and_keeps_its_messages(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            created = await broker.create_topic("orders", 2)
            assert created.route_create_time_ms == 0
            await broker.send([NewMessage("orders", b"kept")])
            info = await broker.apply_topic(
                "orders", queues=2, message_type="normal", route_create_time_ms=1000
            )
            assert info is not None
            assert (info.topic_id, info.route_create_time_ms) == (created.topic_id, 1000)
            assert [m.record.body for m in await broker.peek("orders")] == [b"kept"]
        async with open_broker() as broker:
            assert broker.topic_info("orders").route_create_time_ms == 1000

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("queues", "message_type", "birth", "field"),
    [
        (-1, "normal", 1000, "queues"),
        (1, "normal", 0, "route_create_time_ms"),
        (1, "bulk", 1000, "message_type"),
    ],
)
def test_apply_refuses_bad_input_with_a_clear_error(
    open_broker: OpenBroker, queues: int, message_type: str, birth: int, field: str
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            with pytest.raises(InvalidArgumentError, match=field):
                await broker.apply_topic(
                    "orders", queues=queues, message_type=message_type, route_create_time_ms=birth
                )

    asyncio.run(scenario())
