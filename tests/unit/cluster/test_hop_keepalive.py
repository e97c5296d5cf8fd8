"""`[cluster] hop_keepalive_s`: how often a proxy pings its brokers' connections, a setting
with a range, and what the brokers allow (broker/peer_pings.py)."""

from __future__ import annotations

import asyncio

import pytest

from popmq.broker.peer_pings import peer_pings_allowed
from popmq.cluster.broker_pool import BrokerPool
from popmq.cluster.proxy_server import ProxyServer
from popmq.coordination.config import HOP_KEEPALIVE_S, MIN_HOP_KEEPALIVE_S, ClusterConfig
from popmq.coordination.coordinator import Entry
from popmq.runtime import settings
from popmq.runtime.config import ConnectionConfig, ServerConfig


def test_the_hop_keepalive_defaults_to_a_second_and_is_set_like_any_setting() -> None:
    assert settings.load().cluster.hop_keepalive_s == HOP_KEEPALIVE_S == 1.0
    config = settings.load(environ={"POPMQ_CLUSTER_HOP_KEEPALIVE_S": "2.5"})
    assert config.cluster.hop_keepalive_s == 2.5
    assert settings.load(flags={"cluster.hop_keepalive_s": "0.5"}).cluster.hop_keepalive_s == 0.5


@pytest.mark.parametrize("value", [0.0, 0.25, 0.499, 4.001, 5.0, 30.0, float("nan")])
def test_a_hop_keepalive_out_of_range_is_refused_saying_what_is_allowed(value: float) -> None:
    with pytest.raises(
        ValueError,
        match=r"cluster\.hop_keepalive_s .* must be within 0\.5\.\.4 s: a proxy may ping every",
    ):
        ClusterConfig(hop_keepalive_s=value)
    if value == value:  # nan is refused by the settings parser before the range
        with pytest.raises(settings.SettingsError, match=r"^\[cluster\] is not valid: .*0\.5"):
            settings.load(flags={"cluster.hop_keepalive_s": str(value)})


def test_a_proxy_pings_its_brokers_at_its_hop_keepalive() -> None:
    config = settings.load(
        flags={"cluster.etcd": "127.0.0.1:2379", "cluster.hop_keepalive_s": "2.5"}
    )
    assert ProxyServer(config).broker.pool.keepalive_s == 2.5


def test_the_pool_opens_each_broker_connection_with_its_keepalive() -> None:
    async def scenario() -> float:
        pool = BrokerPool(keepalive_s=2.5)
        try:
            # Opening a connection makes no call: nothing needs to listen there.
            await pool.sync({"b1": Entry("brokers/b1", {"addr": "127.0.0.1:1"}, 1, 1, 1)})
            # The setting itself (the ping rate is the channel's, not observable cheaply).
            return pool.get("b1")._keepalive_s
        finally:
            await pool.close()

    assert asyncio.run(scenario()) == 2.5


def test_brokers_allow_pings_twice_as_often_as_the_fastest_proxy() -> None:
    allowed = peer_pings_allowed(ServerConfig()).connections.min_client_ping_interval_s
    assert allowed <= MIN_HOP_KEEPALIVE_S / 2
    # A stricter [connections] setting of the broker's own is kept.
    strict = ServerConfig(connections=ConnectionConfig(min_client_ping_interval_s=0.1))
    assert peer_pings_allowed(strict).connections.min_client_ping_interval_s == 0.1
