"""Topic routes (popmq.coordination.routes): the value and its numbering, admin operations with
compare-and-set, and RouteCache, against LocalCoordinator and a real etcd."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from popmq.broker_core import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from popmq.coordination import (
    ConflictError,
    Coordinator,
    CorruptValueError,
    EtcdCoordinator,
    LocalCoordinator,
    QueueRef,
    RouteAdmin,
    RouteCache,
    RoutesConfig,
    Segment,
    Session,
    TopicRoute,
)
from popmq.coordination.coordinator import Entry
from tests.cluster.conftest import MakeCoordinator, unique_cluster
from tests.cluster.link import Link
from tests.support.etcd import EtcdServer

pytestmark = pytest.mark.timeout(90)


async def _until(cache: RouteCache, check: Callable[[], bool], timeout_s: float = 10) -> None:
    """Wait for the cache's changes (no polling) until `check()` holds."""
    async with asyncio.timeout(timeout_s):
        while not check():
            await cache.wait_changed()


def _stored(route: TopicRoute, revision: int = 7) -> Entry:
    return Entry(f"topics/{route.topic}", route.to_value(), revision, revision, 1)


def test_global_ids_run_through_segments_and_appending_keeps_them() -> None:
    route = TopicRoute("orders", (Segment("broker-a", 2), Segment("broker-b", 3)))
    assert route.queues == (
        QueueRef("broker-a", 0),
        QueueRef("broker-a", 1),
        QueueRef("broker-b", 0),
        QueueRef("broker-b", 1),
        QueueRef("broker-b", 2),
    )
    grown = TopicRoute("orders", (*route.segments, Segment("broker-a", 2)))
    assert grown.queues[: len(route.queues)] == route.queues  # old global ids unchanged
    assert grown.queue(5) == QueueRef("broker-a", 2)
    assert grown.global_id(QueueRef("broker-a", 3)) == 6
    assert grown.queue_counts == {"broker-a": 4, "broker-b": 3}
    # A broker's global ids by local id, what its pops' deliveries are numbered by.
    assert grown.global_ids("broker-a") == (0, 1, 5, 6)
    assert grown.global_ids("broker-b") == (2, 3, 4)
    assert grown.global_ids("broker-c") == ()
    for queue in grown.queues:
        assert grown.global_ids(queue.broker)[queue.queue_id] == grown.global_id(queue)

    value = grown.to_value()
    assert value["schema"] == 1 and value["queues"][2] == {"broker": "broker-a", "count": 2}
    decoded = TopicRoute.from_entry(_stored(grown, revision=9))
    assert decoded == grown and decoded is not None and decoded.revision == 9

    with pytest.raises(InvalidArgumentError, match=r"queue 7 does not exist.*0\.\.6"):
        grown.queue(7)
    with pytest.raises(NotFoundError, match="no queue 4 on broker 'broker-b'"):
        grown.global_id(QueueRef("broker-b", 4))


def test_values_this_version_cannot_read_are_refused_by_name() -> None:
    good = TopicRoute("orders", (Segment("broker-a", 1),)).to_value()
    newer = Entry("topics/orders", {**good, "schema": 2}, 3, 3, 1)
    with pytest.raises(CorruptValueError, match="schema 2, newer than this popmq's 1"):
        TopicRoute.from_entry(newer)
    old_shape = Entry("topics/orders", {**good, "queues": {"broker-a": 4}}, 3, 3, 1)
    with pytest.raises(CorruptValueError, match="not a popmq topic route"):
        TopicRoute.from_entry(old_shape)
    other_topic = Entry("topics/payments", good, 3, 3, 1)
    with pytest.raises(CorruptValueError, match="is not the key's 'payments'"):
        TopicRoute.from_entry(other_topic)
    huge = Entry("topics/orders", {**good, "queues": [{"broker": "b", "count": 10**9}]}, 3, 3, 1)
    with pytest.raises(CorruptValueError, match="above the maximum 1024"):
        TopicRoute.from_entry(huge)  # refused before a billion queues are numbered
    with pytest.raises(InvalidArgumentError, match="needs queues on at least one broker"):
        TopicRoute("orders", ())
    unknown_field = Entry("topics/orders", {**good, "future": [1]}, 3, 3, 1)
    assert TopicRoute.from_entry(unknown_field) is not None  # readers ignore new fields


