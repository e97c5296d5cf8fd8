"""The client registry: liveness, assignments and the one-owner-per-queue claim rule.

The registry takes a clock, so these tests move time explicitly instead of sleeping.
"""

from __future__ import annotations

import random

import pytest

from popmq.broker_core.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    ResourceExhaustedError,
)
from popmq.proxy.allocation import Strategy
from popmq.proxy.clients import (
    ClientRegistry,
    ConsumeMode,
    Registration,
    compute_assignment,
)
from popmq.runtime.config import ClientRegistryConfig
from tests.support.run_async import run_async

INTERVAL = 1.0
CLAIM = 3 * INTERVAL


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(
    config: ClientRegistryConfig | None = None, existing_groups: tuple[str, ...] = ()
) -> tuple[ClientRegistry, Clock]:
    clock = Clock()
    registry = ClientRegistry(
        config, broker_name="broker-a", existing_groups=existing_groups, clock=clock
    )
    return registry, clock


async def join(
    registry: ClientRegistry,
    client_id: str,
    *,
    group: str = "g",
    topics: tuple[str, ...] = ("t",),
    strategy: Strategy = Strategy.AVERAGE,
    mode: ConsumeMode = ConsumeMode.QUEUE_EXCLUSIVE,
    room: str = "",
    configured: dict[str, tuple[int, ...]] | None = None,
    queues: int = 8,
) -> float:
    return await registry.heartbeat(
        Registration(
            client_id=client_id,
            group=group,
            topics=topics,
            mode=mode,
            strategy=strategy,
            heartbeat_interval_s=INTERVAL,
            machine_room=room,
            configured_queues=configured or {},
        ),
        dict.fromkeys(topics, queues),
    )


@run_async
async def test_members_get_their_strategys_queues_and_the_claim_time() -> None:
    registry, _ = make()
    for client in ["c1", "c2", "c3"]:
        assert await join(registry, client) == INTERVAL
    got = {c: await registry.query_assignment(c, "g", "t", 8) for c in ["c1", "c2", "c3"]}
    assert {c: a.queue_ids for c, a in got.items()} == {
        "c1": (0, 1, 2),
        "c2": (3, 4, 5),
        "c3": (6, 7),
    }
    assert all(a.pending_queue_ids == () and a.claim_s == CLAIM for a in got.values())
    assert len({a.epoch for a in got.values()}) == 1
    assert registry.owners("g", "t") == {
        0: "c1", 1: "c1", 2: "c1", 3: "c2", 4: "c2", 5: "c2", 6: "c3", 7: "c3",
    }  # fmt: skip


@run_async
async def test_a_joiner_waits_until_the_old_owner_releases_the_queue() -> None:
    registry, clock = make()
    await join(registry, "c1")
    first = await registry.query_assignment("c1", "g", "t", 4)
    assert first.queue_ids == (0, 1, 2, 3)
    await join(registry, "c2")
    # c2's target is 2 and 3, but c1 still holds them.
    waiting = await registry.query_assignment("c2", "g", "t", 4)
    assert waiting.queue_ids == ()
    assert waiting.pending_queue_ids == (2, 3)
    assert waiting.epoch == first.epoch + 1
    # c1 learns its new assignment while it still consumes 2 and 3: their claims stay.
    clock.now += 0.5
    shrunk = await registry.query_assignment("c1", "g", "t", 4, held=[0, 1, 2, 3])
    assert shrunk.queue_ids == (0, 1)
    assert registry.owners("g", "t") == {0: "c1", 1: "c1", 2: "c1", 3: "c1"}
    assert (await registry.query_assignment("c2", "g", "t", 4)).pending_queue_ids == (2, 3)
    # c1 finished them and says so: c2 gets them.
    await registry.query_assignment("c1", "g", "t", 4, held=[0, 1])
    assert registry.owners("g", "t") == {0: "c1", 1: "c1"}
    granted = await registry.query_assignment("c2", "g", "t", 4)
    assert granted.queue_ids == (2, 3)
    assert granted.pending_queue_ids == ()
    assert registry.owners("g", "t") == {0: "c1", 1: "c1", 2: "c2", 3: "c2"}


