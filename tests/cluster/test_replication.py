"""Replicated shards on real processes: etcd, `popmq broker --shard` replicas, a proxy.

One shard of two replicas behind one proxy (tests/support/replicas.py), a cluster per test
(each kills something). What an acknowledged send survives, and what a consumer's
in-flight handles do across a failover, are checked with exact id sets.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from popmq import (
    Admin,
    AsyncAdmin,
    AsyncProducer,
    AsyncSimpleConsumer,
    ReceivedMessage,
    UnavailableError,
)
from popmq.broker_core.errors import PopMQError
from popmq.broker_core.types import NewMessage
from popmq.cluster import RemoteBroker
from tests.cluster.traffic import compare, ids_of, receive_ids
from tests.support.replicas import ReplicaCluster, in_sync_shard

TTL_S = 3


@pytest.fixture
def shard(tmp_path: Path) -> Iterator[ReplicaCluster]:
    with in_sync_shard(
        tmp_path / "cluster",
        session_ttl_s=TTL_S,
        proxy_args=("--metrics-listen", "127.0.0.1:0"),
    ) as cluster:
        yield cluster


async def _topic(cluster: ReplicaCluster, topic: str, group: str) -> None:
    async with AsyncAdmin(cluster.endpoint("p1")) as admin:
        await admin.create_topic(topic, queues=2)
        await admin.create_group(group)


async def _send(endpoint: str, topic: str, ids: list[str]) -> None:
    async with AsyncProducer(endpoint) as producer:
        for message_id in ids:
            await producer.send(topic, message_id.encode())


async def _send_until_ok(endpoint: str, topic: str, body: str, timeout_s: float) -> float:
    """Send one message, retrying while the shard has no leader; returns the seconds it took."""
    began = time.monotonic()
    async with AsyncProducer(endpoint, timeout_s=5) as producer:
        while True:
            try:
                await producer.send(topic, body.encode())
                return time.monotonic() - began
            except UnavailableError:
                assert time.monotonic() - began < timeout_s, f"no send for {timeout_s}s"
                await asyncio.sleep(0.2)


async def _consume(endpoint: str, group: str, topic: str, want: list[str]) -> list[str]:
    """Receive and ack until every id of `want` came (UNAVAILABLE while a new leader takes
    over is retried); returns every id received."""
    received: list[str] = []
    missing = set(want)
    deadline = time.monotonic() + 60
    async with AsyncSimpleConsumer(endpoint, group=group, topic=topic) as consumer:
        while missing:
            assert time.monotonic() < deadline, f"never received {sorted(missing)[:10]}"
            try:
                batch = await consumer.receive(max_messages=32, invisible_duration_s=30, wait_s=2)
            except UnavailableError:
                await asyncio.sleep(0.2)
                continue
            # Counted before the ack: an ack that reaches the shard and loses its answer
            # in a failover leaves the message acked, and it never comes again.
            for message in batch:
                received.append(message.body.decode())
                missing.discard(message.body.decode())
            if batch:
                with contextlib.suppress(UnavailableError):
                    await consumer.ack(batch)  # not acked: it comes back when invisible
    return received


def test_a_follower_takes_over_after_a_kill_and_nothing_acknowledged_is_lost(
    shard: ReplicaCluster,
) -> None:
    topic, group = "orders", "billing"
    endpoint = shard.endpoint("p1")
    asyncio.run(_topic(shard, topic, group))
    ids = [f"m{n:03d}" for n in range(100)]
    asyncio.run(_send(endpoint, topic, ids))
    leader = shard.leader("s1")
    assert leader is not None
    epoch = shard.epoch("s1")
    (follower,) = [name for name in shard.replicas("s1") if name != leader]
    assert shard.in_sync("s1") == [follower]

    async def pop_some() -> list[ReceivedMessage]:
        # In flight across the failover: popped from the old leader, acked on the new one.
        async with AsyncSimpleConsumer(endpoint, group=group, topic=topic) as c:
            return await c.receive(max_messages=10, invisible_duration_s=120, wait_s=5)

    in_flight = asyncio.run(pop_some())
    assert in_flight

    async def follower_reads() -> tuple[int, int, list[str]]:
        # A follower answers reads (never writes) from its copy, straight over BrokerService.
        remote = RemoteBroker(shard.broker_address(follower), call_timeout_s=10.0, catalog=False)
        await remote.start()
        try:
            deadline = time.monotonic() + 10
            while True:
                _, queues = await remote.get_topic(topic)
                stored = sum(q.max_offset - q.min_offset for q in queues)
                if stored == len(ids) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            offsets = await remote.get_offsets(group, topic)
            peeked = await remote.peek(topic, queue_id=0, offset=0, max_messages=5)
            with pytest.raises(PopMQError, match="does not lead it now"):
                await remote.send([NewMessage(topic, b"refused")])
        finally:
            await remote.close()
        return stored, len(offsets), [m.record.body.decode() for m in peeked]

    stored, queues_read, peeked = asyncio.run(follower_reads())
    assert stored == len(ids) and queues_read == 2 and peeked and set(peeked) <= set(ids)

    shard.kill(leader)

    async def peek_meanwhile() -> list[str]:
        # The killed leader is still registered for up to a TTL: the proxy's call to it
        # fails, and the read is answered by the follower.
        async with AsyncAdmin(endpoint) as admin:
            found = await admin.peek_messages(topic, max_messages=200)
        return [m.body.decode() for m in found]

    assert set(asyncio.run(peek_meanwhile())) == set(ids)
    began = time.monotonic()
    new_leader = shard.wait_leader("s1", other_than=leader)
    took = time.monotonic() - began
    assert new_leader == follower
    assert shard.epoch("s1") > epoch
    assert took < TTL_S + 10, f"failover took {took:.1f}s"

    async def after() -> list[str]:
        async with AsyncSimpleConsumer(endpoint, group=group, topic=topic) as c:
            deadline = time.monotonic() + 30
            while True:
                try:
                    await c.ack(in_flight)
                    break
                except UnavailableError:
                    assert time.monotonic() < deadline, "acks refused for 30 s"
                    await asyncio.sleep(0.2)
            rest = [i for i in ids if i not in {m.body.decode() for m in in_flight}]
            got = await receive_ids(c, rest, deadline_s=30)
            await c.ack(got)
            return list(ids_of(got))

    received = asyncio.run(after())
    rest = [i for i in ids if i not in {m.body.decode() for m in in_flight}]
    assert sorted(set(received)) == rest, compare(rest, Counter(received))


async def _direct_sends(address: str, topic: str, count: int) -> tuple[int, list[str]]:
    """Send `count` messages straight to a replica's BrokerService: (stored, errors)."""
    remote = RemoteBroker(address, call_timeout_s=10.0, catalog=False)
    await remote.start()
    stored, errors = 0, []
    try:
        for n in range(count):
            try:
                await remote.send([NewMessage(topic, f"direct-{n}".encode())])
                stored += 1
            except PopMQError as exc:
                errors.append(f"{exc.code}: {exc}")
    finally:
        await remote.close()
    return stored, errors


