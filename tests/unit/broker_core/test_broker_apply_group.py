"""Broker.apply_group: a cluster group record applied to the broker's own copy of the group,
exactly, only for the topics it holds, never rolled back by an older record."""

from __future__ import annotations

import asyncio

import pytest

from popmq.broker_core import (
    ExponentialBackoff,
    GroupSettings,
    GroupState,
    InvalidArgumentError,
    NewMessage,
    NotFoundError,
    Subscription,
)
from popmq.broker_core.groups import TOMBSTONES_KEPT
from tests.unit.conftest import OpenBroker


def _state(
    *subscriptions: str,
    attempts: int = 5,
    backoff_ms: tuple[int, ...] = (2000,),
    **settings: object,
) -> GroupState:
    subs = tuple(Subscription(topic, "tag", "*") for topic in subscriptions)
    return GroupState(attempts, backoff_ms, GroupSettings(subscriptions=subs, **settings))  # type: ignore[arg-type]


def test_apply_creates_the_group_with_exactly_the_record_and_the_records_birth(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2)
            backoff = ExponentialBackoff(initial_s=2, max_s=8, multiplier=2)
            state = _state(
                "orders",
                attempts=7,
                backoff_ms=(2000, 4000, 8000),
                fifo=True,
                exponential_backoff=backoff,
            )
            info = await broker.apply_group("g", state, create_time_ms=1234, revision=10)
            assert (info.max_delivery_attempts, info.retry_backoff_ms) == (7, (2000, 4000, 8000))
            assert (info.create_time_ms, info.auto_created) == (1234, False)
            assert broker.get_group("g") == info
            assert broker.group_settings("g") == state.settings

        async with open_broker() as broker:  # one synced batch: it survives a restart
            assert broker.get_group("g").max_delivery_attempts == 7
            assert broker.group_settings("g").fifo

    asyncio.run(scenario())


