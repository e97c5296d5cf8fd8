"""Pinned lease tokens (what Spark's pop mode does with leaseEndpoints) through an etcd
outage, on real processes (etcd, two standalone `popmq broker`s, two `popmq proxy`s;
tests/support/cluster.py) under a steady stream of sends.

A reader does what the connector does: each batch's lease token goes to one proxy (batch k
to proxy k mod 2), every page read and the ack of it by token (no page ids: Spark's commit
cannot name them) go to that proxy alone, with `pinned`; a batch whose call fails retriably
is read again under the same token through the same proxy (a task retry), and an ack that
fails retriably is repeated (the driver retries acks at later triggers). While etcd is away
both proxies serve and ack their tokens from memory. Meanwhile a batch is read twice through
its proxy (the same pages), its ack repeated (nothing more acked); then one proxy is killed
with a batch read but not acked, its reader retrying that token until the proxy is back,
after etcd. Checked at the end: every sent message was in a committed batch (lost 0), the
messages of attempts nothing acked (the dead proxy's batch, a lease that expired between its
pages) came back and were committed, and no message of a committed batch was read again.
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

pytestmark = pytest.mark.timeout(180)

SESSION_TTL_S = 3
DOWN_S = 3 * SESSION_TTL_S + 1
INVISIBLE_S = 4.0
"""The lease pages' invisible time: what an unacked batch popped comes back after it."""
PAGES = 2
TOPIC, GROUP = "pinned-leases-through-outage", "pinned-readers"


async def _read_batch(
    consumer: AsyncSimpleConsumer, token: str, seen: list[str] | None = None
) -> list[str]:
    """One attempt of a batch, pinned to `consumer`'s proxy; `seen` gets the bodies as
    they come, for a caller whose attempt fails halfway."""
    seen = [] if seen is None else seen
    for page in range(PAGES):
        got = await consumer.receive_lease(
            token,
            page,
            max_messages=16,
            invisible_duration_s=INVISIBLE_S,
            wait_s=0.5,
            pinned=True,
        )
        seen += [m.body.decode() for m in got.messages]
    return seen