async def _register(coordinator: Coordinator, *names: str) -> list[Session]:
    return [
        await coordinator.register("broker", name, {"addr": f"127.0.0.1:{9000 + i}"})
        for i, name in enumerate(names)
    ]


def test_two_caches_follow_create_grow_perm_and_delete_without_polling(
    make_coordinator: MakeCoordinator,
) -> None:
    async def scenario() -> None:
        async with (
            make_coordinator() as brokers,
            make_coordinator() as proxy_a,
            make_coordinator() as proxy_b,
        ):
            sessions = await _register(brokers, "broker-b", "broker-a")
            admin = RouteAdmin(proxy_a, RoutesConfig(default_queues_per_broker=2))
            async with RouteCache(proxy_a) as cache_a, RouteCache(proxy_b) as cache_b:
                with pytest.raises(NotFoundError, match="topic 'orders' does not exist"):
                    cache_a.route("orders")
                created = await admin.create_topic("orders")
                await cache_a.wait_for(created.revision, timeout_s=5)  # read your write
                await cache_b.wait_for(created.revision, timeout_s=5)
                for cache in (cache_a, cache_b):
                    route = cache.route("orders")
                    assert route.queue_counts == {"broker-a": 2, "broker-b": 2}
                    assert cache.queue("orders", 2) == QueueRef("broker-b", 0)
                    assert cache.writable_queues("orders") == {
                        "broker-a": (0, 1),
                        "broker-b": (0, 1),
                    }
                    assert cache.broker_addr("broker-a") == "127.0.0.1:9001"

                # A new broker joins; the topic grows onto it and on broker-a.
                sessions += await _register(brokers, "broker-c")
                await admin.add_queues("orders", "broker-c", 3)
                grown = await admin.add_queues("orders", "broker-a", 1)
                await cache_b.wait_for(grown.revision, timeout_s=5)
                route = cache_b.route("orders")
                assert [cache_b.queue("orders", i) for i in range(4)] == [
                    QueueRef("broker-a", 0),
                    QueueRef("broker-a", 1),
                    QueueRef("broker-b", 0),
                    QueueRef("broker-b", 1),
                ]  # the ids of the first four queues did not move
                assert route.queues[4:] == (
                    QueueRef("broker-c", 0),
                    QueueRef("broker-c", 1),
                    QueueRef("broker-c", 2),
                    QueueRef("broker-a", 2),
                )
                assert cache_b.writable_queues("orders")["broker-a"] == (0, 1, 2)

                read_only = await admin.update_perm("orders", 4)
                await cache_b.wait_for(read_only.revision, timeout_s=5)
                assert cache_b.writable_queues("orders") == {}
                assert set(cache_b.readable_queues("orders")) == {
                    "broker-a",
                    "broker-b",
                    "broker-c",
                }

                deleted = await admin.delete_topic("orders")
                await cache_a.wait_for(deleted, timeout_s=5)
                await cache_b.wait_for(deleted, timeout_s=5)
                for cache in (cache_a, cache_b):
                    with pytest.raises(NotFoundError):
                        cache.route("orders")
                assert await proxy_b.get("topics/orders") is None
                # Created again after a delete: a fresh route.
                again = await admin.create_topic("orders", queues={"broker-c": 1})
                await cache_b.wait_for(again.revision, timeout_s=5)
                assert cache_b.route("orders").queues == (QueueRef("broker-c", 0),)
            for session in sessions:
                await session.close()

    asyncio.run(scenario())


def test_create_if_absent_and_dead_letter_and_retry_topics(
    make_coordinator: MakeCoordinator,
) -> None:
    async def scenario() -> None:
        async with make_coordinator() as coordinator:
            sessions = await _register(coordinator, "broker-a")
            admin = RouteAdmin(coordinator)
            first = await admin.create_topic("orders", queues_per_broker=4)
            with pytest.raises(AlreadyExistsError, match="topic 'orders' already exists"):
                await admin.create_topic("orders", queues_per_broker=2)
            same = await admin.create_topic("orders", queues_per_broker=2, if_absent=True)
            assert same == first and same.queue_counts == {"broker-a": 4}

            dlq = await admin.create_topic(
                "%DLQ%billing", kind="dlq", owner_group="billing", queues={"broker-a": 1}
            )
            retry = await admin.create_topic(
                "%RETRY%billing_orders", kind="retry", owner_group="billing"
            )
            listed = await admin.list()
            assert set(listed) == {"orders", "%DLQ%billing", "%RETRY%billing_orders"}
            assert listed["%DLQ%billing"].kind == "dlq" == dlq.kind
            assert listed["%RETRY%billing_orders"].owner_group == "billing"
            assert retry.queue_counts == {"broker-a": 8}  # RocketMQ's default per broker
            for session in sessions:
                await session.close()

    asyncio.run(scenario())


