"""The checkpoint buffer: chained checkpoints stay in memory until they linger, are never
written when acked first, and are persisted early near their deadline or when too many wait."""

from __future__ import annotations

import asyncio

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import keys
from popmq.broker_core.broker import Broker
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import PopConfig
from popmq.broker_core.types import NewMessage
from tests.support.waiting import until
from tests.unit.conftest import OpenBroker, settle

ALL = b"\xff" * 32


def _msg(body: bytes = b"x", topic: str = "orders") -> NewMessage:
    return NewMessage(topic, body)


def _checkpoints(broker: Broker) -> list[records_pb2.CheckpointRecord]:
    return [
        records_pb2.CheckpointRecord.FromString(value)
        for _, value in broker.store.scan("checkpoints", b"", b"\xff" * 9)
    ]


def _revive_keys(broker: Broker) -> list[tuple[int, int]]:
    return [keys.parse_revive_key(key) for key, _ in broker.store.scan("revive", b"", ALL)]


def _stored_offset(broker: Broker, group: str, topic: str, queue_id: int) -> int | None:
    group_id = broker.get_group(group).group_id
    topic_id = broker.topic_info(topic).topic_id
    value = broker.store.get("offsets", keys.offset_key(group_id, topic_id, queue_id))
    return None if value is None else keys.decode_u64(value)


def _committed(broker: Broker, group: str, topic: str, queue_id: int = 0) -> int:
    cq = broker.consume_queue(group, topic, queue_id)
    assert cq is not None
    return cq.committed


def test_checkpoint_fully_acked_inside_the_buffer_is_never_written(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(pop=PopConfig(ck_buffer_time_s=0.3), clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (acked,) = await broker.pop("fast", "orders", invisible_s=30, wait_s=0)
            (kept,) = await broker.pop("slow", "orders", invisible_s=30, wait_s=0)
            assert broker.buffered_checkpoints == 2
            assert await broker.ack("fast", [acked.receipt_handle]) == [None]
            assert broker.buffered_checkpoints == 1

            clock.advance(299)
            await settle()
            assert _checkpoints(broker) == []
            # The buffer time passed: the unacked control checkpoint is persisted.
            clock.advance(1)
            await until(lambda: len(_checkpoints(broker)) == 1, "1 checkpoint persisted", 5.0)
            (record,) = _checkpoints(broker)
            assert record.group_id == broker.get_group("slow").group_id
            assert [deadline for deadline, _ in _revive_keys(broker)] == [kept.invisible_until_ms]
            # The acked one only moved the committed offset.
            assert _committed(broker, "fast", "orders") == 1
            await until(
                lambda: _stored_offset(broker, "fast", "orders", 0) == 1,
                "group fast's offset 1 persisted",
                5.0,
            )
            assert broker.buffered_checkpoints == 0

    asyncio.run(scenario())


def test_checkpoint_staying_longer_than_the_buffer_time_is_persisted_with_its_revive_entry(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(pop=PopConfig(ck_buffer_time_s=0.2), clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(b"a"), _msg(b"b"), _msg(b"c")])
            a, b = await broker.pop("g", "orders", max_messages=2, invisible_s=30, wait_s=0)
            assert _checkpoints(broker) == []
            assert _revive_keys(broker) == []
            assert _committed(broker, "g", "orders") == 0  # not done, not persisted yet
            clock.advance(199)
            await settle()
            assert _checkpoints(broker) == []

            clock.advance(1)
            await until(lambda: len(_checkpoints(broker)) == 1, "1 checkpoint persisted", 5.0)
            (record,) = _checkpoints(broker)
            assert list(record.offsets) == [0, 1]
            assert (record.range_start, record.range_end) == (0, 2)
            assert record.deadline_ms == a.invisible_until_ms
            assert _revive_keys(broker) == [(a.invisible_until_ms, record.ck_id)]
            # Persisted, so the offset passes it (a crash can now only redeliver).
            assert _committed(broker, "g", "orders") == 2
            assert _stored_offset(broker, "g", "orders", 0) == 2
            assert broker.buffered_checkpoints == 0
            # The persisted messages are still in flight: the next pop gets only the third.
            (c,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            assert c.record.body == b"c"
            assert await broker.ack("g", [a.receipt_handle, b.receipt_handle]) == [None, None]

    asyncio.run(scenario())


def test_checkpoint_close_to_its_deadline_is_persisted_before_the_buffer_time(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        config = PopConfig(ck_buffer_time_s=10, ck_persist_ahead_s=3)
        async with open_broker(pop=config, clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=3.3, wait_s=0)
            clock.advance(299)
            await settle()
            assert _checkpoints(broker) == []
            # 3 s before the deadline, long before the 10 s buffer time.
            clock.advance(1)
            await until(lambda: len(_checkpoints(broker)) == 1, "1 checkpoint persisted", 5.0)
            assert clock.now_ms() == msg.invisible_until_ms - 3000
            assert _committed(broker, "g", "orders") == 1

    asyncio.run(scenario())


def test_checkpoint_is_persisted_on_time_even_when_an_earlier_one_holds_the_offset(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        config = PopConfig(ck_buffer_time_s=10, ck_persist_ahead_s=3.8)
        async with open_broker(pop=config, clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(b"m0"), _msg(b"m1")])
            await broker.pop("g", "orders", max_messages=1, invisible_s=30, wait_s=0)
            (m1,) = await broker.pop("g", "orders", max_messages=1, invisible_s=4, wait_s=0)
            # m1's checkpoint is due for persistence 0.2 s after the pop (3.8 s before its
            # deadline); m0's, still buffered, keeps the committed offset at 0.
            clock.advance(200)
            await until(lambda: len(_checkpoints(broker)) == 1, "1 checkpoint persisted", 5.0)
            assert list(_checkpoints(broker)[0].offsets) == [m1.offset]
            assert _committed(broker, "g", "orders") == 0
            assert broker.buffered_checkpoints == 1

    asyncio.run(scenario())


def test_full_buffer_persists_the_oldest_checkpoints_at_once(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker(pop=PopConfig(ck_buffer_time_s=600, ck_buffer_max=2)) as broker:
            await broker.create_topic("t", 1)
            await broker.send([NewMessage("t", b"%d" % i) for i in range(4)])
            for _ in range(4):
                assert (
                    len(await broker.pop("g", "t", max_messages=1, invisible_s=600, wait_s=0)) == 1
                )
            await until(
                lambda: broker.buffered_checkpoints <= 2, "at most 2 checkpoints buffered", 5.0
            )
            await until(lambda: len(_checkpoints(broker)) == 2, "2 checkpoints persisted", 5.0)
            # The offset moved past the persisted (oldest) ones: redelivery-safe, never loss.
            (row, _retry) = await broker.group_lag("g", "t")
            assert row.consumer_offset == 2

    asyncio.run(scenario())
