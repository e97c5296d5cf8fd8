"""A broker paused (SIGSTOP) past the proxy's send timeout, then resumed (SIGCONT), under
steady sends through two proxies, on real processes: the sends it held time out, and are
retried on it only (never moved to another broker, where a second copy would be stored
once it resumes and stores the first); every acknowledged message is stored exactly once.
"""

from __future__ import annotations

import asyncio

import pytest

from popmq import AsyncAdmin, AsyncProducer, AsyncSimpleConsumer
from tests.cluster.traffic import SendLog, compare, duplicates, ids_of, receive_ids, send_loop
from tests.support.cluster import Cluster
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(300)

PAUSED_S = 12.0
"""Past the proxies' broker call timeout (10 s) and the SDK's (10 s)."""


async def _paused_broker(cluster: Cluster) -> None:
    topic, group = "paused", "paused-readers"
    async with AsyncAdmin(cluster.endpoint("p1")) as admin:
        await admin.create_topic(topic, queues=2)
    route = await cluster.route_queues(topic)
    logs = [SendLog() for _ in range(4)]
    stop = asyncio.Event()
    async with (
        AsyncProducer(cluster.endpoint("p1")) as p1,
        AsyncProducer(cluster.endpoint("p2")) as p2,
    ):
        # Two send loops through each proxy: a loop waits on a send b2 holds, the others
        # go on (until they too send to b2 before it is found slow).
        senders = [
            asyncio.create_task(send_loop(producer, topic, f"s{i}-", stop, log))
            for i, (producer, log) in enumerate(zip((p1, p1, p2, p2), logs, strict=True))
        ]

        def on_every_broker() -> bool:
            placed = {route[r.queue_id][0] for log in logs for r in log.receipts.values()}
            return placed == set(cluster.brokers)

        await until(on_every_broker, "sends on every broker", 30.0, interval_s=0.1)
        await asyncio.to_thread(cluster.pause, "b2")
        await asyncio.sleep(PAUSED_S)
        await asyncio.to_thread(cluster.resume, "b2")
        await asyncio.sleep(3.0)  # sends go on with b2 back
        stop.set()
        await asyncio.gather(*senders)
    attempted = {i for log in logs for i in log.attempted}
    acknowledged = {i for log in logs for i in log.receipts}
    errors = [e for log in logs for e in log.errors]
    async with AsyncSimpleConsumer(cluster.endpoint("p2"), group=group, topic=topic) as consumer:
        got = await receive_ids(
            consumer, acknowledged, deadline_s=90, invisible_s=60, quiet_polls=2
        )
    received = ids_of(got)
    print(
        f"b2 paused {PAUSED_S:g}s: {len(attempted)} sends, "
        f"{len(acknowledged)} acknowledged, {len(errors)} failed "
        f"({sorted({code for _, _, code in errors})}); {compare(acknowledged, received)}"
    )
    assert not acknowledged - set(received), compare(acknowledged, received)
    assert set(received) <= attempted, compare(acknowledged, received)
    assert duplicates(received) == {}, f"stored twice: {duplicates(received)}"


@pytest.mark.cluster_options(session_ttl_s=20)
def test_a_broker_paused_past_the_send_timeout_stores_each_message_once(
    own_cluster: Cluster,
) -> None:
    asyncio.run(_paused_broker(own_cluster))
