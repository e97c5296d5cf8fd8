"""A group's runtime view (broker_core/inspection.py) against the real broker."""

from __future__ import annotations

import asyncio

import pytest

from popmq.broker_core import InvalidArgumentError, NotFoundError
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import GroupDefaults
from popmq.broker_core.consume_queue import ConsumeQueue
from popmq.broker_core.inspection import MAX_INFLIGHT_PAGE, queue_page
from popmq.broker_core.pop.checkpoint import Checkpoint
from popmq.broker_core.types import NewMessage
from tests.unit.conftest import OpenBroker, settle


def test_inspection_shows_held_polls_inflight_messages_and_revive_lag(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 2)
            await broker.create_topic("other", 1)
            sent = await broker.send(
                [NewMessage("orders", f"m{i}".encode(), queue_id=i % 2) for i in range(3)]
            )
            popped = await broker.pop("g", "orders", max_messages=32, invisible_s=10, wait_s=0)
            assert len(popped) == 3
            held = [
                asyncio.create_task(broker.pop("g", "orders", wait_s=5, queue_id=1)),
                asyncio.create_task(broker.pop("g", "orders", wait_s=5)),
                asyncio.create_task(broker.pop("g", "other", wait_s=5)),
            ]
            await settle()
            view = await broker.inspect_group("g")
            polls = {(p.topic, p.queue_id): p.count for p in view.held_polls}
            assert polls == {("orders", 1): 1, ("orders", -1): 1, ("other", -1): 1}
            only = await broker.inspect_group("g", "other")
            assert [(p.topic, p.queue_id) for p in only.held_polls] == [("other", -1)]
            rows = view.inflight
            assert view.next_page_token == ""
            assert {r.message_id for r in rows} == {s.message_id for s in sent}
            assert [(r.queue_id, r.offset) for r in rows] == [(0, 0), (0, 1), (1, 0)]
            assert all(r.attempt == 1 and not r.retry and not r.waiting for r in rows)
            assert {r.invisible_until_ms for r in rows} == {clock.now_ms() + 10_000}
            (revive,) = view.revive
            assert revive.lag_ms == 0
            assert revive.next_deadline_ms == clock.now_ms() + 10_000
            assert revive.live_checkpoints >= 1
            # Past the deadline and before the revive loop ran: redelivery is 1 s late.
            clock.advance(11_000)
            (late,) = (await broker.inspect_group("g", "orders")).revive
            assert (late.lag_ms, late.oldest_due_ms) == (1000, clock.now_ms() - 1000)
            for task in held:
                await task  # the revived copies (or the hold's end) answer them
            await settle()
            retried = [r for r in (await broker.inspect_group("g")).inflight if r.retry]
            assert retried and all(r.attempt == 2 and r.queue_id == 0 for r in retried)

    asyncio.run(scenario())


def test_inflight_pages_cover_every_message_once_in_queue_and_offset_order(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 3)
            await broker.send([NewMessage("orders", b"x", queue_id=i % 3) for i in range(11)])
            await broker.pop("g", "orders", max_messages=32, wait_s=0)
            seen: list[tuple[int, int]] = []
            token = ""
            pages = 0
            while True:
                view = await broker.inspect_group("g", page_size=2, page_token=token)
                assert len(view.inflight) <= 2
                seen += [(r.queue_id, r.offset) for r in view.inflight]
                pages += 1
                token = view.next_page_token
                if not token:
                    break
            assert seen == sorted(seen) and len(seen) == 11 == len(set(seen))
            assert pages in (6, 7)  # a full last page may be followed by an empty one

    asyncio.run(scenario())


