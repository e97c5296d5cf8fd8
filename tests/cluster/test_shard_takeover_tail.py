"""A send the proxy moved off a replicated shard whose leader was killed is stored once: the
shard's new leader, before it takes writes, removes what other brokers hold of the
messages the shard stored last (broker/replication/replica.py, broker/crash_tail_sync.py).

Real processes (tests/support/replicas.py): etcd, shards s1 and s2 of two replicas each,
one proxy. Each replica of s1 registers the address of a relay in front of it
(tests/support/fault_relay.py, `[cluster] advertise`). The relay of s1's leader forwards a
send and holds back the answer; the leader stores it and replicates it to its follower
(sync mode: the follower holds it before the leader answers); then the leader is killed
with SIGKILL and its relay stops listening, so the proxy's retry is refused and the proxy
moves the send to s2 (the client gets its success). The follower takes over. With
`messages.crash_tail_s = 0` (no reconciliation, as before the change) a drain finds that
message twice; with the default, once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from popmq import Admin, Producer
from tests.cluster.traffic import copies_in, send_until_held, stored_on
from tests.support.cluster import ClusterProcess
from tests.support.fault_relay import FaultRelay, on_loop
from tests.support.replicas import ReplicaCluster, in_sync_shard
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

BODY_BYTES = 6000
"""Bodies of random bytes this large, so that the relay tells a send from the follower's
acknowledgements and pings."""


def _took_over(cluster: ReplicaCluster, leader: str, follower: str) -> ClusterProcess:
    """Wait until `follower` leads s1 in `leader`'s place (serving: its takeover done)."""
    assert cluster.wait_leader("s1", other_than=leader) == follower
    process = cluster.processes[follower]
    wait_until(
        lambda: "leads (epoch" in process.log_since(process.log_offsets[-1]),
        f"{follower} leading",
        60,
    )
    return process


@pytest.mark.parametrize("crash_tail_s", [30.0, 0.0], ids=["reconciled", "off"])
def test_a_send_moved_off_a_killed_shard_leader_is_stored_once_after_the_takeover(
    tmp_path: Path, relay_loop: asyncio.AbstractEventLoop, crash_tail_s: float
) -> None:
    cluster = ReplicaCluster(tmp_path, shards=2, replicas=2, proxies=1, session_ttl_s=3)
    relays: dict[str, FaultRelay] = {}
    for name in cluster.replicas("s1"):
        relay = relays[name] = FaultRelay()
        endpoint = on_loop(relay_loop, relay.start())
        process = cluster.processes[name]
        relay.target = ("127.0.0.1", process.port)
        process.extra = (
            "--set", f"messages.crash_tail_s={crash_tail_s}",
            "--set", f"cluster.advertise={endpoint}",
        )  # fmt: skip
    try:
        cluster.start()
        cluster.wait_in_sync("s1", 1)
        leader = cluster.leader("s1")
        assert leader is not None
        (follower,) = (n for n in cluster.replicas("s1") if n != leader)
        relay = relays[leader]
        proxy = cluster.endpoint("p1")
        with Admin(proxy) as admin:
            admin.create_topic("moved", queues=2)
        with Producer(proxy) as producer:
            relay.drop_next_answer(min_bytes=BODY_BYTES, hold_s=120)
            message_id, sending = send_until_held(producer, relay, "moved", BODY_BYTES)
            # The follower holds it (asked on its own address, not through a relay): then
            # the leader dies before its answer gets out, its address refusing connections.
            wait_until(
                lambda: stored_on(cluster.broker_address(follower), "moved", message_id),
                f"{follower} holding {message_id}",
                30,
                interval_s=0.2,
            )
            cluster.kill(leader)
            on_loop(relay_loop, relay.close(abort=True))
            receipt = sending.result(timeout=60)  # the proxy moved it to s2: no client error
            assert receipt.message_id == message_id
        new_leader = _took_over(cluster, leader, follower)
        copies = copies_in(proxy, "moved")
        expected = 1 if crash_tail_s else 2
        assert copies[message_id] == expected, (copies, new_leader.log_tail(30))
        assert {i: n for i, n in copies.items() if n > 1 and i != message_id} == {}
        if crash_tail_s:
            logged = new_leader.log_since(new_leader.log_offsets[-1])
            assert "takes over from its last leader" in logged
            assert "removed 1 of the" in logged and "s2: 1" in logged
    finally:
        cluster.stop()
        for relay in relays.values():
            on_loop(relay_loop, relay.close(abort=True))


