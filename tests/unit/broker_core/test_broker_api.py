"""The BrokerAPI Protocol: the facade (and RemoteBroker, its remote twin) implements every
member with the same signature, only the members a cluster-mode proxy answers by itself are
synchronous, and server_info, metrics_snapshot and pull with wait answer plain values."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time

import pytest

from popmq.broker_core.api import (
    BrokerAPI,
    HistogramSnapshot,
    MetricsSnapshot,
    ReceivedPopAPI,
    ServerInfo,
    TransactionAPI,
)
from popmq.broker_core.broker import Broker
from popmq.broker_core.config import PopConfig
from popmq.broker_core.errors import InvalidArgumentError
from popmq.broker_core.types import NewMessage
from popmq.cluster import ClusterBroker, RemoteBroker
from tests.unit.conftest import OpenBroker


def _members(cls: type) -> dict[str, object]:
    return {
        name: value
        for name, value in vars(cls).items()
        if not name.startswith("_") and callable(value)
    }


@pytest.mark.parametrize("implementation", [Broker, RemoteBroker])
def test_the_facade_implements_every_member_of_the_protocol_with_its_signature(
    implementation: type,
) -> None:
    members = _members(BrokerAPI)
    assert len(members) > 40
    for name, declared in sorted(members.items()):
        implemented = getattr(implementation, name, None)
        assert implemented is not None, f"{implementation.__name__} lacks {name}"
        assert inspect.signature(implemented) == inspect.signature(declared), name  # type: ignore[arg-type]
        assert inspect.iscoroutinefunction(implemented) == inspect.iscoroutinefunction(declared), (
            f"{name}: async in one, sync in the other"
        )


@pytest.mark.parametrize("implementation", [RemoteBroker, ClusterBroker])
def test_a_proxys_remote_brokers_pop_in_the_received_form_with_pops_arguments(
    implementation: type,
) -> None:
    """ReceivedPopAPI: the Protocol is checked by name at run time (isinstance), so the
    signatures are pinned here; its arguments are pop's but `reserve`."""
    (name,) = _members(ReceivedPopAPI)
    implemented = getattr(implementation, name)
    assert inspect.signature(implemented) == inspect.signature(getattr(ReceivedPopAPI, name))
    assert inspect.iscoroutinefunction(implemented)
    pop = inspect.signature(BrokerAPI.pop).parameters
    assert [p for p in pop if p != "reserve"] == list(inspect.signature(implemented).parameters)
    assert not isinstance(Broker.__new__(Broker), ReceivedPopAPI)  # serve encodes it itself


@pytest.mark.parametrize("implementation", [Broker, RemoteBroker, ClusterBroker])
def test_every_broker_implements_the_transaction_api_with_its_signatures(
    implementation: type,
) -> None:
    assert TransactionAPI in BrokerAPI.__mro__
    members = _members(TransactionAPI)
    assert {"send_half", "end_transaction", "due_checks", "resume_discarded"} <= set(members)
    for name, declared in sorted(members.items()):
        implemented = getattr(implementation, name, None)
        assert implemented is not None, f"{implementation.__name__} lacks {name}"
        assert inspect.signature(implemented) == inspect.signature(declared), name  # type: ignore[arg-type]
        assert inspect.iscoroutinefunction(implemented), f"{name} must be async"
        assert inspect.iscoroutinefunction(declared), f"{name} must be async"


def test_only_what_a_cluster_mode_proxy_answers_without_a_broker_is_synchronous() -> None:
    # Metadata from the proxy's catalog cache, limits read once, local checks, a signal:
    # every other member reads or changes the broker's state and must be awaitable.
    synchronous = {
        name
        for name, member in _members(BrokerAPI).items()
        if not inspect.iscoroutinefunction(member)
    }
    assert synchronous == {
        "get_group",
        "group_settings",
        "release_waiters",
        "server_info",
        "subscription_filter",
        "topic_info",
    }


def test_value_types_of_the_api_are_frozen() -> None:
    for cls in (ServerInfo, MetricsSnapshot, HistogramSnapshot):
        assert dataclasses.is_dataclass(cls)
        assert cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]


def test_server_info_carries_the_limits(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker(pop=PopConfig(max_batch=7), auto_create_topics=True) as broker:
            api: BrokerAPI = broker
            info = api.server_info()
            assert (info.pop.max_batch, info.auto_create_topics) == (7, True)
            assert info.long_polling.max_timeout_s == broker.config.long_polling.max_timeout_s
            assert info.max_delay_s == broker.config.messages.max_delay_s
            assert info.data_dir == str(broker.config.store.data_dir.resolve())
            # A front end's pop arguments take the broker's defaults and its limits.
            assert info.pop_arguments().max_messages == 7
            with pytest.raises(InvalidArgumentError, match="max_messages 8 is above the maximum 7"):
                info.pop_arguments(max_messages=8)

    asyncio.run(scenario())


def test_metrics_snapshot_counts_and_does_not_change_after_it_was_taken(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            api: BrokerAPI = broker
            await api.create_topic("orders", 1)
            await api.create_group("g")
            before = await api.metrics_snapshot()
            await api.send([NewMessage("orders", b"x"), NewMessage("orders", b"y")])
            popped = await api.pop("g", "orders", max_messages=1, wait_s=0)
            after = await api.metrics_snapshot()
            assert before.sent.get("orders", 0) == 0  # a copy, not the live counter
            assert after.sent["orders"] == 2
            assert after.popped[("g", "orders")] == 1
            assert after.live_checkpoints == 1
            assert after.write_batches > before.write_batches
            assert after.batch_jobs.count == after.write_batches
            synced = after.write_seconds_synced
            assert len(synced.counts) == len(synced.bounds) + 1
            assert synced.count + after.write_seconds_unsynced.count == after.write_batches
            assert after.store_bytes > 0
            assert (after.topics, after.groups) == (1, 1)
            await api.ack("g", [popped[0].receipt_handle])
            assert (await api.metrics_snapshot()).acked[("g", "orders")] == 1

    asyncio.run(scenario())


def test_pull_wait_filters_and_wakes_on_an_arrival(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            api: BrokerAPI = broker
            await api.create_topic("orders", 1)
            await api.send([NewMessage("orders", b"a", tag="red")])
            first = await api.pull_wait("orders", 0, 0, 8, filter_expression="blue")
            assert (first.messages, first.next_offset) == ([], 1)  # read past, none kept

            async def later() -> None:
                await asyncio.sleep(0.4)
                await api.send([NewMessage("orders", b"b", tag="blue")])

            began = time.monotonic()
            sender = asyncio.create_task(later())
            result = await api.pull_wait("orders", 0, 1, 8, wait_s=5, filter_expression="blue")
            await sender
            assert 0.3 < time.monotonic() - began < 4
            assert [r.body for _, r in result.messages] == [b"b"]
            empty = await api.pull_wait("orders", 0, 2, 8, wait_s=0.1)
            assert (empty.messages, empty.next_offset) == ([], 2)

    asyncio.run(scenario())