def test_inspection_refuses_bad_arguments_saying_what_is_allowed(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", b"x")])
            await broker.pop("g", "orders", wait_s=0)
            with pytest.raises(InvalidArgumentError, match=f"1..{MAX_INFLIGHT_PAGE}"):
                await broker.inspect_group("g", page_size=MAX_INFLIGHT_PAGE + 1)
            with pytest.raises(InvalidArgumentError, match="next_page_token"):
                await broker.inspect_group("g", page_token="junk")
            with pytest.raises(NotFoundError):
                await broker.inspect_group("nobody")
            with pytest.raises(NotFoundError):
                await broker.inspect_group("g", "missing")
            with pytest.raises(InvalidArgumentError):
                await broker.inspect_group("bad name!")

    asyncio.run(scenario())


def test_blocked_fifo_head_names_the_message_holding_its_group_and_those_behind(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("ordered", 1, message_type="fifo")
            sent = await broker.send(
                [NewMessage("ordered", f"a{i}".encode(), message_group="a") for i in range(3)]
                + [NewMessage("ordered", b"b0", message_group="b")]
            )
            first = await broker.pop("c", "ordered", max_messages=32, invisible_s=20, wait_s=0)
            assert sorted(m.record.body for m in first) == [b"a0", b"b0"]
            view = await broker.inspect_group("c", "ordered")
            assert view.blocked_groups == 1  # b has nothing behind its head
            (head,) = view.blocked_heads
            assert (head.message_group, head.offset, head.waiting) == ("a", 0, 2)
            assert head.message_id == sent[0].message_id
            assert head.delivered and head.attempt == 1
            assert head.invisible_until_ms == clock.now_ms() + 20_000
            waiting = [r for r in view.inflight if r.waiting]
            assert [r.offset for r in waiting] == [1, 2]
            a0 = next(m for m in first if m.record.body == b"a0")
            await broker.ack("c", [a0.receipt_handle])
            await settle()
            (a1,) = await broker.pop("c", "ordered", wait_s=0)
            again = await broker.inspect_group("c", "ordered")
            (head,) = again.blocked_heads
            assert (head.offset, head.waiting) == (1, 1)
            assert a1.record.body == b"a1"

    asyncio.run(scenario())


def test_message_history_follows_pops_nacks_retry_copies_and_dead_lettering(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        groups = GroupDefaults(max_delivery_attempts=2)
        async with open_broker(clock=clock, groups=groups) as broker:
            await broker.create_topic("orders", 1)
            (sent, other) = await broker.send(
                [NewMessage("orders", b"x"), NewMessage("orders", b"y")]
            )
            first = await broker.pop("g", "orders", max_messages=2, invisible_s=5, wait_s=0)
            assert [m.record.message_id for m in first] == [sent.message_id, other.message_id]
            await broker.ack("g", [first[1].receipt_handle])
            await broker.change_invisible_time("g", first[0].receipt_handle, 2)
            await broker.pop("other", "orders", max_messages=2, invisible_s=60, wait_s=0)
            clock.advance(2000)  # expired: copied to the retry queue as attempt 2
            (second,) = await broker.pop("g", "orders", invisible_s=5, wait_s=5)
            assert second.delivery_attempt == 2 and second.record.message_id == sent.message_id
            await broker.nack("g", second.receipt_handle, delay_s=1)
            clock.advance(1000)  # the last attempt expired: dead-lettered
            await settle()
            rows = await broker.message_history("orders", sent.message_id, group="g")
            steps = [(r.event, r.retry, r.attempt) for r in rows]
            assert steps == [
                ("stored", False, 1),
                ("pop", False, 1),
                ("change_invisible_time", False, 1),
                ("retry", False, 1),
                ("pop", True, 2),
                ("nack", True, 2),
                ("dead_letter", True, 2),
            ]
            assert rows[3].to_topic.startswith("%RETRY%") and rows[3].to_offset == 0
            assert rows[-1].to_topic == "%DLQ%g"
            assert rows[1].invisible_until_ms == rows[1].time_ms + 5000
            assert [r.time_ms for r in rows] == sorted(r.time_ms for r in rows)
            every = await broker.message_history("orders", sent.message_id)
            assert {r.group for r in every} == {"", "g", "other"}
            acked = await broker.message_history("orders", other.message_id, group="g")
            assert [r.event for r in acked] == ["stored", "pop"]  # acked: nothing more
            with pytest.raises(NotFoundError):
                await broker.message_history("orders", "no-such-id")
            with pytest.raises(InvalidArgumentError, match="message_id"):
                await broker.message_history("orders", "")

    asyncio.run(scenario())


def _queue_with_inflight(offsets: list[int]) -> ConsumeQueue:
    cq = ConsumeQueue(group="g", group_id=1, topic="t", topic_id=1, queue_id=0, committed=0)
    ck = Checkpoint(
        ck_id=1, queue=cq, range_start=0, range_end=max(offsets) + 1, offsets=offsets,
        pop_time_ms=0, deadline_ms=1, chained=True,
    )  # fmt: skip
    cq.add(ck)
    cq.pop_offset = max(offsets) + 1
    return cq


def test_a_big_queue_is_paged_by_a_bounded_walk_and_a_small_one_by_sorting() -> None:
    offsets = [o for o in range(0, 300) if o % 3 == 0]  # 100 in flight, gaps between
    cq = _queue_with_inflight(offsets)
    # Sorted (at most sort_limit in flight): the page, then where the next one starts.
    assert queue_page(cq, -1, 4, 1000) == ([0, 3, 6, 9], 9, 900)
    assert queue_page(cq, 290, 4, 1000) == ([291, 294, 297], None, 900)
    # Walked: at most `budget` offsets per call, a short page with where it stopped.
    seen: list[int] = []
    after, calls = -1, 0
    while True:
        page, last, _ = queue_page(cq, after, 10, 20, sort_limit=50)
        calls += 1
        assert len(page) <= 10
        seen += page
        if last is None:
            break
        after = last
    assert seen == offsets and calls >= 300 // 20
