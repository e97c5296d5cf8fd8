"""A pop reads a run of a queue's offsets with one bounded iterator (reader._read_run).

As many records in the run as offsets means each offset is there; a run with a hole (a
redrive removes single dead letters; retention or a topic's deletion can race a read) is
read again by key, so the pop skips exactly the missing offsets and keeps offset order.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from popmq.broker_core import keys
from popmq.broker_core.store import Store
from popmq.broker_core.types import NewMessage
from tests.unit.conftest import OpenBroker


def test_values_between_reads_the_keys_of_a_range_in_order_and_nothing_past_it(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "store")
    try:
        batch = store.batch()
        for queue_id in (0, 1, 2):
            for offset in range(5):
                value = f"{queue_id}:{offset}".encode()
                batch.put("messages", keys.message_key(7, queue_id, offset), value)
        store.write(batch, sync=False)
        run = store.values_between("messages", keys.message_key(7, 1, 1), keys.message_key(7, 1, 4))
        assert run == [b"1:1", b"1:2", b"1:3"]
        past_end = store.values_between(
            "messages", keys.message_key(7, 1, 3), keys.message_key(7, 1, 9)
        )
        assert past_end == [b"1:3", b"1:4"]
        assert (
            store.values_between("messages", keys.message_key(7, 1, 5), keys.message_key(7, 1, 9))
            == []
        )
    finally:
        store.close()


def test_a_pop_skips_offsets_missing_from_the_middle_of_a_queue_and_keeps_order(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", f"m{i}".encode()) for i in range(8)])
            topic_id = broker.topic_info("orders").topic_id
            batch = broker.store.batch()
            for offset in (2, 3, 6):
                batch.delete("messages", keys.message_key(topic_id, 0, offset))
            broker.store.write(batch, sync=True)
            popped = await broker.pop("g", "orders", max_messages=32, wait_s=0)
            assert [m.offset for m in popped] == [0, 1, 4, 5, 7]
            assert [m.record.body for m in popped] == [b"m0", b"m1", b"m4", b"m5", b"m7"]
            for message in popped:
                await broker.ack("g", message.receipt_handle)
            assert await broker.pop("g", "orders", max_messages=32, wait_s=0) == []

    asyncio.run(scenario())


def test_pops_smaller_than_the_backlog_read_on_where_the_last_stopped(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", f"m{i}".encode()) for i in range(10)])
            seen: list[int] = []
            for size in (3, 4, 32):
                popped = await broker.pop("g", "orders", max_messages=size, wait_s=0)
                seen += [m.offset for m in popped]
                assert [m.record.body for m in popped] == [f"m{m.offset}".encode() for m in popped]
            assert seen == list(range(10))

    asyncio.run(scenario())
