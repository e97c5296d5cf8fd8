"""Send coalescing (popmq.sdk._coalesce) against the real server: fewer RPCs, same outcomes."""

from __future__ import annotations

import asyncio

import pytest

from popmq import Admin, AsyncProducer, NotFoundError, SimpleConsumer
from tests.support.server_thread import ServerThread


def _send_jobs(server: ServerThread) -> int:
    """Write jobs the broker ran so far (one per SendMessages request, plus other writes)."""
    return int(server.sync(lambda: server.broker.writer.stats.jobs))


def test_concurrent_sends_share_requests_and_keep_their_own_receipts(
    server: ServerThread,
) -> None:
    with Admin(server.endpoint) as admin:
        admin.create_topic("orders", queues=1)
    before = _send_jobs(server)

    async def scenario() -> list[str]:
        async with AsyncProducer(server.endpoint) as producer:
            receipts = await asyncio.gather(
                *(producer.send("orders", f"m{i}".encode()) for i in range(200))
            )
        assert len({r.message_id for r in receipts}) == 200
        # One queue: offsets follow the call order, a later send never overtakes.
        assert [r.offset for r in receipts] == list(range(200))
        return [r.message_id for r in receipts]

    ids = asyncio.run(scenario())
    requests = _send_jobs(server) - before
    assert requests < 50, f"200 concurrent sends took {requests} requests"
    with SimpleConsumer(server.endpoint, group="g", topic="orders") as consumer:
        got = []
        while len(got) < 200:
            batch = consumer.receive(max_messages=32, wait_s=5)
            assert batch
            consumer.ack(batch)
            got.extend(batch)
    assert [m.message_id for m in got] == ids
    assert [m.body for m in got] == [f"m{i}".encode() for i in range(200)]


def test_one_bad_message_fails_alone(server: ServerThread) -> None:
    with Admin(server.endpoint) as admin:
        admin.create_topic("orders", queues=2)

    async def scenario() -> None:
        async with AsyncProducer(server.endpoint) as producer:
            first = asyncio.ensure_future(producer.send("orders", b"first"))
            await asyncio.sleep(0)  # on the wire: the next three wait and share a request
            results = await asyncio.gather(
                producer.send("orders", b"a"),
                producer.send("missing", b"b"),
                producer.send("orders", b"c"),
                return_exceptions=True,
            )
            await first
        assert isinstance(results[1], NotFoundError) and "missing" in results[1].message
        assert not isinstance(results[0], BaseException)
        assert not isinstance(results[2], BaseException)

    asyncio.run(scenario())
    with Admin(server.endpoint) as admin:
        bodies = sorted(m.body for m in admin.peek_messages("orders", max_messages=10))
    assert bodies == [b"a", b"c", b"first"]


def test_a_cancelled_waiting_send_is_never_sent(server: ServerThread) -> None:
    with Admin(server.endpoint) as admin:
        admin.create_topic("orders", queues=1)

    async def scenario() -> None:
        async with AsyncProducer(server.endpoint) as producer:
            first = asyncio.ensure_future(producer.send("orders", b"first"))
            await asyncio.sleep(0)
            waiting = asyncio.ensure_future(producer.send("orders", b"cancelled"))
            after = asyncio.ensure_future(producer.send("orders", b"after"))
            await asyncio.sleep(0)
            waiting.cancel()
            await first
            await after
            with pytest.raises(asyncio.CancelledError):
                await waiting

    asyncio.run(scenario())
    with Admin(server.endpoint) as admin:
        bodies = [m.body for m in admin.peek_messages("orders", max_messages=10)]
    assert bodies == [b"first", b"after"]


def test_coalescing_can_be_turned_off(server: ServerThread) -> None:
    with Admin(server.endpoint) as admin:
        admin.create_topic("orders", queues=1)
    before = _send_jobs(server)

    async def scenario() -> None:
        async with AsyncProducer(server.endpoint, coalesce=False) as producer:
            await asyncio.gather(*(producer.send("orders", b"x") for _ in range(20)))

    asyncio.run(scenario())
    assert _send_jobs(server) - before == 20