def test_subscriptions_of_topics_the_broker_lacks_are_left_out_until_the_topic_arrives(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            state = _state("orders", "payments", consume_from="last")
            await broker.apply_group("g", state, create_time_ms=1, revision=5)
            assert [s.topic for s in broker.group_settings("g").subscriptions] == ["orders"]

            await broker.create_topic("payments", 2)
            await broker.send([NewMessage("payments", b"old", queue_id=0)])
            await broker.apply_group("g", state, create_time_ms=1, revision=5)  # re-applied
            assert [s.topic for s in broker.group_settings("g").subscriptions] == [
                "orders",
                "payments",
            ]
            # The newly subscribed topic starts where consume_from says: after "old".
            await broker.send([NewMessage("payments", b"new", queue_id=0)])
            popped = await broker.pop("g", "payments", max_messages=8, wait_s=0)
            assert [m.record.body for m in popped] == [b"new"]

    asyncio.run(scenario())


def test_an_older_revision_is_ignored_and_a_delete_keeps_the_last_one_applied(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.apply_group("g", _state(attempts=9), create_time_ms=1, revision=20)
            stale = await broker.apply_group("g", _state(attempts=3), create_time_ms=1, revision=19)
            assert stale.max_delivery_attempts == 9
            assert broker.get_group("g").max_delivery_attempts == 9
            newer = await broker.apply_group("g", _state(attempts=4), create_time_ms=1, revision=21)
            assert newer.max_delivery_attempts == 4

            # Deleted (no revision given): a record up to the last applied one is stale.
            await broker.delete_group("g")
            with pytest.raises(NotFoundError, match="deleted at cluster revision 21"):
                await broker.apply_group("g", _state(attempts=2), create_time_ms=1, revision=21)
            with pytest.raises(NotFoundError):
                broker.get_group("g")
            again = await broker.apply_group("g", _state(attempts=2), create_time_ms=1, revision=22)
            assert again.max_delivery_attempts == 2

    asyncio.run(scenario())


def test_a_push_that_arrives_after_the_delete_does_not_create_the_group_again(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.apply_group("g", _state(attempts=9), create_time_ms=1, revision=5)
            # The record was updated at 10 (its push is slow), then deleted at 11.
            await broker.delete_group_record("g", revision=11)
            with pytest.raises(NotFoundError, match=r"deleted at cluster revision 11.*10"):
                await broker.apply_group("g", _state(attempts=3), create_time_ms=1, revision=10)
            assert [g.name for g in await broker.list_groups()] == []

            # A deletion that reaches a broker which never had the group still counts.
            with pytest.raises(NotFoundError, match="group 'h' does not exist"):
                await broker.delete_group_record("h", revision=30)
            with pytest.raises(NotFoundError, match="deleted at cluster revision 30"):
                await broker.apply_group("h", _state(), create_time_ms=1, revision=29)

            # Created again in the cluster: a later revision applies.
            created = await broker.apply_group(
                "g", _state(attempts=4), create_time_ms=2, revision=12
            )
            assert created.max_delivery_attempts == 4
            # A first use created the group meanwhile: a stale record leaves it as it is.
            await broker.delete_group_record("g", revision=40)
            await broker.create_group("g")
            kept = await broker.apply_group("g", _state(attempts=8), create_time_ms=1, revision=39)
            assert kept.max_delivery_attempts == broker.get_group("g").max_delivery_attempts != 8

    asyncio.run(scenario())


def test_the_tombstones_kept_are_bounded(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            groups = broker._groups
            for i in range(TOMBSTONES_KEPT + 5):
                with pytest.raises(NotFoundError):
                    await groups.delete(f"g{i}", revision=100 + i)
            assert len(groups._deleted_revisions) == TOMBSTONES_KEPT
            # The oldest went first: a very late push of g0 is no longer refused.
            assert (await broker.apply_group("g0", _state(), create_time_ms=1, revision=1)).name
            with pytest.raises(NotFoundError):
                await broker.apply_group("g9999", _state(), create_time_ms=1, revision=1)

    asyncio.run(scenario())


def test_an_auto_created_group_is_taken_over_with_its_id_and_offsets(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", b"a"), NewMessage("orders", b"b")])
            (first,) = await broker.pop("g", "orders", max_messages=1, wait_s=0)
            await broker.ack("g", [first.receipt_handle])
            auto = broker.get_group("g")
            assert auto.auto_created

            info = await broker.apply_group("g", _state("orders"), create_time_ms=7, revision=2)
            assert info.group_id == auto.group_id and not info.auto_created
            popped = await broker.pop("g", "orders", max_messages=8, wait_s=0)
            assert [m.record.body for m in popped] == [b"b"]  # its offset stayed

    asyncio.run(scenario())


def test_applying_the_same_state_again_writes_nothing(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.apply_group("g", _state(), create_time_ms=1, revision=2)
            batches = broker.writer.stats.batches
            await broker.apply_group("g", _state(), create_time_ms=1, revision=3)
            assert broker.writer.stats.batches == batches

    asyncio.run(scenario())


def test_a_record_outside_the_brokers_limits_is_refused_naming_them(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            with pytest.raises(InvalidArgumentError, match="max_delivery_attempts 0"):
                await broker.apply_group("g", _state(attempts=0), create_time_ms=1, revision=2)
            with pytest.raises(InvalidArgumentError, match="empty retry_backoff"):
                await broker.apply_group("g", _state(backoff_ms=()), create_time_ms=1, revision=2)
            with pytest.raises(InvalidArgumentError, match="revision 0 is below"):
                await broker.apply_group("g", _state(), create_time_ms=1, revision=0)
            assert await broker.list_groups() == []

    asyncio.run(scenario())


def test_a_record_of_another_birth_replaces_the_group_here_with_a_fresh_one(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", b"first", queue_id=0)])
            old = await broker.apply_group("g", _state("orders"), create_time_ms=1000, revision=5)
            popped = await broker.pop("g", "orders", max_messages=8, wait_s=0)
            await broker.ack("g", popped[0].receipt_handle)
            assert await broker.pop("g", "orders", max_messages=8, wait_s=0) == []
            # The same birth again (a settings change, a re-apply): the group stays.
            same = await broker.apply_group("g", _state("orders"), create_time_ms=1000, revision=6)
            assert same.group_id == old.group_id

            # Deleted and created again while this broker was away: the new group does not
            # inherit the old one's offsets.
            new = await broker.apply_group("g", _state("orders"), create_time_ms=2000, revision=9)
            assert (new.group_id, new.create_time_ms) != (old.group_id, old.create_time_ms)
            again = await broker.pop("g", "orders", max_messages=8, wait_s=0)
            assert [m.record.body for m in again] == [b"first"]

    asyncio.run(scenario())
