"""POP semantics end to end: the real server, the real store, the SDK."""

from __future__ import annotations

import time

import pytest

from popmq import Admin, FailedPreconditionError, Message, Producer, SimpleConsumer
from tests.support.server_thread import ServerThread
from tests.support.waiting import wait_until


def _setup(endpoint: str, topic: str = "orders", queues: int = 4) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic(topic, queues=queues)


def test_sent_message_is_popped_with_its_fields_and_acked(endpoint: str) -> None:
    _setup(endpoint)
    with Producer(endpoint) as producer:
        receipt = producer.send(
            "orders", b"body", tag="TagA", keys=["k1"], properties={"region": "eu"}
        )
    with SimpleConsumer(endpoint, group="billing", topic="orders") as consumer:
        messages = consumer.receive(max_messages=32, invisible_duration_s=30, wait_s=5)
        assert len(messages) == 1
        msg = messages[0]
        assert (msg.message_id, msg.topic, msg.queue_id, msg.offset) == (
            receipt.message_id,
            "orders",
            receipt.queue_id,
            receipt.offset,
        )
        assert (msg.body, msg.tag, msg.keys, msg.properties) == (
            b"body",
            "TagA",
            ("k1",),
            {"region": "eu"},
        )
        assert msg.delivery_attempt == 1
        assert msg.store_timestamp >= msg.born_timestamp
        consumer.ack(msg)
        assert consumer.receive(wait_s=0) == []
    with Admin(endpoint) as admin:
        lag = [row for row in admin.get_group_lag("billing") if not row.retry]
    assert sum(row.lag for row in lag) == 0
    assert sum(row.inflight for row in lag) == 0


def test_unacked_message_comes_back_after_invisible_time_not_before(endpoint: str) -> None:
    _setup(endpoint)
    with Producer(endpoint) as producer:
        producer.send("orders", b"once")
    with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
        first = consumer.receive(invisible_duration_s=2, wait_s=5)
        popped_at = time.monotonic()
        assert [m.delivery_attempt for m in first] == [1]
        assert consumer.receive(wait_s=1.5) == []  # still invisible
        again = consumer.receive(invisible_duration_s=30, wait_s=5)
        elapsed = time.monotonic() - popped_at
        assert [m.message_id for m in again] == [first[0].message_id]
        assert again[0].delivery_attempt == 2
        assert again[0].body == b"once"
        assert 1.9 <= elapsed < 4.0
        consumer.ack(again[0])


def test_change_invisible_duration_extends_and_old_handle_is_rejected(endpoint: str) -> None:
    _setup(endpoint)
    with Producer(endpoint) as producer:
        producer.send("orders", b"x")
    with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
        (msg,) = consumer.receive(invisible_duration_s=1, wait_s=5)
        old_handle = msg.receipt_handle
        consumer.change_invisible_duration(msg, 4)
        assert msg.receipt_handle != old_handle
        with pytest.raises(FailedPreconditionError, match="superseded"):
            consumer.ack(_with_handle(msg, old_handle))
        assert consumer.receive(wait_s=2) == []  # not redelivered at the old deadline
        with pytest.raises(FailedPreconditionError, match="superseded"):
            consumer.ack(_with_handle(msg, old_handle))  # still superseded, not "expired"
        consumer.ack(msg)
        consumer.ack(msg)  # a repeated ack of the same valid handle is idempotent
        with pytest.raises(FailedPreconditionError, match=r"superseded|expired"):
            consumer.ack(_with_handle(msg, old_handle))  # never a silent success
        assert consumer.receive(wait_s=3) == []


def test_change_invisible_duration_shortens(endpoint: str) -> None:
    _setup(endpoint)
    with Producer(endpoint) as producer:
        producer.send("orders", b"x")
    with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
        (msg,) = consumer.receive(invisible_duration_s=60, wait_s=5)
        started = time.monotonic()
        consumer.change_invisible_duration(msg, 1)
        (again,) = consumer.receive(wait_s=5)
        assert time.monotonic() - started < 3
        assert again.delivery_attempt == 2


