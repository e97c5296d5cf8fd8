"""Fencing (broker/fencing.py): the write fence's refusals, the fencing task of a standalone
broker (writes go on while its etcd session is lost, stop while another member holds its
name), and a shard leader's lease as its own clock sees it. No server, no etcd: a stand-in
session and lease keeper."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from popmq.broker.fencing import WriteFence, leader_lease, start_fencing
from popmq.broker_core import NotLeaderError, UnavailableError
from popmq.coordination.coordinator import Session
from popmq.coordination.etcd_streams import LeaseKeeper


def test_writes_go_ahead_until_fenced_and_again_once_unfenced() -> None:
    writes = WriteFence("b1")
    writes.check()
    writes.fence("its etcd registration was lost (lease expired)")
    with pytest.raises(UnavailableError, match="lease expired") as refused:
        writes.check()
    assert refused.value.retriable
    assert "broker 'b1' refuses writes" in str(refused.value)
    writes.unfence()
    writes.check()


def test_a_following_replica_refuses_writes_as_not_leader_before_any_fence() -> None:
    writes = WriteFence("shard-a")
    writes.fence("it no longer leads")
    writes.following = "follower at epoch 7"
    with pytest.raises(NotLeaderError, match="follower at epoch 7"):
        writes.check()
    writes.following = None
    with pytest.raises(UnavailableError, match="it no longer leads"):
        writes.check()


class StandInSession:
    """Registered with epoch 1; `lose()`, `rivalled_by()` and `register()` change it and wake
    `wait_changed()`, as a coordinator's session does."""

    def __init__(self) -> None:
        self.epoch = 1
        self.rival: str | None = None
        self._changed = asyncio.Event()

    @property
    def alive(self) -> bool:
        return self.epoch != 0

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def lose(self) -> None:
        self.epoch = 0
        self._notify()

    def rivalled_by(self, rival: str) -> None:
        self.rival = rival
        self._notify()

    def register(self, epoch: int) -> None:
        self.epoch = epoch
        self.rival = None
        self._notify()

    async def wait_changed(self) -> None:
        await self._changed.wait()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_standalone_broker_takes_writes_while_its_session_is_lost() -> None:
    """etcd down or unreachable past the TTL: nobody else can serve the broker's queues, so
    it keeps writing while its session registers again."""

    async def scenario() -> None:
        session = StandInSession()
        writes = WriteFence("b1")
        failures: list[str] = []
        task = start_fencing(cast(Session, session), writes, failed=failures.append)
        await _settle()
        assert writes.reason is None
        session.lose()
        await _settle()
        writes.check()  # lost, and still writing
        session.register(1)  # its key outlived the outage: taken over, same epoch
        await _settle()
        writes.check()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert failures == []  # cancelled by its owner: nothing to report

    asyncio.run(scenario())


def test_a_standalone_broker_refuses_writes_while_another_member_holds_its_name() -> None:
    async def scenario() -> None:
        session = StandInSession()
        writes = WriteFence("b1")
        failures: list[str] = []
        task = start_fencing(cast(Session, session), writes, failed=failures.append)
        session.lose()
        await _settle()
        writes.check()
        session.rivalled_by("epoch 42, at 10.0.0.9:10911")
        await _settle()
        with pytest.raises(UnavailableError, match=r"another process holds its etcd") as refused:
            writes.check()
        assert "epoch 42, at 10.0.0.9:10911" in str(refused.value)
        assert refused.value.retriable
        session.register(57)  # the other one went away: the name is this broker's again
        await _settle()
        writes.check()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert failures == []

    asyncio.run(scenario())