def test_bad_input_is_refused_with_what_is_allowed(make_coordinator: MakeCoordinator) -> None:
    async def scenario() -> None:
        async with make_coordinator() as coordinator:
            admin = RouteAdmin(coordinator)
            with pytest.raises(UnavailableError, match="no broker is a live member yet"):
                await admin.create_topic("orders")
            sessions = await _register(coordinator, "broker-a")
            cases: list[tuple[str, Callable[[], object]]] = [
                ("topic name 'bad name' is invalid", lambda: admin.create_topic("bad name")),
                ("reserved prefix", lambda: admin.create_topic("%RETRY%x")),
                ("queues_per_broker 0 is below the minimum 1", lambda: admin.create_topic(
                    "t", queues_per_broker=0)),
                ("above the maximum 1024", lambda: admin.create_topic(
                    "t", queues={"broker-a": 1025})),
                ("not both", lambda: admin.create_topic(
                    "t", queues_per_broker=1, queues={"broker-a": 1})),
                ("name at least one broker", lambda: admin.create_topic("t", queues={})),
                ("broker 'broker-z' is not a live member: live brokers are \\['broker-a'\\]",
                 lambda: admin.create_topic("t", queues={"broker-z": 1})),
                ("perm 7 is not a route permission", lambda: admin.create_topic("t", perm=7)),
                ("message type 'urgent' is unknown", lambda: admin.create_topic(
                    "t", message_type="urgent")),
                ("topic kind 'weird' is unknown", lambda: admin.create_topic(
                    "t", kind="weird")),  # type: ignore[arg-type]
                ("is named '%DLQ%billing', not '%DLQ%other'", lambda: admin.create_topic(
                    "%DLQ%other", kind="dlq", owner_group="billing")),
                ("a normal topic has no owner group", lambda: admin.create_topic(
                    "t", owner_group="billing")),
                ("topic 'missing' does not exist", lambda: admin.add_queues(
                    "missing", "broker-a", 1)),
                ("topic 'missing' does not exist", lambda: admin.delete_topic("missing")),
                ("topic name 'a/b' is invalid", lambda: admin.get("a/b")),
                ("topic name 'x y' is invalid", lambda: admin.update_perm("%RETRY%x y", 4)),
                ("count 0 is below the minimum 1", lambda: admin.add_queues(
                    "missing", "broker-a", 0)),
            ]  # fmt: skip
            for message, call in cases:
                with pytest.raises((InvalidArgumentError, NotFoundError), match=message):
                    await call()  # type: ignore[misc]
            with pytest.raises(InvalidArgumentError, match="default_queues_per_broker 0"):
                RoutesConfig(default_queues_per_broker=0)
            async with RouteCache(coordinator) as cache:
                with pytest.raises(UnavailableError, match="broker 'broker-x' is not a live"):
                    cache.broker_addr("broker-x")
            for session in sessions:
                await session.close()

    asyncio.run(scenario())


def test_a_value_that_is_not_a_route_is_skipped_by_the_cache(
    make_coordinator: MakeCoordinator,
) -> None:
    async def scenario() -> None:
        async with make_coordinator() as coordinator:
            sessions = await _register(coordinator, "broker-a")
            await coordinator.put("topics/handmade", {"queues": {"broker-a": 4}})
            async with RouteCache(coordinator) as cache:
                route = await RouteAdmin(coordinator).create_topic("orders")
                await cache.wait_for(route.revision, timeout_s=5)
                assert set(cache.routes) == {"orders"}
                with pytest.raises(CorruptValueError):
                    await RouteAdmin(coordinator).add_queues("handmade", "broker-a", 1)
            for session in sessions:
                await session.close()

    asyncio.run(scenario())


