"""A topic deleted and created again while a broker was away (real etcd, two `popmq broker`
processes and a `popmq proxy`, tests/support/cluster.py).

b2 holds messages of the topic's first incarnation and is stopped; the topic is deleted and
created again through the proxy (on b1 alone: b2 is not live). When b2 is back, its catalog
sync finds its local topic to be the part of another incarnation of the route (another
create time) and deletes it with its messages; spread to b2 again, the topic starts there
empty, and a consumer of the new topic receives every new message and none of the old ones.

Deleted while b2 was away but created again only once b2 is back: b2 kept the old topic (an
orphan, served by no route) until the proxy's push of the new route, which carries the
route's create time, replaced it; again no old message is served.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from popmq import AsyncAdmin, AsyncProducer, AsyncSimpleConsumer
from popmq.broker_core.errors import NotFoundError as BrokerNotFoundError
from popmq.broker_core.errors import UnavailableError as BrokerUnavailableError
from popmq.cluster import RemoteBroker
from tests.cluster.traffic import compare, receive_ids
from tests.support.cluster import Cluster

pytestmark = pytest.mark.timeout(240)

TOPIC = "orders"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path / "cluster", brokers=2, proxies=1, session_ttl_s=3)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


async def _send(endpoint: str, ids: list[str]) -> None:
    async with AsyncProducer(endpoint) as producer:
        for message_id in ids:
            await producer.send(TOPIC, message_id.encode())


def _log_has(cluster: Cluster, name: str, text: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in cluster.processes[name].log_path.read_text(errors="replace"):
            return True
        time.sleep(0.1)
    return False


async def _local_topic_on(cluster: Cluster, broker: str) -> bool:
    """Whether `broker`'s own store holds the topic (asked over its BrokerService; a call
    that found no answer, on a loaded machine, is asked again)."""
    remote = RemoteBroker(cluster.broker_address(broker), call_timeout_s=10.0, catalog=False)
    await remote.start()
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                await remote.get_topic(TOPIC)
            except BrokerNotFoundError:
                return False
            except BrokerUnavailableError:
                assert time.monotonic() < deadline, f"{broker} never answered"
                await asyncio.sleep(0.5)
                continue
            return True
    finally:
        await remote.close()


def test_a_topic_created_again_while_a_broker_was_away_never_serves_its_old_messages(
    cluster: Cluster,
) -> None:
    endpoint = cluster.endpoint("p1")

    async def first_incarnation() -> None:
        async with AsyncAdmin(endpoint) as admin:
            await admin.create_topic(TOPIC, queues=2)
        await _send(endpoint, [f"old-{n:02d}" for n in range(40)])

    asyncio.run(first_incarnation())
    assert sorted(q[0] for q in asyncio.run(cluster.route_queues(TOPIC))) == ["b1"] * 2 + ["b2"] * 2
    # (The proxy's push created b2's part with the route's create time.)
    assert asyncio.run(cluster.stored_per_broker(TOPIC))["b2"] > 0

    assert cluster.terminate("b2") == 0
    cluster.wait_deregistered("b2")
    new = [f"new-{n:02d}" for n in range(20)]

    async def second_incarnation() -> None:
        async with AsyncAdmin(endpoint) as admin:
            # Forced: messages in flight cannot be counted on a broker that is away.
            await admin.delete_topic(TOPIC, force=True)
            await admin.create_topic(TOPIC, queues=2)
        await _send(endpoint, new)

    asyncio.run(second_incarnation())
    assert [q[0] for q in asyncio.run(cluster.route_queues(TOPIC))] == ["b1", "b1"]

    cluster.restart("b2")
    assert _log_has(cluster, "b2", "deleted and created again while this broker was away", 10.0)
    assert not asyncio.run(_local_topic_on(cluster, "b2")), "b2 still holds the old topic"

    # The new topic spread to b2: its queues there start empty.
    later = [f"later-{n:02d}" for n in range(40)]

    async def spread_and_consume() -> list[str]:
        async with AsyncAdmin(endpoint) as admin:
            await admin.update_topic(TOPIC, 2, broker="b2")
            await admin.create_group("fresh")  # consume_from first: every stored message
        await _send(endpoint, later)
        async with AsyncSimpleConsumer(endpoint, group="fresh", topic=TOPIC) as consumer:
            got = await receive_ids(consumer, new + later, quiet_polls=2)
        return [m.body.decode() for m in got]

    received = asyncio.run(spread_and_consume())
    assert sorted(q[0] for q in asyncio.run(cluster.route_queues(TOPIC))) == ["b1"] * 2 + ["b2"] * 2
    stored = asyncio.run(cluster.stored_per_broker(TOPIC))
    assert stored["b2"] > 0 and sum(stored.values()) == len(new + later), stored
    assert [body for body in received if body.startswith("old-")] == []
    assert set(received) == set(new + later), compare(new + later, Counter(received))


def test_a_topic_created_again_once_a_broker_is_back_replaces_the_old_one_it_kept(
    cluster: Cluster,
) -> None:
    endpoint = cluster.endpoint("p1")

    async def first_incarnation() -> None:
        async with AsyncAdmin(endpoint) as admin:
            await admin.create_topic(TOPIC, queues=2)
        await _send(endpoint, [f"old-{n:02d}" for n in range(40)])

    asyncio.run(first_incarnation())
    assert asyncio.run(cluster.stored_per_broker(TOPIC))["b2"] > 0
    assert cluster.terminate("b2") == 0
    cluster.wait_deregistered("b2")

    async def delete() -> None:
        async with AsyncAdmin(endpoint) as admin:
            await admin.delete_topic(TOPIC, force=True)

    asyncio.run(delete())
    # Back with no route for it: the old topic is an orphan, kept and served by no route.
    cluster.restart("b2")
    assert _log_has(cluster, "b2", f"topics/{TOPIC}", 10.0), cluster.logs()
    assert asyncio.run(_local_topic_on(cluster, "b2"))

    new = [f"new-{n:02d}" for n in range(40)]

    async def second_incarnation() -> list[str]:
        async with AsyncAdmin(endpoint) as admin:
            # b2 is live: the proxy's push of the new route replaces its old topic.
            await admin.create_topic(TOPIC, queues=2)
            await admin.create_group("fresh")  # consume_from first: every stored message
        await _send(endpoint, new)
        async with AsyncSimpleConsumer(endpoint, group="fresh", topic=TOPIC) as consumer:
            got = await receive_ids(consumer, new, quiet_polls=2)
        return [m.body.decode() for m in got]

    received = asyncio.run(second_incarnation())
    assert _log_has(cluster, "b2", "deleted and created again while this broker was away", 1.0)
    assert sorted(q[0] for q in asyncio.run(cluster.route_queues(TOPIC))) == ["b1"] * 2 + ["b2"] * 2
    stored = asyncio.run(cluster.stored_per_broker(TOPIC))
    assert stored["b2"] > 0 and sum(stored.values()) == len(new), stored
    assert [body for body in received if body.startswith("old-")] == []
    assert set(received) == set(new), compare(new, Counter(received))