def _check_status(shard: ReplicaCluster, leader: str, follower: str) -> None:
    """The shard's replication as `popmq cluster status` (SDK, CLI) and metrics show it."""
    with Admin(shard.endpoint("p1")) as admin:
        status = admin.cluster_status()
    (broker,) = [b for b in status.brokers if b.name == "s1"]
    replication = broker.replication
    assert replication is not None
    assert replication.leader == shard.shard_of[leader][1]
    assert replication.epoch == shard.epoch("s1") == broker.epoch
    assert replication.mode == "sync" and replication.min_insync == 1
    assert [(f.name, f.in_sync) for f in replication.followers] == [
        (shard.shard_of[follower][1], True)
    ]
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "popmq.cli",
            "--endpoint",
            shard.endpoint("p1"),
            "cluster",
            "status",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "replicas" in shown and "follower" in shown and "leader (sync, min_insync 1)" in shown
    metrics = shard.metrics("p1")
    replica = shard.shard_of[follower][1]
    assert f'popmq_replication_in_sync{{broker="s1",replica="{replica}"}} 1.0' in metrics
    assert f'popmq_broker_epoch{{broker="s1"}} {float(shard.epoch("s1"))}' in metrics


def test_a_paused_leader_acknowledges_nothing_after_it_wakes(shard: ReplicaCluster) -> None:
    topic, group = "payments", "ledger"
    endpoint = shard.endpoint("p1")
    asyncio.run(_topic(shard, topic, group))
    ids = [f"m{n:03d}" for n in range(40)]
    asyncio.run(_send(endpoint, topic, ids))
    leader = shard.leader("s1")
    assert leader is not None
    (follower,) = [name for name in shard.replicas("s1") if name != leader]
    _check_status(shard, leader, follower)
    old_address = shard.broker_address(leader)
    process = shard.processes[leader].process
    assert process is not None
    process.send_signal(signal.SIGSTOP)
    try:
        new_leader = shard.wait_leader("s1", other_than=leader, timeout_s=TTL_S + 20)
    finally:
        process.send_signal(signal.SIGCONT)
    # Awake again, past its lease: whatever reaches it now is refused, never stored.
    stored, errors = asyncio.run(_direct_sends(old_address, topic, 5))
    assert stored == 0, errors
    assert all("UNAVAILABLE" in e for e in errors), errors

    # It steps down and follows the new leader; with it back in sync, sends are taken
    # again, and the consumer finds exactly what was acknowledged.
    shard.wait_in_sync("s1", 1)
    assert shard.in_sync("s1") == [leader]
    assert shard.leader("s1") == new_leader
    more = [f"n{n:03d}" for n in range(20)]
    asyncio.run(_send_until_ok(endpoint, topic, more[0], timeout_s=30))
    asyncio.run(_send(endpoint, topic, more[1:]))

    received = asyncio.run(_consume(endpoint, group, topic, ids + more))
    assert sorted(set(received)) == sorted(ids + more), compare(ids + more, Counter(received))