def test_nack_with_delay_and_with_group_backoff(endpoint: str) -> None:
    _setup(endpoint)
    with Admin(endpoint) as admin:
        admin.create_group("g", retry_backoff_s=[1, 2])
    with Producer(endpoint) as producer:
        producer.send("orders", b"x")
    with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
        (msg,) = consumer.receive(invisible_duration_s=60, wait_s=5)
        started = time.monotonic()
        consumer.nack(msg, delay_s=0)
        (again,) = consumer.receive(invisible_duration_s=60, wait_s=5)
        assert time.monotonic() - started < 1
        assert again.delivery_attempt == 2
        started = time.monotonic()
        consumer.nack(again)  # attempt 2 -> backoff entry 2 = 2 s
        assert consumer.receive(wait_s=1.5) == []
        (third,) = consumer.receive(wait_s=5)
        assert 1.9 <= time.monotonic() - started < 4
        assert third.delivery_attempt == 3


def test_message_goes_to_dlq_after_max_attempts_and_is_readable(endpoint: str) -> None:
    _setup(endpoint)
    with Admin(endpoint) as admin:
        admin.create_group("g", max_delivery_attempts=3)
    with Producer(endpoint) as producer:
        sent = producer.send("orders", b"poison")
    with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
        for attempt in (1, 2, 3):
            (msg,) = consumer.receive(invisible_duration_s=60, wait_s=5)
            assert msg.delivery_attempt == attempt
            consumer.nack(msg, delay_s=0)
        assert consumer.receive(wait_s=1) == []
    with SimpleConsumer(endpoint, group="inspector", topic="%DLQ%g") as dlq:
        (dead,) = dlq.receive(wait_s=5)
        assert dead.message_id == sent.message_id
        assert dead.body == b"poison"
        dlq.ack(dead)
    with Admin(endpoint) as admin:
        assert "%DLQ%g" in [t.name for t in admin.list_topics()]


def test_held_long_poll_wakes_within_50ms_of_a_send(endpoint: str) -> None:
    """Median of five wakes under 50 ms, each under 1 s: woken by the arrival, not a sweep."""
    import statistics
    import threading

    _setup(endpoint, queues=1)
    delays: list[float] = []
    with (
        SimpleConsumer(endpoint, group="g", topic="orders") as consumer,
        Producer(endpoint) as producer,
    ):
        producer.send("orders", b"warm-up")  # connect both channels first
        consumer.ack(consumer.receive(wait_s=5))
        for _ in range(5):
            results: list[tuple[float, int]] = []

            def poll(into: list[tuple[float, int]] = results) -> None:
                got = consumer.receive(wait_s=20)
                into.append((time.monotonic(), len(got)))
                consumer.ack(got)

            worker = threading.Thread(target=poll)
            worker.start()
            wait_until(lambda: server_held(endpoint) == 1, "1 pop held", 5.0)
            sent_at = time.monotonic()
            producer.send("orders", b"wake")
            worker.join(timeout=10)
            ((woke_at, count),) = results
            assert count == 1
            delays.append(woke_at - sent_at)
    assert max(delays) < 1.0, delays
    assert statistics.median(delays) < 0.05, delays


def test_long_poll_returns_empty_after_its_timeout(endpoint: str) -> None:
    _setup(endpoint)
    with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
        started = time.monotonic()
        assert consumer.receive(wait_s=1) == []
        assert 0.9 <= time.monotonic() - started < 3


