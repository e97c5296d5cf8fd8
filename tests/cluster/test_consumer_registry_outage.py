"""Queue-exclusive claims while etcd does not answer (proxy/claim_hold_over.py): two
ClientRegistry objects (two proxies) over a real etcd, each through a client of its own,
on one test clock (the stored deadlines are wall-clock seconds, so the tests move time).

- etcd stopped: members keep the claims they hold and report, renewed in memory for at
  most `outage_hold_s` past their recorded deadlines; nothing is granted; a new member is
  refused retriably; once etcd is back the next write stores the renewals.
- one proxy cut off from a working etcd (a partition, tests/cluster/link.py): the other
  gives the cut-off proxy's member's queues to another member only after every claim end
  the cut-off proxy told its member.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from popmq.broker_core.errors import FailedPreconditionError, UnavailableError
from popmq.coordination import EtcdCoordinator
from popmq.proxy.clients import ClientRegistry, ConsumeMode, Registration
from popmq.proxy.rocketmq.assignments import ConsumerAssignments
from popmq.proxy.rocketmq.codes import ProtocolError
from popmq.runtime.config import ClientRegistryConfig
from tests.cluster.conftest import unique_cluster
from tests.cluster.link import Link
from tests.support.etcd import EtcdServer
from tests.support.run_async import run_async

pytestmark = pytest.mark.timeout(120)

INTERVAL = 1.0
CLAIM = 3 * INTERVAL
SKEW = 0.5
HOLD = 10.0
CONFIG = ClientRegistryConfig(
    clock_skew_s=SKEW, restart_grace_s=0.0, sweep_interval_s=0, outage_hold_s=HOLD
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def registries(*endpoints: str) -> AsyncIterator[tuple[Clock, list[ClientRegistry]]]:
    """One registry per endpoint, each over an etcd client of its own, on one clock."""
    clock = Clock()
    cluster = unique_cluster()
    coordinators = [EtcdCoordinator(e, cluster=cluster) for e in endpoints]
    made = [
        ClientRegistry(CONFIG, broker_name="cluster", coordinator=c, clock=clock)
        for c in coordinators
    ]
    try:
        for registry in made:
            await registry.start()
        yield clock, made
    finally:
        for registry in made:
            await registry.close()
        for coordinator in coordinators:
            await coordinator.close()


async def join(registry: ClientRegistry, client_id: str) -> None:
    await registry.heartbeat(
        Registration(
            client_id=client_id,
            group="g",
            topics=("t",),
            mode=ConsumeMode.QUEUE_EXCLUSIVE,
            heartbeat_interval_s=INTERVAL,
        ),
        {"t": 4},
    )


async def query(
    registry: ClientRegistry, client_id: str, held: tuple[int, ...] = ()
) -> tuple[tuple[int, ...], tuple[int, ...], float]:
    """(granted, pending, claim end on the clock) of one QueryAssignment."""
    answer = await registry.query_assignment(client_id, "g", "t", 4, held)
    now = registry._clock()
    return answer.queue_ids, answer.pending_queue_ids, now + answer.claim_s


async def call(
    registry: ClientRegistry, client_id: str, held: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...], float]:
    """A member's round: Heartbeat, then QueryAssignment reporting `held`."""
    await join(registry, client_id)
    return await query(registry, client_id, held)


async def answered(call: Callable[[], Awaitable[None]]) -> None:
    """Repeat `call` while etcd's client has not reconnected (UNAVAILABLE)."""
    for _ in range(100):
        try:
            return await call()
        except UnavailableError:
            await asyncio.sleep(0.1)
    raise AssertionError("etcd did not answer again")


async def split(a: ClientRegistry, b: ClientRegistry) -> float:
    """c1 through A takes 0 and 1, c2 through B 2 and 3; returns c1's claim end."""
    await join(a, "c1")
    await join(b, "c2")
    assert (await query(a, "c1"))[:2] == ((0, 1), ())
    assert (await query(b, "c2"))[:2] == ((2, 3), ())
    granted, pending, c1_until = await query(a, "c1", (0, 1))
    assert (granted, pending) == ((0, 1), ())
    return c1_until