def test_a_wiped_replica_catches_up_and_can_lead_with_everything(shard: ReplicaCluster) -> None:
    topic, group = "audit", "archive"
    endpoint = shard.endpoint("p1")
    asyncio.run(_topic(shard, topic, group))
    first = [f"a{n:03d}" for n in range(50)]
    asyncio.run(_send(endpoint, topic, first))
    leader = shard.leader("s1")
    (follower,) = [name for name in shard.replicas("s1") if name != leader]

    # The follower's disk is lost: without it the shard takes no sends (min_insync 1) ...
    shard.kill(follower)
    shutil.rmtree(shard.processes[follower].data_dir)

    async def refused() -> str:
        async with AsyncProducer(endpoint, timeout_s=5) as producer:
            deadline = time.monotonic() + 20
            while True:
                try:
                    await producer.send(topic, b"refused")
                except UnavailableError as exc:
                    return str(exc)
                assert time.monotonic() < deadline, "sends still taken without a follower"
                await asyncio.sleep(0.1)

    assert "in-sync follower" in asyncio.run(refused())
    # ... and once it is back, it copies the leader and rejoins the in-sync set.
    shard.restart(follower)
    shard.wait_in_sync("s1", 1)
    second = [f"b{n:03d}" for n in range(50)]
    asyncio.run(_send_until_ok(endpoint, topic, second[0], timeout_s=30))
    asyncio.run(_send(endpoint, topic, second[1:]))

    shard.kill(leader)
    assert shard.wait_leader("s1", other_than=leader) == follower

    received = asyncio.run(_consume(endpoint, group, topic, first + second))
    assert set(received) == set(first + second), compare(first + second, Counter(received))
    # The old leader comes back as a follower of the new one.
    shard.restart(leader)
    shard.wait_in_sync("s1", 1)
    assert shard.in_sync("s1") == [leader]


def test_a_follower_whose_leader_died_stops_on_sigterm(shard: ReplicaCluster) -> None:
    # Its role loop retries the dead leader's address between polls of etcd: a SIGTERM then
    # must stop it, not be swallowed by that retry (it would go on and take the shard over).
    leader = shard.leader("s1")
    assert leader is not None
    (follower,) = [name for name in shard.replicas("s1") if name != leader]
    shard.kill(leader)
    time.sleep(0.5)
    began = time.monotonic()
    code = shard.terminate(follower, timeout_s=20.0)
    assert code == 0, shard.logs()
    assert time.monotonic() - began < 15.0
    assert shard.leader("s1") in (None, leader)  # it never took over


def test_a_stopping_leader_does_not_wait_its_grace_for_the_followers_streams(
    tmp_path: Path,
) -> None:
    # The followers' streams never end by themselves: a leader's SIGTERM used to wait the
    # whole server.shutdown_grace_s for them (30 s here). Now they end once nothing is owed.
    with in_sync_shard(
        tmp_path / "cluster",
        session_ttl_s=TTL_S,
        broker_args=("--set", "server.shutdown_grace_s=30"),
    ) as cluster:
        asyncio.run(_topic(cluster, "graceful", "g"))
        ids = [f"g{i:03d}" for i in range(20)]
        asyncio.run(_send(cluster.endpoint("p1"), "graceful", ids))
        leader = cluster.leader("s1")
        assert leader is not None
        began = time.monotonic()
        assert cluster.terminate(leader, timeout_s=60.0) == 0, cluster.logs()
        took = time.monotonic() - began
        assert took < 20.0, f"the leader took {took:.1f}s to stop (grace 30 s)"
        print(f"the leader stopped in {took:.1f}s")
