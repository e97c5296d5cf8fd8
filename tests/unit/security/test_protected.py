"""Protected mode: which listen addresses count as loopback, and when a start is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from popmq.broker.server import BrokerServer
from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.proxy.server import PopMQServer
from popmq.runtime.config import ServerConfig
from popmq.security.config import SecurityConfig
from popmq.security.protected import (
    ProtectedModeError,
    check_protected_mode,
    is_loopback,
    listen_host,
)


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.1.2.3", "localhost", "LOCALHOST", "localhost.", "::1", "[::1]",
     "::ffff:127.0.0.1", "[::ffff:127.0.0.5]"],
)  # fmt: skip
def test_loopback_hosts_are_recognised(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host",
    ["0.0.0.0", "::", "[::]", "10.0.0.7", "192.168.1.1", "::ffff:10.0.0.1", "fe80::1",
     "example.com", "localhost.example.com", "my-host"],
)  # fmt: skip
def test_other_hosts_are_not_loopback(host: str) -> None:
    assert not is_loopback(host)


def test_listen_host_splits_ipv6_and_ipv4() -> None:
    assert listen_host("[::1]:8081") == "[::1]"
    assert listen_host("0.0.0.0:0") == "0.0.0.0"


def test_an_anonymous_public_listener_is_refused_naming_the_ways_out() -> None:
    with pytest.raises(ProtectedModeError) as refused:
        check_protected_mode(SecurityConfig(), ["127.0.0.1:1", "0.0.0.0:8081"], server="popmq")
    message = str(refused.value)
    assert "\n" not in message
    assert "0.0.0.0:8081" in message
    for way_out in ("authentication = true", "allow_anonymous = true", "loopback"):
        assert way_out in message
    assert refused.value.code == "INVALID_ARGUMENT"


def test_loopback_authentication_or_allow_anonymous_pass() -> None:
    check_protected_mode(SecurityConfig(), ["127.0.0.1:0", "[::1]:0", "localhost:1", ""])
    check_protected_mode(SecurityConfig(authentication=True), ["0.0.0.0:0"])
    check_protected_mode(SecurityConfig(allow_anonymous=True), ["0.0.0.0:0", "[::]:1"])


def test_a_server_on_a_public_address_refuses_before_it_binds_or_opens_the_store(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    config = ServerConfig(
        listen="0.0.0.0:0", broker=BrokerConfig(store=StoreConfig(data_dir=data_dir))
    )

    async def scenario() -> None:
        server = PopMQServer(config)
        with pytest.raises(ProtectedModeError, match=r"popmq refuses to listen on 0\.0\.0\.0:0"):
            await server.start()
        assert server.port == 0
        await server.stop()

    asyncio.run(scenario())
    assert not data_dir.exists()


def test_popmq_broker_on_a_public_address_is_refused_too(tmp_path: Path) -> None:
    data_dir = tmp_path / "b1"
    config = ServerConfig(
        listen="0.0.0.0:0", broker=BrokerConfig(store=StoreConfig(data_dir=data_dir))
    )

    async def scenario() -> None:
        server = BrokerServer(config)
        with pytest.raises(ProtectedModeError, match="popmq broker refuses to listen"):
            await server.start()

    asyncio.run(scenario())
    assert not data_dir.exists()