def test_racing_writers_never_lose_an_update(etcd: EtcdServer) -> None:
    """Two admins (two processes' clients) grow one topic at once: every add lands, and two
    creates of one topic give one route and one AlreadyExistsError."""

    async def scenario() -> None:
        cluster = unique_cluster()
        async with (
            EtcdCoordinator(etcd.endpoint, cluster=cluster) as one,
            EtcdCoordinator(etcd.endpoint, cluster=cluster) as two,
        ):
            sessions = await _register(one, "broker-a", "broker-b")
            creates = await asyncio.gather(
                RouteAdmin(one).create_topic("orders", queues={"broker-a": 1}),
                RouteAdmin(two).create_topic("orders", queues={"broker-b": 1}),
                return_exceptions=True,
            )
            errors = [c for c in creates if isinstance(c, BaseException)]
            assert len(errors) == 1 and isinstance(errors[0], AlreadyExistsError)

            admins = [RouteAdmin(one), RouteAdmin(two)]
            adds = 12
            await asyncio.gather(
                *(admins[i % 2].add_queues("orders", f"broker-{'ab'[i % 2]}", 1)
                  for i in range(2 * adds))
            )  # fmt: skip
            route = await admins[0].get("orders")
            assert sum(route.queue_counts.values()) == 1 + 2 * adds
            assert len(route.queues) == len(set(route.queues)) == 1 + 2 * adds
            for session in sessions:
                await session.close()

    asyncio.run(scenario())


def test_contended_writes_give_up_with_a_retriable_error(etcd: EtcdServer) -> None:
    """With a single attempt allowed, one of many racing writers must fail, and it fails with
    a retriable error that says why; none of the other writes is lost."""

    async def scenario() -> None:
        cluster = unique_cluster()
        async with (
            EtcdCoordinator(etcd.endpoint, cluster=cluster) as one,
            EtcdCoordinator(etcd.endpoint, cluster=cluster) as two,
        ):
            sessions = await _register(one, "broker-a")
            await RouteAdmin(one).create_topic("orders", queues={"broker-a": 1})
            config = RoutesConfig(cas_attempts=1)
            admins = [RouteAdmin(one, config), RouteAdmin(two, config)]
            results = await asyncio.gather(
                *(admins[i % 2].add_queues("orders", "broker-a", 1) for i in range(10)),
                return_exceptions=True,
            )
            failed = [r for r in results if isinstance(r, BaseException)]
            assert failed, "ten racing single-attempt writers all won: no race happened"
            for error in failed:
                assert isinstance(error, UnavailableError) and error.retriable
                assert "changed under 1 attempts" in str(error)
            route = await admins[0].get("orders")
            assert route.queue_counts["broker-a"] == 1 + len(results) - len(failed)
            for session in sessions:
                await session.close()

    asyncio.run(scenario())


@pytest.mark.slow
def test_a_broker_whose_lease_lapses_leaves_the_writable_queues(etcd: EtcdServer) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        async with (
            Link(etcd.endpoint) as link,
            EtcdCoordinator(link.endpoint, cluster=cluster, timeout_s=1) as broker_b,
            EtcdCoordinator(etcd.endpoint, cluster=cluster) as proxy,
        ):
            session_a = await proxy.register("broker", "broker-a", {"addr": "h:1"})
            session_b = await broker_b.register("broker", "broker-b", {"addr": "h:2"}, ttl_s=2)
            async with RouteCache(proxy) as cache:
                route = await RouteAdmin(proxy).create_topic("orders", queues_per_broker=2)
                await cache.wait_for(route.revision, timeout_s=5)
                assert set(cache.writable_queues("orders")) == {"broker-a", "broker-b"}

                link.cut()  # broker-b can no longer renew its lease
                await _until(cache, lambda: "broker-b" not in cache.live_brokers, 10)
                assert cache.writable_queues("orders") == {"broker-a": (0, 1)}
                assert cache.route("orders").queue_counts == {"broker-a": 2, "broker-b": 2}
                assert cache.queue("orders", 3) == QueueRef("broker-b", 1)  # ids stay
                with pytest.raises(UnavailableError, match="broker 'broker-b' is not a live"):
                    cache.broker_addr("broker-b")

                link.restore()  # it registers again and is writable again
                await _until(cache, lambda: "broker-b" in cache.live_brokers, 15)
                assert cache.writable_queues("orders")["broker-b"] == (0, 1)
            await session_b.close()
            await session_a.close()

    asyncio.run(scenario())


