"""The lease path (Spark's pop mode: LeasePop, AckLease) through an etcd outage, on real
processes (etcd, two standalone `popmq broker`s, two `popmq proxy`s; tests/support/cluster.py)
under a steady stream of sends.

A reader does what a Spark micro-batch does: under one lease token per batch it pops a few
pages, then acks the lease, naming the pages it read (acks_by_page: proxy/lease_outage.py);
a batch whose call fails retriably is read again under the same token (a task retry). While
etcd is away its proxy serves the pages from memory, so the reader keeps reading and
committing. Meanwhile a batch is read twice, through both proxies (a task retry that lands
on the other proxy): the second attempt reads the same pages or pages of its own, or fails
retriably; the ack of the first acks exactly what it read; then the other proxy is killed
with what it holds. Checked at the end: every sent message was read (lost 0), and no
message of a committed batch was read again (its ack acked it; what the second attempt
took came back after its invisible time).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from popmq import (
    AsyncAdmin,
    AsyncProducer,
    AsyncSimpleConsumer,
    FailedPreconditionError,
    UnavailableError,
)
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


async def _read_batch(
    consumer: AsyncSimpleConsumer, token: str, seen: list[str] | None = None
) -> tuple[list[str], list[str]]:
    """One attempt of a batch: its pages' (message bodies, page ids); `seen` gets the
    bodies as they come, for a caller whose attempt fails halfway."""
    seen = [] if seen is None else seen
    page_ids: list[str] = []
    for page in range(PAGES):
        got = await consumer.receive_lease(
            token,
            page,
            max_messages=16,
            invisible_duration_s=INVISIBLE_S,
            wait_s=0.5,
            acks_by_page=True,
        )
        seen += [m.body.decode() for m in got.messages]
        page_ids.append(got.page_id)
    return seen, page_ids


async def _outage(cluster: Cluster) -> None:
    p1, p2 = cluster.endpoint("p1"), cluster.endpoint("p2")
    async with AsyncAdmin(p1) as admin:
        await admin.create_topic(TOPIC, queues=2)
        await admin.create_group(GROUP)
    log = SendLog()
    stop_sending, stop_reading = asyncio.Event(), asyncio.Event()
    committed: list[tuple[float, list[str]]] = []
    """(when, the messages) of every batch whose ack answered OK: each message acked."""
    unsure: set[str] = set()
    """Messages of batches whose ack failed for some of them (the rest were acked)."""
    failures: list[tuple[float, str]] = []

    def received() -> set[str]:
        return {m for _, batch in committed for m in batch} | unsure

    async def commit(
        consumer: AsyncSimpleConsumer, token: str, read: list[str], ids: list[str]
    ) -> None:
        [result] = await consumer.ack_leases([token], {token: ids})
        if result.ok:
            committed.append((time.monotonic(), read))
        else:  # some messages expired meanwhile: those come back, the rest were acked
            unsure.update(read)
            failures.append((time.monotonic(), f"ack: {result}"))

    async def read(consumer: AsyncSimpleConsumer) -> None:
        batch = 0
        while not stop_reading.is_set():
            token = f"batch-{batch}"
            seen: list[str] = []
            try:
                _, page_ids = await _read_batch(consumer, token, seen)
                await commit(consumer, token, seen, page_ids)
            except UnavailableError as exc:
                failures.append((time.monotonic(), f"UNAVAILABLE {exc}"))
                await asyncio.sleep(0.2)
                continue  # a task retry: the same token
            except FailedPreconditionError as exc:
                # The lease expired between two of its pages on a slow machine (its messages
                # come back), or an ack whose answer was lost landed (this token is done):
                # either way the next batch goes on, and what this one read may be acked.
                unsure.update(seen)
                failures.append((time.monotonic(), f"FAILED_PRECONDITION {exc}"))
            batch += 1

    async with (
        AsyncProducer(p2) as producer,
        AsyncSimpleConsumer(p2, group=GROUP, topic=TOPIC) as consumer,
        AsyncSimpleConsumer(p1, group=GROUP, topic=TOPIC) as other_proxy,
    ):
        sender = asyncio.create_task(
            send_loop(producer, TOPIC, "m", stop_sending, log, pause_s=0.02)
        )
        reader = asyncio.create_task(read(consumer))
        await until(lambda: len(received()) >= 20, "lease batches before", 30, interval_s=0.1)

        await asyncio.to_thread(cluster.stop_etcd)
        stopped_at = time.monotonic()
        await until(
            lambda: any(t > stopped_at for t, _ in committed) or reader.done(),
            "a lease batch committed while etcd is down",
            DOWN_S,
            interval_s=0.1,
        )
        if reader.done():
            reader.result()

        # One batch read twice while etcd is down, the second attempt through the other
        # proxy; the first attempt's read is the one committed.
        first, first_ids = await _read_batch(consumer, "twice")
        try:
            second, _ = await _read_batch(other_proxy, "twice")
        except UnavailableError as exc:
            assert "etcd" in str(exc), exc
            second = []
        assert second == first or not set(second) & set(first), (first, second)
        await commit(consumer, "twice", first, first_ids)
        assert committed[-1][1] == first, failures[-1:]
        # The other proxy dies holding the second attempt's pages, never written: their
        # messages come back after their invisible time (checked below: nothing is lost).
        await asyncio.to_thread(cluster.kill, "p1")

        await asyncio.sleep(max(0.0, stopped_at + DOWN_S - time.monotonic()))
        await asyncio.to_thread(cluster.start_etcd)
        back_at = time.monotonic()
        in_outage = [t for t, _ in committed if stopped_at < t < back_at]
        assert len(in_outage) >= 2, f"{len(in_outage)} batches committed while etcd was down"
        failed = [m for t, m in failures if stopped_at <= t <= back_at]
        unavailable = [m for m in failed if m.startswith("UNAVAILABLE")]
        assert all("etcd" in m for m in unavailable), unavailable[:3]
        await until(
            lambda: any(t > back_at for t, _ in committed),
            "a lease batch after",
            30,
            interval_s=0.1,
        )
        print(
            f"etcd down {back_at - stopped_at:.1f}s: {len(in_outage)} lease batches committed "
            f"meanwhile, {len(failed)} lease calls failed; a batch read twice: "
            f"{len(first)} messages, then {len(second)} of the second attempt's own"
        )
        stop_sending.set()
        await sender
        sent = set(log.receipts)
        # A reader that died on an error it does not retry says so here, not as a timeout.
        await until(
            lambda: sent <= received() or reader.done(),
            "every sent message read",
            60,
            interval_s=0.2,
        )
        if reader.done():
            reader.result()
        stop_reading.set()
        await reader
    assert log.errors == [], log.errors[:10]
    assert sent <= received(), f"lost: {sorted(sent - received())[:10]}"
    acked: dict[str, int] = {}
    for _, batch in committed:
        for message in batch:
            acked[message] = acked.get(message, 0) + 1
    again = {m: n for m, n in acked.items() if n > 1}
    assert not again, f"messages of committed batches read again: {sorted(again)[:10]}"


@pytest.mark.cluster_options(brokers=2, proxies=2, session_ttl_s=SESSION_TTL_S)
def test_lease_readers_read_and_commit_through_an_etcd_outage_and_lose_nothing(
    own_cluster: Cluster,
) -> None:
    asyncio.run(_outage(own_cluster))
