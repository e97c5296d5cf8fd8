"""The total-queue checker (tests/chaos/checker.py) on replicated shards, CI-sized.

etcd + 2 shards x 2 `popmq broker --shard` replicas + 2 proxies; producers and consumers
through both proxies while the nemesis fails over a random shard's leader six times: three
kill -9s (the killed replica restarts and rejoins as a follower), one SIGSTOP past the 3 s
lease, then SIGCONT (the woken leader must store nothing and follow), and two one-way
partitions of s1's leader from etcd, one each way (it must acknowledge no send begun after
another replica leads, and rejoin in sync after the heal). Where network namespaces or tc
drops cannot be made (not root, no `tc`), the partitions are replaced by two more kill -9s
and the reason is printed. Then everything is drained, stopped with SIGTERM, started again
and checked for redeliveries. About two and a half minutes; run with ``-s`` for the summary
with the failover timeline. The full-sized runs (10 s lease) are by hand: see the checker's
docstring.

The first tests feed the failover evaluation a made-up history, so that what the long run
asserts is known to be able to fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.checker import CheckConfig, CheckResult, History, SendRecord, check, evaluate
from tests.chaos.replicated import (
    LEADER_CUT_FROM_ETCD,
    LEADER_CUT_TO_ETCD,
    LEADER_CUT_TO_PEERS,
    LEADER_KILL,
    LEADER_PARTITIONS,
    LEADER_PAUSE,
    DirectSend,
    Failover,
)
from tests.support.netns import one_way_unavailable


def test_the_checker_flags_a_woken_leader_that_stored_and_a_shard_that_never_came_back() -> None:
    history = History()
    # Global queues 0, 1 are on s1 and 2, 3 on s2; s1 fails over from t=100 to t=110.
    history.send_log += [
        SendRecord(99.0, 100.5, 0),  # begun before the kill: not the shard's first send
        SendRecord(100.2, 100.3, 2),
        SendRecord(101.0, 104.0, None),
        SendRecord(103.0, 103.1, 1),
        SendRecord(112.0, 112.1, 3),
    ]
    paused = Failover(
        number=1,
        kind=LEADER_PAUSE,
        shard="s1",
        old_leader="s1-r1",
        old_epoch=10,
        began=100.0,
        new_leader="s1-r2",
        new_epoch=20,
        takes_sends_s=2.5,
        proxy_send_s={"p1": 3.0, "p2": None},
        ended_s=10.0,
        woken_stored=2,
    )
    killed = Failover(
        number=2,
        kind=LEADER_KILL,
        shard="s2",
        old_leader="s2-r1",
        old_epoch=30,
        began=111.0,
        new_leader="s2-r2",
        new_epoch=40,
        takes_sends_s=None,
        proxy_send_s={"p1": 1.0, "p2": 1.5},
        ended_s=5.0,
    )
    result = CheckResult(config=CheckConfig(replicated=True, pauses=1), seed=0, data_dir="")
    result.failovers = [paused, killed]
    result.shard_of_queue = {0: "s1", 1: "s1", 2: "s2", 3: "s2"}
    evaluate(history, result)

    assert (paused.sends, paused.acknowledged, paused.max_send_latency_s) == (3, 2, 3.0)
    assert paused.traffic_send_s == pytest.approx(3.1)
    assert paused.resumed_s is None and killed.resumed_s == 1.5
    assert killed.traffic_send_s == pytest.approx(1.1)
    assert result.send_calls == 5 and result.send_calls_acknowledged == 4
    assert result.longest_ack_gap_s == pytest.approx(9.0)  # 103.1 .. 112.1
    result.drained, result.clean_stop_exit_code = True, 0  # the rest of the run went well
    assert result.violations == [
        "failover #1: the woken old leader s1-r1 stored 2 sends",
        "failover #1: no send reached shard s1 through p2 again",
        "failover #2: shard s2 took no send again",
    ]
    summary = result.summary()
    assert "#1 leader SIGSTOP s1: s1-r1 -> s1-r2 (epoch 10 -> 20)" in summary
    assert "through every proxy s: mean 1.500 max 1.500 [1.50] (1 never)" in summary


def test_the_checker_flags_a_cut_off_leader_acknowledging_once_another_leads() -> None:
    # s1-r1 is cut from etcd at t=100; s1-r2 is seen registered as leader at t=104.
    cut = Failover(
        number=1,
        kind=LEADER_CUT_FROM_ETCD,
        shard="s1",
        old_leader="s1-r1",
        old_epoch=10,
        began=100.0,
        new_leader="s1-r2",
        new_epoch=20,
        leader_s=4.0,
        back_s=7.0,
        in_sync_s=None,
        takes_sends_s=8.0,
        proxy_send_s={"p1": 8.5},
        ended_s=9.0,
        direct=[
            DirectSend("x1-00000", 100.1, 100.2, 0, 7),  # acknowledged before: fine
            DirectSend("x1-00001", 103.0, 104.5, None, error="UNAVAILABLE"),
            DirectSend("x1-00002", 104.1, 104.2, 1, 3),  # after the new leader: two leaders
        ],
    )
    result = CheckResult(
        config=CheckConfig(replicated=True, leader_partitions=1), seed=0, data_dir=""
    )
    result.failovers = [cut]
    history = History()
    history.sending(["x1-00000", "x1-00002"])
    history.acknowledged.update({"x1-00000": (0, 7), "x1-00002": (1, 3)})
    evaluate(history, result)
    result.drained, result.clean_stop_exit_code = True, 0
    assert cut.two_leaders == [cut.direct[2]]
    assert result.lost == ["x1-00000", "x1-00002"]  # acknowledged straight, never received
    assert result.violations == [
        "2 acknowledged sends lost",
        "failover #1: the cut-off old leader s1-r1 acknowledged 1 sends begun after s1-r2 "
        "was registered as leader (two leaders), e.g. x1-00002",
        "failover #1: s1-r1 did not rejoin in sync after the heal",
    ]
    assert "straight to the cut-off leader: 2/3 acknowledged, 1 after" in result.summary()

    # A cut between the leader and its peers leaves its lease, so no new leader is right
    # there; followers not back in sync after the heal are not.
    peers = Failover(
        number=2,
        kind=LEADER_CUT_TO_PEERS,
        shard="s1",
        old_leader="s1-r1",
        old_epoch=30,
        began=120.0,
        new_leader="s1-r1",
        new_epoch=30,
        back_s=13.0,
        in_sync_s=14.0,
        takes_sends_s=14.5,
        proxy_send_s={"p1": 14.6},
        ended_s=14.6,
    )
    assert peers.problems == []
    peers.in_sync_s = None
    assert peers.problems == ["failover #2: s1's followers did not rejoin in sync after the heal"]


def test_leader_partitions_need_replicated_mode() -> None:
    with pytest.raises(ValueError, match="leader partitions and peer cuts need replicated mode"):
        CheckConfig(cluster=True, leader_partitions=1)
    with pytest.raises(ValueError, match="leader_partitions must be at least 0"):
        CheckConfig(replicated=True, leader_partitions=-1)
    with pytest.raises(ValueError, match="peer cuts need replicated mode"):
        CheckConfig(cluster=True, peer_cuts=1)
    with pytest.raises(ValueError, match="peer_cuts must be at least 0"):
        CheckConfig(replicated=True, peer_cuts=-1)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_replicated_shards_lose_no_acknowledged_send_across_leader_failovers(
    tmp_path: Path,
) -> None:
    why = one_way_unavailable()
    if why is not None:
        print(f"\nno one-way partitions in this run, two more kills instead: {why}")
    partitions = 2 if why is None else 0
    config = CheckConfig(
        replicated=True,
        messages=3600,
        kills=5 - partitions,
        pauses=1,
        leader_partitions=partitions,
        producers=2,
        consumers=2,
        queues=2,
        send_rate=30,
        session_ttl_s=3,
        flush="sync",
        seed=20261127,
        data_dir=tmp_path,
        drain_timeout_s=60,
    )
    result = check(config)
    summary = result.summary()
    print()
    print(summary)
    failovers = result.failovers
    expected = {LEADER_KILL: 5 - partitions, LEADER_PAUSE: 1}
    if partitions:
        expected |= {LEADER_CUT_FROM_ETCD: 1, LEADER_CUT_TO_ETCD: 1}
    assert result.kills_by_kind == expected, summary
    assert len(failovers) == 6, summary
    assert all(f.new_epoch > f.old_epoch for f in failovers), summary
    assert [f.woken_stored for f in failovers if f.kind == LEADER_PAUSE] == [0], summary
    cuts = [f for f in failovers if f.kind in LEADER_PARTITIONS]
    # A cut-off leader acknowledged no send begun once another one led, and it was sent to
    # throughout (what it acknowledged before counts as acknowledged sends below); after
    # the heal it rejoined in sync.
    assert all(f.direct and not f.two_leaders for f in cuts), summary
    assert all(f.in_sync_s is not None for f in cuts), summary
    # Every shard took sends again, directly and through both proxies (timings are only
    # reported: a loaded 2-core machine makes them vary).
    assert all(f.takes_sends_s is not None and f.resumed_s is not None for f in failovers)
    # The producers kept sending through the failovers, and the other shard took them.
    assert sum(1 for f in failovers if f.sends) >= 5, summary
    assert result.send_calls_acknowledged >= 0.95 * result.send_calls, summary
    assert result.lost == [], summary
    assert result.unexpected == [], summary
    assert result.offset_conflicts == [], summary
    assert result.drained, summary
    assert result.clean_stop_exit_code == 0, summary
    assert result.redelivered_after_clean_restart == [], summary
    assert result.ok, summary
