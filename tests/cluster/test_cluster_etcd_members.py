"""etcd run as three members (as docs/cluster.md advises), on real processes (two standalone
`popmq broker`s, two `popmq proxy`s; tests/support/cluster.py): kill -9 of the leading
member, then of a follower, each started again, under a steady stream of sends and receives
through both proxies, disturbs nothing:

- no send or receive fails, every acknowledged message is received;
- no member's registration is lost (the same etcd leases throughout: the keep-alives and
  watches moved to the members that answer), so no broker fenced and no epoch changed. This
  needs a session TTL well above an etcd election (about a second): the default 10 s;
- admin writes keep working while one member is down.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from popmq import AsyncAdmin, AsyncProducer, AsyncSimpleConsumer, PopMQError, ReceivedMessage
from tests.cluster.test_cluster_etcd_outage import _member_leases, _topic_and_leases
from tests.cluster.traffic import SendLog, compare, drain, ids_of, send_loop
from tests.support.cluster import Cluster
from tests.support.etcd import EtcdCluster, EtcdServer
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(180)

SESSION_TTL_S = 10
DOWN_S = SESSION_TTL_S + 1
"""How long each member stays down: past the session TTL, so a keep-alive that did not
move to another member would lose its lease."""


async def _one_member_down(cluster: Cluster) -> None:
    etcd = cluster.etcd
    assert isinstance(etcd, EtcdCluster)
    topic, group = "through-members", "members-readers"
    p1, p2 = cluster.endpoint("p1"), cluster.endpoint("p2")
    leases = await _topic_and_leases(cluster, topic, group)
    log = SendLog()
    stop = asyncio.Event()
    received: list[ReceivedMessage] = []
    receive_errors: list[str] = []

    async with (
        AsyncProducer(p1) as producer,
        AsyncSimpleConsumer(p2, group=group, topic=topic) as consumer,
        AsyncAdmin(p2) as admin,
    ):

        async def consume() -> None:
            while not stop.is_set():
                try:
                    batch = await consumer.receive(
                        max_messages=32, invisible_duration_s=30, wait_s=1
                    )
                except PopMQError as exc:
                    receive_errors.append(f"receive {exc.code}: {exc}")
                    await asyncio.sleep(0.1)
                    continue
                received.extend(batch)
                try:
                    await consumer.ack(batch)
                except PopMQError as exc:
                    receive_errors.append(f"ack {exc.code}: {exc}")

        sender = asyncio.create_task(send_loop(producer, topic, "m", stop, log, pause_s=0.02))
        receiver = asyncio.create_task(consume())
        await until(lambda: len(received) >= 20, "traffic before the kill", 30, interval_s=0.1)

        downed: list[EtcdServer] = []
        for round_, pick in enumerate(("leader", "follower")):
            leader = await asyncio.to_thread(etcd.leader)
            victim = (
                leader
                if pick == "leader"
                else next(m for m in etcd.members if m is not leader and m not in downed)
            )
            downed.append(victim)
            await asyncio.to_thread(victim.kill)
            killed_at = time.monotonic()
            # Admin writes go on with two members of three.
            await admin.create_topic(f"while-{pick}-down", queues=1)
            await asyncio.sleep(max(0.0, DOWN_S - (time.monotonic() - killed_at)))
            await asyncio.to_thread(victim.start)
            print(f"round {round_}: {pick} {victim.name} down {time.monotonic() - killed_at:.1f}s")

        await asyncio.sleep(1.0)
        stop.set()
        await asyncio.gather(sender, receiver)
        received += await drain(consumer)
        assert await _member_leases(cluster) == leases  # no registration was lost
        status = await admin.cluster_status()
        assert status.problems == [], status.problems

    sent = set(log.receipts)
    got = ids_of(received)
    print(f"sends {len(log.attempted)}, errors {dict(log.error_codes())}; {compare(sent, got)}")
    assert log.errors == [], f"sends failed: {log.errors[:10]}"
    assert receive_errors == [], receive_errors[:10]
    assert sent <= set(got), compare(sent, got)


@pytest.mark.cluster_options(brokers=2, proxies=2, session_ttl_s=SESSION_TTL_S, etcd_members=3)
def test_killing_and_restarting_one_of_three_etcd_members_disturbs_no_traffic(
    own_cluster: Cluster,
) -> None:
    asyncio.run(_one_member_down(own_cluster))