@run_async
async def test_a_silent_client_is_gone_after_three_intervals_and_its_queues_move() -> None:
    registry, clock = make()
    await join(registry, "c1")
    await join(registry, "c2")
    await registry.query_assignment("c1", "g", "t", 4)
    await registry.query_assignment("c2", "g", "t", 4)
    epoch = (await registry.query_assignment("c1", "g", "t", 4, held=[0, 1])).epoch
    # c2 goes silent. Within three intervals it is still a member holding its claims.
    clock.now += CLAIM - 0.1
    await join(registry, "c1")
    still = await registry.query_assignment("c1", "g", "t", 4, held=[0, 1])
    assert still.queue_ids == (0, 1)
    assert [c.client_id for c in await registry.clients("g")] == ["c1", "c2"]
    clock.now += 0.2
    moved = await registry.query_assignment("c1", "g", "t", 4, held=[0, 1])
    assert moved.queue_ids == (0, 1, 2, 3)
    assert moved.epoch == epoch + 1
    assert [c.client_id for c in await registry.clients("g")] == ["c1"]
    with pytest.raises(FailedPreconditionError, match="not registered"):
        await registry.query_assignment("c2", "g", "t", 4)


@run_async
async def test_a_query_keeps_the_client_alive_and_renews_only_held_claims() -> None:
    registry, clock = make()
    await join(registry, "c1")
    assert (await registry.query_assignment("c1", "g", "t", 2)).queue_ids == (0, 1)
    for _ in range(10):
        clock.now += CLAIM * 0.9
        assert (await registry.query_assignment("c1", "g", "t", 2, held=[0, 1])).queue_ids == (0, 1)
    assert registry.owners("g", "t") == {0: "c1", 1: "c1"}


@run_async
async def test_a_terminated_client_releases_its_queues_at_once() -> None:
    registry, _ = make()
    await join(registry, "c1")
    await join(registry, "c2")
    await registry.query_assignment("c1", "g", "t", 4)
    await registry.query_assignment("c2", "g", "t", 4)
    assert await registry.unregister("c2", "g") is True
    assert await registry.unregister("c2", "g") is False
    assert (await registry.query_assignment("c1", "g", "t", 4, held=[0, 1])).queue_ids == (
        0,
        1,
        2,
        3,
    )


@run_async
async def test_a_client_that_lost_its_claim_is_not_granted_a_queue_now_owned_by_another() -> None:
    registry, clock = make()
    await join(registry, "c1")
    await registry.query_assignment("c1", "g", "t", 2)
    clock.now += CLAIM + 0.1  # c1 went silent and is gone
    await join(registry, "c2")
    assert (await registry.query_assignment("c2", "g", "t", 2)).queue_ids == (0, 1)
    # c1 comes back still claiming queue 0: it must stop, c2 keeps it.
    await join(registry, "c1")
    back = await registry.query_assignment("c1", "g", "t", 2, held=[0])
    assert back.queue_ids == ()
    assert back.pending_queue_ids == (0,)
    assert registry.owners("g", "t") == {0: "c2", 1: "c2"}


