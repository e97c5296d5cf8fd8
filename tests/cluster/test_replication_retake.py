"""A shard leader taking its registration back after its lease was lost
(broker/replication/election.py, `ShardElection.retake`), on a real etcd: a leader whose key
vanished registers again under its term's epoch only while nobody was elected since, and a
leader that was really replaced never does (its in-sync set writes are refused too)."""

from __future__ import annotations

import asyncio

import pytest

from popmq.broker.replication.election import LeadershipLostError, ShardElection, Term
from popmq.coordination import EtcdCoordinator
from popmq.coordination.coordinator import encode_value
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


async def _r1_leading(
    coordinator: EtcdCoordinator,
) -> tuple[ShardElection, ShardElection, Term]:
    """Replicas r1 and r2 of shard s1, r1 elected with r2 in its in-sync set: (r1, r2, the
    term of r1)."""
    r1, r2 = _elections(coordinator)
    term = await _elected(r1)
    await r1.write_isr(term, ["r2"])
    return r1, r2, term


async def _expire(coordinator: EtcdCoordinator, term: Term) -> None:
    """What etcd does to every lease when it resumes after a pause past the TTL."""
    await coordinator.client.lease_revoke(term.lease)


def test_a_leader_whose_key_vanished_registers_again_under_its_epoch(etcd: EtcdServer) -> None:
    async def scenario() -> None:
        async with EtcdCoordinator(etcd.endpoint, cluster=unique_cluster()) as coordinator:
            r1, _, term = await _r1_leading(coordinator)
            epoch = term.epoch
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
            r1, r2, old = await _r1_leading(coordinator)
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


async def _lost_answer(coordinator: EtcdCoordinator, key: str, value: dict[str, object]) -> int:
    """What a write of the term leaves when etcd applies it and its answer is lost (a
    timeout just as etcd resumes): `key` written, the term none the wiser. The
    registration's lease is one nobody keeps alive (its revoke failed too). Returns the
    lease (0 for the in-sync set record, which has none)."""
    lease = 0
    if key.startswith("brokers/"):
        lease = (await coordinator.client.lease_grant(TTL_S)).id
    await coordinator.client.put(coordinator.root + key, encode_value(value), lease=lease)
    return lease


def test_a_registration_whose_answer_was_lost_is_taken_up_by_its_term(etcd: EtcdServer) -> None:
    async def scenario() -> None:
        async with EtcdCoordinator(etcd.endpoint, cluster=unique_cluster()) as coordinator:
            r1, _, term = await _r1_leading(coordinator)
            epoch = term.epoch
            await _expire(coordinator, term)
            orphan = await _lost_answer(
                coordinator, "brokers/s1", {"addr": "h:1", "replica": "r1", "epoch": epoch}
            )

            # The key is present and not at the revision the term knows: the term takes
            # it up (it names its epoch) rather than stepping down with nobody elected.
            assert await r1.retake(term)
            assert term.registration > epoch
            await coordinator.client.lease_revoke(orphan)  # the key is on the term's lease
            state = await r1.read()
            assert (state.leader, state.epoch) == ("r1", epoch)
            await r1.write_isr(term, [])
            assert (await r1.read()).isr == ()
            await r1.resign(term)
            assert (await r1.read()).leader == ""

    asyncio.run(scenario())


def test_an_in_sync_set_whose_answer_was_lost_is_taken_up_by_its_term(etcd: EtcdServer) -> None:
    async def scenario() -> None:
        async with EtcdCoordinator(etcd.endpoint, cluster=unique_cluster()) as coordinator:
            r1, _, term = await _r1_leading(coordinator)
            epoch = term.epoch
            await _lost_answer(
                coordinator, "shards/s1", {"leader": "r1", "isr": [], "epoch": epoch}
            )

            await r1.write_isr(term, ["r2"])  # not refused: the record is the term's own
            assert (await r1.read()).isr == ("r2",)

            await _lost_answer(
                coordinator, "shards/s1", {"leader": "r1", "isr": [], "epoch": epoch}
            )
            await _expire(coordinator, term)
            assert await r1.retake(term)  # the key is gone: registered again under the term
            state = await r1.read()
            assert (state.leader, state.epoch, state.isr) == ("r1", epoch, ())
            await r1.resign(term)

    asyncio.run(scenario())


def test_an_earlier_term_of_the_same_replica_takes_up_nothing_of_a_later_one(
    etcd: EtcdServer,
) -> None:
    async def scenario() -> None:
        async with EtcdCoordinator(etcd.endpoint, cluster=unique_cluster()) as coordinator:
            r1, _, old = await _r1_leading(coordinator)
            await _expire(coordinator, old)
            new = await _elected(r1)  # the same replica again (say, after a restart)
            assert new.epoch > old.epoch
            await r1.write_isr(new, ["r2"])
            await _expire(coordinator, new)
            assert await r1.retake(new)  # a key naming the later term's epoch

            assert not await r1.retake(old)
            with pytest.raises(LeadershipLostError):
                await r1.write_isr(old, [])
            state = await r1.read()
            assert (state.leader, state.epoch, state.isr) == ("r1", new.epoch, ("r2",))
            await r1.resign(new)

    asyncio.run(scenario())