def test_restart_keeps_messages_offsets_and_inflight_deadlines(server: ServerThread) -> None:
    _setup(server.endpoint)
    with Producer(server.endpoint) as producer:
        producer.send_batch("orders", [Message(f"m{i}".encode()) for i in range(8)])
    with SimpleConsumer(server.endpoint, group="g", topic="orders") as consumer:
        acked = consumer.receive(max_messages=3, wait_s=5)
        consumer.ack(acked)
        held = consumer.receive(max_messages=2, invisible_duration_s=4, wait_s=5)
        held_at = time.monotonic()
    endpoint = server.restart()
    with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
        rest = consumer.receive(max_messages=32, invisible_duration_s=60, wait_s=5)
        bodies = {m.body for m in rest}
        assert len(rest) == 3
        assert bodies.isdisjoint({m.body for m in acked} | {m.body for m in held})
        consumer.ack(rest)
        assert consumer.receive(wait_s=1) == []  # held ones keep their deadline
        back = _receive_all(consumer, 2, wait_s=8)
        assert time.monotonic() - held_at >= 3.9
        assert sorted(m.body for m in back) == sorted(m.body for m in held)
        assert all(m.delivery_attempt == 2 for m in back)
        consumer.ack(back)
    with Admin(endpoint) as admin:
        rows = admin.get_group_lag("g", "orders")
    assert sum(r.lag for r in rows if not r.retry) == 0


def test_sixty_four_consumers_on_four_queues_all_get_work_and_never_share(
    endpoint: str,
) -> None:
    import asyncio

    from popmq import AsyncProducer, AsyncSimpleConsumer

    _setup(endpoint, queues=4)
    total = 640

    async def scenario() -> tuple[dict[int, int], list[tuple[str, float, float]]]:
        holds: list[tuple[str, float, float]] = []
        per_consumer: dict[int, int] = {}
        remaining = [total]
        ready: list[int] = []
        all_ready = asyncio.Event()
        go = asyncio.Event()

        async def consume(index: int) -> None:
            async with AsyncSimpleConsumer(endpoint, group="g", topic="orders") as consumer:
                # Connected (its stream open) before anything is sent, so a consumer that
                # was slow to connect on a loaded machine does not find the work all gone.
                assert await consumer.receive(wait_s=0) == []
                ready.append(index)
                if len(ready) == 64:
                    all_ready.set()
                await go.wait()
                while remaining[0] > 0:
                    got = await consumer.receive(
                        max_messages=2, invisible_duration_s=30, wait_s=0.2
                    )
                    if not got:
                        continue
                    taken = time.monotonic()
                    per_consumer[index] = per_consumer.get(index, 0) + len(got)
                    await asyncio.sleep(0.01)  # hold the messages while others pop
                    await consumer.ack(got)
                    released = time.monotonic()
                    remaining[0] -= len(got)
                    holds.extend((m.message_id, taken, released) for m in got)

        consumers = asyncio.gather(*(consume(i) for i in range(64)))
        await asyncio.wait_for(all_ready.wait(), 30)
        go.set()
        async with AsyncProducer(endpoint) as producer:
            for start in range(0, total, 64):
                await producer.send_batch(
                    "orders", [Message(f"{i}".encode()) for i in range(start, start + 64)]
                )
        await asyncio.wait_for(consumers, 60)
        return per_consumer, holds

    per_consumer, holds = asyncio.run(scenario())
    assert len(per_consumer) == 64, f"consumers without work: {64 - len(per_consumer)}"
    ids = [message_id for message_id, _, _ in holds]
    assert len(ids) == total
    assert len(set(ids)) == total  # each message held by exactly one consumer, once


def server_held(endpoint: str) -> int:
    """Held long polls right now, read from the server under test."""
    return _SERVERS[endpoint].sync(lambda: _SERVERS[endpoint].broker.polling.held)


_SERVERS: dict[str, ServerThread] = {}


@pytest.fixture(autouse=True)
def _register(server: ServerThread) -> None:
    _SERVERS[server.endpoint] = server


def _receive_all(consumer: SimpleConsumer, count: int, wait_s: float) -> list:  # type: ignore[type-arg]
    got: list = []  # type: ignore[type-arg]
    deadline = time.monotonic() + wait_s
    while len(got) < count and time.monotonic() < deadline:
        got.extend(
            consumer.receive(invisible_duration_s=60, wait_s=max(0.1, deadline - time.monotonic()))
        )
    return got


def _with_handle(msg, handle: str):  # type: ignore[no-untyped-def]
    import copy

    clone = copy.copy(msg)
    clone.receipt_handle = handle
    return clone
