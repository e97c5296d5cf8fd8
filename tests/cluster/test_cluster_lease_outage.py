"""The lease path (Spark's pop mode: LeasePop, AckLease) through an etcd outage, on real
processes (etcd, two standalone `popmq broker`s, two `popmq proxy`s; tests/support/cluster.py)
under a steady stream of sends.

A reader does what a Spark micro-batch does: under one lease token per batch it pops a few
pages, then acks the lease; a batch whose call fails is tried again under the same token
(a task retry). While etcd is away every lease call fails retriably (UNAVAILABLE naming
etcd: lease pages live in etcd, docs/cluster.md "Spark leases during an outage"); the
messages a failed batch popped come back after their invisible time; once etcd is back the
batches go on. Nothing acknowledged by a send is lost.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from popmq import AsyncAdmin, AsyncProducer, AsyncSimpleConsumer, UnavailableError
from tests.cluster.traffic import SendLog, send_loop
from tests.support.cluster import Cluster
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(150)

SESSION_TTL_S = 3
DOWN_S = 3 * SESSION_TTL_S + 1
INVISIBLE_S = 4.0
"""The lease pages' invisible time: what a failed batch popped comes back after it."""
PAGES = 2
TOPIC, GROUP = "leases-through-outage", "lease-readers"


async def _outage(cluster: Cluster) -> None:
    p1, p2 = cluster.endpoint("p1"), cluster.endpoint("p2")
    async with AsyncAdmin(p1) as admin:
        await admin.create_topic(TOPIC, queues=2)
        await admin.create_group(GROUP)
    log = SendLog()
    stop_sending, stop_reading = asyncio.Event(), asyncio.Event()
    received: set[str] = set()
    failures: list[tuple[float, str]] = []
    committed: list[float] = []

    async def read(consumer: AsyncSimpleConsumer) -> None:
        batch = 0
        while not stop_reading.is_set():
            token = f"batch-{batch}"
            try:
                seen: list[str] = []
                for page in range(PAGES):
                    got = await consumer.receive_lease(
                        token, page, max_messages=16, invisible_duration_s=INVISIBLE_S, wait_s=0.5
                    )
                    seen += [m.body.decode() for m in got.messages]
                results = await consumer.ack_leases([token])
            except UnavailableError as exc:
                failures.append((time.monotonic(), str(exc)))
                await asyncio.sleep(0.2)
                continue  # a task retry: the same token
            if results[0].ok:
                received.update(seen)
                committed.append(time.monotonic())
            else:  # expired while we waited: its messages come back to a later batch
                failures.append((time.monotonic(), f"ack: {results[0]}"))
            batch += 1

    async with (
        AsyncProducer(p1) as producer,
        AsyncSimpleConsumer(p2, group=GROUP, topic=TOPIC) as consumer,
    ):
        sender = asyncio.create_task(
            send_loop(producer, TOPIC, "m", stop_sending, log, pause_s=0.02)
        )
        reader = asyncio.create_task(read(consumer))
        await until(lambda: len(received) >= 20, "lease batches before", 30, interval_s=0.1)

        await asyncio.to_thread(cluster.stop_etcd)
        stopped_at = time.monotonic()
        await asyncio.sleep(DOWN_S)
        await asyncio.to_thread(cluster.start_etcd)
        back_at = time.monotonic()
        in_outage = [m for t, m in failures if stopped_at <= t <= back_at]
        assert in_outage, "no lease call failed while etcd was down"
        assert all("etcd" in m for m in in_outage), in_outage[:3]
        await until(
            lambda: any(t > back_at for t in committed), "a lease batch after", 30, interval_s=0.1
        )
        first_after = min(t for t in committed if t > back_at) - back_at
        print(
            f"etcd down {back_at - stopped_at:.1f}s: {len(in_outage)} lease calls failed "
            f"retriably; the first batch after it committed in {first_after:.1f}s"
        )
        stop_sending.set()
        await sender
        sent = set(log.receipts)
        # A reader that died on an error it does not retry says so here, not as a timeout.
        await until(
            lambda: sent <= received or reader.done(), "every sent message read", 60, interval_s=0.2
        )
        if reader.done():
            reader.result()
        stop_reading.set()
        await reader
    assert log.errors == [], log.errors[:10]
    assert sent <= received


@pytest.mark.cluster_options(brokers=2, proxies=2, session_ttl_s=SESSION_TTL_S)
def test_lease_reads_fail_retriably_through_an_etcd_outage_and_lose_nothing(
    own_cluster: Cluster,
) -> None:
    asyncio.run(_outage(own_cluster))
