"""Broker numbers (coordination/broker_numbers.py): each broker's place in the derived
dead-letter routes is given once, by compare-and-set, and never moves when brokers join."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from popmq.cluster.broker_numbering import number_joining_brokers
from popmq.cluster.topology import Topology
from popmq.coordination import (
    Coordinator,
    CorruptValueError,
    EtcdCoordinator,
    GroupCache,
    RouteCache,
    Session,
)
from popmq.coordination.broker_numbers import (
    NUMBERS_PATH,
    by_number,
    decode_numbers,
    number_brokers,
)
from popmq.coordination.coordinator import Entry
from tests.cluster.conftest import MakeCoordinator, unique_cluster
from tests.support.etcd import EtcdServer

pytestmark = pytest.mark.timeout(90)


async def _register(coordinator: Coordinator, *names: str) -> list[Session]:
    return [
        await coordinator.register("broker", name, {"addr": f"127.0.0.1:{9000 + i}"})
        for i, name in enumerate(names)
    ]


async def _until(cache: RouteCache, check: Callable[[], bool], timeout_s: float = 10) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():
            await cache.wait_changed()


def test_numbered_brokers_go_first_by_number_and_the_rest_by_name() -> None:
    numbers = {"broker-c": 0, "broker-b": 1}
    assert by_number({"broker-a", "broker-b", "broker-c", "broker-0"}, numbers) == (
        "broker-c",
        "broker-b",
        "broker-0",
        "broker-a",
    )
    # A numbered broker keeps its place while it is known to nobody else (down, no route).
    assert by_number(set(), numbers) == ("broker-c", "broker-b")


def test_a_value_that_is_not_numbers_is_refused_by_name() -> None:
    def entry(value: dict[str, object]) -> Entry:
        return Entry(NUMBERS_PATH, value, 3, 3, 1)

    assert decode_numbers(None) == {}
    assert decode_numbers(entry({"brokers": {"a": 0, "b": 1}})) == {"a": 0, "b": 1}
    for bad in ({}, {"brokers": [1]}, {"brokers": {"a": -1}}, {"brokers": {"a": "0"}}):
        with pytest.raises(CorruptValueError, match="numbers/brokers must be"):
            decode_numbers(entry(bad))


def test_racing_proxies_give_each_broker_one_number_and_never_change_it(
    etcd: EtcdServer,
) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        async with (
            EtcdCoordinator(etcd.endpoint, cluster=cluster) as one,
            EtcdCoordinator(etcd.endpoint, cluster=cluster) as two,
        ):
            first = await number_brokers(one, ["broker-m"])
            assert first == {"broker-m": 0}
            # Two proxies number overlapping sets at once: every name gets one number.
            results = await asyncio.gather(
                *(
                    number_brokers(one if i % 2 else two, [f"broker-{i}", "broker-m", "broker-x"])
                    for i in range(10)
                )
            )
            final = decode_numbers(await one.get(NUMBERS_PATH))
            assert final["broker-m"] == 0  # numbered first, never renumbered
            assert sorted(final.values()) == list(range(len(final)))  # no gap, no twice
            assert set(final) == {"broker-m", "broker-x", *(f"broker-{i}" for i in range(10))}
            for result in results:  # each saw the numbers as they stayed
                assert all(final[name] == number for name, number in result.items())

    asyncio.run(scenario())


def test_a_broker_that_joins_takes_the_next_dlq_id_and_no_id_moves(
    make_coordinator: MakeCoordinator,
) -> None:
    async def scenario() -> None:
        async with make_coordinator() as brokers, make_coordinator() as proxy:
            sessions = await _register(brokers, "broker-b", "broker-c")
            async with RouteCache(proxy) as routes:
                topology = Topology(routes, GroupCache(proxy))  # groups unused: not started
                numbering = asyncio.create_task(number_joining_brokers(routes, proxy))
                try:
                    await _until(routes, lambda: len(routes.broker_numbers) == 2)
                    assert topology.dlq_brokers() == ("broker-b", "broker-c")
                    # A broker whose name sorts first joins: it goes last, the others stay.
                    sessions += await _register(brokers, "broker-a")
                    await _until(routes, lambda: "broker-a" in routes.broker_numbers)
                    assert routes.broker_numbers == {"broker-b": 0, "broker-c": 1, "broker-a": 2}
                    assert topology.dlq_brokers() == ("broker-b", "broker-c", "broker-a")
                    # A numbered broker that leaves keeps its place (its DLQ still holds
                    # what it dead-lettered).
                    await sessions.pop(0).close()
                    await _until(routes, lambda: "broker-b" not in routes.live_brokers)
                    assert topology.dlq_brokers() == ("broker-b", "broker-c", "broker-a")
                finally:
                    numbering.cancel()
            for session in sessions:
                await session.close()

    asyncio.run(scenario())
