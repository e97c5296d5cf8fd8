"""What a member key that vanishes (its lease expired or revoked) does to the proxies' route
cache and to the member's own session, on a real etcd: the cache holds a broker whose
connection answers until it registers again (bounded), and a session that registers again
after an etcd pause keeps the registration it makes."""

from __future__ import annotations

import asyncio
import time

import pytest

from popmq.broker_core import InvalidArgumentError
from popmq.coordination import (
    EtcdCoordinator,
    RouteAdmin,
    RouteCache,
    RoutesConfig,
    Session,
)
from tests.cluster.conftest import unique_cluster
from tests.support.etcd import EtcdServer
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(90)


async def _seen_after(cache: RouteCache, proxy: EtcdCoordinator, name: str) -> Session:
    """Register broker `name` and wait until the cache serves it: every change to brokers/
    made before is applied by then (watch events arrive in order)."""
    session = await proxy.register("broker", name, {"addr": f"h:{name}"})
    await until(lambda: name in cache.live_brokers, f"{name} in the cache", 10, interval_s=0.05)
    return session


def test_a_vanished_broker_whose_connection_answers_stays_live_until_it_registers_again(
    etcd: EtcdServer,
) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        up = {"broker-a"}
        async with (
            EtcdCoordinator(etcd.endpoint, cluster=cluster) as brokers,
            EtcdCoordinator(etcd.endpoint, cluster=cluster) as proxy,
        ):
            first = await brokers.register("broker", "broker-a", {"addr": "h:1"})
            config = RoutesConfig(vanished_grace_s=60)
            async with RouteCache(proxy, config, answering=up.__contains__) as cache:
                route = await RouteAdmin(proxy).create_topic("orders", queues_per_broker=2)
                await cache.wait_for(route.revision, timeout_s=5)
                old_epoch = cache.live_brokers["broker-a"].created_revision

                await first.close()  # its key is gone, its connection is up
                await _seen_after(cache, proxy, "marker-1")
                assert cache.live_brokers["broker-a"].created_revision == old_epoch
                assert cache.writable_queues("orders") == {"broker-a": (0, 1)}
                assert cache.readable_queues("orders") == {"broker-a": (0, 1)}
                assert cache.broker_addr("broker-a") == "h:1"

                # Registered again (a new key, a new epoch): the new entry replaces it.
                second = await brokers.register("broker", "broker-a", {"addr": "h:1"})
                await until(
                    lambda: cache.live_brokers["broker-a"].created_revision == second.epoch,
                    "the new registration",
                    10,
                    interval_s=0.05,
                )
                assert second.epoch > old_epoch

                # Gone again, and its connection is down: dropped (at the next look).
                await second.close()
                await _seen_after(cache, proxy, "marker-2")
                up.clear()
                await until(
                    lambda: "broker-a" not in cache.live_brokers, "a drop", 10, interval_s=0.05
                )
                assert cache.writable_queues("orders") == {}

    asyncio.run(scenario())


def test_a_vanished_broker_is_dropped_at_once_when_its_connection_is_down(
    etcd: EtcdServer,
) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        async with (
            EtcdCoordinator(etcd.endpoint, cluster=cluster) as brokers,
            EtcdCoordinator(etcd.endpoint, cluster=cluster) as proxy,
        ):
            session = await brokers.register("broker", "broker-a", {"addr": "h:1"})
            config = RoutesConfig(vanished_grace_s=60)
            async with RouteCache(proxy, config, answering=lambda name: False) as cache:
                await until(lambda: "broker-a" in cache.live_brokers, "broker-a", 10)
                await session.close()
                await _seen_after(cache, proxy, "marker")
                assert "broker-a" not in cache.live_brokers

    asyncio.run(scenario())


def test_a_vanished_broker_is_held_for_the_grace_period_only(etcd: EtcdServer) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        grace_s = 1.0
        async with (
            EtcdCoordinator(etcd.endpoint, cluster=cluster) as brokers,
            EtcdCoordinator(etcd.endpoint, cluster=cluster) as proxy,
        ):
            session = await brokers.register("broker", "broker-a", {"addr": "h:1"})
            config = RoutesConfig(vanished_grace_s=grace_s)
            async with RouteCache(proxy, config, answering=lambda name: True) as cache:
                await until(lambda: "broker-a" in cache.live_brokers, "broker-a", 10)
                await session.close()
                vanished = time.monotonic()
                # Another change a while into the hold: the cache looks at its held brokers
                # again on its own schedule from then on.
                await asyncio.sleep(0.3)
                await _seen_after(cache, proxy, "marker")
                held_for: list[float] = []

                def dropped() -> bool:
                    held_for.append(cache.held.get("broker-a", 0.0))
                    return "broker-a" not in cache.live_brokers

                await until(dropped, "a drop", 10, interval_s=0.05)
                assert time.monotonic() - vanished >= grace_s
                # Dropped when its grace ends, not at a later recheck: cluster status says
                # it is held for at most the time it shows.
                assert max(held_for) <= grace_s + 0.2, max(held_for)

    asyncio.run(scenario())


def test_the_grace_period_must_be_a_duration() -> None:
    with pytest.raises(InvalidArgumentError, match="vanished_grace_s"):
        RoutesConfig(vanished_grace_s=-1)


@pytest.mark.slow
def test_a_session_registered_again_when_a_paused_etcd_resumes_keeps_its_registration(
    own_etcd: EtcdServer,
) -> None:
    """A paused etcd answers a lease grant it got meanwhile only when it resumes; the lease
    counts from when it was asked for, so it would be lapsed at once."""

    async def scenario() -> None:
        ttl_s = 3
        async with EtcdCoordinator(own_etcd.endpoint, cluster=unique_cluster()) as coordinator:
            session = await coordinator.register("broker", "b1", {"addr": "h:1"}, ttl_s=ttl_s)
            own_etcd.pause()
            try:
                await until(lambda: session.losses == 1, "the loss", 20, interval_s=0.05)
                await asyncio.sleep(ttl_s)  # grants go out and hang meanwhile
            finally:
                own_etcd.resume()
            await session.wait_registered()
            await asyncio.sleep(ttl_s)  # past a lapsed lease's keeper's first look
            assert session.alive
            assert session.losses == 1

    asyncio.run(scenario())
