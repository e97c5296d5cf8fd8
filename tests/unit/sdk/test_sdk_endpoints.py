"""Endpoint lists: how a client's ``endpoint`` is parsed and checked, and what a client whose
every endpoint is unreachable sees (no server: nothing listens on the addresses used)."""

from __future__ import annotations

import asyncio
import time

import pytest

from popmq import sdk
from popmq.sdk._channel import NoEndpointError, check_endpoint, check_pinnable, parse_endpoints

ALLOWED = "several comma-separated (10.0.0.1:8081,10.0.0.2:8081) to fail over between proxies"


@pytest.mark.parametrize(
    ("endpoint", "parsed"),
    [
        ("127.0.0.1:8081", ("127.0.0.1:8081",)),
        ("127.0.0.1:8081,127.0.0.1:8082", ("127.0.0.1:8081", "127.0.0.1:8082")),
        ("[::1]:8081,[::1]:8082,h.example.com:1", ("[::1]:8081", "[::1]:8082", "h.example.com:1")),
        # A gRPC target is one endpoint, commas included: gRPC balances inside it.
        ("ipv4:10.0.0.1:8081,10.0.0.2:8081", ("ipv4:10.0.0.1:8081,10.0.0.2:8081",)),
        ("dns:///popmq.example.com:8081", ("dns:///popmq.example.com:8081",)),
        ("unix:/run/popmq.sock", ("unix:/run/popmq.sock",)),
        # A sequence's items are single endpoints, targets included.
        (["unix:/run/a.sock", "10.0.0.1:8081"], ("unix:/run/a.sock", "10.0.0.1:8081")),
        (("h:1",), ("h:1",)),
    ],
)
def test_endpoints_parse_into_the_addresses_failed_over_between(
    endpoint: str | list[str] | tuple[str, ...], parsed: tuple[str, ...]
) -> None:
    assert parse_endpoints(endpoint) == parsed


@pytest.mark.parametrize(
    ("endpoint", "says"),
    [
        ("", "is empty or has surrounding spaces"),
        ("h:1,", "has an empty or space-padded item at position 2"),
        (",h:1", "has an empty or space-padded item at position 1"),
        ("h:1,,h:2", "has an empty or space-padded item at position 2"),
        ("h:1, h:2", "has an empty or space-padded item at position 2"),
        ("h:1,h:2,h:1", "names 'h:1' twice (positions 1 and 3)"),
        ("H:1,h:1", "names 'h:1' twice (positions 1 and 2)"),
        ("h:1,h:99999", "has port '99999', not a number in 1..65535"),
        ("h:1,h", "has no HOST:PORT in 'h'"),
        ("h:1,::1:8081", "has an IPv6 host without brackets"),
        ("h:1,unix:/run/popmq.sock", "lists the gRPC target 'unix:/run/popmq.sock'"),
        ([], "is an empty list"),
        (["h:1", ""], "has an empty or space-padded item at position 2"),
        (["h:1", "h:1"], "names 'h:1' twice"),
        (["h:1,h:2"], "has 'h:1,h:2' at position 1: one endpoint per item"),
        (["unix:"], "names no path"),
    ],
)
def test_a_bad_endpoint_list_is_refused_naming_the_item_and_what_is_allowed(
    endpoint: str | list[str], says: str
) -> None:
    with pytest.raises(sdk.InvalidArgumentError) as raised:
        parse_endpoints(endpoint)

    assert says in raised.value.message
    assert ALLOWED in raised.value.message


def test_an_endpoint_of_another_type_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="a str or a sequence of str, got int"):
        parse_endpoints(8081)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got list"):
        parse_endpoints(["h:1", 2])  # type: ignore[list-item]


def test_check_endpoint_takes_a_list_and_returns_it_unchanged() -> None:
    assert check_endpoint("h:1,h:2") == "h:1,h:2"
    with pytest.raises(sdk.InvalidArgumentError, match="twice"):
        check_endpoint("h:1,h:1")


def test_a_pinned_endpoint_must_reach_one_proxy_process() -> None:
    for one in ("h:1", "[::1]:8081", "unix:/run/popmq.sock", "ipv4:10.0.0.1:8081"):
        assert check_pinnable(one) == one
    for several, why in [
        ("h:1,h:2", "lists 2 endpoints"),
        ("ipv4:10.0.0.1:8081,10.0.0.2:8081", "several addresses"),
        ("dns:///popmq.example.com:8081", "may resolve to several proxies"),
        ("xds:///popmq", "may resolve to several proxies"),
    ]:
        with pytest.raises(sdk.InvalidArgumentError, match=why):
            check_pinnable(several)
    with pytest.raises(sdk.InvalidArgumentError, match="port"):
        check_pinnable("h:99999")
    # A client refuses pinned calls through such a target before connecting.
    with sdk.SimpleConsumer("dns:///popmq.example.com:8081", group="g", topic="t") as client:
        with pytest.raises(sdk.InvalidArgumentError, match="one proxy process"):
            client.ack_leases(["t"], pinned=True)
        with pytest.raises(sdk.InvalidArgumentError, match="one proxy process"):
            client.receive_lease("t", 0, pinned=True)


def test_clients_refuse_a_bad_list_before_connecting_and_show_a_good_one_as_given() -> None:
    for make in (
        lambda: sdk.Producer("127.0.0.1:8081,127.0.0.1:8081"),
        lambda: sdk.AsyncAdmin("127.0.0.1:8081,"),
        lambda: sdk.SimpleConsumer(["127.0.0.1:8081", "127.0.0.1:0"], group="g", topic="t"),
        lambda: sdk.PullConsumer("127.0.0.1:8081,x:y", topic="t"),
    ):
        with pytest.raises(sdk.InvalidArgumentError):
            make()
    with sdk.Admin(["127.0.0.1:8081", "127.0.0.1:8082"]) as admin:
        assert admin.endpoint == "127.0.0.1:8081,127.0.0.1:8082"


def test_a_client_whose_every_endpoint_is_unreachable_fails_at_once_naming_each() -> None:
    # Nothing listens on ports 1 and 2 of the loopback: each connection is refused.
    async def scenario() -> sdk.UnavailableError:
        async with sdk.AsyncAdmin("127.0.0.1:1,127.0.0.1:2", timeout_s=5) as admin:
            with pytest.raises(sdk.UnavailableError) as raised:
                await admin.list_topics()
            # The next request tries them again (no waiting out a backoff either).
            with pytest.raises(sdk.UnavailableError):
                await admin.list_topics()
            return raised.value

    started = time.monotonic()
    error = asyncio.run(scenario())

    assert time.monotonic() - started < 4  # refused at once, not after the 5 s timeout
    assert isinstance(error, NoEndpointError) and error.retriable
    assert error.message.startswith("no popmq proxy could be reached (127.0.0.1:1: refused")
    assert "127.0.0.1:2: refused or unreachable" in error.message
