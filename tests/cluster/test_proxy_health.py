"""A proxy's grpc.health.v1 status follows whether it has a broker to route to: NOT_SERVING
while no broker is registered, or while none of those registered can be reached, SERVING
again once one is."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from popmq.broker.server import BrokerServer
from popmq.broker_core import BrokerConfig, StoreConfig
from popmq.cluster.proxy_server import NO_BROKER, ProxyServer
from popmq.coordination.config import ClusterConfig
from popmq.runtime.config import ServerConfig
from tests.cluster.conftest import unique_cluster
from tests.support.etcd import EtcdServer
from tests.support.fault_relay import FaultRelay
from tests.support.waiting import until

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status)


async def _until_health(address: str, status: int) -> None:
    """Poll health from a thread: the servers answer in this test's event loop."""

    async def turned() -> bool:
        return await asyncio.to_thread(_health, address) == status

    await until(turned, f"health to turn {status}", 20.0)


def _broker(tmp_path: Path, config: ClusterConfig, *, advertise: str = "") -> BrokerServer:
    return BrokerServer(
        ServerConfig(
            listen="127.0.0.1:0",
            shutdown_grace_s=1.0,
            cluster=ClusterConfig(etcd=config.etcd, name=config.name, advertise=advertise),
            broker=BrokerConfig(broker_name="b1", store=StoreConfig(data_dir=tmp_path / "b1")),
        )
    )


def test_health_is_not_serving_while_no_broker_is_registered(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    config = ClusterConfig(etcd=etcd.endpoint, name=unique_cluster())

    async def scenario() -> None:
        proxy = ProxyServer(
            ServerConfig(
                listen="127.0.0.1:0",
                shutdown_grace_s=1.0,
                cluster=ClusterConfig(etcd=config.etcd, name=config.name, proxy_name="pa"),
            )
        )
        await proxy.start()
        broker: BrokerServer | None = None
        try:
            address = f"127.0.0.1:{proxy.port}"
            await _until_health(address, NOT_SERVING)  # no broker yet
            assert proxy.server.health.degradation == NO_BROKER
            broker = _broker(tmp_path, config)
            await broker.start()
            await _until_health(address, SERVING)
            assert proxy.server.health.degradation is None
            await broker.stop()
            broker = None
            await _until_health(address, NOT_SERVING)  # its registration ended
            broker = _broker(tmp_path, config)
            await broker.start()
            await _until_health(address, SERVING)
        finally:
            if broker is not None:
                await broker.stop()
            await proxy.stop()

    asyncio.run(scenario())


def test_health_is_not_serving_while_no_registered_broker_can_be_reached(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    config = ClusterConfig(etcd=etcd.endpoint, name=unique_cluster())

    async def scenario() -> None:
        relay = FaultRelay()
        relay.cut = True  # it closes every connection: b1 is unreachable
        proxy = ProxyServer(
            ServerConfig(
                listen="127.0.0.1:0",
                shutdown_grace_s=1.0,
                cluster=ClusterConfig(etcd=config.etcd, name=config.name, proxy_name="pa"),
            )
        )
        broker = _broker(tmp_path, config, advertise=await relay.start())
        await proxy.start()
        try:
            address = f"127.0.0.1:{proxy.port}"
            await broker.start()  # registered, at the relay's address
            health = proxy.server.health
            await until(
                lambda: (health.degradation or "").startswith(
                    "no registered broker can be reached"
                ),
                "the proxy to find b1 unreachable",
                20.0,
            )
            assert "b1" in (health.degradation or "")
            assert await asyncio.to_thread(_health, address) == NOT_SERVING
            relay.target = ("127.0.0.1", broker.port)
            relay.cut = False  # the path to b1 works again
            await _until_health(address, SERVING)
            assert proxy.server.health.degradation is None
        finally:
            await broker.stop()
            await proxy.stop()
            await relay.close()

    asyncio.run(scenario())
