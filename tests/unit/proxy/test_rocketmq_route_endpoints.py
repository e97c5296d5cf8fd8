"""v2 routes in cluster mode list every proxy (proxy/rocketmq/convert.py with_peers)."""

from __future__ import annotations

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq.proxy.rocketmq import convert


def _addresses(endpoints: pb.Endpoints) -> list[str]:
    return [f"{a.host}:{a.port}" for a in endpoints.addresses]


def test_ip_endpoints_list_every_proxy_once_in_order() -> None:
    used = convert.endpoints("10.0.0.2:8081")
    listed = convert.with_peers(used, ["10.0.0.3:8081", "10.0.0.2:8081", "10.0.0.1:8081"])
    assert listed.scheme == pb.IPv4
    assert _addresses(listed) == ["10.0.0.1:8081", "10.0.0.2:8081", "10.0.0.3:8081"]


def test_a_domain_name_or_a_mixed_family_keeps_the_clients_own_address() -> None:
    by_name = convert.endpoints("mq.example.com:8081")
    assert convert.with_peers(by_name, ["10.0.0.1:8081"]) == by_name
    ipv4 = convert.endpoints("10.0.0.2:8081")
    assert convert.with_peers(ipv4, ["10.0.0.1:8081", "proxy-b:8081"]) == ipv4
    assert convert.with_peers(ipv4, ["[::1]:8081"]) == ipv4


def test_the_list_is_bounded() -> None:
    used = convert.endpoints("10.0.0.1:1")
    peers = [f"10.0.1.{i}:8081" for i in range(40)]
    assert len(convert.with_peers(used, peers).addresses) == convert.MAX_ENDPOINT_ADDRESSES
