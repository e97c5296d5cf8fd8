"""Queue-exclusive consumers across proxies: two ClientRegistry objects (two proxies) over
one coordinator, a LocalCoordinator and a real etcd (`make_coordinator`).

The registries share a test clock (wall-clock seconds in the stored deadlines), so the tests
move time instead of sleeping. Each etcd registry has a client of its own, as a proxy
process would.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from popmq.broker_core.errors import FailedPreconditionError
from popmq.coordination import Coordinator, LocalCoordinator
from popmq.proxy.clients import (
    CLUSTER_CLOCK_SKEW_S,
    CLUSTER_OUTAGE_HOLD_S,
    ClientRegistry,
    ConsumeMode,
    Registration,
)
from popmq.runtime.config import ClientRegistryConfig
from tests.cluster.conftest import MakeCoordinator
from tests.support.run_async import run_async

INTERVAL = 1.0
CLAIM = 3 * INTERVAL
SKEW = 0.5
CONFIG = ClientRegistryConfig(
    clock_skew_s=SKEW, restart_grace_s=5.0, sweep_interval_s=0, outage_hold_s=0.0
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class Proxies:
    """Registries over one coordinator (through a client each), on one clock."""

    def __init__(self, make: MakeCoordinator, clock: Clock) -> None:
        self._make = make
        self.clock = clock
        self._coordinators: list[Coordinator] = []

    def registry(
        self, config: ClientRegistryConfig = CONFIG, existing_groups: tuple[str, ...] = ()
    ) -> ClientRegistry:
        coordinator = self._make()
        if coordinator not in self._coordinators:
            self._coordinators.append(coordinator)
        return ClientRegistry(
            config,
            broker_name="cluster",
            coordinator=coordinator,
            existing_groups=existing_groups,
            clock=self.clock,
        )

    async def close(self) -> None:
        for coordinator in self._coordinators:
            await coordinator.close()


@asynccontextmanager
async def proxies(make: MakeCoordinator) -> AsyncIterator[Proxies]:
    running = Proxies(make, Clock())
    try:
        yield running
    finally:
        await running.close()


async def join(
    registry: ClientRegistry,
    client_id: str,
    *,
    group: str = "g",
    mode: ConsumeMode = ConsumeMode.QUEUE_EXCLUSIVE,
    queues: int = 4,
) -> None:
    await registry.heartbeat(
        Registration(
            client_id=client_id,
            group=group,
            topics=("t",),
            mode=mode,
            heartbeat_interval_s=INTERVAL,
        ),
        {"t": queues},
    )


async def query(
    registry: ClientRegistry, client_id: str, held: tuple[int, ...] = (), queues: int = 4
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    answer = await registry.query_assignment(client_id, "g", "t", queues, held)
    return answer.queue_ids, answer.pending_queue_ids


@run_async
async def test_members_on_two_proxies_split_the_queues_with_no_overlap(
    make_coordinator: MakeCoordinator,
) -> None:
    async with proxies(make_coordinator) as cluster:
        a, b = cluster.registry(), cluster.registry()
        await join(a, "c1")
        assert await query(a, "c1") == ((0, 1, 2, 3), ())
        await join(b, "c2")  # through the other proxy
        # c2's target is 2 and 3; the claim c1 got through A holds at B too.
        assert await query(b, "c2") == ((), (2, 3))
        cluster.clock.now += 0.5
        assert await query(a, "c1", held=(0, 1, 2, 3)) == ((0, 1), ())
        assert await query(b, "c2") == ((), (2, 3))  # c1 still finishes 2 and 3
        assert await query(a, "c1", held=(0, 1)) == ((0, 1), ())
        assert await query(b, "c2") == ((2, 3), ())
        # Both proxies see the same owners and epoch, whoever asks where.
        epochs = {
            (await a.query_assignment("c1", "g", "t", 4, (0, 1))).epoch,
            (await b.query_assignment("c2", "g", "t", 4, (2, 3))).epoch,
            (await b.query_assignment("c1", "g", "t", 4, (0, 1))).epoch,
        }
        assert len(epochs) == 1
        assert a.owners("g", "t") == b.owners("g", "t") == {0: "c1", 1: "c1", 2: "c2", 3: "c2"}
        assert [c.client_id for c in await a.clients("g")] == ["c1", "c2"]


@run_async
async def test_a_member_that_moves_to_another_proxy_keeps_its_queues(
    make_coordinator: MakeCoordinator,
) -> None:
    async with proxies(make_coordinator) as cluster:
        a, b = cluster.registry(), cluster.registry()
        await join(a, "c1")
        await join(a, "c2")
        assert await query(a, "c1") == ((0, 1), ())
        assert await query(a, "c2") == ((2, 3), ())
        # c1's connection to A breaks: it goes on through B, reporting what it holds.
        cluster.clock.now += 1.0
        await join(b, "c1")
        assert await query(b, "c1", held=(0, 1)) == ((0, 1), ())
        await join(a, "c2")
        assert await query(a, "c2", held=(2, 3)) == ((2, 3), ())
        # The claims c1 got through A have run out (skew included), the ones it renewed
        # through B have not: a joiner through A waits for them.
        cluster.clock.now += CLAIM - 1.0 + SKEW + 0.1
        await join(a, "c0")
        assert await query(a, "c0") == ((), (0, 1))
        assert a.owners("g", "t") == {0: "c1", 1: "c1", 2: "c2", 3: "c2"}
        # c1 reports nothing through B any more: it gave 0 and 1 up, c0 gets them at once.
        assert await query(b, "c1") == ((), (2,))
        assert await query(a, "c0") == ((0, 1), ())


@run_async
async def test_a_silent_member_loses_its_claims_after_the_claim_time_on_both_proxies(
    make_coordinator: MakeCoordinator,
) -> None:
    async with proxies(make_coordinator) as cluster:
        a, b = cluster.registry(), cluster.registry()
        await join(a, "c1")
        assert await query(a, "c1") == ((0, 1, 2, 3), ())
        await join(b, "c2")
        silent_since = cluster.clock.now
        # c1 stops calling. Through B, c2 waits for c1's queues...
        cluster.clock.now = silent_since + CLAIM - 0.1
        await join(b, "c2")
        assert await query(b, "c2") == ((), (2, 3))
        # ...past the claim's deadline, by the clock skew other proxies may have (c1 is
        # gone, so all four are c2's target now)...
        cluster.clock.now = silent_since + CLAIM + SKEW / 2
        await join(b, "c2")
        assert await query(b, "c2") == ((), (0, 1, 2, 3))
        # ...then c1 is gone and c2 takes every queue; A sees the same.
        cluster.clock.now = silent_since + CLAIM + SKEW + 0.1
        await join(b, "c2")
        assert await query(b, "c2") == ((0, 1, 2, 3), ())
        assert [c.client_id for c in await a.clients("g")] == ["c2"]
        with pytest.raises(FailedPreconditionError, match="not registered"):
            await query(a, "c1", held=(0, 1))
        await join(a, "c1")  # c1 comes back through A still claiming 0 and 1: c2 keeps them
        assert await query(a, "c1", held=(0, 1)) == ((), (0, 1))
        assert a.owners("g", "t") == {0: "c2", 1: "c2", 2: "c2", 3: "c2"}


@run_async
async def test_the_default_clock_skew_and_outage_hold_are_none_in_process_and_set_over_etcd(
    make_coordinator: MakeCoordinator,
) -> None:
    async with proxies(make_coordinator) as cluster:
        config = ClientRegistryConfig(sweep_interval_s=0)
        a, b = cluster.registry(config), cluster.registry(config)
        one_clock = isinstance(a.coordinator, LocalCoordinator)
        # Over etcd another member's claim blocks a grant the outage hold-over and the
        # clock skew past its deadline; in process, at its deadline.
        block = 0.0 if one_clock else CLUSTER_OUTAGE_HOLD_S + CLUSTER_CLOCK_SKEW_S
        await join(a, "c1")
        assert await query(a, "c1") == ((0, 1, 2, 3), ())
        await join(b, "c2")
        cluster.clock.now += CLAIM + max(block / 2, 0.01)  # c1 went silent
        await join(b, "c2")
        expected = ((0, 1, 2, 3), ()) if one_clock else ((), (0, 1, 2, 3))
        assert await query(b, "c2") == expected
        cluster.clock.now += block / 2 + 0.01
        await join(b, "c2")
        assert await query(b, "c2") == ((0, 1, 2, 3), ())


@run_async
async def test_the_restart_grace_belongs_to_the_coordinators_state(
    make_coordinator: MakeCoordinator,
) -> None:
    async with proxies(make_coordinator) as cluster:
        start = cluster.clock.now
        # The consumer state is new: both proxies wait out one grace, for existing groups.
        a = cluster.registry(existing_groups=("g",))
        cluster.clock.now += 2.0
        b = cluster.registry(existing_groups=("g",))  # started later: A's grace still rules
        await join(a, "c1")
        await join(b, "c2")
        assert await query(a, "c1", held=(0, 3)) == ((0,), (1,))  # 3 kept: c1 reported it
        assert await query(b, "c2") == ((), (2, 3))
        cluster.clock.now = start + 5.0 + 0.1  # A's grace is over, on both
        await join(a, "c1")
        await join(b, "c2")
        assert await query(a, "c1", held=(0,)) == ((0, 1), ())
        assert await query(b, "c2") == ((2, 3), ())
        # A proxy restarted over a coordinator that kept the state finds the claims there,
        # and waits for no grace.
        cluster.clock.now += 1.0
        restarted = cluster.registry(existing_groups=("g",))
        await join(restarted, "c0")  # sorts first: its target is 0 and 1, c1's
        await join(restarted, "c2")
        assert await query(restarted, "c0") == ((), (0, 1))
        assert await query(restarted, "c2", held=(2, 3)) == ((3,), ())
        await join(restarted, "c1")
        assert await query(restarted, "c1", held=(1,)) == ((), (2,))  # gives 0 up
        assert await query(restarted, "c0") == ((0,), (1,))  # at once: no grace


@run_async
async def test_a_pop_member_and_a_queue_exclusive_member_on_different_proxies(
    make_coordinator: MakeCoordinator,
) -> None:
    async with proxies(make_coordinator) as cluster:
        a, b = cluster.registry(), cluster.registry()
        await join(a, "exclusive")
        with pytest.raises(FailedPreconditionError, match="in QUEUE_EXCLUSIVE mode"):
            await join(b, "simple", mode=ConsumeMode.POP)
        # The other way round the joiner is accepted; the POP member is refused at its next
        # heartbeat (POP members are kept by their own proxy only).
        await join(b, "pop", group="g2", mode=ConsumeMode.POP)
        await join(a, "late", group="g2")
        with pytest.raises(FailedPreconditionError, match="every member must use one mode"):
            await join(b, "pop", group="g2", mode=ConsumeMode.POP)


@run_async
async def test_a_session_ending_at_one_proxy_keeps_a_member_that_calls_another(
    make_coordinator: MakeCoordinator,
) -> None:
    async with proxies(make_coordinator) as cluster:
        a, b = cluster.registry(), cluster.registry()
        await join(a, "c1")
        assert await query(a, "c1") == ((0, 1, 2, 3), ())
        await join(b, "c1")
        assert await query(b, "c1", held=(0, 1, 2, 3)) == ((0, 1, 2, 3), ())
        # A's session of c1 ends by silence: c1's last call came through B, so it stays.
        assert await a.unregister("c1", "g", if_last_here=True) is False
        assert b.owners("g", "t") == {0: "c1", 1: "c1", 2: "c1", 3: "c1"}
        # A goodbye through any proxy ends it.
        assert await a.unregister("c1", "g") is True
        await join(b, "c2")
        assert await query(b, "c2") == ((0, 1, 2, 3), ())


@run_async
async def test_the_sweep_deletes_only_groups_with_nothing_live(
    make_coordinator: MakeCoordinator,
) -> None:
    async with proxies(make_coordinator) as cluster:
        a, b = cluster.registry(), cluster.registry()
        await join(a, "c1", group="gone")
        await a.query_assignment("c1", "gone", "t", 4)
        await join(a, "c2", group="kept")
        cluster.clock.now += CLAIM + SKEW + 0.1
        await join(a, "c2", group="kept")
        assert await b.sweep() == 1
        coordinator = b.coordinator
        assert {p for p in (await coordinator.list("consumers/")).entries} == {"consumers/kept"}
        # A group deleted behind a proxy's cache starts again from nothing.
        await join(a, "c1", group="gone")
        assert (await a.query_assignment("c1", "gone", "t", 4)).queue_ids == (0, 1, 2, 3)


@run_async
async def test_no_queue_is_consumed_by_two_members_of_proxies_under_random_churn(
    make_coordinator: MakeCoordinator,
) -> None:
    """Members call a random proxy each time, some of them at once; they follow the
    protocol (test_client_registry.py's churn test), and consumers never overlap."""
    rng = random.Random(7)
    async with proxies(make_coordinator) as cluster:
        registries = [cluster.registry(), cluster.registry()]
        rounds = 400 if isinstance(registries[0].coordinator, LocalCoordinator) else 120
        queues = 6
        consuming: dict[str, set[int]] = {}
        draining: dict[str, set[int]] = {}
        claim_end: dict[str, float] = {}
        pool = [f"c{i}" for i in range(6)]

        def check() -> None:
            owners: dict[int, str] = {}
            for c, qs in consuming.items():
                for q in qs | draining[c]:
                    assert q not in owners, f"queue {q} consumed by {owners[q]} and {c}"
                    owners[q] = c

        async def call(client: str) -> None:
            registry = rng.choice(registries)
            sent = cluster.clock.now
            try:
                await join(registry, client, queues=queues)
                held = tuple(sorted(consuming[client] | draining[client]))
                answer = await registry.query_assignment(client, "g", "t", queues, held)
            except FailedPreconditionError:
                consuming[client].clear()
                draining[client].clear()
                return
            claim_end[client] = sent + answer.claim_s
            granted = set(answer.queue_ids)
            draining[client] = consuming[client] - granted
            consuming[client] = granted
            check()

        for _ in range(rounds):
            cluster.clock.now += rng.uniform(0.0, 0.4)
            for c in list(consuming):
                if cluster.clock.now >= claim_end[c]:
                    consuming[c].clear()  # its own claim ran out: it stops
                    draining[c].clear()
            calling: list[str] = []
            for client in rng.sample(pool, 2):  # two members call at once
                action = rng.random()
                if client not in consuming:
                    if action < 0.3:
                        consuming[client], draining[client] = set(), set()
                        claim_end[client] = cluster.clock.now
                        calling.append(client)
                elif action < 0.03:
                    await rng.choice(registries).unregister(client, "g")
                    del consuming[client], draining[client], claim_end[client]
                elif action > 0.06:  # else it stalls
                    calling.append(client)
            await asyncio.gather(*(call(client) for client in calling))
