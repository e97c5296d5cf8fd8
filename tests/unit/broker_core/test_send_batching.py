"""A send stores its messages by queue, one offset allocation a queue, and looks up and
claims only the messages that carry an id: what each message gets is what it got when
every message was stored one by one."""

from __future__ import annotations

import asyncio

import pytest

from popmq.broker_core.errors import InvalidArgumentError
from popmq.broker_core.types import NewMessage
from tests.support.waiting import until
from tests.unit.conftest import OpenBroker, hold_fsync, now_ms, settle


def test_a_send_over_several_queues_stores_each_in_send_order(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("mixed", 3, message_type="mixed")
            await broker.create_group("g")
            (earlier,) = await broker.send([NewMessage("mixed", b"earlier", message_id="ID-0")])
            messages = [
                NewMessage("mixed", b"r0"),
                NewMessage("mixed", b"f0", message_group="fifo"),
                NewMessage("mixed", b"r1", keys=("k1",)),
                NewMessage("mixed", b"late", deliver_at_ms=now_ms() + 3_600_000),
                NewMessage("mixed", b"again", message_id="ID-0"),  # stored before: a duplicate
                NewMessage("mixed", b"f1", message_group="fifo"),
                NewMessage("mixed", b"r2", message_id="ID-2"),
                NewMessage("mixed", b"twice", dedup_id="dup"),
                NewMessage("mixed", b"twice", dedup_id="dup"),  # repeats the one before
                NewMessage("mixed", b"r3", queue_id=2),
                NewMessage("mixed", b"f2", message_group="fifo"),
            ]
            results = await broker.send(messages)
            assert len(results) == len(messages)
            by_body = dict(zip([m.body for m in messages], results, strict=False))
            assert results[4].duplicate
            assert (results[4].queue_id, results[4].offset) == (earlier.queue_id, earlier.offset)
            assert results[8].duplicate and results[8].offset == results[7].offset
            assert results[8].message_id == results[7].message_id
            assert results[3].offset == -1 and results[3].recall_handle
            assert results[6].message_id == "ID-2" and results[9].queue_id == 2
            stored = [r for i, r in enumerate(results) if i not in (3, 4, 8)]
            assert not any(r.duplicate for r in stored)
            assert len({r.message_id for r in results}) == len(messages) - 1
            # Each queue's messages of the send: the next offsets, in send order.
            queues = {q.queue_id: q.max_offset for q in (await broker.get_topic("mixed"))[1]}
            for queue_id, max_offset in queues.items():
                mine = [r.offset for r in stored if r.queue_id == queue_id]
                first = 1 if queue_id == earlier.queue_id else 0
                assert mine == list(range(first, max_offset))
            fifo = [by_body[b].queue_id for b in (b"f0", b"f1", b"f2")]
            assert len(set(fifo)) == 1
            # Every stored one is found by its id, where its result says, and by its key.
            for r in stored:
                found = await broker.query_message("mixed", r.message_id)
                assert (found.queue_id, found.offset) == (r.queue_id, r.offset)
            (keyed,) = await broker.query_messages_by_key("mixed", "k1")
            assert (keyed.queue_id, keyed.offset) == (
                by_body[b"r1"].queue_id,
                by_body[b"r1"].offset,
            )
            assert (await broker.query_message("mixed", results[3].message_id)).offset == -1
            popped = await broker.pop("g", "mixed", max_messages=32, wait_s=0)
            assert sorted(m.record.body for m in popped) == sorted(
                [b"earlier", b"r0", b"f0", b"r1", b"r2", b"twice", b"r3"]  # f1, f2 wait on f0
            )
            assert broker.stats.sent["mixed"] == 1 + len(stored)

    asyncio.run(scenario())


def test_a_message_given_a_new_id_is_deduplicated_when_resent_with_it(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2)
            first = await broker.send([NewMessage("orders", b"a"), NewMessage("orders", b"b")])
            assert not any(r.duplicate for r in first)
            again = await broker.send(
                [NewMessage("orders", b"a", message_id=r.message_id) for r in first]
            )
            assert all(r.duplicate for r in again)
            assert [(r.queue_id, r.offset) for r in again] == [
                (r.queue_id, r.offset) for r in first
            ]
            assert broker.lookup_sends("orders", [(r.message_id, "") for r in first]) == [
                True,
                True,
            ]

    asyncio.run(scenario())


def test_concurrent_sends_deduplicate_as_sends_one_after_another_do(
    open_broker: OpenBroker,
) -> None:
    """A dedup id equal to another message's id is another dedup key (the index keeps
    them apart), whether or not the two sends overlap; the same id twice is one key."""

    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2)
            await broker.create_group("g")
            apart = [
                (await broker.send([NewMessage("orders", b"a", message_id="X")]))[0],
                (await broker.send([NewMessage("orders", b"b", message_id="Y", dedup_id="X")]))[0],
            ]
            together = await asyncio.gather(
                broker.send([NewMessage("orders", b"c", message_id="U")]),
                broker.send([NewMessage("orders", b"d", message_id="V", dedup_id="U")]),
                broker.send([NewMessage("orders", b"e", message_id="U")]),
            )
            assert [r.duplicate for r in apart] == [False, False]
            assert [r[0].duplicate for r in together] == [False, False, True]
            assert together[2][0].offset == together[0][0].offset
            popped = await broker.pop("g", "orders", max_messages=32, wait_s=0)
            assert sorted(m.record.body for m in popped) == [b"a", b"b", b"c", b"d"]

    asyncio.run(scenario())