@run_async
async def test_after_a_restart_held_queues_are_kept_and_unreported_ones_wait_for_the_grace() -> (
    None
):
    config = ClientRegistryConfig(restart_grace_s=5.0)
    registry, clock = make(config, existing_groups=("g",))
    await join(registry, "c1")
    await join(registry, "c2")
    # c1 held 0 and 3 before the restart; its target is now 0 and 1.
    first = await registry.query_assignment("c1", "g", "t", 4, held=[0, 3])
    assert first.queue_ids == (0,)
    assert first.pending_queue_ids == (1,)
    # c2's target 2, 3: 3 is still c1's, 2 waits for the grace.
    assert (await registry.query_assignment("c2", "g", "t", 4)).pending_queue_ids == (2, 3)
    clock.now += 2.5
    assert (await registry.query_assignment("c1", "g", "t", 4, held=[0, 3])).pending_queue_ids == (
        1,
    )
    assert (await registry.query_assignment("c2", "g", "t", 4)).pending_queue_ids == (2, 3)
    clock.now += 2.5  # the grace is over
    await registry.query_assignment("c1", "g", "t", 4, held=[0])
    assert (await registry.query_assignment("c2", "g", "t", 4)).queue_ids == (2, 3)
    assert (await registry.query_assignment("c1", "g", "t", 4, held=[0])).queue_ids == (0, 1)
    # A group created after the start has nothing to wait for.
    fresh, _ = make(config, existing_groups=("g",))
    await join(fresh, "c1", group="new")
    assert (await fresh.query_assignment("c1", "new", "t", 2)).queue_ids == (0, 1)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_group_members", 0, "max_group_members must be at least 1"),
        ("clock_skew_s", -1.0, "clock_skew_s must be within 0..60"),
        ("sweep_interval_s", -1.0, "sweep_interval_s must be >= 0"),
    ],
)
def test_the_config_refuses_bad_cluster_settings(field: str, value: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClientRegistryConfig(**{field: value})  # type: ignore[arg-type]


def test_the_default_grace_covers_the_longest_claim_a_member_may_hold() -> None:
    assert ClientRegistryConfig().grace_s == 3 * 30.0
    assert ClientRegistryConfig(restart_grace_s=0).grace_s == 0


@run_async
async def test_members_must_agree_on_mode_and_strategy() -> None:
    registry, clock = make()
    await join(registry, "c1", strategy=Strategy.AVERAGE)
    with pytest.raises(FailedPreconditionError, match=r"with AVERAGE .*not CONSISTENT_HASH"):
        await join(registry, "c2", strategy=Strategy.CONSISTENT_HASH)
    with pytest.raises(FailedPreconditionError, match="QUEUE_EXCLUSIVE mode"):
        await join(registry, "c2", mode=ConsumeMode.POP)
    # The member itself may change strategy; another topic or group is independent.
    await join(registry, "c1", strategy=Strategy.AVERAGE_BY_CIRCLE)
    await join(registry, "c2", topics=("other",), strategy=Strategy.CONSISTENT_HASH)
    await join(registry, "c2", group="g2", mode=ConsumeMode.POP)
    # Once the old members are gone, a new strategy is fine.
    clock.now += CLAIM + 0.1
    await join(registry, "c3", strategy=Strategy.CONSISTENT_HASH)


@run_async
async def test_pop_mode_clients_register_but_get_no_assignment() -> None:
    registry, _ = make()
    await join(registry, "p1", mode=ConsumeMode.POP)
    assert [c.client_id for c in await registry.clients("g")] == ["p1"]
    with pytest.raises(FailedPreconditionError, match="only for QUEUE_EXCLUSIVE"):
        await registry.query_assignment("p1", "g", "t", 8)


@run_async
async def test_query_checks_registration_and_subscription() -> None:
    registry, _ = make()
    with pytest.raises(FailedPreconditionError, match="send Heartbeat first"):
        await registry.query_assignment("c1", "g", "t", 8)
    await join(registry, "c1")
    with pytest.raises(FailedPreconditionError, match="did not subscribe to topic 'u'"):
        await registry.query_assignment("c1", "g", "u", 8)
    with pytest.raises(InvalidArgumentError, match="queue id -1"):
        await registry.query_assignment("c1", "g", "t", 8, held=[-1])
    with pytest.raises(InvalidArgumentError, match="repeats queue id 2"):
        await registry.query_assignment("c1", "g", "t", 8, held=[2, 2])


@pytest.mark.parametrize(
    ("registration", "message"),
    [
        (Registration(client_id="", group="g", topics=("t",)), "client_id is empty"),
        (Registration(client_id="a\nb", group="g", topics=("t",)), "control characters"),
        (Registration(client_id="x" * 256, group="g", topics=("t",)), "at most 255"),
        (Registration(client_id="c", group="", topics=("t",)), "group name is empty"),
        (Registration(client_id="c", group="g", topics=()), "at least one topic"),
        (Registration(client_id="c", group="g", topics=("t", "t")), "repeat a topic"),
        (
            Registration(client_id="c", group="g", topics=("t",), heartbeat_interval_s=0.01),
            "heartbeat_interval 0.01s is below the minimum 0.05s",
        ),
        (
            Registration(client_id="c", group="g", topics=("t",), heartbeat_interval_s=31),
            "heartbeat_interval 31s is above the maximum 30s",
        ),
        (
            Registration(
                client_id="c", group="g", topics=("t",), strategy=Strategy.BY_MACHINE_ROOM
            ),
            "needs the client's machine_room",
        ),
        (
            Registration(client_id="c", group="g", topics=("t",), machine_room="room 1"),
            "machine_room 'room 1' is invalid",
        ),
        (
            Registration(
                client_id="c",
                group="g",
                topics=("t",),
                strategy=Strategy.BY_CONFIG,
                configured_queues={"t": (8,)},
            ),
            r"configured_queues\['t'\] has queue id 8: the topic's queues are 0..7",
        ),
        (
            Registration(
                client_id="c",
                group="g",
                topics=("t",),
                strategy=Strategy.BY_CONFIG,
                configured_queues={"u": (1,)},
            ),
            "names topic 'u', which is not subscribed",
        ),
        (
            Registration(client_id="c", group="g", topics=("t",), configured_queues={"t": (1,)}),
            "only for queue-exclusive clients with strategy BY_CONFIG",
        ),
    ],
)
@run_async
async def test_heartbeat_rejects_bad_registrations(
    registration: Registration, message: str
) -> None:
    registry, _ = make()
    with pytest.raises(InvalidArgumentError, match=message):
        await registry.heartbeat(registration, dict.fromkeys(registration.topics, 8))


@run_async
async def test_registrations_beyond_the_limit_are_refused() -> None:
    registry, clock = make(ClientRegistryConfig(max_clients=2))
    await join(registry, "c1")
    await join(registry, "c2", group="g2")
    await join(registry, "c1")  # a refresh is not a new registration
    with pytest.raises(ResourceExhaustedError, match="maximum is 2"):
        await join(registry, "c3")
    clock.now += CLAIM + 0.1
    await join(registry, "c3")  # the silent ones were dropped


@run_async
async def test_by_config_gives_an_overlapping_queue_to_the_first_member() -> None:
    registry, _ = make()
    await join(registry, "c2", strategy=Strategy.BY_CONFIG, configured={"t": (1, 2)})
    await join(registry, "c1", strategy=Strategy.BY_CONFIG, configured={"t": (5, 1)})
    await join(registry, "c3", strategy=Strategy.BY_CONFIG)
    got = {
        c: (await registry.query_assignment(c, "g", "t", 8)).queue_ids for c in ["c1", "c2", "c3"]
    }
    assert got == {"c1": (5, 1), "c2": (2,), "c3": ()}


@run_async
async def test_by_machine_room_prefers_members_in_the_servers_room() -> None:
    registry, _ = make(ClientRegistryConfig(machine_room="hz"))
    await join(registry, "a", strategy=Strategy.BY_MACHINE_ROOM, room="sh")
    await join(registry, "b", strategy=Strategy.BY_MACHINE_ROOM, room="hz")
    await join(registry, "c", strategy=Strategy.BY_MACHINE_ROOM, room="hz")
    got = {c: (await registry.query_assignment(c, "g", "t", 4)).queue_ids for c in "abc"}
    assert got == {"a": (), "b": (0, 1), "c": (2, 3)}
    # Nobody left in hz: the far member takes over.
    await registry.unregister("b", "g")
    await registry.unregister("c", "g")
    assert (await registry.query_assignment("a", "g", "t", 4)).queue_ids == (0, 1, 2, 3)
    # A server without a room is near nobody: members share its queues.
    roomless, _ = make()
    await join(roomless, "a", strategy=Strategy.BY_MACHINE_ROOM, room="sh")
    await join(roomless, "b", strategy=Strategy.BY_MACHINE_ROOM, room="hz")
    assert (await roomless.query_assignment("a", "g", "t", 4)).queue_ids == (0, 1)
    assert (await roomless.query_assignment("b", "g", "t", 4)).queue_ids == (2, 3)


@run_async
async def test_a_topic_recreated_with_fewer_queues_drops_claims_beyond_it() -> None:
    registry, _ = make()
    await join(registry, "c1")
    await registry.query_assignment("c1", "g", "t", 8)
    smaller = await registry.query_assignment("c1", "g", "t", 2, held=list(range(8)))
    assert smaller.queue_ids == (0, 1)
    assert registry.owners("g", "t") == {0: "c1", 1: "c1"}


def test_compute_assignment_covers_every_queue_once_for_each_strategy() -> None:
    members = [
        Registration(client_id=f"c{i}", group="g", topics=("t",), machine_room="r")
        for i in range(5)
    ]
    for strategy in [
        Strategy.AVERAGE,
        Strategy.AVERAGE_BY_CIRCLE,
        Strategy.CONSISTENT_HASH,
        Strategy.BY_MACHINE_ROOM,
    ]:
        for queues in [0, 1, 3, 5, 16]:
            target = compute_assignment(
                strategy, "t", queues, members, broker_name="broker-a", machine_room="r"
            )
            owned = sorted(q for qs in target.values() for q in qs)
            assert owned == list(range(queues)), (strategy, queues)


@run_async
async def test_no_queue_is_consumed_by_two_members_under_random_churn() -> None:
    """Simulated members follow the protocol; the consumers of a queue never overlap.

    A member consumes what it was granted, gives up what it was not (reporting it as held
    until the next call, as a real member finishing its work would), and stops everything
    when a claim it measured from before its request ran out without a successful call.
    """
    rng = random.Random(3)
    registry, clock = make()
    queues = 6
    consuming: dict[str, set[int]] = {}
    claim_end: dict[str, float] = {}
    draining: dict[str, set[int]] = {}
    pool = [f"c{i}" for i in range(8)]
    for _ in range(4000):
        clock.now += rng.uniform(0.0, 0.4)
        client = rng.choice(pool)
        for c in list(consuming):
            if clock.now >= claim_end[c]:
                consuming[c].clear()  # the member's own claim ran out: it stops
                draining[c].clear()
        action = rng.random()
        if client not in consuming:
            if action < 0.3:
                await join(registry, client, queues=queues)
                consuming[client] = set()
                draining[client] = set()
                claim_end[client] = clock.now
            continue
        if action < 0.02:
            await registry.unregister(client, "g")
            del consuming[client], draining[client], claim_end[client]
            continue
        if action < 0.05:
            continue  # this member stalls for a while (maybe long enough to be dropped)
        sent = clock.now
        try:
            await join(registry, client, queues=queues)
            held = sorted(consuming[client] | draining[client])
            answer = await registry.query_assignment(client, "g", "t", queues, held=held)
        except FailedPreconditionError:
            consuming[client].clear()
            draining[client].clear()
            continue
        claim_end[client] = sent + answer.claim_s
        granted = set(answer.queue_ids)
        draining[client] = consuming[client] - granted
        consuming[client] = granted
        owners: dict[int, str] = {}
        for c, qs in consuming.items():
            for q in qs | draining[c]:
                assert q not in owners, f"queue {q} consumed by {owners[q]} and {c}"
                owners[q] = c


@run_async
async def test_consistent_hash_places_queues_by_the_broker_name_the_registry_was_given() -> None:
    """The registry hashes `MessageQueue [topic=t, brokerName=<the broker's name>, ...]`, the
    name routes and handles carry, so a RocketMQ broker of the same name places alike."""
    members = [
        Registration(
            client_id=f"c{n}",
            group="g",
            topics=("t",),
            mode=ConsumeMode.QUEUE_EXCLUSIVE,
            strategy=Strategy.CONSISTENT_HASH,
            heartbeat_interval_s=INTERVAL,
        )
        for n in range(3)
    ]
    placements = {
        name: compute_assignment(Strategy.CONSISTENT_HASH, "t", 16, members, broker_name=name)
        for name in ("broker-a", "shard-7")
    }
    assert placements["broker-a"] != placements["shard-7"]  # the name is hashed
    for name, expected in placements.items():
        registry = ClientRegistry(broker_name=name, clock=Clock())
        for member in members:
            await join(registry, member.client_id, strategy=Strategy.CONSISTENT_HASH, queues=16)
        assert registry.broker_name == name
        got = {
            m.client_id: await registry.query_assignment(m.client_id, "g", "t", 16) for m in members
        }
        assert {c: a.queue_ids + a.pending_queue_ids for c, a in got.items()} == expected