def test_a_clean_handover_takes_over_without_asking_the_other_brokers(tmp_path: Path) -> None:
    """A leader stopped with SIGTERM lets the sends in flight finish and then releases its
    followers: no send was moved off it while it might be stored, so the follower that
    takes over serves at once, without looking its last messages up."""
    with in_sync_shard(tmp_path / "cluster", session_ttl_s=3) as cluster:
        proxy = cluster.endpoint("p1")
        with Admin(proxy) as admin, Producer(proxy) as producer:
            admin.create_topic("handed", queues=1)
            for i in range(10):
                producer.send("handed", f"h{i}".encode())
        leader = cluster.leader("s1")
        assert leader is not None
        (follower,) = (n for n in cluster.replicas("s1") if n != leader)
        assert cluster.terminate(leader, timeout_s=60.0) == 0, cluster.logs()
        new_leader = _took_over(cluster, leader, follower)
        assert "takes over from its last leader" not in new_leader.log_since(
            new_leader.log_offsets[-1]
        )


def _sent_to_both_shards(cluster: ReplicaCluster, topic: str) -> set[str]:
    """Send 20 messages over a topic with queues on both shards; their ids."""
    proxy = cluster.endpoint("p1")
    with Admin(proxy) as admin:
        admin.create_topic(topic, queues=4)
        assert sorted({q.broker for q in admin.get_topic(topic).queues}) == cluster.shards
    with Producer(proxy) as producer:
        return {producer.send(topic, f"m{i}".encode()).message_id for i in range(20)}


def _leads_after(cluster: ReplicaCluster, shard: str, **other_than: str) -> str:
    """The replica leading `shard` (not `other_than`), once it serves as leader; the log of
    its current start."""
    leader = cluster.wait_leader(shard, **other_than)
    assert leader is not None
    process = cluster.processes[leader]
    wait_until(
        lambda: "leads (epoch" in process.log_since(process.log_offsets[-1]),
        f"{leader} leading {shard}",
        60,
    )
    return process.log_since(process.log_offsets[-1])


def test_a_cluster_stopped_cleanly_and_started_again_serves_without_reconciling(
    tmp_path: Path,
) -> None:
    """Every replica of both shards stopped with SIGTERM at once (as `popmq cluster local`
    stops on Ctrl-C), then started again on its data: each shard's new leader finds that
    the shard's last leader stopped cleanly with its copy as it is (written down by that
    leader, or by a follower it released: last_leader.py), so it takes writes without
    asking the other brokers, and the first receive after the restart is served."""
    cluster = ReplicaCluster(tmp_path, shards=2, replicas=2, proxies=1, session_ttl_s=3)
    try:
        cluster.start()
        for shard in cluster.shards:
            cluster.wait_in_sync(shard, 1)
        sent = _sent_to_both_shards(cluster, "kept")
        replicas = [n for s in cluster.shards for n in cluster.replicas(s)]
        assert cluster.terminate_together(replicas) == [0] * len(replicas), cluster.logs()
        # The replicas elected last first, as they would be anyway (the others wait a
        # lease window before they campaign), however slowly a loaded machine starts them.
        elected = [f"{s}-{cluster.shard_keys(s)[2]['leader']}" for s in cluster.shards]
        for name in elected:
            cluster.restart(name)
        for shard in cluster.shards:
            assert cluster.wait_leader(shard) in elected
        for name in set(replicas) - set(elected):
            cluster.restart(name)
        for shard in cluster.shards:
            logged = _leads_after(cluster, shard)
            assert "takes over from a leader that stopped cleanly" in logged, logged
            assert "takes over from its last leader" not in logged, logged
            cluster.wait_served(shard)
        copies = copies_in(cluster.endpoint("p1"), "kept")  # any UNAVAILABLE fails it
        assert copies == dict.fromkeys(sent, 1), copies
    finally:
        cluster.stop()


def test_two_shard_leaders_killed_together_reconcile_without_waiting_for_each_other(
    tmp_path: Path,
) -> None:
    """Both shards' leaders killed at once: each follower takes over and checks the
    shard's last messages with the other brokers, among them the other shard's new leader,
    reconciling too. Each answers the other's lookups (their tails share no message), so
    both finish once they asked, not after `crash_tail_wait_s`, and nothing is lost."""
    cluster = ReplicaCluster(
        tmp_path,
        shards=2,
        replicas=2,
        proxies=1,
        session_ttl_s=3,
        broker_args=("--set", "cluster.crash_tail_wait_s=60"),
    )
    try:
        cluster.start()
        for shard in cluster.shards:
            cluster.wait_in_sync(shard, 1)
        sent = _sent_to_both_shards(cluster, "killed")
        leaders = {shard: cluster.leader(shard) for shard in cluster.shards}
        for leader in leaders.values():
            assert leader is not None
            cluster.kill(leader)
        for shard, leader in leaders.items():
            logged = _leads_after(cluster, shard, other_than=str(leader))
            assert "takes over from its last leader" in logged, logged
            assert "no other broker holds a message of its crash tail" in logged, logged
            cluster.wait_served(shard)
        copies = copies_in(cluster.endpoint("p1"), "killed")
        assert copies == dict.fromkeys(sent, 1), copies
    finally:
        cluster.stop()
