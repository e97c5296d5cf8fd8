"""CatalogSync against a real etcd and a real Broker (RocksDB in a tmp dir): routes naming the
broker become local topics and grow with them, group records are applied exactly (only the
subscriptions of local topics, completed when a topic arrives), deletes seen live delete,
a broker that was away catches up without deleting what vanished meanwhile, a failing item
is reported and retried without holding up the others, and `popmq broker` turns SERVING
only once its first sync is applied and NOT_SERVING when the sync or its fencing dies."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from popmq._gen.popmq.broker.v1 import broker_pb2, broker_pb2_grpc
from popmq.broker.catalog_sync import CatalogSync, CatalogSyncConfig
from popmq.broker.server import BrokerServer
from popmq.broker_core import (
    Broker,
    BrokerConfig,
    FailedPreconditionError,
    GroupSettings,
    NewMessage,
    NotFoundError,
    StoreConfig,
    Subscription,
)
from popmq.coordination import (
    EtcdCoordinator,
    LocalCoordinator,
    RouteAdmin,
    Session,
    Snapshot,
    TopicRoute,
)
from popmq.coordination.config import ClusterConfig
from popmq.coordination.groups import GroupAdmin, GroupRules
from popmq.coordination.routes import Segment, topic_path
from popmq.runtime.config import ServerConfig
from tests.cluster.conftest import unique_cluster
from tests.cluster.link import Link
from tests.support.brokers import BrokerProcess
from tests.support.etcd import EtcdServer
from tests.support.ports import free_port
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(90)

WAIT_S = 15.0


@dataclass
class Admin:
    """The cluster's admin side: what a proxy writes to etcd."""

    coordinator: EtcdCoordinator
    routes: RouteAdmin
    groups: GroupAdmin
    sessions: list[Session]

    async def close_sessions(self) -> None:
        for session in self.sessions:
            await session.close()
        self.sessions.clear()


@contextlib.asynccontextmanager
async def admin_side(endpoint: str, cluster: str) -> AsyncIterator[Admin]:
    """An admin client with brokers b1 and b2 registered (routes may name only live ones)."""
    async with EtcdCoordinator(endpoint, cluster=cluster) as coordinator:
        sessions = [
            await coordinator.register("broker", name, {"addr": "127.0.0.1:1"}, ttl_s=30)
            for name in ("b1", "b2")
        ]
        admin = Admin(
            coordinator,
            RouteAdmin(coordinator),
            GroupAdmin(coordinator, GroupRules(), lambda topic: None),
            sessions,
        )
        try:
            yield admin
        finally:
            await admin.close_sessions()


@contextlib.asynccontextmanager
async def open_broker(data_dir: Path) -> AsyncIterator[Broker]:
    broker = Broker(BrokerConfig(broker_name="b1", store=StoreConfig(data_dir=data_dir)))
    await broker.start()
    try:
        yield broker
    finally:
        await broker.close()


@contextlib.asynccontextmanager
async def syncing(
    endpoint: str, cluster: str, broker: Broker, config: CatalogSyncConfig | None = None
) -> AsyncIterator[CatalogSync]:
    """A CatalogSync over its own etcd client, as in another process; ready when yielded."""
    async with (
        EtcdCoordinator(endpoint, cluster=cluster, timeout_s=2) as coordinator,
        CatalogSync(coordinator, broker, "b1", config) as sync,
    ):
        await sync.wait_ready(timeout_s=WAIT_S)
        yield sync


def _topics(broker: Broker) -> dict[str, int]:
    return {t.name: t.queues for t in broker.catalog.topics.values()}


def _subscribed(broker: Broker, group: str) -> list[str]:
    return [s.topic for s in broker.group_settings(group).subscriptions]


