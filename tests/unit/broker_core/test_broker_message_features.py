"""Message features in the broker: topic types, delay + recall, dedup, index, FIFO groups."""

from __future__ import annotations

import asyncio
import random

import pytest

from popmq.broker_core import message_index
from popmq.broker_core.broker import Broker
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import GroupDefaults
from popmq.broker_core.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from popmq.broker_core.types import NewMessage, PoppedMessage
from tests.support.waiting import until
from tests.unit.conftest import OpenBroker, now_ms, settle


def _bodies(found: list[PoppedMessage]) -> list[bytes]:
    return [m.record.body for m in found]


# -- topic message types -------------------------------------------------------------------


def test_topic_accepts_only_its_message_type(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("plain", 1)
            await broker.create_topic("ordered", 1, message_type="fifo")
            await broker.create_topic("later", 1, message_type="delay")
            await broker.create_topic("any", 1, message_type="mixed")
            await broker.create_topic("tx", 1, message_type="transaction")
            fifo = NewMessage("plain", b"x", message_group="g1")
            with pytest.raises(FailedPreconditionError, match="fifo message but topic 'plain'"):
                await broker.send([fifo])
            with pytest.raises(FailedPreconditionError, match="is a fifo topic"):
                await broker.send([NewMessage("ordered", b"x")])
            with pytest.raises(FailedPreconditionError, match="is a delay topic"):
                await broker.send([NewMessage("later", b"x", message_group="g")])
            with pytest.raises(FailedPreconditionError, match="accepts only transactional"):
                await broker.send([NewMessage("tx", b"x")])
            due = now_ms() + 60_000
            await broker.send(
                [
                    NewMessage("any", b"a"),
                    NewMessage("any", b"b", message_group="g"),
                    NewMessage("any", b"c", deliver_at_ms=due),
                ]
            )
            with pytest.raises(InvalidArgumentError, match="message_type 'queue'"):
                await broker.create_topic("bad", 1, message_type="queue")
            info, _ = await broker.get_topic("ordered")
            assert info.message_type_name == "fifo"

    asyncio.run(scenario())


# -- delayed messages ----------------------------------------------------------------------


def test_delayed_message_is_invisible_until_due_then_wakes_a_long_poll(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("later", 2, message_type="delay")
            due = clock.now_ms() + 700
            (sent,) = await broker.send([NewMessage("later", b"soon", deliver_at_ms=due)])
            assert sent.offset == -1 and sent.recall_handle
            assert await broker.pop("g", "later", wait_s=0) == []
            held = asyncio.create_task(broker.pop("g", "later", wait_s=5))
            clock.advance(699)
            await settle()
            assert not held.done()
            clock.advance(1)  # due: the timer loop stores it and wakes the held pop
            (got,) = await held
            assert got.record.body == b"soon"
            assert got.record.deliver_at_ms == due
            assert got.record.store_time_ms == due

    asyncio.run(scenario())


def test_delay_beyond_max_is_rejected(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("later", 1, message_type="delay")
            too_late = now_ms() + 3 * 86400 * 1000 + 60_000
            with pytest.raises(InvalidArgumentError, match="max_delay_s"):
                await broker.send([NewMessage("later", b"x", deliver_at_ms=too_late)])

    asyncio.run(scenario())


def test_recall_cancels_a_delayed_message_and_only_once(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("later", 1, message_type="delay")
            await broker.create_topic("other", 1, message_type="delay")
            due = clock.now_ms() + 400
            (keep,) = await broker.send([NewMessage("later", b"keep", deliver_at_ms=due)])
            (drop,) = await broker.send([NewMessage("later", b"drop", deliver_at_ms=due)])
            with pytest.raises(InvalidArgumentError, match="another topic"):
                await broker.recall("other", drop.recall_handle)
            with pytest.raises(InvalidArgumentError, match="signature"):
                await broker.recall("later", drop.recall_handle[:-2] + "AA")
            assert await broker.recall("later", drop.recall_handle) == drop.message_id
            with pytest.raises(NotFoundError, match="delivered or recalled"):
                await broker.recall("later", drop.recall_handle)
            clock.advance(400)
            (got,) = await broker.pop("g", "later", wait_s=5)
            assert got.record.body == b"keep"
            await settle()
            assert await broker.pop("g", "later", wait_s=0) == []
            with pytest.raises(NotFoundError):
                await broker.recall("later", keep.recall_handle)

    asyncio.run(scenario())


def test_timers_survive_a_restart(open_broker: OpenBroker, clock: ManualClock) -> None:
    async def scenario() -> None:
        due = clock.now_ms() + 800
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("later", 1, message_type="delay")
            await broker.send([NewMessage("later", b"persisted", deliver_at_ms=due)])
        async with open_broker(clock=clock) as broker:
            assert await broker.pop("g", "later", wait_s=0) == []
            clock.advance(800)
            (got,) = await broker.pop("g", "later", wait_s=5)
            assert got.record.body == b"persisted"

    asyncio.run(scenario())


# -- dedup and index -----------------------------------------------------------------------


def test_dedup_id_within_the_window_is_stored_once(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2)
            (first,) = await broker.send([NewMessage("orders", b"a", dedup_id="order-7")])
            (again,) = await broker.send([NewMessage("orders", b"b", dedup_id="order-7")])
            assert again.duplicate and not first.duplicate
            assert (again.message_id, again.queue_id, again.offset) == (
                first.message_id, first.queue_id, first.offset,
            )  # fmt: skip
            # A producer retry repeats the message id: deduplicated by default.
            (m1,) = await broker.send([NewMessage("orders", b"c", message_id="ID-1")])
            (m2,) = await broker.send([NewMessage("orders", b"c", message_id="ID-1")])
            assert m2.duplicate and m2.offset == m1.offset
            # Concurrent repeats and repeats inside one request: one stored copy.
            results = await asyncio.gather(
                *(broker.send([NewMessage("orders", b"d", dedup_id="same")]) for _ in range(5))
            )
            assert sum(not r[0].duplicate for r in results) == 1
            batch = await broker.send(
                [
                    NewMessage("orders", b"e", dedup_id="twice"),
                    NewMessage("orders", b"e", dedup_id="twice"),
                ]
            )
            assert [r.duplicate for r in batch] == [False, True]
            found = await broker.pop("g", "orders", max_messages=32, wait_s=0)
            assert sorted(_bodies(found)) == [b"a", b"c", b"d", b"e"]

    asyncio.run(scenario())


def test_dedup_window_ends(data_dir: object, clock: ManualClock) -> None:
    async def scenario() -> None:
        from popmq.broker_core.config import BrokerConfig, MessagesConfig, StoreConfig

        broker = Broker(
            BrokerConfig(
                store=StoreConfig(data_dir=data_dir),  # type: ignore[arg-type]
                messages=MessagesConfig(dedup_window_s=0.3),
            ),
            clock=clock,
        )
        await broker.start()
        try:
            await broker.create_topic("orders", 1)
            (first,) = await broker.send([NewMessage("orders", b"a", dedup_id="k")])
            clock.advance(299)
            (inside,) = await broker.send([NewMessage("orders", b"a", dedup_id="k")])
            assert inside.duplicate and inside.offset == first.offset
            clock.advance(1)  # the window ends
            (second,) = await broker.send([NewMessage("orders", b"a", dedup_id="k")])
            assert not second.duplicate and second.offset == first.offset + 1
        finally:
            await broker.close()

    asyncio.run(scenario())


def test_query_by_id_and_key_and_offsets_at(open_broker: OpenBroker, clock: ManualClock) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 2)
            early = await broker.send([NewMessage("orders", b"x", keys=("k1",)) for _ in range(4)])
            clock.advance(20)
            middle = clock.now_ms()
            clock.advance(20)
            late = await broker.send([NewMessage("orders", b"y", keys=("k1", "k2"))])
            found = await broker.query_message("orders", late[0].message_id)
            assert found.record.body == b"y" and found.offset == late[0].offset
            with pytest.raises(NotFoundError):
                await broker.query_message("orders", "no-such-id")
            by_key = await broker.query_messages_by_key("orders", "k1")
            assert len(by_key) == 5
            assert [m.record.body for m in await broker.query_messages_by_key("orders", "k2")] == [
                b"y"
            ]
            at = dict(await broker.offsets_at("orders", middle))
            late_queue = late[0].queue_id
            assert at[late_queue] == late[0].offset
            assert dict(await broker.offsets_at("orders", 0)) == {0: 0, 1: 0}
            end = dict(await broker.offsets_at("orders", clock.now_ms() + 10_000))
            assert end == {q.queue_id: q.max_offset for q in (await broker.get_topic("orders"))[1]}
            assert len(early) == 4

    asyncio.run(scenario())


def test_index_sweep_drops_expired_entries(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            (sent,) = await broker.send([NewMessage("orders", b"x", keys=("k",), dedup_id="d")])
            far = now_ms() + 400 * 86400 * 1000
            removed = await broker.sweep_index(far)
            assert removed >= 3
            with pytest.raises(NotFoundError):
                await broker.query_message("orders", sent.message_id)
            assert await broker.query_messages_by_key("orders", "k") == []

    asyncio.run(scenario())


def test_one_expiry_marker_covers_a_send_and_old_single_markers_still_sweep(
    open_broker: OpenBroker,
) -> None:
    def markers(broker: Broker) -> list[tuple[bytes, bytes]]:
        return list(broker.store.scan("index", b"x", b"y"))

    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2)
            sent = await broker.send(
                [NewMessage("orders", b"x", keys=("k",), dedup_id=f"d{i}") for i in range(3)]
            )
            # 3 id, 3 key and 3 dedup entries: one marker for the 6 kept for the retention,
            # one for the 3 kept for the dedup window.
            found = markers(broker)
            assert len(found) == 2
            covered = [e for key, value in found for e in message_index.marker_entries(key, value)]
            assert sorted(e[:1] for e in covered) == [b"d"] * 3 + [b"i"] * 3 + [b"k"] * 3
            # A marker as written before grouping (empty value: its key's entry alone).
            (old,) = await broker.send([NewMessage("orders", b"old")])
            grouped = {key for key, _ in found}
            (lone,) = [key for key, _ in markers(broker) if key not in grouped]
            assert broker.store.get("index", lone) == b""
            far = now_ms() + 400 * 86400 * 1000
            assert await broker.sweep_index(far) == 10
            assert markers(broker) == []
            for result in (*sent, old):
                with pytest.raises(NotFoundError):
                    await broker.query_message("orders", result.message_id)
            assert await broker.query_messages_by_key("orders", "k") == []

    asyncio.run(scenario())


# -- FIFO message groups -------------------------------------------------------------------


def test_fifo_group_delivers_one_at_a_time_in_order_and_groups_are_independent(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("ordered", 1, message_type="fifo")
            await broker.send(
                [NewMessage("ordered", f"{g}{i}".encode(), message_group=g) for i in range(3)
                 for g in ("a", "b")]
            )  # fmt: skip
            first = await broker.pop("g", "ordered", max_messages=32, wait_s=0)
            assert sorted(_bodies(first)) == [b"a0", b"b0"]
            assert await broker.pop("g", "ordered", wait_s=0) == []  # both groups blocked
            a0 = next(m for m in first if m.record.body == b"a0")
            await broker.ack("g", [a0.receipt_handle])
            (a1,) = await broker.pop("g", "ordered", wait_s=1)
            assert a1.record.body == b"a1"  # group b is still stuck on b0: a flows anyway
            await broker.ack("g", [a1.receipt_handle])
            (a2,) = await broker.pop("g", "ordered", wait_s=1)
            assert a2.record.message_group == "a" and a2.record.body == b"a2"

    asyncio.run(scenario())


def test_fifo_unacked_message_is_redelivered_in_place_before_the_next(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("ordered", 1, message_type="fifo")
            await broker.send([NewMessage("ordered", b"m0", message_group="g"),
                               NewMessage("ordered", b"m1", message_group="g")])  # fmt: skip
            (m0,) = await broker.pop("c", "ordered", invisible_s=1, wait_s=0)
            assert await broker.pop("c", "ordered", wait_s=0) == []  # m1 waits behind m0
            clock.advance(1000)
            (again,) = await broker.pop("c", "ordered", invisible_s=30, wait_s=5)
            assert again.record.body == b"m0" and again.delivery_attempt == 2
            # A nack also redelivers in place, after the delay.
            until = await broker.nack("c", again.receipt_handle, delay_s=0.3)
            assert until == clock.now_ms() + 300
            await settle()
            assert await broker.pop("c", "ordered", wait_s=0) == []
            clock.advance(300)
            (third,) = await broker.pop("c", "ordered", wait_s=5)
            assert third.record.body == b"m0" and third.delivery_attempt == 3
            await broker.ack("c", [third.receipt_handle])
            (m1,) = await broker.pop("c", "ordered", wait_s=5)
            assert m1.record.body == b"m1" and m1.delivery_attempt == 1
            assert m0.receipt_handle != third.receipt_handle

    asyncio.run(scenario())


def test_fifo_message_exhausting_attempts_goes_to_dlq_and_unblocks_its_group(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker(groups=GroupDefaults(max_delivery_attempts=2)) as broker:
            await broker.create_topic("ordered", 1, message_type="fifo")
            await broker.send([NewMessage("ordered", b"poison", message_group="g"),
                               NewMessage("ordered", b"next", message_group="g")])  # fmt: skip
            (p1,) = await broker.pop("c", "ordered", wait_s=0)
            await broker.nack("c", p1.receipt_handle, delay_s=0)
            (p2,) = await broker.pop("c", "ordered", wait_s=5)
            assert p2.record.body == b"poison" and p2.delivery_attempt == 2
            await broker.nack("c", p2.receipt_handle, delay_s=0)
            (nxt,) = await broker.pop("c", "ordered", wait_s=5)
            assert nxt.record.body == b"next"

            async def dead_lettered() -> bool:
                return "%DLQ%c" in {t.name for t in await broker.list_topics()}

            await until(dead_lettered, "the dead-letter topic %DLQ%c", 5.0)
            (dead,) = await broker.pop("ops", "%DLQ%c", wait_s=5)
            assert dead.record.body == b"poison"

    asyncio.run(scenario())


def test_fifo_state_survives_a_restart(open_broker: OpenBroker, clock: ManualClock) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("ordered", 1, message_type="fifo")
            await broker.send([NewMessage("ordered", f"m{i}".encode(), message_group="g")
                               for i in range(3)])  # fmt: skip
            (m0,) = await broker.pop("c", "ordered", max_messages=8, invisible_s=1, wait_s=0)
            assert m0.record.body == b"m0"
        async with open_broker(clock=clock) as broker:
            assert await broker.pop("c", "ordered", max_messages=8, wait_s=0) == []
            clock.advance(1000)  # m0's deadline: redelivered in place, first
            got = []
            while len(got) < 3:
                batch = await broker.pop("c", "ordered", max_messages=8, wait_s=5)
                assert len(batch) == 1  # still one at a time
                got.append(batch[0].record.body)
                await broker.ack("c", [batch[0].receipt_handle])
            assert got == [b"m0", b"m1", b"m2"]

    asyncio.run(scenario())


def test_fifo_order_holds_under_eight_concurrent_consumers(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("ordered", 4, message_type="fifo")
            groups = [f"user-{i}" for i in range(20)]
            per_group = 15
            await broker.send(
                [NewMessage("ordered", f"{g}:{i}".encode(), message_group=g)
                 for i in range(per_group) for g in groups]
            )  # fmt: skip
            seen: dict[str, list[int]] = {g: [] for g in groups}
            busy: set[str] = set()
            rng = random.Random(7)
            total = len(groups) * per_group

            async def consumer() -> None:
                while sum(len(v) for v in seen.values()) < total:
                    batch = await broker.pop("c", "ordered", max_messages=4, wait_s=0.2)
                    for m in batch:
                        group, index = m.record.body.decode().split(":")
                        assert group not in busy, "two messages of one group in flight"
                        busy.add(group)
                        await asyncio.sleep(rng.random() * 0.002)
                        if rng.random() < 0.1:
                            busy.discard(group)
                            await broker.nack("c", m.receipt_handle, delay_s=0)
                            continue
                        seen[group].append(int(index))
                        busy.discard(group)
                        await broker.ack("c", [m.receipt_handle])

            await asyncio.wait_for(asyncio.gather(*(consumer() for _ in range(8))), 60)
            for group in groups:
                assert seen[group] == list(range(per_group)), group

    asyncio.run(scenario())


def test_a_pop_without_a_filter_uses_the_groups_declared_subscription(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        from popmq.broker_core.types import GroupSettings, Subscription

        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.create_group_with_settings(
                "eu-only",
                settings=GroupSettings(
                    subscriptions=(Subscription("orders", "sql", "region = 'eu'"),)
                ),
            )
            await broker.send(
                [
                    NewMessage("orders", b"eu", properties={"region": "eu"}),
                    NewMessage("orders", b"us", properties={"region": "us"}),
                ]
            )
            assert _bodies(await broker.pop("eu-only", "orders", wait_s=0)) == [b"eu"]
            # A group without a declared subscription gets everything.
            assert _bodies(await broker.pop("other", "orders", wait_s=0, max_messages=8)) == [
                b"eu",
                b"us",
            ]

    asyncio.run(scenario())