@pytest.mark.slow
def test_the_cache_keeps_its_routes_while_etcd_is_down_and_catches_up(
    own_etcd: EtcdServer,
) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        async with (
            EtcdCoordinator(own_etcd.endpoint, cluster=cluster, timeout_s=1) as member,
            EtcdCoordinator(own_etcd.endpoint, cluster=cluster, timeout_s=1) as proxy,
            EtcdCoordinator(own_etcd.endpoint, cluster=cluster, timeout_s=1) as other,
        ):
            session = await member.register("broker", "broker-a", {"addr": "h:1"}, ttl_s=30)
            async with RouteCache(proxy) as cache:
                route = await RouteAdmin(proxy).create_topic("orders", queues_per_broker=2)
                await cache.wait_for(route.revision, timeout_s=5)

                await asyncio.to_thread(own_etcd.stop)
                await asyncio.sleep(1.5)  # calls time out meanwhile; lookups do not
                assert cache.route("orders").queue_counts == {"broker-a": 2}
                assert cache.writable_queues("orders") == {"broker-a": (0, 1)}
                assert cache.broker_addr("broker-a") == "h:1"
                await asyncio.to_thread(own_etcd.start)

                grown = await RouteAdmin(other).add_queues("orders", "broker-a", 3)
                await cache.wait_for(grown.revision, timeout_s=15)
                assert cache.route("orders").queue_counts == {"broker-a": 5}
            await session.close()

    asyncio.run(scenario())


def test_a_cache_that_cannot_list_fails_to_start_with_a_clear_error() -> None:
    async def scenario() -> None:
        async with Link("127.0.0.1:1") as link:
            link.cut()
            async with EtcdCoordinator(link.endpoint, cluster=unique_cluster(), timeout_s=0.2) as c:
                cache = RouteCache(c, RoutesConfig(ready_timeout_s=0.5))
                with pytest.raises(
                    UnavailableError, match="no listing of routes, brokers and broker numbers"
                ):
                    await cache.start()

    asyncio.run(scenario())


class _RetriedWrites(LocalCoordinator):
    """A coordinator whose compare-and-set applies the write, then reports a conflict with
    it: what the etcd client's retry on the next endpoint does after a mid-call failure."""

    async def compare_and_set(self, path: str, value: Mapping[str, Any], *, revision: int) -> Entry:
        entry = await super().compare_and_set(path, value, revision=revision)
        raise ConflictError(f"{path} changed", key=path, current_revision=entry.revision)


def test_a_write_that_conflicts_with_itself_counts_once() -> None:
    async def scenario() -> None:
        async with _RetriedWrites(unique_cluster()) as coordinator:
            sessions = await _register(coordinator, "broker-a")
            admin = RouteAdmin(coordinator)
            created = await admin.create_topic("orders", queues={"broker-a": 2})
            assert created.queue_counts == {"broker-a": 2}  # not "already exists"
            grown = await admin.add_queues("orders", "broker-a", 1)
            assert grown.queue_counts == {"broker-a": 3}  # not added twice
            assert (await admin.get("orders")).queue_counts == {"broker-a": 3}
            assert grown.revision == (await coordinator.get("topics/orders")).revision  # type: ignore[union-attr]
            await admin.delete_topic("orders")
            assert await admin.list() == {}
            for session in sessions:
                await session.close()

    asyncio.run(scenario())


@pytest.mark.slow
def test_a_cache_behind_a_compaction_relists_and_drops_deleted_routes(
    own_etcd: EtcdServer,
) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        async with (
            Link(own_etcd.endpoint) as link,
            EtcdCoordinator(link.endpoint, cluster=cluster) as proxy,
            EtcdCoordinator(own_etcd.endpoint, cluster=cluster) as admin_side,
        ):
            session = await admin_side.register("broker", "broker-a", {"addr": "h:1"}, ttl_s=30)
            admin = RouteAdmin(admin_side)
            await admin.create_topic("gone", queues_per_broker=1)
            kept = await admin.create_topic("kept", queues_per_broker=1)
            async with RouteCache(proxy) as cache:
                await cache.wait_for(kept.revision, timeout_s=5)
                assert set(cache.routes) == {"gone", "kept"}
                link.cut()  # the cache misses what follows
                await admin.delete_topic("gone")
                await admin.add_queues("kept", "broker-a", 2)
                last = await admin.create_topic("new", queues_per_broker=1)
                await admin_side.client.compact(last.revision)
                assert set(cache.routes) == {"gone", "kept"}  # still serving its last state
                link.restore()
                await cache.wait_for(last.revision, timeout_s=15)
                assert set(cache.routes) == {"kept", "new"}
                assert cache.route("kept").queue_counts == {"broker-a": 3}
            await session.close()

    asyncio.run(scenario())