def test_sends_handed_over_at_once_are_stored_in_that_order_each_with_its_own_outcome(
    open_broker: OpenBroker,
) -> None:
    """`send_now` hands a send to group commit before it returns (a frame's sends on the
    hop, one after the other): each is answered as if it had been sent alone."""

    async def scenario() -> None:
        async with open_broker(auto_create_topics=True) as broker:
            await broker.create_topic("orders", 2)
            before = (await broker.metrics_snapshot()).write_batches
            tickets = [
                broker.send_now([NewMessage("orders", b"a", message_id="A", queue_id=1)]),
                broker.send_now([NewMessage("orders", b"b", queue_id=1)]),
                broker.send_now([NewMessage("orders", b"again", message_id="A", queue_id=1)]),
                broker.send_now([NewMessage("orders", b"c", queue_id=1)]),
            ]
            with pytest.raises(InvalidArgumentError, match="queue_id 5 is not a queue"):
                broker.send_now([NewMessage("orders", b"x", queue_id=5)])
            # A topic still to create: nothing is handed over; `send` creates it.
            assert broker.send_now([NewMessage("fresh", b"f")]) is None
            results = []
            for ticket in tickets:
                assert ticket is not None
                (result,) = await ticket.results()
                results.append(result)
            assert [r.offset for r in results] == [0, 1, 0, 2]
            assert [r.duplicate for r in results] == [False, False, True, False]
            assert results[2].message_id == "A"
            # Handed over together, written together.
            assert (await broker.metrics_snapshot()).write_batches == before + 1
            stored = await broker.peek("orders", queue_id=1, max_messages=8)
            assert [m.record.body for m in stored] == [b"a", b"b", b"c"]
            assert "fresh" not in {t.name for t in await broker.list_topics()}
            (fresh,) = await broker.send([NewMessage("fresh", b"f")])
            assert fresh.offset == 0

    asyncio.run(scenario())


def test_a_send_whose_wait_is_given_up_is_still_stored_once_and_its_repeats_are_duplicates(
    open_broker: OpenBroker,
) -> None:
    """Cancelling the wait for a ticket gives up its answer, not its write nor its dedup
    claims: a repeat that waited on it is answered as its duplicate, and so is a retry."""

    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            first = broker.send_now([NewMessage("orders", b"first", message_id="M")])
            repeat = broker.send_now([NewMessage("orders", b"repeat", message_id="M")])
            assert first is not None and repeat is not None
            waiting = asyncio.ensure_future(first.results())
            await asyncio.sleep(0)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            (repeated,) = await repeat.results()
            assert repeated.duplicate and repeated.offset == 0
            (retried,) = await broker.send([NewMessage("orders", b"retried", message_id="M")])
            assert retried.duplicate
            assert retried.offset == 0
            stored = await broker.peek("orders", queue_id=0, max_messages=8)
            assert [m.record.body for m in stored] == [b"first"]

    asyncio.run(scenario())


