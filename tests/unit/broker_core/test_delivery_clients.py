"""The client a pop names, recorded with its deliveries: in the in-flight view, its
per-consumer summary, the delivery history, and the stored checkpoint (across a restart)."""

from __future__ import annotations

import asyncio

import pytest

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import InvalidArgumentError
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import GroupDefaults
from popmq.broker_core.consume_queue import ConsumeQueue
from popmq.broker_core.inspection import (
    MAX_CONSUMERS,
    ConsumerInflight,
    GroupInspection,
    merge_consumers,
    merged_consumer_count,
)
from popmq.broker_core.pop.checkpoint import Checkpoint
from popmq.broker_core.types import NewMessage
from tests.unit.conftest import OpenBroker, settle


def test_inflight_rows_and_the_per_consumer_summary_name_the_popping_client(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 2)
            await broker.send([NewMessage("orders", b"x", queue_id=i % 2) for i in range(6)])
            start = clock.now_ms()
            a = await broker.pop("g", "orders", max_messages=3, invisible_s=30, wait_s=0,
                                 client_id="alice@host@1")  # fmt: skip
            clock.advance(1000)
            b = await broker.pop("g", "orders", max_messages=2, invisible_s=10, wait_s=0,
                                 client_id="bob")  # fmt: skip
            anonymous = await broker.pop("g", "orders", max_messages=1, invisible_s=60, wait_s=0)
            assert (len(a), len(b), len(anonymous)) == (3, 2, 1)
            view = await broker.inspect_group("g")
            holder = {(r.queue_id, r.offset): r.client_id for r in view.inflight}
            for client, popped in (("alice@host@1", a), ("bob", b), ("", anonymous)):
                assert all(holder[(m.queue_id, m.offset)] == client for m in popped)
            assert view.consumers == [
                ConsumerInflight("alice@host@1", 3, start + 30_000),
                ConsumerInflight("bob", 2, start + 1000 + 10_000),
                ConsumerInflight("", 1, start + 1000 + 60_000),
            ]
            # The summary covers every message in flight, not only the page's.
            page = await broker.inspect_group("g", page_size=1)
            assert len(page.inflight) == 1 and page.consumers == view.consumers
            # A changed invisible time keeps the delivery with its client; an ack frees it.
            new_handle, until = await broker.change_invisible_time("g", b[0].receipt_handle, 5)
            await broker.ack("g", [a[0].receipt_handle])
            after = await broker.inspect_group("g")
            moved = next(r for r in after.inflight if r.offset == b[0].offset and
                         r.queue_id == b[0].queue_id)  # fmt: skip
            assert (moved.client_id, moved.invisible_until_ms) == ("bob", until)
            assert [(c.client_id, c.count, c.earliest_until_ms) for c in after.consumers] == [
                ("alice@host@1", 2, start + 30_000),
                ("bob", 2, until),
                ("", 1, start + 1000 + 60_000),
            ]
            assert new_handle != b[0].receipt_handle

    asyncio.run(scenario())


