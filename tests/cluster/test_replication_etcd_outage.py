"""A replicated shard through an etcd outage (real etcd, replicas and proxy).

One shard of two replicas behind one proxy, TTL 3 s. With etcd stopped for longer than
the TTL the leader loses its lease but keeps writing on its in-sync follower's lease
promises (heartbeats on the replication stream): every send through the proxy is
acknowledged and replicated, and once etcd is back the leader holds its registration again
under the same epoch. With etcd stopped AND the follower paused (so it answers no
heartbeat), the leader fences once the follower's promise runs out: it refuses sends with
UNAVAILABLE and stores nothing; once etcd and the follower are back it leads again. A
leader stopped on purpose releases its follower from the promise: it takes over at once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from popmq import AsyncAdmin, AsyncProducer, PopMQError
from popmq.broker.replication import last_leader
from popmq.broker_core.errors import PopMQError as BrokerError
from popmq.broker_core.types import NewMessage
from popmq.cluster import RemoteBroker
from tests.cluster.test_replication import _consume
from tests.cluster.traffic import compare
from tests.support.replicas import ReplicaCluster, in_sync_shard

TTL_S = 3
TOPIC, GROUP = "orders", "billing"


@pytest.fixture
def shard(tmp_path: Path) -> Iterator[ReplicaCluster]:
    with in_sync_shard(tmp_path / "cluster", session_ttl_s=TTL_S) as cluster:
        yield cluster


async def _setup(endpoint: str) -> None:
    async with AsyncAdmin(endpoint) as admin:
        await admin.create_topic(TOPIC, queues=2)
        await admin.create_group(GROUP)


async def _send_for(endpoint: str, seconds: float, prefix: str) -> tuple[list[str], list[str]]:
    """Send one message every 50 ms for `seconds`: (acknowledged ids, errors)."""
    acked: list[str] = []
    errors: list[str] = []
    deadline = time.monotonic() + seconds
    async with AsyncProducer(endpoint, timeout_s=10) as producer:
        n = 0
        while time.monotonic() < deadline:
            body = f"{prefix}{n:04d}"
            n += 1
            try:
                await producer.send(TOPIC, body.encode())
                acked.append(body)
            except PopMQError as exc:
                errors.append(f"{exc.code}: {exc}")
            await asyncio.sleep(0.05)
    return acked, errors


async def _direct_sends(address: str, count: int) -> tuple[int, list[str]]:
    remote = RemoteBroker(address, call_timeout_s=10.0, catalog=False)
    await remote.start()
    stored, errors = 0, []
    try:
        for n in range(count):
            try:
                await remote.send([NewMessage(TOPIC, f"direct-{n}".encode())])
                stored += 1
            except BrokerError as exc:
                errors.append(f"{exc.code}: {exc}")
    finally:
        await remote.close()
    return stored, errors


def _topic_and_roles(shard: ReplicaCluster) -> tuple[str, str, str, int]:
    """Creates TOPIC and GROUP through p1: (p1's endpoint, the leader of s1, its follower,
    the shard's epoch)."""
    endpoint = shard.endpoint("p1")
    asyncio.run(_setup(endpoint))
    leader = shard.leader("s1")
    assert leader is not None
    (follower,) = [name for name in shard.replicas("s1") if name != leader]
    return endpoint, leader, follower, shard.epoch("s1")


def _assert_follower_holds(
    shard: ReplicaCluster, endpoint: str, leader: str, follower: str, acked: list[str]
) -> None:
    """Kills the leader: the follower leads (within its session TTL and 20 s) and every id
    of `acked` is received."""
    shard.kill(leader)
    timeout_s = shard.session_ttl_s + 20
    assert shard.wait_leader("s1", other_than=leader, timeout_s=timeout_s) == follower
    received = asyncio.run(_consume(endpoint, GROUP, TOPIC, acked))
    assert set(acked) <= set(received), compare(acked, Counter(received))


def _log_has(cluster: ReplicaCluster, name: str, text: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in cluster.processes[name].log_path.read_text(errors="replace"):
            return True
        time.sleep(0.1)
    return False


def test_a_shard_leader_keeps_taking_sends_through_an_etcd_outage(shard: ReplicaCluster) -> None:
    endpoint, leader, follower, epoch = _topic_and_roles(shard)
    before, errors = asyncio.run(_send_for(endpoint, 1.0, "a"))
    assert before and not errors, errors

    shard.stop_etcd()
    # Three TTLs without etcd: the lease is lost after one, the promises carry the rest.
    during, errors = asyncio.run(_send_for(endpoint, 3 * TTL_S, "b"))
    assert not errors, errors[:5]
    assert len(during) > 3 * TTL_S * 5, len(during)
    assert _log_has(shard, leader, "lost its leader lease", 1.0), shard.logs()

    shard.start_etcd()
    returned = time.monotonic()
    assert _log_has(shard, leader, "holds its registration again", 10.0), shard.logs()
    assert time.monotonic() - returned < 10.0
    assert shard.leader("s1") == leader
    assert shard.epoch("s1") == epoch
    # On the new lease: still there once the old one would have lapsed.
    time.sleep(TTL_S + 1)
    assert shard.leader("s1") == leader and shard.epoch("s1") == epoch
    after, errors = asyncio.run(_send_for(endpoint, 1.0, "c"))
    assert after and not errors, errors

    # Replicated: the follower, leading after a kill, has every acknowledged send.
    _assert_follower_holds(shard, endpoint, leader, follower, before + during + after)


def test_a_follower_restarted_while_etcd_is_down_follows_its_last_known_leader(
    shard: ReplicaCluster,
) -> None:
    endpoint, leader, follower, epoch = _topic_and_roles(shard)
    before, errors = asyncio.run(_send_for(endpoint, 1.0, "a"))
    assert before and not errors, errors

    shard.stop_etcd()
    killed = time.monotonic()
    shard.kill(follower)
    shard.restart(follower)
    # It cannot ask etcd who leads: it follows the leader written in its data dir.
    assert _log_has(shard, follower, "follows its last known leader", 10.0), shard.logs()
    print(f"the killed follower followed again {time.monotonic() - killed:.1f}s after its kill")
    # Three TTLs: past the leader's lease and past the promise the follower gave before
    # its kill; only the restarted follower's promises keep the leader writing.
    during, errors = asyncio.run(_send_for(endpoint, 3 * TTL_S, "b"))
    assert not errors, errors[:5]
    assert len(during) > 3 * TTL_S * 5, len(during)
    assert _log_has(shard, leader, "lost its leader lease", 1.0), shard.logs()
    assert "stops leading" not in shard.processes[leader].log_path.read_text(errors="replace")

    shard.start_etcd()
    assert _log_has(shard, leader, "holds its registration again", 10.0), shard.logs()
    assert shard.leader("s1") == leader and shard.epoch("s1") == epoch
    assert shard.wait_in_sync("s1", 1, timeout_s=30) == [follower]
    after, errors = asyncio.run(_send_for(endpoint, 1.0, "c"))
    assert after and not errors, errors

    # The restarted follower holds every acknowledged send: it leads after a kill.
    _assert_follower_holds(shard, endpoint, leader, follower, before + during + after)
    # Its own term is what it remembers now (written before it served).
    remembered = last_leader.read(shard.processes[follower].data_dir)
    assert remembered is not None
    assert (remembered.replica, remembered.epoch) == (
        shard.shard_of[follower][1],
        shard.epoch("s1"),
    )


def test_a_leader_without_etcd_and_its_follower_fences_once_the_promise_ends(
    shard: ReplicaCluster,
) -> None:
    endpoint, leader, follower, epoch = _topic_and_roles(shard)
    address = shard.broker_address(leader)
    before, errors = asyncio.run(_send_for(endpoint, 1.0, "a"))
    assert before and not errors, errors

    shard.stop_etcd()
    shard.pause(follower)
    paused_at = time.monotonic()
    try:
        # Past the promise window (TTL by the follower's clock) and the lease: fenced.
        time.sleep(TTL_S + 1.5)
        stored, refusals = asyncio.run(_direct_sends(address, 3))
        assert stored == 0, refusals
        assert refusals and all("UNAVAILABLE" in e for e in refusals), refusals
        assert any("lease promise ran out" in e for e in refusals), refusals
        assert time.monotonic() - paused_at < 60
        fenced_acks, errors = asyncio.run(_send_for(endpoint, 1.0, "x"))
        assert not fenced_acks and errors, fenced_acks
    finally:
        shard.resume(follower)
        shard.start_etcd()

    # etcd restored the lease: the leader takes its registration back, same epoch, and
    # leads again; nothing acknowledged before the outage is lost.
    assert _log_has(shard, leader, "holds its registration again", 10.0), shard.logs()
    assert shard.leader("s1") == leader and shard.epoch("s1") == epoch
    deadline = time.monotonic() + 30
    after: list[str] = []
    while not after:
        assert time.monotonic() < deadline, shard.logs()
        after, _ = asyncio.run(_send_for(endpoint, 0.5, "c"))
    received = asyncio.run(_consume(endpoint, GROUP, TOPIC, before + after))
    assert set(before + after) <= set(received), compare(before + after, Counter(received))


def test_a_leader_stopped_on_purpose_releases_its_follower_from_the_promise(
    tmp_path: Path,
) -> None:
    # A 10 s lease: the follower takes over well within it, so its promise (a whole lease
    # window since it last heard from the leader) did not hold it back.
    with in_sync_shard(tmp_path / "cluster", session_ttl_s=10) as cluster:
        leader = cluster.leader("s1")
        assert leader is not None
        began = time.monotonic()
        assert cluster.terminate(leader, timeout_s=60.0) == 0, cluster.logs()
        cluster.wait_leader("s1", other_than=leader, timeout_s=30)
        took = time.monotonic() - began
        assert took < 8.0, f"the follower led {took:.1f}s after the leader's SIGTERM"
        print(f"the follower led {took:.1f}s after the leader's SIGTERM")
