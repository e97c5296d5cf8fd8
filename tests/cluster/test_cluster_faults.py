"""Cluster mode under faults, on real processes: a broker killed with kill -9
during steady sends, acks of a dead broker's handles, etcd stopped and started again. Each
test has a cluster of its own (etcd + 3 brokers + 2 proxies, tests/support/cluster.py) with
a short session TTL, so a dead broker's lease lapses within seconds.

Every test compares exact id sets: what was acknowledged to the producer must be received
(lost = 0), nothing unsent may arrive, and duplicates are counted and printed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from popmq import (
    AsyncAdmin,
    AsyncProducer,
    AsyncSimpleConsumer,
    PopMQError,
    ReceivedMessage,
    UnavailableError,
)
from popmq.coordination import EtcdCoordinator, RouteCache
from tests.cluster.traffic import (
    SendLog,
    compare,
    drain,
    duplicates,
    ids_of,
    receive_ids,
    send_loop,
)
from tests.support.cluster import Cluster
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(240)

RESUME_WITHIN_S = 2.0
"""After a broker dies, sends go on through the other brokers within this."""


async def _writable_brokers(cluster: Cluster, topic: str) -> set[str]:
    """The brokers with writable queues of `topic`, as a route cache following etcd (what
    each proxy runs) computes them now."""
    async with (
        EtcdCoordinator(cluster.etcd.endpoint) as coordinator,
        RouteCache(coordinator) as routes,
    ):
        return set(routes.writable_queues(topic))


# -- 2. kill -9 of a broker during a steady send loop --------------------------------------


async def _broker_killed_during_sends(cluster: Cluster) -> None:
    topic, group = "steady", "steady-readers"
    p1, p2 = cluster.endpoint("p1"), cluster.endpoint("p2")
    async with AsyncAdmin(p1) as admin:
        await admin.create_topic(topic, queues=2)
    route = await cluster.route_queues(topic)
    on_b2 = {g for g, (broker, _) in enumerate(route) if broker == "b2"}
    log = SendLog()
    stop = asyncio.Event()
    async with (
        AsyncProducer(p1) as producer,
        AsyncSimpleConsumer(p2, group=group, topic=topic) as consumer,
    ):
        sender = asyncio.create_task(send_loop(producer, topic, "s", stop, log))
        await until(
            lambda: {route[r.queue_id][0] for r in log.receipts.values()} == set(cluster.brokers),
            "sends on every broker",
            30.0,
            interval_s=0.1,
        )
        # Messages popped and left unacked, some of them on b2: they must come back.
        held: list[ReceivedMessage] = []
        while not any(m.queue_id in on_b2 for m in held):
            held += await consumer.receive(max_messages=32, invisible_duration_s=5, wait_s=2)
        await asyncio.sleep(0.5)

        killed_at = time.monotonic()
        await asyncio.to_thread(cluster.kill, "b2")
        lapsed_after_s = await asyncio.to_thread(cluster.wait_deregistered, "b2")
        assert lapsed_after_s <= cluster.session_ttl_s + 3, lapsed_after_s
        assert await _writable_brokers(cluster, topic) == {"b1", "b3"}

        async def proxy_dropped_b2() -> bool:
            # A proxy that dropped b2 from its live brokers names it as not live.
            try:
                async with AsyncAdmin(p1) as admin:
                    await admin.get_topic(topic)
            except UnavailableError as exc:
                return "b2" in str(exc) and "live" in str(exc)
            return False

        await until(proxy_dropped_b2, "p1 to drop b2 from its live brokers", 10, interval_s=0.1)
        await asyncio.sleep(1.0)  # sends go on with b2 out of the routes
        lapsed_at = time.monotonic()
        stop.set()
        await sender

        print(
            f"sends: {len(log.attempted)} attempted, {len(log.receipts)} acknowledged, errors "
            f"{dict(log.error_codes())}; b2 deregistered {lapsed_after_s:.1f}s after the kill; "
            f"longest gap without a successful send after the kill "
            f"{log.longest_gap(killed_at, lapsed_at):.2f}s"
        )
        assert log.errors == [], f"sends failed after the kill: {log.errors[:10]}"
        assert log.longest_gap(killed_at, lapsed_at) <= RESUME_WITHIN_S
        after_kill = [r for i, r in log.receipts.items() if log.done_at[i] > killed_at + 0.5]
        assert after_kill, "no send completed after the kill"
        assert not [r for r in after_kill if r.queue_id in on_b2], "a send went to dead b2"

        await asyncio.to_thread(cluster.restart, "b2")
        # Everything acknowledged comes back, b2's stored and unacked messages included.
        sent = set(log.receipts)
        got = await receive_ids(consumer, sent, deadline_s=60, invisible_s=30)
        received = ids_of(got)
        await consumer.ack(got)
    held_ids = {m.body.decode() for m in held}
    missing = sent - set(received)
    print(f"received after the restart: {compare(sent, received)}; held before the kill "
          f"{len(held_ids)} ({len([m for m in held if m.queue_id in on_b2])} on b2)")  # fmt: skip
    assert not missing, compare(sent, received)
    assert set(received) <= set(log.attempted), compare(sent, received)
    # Held messages of b2 were delivered again (after the restart); b1's and b3's after
    # their invisible time.
    assert held_ids <= set(received), sorted(held_ids - set(received))
    if duplicates(received):
        print(f"duplicates (allowed: at-least-once): {duplicates(received)}")


def test_a_broker_killed_during_steady_sends_costs_no_send_and_no_message(
    own_cluster: Cluster,
) -> None:
    asyncio.run(_broker_killed_during_sends(own_cluster))


# -- 6. acks of a dead broker's handles; its in-flight messages come back -------------------


async def _acks_while_broker_is_dead(cluster: Cluster) -> None:
    topic, group = "inflight", "inflight-readers"
    p1, p2 = cluster.endpoint("p1"), cluster.endpoint("p2")
    async with AsyncAdmin(p1) as admin:
        await admin.create_topic(topic, queues=2)
    route = await cluster.route_queues(topic)
    ids = [f"i{n:02d}" for n in range(30)]
    async with AsyncProducer(p1) as producer:
        receipts = {i: await producer.send(topic, i.encode()) for i in ids}
    on_b3 = {i for i, r in receipts.items() if route[r.queue_id][0] == "b3"}
    assert on_b3 and len(on_b3) < len(ids), receipts
    async with (
        AsyncSimpleConsumer(p2, group=group, topic=topic) as via_b,
        AsyncSimpleConsumer(p1, group=group, topic=topic) as via_a,
    ):
        popped = await receive_ids(via_b, ids, invisible_s=8)
        assert ids_of(popped) == {i: 1 for i in ids}, compare(ids, ids_of(popped))
        await asyncio.to_thread(cluster.kill, "b3")

        async def ack_each(messages: list[ReceivedMessage]) -> dict[str, PopMQError]:
            failed: dict[str, PopMQError] = {}
            for message in messages:
                try:
                    await via_a.ack(message)
                except PopMQError as exc:
                    failed[message.body.decode()] = exc
            return failed

        # Before b3's lease lapses (the proxies still list it) and after: its handles fail
        # with a retriable UNAVAILABLE naming it; the others' acks succeed.
        first = [m for m in popped if m.body.decode() in on_b3][:2]
        early = await ack_each(first)
        await asyncio.to_thread(cluster.wait_deregistered, "b3")
        await asyncio.sleep(0.5)  # the proxies' watches deliver the lapse
        late = await ack_each([m for m in popped if m not in first])
        failures = {**early, **late}
        for name, errors in (("before the lease lapsed", early), ("after", late)):
            print(f"acks of b3's handles {name}: " + "; ".join(
                f"{i}: {type(e).__name__} {e.code} {e}" for i, e in sorted(errors.items())[:2]
            ))  # fmt: skip
        assert set(failures) == on_b3, (sorted(failures), sorted(on_b3))
        for message_id, error in failures.items():
            assert isinstance(error, UnavailableError), (message_id, error)
            assert error.retriable and error.code == "UNAVAILABLE"
            named = ("b3", cluster.broker_address("b3"))
            assert any(n in str(error) for n in named), f"names no dead broker: {error}"

        await asyncio.to_thread(cluster.restart, "b3")
        # At-least-once: b3's unacked messages come back, and nothing acked does.
        back = await receive_ids(via_b, on_b3, deadline_s=30, invisible_s=30, quiet_polls=2)
        again = ids_of(back)
        print(f"after the restart: {compare(on_b3, again)}; delivery attempts "
              f"{sorted({m.delivery_attempt for m in back})}")  # fmt: skip
        assert set(again) == on_b3, compare(on_b3, again)
        await via_a.ack(back)
    async with AsyncAdmin(p2) as admin:
        rows = await admin.get_group_lag(group, topic)
    assert all(q.lag == 0 and q.inflight == 0 for q in rows), rows


def test_acks_of_a_dead_brokers_handles_fail_unavailable_and_its_messages_come_back(
    own_cluster: Cluster,
) -> None:
    asyncio.run(_acks_while_broker_is_dead(own_cluster))


# -- 5. etcd stopped and started again ------------------------------------------------------


async def _etcd_restarted(cluster: Cluster) -> None:
    topic, group = "cached", "cached-readers"
    p1, p2 = cluster.endpoint("p1"), cluster.endpoint("p2")
    async with AsyncAdmin(p1) as admin:
        await admin.create_topic(topic, queues=2)
    log = SendLog()
    stop = asyncio.Event()
    async with (
        AsyncProducer(p1) as via_a,
        AsyncProducer(p2) as via_b,
        AsyncSimpleConsumer(p2, group=group, topic=topic) as consumer,
    ):
        senders = [
            asyncio.create_task(send_loop(via_a, topic, "a", stop, log, pause_s=0.02)),
            asyncio.create_task(send_loop(via_b, topic, "b", stop, log, pause_s=0.02)),
        ]
        received: list[ReceivedMessage] = []

        async def consume_for(seconds: float) -> int:
            """Receive and ack for `seconds`; returns how many came."""
            count = 0
            give_up = time.monotonic() + seconds
            while time.monotonic() < give_up:
                batch = await consumer.receive(max_messages=32, invisible_duration_s=20, wait_s=1)
                await consumer.ack(batch)
                received.extend(batch)
                count += len(batch)
            return count

        await consume_for(1.0)
        await asyncio.to_thread(cluster.stop_etcd)
        stopped_at = time.monotonic()
        acked_before = len(log.receipts)
        # etcd is down (well under the 20 s session TTL, so no broker fences its writes):
        # traffic goes on on cached routes, and metadata writes fail retriably.
        assert await consume_for(3.0) > 0
        sent_while_down = len(log.receipts) - acked_before
        async with AsyncAdmin(p1, timeout_s=20) as admin:
            try:
                await admin.create_topic("during-outage", queues=1)
            except PopMQError as exc:
                print(f"create_topic while etcd is down: {exc.code} {exc}")
                assert exc.retriable, exc
            else:
                raise AssertionError("a topic was created while etcd was down")
        down_s = time.monotonic() - stopped_at
        await asyncio.to_thread(cluster.start_etcd)
        print(f"etcd down {down_s:.1f}s: {sent_while_down} sends acknowledged meanwhile")
        assert sent_while_down > 0

        # The watches recover: a topic created through p1 is served through p2.
        async with AsyncAdmin(p1, timeout_s=20) as admin:
            await _retry_unavailable(lambda: admin.create_topic("after-outage", queues=1))
        async with AsyncAdmin(p2) as admin:

            async def p2_serves_it() -> bool:
                try:
                    described = await admin.get_topic("after-outage")
                except PopMQError:
                    return False
                return described.topic.queues == len(cluster.brokers)

            await until(
                p2_serves_it, "p2 to serve the topic made after the outage", 30.0, interval_s=0.1
            )
        async with (
            AsyncProducer(p2) as producer,
            AsyncSimpleConsumer(p1, group=group, topic="after-outage") as fresh,
        ):
            late = [f"late{n}" for n in range(6)]
            for message_id in late:
                await producer.send("after-outage", message_id.encode())
            got = await receive_ids(fresh, late)
            assert ids_of(got) == {i: 1 for i in late}, compare(late, ids_of(got))
            await fresh.ack(got)

        await consume_for(1.0)
        stop.set()
        await asyncio.gather(*senders)
        received += await drain(consumer)
    assert await cluster.live_brokers() == ["b1", "b2", "b3"]
    sent = set(log.receipts)
    got_ids = ids_of(received)
    print(f"sends {len(log.attempted)}, errors {dict(log.error_codes())}; {compare(sent, got_ids)}")
    assert log.errors == [], f"sends failed: {log.errors[:10]}"
    assert set(got_ids) == sent, compare(sent, got_ids)


async def _retry_unavailable(
    call: Callable[[], Awaitable[object]], timeout_s: float = 20.0
) -> None:
    """Repeat an admin write that etcd's return may still refuse (UNAVAILABLE) at first."""
    give_up = time.monotonic() + timeout_s
    while True:
        try:
            await call()
        except UnavailableError:
            if time.monotonic() > give_up:
                raise
            await asyncio.sleep(0.2)
        else:
            return


@pytest.mark.cluster_options(session_ttl_s=20)
def test_traffic_goes_on_while_etcd_is_down_and_the_watches_recover_after(
    own_cluster: Cluster,
) -> None:
    asyncio.run(_etcd_restarted(own_cluster))