def test_a_waiting_fifo_message_has_no_client_until_it_is_delivered(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("ordered", 1, message_type="fifo")
            await broker.send(
                [NewMessage("ordered", f"a{i}".encode(), message_group="a") for i in range(2)]
            )
            (head,) = await broker.pop("c", "ordered", max_messages=32, wait_s=0, client_id="p1")
            view = await broker.inspect_group("c")
            rows = {r.offset: (r.waiting, r.client_id) for r in view.inflight}
            assert rows == {0: (False, "p1"), 1: (True, "")}
            assert [(c.client_id, c.count) for c in view.consumers] == [("p1", 1)]
            await broker.ack("c", [head.receipt_handle])
            await settle()
            (second,) = await broker.pop("c", "ordered", wait_s=0, client_id="p2")
            assert second.offset == 1
            again = await broker.inspect_group("c")
            assert [(r.offset, r.client_id) for r in again.inflight] == [(1, "p2")]

    asyncio.run(scenario())


def test_history_steps_name_the_client_holding_or_letting_expire_each_delivery(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        groups = GroupDefaults(max_delivery_attempts=2)
        async with open_broker(clock=clock, groups=groups) as broker:
            await broker.create_topic("orders", 1)
            (sent,) = await broker.send([NewMessage("orders", b"x")])
            (first,) = await broker.pop("g", "orders", invisible_s=5, wait_s=0, client_id="alice")
            await broker.change_invisible_time("g", first.receipt_handle, 2)
            clock.advance(2000)  # alice let it expire: copied to the retry queue
            (second,) = await broker.pop("g", "orders", invisible_s=5, wait_s=5, client_id="bob")
            await broker.nack("g", second.receipt_handle, delay_s=1)
            clock.advance(1000)  # bob's last attempt expired: dead-lettered
            await settle()
            rows = await broker.message_history("orders", sent.message_id, group="g")
            assert [(r.event, r.client_id) for r in rows] == [
                ("stored", ""),
                ("pop", "alice"),
                ("change_invisible_time", "alice"),
                ("retry", "alice"),
                ("pop", "bob"),
                ("nack", "bob"),
                ("dead_letter", "bob"),
            ]

    asyncio.run(scenario())


def test_the_client_id_survives_a_restart_in_the_stored_checkpoint(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", b"m0"), NewMessage("orders", b"m1")])
            (m0,) = await broker.pop("g", "orders", max_messages=1, invisible_s=60, wait_s=0,
                                     client_id="worker-7")  # fmt: skip
            (m1,) = await broker.pop("g", "orders", max_messages=1, invisible_s=60, wait_s=0)
            # Moved deliveries are written at once, outside the chain: they keep it too.
            _, until = await broker.change_invisible_time("g", m1.receipt_handle, 90)

        async with open_broker(clock=clock) as broker:
            view = await broker.inspect_group("g")
            rows = {r.offset: (r.client_id, r.invisible_until_ms) for r in view.inflight}
            assert rows == {0: ("worker-7", m0.invisible_until_ms), 1: ("", until)}
            assert [(c.client_id, c.count) for c in view.consumers] == [("", 1), ("worker-7", 1)]

    asyncio.run(scenario())


def test_a_checkpoint_record_of_the_previous_release_loads_with_an_unknown_client() -> None:
    # The previous release wrote fields 1..16 only: exactly these bytes.
    old = records_pb2.CheckpointRecord(
        ck_id=7, group_id=1, topic_id=2, queue_id=0, range_start=0, range_end=2,
        offsets=[0, 1], pop_time_ms=1, deadline_ms=2, resolved_bits=b"\x01", chained=True,
    ).SerializeToString()  # fmt: skip
    cq = ConsumeQueue(group="g", group_id=1, topic="t", topic_id=2, queue_id=0, committed=0)
    ck = Checkpoint.from_record(records_pb2.CheckpointRecord.FromString(old), cq)
    assert (ck.client_id, ck.offsets, ck.resolved) == ("", [0, 1], 1)
    ck.client_id = "c"
    assert records_pb2.CheckpointRecord.FromString(ck.to_record()).client_id == "c"


def test_a_pop_refuses_a_client_id_too_long_or_with_control_characters(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", b"x")])
            with pytest.raises(InvalidArgumentError, match="client_id is 256 characters") as bad:
                await broker.pop("g", "orders", wait_s=0, client_id="c" * 256)
            assert bad.value.field == "client_id"
            with pytest.raises(InvalidArgumentError, match="control characters"):
                await broker.pop("g", "orders", wait_s=0, client_id="a\nb")
            # Refused before reading: the message is still there for a good pop.
            (m,) = await broker.pop("g", "orders", wait_s=0, client_id="c" * 255)
            assert m.record.body == b"x"

    asyncio.run(scenario())


def test_per_broker_consumer_rows_merge_into_one_row_per_client() -> None:
    merged = merge_consumers(
        [
            [ConsumerInflight("a", 2, 50), ConsumerInflight("", 1, 10)],
            [ConsumerInflight("a", 1, 40), ConsumerInflight("b", 3, 90)],
        ]
    )
    assert merged == [
        ConsumerInflight("a", 3, 40),
        ConsumerInflight("b", 3, 90),
        ConsumerInflight("", 1, 10),
    ]


def test_the_per_consumer_summary_shows_the_clients_with_the_most_and_counts_them_all(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            clients = MAX_CONSUMERS + 2
            await broker.send([NewMessage("orders", b"x") for _ in range(clients + 1)])
            for i in range(clients):
                await broker.pop("g", "orders", max_messages=1 + (i == 0), wait_s=0,
                                 client_id=f"c{i:05d}")  # fmt: skip
            view = await broker.inspect_group("g", page_size=1)
            assert view.consumer_count == clients
            assert len(view.consumers) == MAX_CONSUMERS
            assert view.consumers[0] == ConsumerInflight("c00000", 2, view.consumers[0].
                                                         earliest_until_ms)  # fmt: skip
            assert [c.client_id for c in view.consumers[1:3]] == ["c00001", "c00002"]

    asyncio.run(scenario())


def test_merged_brokers_count_their_clients_exactly_unless_a_list_was_cut() -> None:
    def view(clients: list[str], total: int) -> GroupInspection:
        rows = [ConsumerInflight(c, 1, 5) for c in clients]
        return GroupInspection("g", 0, [], [], "", [], [], 0, rows, total)

    whole = [view(["a", "b"], 2), view(["b", "c"], 2)]
    merged = merge_consumers(v.consumers for v in whole)
    assert merged_consumer_count(whole, len(merged)) == 3  # b holds messages on both
    cut = [view(["a", "b"], 7), view(["b", "c"], 2)]
    merged = merge_consumers(v.consumers for v in cut)
    assert merged_consumer_count(cut, len(merged)) == 7  # at least the cut broker's 7