def test_a_fencing_task_that_dies_fences_for_good_and_reports_why() -> None:
    class ClosedSession:
        rival = None
        alive = True

        async def wait_changed(self) -> None:
            raise RuntimeError("keepalive stopped")

    async def scenario() -> None:
        writes = WriteFence("b1")
        failures: list[str] = []
        task = start_fencing(cast(Session, ClosedSession()), writes, failed=failures.append)
        await asyncio.gather(task, return_exceptions=True)
        await _settle()
        assert failures == ["its fencing loop died (RuntimeError('keepalive stopped'))"]
        with pytest.raises(UnavailableError, match="fencing loop died"):
            writes.check()

    asyncio.run(scenario())


def test_a_leader_lease_fences_once_lost_or_past_its_expiry_by_the_local_clock() -> None:
    class StandInKeeper:
        lost = False
        expires_at = 0.0

    async def scenario() -> None:
        keeper: Any = StandInKeeper()
        now = asyncio.get_running_loop().time()
        keeper.expires_at = now + 60
        fenced = leader_lease(cast(LeaseKeeper, keeper))
        assert fenced() is None
        keeper.expires_at = now - 1  # a paused process waking after its TTL
        assert fenced() == "its leader lease lapsed by its own clock"
        keeper.expires_at = now + 60
        keeper.lost = True
        assert fenced() == "its leader lease was lost"

    asyncio.run(scenario())


def test_a_leader_whose_lease_lapsed_writes_while_its_followers_promises_run() -> None:
    class StandInKeeper:
        lost = True
        expires_at = 0.0

    async def scenario() -> None:
        promises: list[str | None] = [None]
        fenced = leader_lease(cast(LeaseKeeper, StandInKeeper()), lambda now: promises[0])
        assert fenced() is None
        promises[0] = "in-sync follower r2's lease promise ran out"
        assert fenced() == (
            "its leader lease was lost, and in-sync follower r2's lease promise ran out"
        )

    asyncio.run(scenario())


def test_a_broker_reconciling_its_crash_tail_answers_lookups_of_other_messages_only() -> None:
    writes = WriteFence("b1")
    orders = [("ID-1", "order-1"), ("ID-2", "")]
    writes.check_lookup("t", orders)  # not fenced: answered
    writes.fence("it is checking its crash tail", reconciling=True)
    with pytest.raises(UnavailableError, match="checking its crash tail"):
        writes.check_lookup("t", orders)  # its tail is not selected yet
    writes.reconciles(frozenset({("t", "order-1"), ("t", "ID-1"), ("t", "ID-2")}))
    for sent in ([("X", "order-1")], [("ID-1", "")], [("ID-2", "")], [("ok", ""), ("ID-2", "")]):
        with pytest.raises(UnavailableError, match="which holds a send of") as refused:
            writes.check_lookup("t", sent)
        assert refused.value.retriable
    writes.check_lookup("t", [("ID-3", ""), ("ID-4", "order-2")])  # other messages: answered
    writes.check_lookup("other", [("ID-1", "order-1")])  # the same ids of another topic
    with pytest.raises(UnavailableError, match="refuses writes"):
        writes.check()  # writes stay fenced
    writes.reconciles(None)  # done: refused until unfenced
    with pytest.raises(UnavailableError, match="refuses writes"):
        writes.check_lookup("t", [("ID-3", "")])
    writes.unfence()
    writes.check_lookup("t", orders)


def test_another_fence_or_following_ends_the_lookups_a_reconciliation_answers() -> None:
    writes = WriteFence("s1")
    writes.fence("it is taking over the shard", reconciling=True)
    writes.reconciles(frozenset({("t", "ID-1")}))
    writes.fence("it no longer leads")  # another reason replaces the reconciliation's
    writes.reconciles(frozenset({("t", "ID-1")}))  # ignored: not fenced to reconcile
    with pytest.raises(UnavailableError, match="no longer leads"):
        writes.check_lookup("t", [("ID-2", "")])
    writes.fence("it is taking over the shard", reconciling=True)
    writes.reconciles(frozenset({("t", "ID-1")}))
    writes.following = "follower at epoch 9"
    with pytest.raises(NotLeaderError):
        writes.check_lookup("t", [("ID-2", "")])
