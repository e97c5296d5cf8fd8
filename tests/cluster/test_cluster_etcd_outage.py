"""An etcd outage longer than the session TTL, on real processes (etcd, two standalone
`popmq broker`s, two `popmq proxy`s; tests/support/cluster.py), under a steady stream of
sends and receives through one proxy:

- no send fails and every acknowledged message is received: standalone brokers keep taking
  writes with their sessions lost, and proxies route on their cached view;
- an admin write fails at once (well under the etcd client's 5 s call timeout) with a
  retriable UNAVAILABLE naming etcd, while reads answered from the caches keep working;
- once etcd is back, within 10 s: both brokers hold their registrations again (the keys
  etcd restored, taken over under the same epochs), the cluster status is healthy, and an
  admin write works and is served through the other proxy.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from popmq import (
    AsyncAdmin,
    AsyncProducer,
    AsyncSimpleConsumer,
    PopMQError,
    ReceivedMessage,
    UnavailableError,
)
from popmq.coordination.etcd import EtcdClient
from tests.cluster.traffic import SendLog, compare, drain, ids_of, receive_loop, send_loop
from tests.support.cluster import Cluster
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(120)

SESSION_TTL_S = 3
DOWN_S = 3 * SESSION_TTL_S + 1
"""How long etcd stays down: several TTLs, so every session is lost meanwhile."""
ADMIN_FAILS_WITHIN_S = 3.0
"""An admin write during the outage fails within this (the etcd client's own call timeout
is 5 s, and an admin write makes several calls)."""
BACK_WITHIN_S = 10.0
ROOT = "/popmq/default/"


async def _outage(cluster: Cluster) -> None:
    topic, group = "through-outage", "outage-readers"
    p1, p2 = cluster.endpoint("p1"), cluster.endpoint("p2")
    async with AsyncAdmin(p1) as admin:
        await admin.create_topic(topic, queues=2)
        await admin.create_group(group)
        before = await admin.cluster_status()
    epochs = {b.name: b.epoch for b in before.brokers}
    assert sorted(epochs) == ["b1", "b2"] and all(epochs.values()), before
    leases = await _member_leases(cluster)
    assert sorted(leases) == ["brokers/b1", "brokers/b2", "proxies/p1", "proxies/p2"], leases
    log = SendLog()
    stop = asyncio.Event()
    received: list[tuple[float, ReceivedMessage]] = []
    receive_errors: list[str] = []

    async with (
        AsyncProducer(p1) as producer,
        AsyncSimpleConsumer(p1, group=group, topic=topic) as consumer,
        AsyncAdmin(p1) as admin,
    ):
        # About 50 messages a second, as in the issue.
        sender = asyncio.create_task(send_loop(producer, topic, "m", stop, log, pause_s=0.02))
        receiver = asyncio.create_task(receive_loop(consumer, stop, received, receive_errors))
        await until(lambda: len(received) >= 20, "traffic before the outage", 30, interval_s=0.1)

        await asyncio.to_thread(cluster.stop_etcd)
        stopped_at = time.monotonic()
        await asyncio.sleep(SESSION_TTL_S + 1)  # every session is lost by now

        # An admin write fails at once, retriably, naming etcd.
        began = time.monotonic()
        with pytest.raises(UnavailableError) as refused:
            await admin.create_topic("during-outage", queues=1)
        took = time.monotonic() - began
        print(f"create_topic during the outage: {took:.2f}s, {refused.value}")
        assert took < ADMIN_FAILS_WITHIN_S, took
        assert refused.value.code == "UNAVAILABLE" and refused.value.retriable
        assert "etcd is unreachable" in str(refused.value)
        with pytest.raises(UnavailableError, match="etcd"):
            await admin.create_group("during-outage-readers")
        # Reads answered from the caches (and the brokers) keep working.
        described = await admin.get_topic(topic)
        assert described.topic.queues == 4
        assert [g.name for g in await admin.list_groups() if g.name == group] == [group]

        await asyncio.sleep(max(0.0, DOWN_S - (time.monotonic() - stopped_at)))
        acked_while_down = [i for i, t in log.done_at.items() if t > stopped_at]
        late_in_outage = [t for t in log.done_at.values() if t > stopped_at + SESSION_TTL_S + 1]
        await asyncio.to_thread(cluster.start_etcd)
        back_at = time.monotonic()
        print(
            f"etcd down {back_at - stopped_at:.1f}s: {len(acked_while_down)} sends acknowledged "
            f"meanwhile ({len(late_in_outage)} after every session was lost)"
        )
        assert late_in_outage, "no send was acknowledged once the sessions were lost"

        # Within 10 s: every member registered again under a new lease (etcd restored the
        # old keys and leases for one more TTL; each member took its key over, so the epochs
        # stay), the status healthy, admin writes accepted.
        await until(
            lambda: _registered_again(cluster, leases),
            "new registrations",
            BACK_WITHIN_S,
            interval_s=0.2,
        )
        registered_s = time.monotonic() - back_at

        async def healthy() -> bool:
            try:
                status = await admin.cluster_status()
            except PopMQError:
                return False
            return (
                status.problems == []
                and {b.name: b.epoch for b in status.brokers if b.live} == epochs
                and all(b.lease_ttl_s is not None for b in status.brokers)
                and sorted(p.name for p in status.proxies) == ["p1", "p2"]
            )

        await until(healthy, "a healthy status", BACK_WITHIN_S, interval_s=0.2)

        await until(
            lambda: _creates(admin, "after-outage", refused=UnavailableError),
            "an admin write",
            BACK_WITHIN_S,
            interval_s=0.2,
        )
        admin_s = time.monotonic() - back_at
        print(f"after etcd's return: registered in {registered_s:.1f}s, admin in {admin_s:.1f}s")
        async with AsyncAdmin(p2) as other:  # the other proxy's watches caught up too
            await until(lambda: _serves(other, "after-outage"), "p2 serves it", 10, interval_s=0.1)
        # Past the restored leases' TTL: the members are still there, on their new leases.
        await asyncio.sleep(max(0.0, back_at + SESSION_TTL_S + 2 - time.monotonic()))
        assert sorted(await cluster.live_brokers()) == ["b1", "b2"]
        assert await _registered_again(cluster, leases)
        assert {b.name: b.epoch for b in (await admin.cluster_status()).brokers} == epochs
        stop.set()
        await asyncio.gather(sender, receiver)
        drained = await drain(consumer)

    sent = set(log.receipts)
    got = ids_of([m for _, m in received] + drained)
    print(f"sends {len(log.attempted)}, errors {dict(log.error_codes())}; {compare(sent, got)}")
    assert log.errors == [], f"sends failed: {log.errors[:10]}"
    assert receive_errors == [], receive_errors[:10]
    assert sent <= set(got), compare(sent, got)
    assert set(got) <= set(log.attempted), compare(sent, got)


async def _member_leases(cluster: Cluster) -> dict[str, int]:
    """The etcd lease of every broker and proxy registration, by its path."""
    async with EtcdClient(cluster.etcd.endpoint) as etcd:
        found = await etcd.get(ROOT, prefix=True)
    return {
        path: kv.lease
        for kv in found.kvs
        if (path := kv.key.decode()[len(ROOT) :]).startswith(("brokers/", "proxies/"))
    }


async def _topic_and_leases(cluster: Cluster, topic: str, group: str) -> dict[str, int]:
    """Creates `topic` (2 queues) and `group` through p1; returns every member's lease (the
    members are b1, b2, p1 and p2)."""
    async with AsyncAdmin(cluster.endpoint("p1")) as admin:
        await admin.create_topic(topic, queues=2)
        await admin.create_group(group)
    leases = await _member_leases(cluster)
    assert sorted(leases) == ["brokers/b1", "brokers/b2", "proxies/p1", "proxies/p2"], leases
    return leases


async def _registered_again(cluster: Cluster, leases: dict[str, int]) -> bool:
    """Whether the same members as in `leases` are registered, each under another lease."""
    now = await _member_leases(cluster)
    return now.keys() == leases.keys() and all(now[k] != leases[k] for k in now)


async def _creates(admin: AsyncAdmin, topic: str, *, refused: type[PopMQError]) -> bool:
    """Whether `admin` creates `topic` (one queue) now; a `refused` error means no."""
    try:
        await admin.create_topic(topic, queues=1)
    except refused:
        return False
    return True


async def _serves(admin: AsyncAdmin, topic: str) -> bool:
    try:
        described = await admin.get_topic(topic)
    except PopMQError:
        return False
    return described.topic.queues == 2


@pytest.mark.cluster_options(brokers=2, proxies=2, session_ttl_s=SESSION_TTL_S)
def test_sends_and_receives_go_on_through_an_etcd_outage_longer_than_the_session_ttl(
    own_cluster: Cluster,
) -> None:
    asyncio.run(_outage(own_cluster))