def test_a_ticket_whose_wait_was_cancelled_can_be_waited_for_again(
    open_broker: OpenBroker,
) -> None:
    """A cancelled wait cancels only itself: waiting for the same ticket again answers
    with the send's own results once its write is done."""

    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            gate, _ = await hold_fsync(broker, "orders")  # its write waits behind an fsync
            ticket = broker.send_now([NewMessage("orders", b"first", message_id="M")])
            assert ticket is not None
            waiting = asyncio.ensure_future(ticket.results())
            await asyncio.sleep(0)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            gate.set()
            (result,) = await ticket.results()
            assert (result.message_id, result.offset, result.duplicate) == ("M", 2, False)
            (again,) = await ticket.results()  # a wait after the write returns at once
            assert again == result

    asyncio.run(scenario())


def test_a_retry_of_a_cancelled_send_before_its_write_is_not_stored_twice(
    open_broker: OpenBroker,
) -> None:
    """The write of a send whose caller gave up waits behind an fsync in flight; a retry
    of it that arrives before that write must still find its claim, not store a copy."""

    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            gate, earlier = await hold_fsync(broker, "orders")
            given_up = asyncio.ensure_future(
                broker.send([NewMessage("orders", b"first", message_id="M")])
            )
            for _ in range(3):
                await asyncio.sleep(0)
            given_up.cancel()
            with pytest.raises(asyncio.CancelledError):
                await given_up
            retry = asyncio.ensure_future(
                broker.send([NewMessage("orders", b"retry", message_id="M")])
            )
            for _ in range(3):
                await asyncio.sleep(0)
            gate.set()
            (retried,) = await retry
            assert retried.duplicate
            for ticket in earlier:
                assert ticket is not None
                await ticket.results()
            stored = await broker.peek("orders", queue_id=0, max_messages=8)
            assert [m.record.body for m in stored] == [b"x", b"y", b"first"]

    asyncio.run(scenario())


def test_a_send_that_fails_while_planned_leaves_no_claim_behind(open_broker: OpenBroker) -> None:
    """Its dedup ids are claimed before its records are encoded; when encoding fails (here a
    key that is not valid UTF-8, which only an embedded caller can pass), the claims end with
    it, so a later send of the same id is stored instead of waiting for good."""

    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            with pytest.raises(UnicodeEncodeError):
                await broker.send([NewMessage("orders", b"x", message_id="M", keys=("\ud800",))])
            (stored,) = await asyncio.wait_for(
                broker.send([NewMessage("orders", b"y", message_id="M")]), 30
            )
            assert not stored.duplicate and stored.offset == 0

    asyncio.run(scenario())


def test_a_tickets_results_are_ready_at_once_after_its_done_callback(
    open_broker: OpenBroker,
) -> None:
    """`results_now` answers nothing while the write is under way and, from the ticket's
    done-callback on, what `results` answers: a repeat of an earlier send its duplicate."""

    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            gate, earlier = await hold_fsync(broker, "orders")
            first = broker.send_now([NewMessage("orders", b"first", message_id="M")])
            repeat = broker.send_now([NewMessage("orders", b"repeat", message_id="M")])
            assert first is not None and repeat is not None
            settled: list[object] = []
            repeat.add_done_callback(settled.append)
            await settle()
            assert first.results_now() is None
            assert repeat.results_now() is None
            assert settled == []
            gate.set()
            await until(lambda: bool(settled), "the repeat's write to settle", 10.0)
            ready = repeat.results_now()
            assert ready is not None
            assert ready == await repeat.results()
            assert ready[0].duplicate and ready[0].offset == 2
            assert first.results_now() == await first.results()
            for ticket in earlier:
                assert ticket is not None
                await ticket.results()

    asyncio.run(scenario())
