"""kill -9 of a proxy under SDK clients configured with both proxies.

The producer and consumer take the endpoint list `"HOST1:PORT1,HOST2:PORT2"` (the SDK's
multi-endpoint failover) and work through the first proxy; the test kills it with kill -9 in
the middle of a steady send loop and a receive-and-ack loop. Both clients go on through the
second proxy: no send fails, receiving continues, and every acknowledged send is received
(messages popped through the dead proxy and not acked come back after their invisible time).

This file needs the SDK's endpoint lists (branch `sdkfailover`); without them the clients
refuse the endpoint string and the test fails.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter

import pytest

from popmq import AsyncAdmin, AsyncProducer, AsyncSimpleConsumer, PopMQError, ReceivedMessage
from tests.cluster.traffic import SendLog, compare, ids_of, send_loop
from tests.support.cluster import Cluster
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(240)

RESUME_WITHIN_S = 5.0
"""A generous bound of the pause of sends while the client moves to the other proxy."""
_OK_CALLS = re.compile(
    r'^popmq_rpc_duration_seconds_count\{code="OK",method="popmq\.v1\.MessagingService/'
    r'(\w+(?:/\w+)?)"\} ([0-9.e+]+)$',
    re.MULTILINE,
)


def _ok_calls(cluster: Cluster, proxy: str) -> dict[str, float]:
    """Messaging calls a proxy answered OK, by method (from its Prometheus metrics)."""
    return {m: float(n) for m, n in _OK_CALLS.findall(cluster.metrics(proxy))}


async def _proxy_killed(cluster: Cluster) -> None:
    topic, group = "failover", "failover-readers"
    both = ",".join(cluster.endpoints)
    async with AsyncAdmin(cluster.endpoint("p2")) as admin:
        await admin.create_topic(topic, queues=2)
    log = SendLog()
    stop = asyncio.Event()
    # Set once the send loop has returned: no send is in flight and the receipts are final.
    # Stopping is not enough: a send in flight when `stop` is set is acknowledged after it,
    # and a consumer that compared with the receipts before then would miss that message.
    sends_over = asyncio.Event()
    received: list[tuple[float, ReceivedMessage]] = []
    seen: set[str] = set()
    receive_errors: Counter[str] = Counter()

    async def consume(consumer: AsyncSimpleConsumer) -> None:
        """Receive and ack until the sends are over and every acknowledged id came."""
        while not sends_over.is_set() or not seen >= log.receipts.keys():
            try:
                batch = await consumer.receive(max_messages=32, invisible_duration_s=4, wait_s=1)
            except PopMQError as exc:
                receive_errors[exc.code] += 1
                await asyncio.sleep(0.05)
                continue
            # Received counts before the ack: an ack through the proxy being killed can
            # reach the broker and lose its answer, and then the message never comes again.
            received.extend((time.monotonic(), m) for m in batch)
            seen.update(m.body.decode() for m in batch)
            try:
                await consumer.ack(batch)
            except PopMQError as exc:
                receive_errors[exc.code] += 1  # not acked: the batch comes back when invisible

    async with (
        AsyncProducer(both) as producer,
        AsyncSimpleConsumer(both, group=group, topic=topic) as consumer,
    ):
        sender = asyncio.create_task(send_loop(producer, topic, "f", stop, log, pause_s=0.01))
        receiver = asyncio.create_task(consume(consumer))

        async def flowing() -> bool:
            return len(log.receipts) >= 50 and len(received) >= 20

        await until(flowing, "sends and receives through p1", 30.0, interval_s=0.1)
        # The clients work through the first endpoint, the one about to die.
        served = await asyncio.to_thread(_ok_calls, cluster, "p1")
        assert served.get("SendStream", 0) >= 10 and served.get("PopStream/Ack", 0) >= 1, served
        killed_at = time.monotonic()
        await asyncio.to_thread(cluster.kill, "p1")
        await asyncio.sleep(4.0)
        stopped_at = time.monotonic()
        stop.set()
        try:
            await sender
        finally:
            sends_over.set()
        try:
            await asyncio.wait_for(receiver, 40)
        except TimeoutError:
            pass  # the assertions below say what is missing
    sent = set(log.receipts)
    got = ids_of(m for _, m in received)
    after_kill = [m for t, m in received if t > killed_at + 1.0]
    print(
        f"sends {len(log.attempted)}, acknowledged {len(sent)}, errors {dict(log.error_codes())}; "
        f"longest gap without a successful send after the kill "
        f"{log.longest_gap(killed_at, stopped_at):.2f}s; receive errors {dict(receive_errors)}; "
        f"{compare(sent, got)}"
    )
    assert log.errors == [], f"sends failed after the proxy died: {log.errors[:10]}"
    assert log.longest_gap(killed_at, stopped_at) <= RESUME_WITHIN_S
    assert after_kill, "nothing was received after the proxy died"
    assert set(got) == sent, compare(sent, got)


@pytest.mark.cluster_options(proxy_args=("--metrics-listen", "127.0.0.1:0"))
def test_clients_with_both_proxies_go_on_when_one_is_killed(own_cluster: Cluster) -> None:
    asyncio.run(_proxy_killed(own_cluster))
