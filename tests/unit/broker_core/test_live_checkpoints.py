"""Live checkpoints: persisted records and revive entries, restart and crash recovery.

The buffer that holds chained checkpoints before they are persisted: test_checkpoint_buffer.py.
"""

from __future__ import annotations

import asyncio

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import keys
from popmq.broker_core.broker import Broker
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import PopConfig
from popmq.broker_core.errors import ReceiptHandleLostError, ReceiptHandleSupersededError
from popmq.broker_core.types import NewMessage, PoppedMessage
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


# -- persisted checkpoints ------------------------------------------------------------------


def test_acking_a_persisted_checkpoint_deletes_its_record_and_revive_entry(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(pop=PopConfig(ck_buffer_time_s=0.1), clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(b"a"), _msg(b"b")])
            a, b = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            clock.advance(100)  # the buffer time
            await until(lambda: len(_checkpoints(broker)) == 1, "1 checkpoint persisted", 5.0)

            assert await broker.ack("g", [a.receipt_handle]) == [None]
            (record,) = _checkpoints(broker)  # rewritten with the ack, not deleted
            assert (record.resolved_bits, record.acked_bits) == (b"\x01", b"\x01")
            assert len(_revive_keys(broker)) == 1

            assert await broker.ack("g", [b.receipt_handle]) == [None]
            assert _checkpoints(broker) == []
            assert _revive_keys(broker) == []
            assert broker.live_checkpoints == 0

    asyncio.run(scenario())


def test_change_invisible_time_persists_the_new_checkpoint_at_once(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            new_handle, until = await broker.change_invisible_time("g", msg.receipt_handle, 60)
            (record,) = _checkpoints(broker)
            assert (list(record.offsets), record.deadline_ms, record.chained) == ([0], until, False)
            assert _revive_keys(broker) == [(until, record.ck_id)]
            await broker.ack("g", [new_handle])
            assert _checkpoints(broker) == []
            assert _revive_keys(broker) == []

    asyncio.run(scenario())


# -- restart --------------------------------------------------------------------------------


def test_restart_keeps_messages_committed_offsets_and_inflight_deadlines(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(b"m0"), _msg(b"m1"), _msg(b"m2")])
            (m0,) = await broker.pop("g", "orders", max_messages=1, invisible_s=30, wait_s=0)
            await broker.ack("g", [m0.receipt_handle])
            (m1,) = await broker.pop("g", "orders", max_messages=1, invisible_s=1.5, wait_s=0)

        async with open_broker(clock=clock) as broker:
            _, (stats,) = await broker.get_topic("orders")
            assert (stats.min_offset, stats.max_offset) == (0, 3)
            assert _committed(broker, "g", "orders") == 2
            # m0 was acked, m1 is invisible until its deadline: only m2 is delivered now.
            (m2,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            assert m2.record.body == b"m2"
            clock.advance(m1.invisible_until_ms - clock.now_ms() - 1)
            await settle()
            assert await broker.pop("g", "orders", wait_s=0) == []
            clock.advance(1)  # m1's deadline, kept across the restart
            (again,) = await broker.pop("g", "orders", invisible_s=30, wait_s=5)
            assert (again.record.body, again.delivery_attempt) == (b"m1", 2)

    asyncio.run(scenario())


def test_handles_issued_before_a_restart_still_ack(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(b"a"), _msg(b"b")])
            a, b = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            await broker.ack("g", [a.receipt_handle])

        async with open_broker() as broker:
            assert broker.live_checkpoints == 1
            assert await broker.ack("g", [b.receipt_handle, a.receipt_handle]) == [None, None]
            assert broker.live_checkpoints == 0
            assert _checkpoints(broker) == []
            assert _revive_keys(broker) == []
            assert await broker.pop("g", "orders", wait_s=0) == []

    asyncio.run(scenario())


