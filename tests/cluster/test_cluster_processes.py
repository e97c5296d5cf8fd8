"""Cluster mode on real processes: etcd + 3 `popmq broker` + 2 `popmq proxy` on
loopback (tests/support/cluster.py), shared by the tests of this module, none of which kills
anything. Each test uses its own topics and groups, writes through proxy p1 and checks
through proxy p2 (and the other way round), and compares exact id sets.

The tests that kill processes or stop etcd are in test_cluster_faults.py, each with a
cluster of its own.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from popmq import (
    AsyncAdmin,
    AsyncProducer,
    AsyncSimpleConsumer,
    NotFoundError,
    ReceivedMessage,
    SendReceipt,
)
from tests.cluster.traffic import compare, drain, duplicates, ids_of, receive_ids
from tests.compat.conftest import OfficialClient
from tests.support.cluster import Cluster
from tests.support.waiting import until

QUEUES_PER_BROKER = 2


async def _make_topic(
    cluster: Cluster, topic: str, group: str = "", *, max_delivery_attempts: int | None = None
) -> None:
    """Create the topic (and the group) through p1."""
    async with AsyncAdmin(cluster.endpoint("p1")) as admin:
        await admin.create_topic(topic, queues=QUEUES_PER_BROKER)
        if group:
            await admin.create_group(group, max_delivery_attempts=max_delivery_attempts)


async def _send(
    endpoint: str, topic: str, ids: list[str], *, keys: tuple[str, ...] = ()
) -> dict[str, SendReceipt]:
    """Send each id as its own message (so the proxy spreads them over brokers)."""
    receipts: dict[str, SendReceipt] = {}
    async with AsyncProducer(endpoint) as producer:
        for message_id in ids:
            receipts[message_id] = await producer.send(topic, message_id.encode(), keys=keys)
    return receipts


def _brokers_of(route: list[tuple[str, int]], receipts: dict[str, SendReceipt]) -> set[str]:
    return {route[r.queue_id][0] for r in receipts.values()}


# -- 1. one proxy's sends, another's pops, the first's acks --------------------------------


async def _send_pop_ack_across_proxies(cluster: Cluster) -> None:
    topic, group = "orders", "billing"
    await _make_topic(cluster, topic)  # the group is made by its first pop
    ids = [f"m{n:03d}" for n in range(60)]
    receipts = await _send(cluster.endpoint("p1"), topic, ids)
    route = await cluster.route_queues(topic)
    assert len(route) == 3 * QUEUES_PER_BROKER
    assert _brokers_of(route, receipts) == {"b1", "b2", "b3"}, receipts
    stored = await cluster.stored_per_broker(topic)
    assert set(stored) == {"b1", "b2", "b3"} and all(stored.values()), stored
    assert sum(stored.values()) == len(ids), stored

    async with (
        AsyncSimpleConsumer(cluster.endpoint("p2"), group=group, topic=topic) as via_b,
        AsyncSimpleConsumer(cluster.endpoint("p1"), group=group, topic=topic) as via_a,
        AsyncAdmin(cluster.endpoint("p2")) as admin_b,
    ):
        got = await receive_ids(via_b, ids)
        received = ids_of(got)
        assert set(received) == set(ids), compare(ids, received)
        assert duplicates(received) == {}, compare(ids, received)
        # Each delivery carries the queue (global id) and offset its send was given.
        assert {(m.queue_id, m.offset) for m in got} == {
            (r.queue_id, r.offset) for r in receipts.values()
        }
        lag = await admin_b.get_group_lag(group, topic)
        assert sum(q.inflight for q in lag) == len(ids), lag
        await via_a.ack(got)  # p2's handles, acked through p1
        lag = await admin_b.get_group_lag(group, topic)
        assert [(q.lag, q.inflight) for q in lag if not q.retry] == [(0, 0)] * len(route), lag
        assert await via_b.receive(max_messages=32, wait_s=1) == []


def test_sends_through_one_proxy_are_popped_through_the_other_and_acked_through_the_first(
    cluster: Cluster,
) -> None:
    asyncio.run(_send_pop_ack_across_proxies(cluster))


# -- 4. the official RocketMQ 5 client through the cluster ---------------------------------


def test_official_rocketmq_client_produces_through_one_proxy_and_consumes_through_the_other(
    cluster: Cluster, tmp_path: Path
) -> None:
    topic, group = "rmq-orders", "rmq-billing"
    asyncio.run(_make_topic(cluster, topic))
    bodies = [f"rmq-{n:02d}" for n in range(30)]
    producer = OfficialClient(cluster.endpoint("p1"), tmp_path / "home-p")
    consumer = OfficialClient(cluster.endpoint("p2"), tmp_path / "home-c")
    try:
        produced = producer.run(
            "produce",
            topic=topic,
            messages=[{"body": b, "tag": "T", "keys": [f"k-{b}"]} for b in bodies],
        )["receipts"]
        assert all("error" not in r for r in produced), produced
        sent_ids = {r["message_id"] for r in produced}
        assert len(sent_ids) == len(bodies)
        stored = asyncio.run(cluster.stored_per_broker(topic))
        assert set(stored) == {"b1", "b2", "b3"} and all(stored.values()), stored
        result = consumer.run(
            "simple", topic=topic, group=group, want=len(bodies), action="ack", deadline_s=60
        )
    finally:
        producer.kill_all()
        consumer.kill_all()
    received = result["messages"]
    got = {m["body"] for m in received}
    assert got == set(bodies), f"{sorted(set(bodies) - got)} missing; {result}"
    assert len(received) == len(bodies), f"duplicates: {result}"
    assert {m["message_id"] for m in received} == sent_ids
    assert all(m["tag"] == "T" and m["keys"] == [f"k-{m['body']}"] for m in received)

    async def acked() -> bool:
        async with AsyncAdmin(cluster.endpoint("p1")) as admin:
            rows = await admin.get_group_lag(group, topic)
        return all(q.lag == 0 and q.inflight == 0 for q in rows)

    # The official consumer's acks went to every broker: nothing is left for the group.
    asyncio.run(until(acked, "the official consumer's acks", 10, interval_s=0.1))


# -- 7. admin through any proxy gathers over every broker ----------------------------------


async def _describe_and_lag(cluster: Cluster) -> None:
    topic, group = "described", "describer"
    await _make_topic(cluster, topic, group)
    ids = [f"d{n:02d}" for n in range(30)]
    await _send(cluster.endpoint("p1"), topic, ids)
    route = await cluster.route_queues(topic)
    stored = await cluster.stored_per_broker(topic)
    async with AsyncAdmin(cluster.endpoint("p2")) as admin:
        described = await admin.get_topic(topic)
        assert described.topic.queues == 3 * QUEUES_PER_BROKER
        assert [(q.queue_id, q.broker) for q in described.queues] == [
            (global_id, broker) for global_id, (broker, _) in enumerate(route)
        ], described
        per_broker = dict.fromkeys(stored, 0)
        for queue in described.queues:
            per_broker[queue.broker] += queue.max_offset - queue.min_offset
        assert per_broker == stored, (described, stored)
        assert sum(q.message_count for q in described.queues) == len(ids), described

        # Pop 12 through p1 and ack 5 of them: p2's lag rows show it queue by queue. A pop
        # takes each queue from its head, so what was popped is a prefix of each queue.
        async with AsyncSimpleConsumer(cluster.endpoint("p1"), group=group, topic=topic) as c:
            popped: list[ReceivedMessage] = []
            while len(popped) < 12:
                popped += await c.receive(max_messages=12 - len(popped), wait_s=2)
            await c.ack(popped[:5])
            report = await admin.lag_report(group, topic)
            rows = [q for q in report.queues if not q.retry]
            assert [(q.queue_id, q.broker) for q in rows] == [
                (q.queue_id, q.broker) for q in described.queues
            ], report
            by_queue = {q.queue_id: q for q in described.queues}
            assert all(q.max_offset == by_queue[q.queue_id].max_offset for q in rows), report
            assert sum(q.inflight for q in rows) == 7, report
            (totals,) = report.topics
            assert (totals.topic, totals.inflight) == (topic, 7), report
            await c.ack(popped[5:])
        popped_per_queue = Counter(m.queue_id for m in popped)
        rows = [q for q in await admin.get_group_lag(group, topic) if not q.retry]
        assert {q.queue_id: q.lag for q in rows} == {
            q.queue_id: q.max_offset - popped_per_queue[q.queue_id] for q in described.queues
        }, rows
        assert sum(q.inflight for q in rows) == 0, rows


def test_describe_topic_and_lag_through_one_proxy_cover_the_queues_of_every_broker(
    cluster: Cluster,
) -> None:
    asyncio.run(_describe_and_lag(cluster))


async def _lag_of_a_group_made_by_its_first_pop(cluster: Cluster) -> None:
    topic, group = "first-use", "first-users"
    await _make_topic(cluster, topic)
    ids = [f"u{n:02d}" for n in range(30)]
    receipts = await _send(cluster.endpoint("p1"), topic, ids)
    route = await cluster.route_queues(topic)
    assert _brokers_of(route, receipts) == {"b1", "b2", "b3"}
    async with AsyncSimpleConsumer(cluster.endpoint("p1"), group=group, topic=topic) as c:
        (first,) = await c.receive(max_messages=1, wait_s=5)  # the group's first use
        await c.ack(first)
    # The group exists in the cluster now, so its lag covers every queue of the topic, as
    # a broker reports a group that has not read some queue yet (all of it is lag).
    async with AsyncAdmin(cluster.endpoint("p2")) as admin:
        rows = [q for q in await admin.get_group_lag(group, topic) if not q.retry]
    assert [(q.queue_id, q.broker) for q in rows] == [
        (global_id, broker) for global_id, (broker, _) in enumerate(route)
    ], rows
    assert sum(q.lag for q in rows) == len(ids) - 1, rows


def test_lag_of_a_group_made_by_its_first_pop_covers_the_queues_of_every_broker(
    cluster: Cluster,
) -> None:
    asyncio.run(_lag_of_a_group_made_by_its_first_pop(cluster))


async def _reset_offsets(cluster: Cluster) -> None:
    topic, group = "replayed", "replayer"
    await _make_topic(cluster, topic, group)
    ids = [f"r{n:02d}" for n in range(24)]
    await _send(cluster.endpoint("p1"), topic, ids)
    async with AsyncSimpleConsumer(cluster.endpoint("p1"), group=group, topic=topic) as via_a:
        first = ids_of(await drain(via_a))
    assert set(first) == set(ids) and not duplicates(first), compare(ids, first)
    route = await cluster.route_queues(topic)
    async with AsyncAdmin(cluster.endpoint("p2")) as admin:
        result = await admin.reset_offsets(group, topic, "earliest")
        assert [c.queue_id for c in result.queues] == list(range(len(route))), result
        assert all(c.new_offset == 0 for c in result.queues), result
        assert sum(c.old_offset for c in result.queues) == len(ids), result
    async with AsyncSimpleConsumer(cluster.endpoint("p1"), group=group, topic=topic) as via_a:
        again = ids_of(await drain(via_a))
    assert set(again) == set(ids) and not duplicates(again), compare(ids, again)
    async with AsyncAdmin(cluster.endpoint("p2")) as admin:
        await admin.reset_offsets(group, topic, "earliest")
        await _send(cluster.endpoint("p1"), topic, ["late"])
        await admin.reset_offsets(group, topic, "latest")
        rows = await admin.get_group_lag(group, topic)
        assert all(q.lag == 0 for q in rows), rows
    async with AsyncSimpleConsumer(cluster.endpoint("p1"), group=group, topic=topic) as via_a:
        assert await drain(via_a) == []


def test_reset_offsets_through_one_proxy_moves_the_group_on_every_broker(
    cluster: Cluster,
) -> None:
    asyncio.run(_reset_offsets(cluster))


async def _peek_and_query(cluster: Cluster) -> None:
    topic = "inspected"
    await _make_topic(cluster, topic)
    ids = [f"q{n:02d}" for n in range(18)]
    receipts = await _send(cluster.endpoint("p1"), topic, ids, keys=("shared-key",))
    route = await cluster.route_queues(topic)
    assert _brokers_of(route, receipts) == {"b1", "b2", "b3"}
    async with AsyncAdmin(cluster.endpoint("p2")) as admin:
        peeked = await admin.peek_messages(topic, max_messages=256)
        assert sorted(m.body.decode() for m in peeked) == ids
        assert {(m.message_id, m.queue_id, m.offset) for m in peeked} == {
            (r.message_id, r.queue_id, r.offset) for r in receipts.values()
        }
        for broker in ("b1", "b2", "b3"):
            queue_id = next(r.queue_id for r in receipts.values() if route[r.queue_id][0] == broker)
            one = await admin.peek_messages(topic, queue_id=queue_id, offset=0, max_messages=256)
            want = {i for i, r in receipts.items() if r.queue_id == queue_id}
            assert {m.body.decode() for m in one} == want
            assert {m.queue_id for m in one} == {queue_id}
        for message_id, receipt in receipts.items():
            found = await admin.query_message(topic, receipt.message_id)
            assert (found.body.decode(), found.queue_id, found.offset) == (
                message_id,
                receipt.queue_id,
                receipt.offset,
            )
        by_key = await admin.query_messages_by_key(topic, "shared-key")
        assert sorted(m.body.decode() for m in by_key) == ids
        assert await admin.query_messages_by_key(topic, "nobody") == []
        try:
            await admin.query_message(topic, "0" * 32)
        except NotFoundError:
            pass
        else:
            raise AssertionError("a message id nobody sent was found")


def test_peek_and_queries_by_id_and_key_through_one_proxy_find_messages_of_every_broker(
    cluster: Cluster,
) -> None:
    asyncio.run(_peek_and_query(cluster))


async def _redrive(cluster: Cluster) -> None:
    topic, group = "poison", "poisoned"
    await _make_topic(cluster, topic, group, max_delivery_attempts=1)
    ids = [f"x{n:02d}" for n in range(12)]
    receipts = await _send(cluster.endpoint("p1"), topic, ids)
    route = await cluster.route_queues(topic)
    assert _brokers_of(route, receipts) == {"b1", "b2", "b3"}
    async with (
        AsyncSimpleConsumer(cluster.endpoint("p2"), group=group, topic=topic) as via_b,
        AsyncSimpleConsumer(cluster.endpoint("p1"), group=group, topic=topic) as via_a,
    ):
        got = await receive_ids(via_b, ids)
        assert ids_of(got) == {i: 1 for i in ids}, compare(ids, ids_of(got))
        for message in got:
            await via_a.nack(message, delay_s=0)  # p2's handles, given back through p1
    dlq = f"%DLQ%{group}"
    async with AsyncAdmin(cluster.endpoint("p2")) as admin:

        async def all_dead() -> bool:
            return (await admin.lag_report(group)).dlq_depth == len(ids)

        await until(all_dead, "the nacked messages to be dead-lettered", 30.0, interval_s=0.1)
        dead = await admin.peek_messages(dlq, max_messages=256)
        assert sorted(m.body.decode() for m in dead) == ids
        assert {m.origin_topic for m in dead} == {topic}
        # Each broker dead-letters what it revived into its own DLQ queue.
        assert len({m.queue_id for m in dead}) == 3, dead
        await admin.update_group(group, max_delivery_attempts=5)
        partial = await admin.redrive_dead_letters(group, max_messages=4)
        assert (partial.moved, partial.dropped, partial.remaining) == (4, 0, len(ids) - 4)
        rest = await admin.redrive_dead_letters(group)
        assert (rest.moved, rest.dropped, rest.remaining) == (len(ids) - 4, 0, 0)
        assert (await admin.lag_report(group)).dlq_depth == 0
    async with AsyncSimpleConsumer(cluster.endpoint("p1"), group=group, topic=topic) as via_a:
        back = await receive_ids(via_a, ids)
        assert ids_of(back) == {i: 1 for i in ids}, compare(ids, ids_of(back))
        assert {m.delivery_attempt for m in back} == {1}
        await via_a.ack(back)


def test_dead_letters_of_every_broker_are_listed_and_redriven_through_the_other_proxy(
    cluster: Cluster,
) -> None:
    asyncio.run(_redrive(cluster))


async def _purge(cluster: Cluster) -> None:
    topic = "purged"
    await _make_topic(cluster, topic)
    ids = [f"p{n:02d}" for n in range(15)]
    receipts = await _send(cluster.endpoint("p1"), topic, ids)
    stored = await cluster.stored_per_broker(topic)
    assert set(stored) == {"b1", "b2", "b3"} and sum(stored.values()) == len(ids), stored
    route = await cluster.route_queues(topic)
    async with AsyncAdmin(cluster.endpoint("p2")) as admin:
        # One queue first (on whichever broker holds it), then the rest of the topic.
        queue_id = next(iter(receipts.values())).queue_id
        in_queue = sum(1 for r in receipts.values() if r.queue_id == queue_id)
        assert await admin.purge_topic(topic, queue_id) == in_queue
        left = await admin.peek_messages(topic, max_messages=256)
        assert len(left) == len(ids) - in_queue
        assert queue_id not in {m.queue_id for m in left}
        assert await admin.purge_topic(topic) == len(ids) - in_queue
        assert await admin.peek_messages(topic, max_messages=256) == []
        described = await admin.get_topic(topic)
        assert all(q.message_count == 0 for q in described.queues), described
    remaining = await cluster.stored_per_broker(topic)
    assert remaining == {"b1": 0, "b2": 0, "b3": 0}, (remaining, route)


def test_purge_through_one_proxy_empties_the_topic_on_every_broker(cluster: Cluster) -> None:
    asyncio.run(_purge(cluster))
