"""RocketMQ 5 consumers in the client registry: FIFO queue claims without reported holdings.

Official clients only call QueryAssignment (every 5 s) and ReceiveMessage; these tests drive
ConsumerAssignments the way they do, over a registry with a test clock instead of sleeping.
"""

from __future__ import annotations

import pytest

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq.broker_core.errors import FailedPreconditionError
from popmq.proxy.clients import ClientRegistry
from popmq.proxy.rocketmq.assignments import ConsumerAssignments
from popmq.proxy.rocketmq.codes import ProtocolError
from popmq.runtime.config import ClientRegistryConfig
from tests.support.run_async import run_async

INTERVAL = 10.0  # the registry's default: RocketMQ 5 clients heartbeat every 10 s
CLAIM = 3 * INTERVAL


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(existing_groups: tuple[str, ...] = ()) -> tuple[ConsumerAssignments, Clock]:
    clock = Clock()
    registry = ClientRegistry(
        ClientRegistryConfig(), broker_name="broker-a", existing_groups=existing_groups, clock=clock
    )
    return ConsumerAssignments(registry, clock=clock), clock


async def join(assignments: ConsumerAssignments, client_id: str, *, exclusive: bool = True) -> None:
    await assignments.register(client_id, "fifo", {"t": 4}, exclusive=exclusive)


async def query(assignments: ConsumerAssignments, client_id: str) -> tuple[int, ...]:
    return await assignments.query(client_id, "fifo", "t", 4)


@run_async
async def test_a_joiner_gets_its_share_once_the_old_owner_has_queried() -> None:
    assignments, _ = make()
    await join(assignments, "a")
    assert await query(assignments, "a") == (0, 1, 2, 3)
    await join(assignments, "b")
    assert await query(assignments, "b") == ()  # a still holds them all
    assert await query(assignments, "a") == (0, 1)  # a's query gives 2 and 3 up at once
    assert await query(assignments, "b") == (2, 3)
    assert assignments.registry.owners("fifo", "t") == {0: "a", 1: "a", 2: "b", 3: "b"}
    # Steady state: both keep their queues query after query.
    for _ in range(3):
        assert await query(assignments, "a") == (0, 1)
        assert await query(assignments, "b") == (2, 3)


@run_async
async def test_a_receive_is_allowed_only_on_a_held_queue() -> None:
    assignments, clock = make()
    await join(assignments, "a")
    await join(assignments, "b")
    with pytest.raises(ProtocolError, match=r"\(no client does\)"):
        assignments.check_receive("a", "fifo", "t", 0)  # before its first query
    await query(assignments, "a")
    await query(assignments, "b")
    assert assignments.check_receive("a", "fifo", "t", 0) == CLAIM
    clock.now += 4
    assert assignments.check_receive("a", "fifo", "t", 1) == CLAIM - 4
    with pytest.raises(ProtocolError) as refused:
        assignments.check_receive("a", "fifo", "t", 2)
    assert refused.value.rocketmq_code == pb.FORBIDDEN
    assert "(client 'b' does)" in str(refused.value)


@run_async
async def test_a_client_that_stops_calling_loses_its_queues_after_three_intervals() -> None:
    assignments, clock = make()
    await join(assignments, "a")
    await join(assignments, "b")
    await query(assignments, "a")
    await query(assignments, "b")
    for _ in range(5):  # b keeps querying every 5 s (official clients do), a is silent
        clock.now += 5
        assert await query(assignments, "b") == (2, 3)
    assert assignments.check_receive("a", "fifo", "t", 0) == CLAIM - 25  # a's wait ends then
    clock.now += 5.1
    assert await query(assignments, "b") == (0, 1, 2, 3)
    with pytest.raises(ProtocolError):
        assignments.check_receive("a", "fifo", "t", 0)
    assert [c.client_id for c in await assignments.registry.clients("fifo")] == ["b"]


@run_async
async def test_a_queue_given_up_ends_the_receives_waiting_on_it() -> None:
    assignments, _ = make()
    await join(assignments, "a")
    await query(assignments, "a")
    with (
        assignments.receiving("a", "fifo", "t", 0) as kept,
        assignments.receiving("a", "fifo", "t", 3) as moved,
    ):
        await join(assignments, "b")
        await query(assignments, "a")
        assert moved.done() and not kept.done()
        await assignments.end_client("a")
        assert kept.done()


@run_async
async def test_a_terminated_client_releases_its_queues_at_once() -> None:
    assignments, _ = make()
    await join(assignments, "a")
    await join(assignments, "b")
    await query(assignments, "a")
    await query(assignments, "b")
    assert await assignments.end_client("a") == 1
    assert await assignments.end_client("a") == 0
    assert await query(assignments, "b") == (0, 1, 2, 3)
    with pytest.raises(FailedPreconditionError, match="not registered"):
        await query(assignments, "a")


@run_async
async def test_after_a_restart_a_client_still_receiving_from_a_queue_gets_it_back() -> None:
    # A restarted registry knows no claims and, for groups that existed, grants no queue
    # nobody reports during its grace. An official client reports by receiving.
    assignments, _ = make(existing_groups=("fifo",))
    await join(assignments, "a")
    await join(assignments, "b")
    for queue_id in (0, 1):
        with pytest.raises(ProtocolError):
            assignments.check_receive("a", "fifo", "t", queue_id)
    assert await query(assignments, "a") == (0, 1)
    assert await query(assignments, "b") == ()  # b has not received yet: its queues wait
    with pytest.raises(ProtocolError):
        assignments.check_receive("b", "fifo", "t", 2)
    assert await query(assignments, "b") == (2,)


@run_async
async def test_a_reported_queue_outside_the_target_is_not_kept() -> None:
    assignments, _ = make()
    await join(assignments, "a")
    await join(assignments, "b")
    with pytest.raises(ProtocolError):
        assignments.check_receive("a", "fifo", "t", 3)  # b's queue by the strategy
    assert await query(assignments, "a") == (0, 1)
    assert assignments.registry.owners("fifo", "t") == {0: "a", 1: "a"}


@run_async
async def test_pop_mode_members_are_registered_but_get_no_queues() -> None:
    assignments, _ = make()
    await join(assignments, "simple", exclusive=False)
    assert [c.client_id for c in await assignments.registry.clients("fifo")] == ["simple"]
    with pytest.raises(FailedPreconditionError, match="POP mode"):
        await query(assignments, "simple")
    with pytest.raises(FailedPreconditionError, match="every member must use one mode"):
        await join(assignments, "push")