def test_superseded_handle_stays_refused_after_a_restart(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            new_handle, _ = await broker.change_invisible_time("g", msg.receipt_handle, 30)

        async with open_broker() as broker:
            (old,) = await broker.ack("g", [msg.receipt_handle])
            assert isinstance(old, ReceiptHandleSupersededError)
            assert await broker.ack("g", [new_handle]) == [None]

    asyncio.run(scenario())


def test_superseded_handle_stays_refused_after_a_restart_once_the_message_was_redelivered(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=60, wait_s=0)
            await broker.change_invisible_time("g", msg.receipt_handle, 1)

        async with open_broker(clock=clock) as broker:
            clock.advance(1000)  # the new deadline; the old one is 59 s away
            (again,) = await broker.pop("g", "orders", invisible_s=30, wait_s=5)
            assert again.delivery_attempt == 2
            assert clock.now_ms() < msg.invisible_until_ms  # the old handle has not expired
            (old,) = await broker.ack("g", [msg.receipt_handle])
            assert isinstance(old, ReceiptHandleSupersededError)

    asyncio.run(scenario())


def test_start_and_close_are_idempotent(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.start()
            await broker.create_topic("orders", 1)
            await broker.close()
            await broker.close()
        async with open_broker() as broker:
            assert [t.name for t in await broker.list_topics()] == ["orders"]

    asyncio.run(scenario())


def test_restart_keeps_topics_and_group_settings(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 3)
            created = await broker.create_group(
                "g", max_delivery_attempts=5, retry_backoff_s=(2, 4)
            )

        async with open_broker() as broker:
            assert [(t.name, t.queues) for t in await broker.list_topics()] == [("orders", 3)]
            assert broker.get_group("g") == created
            await broker.create_topic("later", 1)
            assert (await broker.get_topic("later"))[0].topic_id > (
                await broker.get_topic("orders")
            )[0].topic_id

    asyncio.run(scenario())


def test_buffered_checkpoint_lost_in_a_crash_means_redelivery_not_loss(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(b"a"), _msg(b"b")])
            (a,) = await broker.pop("g", "orders", max_messages=1, invisible_s=30, wait_s=0)
            await broker.ack("g", [a.receipt_handle])
            await until(
                lambda: _stored_offset(broker, "g", "orders", 0) == 1,
                "group g's offset 1 persisted",
                5.0,
            )
            await broker.pop("g", "orders", max_messages=1, invisible_s=30, wait_s=0)  # b
            assert _checkpoints(broker) == []  # b's checkpoint is only in memory
            broker.store.close()  # crash: nothing more reaches the disk

        async with open_broker(clock=clock) as broker:
            assert _committed(broker, "g", "orders") == 1
            (again,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            # Popped again from the queue itself, as its first delivery was never recorded.
            assert (again.record.body, again.offset, again.delivery_attempt) == (b"b", 1, 1)
            assert await broker.pop("g", "orders", wait_s=0) == []  # a stays acked

    asyncio.run(scenario())


CRASH_CONFIG = PopConfig(ck_buffer_time_s=10, ck_persist_ahead_s=3.8)


async def _crash_with_a_persisted_checkpoint_above_an_open_one(
    open_broker: OpenBroker, clock: ManualClock, *, ack_first: bool
) -> tuple[PoppedMessage, PoppedMessage]:
    """Pop m0 (stays buffered) then m1 (persisted early), then crash.

    With `ack_first`, a message popped and acked before them gives the group a stored
    offset in the queue. Returns (m0, m1) as delivered before the crash.
    """
    async with open_broker(pop=CRASH_CONFIG, clock=clock) as broker:
        await broker.create_topic("orders", 1)
        if ack_first:
            await broker.send([_msg(b"pre")])
            (pre,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            await broker.ack("g", [pre.receipt_handle])
            await until(
                lambda: _stored_offset(broker, "g", "orders", 0) == 1,
                "group g's offset 1 persisted",
                5.0,
            )
        await broker.send([_msg(b"m0"), _msg(b"m1"), _msg(b"m2")])
        (m0,) = await broker.pop("g", "orders", max_messages=1, invisible_s=30, wait_s=0)
        (m1,) = await broker.pop("g", "orders", max_messages=1, invisible_s=4, wait_s=0)
        clock.advance(200)  # 3.8 s before m1's deadline, long before the 10 s buffer time
        await until(lambda: len(_checkpoints(broker)) == 1, "m1's checkpoint, persisted early", 5.0)
        assert [list(r.offsets) for r in _checkpoints(broker)] == [[m1.offset]]
        assert _committed(broker, "g", "orders") == m0.offset  # m0's open checkpoint holds it
        broker.store.close()  # crash: m0's buffered checkpoint is lost
    return m0, m1


def test_recovered_checkpoint_above_the_committed_offset_is_skipped_and_not_jumped(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    """m0's checkpoint is lost in a crash, m1's was persisted: m0 is popped again, m1 is not."""

    async def scenario() -> None:
        m0, m1 = await _crash_with_a_persisted_checkpoint_above_an_open_one(
            open_broker, clock, ack_first=True
        )
        async with open_broker(pop=CRASH_CONFIG, clock=clock) as broker:
            assert clock.now_ms() < m1.invisible_until_ms
            assert _committed(broker, "g", "orders") == 1
            popped = await broker.pop("g", "orders", max_messages=1, invisible_s=30, wait_s=0)
            popped += await broker.pop("g", "orders", max_messages=1, invisible_s=30, wait_s=0)
            assert [(m.record.body, m.offset, m.delivery_attempt) for m in popped] == [
                (b"m0", 1, 1),
                (b"m2", 3, 1),
            ]
            assert await broker.pop("g", "orders", wait_s=0) == []  # m1 is still in flight
            (stale,) = await broker.ack("g", [m0.receipt_handle])  # m0 has a new handle now
            assert isinstance(stale, ReceiptHandleLostError)
            await broker.ack("g", [m.receipt_handle for m in popped])
            # Contiguous: past m0 (acked), m1 (persisted, owned by revive), m2 (acked).
            assert _committed(broker, "g", "orders") == 4
            assert await broker.ack("g", [m1.receipt_handle]) == [None]
            assert broker.live_checkpoints == 0

    asyncio.run(scenario())


def test_recovered_checkpoint_is_kept_when_the_group_has_no_stored_offset_yet(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        _, m1 = await _crash_with_a_persisted_checkpoint_above_an_open_one(
            open_broker, clock, ack_first=False
        )
        async with open_broker(pop=CRASH_CONFIG, clock=clock) as broker:
            bodies = [m.record.body for m in await broker.pop("g", "orders", wait_s=0)]
            bodies += [m.record.body for m in await broker.pop("g", "orders", wait_s=0)]
            assert clock.now_ms() < m1.invisible_until_ms
            assert bodies == [b"m0", b"m2"]  # not m1: invisible until its deadline
            assert broker.live_checkpoints == 3  # m0 and m2 popped again, m1 recovered

    asyncio.run(scenario())


def test_a_nack_survives_a_crash_that_loses_its_pop_and_acks_survive_clean_restarts(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    """The in-process twin of the orphaned-nack reproduction (integration test_total_queue):
    m1 and m2 popped together (buffered), m1 nacked (its own persisted checkpoint), a crash.
    m2 is popped again; m1 only after its nack delay; once both are acked, nothing returns."""

    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(b"m0")])
            (m0,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            await broker.ack("g", [m0.receipt_handle])
            await until(lambda: _stored_offset(broker, "g", "orders", 0) == 1, "offset 1", 5.0)
            await broker.send([_msg(b"m1"), _msg(b"m2")])
            m1, m2 = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            assert (m1.record.body, m2.record.body) == (b"m1", b"m2")
            redeliver_at = await broker.nack("g", m1.receipt_handle, delay_s=8)
            broker.store.close()  # crash: m1+m2's buffered checkpoint is lost, the nack's kept

        async with open_broker(clock=clock) as broker:
            again = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            assert [(m.record.body, m.delivery_attempt) for m in again] == [(b"m2", 1)]
            await broker.ack("g", [m.receipt_handle for m in again])

        async with open_broker(clock=clock) as broker:  # a clean restart
            assert await broker.pop("g", "orders", wait_s=0) == []
            clock.advance(redeliver_at - clock.now_ms())
            back = await broker.pop("g", "orders", invisible_s=30, wait_s=5)
            assert [(m.record.body, m.delivery_attempt) for m in back] == [(b"m1", 2)]
            await broker.ack("g", [m.receipt_handle for m in back])
            rows = await broker.group_lag("g", "orders")
            assert [(r.lag, r.inflight) for r in rows] == [(0, 0), (0, 0)]

        async with open_broker(clock=clock) as broker:
            assert await broker.pop("g", "orders", wait_s=0) == []
            assert broker.live_checkpoints == 0

    asyncio.run(scenario())