async def _outage(cluster: Cluster) -> None:
    p1, p2 = cluster.endpoint("p1"), cluster.endpoint("p2")
    async with AsyncAdmin(p1) as admin:
        await admin.create_topic(TOPIC, queues=2)
        await admin.create_group(GROUP)
    log = SendLog()
    stop_sending, stop_reading = asyncio.Event(), asyncio.Event()
    committed: list[tuple[float, int, list[str]]] = []
    """(when, proxy index, the messages) of every batch whose ack answered OK."""
    partly: set[str] = set()
    """Messages of batches whose ack answered an error: some of them may have been acked."""
    unacked: set[str] = set()
    """Messages of attempts nothing acked: each must come back and be committed."""
    failures: list[tuple[float, str]] = []

    def received() -> set[str]:
        return {m for _, _, batch in committed for m in batch}

    def done(sent: set[str]) -> bool:
        got = received()
        return sent <= got | partly and unacked <= got

    async def commit(
        consumer: AsyncSimpleConsumer, proxy: int, token: str, read: list[str]
    ) -> None:
        while True:  # retried until it answers, as the driver retries acks
            try:
                [result] = await consumer.ack_leases([token], pinned=True)
            except UnavailableError as exc:
                failures.append((time.monotonic(), f"UNAVAILABLE ack: {exc}"))
            else:
                if result.code != "UNAVAILABLE":
                    break
                failures.append((time.monotonic(), f"UNAVAILABLE ack: {result.message}"))
            await asyncio.sleep(0.2)
        if result.ok:
            committed.append((time.monotonic(), proxy, read))
        else:  # some messages expired meanwhile: those come back, the rest were acked
            partly.update(read)
            failures.append((time.monotonic(), f"ack: {result}"))

    async def read(consumers: list[AsyncSimpleConsumer]) -> None:
        batch = 0
        while not stop_reading.is_set():
            token, proxy = f"batch-{batch}", batch % 2
            seen: list[str] = []
            try:
                await _read_batch(consumers[proxy], token, seen)
            except UnavailableError as exc:
                failures.append((time.monotonic(), f"UNAVAILABLE {exc}"))
                await asyncio.sleep(0.2)
                continue  # a task retry: the same token, the same proxy
            except FailedPreconditionError as exc:
                # The lease expired between two of its pages on a slow machine: nothing of
                # it is acked, its messages come back; the next batch goes on.
                unacked.update(seen)
                failures.append((time.monotonic(), f"FAILED_PRECONDITION {exc}"))
            else:
                await commit(consumers[proxy], proxy, token, seen)
            batch += 1

    async with (
        AsyncProducer(p2) as producer,
        AsyncSimpleConsumer(p1, group=GROUP, topic=TOPIC) as c1,
        AsyncSimpleConsumer(p2, group=GROUP, topic=TOPIC) as c2,
    ):
        sender = asyncio.create_task(
            send_loop(producer, TOPIC, "m", stop_sending, log, pause_s=0.02)
        )
        reader = asyncio.create_task(read([c1, c2]))
        await until(lambda: len(received()) >= 20, "lease batches before", 30, interval_s=0.1)

        await asyncio.to_thread(cluster.stop_etcd)
        stopped_at = time.monotonic()

        def through(proxy: int) -> int:
            return sum(1 for t, p, _ in committed if t > stopped_at and p == proxy)

        # etcd stays down until then, however slow the machine.
        await until(
            lambda: min(through(0), through(1)) >= 1 or reader.done(),
            "a lease batch committed through each proxy while etcd is down",
            120,
            interval_s=0.1,
        )
        if reader.done():
            reader.result()

        # Without the promise a proxy still refuses retriably, as before.
        with pytest.raises(UnavailableError, match="etcd"):
            await c2.receive_lease("unpinned", 0, max_messages=4, wait_s=0)
        # One batch read twice through its proxy: the same pages; its ack acks them once.
        first = await _read_batch(c2, "twice")
        assert await _read_batch(c2, "twice") == first
        await commit(c2, 1, "twice", first)
        assert committed[-1][2] == first, failures[-1:]
        [repeat] = await c2.ack_leases(["twice"], pinned=True)  # an answer lost: repeated
        assert repeat.ok and repeat.messages == len(first), repeat
        # p1 dies holding a batch it served from memory and never acked: its messages come
        # back after their invisible time (checked below: nothing is lost).
        orphan = await _read_batch(c1, "orphan")
        unacked.update(orphan)
        killed_at = time.monotonic()
        await asyncio.to_thread(cluster.kill, "p1")

        await asyncio.sleep(max(0.0, stopped_at + DOWN_S - time.monotonic()))
        await asyncio.to_thread(cluster.start_etcd)
        back_at = time.monotonic()
        in_outage = [(t, p) for t, p, _ in committed if stopped_at < t < back_at]
        assert {p for _, p in in_outage} == {0, 1}, in_outage
        failed = [m for t, m in failures if stopped_at <= t <= back_at]
        # Retriable refusals name etcd until p1 dies (then its tasks cannot reach it).
        unavailable = [
            m for t, m in failures if stopped_at <= t < killed_at and m.startswith("UNAVAILABLE")
        ]
        assert all("etcd" in m for m in unavailable), [m for m in unavailable if "etcd" not in m]
        await asyncio.to_thread(cluster.restart, "p1")
        await until(
            lambda: {p for t, p, _ in committed if t > back_at} == {0, 1},
            "lease batches through both proxies after",
            60,
            interval_s=0.1,
        )
        print(
            f"etcd down {back_at - stopped_at:.1f}s: {len(in_outage)} pinned lease batches "
            f"committed meanwhile, {len(failed)} lease calls failed (most retrying p1's token "
            f"while it was dead); a batch read twice: {len(first)} messages; p1 killed holding "
            f"{len(orphan)}; {len(partly)} messages in batches whose ack answered an error"
        )
        stop_sending.set()
        await sender
        sent = set(log.receipts)
        await until(
            lambda: done(sent) or reader.done(),
            "every sent message committed, those of attempts nothing acked again",
            60,
            interval_s=0.2,
        )
        if reader.done():
            reader.result()
        stop_reading.set()
        await reader
    assert log.errors == [], log.errors[:10]
    assert sent <= received() | partly, f"lost: {sorted(sent - received() - partly)[:10]}"
    assert unacked <= received(), f"never came back: {sorted(unacked - received())[:10]}"
    acked: dict[str, int] = {}
    for _, _, batch in committed:
        for message in batch:
            acked[message] = acked.get(message, 0) + 1
    again = {m: n for m, n in acked.items() if n > 1}
    assert not again, f"messages of committed batches read again: {sorted(again)[:10]}"


@pytest.mark.cluster_options(brokers=2, proxies=2, session_ttl_s=SESSION_TTL_S)
def test_pinned_lease_readers_read_and_ack_by_token_through_an_etcd_outage_and_lose_nothing(
    own_cluster: Cluster,
) -> None:
    asyncio.run(_outage(own_cluster))
