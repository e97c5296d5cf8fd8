"""popmq's etcd client against real etcd processes that stall, hang or lose their quorum
(coordination/etcd_reachability.py): a short stall of etcd or of the client's own loop
costs a wait, never a refusal; a hung member of three costs one call a short wait and
nothing after; three hung members are noticed from the keepalives alone and calls are
refused at once; a lost quorum fails calls quickly and retriably."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from popmq.coordination import CoordinationUnavailableError
from popmq.coordination.etcd import DEFAULT_TIMEOUT_S, EtcdClient
from popmq.coordination.etcd_reachability import (
    PROBE_TIMEOUT_S,
    UNANSWERED_AFTER_S,
)
from tests.support.etcd import EtcdCluster, EtcdServer

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]

MARGIN_S = 1.5
"""Added to a bound for a busy machine."""


@pytest.fixture
def etcd3(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A three-member etcd of this test alone (it pauses and kills members)."""
    cluster = EtcdCluster(tmp_path / "etcd3").start()
    yield cluster
    for member in cluster.members:
        if member.process is not None:
            member.resume()
    cluster.stop()


async def _eventually(check: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll `check` until true; returns the seconds it took."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def _timed(call: Awaitable[object]) -> float:
    began = time.monotonic()
    await call
    return time.monotonic() - began


def test_a_stall_of_etcd_or_of_the_clients_loop_costs_a_wait_not_a_refusal(
    own_etcd: EtcdServer,
) -> None:
    """etcd paused 2.6 s (an fsync or CPU stall) with a put in flight: a get made 2.2 s in,
    after the put has waited UNANSWERED_AFTER_S, waits for etcd and succeeds. The client's
    own loop blocked 2.2 s with a get in flight to a healthy etcd: the next get succeeds
    (the answer had come; it was not read yet)."""

    async def scenario() -> None:
        async with EtcdClient(own_etcd.endpoint, timeout_s=DEFAULT_TIMEOUT_S) as client:
            await client.put("/k", b"v")
            own_etcd.pause()
            resume = asyncio.get_running_loop().call_later(2.6, own_etcd.resume)
            try:
                in_flight = asyncio.create_task(client.put("/k", b"a"))
                await asyncio.sleep(2.2)
                assert client.reachability.unreachable_for is not None  # the put waits
                took = await _timed(client.get("/k"))
                print(f"a get 2.2 s into a 2.6 s pause succeeded after {took:.2f}s")
                await in_flight
            finally:
                resume.cancel()
                own_etcd.resume()
            assert (await client.get("/k")).kvs[0].value == b"a"

            in_flight_get = asyncio.create_task(client.get("/k"))
            await asyncio.sleep(0)  # it sends its request
            # On purpose: the loop stands still, as in a long GC or on a busy CI machine.
            time.sleep(UNANSWERED_AFTER_S + 0.2)  # noqa: ASYNC251
            took = await _timed(client.get("/k"))
            print(f"a get after a 2.2 s stall of the client's loop succeeded after {took:.3f}s")
            assert (await in_flight_get).kvs[0].value == b"a"

    asyncio.run(scenario())


@pytest.mark.parametrize("which", ["follower", "leader"])
def test_one_hung_member_of_three_costs_one_short_wait_and_no_refusal(
    etcd3: EtcdCluster, which: str
) -> None:
    """The client's first endpoint hangs: the call in flight there moves on after
    UNANSWERED_AFTER_S, later calls skip it, and the lease's keepalives go on elsewhere."""

    async def scenario() -> None:
        leader = etcd3.leader()
        others = [m for m in etcd3.members if m is not leader]
        hung = leader if which == "leader" else others[0]
        rest = [m for m in etcd3.members if m is not hung]
        endpoints = [hung.endpoint, *(m.endpoint for m in rest)]
        async with EtcdClient(endpoints, timeout_s=DEFAULT_TIMEOUT_S) as client:
            await client.put("/k", b"v")  # its connection to the hung member is open
            keeper = client.keep_alive(await client.lease_grant(6))  # on the hung member
            hung.pause()
            try:
                first = await _timed(client.put("/k", b"first"))
                print(f"the first put, sent to the hung {which}, took {first:.2f}s")
                assert first < DEFAULT_TIMEOUT_S
                later = []
                for i in range(6):
                    later.append(await _timed(client.put("/k", f"later-{i}".encode())))
                    assert (await client.get("/k")).kvs[0].value == f"later-{i}".encode()
                    await asyncio.sleep(0.5)
                print(f"later puts took {', '.join(f'{t:.2f}' for t in later)}s")
                assert max(later) < UNANSWERED_AFTER_S  # none waited on the hung member
                assert client.reachability.unreachable_for is None
                assert not keeper.lost
            finally:
                hung.resume()
            await keeper.close()

    asyncio.run(scenario())


def test_three_hung_members_are_noticed_from_keepalives_and_calls_refused_at_once(
    etcd3: EtcdCluster,
) -> None:
    """Every member paused and only a keepalive asking: the keepalive left unanswered
    UNANSWERED_AFTER_S starts the probe at every endpoint, and once its Status requests have
    waited PROBE_TIMEOUT_S calls are refused at once; etcd's first answer ends it."""

    async def scenario() -> None:
        async with EtcdClient(etcd3.endpoint, timeout_s=DEFAULT_TIMEOUT_S) as client:
            for member in etcd3.members:
                await client.status(member.endpoint)  # connections open to every member
            keeper = client.keep_alive(await client.lease_grant(3))  # a keepalive every 1 s
            for member in etcd3.members:
                member.pause()
            try:
                noticed = await _eventually(
                    lambda: client.reachability.hung_for is not None,
                    1 + UNANSWERED_AFTER_S + PROBE_TIMEOUT_S + 5,
                    "the hang of every member noticed from the keepalive",
                )
                print(f"three hung members noticed {noticed:.1f}s into the pause")
                for _ in range(3):
                    began = time.monotonic()
                    with pytest.raises(CoordinationUnavailableError) as error:
                        await client.put("/k", b"w")
                    assert time.monotonic() - began < PROBE_TIMEOUT_S  # no try was made
                    assert "etcd is unreachable" in str(error.value)
                    assert error.value.retriable
                    await asyncio.sleep(0.3)
            finally:
                for member in etcd3.members:
                    member.resume()
            await _eventually(lambda: client.reachability.unreachable_for is None, 15, "etcd back")
            deadline = time.monotonic() + 15
            while True:  # the members may still be electing a leader
                try:
                    await client.put("/k", b"x")
                    break
                except CoordinationUnavailableError:
                    assert time.monotonic() < deadline, "no put accepted after the resume"
                    await asyncio.sleep(0.2)
            await keeper.close()

    asyncio.run(scenario())


def test_a_lost_quorum_fails_calls_quickly_and_retriably(etcd3: EtcdCluster) -> None:
    """Two members of three killed: the one left answers Status (without a leader) but no
    write. Every put fails retriably (never INTERNAL); after the first, within about one
    PROBE_TIMEOUT_S try, as that leaderless answer does not count as etcd answering."""

    async def scenario() -> None:
        async with EtcdClient(etcd3.endpoint, timeout_s=DEFAULT_TIMEOUT_S) as client:
            await client.put("/k", b"v")
            for member in etcd3.members[:2]:
                member.kill()
            took = []
            for _ in range(6):
                began = time.monotonic()
                with pytest.raises(CoordinationUnavailableError) as error:
                    await client.put("/k", b"w")
                took.append(time.monotonic() - began)
                assert error.value.retriable and error.value.code == "UNAVAILABLE"
                await asyncio.sleep(0.3)
            print(f"puts without a quorum failed after {', '.join(f'{t:.2f}' for t in took)}s")
            assert "etcd is unreachable" in str(error.value)
            assert took[0] < DEFAULT_TIMEOUT_S + MARGIN_S
            assert max(took[1:]) < PROBE_TIMEOUT_S + MARGIN_S
            left = etcd3.members[2].endpoint
            assert (await client.status(left)).leader == 0
            assert client.reachability.unreachable_for is not None

    asyncio.run(scenario())
