"""A proxy holds a broker whose registration vanished only while its connection has stayed
up since that registration was seen (cluster/broker_pool.py `answering`,
cluster/connection_watch.py), on a real etcd and real gRPC servers: a connection that
dropped and came back may reach another process started on the same address."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from popmq.cluster.broker_pool import BrokerPool
from popmq.coordination import EtcdCoordinator, RouteCache, RoutesConfig
from tests.cluster.conftest import unique_cluster
from tests.support.etcd import EtcdServer
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(60)


async def _server(port: int = 0) -> tuple[grpc.aio.Server, int]:
    """A gRPC server on 127.0.0.1 (`port` 0: any free one): what a connection reaches."""
    server = grpc.aio.server()
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, bound


async def _synced(pool: BrokerPool, cache: RouteCache) -> None:
    """What the proxy does on each change of the cache's live brokers."""
    await pool.sync(cache.live_brokers)


def test_a_vanished_broker_is_held_only_while_its_connection_stayed_up(
    etcd: EtcdServer,
) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        first, port = await _server()
        second: grpc.aio.Server | None = None
        pool = BrokerPool()
        try:
            async with (
                EtcdCoordinator(etcd.endpoint, cluster=cluster) as brokers,
                EtcdCoordinator(etcd.endpoint, cluster=cluster) as proxy,
            ):
                addr = f"127.0.0.1:{port}"
                a = await brokers.register("broker", "broker-a", {"addr": addr})
                config = RoutesConfig(vanished_grace_s=60)
                async with RouteCache(proxy, config, answering=pool.answering) as cache:
                    await until(lambda: "broker-a" in cache.live_brokers, "broker-a", 10)
                    await _synced(pool, cache)
                    await until(lambda: pool.answering("broker-a"), "a connection", 10)

                    # Another process on broker-a's address while its key still stands:
                    # the connection comes up again, to someone else.
                    await first.stop(None)
                    await until(lambda: not pool.answering("broker-a"), "the drop", 10)
                    second, _ = await _server(port)
                    await until(
                        lambda: pool.get("broker-a").connection_up(), "a new connection", 10
                    )
                    assert not pool.answering("broker-a")

                    await a.close()  # its key vanishes: not held
                    await until(lambda: not cache.live_brokers, "the drop", 10)

                    # Registered again (a new epoch): held again while that stays up.
                    a = await brokers.register("broker", "broker-a", {"addr": addr})
                    await until(lambda: "broker-a" in cache.live_brokers, "broker-a", 10)
                    await _synced(pool, cache)
                    await until(lambda: pool.answering("broker-a"), "answering again", 10)
                    epoch = cache.live_brokers["broker-a"].created_revision
                    await a.close()
                    marker = await brokers.register("broker", "marker", {"addr": "h:1"})
                    await until(lambda: "marker" in cache.live_brokers, "the marker", 10)
                    assert cache.live_brokers["broker-a"].created_revision == epoch
                    await marker.close()
        finally:
            await pool.close()
            await first.stop(None)
            if second is not None:
                await second.stop(None)

    asyncio.run(scenario())
