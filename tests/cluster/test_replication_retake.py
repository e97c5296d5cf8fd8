"""A shard leader taking its registration back after its lease was lost
(broker/replication/election.py, `ShardElection.retake`), on a real etcd: a leader whose key
vanished registers again under its term's epoch only while nobody was elected since, and a
leader that was really replaced never does (its in-sync set writes are refused too)."""

from __future__ import annotations

import asyncio

import pytest

from popmq.broker.replication.election import LeadershipLostError, ShardElection, Term
from popmq.coordination import EtcdCoordinator
from tests.cluster.conftest import unique_cluster
from tests.support.etcd import EtcdServer

pytestmark = pytest.mark.timeout(60)

TTL_S = 5


def _elections(coordinator: EtcdCoordinator) -> tuple[ShardElection, ShardElection]:
    def replica(name: str, port: int) -> ShardElection:
        return ShardElection(
            coordinator, shard="s1", replica=name, address=f"h:{port}", ttl_s=TTL_S
        )

    return replica("r1", 1), replica("r2", 2)


async def _elected(election: ShardElection) -> Term:
    term = await election.campaign(await election.read())
    assert term is not None
    return term


async def _expire(coordinator: EtcdCoordinator, term: Term) -> None:
    """What etcd does to every lease when it resumes after a pause past the TTL."""
    await coordinator.client.lease_revoke(term.lease)


def test_a_leader_whose_key_vanished_registers_again_under_its_epoch(etcd: EtcdServer) -> None:
    async def scenario() -> None:
        async with EtcdCoordinator(etcd.endpoint, cluster=unique_cluster()) as coordinator:
            r1, _ = _elections(coordinator)
            term = await _elected(r1)
            epoch = term.epoch
            await r1.write_isr(term, ["r2"])
            await _expire(coordinator, term)
            assert (await r1.read()).leader == ""

            assert await r1.retake(term)
            state = await r1.read()
            assert (state.leader, state.address, state.epoch) == ("r1", "h:1", epoch)
            assert term.epoch == epoch and term.registration > epoch
            await r1.write_isr(term, ["r2"])  # the term goes on: its writes are accepted
            assert (await r1.read()).isr == ("r2",)

            # Lost again, the key still there: it moves to a new lease, same epoch.
            assert await r1.retake(term)
            assert (await r1.read()).epoch == epoch
            # And again after another expiry.
            await _expire(coordinator, term)
            assert await r1.retake(term)
            assert (await r1.read()).epoch == epoch
            await r1.resign(term)

    asyncio.run(scenario())


def test_a_leader_replaced_while_its_key_was_gone_never_registers_again(
    etcd: EtcdServer,
) -> None:
    async def scenario() -> None:
        async with EtcdCoordinator(etcd.endpoint, cluster=unique_cluster()) as coordinator:
            r1, r2 = _elections(coordinator)
            old = await _elected(r1)
            await r1.write_isr(old, ["r2"])
            await _expire(coordinator, old)
            assert await r1.retake(old)  # once under its term (a new key)
            await _expire(coordinator, old)

            new = await _elected(r2)  # elected while r1's key was gone
            assert new.epoch > old.registration > old.epoch
            assert not await r1.retake(old)
            with pytest.raises(LeadershipLostError):
                await r1.write_isr(old, [])
            assert (await r1.read()).leader == "r2"

            # Nor once the new leader's key is gone too: an election happened since.
            await r2.resign(new)
            assert not await r1.retake(old)
            with pytest.raises(LeadershipLostError):
                await r1.write_isr(old, [])
            state = await r1.read()
            assert (state.leader, state.elected) == ("", "r2")

    asyncio.run(scenario())