@run_async
async def test_members_keep_their_claims_through_an_etcd_outage_and_nothing_is_granted(
    tmp_path: Path,
) -> None:
    etcd = EtcdServer(tmp_path / "etcd").start()
    try:
        async with registries(etcd.endpoint, etcd.endpoint) as (clock, (a, b)):
            recorded = await split(a, b)
            await asyncio.to_thread(etcd.stop)
            # Past the recorded deadline the members still hold what they hold and report,
            # renewed a claim time at a time, never past the deadline plus the hold-over.
            told = []
            for _ in range(4):
                clock.now += 2 * INTERVAL
                granted, pending, until = await call(a, "c1", (0, 1))
                assert (granted, pending) == ((0, 1), ())
                assert until <= recorded + HOLD
                told.append(until)
                assert (await call(b, "c2", (2, 3)))[:2] == ((2, 3), ())
            assert max(told) > recorded + CLAIM, "no claim was renewed past its deadline"
            # c2 stops reporting 3: it is renewed no more (and not given to anyone).
            clock.now += INTERVAL
            assert (await call(b, "c2", (2,)))[:2] == ((2,), ())
            assert b.owners("g", "t") == {2: "c2"}  # exact for the members calling B
            assert a.owners("g", "t") == {0: "c1", 1: "c1"}
            # Nothing is granted: not another member's queue, not a new member.
            assert (await call(a, "c1", (0, 1, 2)))[:2] == ((0, 1), ())
            with pytest.raises(UnavailableError, match="etcd"):
                await join(b, "c3")
            # Past the recorded deadline plus the hold-over, the claims end.
            while clock.now < recorded + HOLD - INTERVAL:
                clock.now += INTERVAL
                granted, _, until = await call(a, "c1", (0, 1))
                assert granted == (0, 1)
            assert until == recorded + HOLD  # a claim time from now would reach past it
            clock.now = recorded + HOLD + 0.01
            assert (await call(a, "c1", (0, 1)))[:2] == ((), ())
            assert a.owners("g", "t") == {}

            await asyncio.to_thread(etcd.start)
            # Renewals made while etcd was away are stored by the next write of the group.
            clock.now += INTERVAL
            await answered(lambda: join(a, "c1"))
            assert (await query(a, "c1", (0, 1)))[:2] == ((0, 1, 2, 3), ())  # c2 went silent
            await asyncio.to_thread(etcd.stop)
            recorded = clock.now + CLAIM
            clock.now += 2 * INTERVAL
            granted, _, renewed = await call(a, "c1", (0, 1, 2, 3))
            assert granted == (0, 1, 2, 3) and renewed > recorded
            await asyncio.to_thread(etcd.start)
            await answered(lambda: join(a, "c9"))  # A's next write of the group
            clock.now = (recorded + renewed) / 2  # past the deadline recorded before the outage
            await answered(lambda: join(b, "c2"))  # B reads what A wrote
            assert b.owners("g", "t") == {0: "c1", 1: "c1", 2: "c1", 3: "c1"}
    finally:
        etcd.stop()


@run_async
async def test_a_proxy_cut_off_from_etcd_never_overlaps_with_one_that_reaches_it(
    tmp_path: Path,
) -> None:
    etcd = EtcdServer(tmp_path / "etcd").start()
    try:
        async with (
            Link(etcd.endpoint) as link,
            registries(link.endpoint, etcd.endpoint) as (clock, (a, b)),
        ):
            recorded = await split(a, b)
            link.cut()  # A alone is cut off from etcd; B reaches it
            told_c1 = recorded
            c2_got_0_at = None
            while clock.now < recorded + HOLD + SKEW + 2 * INTERVAL:
                clock.now += INTERVAL / 2
                granted, _, until = await call(a, "c1", (0, 1))
                if granted:
                    assert granted == (0, 1)
                    told_c1 = max(told_c1, until)
                granted, _, _ = await call(b, "c2", (2, 3))
                if 0 in granted and c2_got_0_at is None:
                    c2_got_0_at = clock.now
                # Never two members on one queue: c2 gets c1's queues only once every claim
                # end A told c1 has passed, by the clock skew.
                if c2_got_0_at is not None:
                    assert c2_got_0_at >= told_c1 + SKEW, (c2_got_0_at, told_c1)
            assert told_c1 > recorded + CLAIM, "A renewed nothing through the partition"
            assert c2_got_0_at is not None, "c2 never got c1's queues"
            assert c2_got_0_at <= recorded + HOLD + SKEW + INTERVAL
    finally:
        etcd.stop()