def test_a_route_naming_the_broker_becomes_a_local_topic_and_grows_with_it(
    etcd: EtcdServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        async with admin_side(etcd.endpoint, cluster) as admin, open_broker(tmp_path) as broker:
            routes = admin.routes
            await routes.create_topic("orders", queues={"b1": 2, "b2": 3}, message_type="fifo")
            await routes.create_topic("elsewhere", queues={"b2": 1})
            await routes.create_topic("%DLQ%g", kind="dlq", owner_group="g", queues={"b1": 1})
            async with syncing(etcd.endpoint, cluster, broker) as sync:
                assert _topics(broker) == {"orders": 2}  # no DLQ: broker-local kinds stay so
                assert broker.topic_info("orders").message_type_name == "fifo"

                grown = await routes.add_queues("orders", "b1", 3)
                await sync.wait_applied(grown.revision, timeout_s=WAIT_S)
                assert _topics(broker) == {"orders": 5}
                other = await routes.add_queues("orders", "b2", 1)
                await sync.wait_applied(other.revision, timeout_s=WAIT_S)
                assert _topics(broker) == {"orders": 5}

                spread = await routes.add_queues("elsewhere", "b1", 2)
                await sync.wait_applied(spread.revision, timeout_s=WAIT_S)
                assert _topics(broker) == {"orders": 5, "elsewhere": 2}
                status = sync.status()
                assert status.ready and status.revision >= spread.revision
                assert (status.pending, dict(status.failed), status.orphans) == ((), {}, ())

    asyncio.run(scenario())


def test_group_records_apply_exactly_with_the_subscriptions_of_local_topics(
    etcd: EtcdServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        async with admin_side(etcd.endpoint, cluster) as admin, open_broker(tmp_path) as broker:
            await admin.routes.create_topic("orders", queues={"b1": 1})
            await admin.routes.create_topic("payments", queues={"b2": 1})
            created = await admin.groups.create(
                "g",
                max_delivery_attempts=4,
                retry_backoff_s=[2, 4],
                settings=GroupSettings(
                    fifo=True,
                    subscriptions=(
                        Subscription("orders", "tag", "A"),
                        Subscription("payments", "sql", "a > 1"),
                    ),
                ),
            )
            async with syncing(etcd.endpoint, cluster, broker) as sync:
                await sync.wait_applied(created.revision, timeout_s=WAIT_S)
                info = broker.get_group("g")
                assert (info.max_delivery_attempts, info.retry_backoff_ms) == (4, (2000, 4000))
                assert info.create_time_ms == created.create_time_ms
                assert broker.group_settings("g").fifo
                assert _subscribed(broker, "g") == ["orders"]  # payments is not held here

                updated = await admin.groups.update(
                    "g", max_delivery_attempts=6, consume_from="last"
                )
                await sync.wait_applied(updated.revision, timeout_s=WAIT_S)
                assert broker.get_group("g").max_delivery_attempts == 6
                assert broker.group_settings("g").consume_from == "last"

                arrived = await admin.routes.add_queues("payments", "b1", 1)
                await sync.wait_applied(arrived.revision, timeout_s=WAIT_S)
                assert _subscribed(broker, "g") == ["orders", "payments"]
                assert broker.subscription_filter("g", "payments") == ("sql", "a > 1")

                # A push of the older record arriving late does not roll the group back.
                await broker.apply_group(
                    "g",
                    created.state,
                    create_time_ms=created.create_time_ms,
                    revision=created.revision,
                )
                assert broker.get_group("g").max_delivery_attempts == 6
                assert broker.group_settings("g").consume_from == "last"

    asyncio.run(scenario())


def test_deletes_seen_while_watching_delete_the_local_topic_and_group(
    etcd: EtcdServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        async with admin_side(etcd.endpoint, cluster) as admin, open_broker(tmp_path) as broker:
            await admin.routes.create_topic("orders", queues={"b1": 1})
            await admin.groups.create(
                "g", settings=GroupSettings(subscriptions=(Subscription("orders", "tag", "*"),))
            )
            await admin.routes.create_topic("elsewhere", queues={"b2": 1})
            await broker.create_topic("elsewhere", 1)  # local only: not the route's
            last = await admin.groups.create("h")
            async with syncing(etcd.endpoint, cluster, broker) as sync:
                await sync.wait_applied(last.revision, timeout_s=WAIT_S)
                await broker.send([NewMessage("orders", b"old")])
                await broker.pop("g", "orders", wait_s=0)  # one in flight: deleted anyway

                deleted = await admin.routes.delete_topic("orders")
                await sync.wait_applied(deleted, timeout_s=WAIT_S)
                assert "orders" not in _topics(broker)
                assert _subscribed(broker, "g") == []  # its copy follows the local topics

                not_here = await admin.routes.delete_topic("elsewhere")
                await sync.wait_applied(not_here, timeout_s=WAIT_S)
                assert "elsewhere" in _topics(broker)  # its route never named b1

                gone = await admin.groups.delete("h")
                await sync.wait_applied(gone, timeout_s=WAIT_S)
                assert {g.name for g in await broker.list_groups()} == {"g"}

                again = await admin.routes.create_topic("orders", queues={"b1": 1})
                await sync.wait_applied(again.revision, timeout_s=WAIT_S)
                assert (await broker.get_topic("orders"))[1][0].max_offset == 0  # a new topic
                assert _subscribed(broker, "g") == ["orders"]

    asyncio.run(scenario())


def test_a_broker_that_was_away_catches_up_and_keeps_what_vanished_meanwhile(
    etcd: EtcdServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        async with admin_side(etcd.endpoint, cluster) as admin:
            for topic in ("a", "b"):
                await admin.routes.create_topic(topic, queues={"b1": 1})
            await admin.groups.create("g")
            await admin.groups.create("h")
            async with open_broker(tmp_path) as broker, syncing(etcd.endpoint, cluster, broker):
                assert _topics(broker) == {"a": 1, "b": 1}

            # While the broker is down: a deletion, a creation, an update, a growth.
            await admin.routes.delete_topic("a")
            await admin.groups.delete("h")
            await admin.routes.create_topic("c", queues={"b1": 2})
            await admin.routes.add_queues("b", "b1", 1)
            last = await admin.groups.update("g", max_delivery_attempts=8)

            with caplog.at_level(logging.WARNING, logger="popmq.broker.catalog_sync"):
                async with (
                    open_broker(tmp_path) as broker,
                    syncing(etcd.endpoint, cluster, broker) as sync,
                ):
                    await sync.wait_applied(last.revision, timeout_s=WAIT_S)
                    assert _topics(broker) == {"a": 1, "b": 2, "c": 2}  # "a" is kept
                    assert broker.get_group("g").max_delivery_attempts == 8
                    assert {g.name for g in await broker.list_groups()} == {"g", "h"}
                    assert sync.status().orphans == ("groups/h", "topics/a")
                    later = await admin.routes.create_topic("d", queues={"b1": 1})
                    await sync.wait_applied(later.revision, timeout_s=WAIT_S)
        orphan_logs = [r.getMessage() for r in caplog.records if "no route or record" in r.message]
        assert len(orphan_logs) == 1
        assert "groups/h, topics/a" in orphan_logs[0]

    asyncio.run(scenario())


def test_a_topic_deleted_and_created_again_while_the_broker_was_away_loses_its_old_messages(
    etcd: EtcdServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        async with admin_side(etcd.endpoint, cluster) as admin:
            routes = admin.routes
            first = {
                topic: await routes.create_topic(topic, queues={"b1": 2})
                for topic in ("orders", "moved", "kept")
            }
            async with open_broker(tmp_path) as broker:
                # A topic made before births were kept (or by a push that carried none).
                await broker.create_topic("legacy", 1)
                legacy = await routes.create_topic("legacy", queues={"b1": 1})
                async with syncing(etcd.endpoint, cluster, broker) as sync:
                    await sync.wait_applied(legacy.revision, timeout_s=WAIT_S)
                    for topic, route in first.items():
                        info = broker.topic_info(topic)
                        assert info.route_create_time_ms == route.create_time_ms
                    assert broker.topic_info("legacy").route_create_time_ms == (
                        legacy.create_time_ms
                    )
                    for topic in ("orders", "moved", "kept", "legacy"):
                        await broker.send([NewMessage(topic, f"old {topic}".encode())])

            # While the broker is away: two names deleted and used again (one now on
            # another broker only), one deleted for good.
            await asyncio.sleep(0.01)  # another millisecond: another birth
            for topic in ("orders", "moved", "kept"):
                await routes.delete_topic(topic)
            again = await routes.create_topic("orders", queues={"b1": 2})
            moved = await routes.create_topic("moved", queues={"b2": 1})
            assert again.create_time_ms != first["orders"].create_time_ms

            async with open_broker(tmp_path) as broker:
                async with syncing(etcd.endpoint, cluster, broker) as sync:
                    await sync.wait_applied(moved.revision, timeout_s=WAIT_S)
                    info, queues = await broker.get_topic("orders")
                    assert info.route_create_time_ms == again.create_time_ms
                    assert [q.max_offset for q in queues] == [0, 0]  # a new, empty topic
                    assert await broker.peek("orders") == []
                    with pytest.raises(NotFoundError):
                        broker.topic_info("moved")  # the old one went; the new is on b2
                    # Deleted and not created again: kept, as before (an orphan).
                    assert [m.record.body for m in await broker.peek("kept")] == [b"old kept"]
                    assert [m.record.body for m in await broker.peek("legacy")] == [b"old legacy"]
                    assert sync.status().orphans == ("topics/kept",)

    asyncio.run(scenario())


def test_a_failing_item_is_reported_and_retried_without_holding_up_the_others(
    etcd: EtcdServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        fast = CatalogSyncConfig(retry_initial_s=0.05, retry_max_s=0.1)
        async with admin_side(etcd.endpoint, cluster) as admin, open_broker(tmp_path) as broker:
            await broker.create_topic("orders", 1, message_type="fifo")  # a local leftover
            await admin.routes.create_topic("orders", queues={"b1": 2})
            last = await admin.routes.create_topic("other", queues={"b1": 1})
            with caplog.at_level(logging.ERROR, logger="popmq.broker.catalog_sync"):
                async with syncing(etcd.endpoint, cluster, broker, fast) as sync:
                    await sync.wait_applied(last.revision, timeout_s=WAIT_S)
                    assert _topics(broker) == {"orders": 1, "other": 1}
                    failed = sync.status().failed["topics/orders"]
                    assert "'normal' in its route but 'fifo' on broker 'b1'" in failed
                    await asyncio.sleep(0.5)  # several retries, still failing
                    assert broker.topic_info("orders").message_type_name == "fifo"

                    # The operator deletes the local topic: the next retry creates it.
                    await broker.delete_topic_guarded("orders", force=True)
                    await until(
                        lambda: not sync.status().failed, "the catalog sync to recover", WAIT_S
                    )
                    assert broker.topic_info("orders").message_type_name == "normal"
                    assert _topics(broker)["orders"] == 2
        logged = [r for r in caplog.records if "cannot apply topics/orders" in r.message]
        assert len(logged) == 1  # once per distinct error, not once per retry

    asyncio.run(scenario())


@pytest.mark.slow
def test_a_sync_catches_up_after_etcd_restarts_and_a_relist_deletes_nothing(
    own_etcd: EtcdServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        async with (
            admin_side(own_etcd.endpoint, cluster) as admin,
            open_broker(tmp_path) as broker,
            Link(own_etcd.endpoint) as link,
            syncing(link.endpoint, cluster, broker) as sync,
        ):
            await admin.routes.create_topic("x", queues={"b1": 1})
            first = await admin.groups.create("g")
            await sync.wait_applied(first.revision, timeout_s=WAIT_S)

            await asyncio.to_thread(own_etcd.restart)
            grown = await admin.routes.add_queues("x", "b1", 1)
            await sync.wait_applied(grown.revision, timeout_s=WAIT_S)
            assert _topics(broker) == {"x": 2}

            link.cut()  # the sync misses what follows, and etcd forgets the history
            await admin.routes.delete_topic("x")
            await admin.routes.create_topic("y", queues={"b1": 1})
            last = await admin.groups.update("g", max_delivery_attempts=3)
            await admin.coordinator.client.compact(last.revision)
            link.restore()
            await sync.wait_applied(last.revision, timeout_s=WAIT_S)
            assert _topics(broker) == {"x": 2, "y": 1}  # x: deleted unseen, so kept
            assert broker.get_group("g").max_delivery_attempts == 3
            assert sync.status().orphans == ("topics/x",)

    asyncio.run(scenario())


# -- the broker process ---------------------------------------------------------------------


def _health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status)


async def _until_health(address: str, status: int) -> None:
    """Poll health from a thread: the server answers in this test's event loop."""

    async def turned() -> bool:
        return await asyncio.to_thread(_health, address) == status

    await until(turned, f"health to turn {status}", WAIT_S)


def _server(tmp_path: Path, endpoint: str, cluster: str, **broker: object) -> BrokerServer:
    return BrokerServer(
        ServerConfig(
            listen="127.0.0.1:0",
            shutdown_grace_s=1.0,
            broker=BrokerConfig(broker_name="b1", store=StoreConfig(data_dir=tmp_path), **broker),  # type: ignore[arg-type]
            cluster=ClusterConfig(etcd=endpoint, name=cluster),
        )
    )


class _BreakingWatch(LocalCoordinator):
    """A real in-memory coordinator whose watch of groups/ fails with a bug once `broken`
    is set: what kills a catalog sync's task (follow restarts only coordination errors)."""

    def __init__(self, cluster: str) -> None:
        super().__init__(cluster)
        self.broken = asyncio.Event()

    async def watch(self, prefix: str = "") -> AsyncIterator[Snapshot]:
        snapshots = aiter(super().watch(prefix))
        yield await anext(snapshots)
        if prefix == "groups/":
            await self.broken.wait()
            raise RuntimeError("a bug in the watch")
        async for snapshot in snapshots:
            yield snapshot


def test_a_sync_whose_task_dies_says_why_and_stops_its_waiters(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with (
            _BreakingWatch(unique_cluster()) as coordinator,
            open_broker(tmp_path) as broker,
            CatalogSync(coordinator, broker, "b1") as sync,
        ):
            await sync.wait_ready(timeout_s=WAIT_S)
            coordinator.broken.set()
            reason = await asyncio.wait_for(sync.wait_failure(), WAIT_S)
            assert "catalog-sync-groups died: RuntimeError('a bug in the watch')" in reason
            assert sync.failure == reason
            with pytest.raises(FailedPreconditionError, match="the catalog sync stopped"):
                await sync.wait_applied(10**9, timeout_s=WAIT_S)

    asyncio.run(scenario())


def test_a_broker_server_turns_not_serving_when_its_catalog_sync_dies(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with _BreakingWatch(unique_cluster()) as coordinator:
            server = BrokerServer(
                ServerConfig(
                    listen="127.0.0.1:0",
                    shutdown_grace_s=1.0,
                    broker=BrokerConfig(broker_name="b1", store=StoreConfig(data_dir=tmp_path)),
                ),
                coordinator=coordinator,
            )
            await server.start()
            try:
                assert await asyncio.to_thread(_health, server.address) == 1  # SERVING
                coordinator.broken.set()
                await _until_health(server.address, 2)  # NOT_SERVING
                assert "its catalog sync stopped" in (server.broker.failure or "")
                assert "a bug in the watch" in (server.broker.failure or "")
            finally:
                await server.stop()

    asyncio.run(scenario())


def test_a_cluster_broker_turns_serving_with_its_routed_topics_in_place(
    etcd: EtcdServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        async with admin_side(etcd.endpoint, cluster) as admin:
            await admin.routes.create_topic("orders", queues={"b1": 2, "b2": 1})
            await admin.close_sessions()  # the server registers b1 itself
            server = _server(tmp_path / "b1", etcd.endpoint, cluster)
            await server.start()
            try:
                assert await asyncio.to_thread(_health, server.address) == 1  # SERVING
                assert server.broker.topic_info("orders").queues == 2
                assert server.catalog_sync is not None and server.catalog_sync.ready
            finally:
                await server.stop()

    asyncio.run(scenario())


def test_a_dead_fencing_loop_fences_writes_for_good_and_fails_health(
    etcd: EtcdServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        server = _server(tmp_path / "b1", etcd.endpoint, unique_cluster())
        await server.start()
        try:
            assert server.session is not None and server.servicer is not None
            await server.session.close()  # as when its keep-alive loop fails
            await until(
                lambda: server.broker.failure is not None,
                "the broker to record its failure",
                WAIT_S,
            )
            assert "fencing loop died" in (server.broker.failure or "")
            assert "fencing loop died" in (server.servicer.writes.reason or "")
            await _until_health(server.address, 2)
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_a_cluster_broker_ignores_auto_create_topics_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with LocalCoordinator(unique_cluster()) as coordinator:
            server = BrokerServer(
                ServerConfig(
                    listen="127.0.0.1:0",
                    shutdown_grace_s=1.0,
                    broker=BrokerConfig(
                        broker_name="b1",
                        store=StoreConfig(data_dir=tmp_path),
                        auto_create_topics=True,  # a config file shared with the proxies
                    ),
                ),
                coordinator=coordinator,
            )
            with caplog.at_level(logging.WARNING, logger="popmq.broker.server"):
                await server.start()
            try:
                assert not server.broker.server_info().auto_create_topics
                with pytest.raises(NotFoundError, match="'nowhere' does not exist"):
                    await server.broker.send([NewMessage("nowhere", b"x")])
                assert "nowhere" not in _topics(server.broker)
            finally:
                await server.stop()
        assert any("creates topics only from their routes" in r.message for r in caplog.records)

    asyncio.run(scenario())


@pytest.mark.slow
def test_popmq_broker_turns_serving_only_once_its_first_sync_is_applied(
    etcd: EtcdServer, tmp_path: Path
) -> None:
    topics = 150
    cluster = unique_cluster()

    async def write_routes() -> None:
        async with EtcdCoordinator(etcd.endpoint, cluster=cluster) as coordinator:
            for i in range(topics):
                route = TopicRoute(f"t{i}", (Segment("b1", 1),))
                await coordinator.put(topic_path(route.topic), route.to_value())

    asyncio.run(write_routes())
    # Too short a wait for 150 topic creations: start() goes on, health stays NOT_SERVING.
    process = BrokerProcess(
        tmp_path / "b1",
        free_port(),
        "--etcd", etcd.endpoint,
        "--set", f"cluster.name={cluster}",
        "--set", "cluster.catalog_ready_timeout_s=0.001",
        "--log-level", "warning",
    )  # fmt: skip
    try:
        process.start()
        assert any("has not applied the first listing" in line for line in process.output)
        with grpc.insecure_channel(process.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            api = broker_pb2_grpc.BrokerServiceStub(channel)
            deadline = time.monotonic() + 60
            request = health_pb2.HealthCheckRequest(service="")
            while health.Check(request, timeout=5).status != 1:
                assert time.monotonic() < deadline, "never turned SERVING"
                time.sleep(0.005)
            listed = api.ListTopics(broker_pb2.ListTopicsRequest(), timeout=5)
            assert len(listed.topics) == topics  # every routed topic, at the first SERVING
        assert process.terminate() == 0
    finally:
        process.stop()
