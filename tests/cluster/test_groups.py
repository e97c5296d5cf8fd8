"""Group records in the coordinator (popmq.coordination.groups): the value, admin operations with
compare-and-set under broker_core's rules, and GroupCache, against LocalCoordinator and a
real etcd."""

from __future__ import annotations

import asyncio

import pytest

from popmq.broker_core import (
    AlreadyExistsError,
    ExponentialBackoff,
    GroupDefaults,
    GroupSettings,
    GroupState,
    InvalidArgumentError,
    NotFoundError,
    Subscription,
)
from popmq.coordination import CorruptValueError
from popmq.coordination.coordinator import Entry
from popmq.coordination.groups import GroupAdmin, GroupCache, GroupRecord, GroupRules
from tests.cluster.conftest import MakeCoordinator

pytestmark = pytest.mark.timeout(60)

TOPICS = {"orders", "payments"}


def _topic_exists(name: str) -> None:
    if name not in TOPICS:
        raise NotFoundError(f"topic {name!r} does not exist")


def test_a_record_round_trips_and_a_newer_schema_is_refused() -> None:
    settings = GroupSettings(
        fifo=True,
        subscriptions=(Subscription("orders", "sql", "a > 1"),),
        consume_from="timestamp",
        consume_from_ms=123,
        exponential_backoff=ExponentialBackoff(initial_s=2, max_s=60, multiplier=3),
    )
    record = GroupRecord("billing", GroupState(5, (1000, 2000), settings), 99, auto_created=True)
    entry = Entry("groups/billing", record.to_value(), 12, 10, 2)
    decoded = GroupRecord.from_entry(entry)
    assert decoded == record
    assert decoded is not None and decoded.revision == 12 and decoded.group_id == 10
    assert decoded.info().max_delivery_attempts == 5
    newer = Entry("groups/billing", {**record.to_value(), "schema": 2}, 3, 3, 1)
    with pytest.raises(CorruptValueError, match="schema 2, newer"):
        GroupRecord.from_entry(newer)
    bad = Entry("groups/billing", {**record.to_value(), "fifo": "yes"}, 3, 3, 1)
    with pytest.raises(CorruptValueError, match="not a popmq group record"):
        GroupRecord.from_entry(bad)


def test_admin_checks_by_broker_rules_and_cache_follows(make_coordinator: MakeCoordinator) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator()
        rules = GroupRules(defaults=GroupDefaults(max_delivery_attempts=9))
        admin = GroupAdmin(coordinator, rules, _topic_exists)
        cache = GroupCache(coordinator)
        await cache.start()
        try:
            auto = await admin.ensure("billing")
            assert auto.auto_created and auto.state.max_delivery_attempts == 9
            assert (await admin.ensure("billing")).revision == auto.revision  # no rewrite

            # An explicit create takes an auto-created group over, keeping its birth.
            created = await admin.create(
                "billing",
                max_delivery_attempts=4,
                settings=GroupSettings(subscriptions=(Subscription("orders", "tag", "A"),)),
            )
            assert not created.auto_created
            assert created.create_time_ms == auto.create_time_ms
            with pytest.raises(AlreadyExistsError, match="already exists"):
                await admin.create("billing")
            with pytest.raises(NotFoundError, match="'nope' does not exist"):
                await admin.create("other", settings=GroupSettings(
                    subscriptions=(Subscription("nope"),)
                ))  # fmt: skip
            with pytest.raises(InvalidArgumentError, match="max_delivery_attempts"):
                await admin.create("other", max_delivery_attempts=0)

            updated = await admin.update(
                "billing",
                fifo=True,
                set_subscriptions=[Subscription("payments")],
                retry_backoff_s=[2, 4],
            )
            assert updated.settings.fifo
            assert [s.topic for s in updated.settings.subscriptions] == ["orders", "payments"]
            assert updated.state.retry_backoff_ms == (2000, 4000)
            assert updated.state.max_delivery_attempts == 4
            with pytest.raises(InvalidArgumentError, match="does not subscribe to topic 'x'"):
                await admin.update("billing", remove_subscriptions=["x"])
            with pytest.raises(NotFoundError):
                await admin.update("ghost", fifo=True)

            await cache.wait_for(updated.revision, timeout_s=10)
            assert cache.get("billing").settings.fifo
            assert cache.get("billing").group_id == auto.group_id  # one id since creation

            revision = await admin.delete("billing")
            await cache.wait_for(revision, timeout_s=10)
            with pytest.raises(NotFoundError, match="'billing' does not exist"):
                cache.get("billing")
            with pytest.raises(InvalidArgumentError):
                cache.get("bad name!")
        finally:
            await cache.close()
            await coordinator.close()

    asyncio.run(scenario())


def test_concurrent_updates_are_all_kept(make_coordinator: MakeCoordinator) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator()
        admin = GroupAdmin(coordinator, GroupRules(), _topic_exists)
        try:
            await admin.create("g")
            await asyncio.gather(
                admin.update("g", set_subscriptions=[Subscription("orders")]),
                admin.update("g", set_subscriptions=[Subscription("payments")]),
                admin.update("g", fifo=True),
            )
            final = await admin.get("g")
            assert final.settings.fifo
            assert {s.topic for s in final.settings.subscriptions} == TOPICS
        finally:
            await coordinator.close()

    asyncio.run(scenario())
