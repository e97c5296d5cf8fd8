"""Queue-exclusive consumers through an etcd outage, on real processes (etcd, two standalone
`popmq broker`s, two `popmq proxy`s; tests/support/cluster.py), under a steady stream of
sends:

- two SDK push consumers in queue-exclusive mode, one through each proxy, keep the queues
  they hold and keep consuming them while etcd is down for several of their claim times
  (proxy/claim_hold_over.py: their Heartbeat and QueryAssignment are answered from the
  proxies' caches), and after it is back;
- no queue is ever consumed by two members at once;
- every acknowledged send is consumed (nothing is lost).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from popmq import AsyncAdmin, AsyncProducer, ConsumeResult, PushConsumer, ReceivedMessage
from tests.cluster.traffic import SendLog, send_loop
from tests.support.cluster import Cluster
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(150)

SESSION_TTL_S = 3
INTERVAL_S = 2.0
CLAIM_S = 3 * INTERVAL_S
"""The members' claim time (3 heartbeat intervals): longer than the first calls into the
outage may hang (the etcd client's 5 s call timeout), as with the defaults (30 s)."""
DOWN_S = 3 * CLAIM_S + 2
"""How long etcd stays down: several claim times (and session TTLs)."""
TOPIC, GROUP = "exclusive-through-outage", "exclusive-readers"


@dataclass(frozen=True)
class Run:
    member: str
    queue_id: int
    body: str
    start: float
    end: float


class Journal:
    """Every listener call of every member."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[Run] = []

    def listener(self, member: str) -> Callable[[ReceivedMessage], ConsumeResult]:
        def record(message: ReceivedMessage) -> ConsumeResult:
            start = time.monotonic()
            time.sleep(0.002)  # long enough for two consumers of one queue to overlap
            with self.lock:
                self.runs.append(
                    Run(member, message.queue_id, message.body.decode(), start, time.monotonic())
                )
            return ConsumeResult.SUCCESS

        return record

    def between(self, since: float, until: float) -> list[Run]:
        with self.lock:
            return [r for r in self.runs if since <= r.start <= until]

    def bodies(self) -> set[str]:
        with self.lock:
            return {r.body for r in self.runs}


def _member(journal: Journal, name: str, endpoint: str) -> PushConsumer:
    return PushConsumer(
        endpoint,
        GROUP,
        subscriptions={TOPIC: "*"},
        listener=journal.listener(name),
        mode="queue_exclusive",
        heartbeat_interval_s=INTERVAL_S,
        consume_from="first",
        client_id=name,
    )


async def _outage(cluster: Cluster) -> None:
    p1, p2 = cluster.endpoint("p1"), cluster.endpoint("p2")
    async with AsyncAdmin(p1) as admin:
        await admin.create_topic(TOPIC, queues=2)  # on each broker
        await admin.create_group(GROUP)
        queues = (await admin.get_topic(TOPIC)).topic.queues
    journal = Journal()
    log = SendLog()
    stop = asyncio.Event()
    with _member(journal, "via-p1", p1) as first, _member(journal, "via-p2", p2) as second:
        members = (first, second)

        def split() -> bool:
            held = [m.stats.assigned_queues.get(TOPIC, ()) for m in members]
            return all(held) and sorted(itertools.chain(*held)) == list(range(queues))

        await until(split, "the members to split the queues", 30, interval_s=0.1)
        before = [m.stats.assigned_queues[TOPIC] for m in members]
        async with AsyncProducer(p1) as producer:
            sender = asyncio.create_task(send_loop(producer, TOPIC, "m", stop, log, pause_s=0.02))
            await until(lambda: len(journal.bodies()) >= 20, "traffic before", 30, interval_s=0.1)

            await asyncio.to_thread(cluster.stop_etcd)
            stopped_at = time.monotonic()
            held_during: list[list[tuple[int, ...]]] = []
            while time.monotonic() < stopped_at + DOWN_S:
                held_during.append([m.stats.assigned_queues.get(TOPIC, ()) for m in members])
                await asyncio.sleep(0.2)
            await asyncio.to_thread(cluster.start_etcd)
            back_at = time.monotonic()
            # The members kept their queues throughout, and kept consuming them long past
            # their claim time: every queue was consumed in the outage's second half.
            assert all(held == before for held in held_during), (before, held_during)
            late = journal.between(stopped_at + DOWN_S / 2, back_at)
            assert {r.queue_id for r in late} == set(range(queues)), late[-5:]
            print(
                f"etcd down {back_at - stopped_at:.1f}s (claim time {CLAIM_S}s): "
                f"{len(journal.between(stopped_at, back_at))} messages consumed meanwhile"
            )
            # After etcd is back the members still hold the same queues and consume.
            await asyncio.sleep(2 * CLAIM_S)
            assert [m.stats.assigned_queues[TOPIC] for m in members] == before
            stop.set()
            await sender
        sent = set(log.receipts)
        await until(
            lambda: sent <= journal.bodies(), "every sent message consumed", 30, interval_s=0.1
        )
    assert log.errors == [], log.errors[:10]
    runs = sorted(journal.runs, key=lambda r: (r.queue_id, r.start))
    for queue_id, of_queue in itertools.groupby(runs, key=lambda r: r.queue_id):
        for earlier, later in itertools.pairwise(of_queue):
            assert earlier.end <= later.start, f"queue {queue_id}: {earlier} overlaps {later}"


@pytest.mark.cluster_options(brokers=2, proxies=2, session_ttl_s=SESSION_TTL_S)
def test_queue_exclusive_consumers_keep_their_queues_through_an_etcd_outage(
    own_cluster: Cluster,
) -> None:
    asyncio.run(_outage(own_cluster))
