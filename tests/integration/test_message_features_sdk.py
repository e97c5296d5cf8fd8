"""The message features through the SDK against the real server.

Async and oneway sends, batch limits, retries that keep the message id, compression, delayed
messages and recall, FIFO message groups, SQL and tag filters, and the dedup window.
Timing assertions are lower bounds (never early) plus generous upper bounds only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from popmq import (
    Admin,
    AsyncProducer,
    AsyncSimpleConsumer,
    FailedPreconditionError,
    InvalidArgumentError,
    Message,
    NotFoundError,
    Producer,
    ReceivedMessage,
    SimpleConsumer,
    Sql,
)
from popmq.broker_core.config import BrokerConfig, MessagesConfig
from popmq.sdk._channel import CHANNEL_OPTIONS
from tests.support.server_thread import ServerThread

COMPRESSIBLE = b"order 42 charged to the card ending 4242\n" * 2_500  # ~100 KB


def _create_topic(server: ServerThread, name: str, queues: int = 4, kind: str = "normal") -> None:
    """A topic of a message type (normal, fifo, delay, mixed), created in the broker."""
    server.call(lambda: server.broker.create_topic(name, queues, message_type=kind))


def _drain(
    consumer: SimpleConsumer, expected: int, *, wait_s: float = 5, ack: bool = True
) -> list[ReceivedMessage]:
    """Receive until ``expected`` messages arrived (or a receive comes back empty)."""
    got: list[ReceivedMessage] = []
    while len(got) < expected:
        batch = consumer.receive(max_messages=32, invisible_duration_s=60, wait_s=wait_s)
        if not batch:
            break
        got.extend(batch)
        if ack:
            consumer.ack(batch)
    return got


def _max_offsets(endpoint: str, topic: str) -> int:
    with Admin(endpoint) as admin:
        return sum(q.max_offset for q in admin.get_topic(topic).queues)


# -- async, oneway, batch ---------------------------------------------------------------


def test_send_async_futures_resolve_to_receipts_of_stored_messages(
    server: ServerThread, endpoint: str
) -> None:
    _create_topic(server, "orders")
    with Producer(endpoint) as producer:
        futures = [producer.send_async("orders", f"m{n}".encode()) for n in range(200)]
        receipts = [f.result(timeout=30) for f in futures]

    assert all(isinstance(f, concurrent.futures.Future) for f in futures)
    assert len({r.message_id for r in receipts}) == 200
    assert len({(r.queue_id, r.offset) for r in receipts}) == 200
    with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
        got = _drain(consumer, 200)
    assert sorted(m.body for m in got) == sorted(f"m{n}".encode() for n in range(200))
    assert {m.message_id for m in got} == {r.message_id for r in receipts}


def test_send_async_failure_is_raised_by_its_future(endpoint: str) -> None:
    with Producer(endpoint) as producer:
        future = producer.send_async("missing-topic", b"x")
        with pytest.raises(NotFoundError, match="missing-topic"):
            future.result(timeout=30)
        with pytest.raises(InvalidArgumentError, match="body is empty"):
            producer.send_async("missing-topic", b"")  # checked before any call


def test_async_producer_awaits_sends_and_oneway_sends(server: ServerThread, endpoint: str) -> None:
    _create_topic(server, "orders")

    async def scenario() -> list[bytes]:
        async with AsyncProducer(endpoint) as producer:
            receipts = await asyncio.gather(
                *(producer.send("orders", f"a{n}".encode()) for n in range(20))
            )
            assert len({r.message_id for r in receipts}) == 20
            for n in range(20):
                await producer.send_oneway("orders", f"o{n}".encode())
        async with AsyncSimpleConsumer(endpoint, group="g", topic="orders") as consumer:
            bodies: list[bytes] = []
            while len(bodies) < 40:
                batch = await consumer.receive(wait_s=5)
                assert batch, f"only {len(bodies)} of 40 messages arrived"
                bodies.extend(m.body for m in batch)
                await consumer.ack(batch)
            return bodies

    bodies = asyncio.run(scenario())

    assert sorted(bodies) == sorted([f"a{n}".encode() for n in range(20)] + [
        f"o{n}".encode() for n in range(20)
    ])  # fmt: skip


def test_oneway_sends_arrive_and_close_waits_for_them(server: ServerThread, endpoint: str) -> None:
    _create_topic(server, "orders")
    producer = Producer(endpoint)
    for n in range(100):
        assert producer.send_oneway("orders", f"{n}".encode()) is None  # type: ignore[func-returns-value]
    producer.close()

    assert _max_offsets(endpoint, "orders") == 100


def test_oneway_send_to_a_missing_topic_is_lost_and_logged_not_raised(
    endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="popmq.sdk.producer"),
        Producer(endpoint) as producer,
    ):
        producer.send_oneway("missing-topic", b"x")

    assert "the message is lost: NOT_FOUND" in caplog.text


def test_batch_over_4_mib_as_sent_is_refused_before_sending_and_4_mib_goes_in_one_write(
    server: ServerThread, endpoint: str
) -> None:
    _create_topic(server, "orders", queues=1)
    too_big = [Message(os.urandom(1024 * 1024)) for _ in range(4)] + [Message(b"x")]
    at_limit = [Message(os.urandom(1024 * 1024 - 1024)) for _ in range(4)]
    with Producer(endpoint) as producer:
        with pytest.raises(InvalidArgumentError, match="split it into smaller batches"):
            producer.send_batch("orders", too_big)
        assert _max_offsets(endpoint, "orders") == 0

        receipts = producer.send_batch("orders", at_limit)

    assert [r.offset for r in receipts] == [0, 1, 2, 3]
    with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
        got = _drain(consumer, 4)
    assert [m.body for m in got] == [m.body for m in at_limit]


# -- retries keep the message id ----------------------------------------------------------


class LoseFirstSendResponse(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Lets the first SendMessages reach the server, then reports UNAVAILABLE instead of its
    response: the send was stored, but the client cannot know it."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        call = await continuation(client_call_details, request)
        method = client_call_details.method
        name = method.decode() if isinstance(method, bytes) else method
        if name.endswith("/SendMessages"):
            self.requests.append(request)
            if len(self.requests) == 1:
                await call  # the server stored it
                raise grpc.aio.AioRpcError(
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.aio.Metadata(),
                    grpc.aio.Metadata(),
                    details="connection reset (injected)",
                )
        return call


def test_retried_send_keeps_its_message_id_and_is_stored_once(
    server: ServerThread, endpoint: str
) -> None:
    _create_topic(server, "orders")
    interceptor = LoseFirstSendResponse()

    async def scenario() -> Any:
        channel = grpc.aio.insecure_channel(
            endpoint, options=CHANNEL_OPTIONS, interceptors=[interceptor]
        )
        try:
            # Unary sends: the interceptor sees unary calls (test_send_stream.py has the stream's).
            async with AsyncProducer(endpoint, channel=channel, multiplex=False) as producer:
                return await producer.send("orders", b"pay once")
        finally:
            await channel.close()

    receipt = asyncio.run(scenario())

    first, second = interceptor.requests
    assert first.messages[0].message_id == second.messages[0].message_id == receipt.message_id
    assert receipt.duplicate  # the server recognised the retry by its (default) dedup id
    assert _max_offsets(endpoint, "orders") == 1
    with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
        got = _drain(consumer, 2, wait_s=1)
    assert [(m.message_id, m.body) for m in got] == [(receipt.message_id, b"pay once")]


# -- compression ---------------------------------------------------------------------------


def test_large_body_is_stored_compressed_and_received_as_sent(
    server: ServerThread, endpoint: str
) -> None:
    _create_topic(server, "orders", queues=1)
    incompressible = os.urandom(20_000)
    with Producer(endpoint) as producer:
        big = producer.send("orders", COMPRESSIBLE)
        random_receipt = producer.send("orders", incompressible)

    stored = server.call(lambda: server.broker.query_message("orders", big.message_id))
    assert stored.record.body_encoding == "zlib"
    assert len(stored.record.body) < len(COMPRESSIBLE) // 10
    stored_random = server.call(
        lambda: server.broker.query_message("orders", random_receipt.message_id)
    )
    assert stored_random.record.body_encoding == ""
    with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
        got = _drain(consumer, 2)
    assert [m.body for m in got] == [COMPRESSIBLE, incompressible]
    assert all(m.body_encoding == "" for m in got)


# -- delayed messages and recall ---------------------------------------------------------------


def test_delayed_message_is_invisible_until_due_then_delivered(
    server: ServerThread, endpoint: str
) -> None:
    _create_topic(server, "later", kind="delay")
    with (
        Producer(endpoint) as producer,
        SimpleConsumer(endpoint, group="g", topic="later") as consumer,
    ):
        sent_at = time.monotonic()
        receipt = producer.send("later", b"in 1.5s", delay_s=1.5)
        assert receipt.offset == -1
        assert receipt.recall_handle
        assert consumer.receive(wait_s=0.5) == []
        got = _drain(consumer, 1, wait_s=10)
        elapsed = time.monotonic() - sent_at

    assert [m.body for m in got] == [b"in 1.5s"]
    assert 1.45 <= elapsed < 15
    assert got[0].deliver_at is not None
    assert got[0].deliver_at <= got[0].store_timestamp + timedelta(seconds=1)


@pytest.mark.parametrize(
    "schedule",
    [
        {"delay_level": 1},  # 1 s
        {"deliver_at": "datetime"},
        {"deliver_at": "epoch"},
    ],
)
def test_delay_level_and_deliver_at_delay_the_message(
    server: ServerThread, endpoint: str, schedule: dict[str, Any]
) -> None:
    _create_topic(server, "later", kind="delay")
    due = datetime.now(UTC) + timedelta(seconds=1)
    if schedule.get("deliver_at") == "datetime":
        schedule = {"deliver_at": due}
    elif schedule.get("deliver_at") == "epoch":
        schedule = {"deliver_at": due.timestamp()}
    with (
        Producer(endpoint) as producer,
        SimpleConsumer(endpoint, group="g", topic="later") as consumer,
    ):
        producer.send("later", b"x", **schedule)
        got = _drain(consumer, 1, wait_s=10)
        received_at = datetime.now(UTC)

    assert [m.body for m in got] == [b"x"]
    assert received_at >= due - timedelta(milliseconds=50)


def test_delay_beyond_max_delay_is_invalid_and_delay_on_a_normal_topic_is_refused(
    server: ServerThread, endpoint: str
) -> None:
    _create_topic(server, "later", kind="delay")
    _create_topic(server, "plain")
    with Producer(endpoint) as producer:
        with pytest.raises(InvalidArgumentError, match="max_delay_s"):
            producer.send("later", b"x", delay_s=3 * 86_400 + 60)
        with pytest.raises(FailedPreconditionError, match="normal"):
            producer.send("plain", b"x", delay_s=5)
        with pytest.raises(InvalidArgumentError, match="at most one"):
            producer.send("later", b"x", delay_s=5, delay_level=2)


def test_recalled_delayed_message_is_never_delivered(server: ServerThread, endpoint: str) -> None:
    _create_topic(server, "later", kind="delay")
    with Producer(endpoint) as producer:
        kept = producer.send("later", b"kept", delay_s=1.5)
        cancelled = producer.send("later", b"cancelled", delay_s=1.5)
        assert producer.recall("later", cancelled.recall_handle) == cancelled.message_id
        with pytest.raises(NotFoundError):
            producer.recall("later", cancelled.recall_handle)
    with SimpleConsumer(endpoint, group="g", topic="later") as consumer:
        got = _drain(consumer, 2, wait_s=4)

    assert [(m.message_id, m.body) for m in got] == [(kept.message_id, b"kept")]


# -- FIFO message groups -----------------------------------------------------------------------


def test_fifo_groups_keep_send_order_under_eight_concurrent_consumers(
    server: ServerThread, endpoint: str
) -> None:
    _create_topic(server, "fifo", queues=2, kind="fifo")
    groups, per_group = 6, 25
    with Producer(endpoint) as producer:
        for n in range(per_group):
            producer.send_batch(
                "fifo",
                [Message(f"{g}:{n}".encode(), message_group=f"user-{g}") for g in range(groups)],
            )
    seen: dict[str, list[int]] = {}
    lock = threading.Lock()  # guards seen and done
    done = threading.Event()

    def consume() -> None:
        with SimpleConsumer(endpoint, group="billing", topic="fifo") as consumer:
            while not done.is_set():
                batch = consumer.receive(max_messages=4, invisible_duration_s=30, wait_s=1)
                with lock:
                    for m in batch:
                        seen.setdefault(m.message_group, []).append(int(m.body.split(b":")[1]))
                    if sum(len(v) for v in seen.values()) >= groups * per_group:
                        done.set()
                if batch:
                    consumer.ack(batch)

    threads = [threading.Thread(target=consume) for _ in range(8)]
    for thread in threads:
        thread.start()
    finished = done.wait(60)
    done.set()
    for thread in threads:
        thread.join(30)

    assert finished
    assert sorted(seen) == [f"user-{g}" for g in range(groups)]
    for group, order in seen.items():
        assert order == list(range(per_group)), group


def test_a_stuck_fifo_group_blocks_only_itself(server: ServerThread, endpoint: str) -> None:
    _create_topic(server, "fifo", queues=1, kind="fifo")
    with Producer(endpoint) as producer:
        for n in range(3):
            producer.send("fifo", f"stuck {n}".encode(), message_group="stuck")
            producer.send("fifo", f"free {n}".encode(), message_group="free")
    with SimpleConsumer(endpoint, group="g", topic="fifo") as consumer:
        got: list[ReceivedMessage] = []
        for _ in range(10):
            batch = consumer.receive(max_messages=32, invisible_duration_s=30, wait_s=2)
            got.extend(batch)
            # Ack only the free group; the stuck group's head stays in flight.
            consumer.ack([m for m in batch if m.message_group == "free"])
            if sum(m.message_group == "free" for m in got) == 3:
                break

    assert [m.body for m in got if m.message_group == "free"] == [b"free 0", b"free 1", b"free 2"]
    assert [m.body for m in got if m.message_group == "stuck"] == [b"stuck 0"]


# -- filters ----------------------------------------------------------------------------------


def test_sql_filter_delivers_only_matching_messages(server: ServerThread, endpoint: str) -> None:
    _create_topic(server, "payments", queues=2)
    with Producer(endpoint) as producer:
        for n, (region, amount) in enumerate(
            [("eu", 50), ("eu", 150), ("us", 500), ("eu", 101), ("eu", 100)]
        ):
            producer.send(
                "payments", f"{n}".encode(), properties={"region": region, "amount": str(amount)}
            )
    with SimpleConsumer(
        endpoint, group="big-eu", topic="payments", filter=Sql("region = 'eu' AND amount > 100")
    ) as consumer:
        got = _drain(consumer, 5, wait_s=1)

    assert sorted(m.body for m in got) == [b"1", b"3"]


def test_malformed_sql_filter_is_invalid_argument_with_its_position(
    server: ServerThread, endpoint: str
) -> None:
    _create_topic(server, "payments")
    with (
        SimpleConsumer(
            endpoint, group="g", topic="payments", filter=Sql("amount > AND region = 'eu'")
        ) as consumer,
        pytest.raises(InvalidArgumentError, match=r"SQL filter: .* at position 10"),
    ):
        consumer.receive(wait_s=0)


def test_tag_expression_filter_delivers_only_those_tags(
    server: ServerThread, endpoint: str
) -> None:
    _create_topic(server, "orders")
    with Producer(endpoint) as producer:
        producer.send_batch(
            "orders",
            [Message(b"a", tag="TagA"), Message(b"b", tag="TagB"), Message(b"c", tag="TagC")],
        )
    with SimpleConsumer(endpoint, group="g", topic="orders", filter="TagA || TagB") as consumer:
        got = _drain(consumer, 3, wait_s=1)

    assert sorted(m.body for m in got) == [b"a", b"b"]


# -- dedup ------------------------------------------------------------------------------------


def test_repeated_dedup_id_within_the_window_is_answered_with_the_first_receipt(
    server: ServerThread, endpoint: str
) -> None:
    _create_topic(server, "orders")
    with Producer(endpoint) as producer:
        first = producer.send("orders", b"charge", dedup_id="order-7")
        again = producer.send("orders", b"charge", dedup_id="order-7")
        other = producer.send("orders", b"charge", dedup_id="order-8")

    assert not first.duplicate
    assert again.duplicate
    assert (again.message_id, again.queue_id, again.offset) == (
        first.message_id,
        first.queue_id,
        first.offset,
    )
    assert not other.duplicate
    assert _max_offsets(endpoint, "orders") == 2


DEDUP_WINDOW_S = 2.0


@pytest.fixture
def short_dedup_server(tmp_path: Path) -> Iterator[ServerThread]:
    thread = ServerThread(
        tmp_path / "data", BrokerConfig(messages=MessagesConfig(dedup_window_s=DEDUP_WINDOW_S))
    )
    thread.start()
    yield thread
    thread.stop()


def test_repeated_dedup_id_after_the_window_is_stored_again(
    short_dedup_server: ServerThread,
) -> None:
    server = short_dedup_server
    _create_topic(server, "orders")
    with Producer(server.endpoint) as producer:
        first = producer.send("orders", b"charge", dedup_id="order-7")
        stored_by = time.monotonic()
        assert producer.send("orders", b"charge", dedup_id="order-7").duplicate
        # Only the passing of the window can be awaited here.
        time.sleep(max(0.0, stored_by + DEDUP_WINDOW_S + 0.2 - time.monotonic()))
        later = producer.send("orders", b"charge", dedup_id="order-7")

    assert not later.duplicate
    assert later.message_id != first.message_id
    assert _max_offsets(server.endpoint, "orders") == 2