@run_async
async def test_a_fifo_push_consumer_of_a_rocketmq_client_keeps_receiving_through_an_outage(
    tmp_path: Path,
) -> None:
    """The v2 path (proxy/rocketmq/assignments.py): the claims it derives from the client's
    own calls are kept, and its receives are allowed past the recorded deadline."""
    etcd = EtcdServer(tmp_path / "etcd").start()
    try:
        async with registries(etcd.endpoint) as (clock, (registry,)):
            v2 = ConsumerAssignments(registry, clock=clock)
            await v2.register("r1", "g", {"t": 4}, exclusive=True)
            assert await v2.query("r1", "g", "t", 4) == (0, 1, 2, 3)
            recorded = clock.now + 3 * 10.0  # the registry's default interval: 10 s
            await asyncio.to_thread(etcd.stop)
            v2.check_receive("r1", "g", "t", 2)  # the client receives from queue 2 only
            while clock.now + 5.0 < recorded + HOLD:  # official clients query every 5 s
                clock.now += 5.0
                await v2.register("r1", "g", {"t": 4}, exclusive=True)
                assert await v2.query("r1", "g", "t", 4) == (0, 1, 2, 3)
            assert clock.now > recorded
            assert v2.check_receive("r1", "g", "t", 2) > 0
            # Past the recorded deadline plus the hold-over the claims end.
            clock.now += 5.0
            await v2.register("r1", "g", {"t": 4}, exclusive=True)
            assert await v2.query("r1", "g", "t", 4) == ()
            with pytest.raises(ProtocolError, match="does not hold queue 2"):
                v2.check_receive("r1", "g", "t", 2)
            # A new client is refused; nothing is granted to it.
            with pytest.raises(UnavailableError, match="etcd"):
                await v2.register("r2", "g", {"t": 4}, exclusive=True)
    finally:
        etcd.stop()


@run_async
async def test_a_session_ending_in_silence_leaves_live_claims_to_run_out(
    tmp_path: Path,
) -> None:
    """With a hold-over, the client may be renewing them through a proxy cut off from etcd;
    a goodbye still releases them at once."""
    etcd = EtcdServer(tmp_path / "etcd").start()
    try:
        async with registries(etcd.endpoint) as (clock, (registry,)):
            recorded = await split(registry, registry)
            assert await registry.unregister("c1", "g", if_last_here=True)
            clock.now += INTERVAL
            await join(registry, "c2")
            assert (await query(registry, "c2", (2, 3)))[:2] == ((2, 3), (0, 1))
            clock.now = recorded + HOLD + SKEW + 0.01
            await join(registry, "c2")
            assert (await query(registry, "c2", (2, 3)))[:2] == ((0, 1, 2, 3), ())
            await join(registry, "c1")
            assert (await query(registry, "c1", ()))[:2] == ((), (0, 1))
            await query(registry, "c2", (2, 3))  # c2 gives 0 and 1 up to c1's target
            assert (await query(registry, "c1", ()))[:2] == ((0, 1), ())
            assert await registry.unregister("c1", "g")  # a goodbye: at once
            assert (await query(registry, "c2", (2, 3)))[:2] == ((0, 1, 2, 3), ())
    finally:
        etcd.stop()


@run_async
async def test_pop_heartbeats_are_checked_against_the_cache_while_etcd_is_down(
    tmp_path: Path,
) -> None:
    """A POP member (a simple consumer, a RocketMQ consumer of a normal group) is only
    checked against the group's queue-exclusive members: from the cache, without etcd."""
    etcd = EtcdServer(tmp_path / "etcd").start()
    try:
        async with registries(etcd.endpoint) as (_, (registry,)):
            await join(registry, "c1")
            await asyncio.to_thread(etcd.stop)

            async def pop_heartbeat(group: str) -> float:
                return await registry.heartbeat(
                    Registration(client_id="p1", group=group, topics=("t",), mode=ConsumeMode.POP),
                    {"t": 4},
                )

            assert await pop_heartbeat("normal") == CONFIG.default_heartbeat_interval_s
            with pytest.raises(FailedPreconditionError, match="QUEUE_EXCLUSIVE mode"):
                await pop_heartbeat("g")  # c1 consumes t queue-exclusive
    finally:
        etcd.stop()
