"""A redrive of named dead letters: only those move, each is answered, and a selection that
is too large, repeated or mixed with max_messages is refused before anything moves."""

from __future__ import annotations

import asyncio

import pytest

from popmq.broker_core.broker import Broker
from popmq.broker_core.errors import InvalidArgumentError, NotFoundError
from popmq.broker_core.types import NewMessage, RedriveOutcome, RedriveResult
from tests.unit.conftest import OpenBroker


async def _dead_letters(broker: Broker, bodies: list[bytes]) -> dict[bytes, int]:
    """Dead-letter one message per body for group "c"; their offsets in %DLQ%c by body."""
    await broker.send([NewMessage("orders", body) for body in bodies])
    popped = await broker.pop("c", "orders", max_messages=len(bodies), wait_s=0)
    for message in popped:
        await broker.dead_letter("c", message.receipt_handle)
    stored = await broker.peek("%DLQ%c", queue_id=0, offset=0, max_messages=16)
    return {m.record.body: m.offset for m in stored}


def test_redrive_of_named_dead_letters_moves_only_those_and_reports_each(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            at = await _dead_letters(broker, [b"a", b"b", b"c"])
            result = await broker.redrive("c", only=[(0, at[b"b"])])
            assert (result.moved, result.dropped, result.remaining) == (1, 0, 2)
            assert (await broker.lag_report("c")).dlq_depth == 2  # the hole is not counted
            assert result.outcomes == (RedriveOutcome(0, at[b"b"], "moved"),)
            (back,) = await broker.pop("c", "orders", max_messages=8, wait_s=0)
            assert back.record.body == b"b"
            assert back.delivery_attempt == 1
            left = await broker.peek("%DLQ%c", queue_id=0, offset=0, max_messages=16)
            assert sorted(m.record.body for m in left) == [b"a", b"c"]

            # Already redriven, and never stored: reported, while the others still move.
            again = await broker.redrive("c", only=[(0, at[b"b"]), (0, 99), (0, at[b"a"])])
            assert [o.outcome for o in again.outcomes] == ["not_found", "not_found", "moved"]
            assert (again.moved, again.dropped) == (1, 0)
            # The head moved past the removed front: only "c" is counted now.
            assert again.remaining == 1
            assert (await broker.lag_report("c")).dlq_depth == 1

    asyncio.run(scenario())


def test_a_hole_left_by_a_named_redrive_is_not_counted_after_a_restart_nor_moved_again(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            at = await _dead_letters(broker, [b"a", b"b", b"c", b"d"])
            await broker.redrive("c", only=[(0, at[b"c"])])
            assert (await broker.lag_report("c")).dlq_depth == 3
        async with open_broker() as broker:  # the same data dir: a restart
            assert (await broker.lag_report("c")).dlq_depth == 3
            # The oldest 3 offsets hold a, b and the hole: two move, d remains.
            oldest = await broker.redrive("c", max_messages=3)
            assert (oldest.moved, oldest.remaining) == (2, 1)
            assert (await broker.lag_report("c")).dlq_depth == 1
            assert await broker.redrive("c") == RedriveResult(1, 0, 0)
            back = await broker.pop("c", "orders", max_messages=8, wait_s=0)
            assert sorted(m.record.body for m in back) == [b"a", b"b", b"c", b"d"]

    asyncio.run(scenario())


def test_a_named_dead_letter_whose_topic_is_gone_is_dropped(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            at = await _dead_letters(broker, [b"a"])
            await broker.delete_topic("orders")
            result = await broker.redrive("c", only=[(0, at[b"a"])])
            assert result.outcomes == (RedriveOutcome(0, at[b"a"], "dropped"),)
            assert (result.moved, result.dropped, result.remaining) == (0, 1, 0)

    asyncio.run(scenario())


def test_a_selection_for_a_group_without_dead_letters_finds_none(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.create_group("c")
            result = await broker.redrive("c", only=[(0, 0)])
            assert result.outcomes == (RedriveOutcome(0, 0, "not_found"),)
            with pytest.raises(NotFoundError):
                await broker.redrive("nobody", only=[(0, 0)])

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("selected", "max_messages", "says"),
    [
        ([(0, o) for o in range(1001)], None, "at most 1000"),
        ([(0, 1), (0, 1)], None, "named twice"),
        ([(0, 1)], 5, "exclude each other"),
        ([(0, -1)], None, "negative"),
        ([(1, 0)], None, "queue_id 1 is outside 0..0"),
    ],
)
def test_a_bad_selection_is_refused_before_anything_moves(
    open_broker: OpenBroker,
    selected: list[tuple[int, int]],
    max_messages: int | None,
    says: str,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            at = await _dead_letters(broker, [b"a", b"b"])
            with pytest.raises(InvalidArgumentError, match=says):
                await broker.redrive("c", max_messages=max_messages, only=selected)
            assert (await broker.lag_report("c")).dlq_depth == len(at)

    asyncio.run(scenario())
