"""Clients given several proxies fail over between them: two real popmq servers, one stopped.

Each server has its own store here (cluster mode puts brokers behind every proxy), so a test
sees where a request went by what it finds: a message stored on the other server, a call
counted there. The servers have distinct broker names, so a handle of one is refused by the
other as it would be by a broker that did not issue it.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest

from popmq import (
    Admin,
    AsyncProducer,
    AsyncSimpleConsumer,
    ConsumeResult,
    InvalidArgumentError,
    Message,
    NotFoundError,
    PopMQError,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
    SimpleConsumer,
    UnavailableError,
)
from popmq._gen.popmq.v1 import messaging_pb2, messaging_pb2_grpc
from popmq.broker_core.config import BrokerConfig
from popmq.cli import main as cli_main
from tests.support.server_process import ServerProcess
from tests.support.server_thread import ServerThread


def _closed_port() -> str:
    """A loopback address nothing listens on (connections to it are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def _prepare(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("orders", queues=2)
        admin.create_group("billing")


def _stored(endpoint: str) -> int:
    with Admin(endpoint) as admin:
        return sum(q.max_offset for q in admin.get_topic("orders").queues)


def _server(tmp_path: Path, name: str, *, metrics: bool = False) -> ServerThread:
    return ServerThread(
        tmp_path / name, BrokerConfig(broker_name=f"broker-{name}"), metrics=metrics
    )


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[ServerThread, ServerThread]]:
    """Two started servers, A and B, counting RPCs, each with topic orders and group billing."""
    a, b = _server(tmp_path, "a", metrics=True), _server(tmp_path, "b", metrics=True)
    a.start()
    b.start()
    try:
        _prepare(a.endpoint)
        _prepare(b.endpoint)
        yield a, b
    finally:
        a.stop()
        b.stop()


def test_producer_and_consumer_given_both_proxies_keep_working_when_one_is_killed(
    tmp_path: Path,
) -> None:
    """The cluster test's scenario: kill -9 the proxy the clients use; they continue."""

    def server(name: str) -> ServerProcess:
        return ServerProcess(
            tmp_path / name,
            flush="async",
            log_path=tmp_path / f"{name}.log",
            extra_args=["--set", f"broker.broker_name=broker-{name}"],
        )

    async def scenario() -> None:
        a, b = server("a"), server("b")
        await asyncio.gather(a.start(), b.start())
        a_endpoint, b_endpoint = a.holder.address, b.holder.address
        try:
            await asyncio.to_thread(_prepare, a_endpoint)
            await asyncio.to_thread(_prepare, b_endpoint)
            both = f"{a_endpoint},{b_endpoint}"
            sent_before: list[str] = []
            sent_after: list[str] = []
            send_failures: list[PopMQError] = []
            received: list[ReceivedMessage] = []
            receive_failures: list[PopMQError] = []
            killed = asyncio.Event()
            stop_sending = asyncio.Event()
            stop = asyncio.Event()
            progress = asyncio.Condition()  # notified as sends and receives complete

            async def send_loop(producer: AsyncProducer, worker: int) -> None:
                n = 0
                while not stop_sending.is_set():
                    n += 1
                    body = f"{worker}-{n}"
                    after = killed.is_set()
                    try:
                        await producer.send("orders", body.encode())
                    except PopMQError as exc:
                        send_failures.append(exc)
                        await asyncio.sleep(0.1)
                        continue
                    (sent_after if after else sent_before).append(body)
                    async with progress:
                        progress.notify_all()

            async def receive_loop(consumer: AsyncSimpleConsumer) -> None:
                riders: list[ReceivedMessage] = []
                while not stop.is_set():
                    try:
                        riders = await consumer.receive(wait_s=0.5, ack=riders)
                    except PopMQError as exc:
                        receive_failures.append(exc)
                        riders = []
                        await asyncio.sleep(0.1)
                        continue
                    received.extend(riders)
                    async with progress:
                        progress.notify_all()

            async def nemesis() -> None:
                async with progress:
                    await progress.wait_for(lambda: len(sent_before) >= 50)
                await a.kill()
                killed.set()
                async with progress:
                    await progress.wait_for(lambda: len(sent_after) >= 100)
                stop_sending.set()
                async with progress:  # the consumer drains what B got
                    await progress.wait_for(
                        lambda: {m.body.decode() for m in received} >= set(sent_after)
                    )
                stop.set()

            async with (
                AsyncProducer(both) as producer,
                AsyncSimpleConsumer(
                    both, group="billing", topic="orders", on_ack_failure=lambda m, e: None
                ) as consumer,
            ):
                async with asyncio.timeout(60):
                    await asyncio.gather(
                        *(send_loop(producer, w) for w in range(3)),
                        receive_loop(consumer),
                        nemesis(),
                    )
            assert send_failures == []
            assert receive_failures == []
            # Everything sent after the kill is on B, and the consumer got it from B (the
            # nemesis waited for that, within the timeout).
            assert await asyncio.to_thread(_stored, b_endpoint) >= len(sent_after)
        finally:
            await a.kill()
            await b.kill()

    asyncio.run(scenario())


def test_sync_simple_consumer_receives_from_the_other_server_once_its_server_stops(
    servers: tuple[ServerThread, ServerThread],
) -> None:
    a, b = servers
    with Producer(a.endpoint) as producer:
        producer.send_batch("orders", [Message(b"on a")])
    with Producer(b.endpoint) as producer:
        producer.send_batch("orders", [Message(f"on b {i}".encode()) for i in range(5)])

    with SimpleConsumer([a.endpoint, b.endpoint], group="billing", topic="orders") as consumer:
        first = consumer.receive(wait_s=5)
        assert [m.body for m in first] == [b"on a"]  # it started on A
        consumer.ack(first)
        # A long poll held on A when A stops.
        pending: list[list[ReceivedMessage]] = []
        holder = threading.Thread(target=lambda: pending.append(consumer.receive(wait_s=10)))
        holder.start()
        deadline = time.monotonic() + 10
        while a.broker.polling.held == 0:
            assert time.monotonic() < deadline, "the receive was never held on A"
            time.sleep(0.01)
        a.stop()
        holder.join(timeout=30)
        got = pending[0]
        for _ in range(3):  # the held poll may end empty (A answers it as it stops)
            if len(got) >= 5:
                break
            got += consumer.receive(wait_s=2)
        consumer.ack(got)

    assert sorted(m.body for m in got) == [f"on b {i}".encode() for i in range(5)]


def test_clients_whose_first_endpoint_is_dead_from_the_start_use_the_next(
    servers: tuple[ServerThread, ServerThread],
) -> None:
    _, b = servers
    dead = _closed_port()
    endpoints = f"{dead},{b.endpoint}"
    with Producer(endpoints) as producer:
        receipt = producer.send("orders", b"hello")
        producer.send_batch("orders", [Message(b"a"), Message(b"b")])
    with Admin([dead, b.endpoint]) as admin:
        assert [t.name for t in admin.list_topics()] == ["orders"]
    with PullConsumer(endpoints, topic="orders") as puller:
        pulled = puller.pull(receipt.queue_id, receipt.offset)
        assert pulled.messages[0].body == b"hello"
    with SimpleConsumer(endpoints, group="billing", topic="orders") as consumer:
        messages = consumer.receive(wait_s=2)
        consumer.ack(messages)
    assert sorted(m.body for m in messages) == [b"a", b"b", b"hello"]
    assert _stored(b.endpoint) == 3


def test_requests_refused_for_their_own_fault_are_not_repeated_on_the_other_endpoint(
    servers: tuple[ServerThread, ServerThread],
) -> None:
    a, b = servers
    both = f"{a.endpoint},{b.endpoint}"
    b_before = b.rpc_count()
    with Admin(both) as admin, Producer(both) as producer:
        with pytest.raises(NotFoundError):
            admin.get_topic("missing")
        with pytest.raises(NotFoundError):
            producer.send("missing", b"x")
        with SimpleConsumer(both, group="billing", topic="orders") as consumer:
            with pytest.raises(InvalidArgumentError):
                consumer.receive(invisible_duration_s=0.1)  # below the 1 s minimum

    assert a.rpc_count("AdminService/GetTopic", "NOT_FOUND") == 1
    assert a.rpc_count("MessagingService/SendStream", "NOT_FOUND") == 1
    assert a.rpc_count("MessagingService/PopStream", "INVALID_ARGUMENT") == 1
    assert b.rpc_count() == b_before  # B never saw any of them


def test_a_live_proxys_unavailable_repeats_reads_on_the_next_proxy_but_not_writes(
    tmp_path: Path,
) -> None:
    starting = _server(tmp_path, "a")
    starting.start(listen_only=True)  # refuses every call UNAVAILABLE, as when starting
    b = _server(tmp_path, "b", metrics=True)
    b.start()
    try:
        _prepare(b.endpoint)
        with Admin([starting.endpoint, b.endpoint]) as admin:
            assert [t.name for t in admin.list_topics()] == ["orders"]  # repeated on B
        with Admin([starting.endpoint, b.endpoint]) as admin:
            with pytest.raises(UnavailableError, match="starting"):
                admin.create_topic("payments")  # a write: the caller decides
            assert admin.create_topic("payments").name == "payments"  # now on B
        with Producer([starting.endpoint, b.endpoint]) as producer:
            producer.send("orders", b"retried")  # the producer's retry goes to B
        assert b.rpc_count("AdminService/CreateTopic") == 2  # orders and payments, once each
        assert _stored(b.endpoint) == 1
    finally:
        starting.stop()
        b.stop()


def test_push_consumer_keeps_consuming_from_the_other_server_after_its_server_stops(
    servers: tuple[ServerThread, ServerThread],
) -> None:
    a, b = servers
    consumed: list[bytes] = []
    arrived = threading.Condition()

    def listener(message: ReceivedMessage) -> ConsumeResult:
        with arrived:
            consumed.append(message.body)
            arrived.notify_all()
        return ConsumeResult.SUCCESS

    def wait_for(count: int) -> None:
        with arrived:
            assert arrived.wait_for(lambda: len(consumed) >= count, timeout=20), consumed

    with PushConsumer(
        [a.endpoint, b.endpoint],
        "billing",
        subscriptions={"orders": "*"},
        listener=listener,
        wait_s=2,
    ):
        with Producer(a.endpoint) as producer:
            producer.send_batch("orders", [Message(b"a1"), Message(b"a2")])
        wait_for(2)
        a.stop()
        with Producer(b.endpoint) as producer:
            producer.send_batch("orders", [Message(b"b1"), Message(b"b2")])
        wait_for(4)

    assert sorted(consumed) == [b"a1", b"a2", b"b1", b"b2"]
    with Admin(b.endpoint) as admin:  # B's two were acked there (close sent the last acks)
        lag = admin.get_group_lag("billing", "orders")
    assert sum(q.max_offset for q in lag) == 2
    assert sum(q.lag + q.inflight for q in lag) == 0


def test_cli_takes_a_list_in_endpoint_and_in_popmq_endpoint(
    servers: tuple[ServerThread, ServerThread],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, b = servers
    dead = _closed_port()
    assert cli_main.main(["topic", "list", "--endpoint", f"{dead},{b.endpoint}"]) == 0
    assert "orders" in capsys.readouterr().out
    monkeypatch.setenv("POPMQ_ENDPOINT", f"{dead},{b.endpoint}")
    assert cli_main.main(["send", "orders", "via the list"]) == 0
    assert cli_main.main(["receive", "billing", "orders", "--wait", "2", "--ack"]) == 0
    assert "via the list" in capsys.readouterr().out
    monkeypatch.setenv("POPMQ_ENDPOINT", f"{dead},{_closed_port()}")
    assert cli_main.main(["topic", "list"]) == 1
    assert "no popmq proxy could be reached" in capsys.readouterr().err


class _UnavailableOnce(messaging_pb2_grpc.MessagingServiceServicer):
    """A proxy stand-in whose first send fails UNAVAILABLE (marked as of unknown outcome, or
    not), and whose next ones are stored; it records the message ids it was sent."""

    def __init__(self, *, outcome_unknown: bool) -> None:
        self.outcome_unknown = outcome_unknown
        self.calls: list[str] = []

    async def SendMessages(
        self, request: messaging_pb2.SendMessagesRequest, context: grpc.aio.ServicerContext
    ) -> messaging_pb2.SendMessagesResponse:
        message = request.messages[0]
        self.calls.append(message.message_id)
        if len(self.calls) == 1:
            trailer = (("popmq-outcome", "unknown"),) if self.outcome_unknown else ()
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, "may or may not be stored", trailing_metadata=trailer
            )
        return messaging_pb2.SendMessagesResponse(
            results=[
                messaging_pb2.SendResult(
                    message_id=message.message_id, topic=message.topic, queue_id=0, offset=0
                )
            ]
        )


@pytest.mark.parametrize("outcome_unknown", [True, False], ids=["outcome-unknown", "refused"])
def test_a_send_whose_outcome_the_proxy_does_not_know_is_repeated_on_that_proxy(
    outcome_unknown: bool,
) -> None:
    """The proxy knows which broker may hold the first copy, so the repeat (same message id)
    goes back to it; a plain UNAVAILABLE moves the producer on, as before."""

    async def scenario() -> tuple[list[str], list[str]]:
        servicers = [_UnavailableOnce(outcome_unknown=outcome_unknown) for _ in range(2)]
        servers = []
        endpoints = []
        for servicer in servicers:
            server = grpc.aio.server()
            messaging_pb2_grpc.add_MessagingServiceServicer_to_server(servicer, server)
            endpoints.append(f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}")
            await server.start()
            servers.append(server)
        try:
            async with AsyncProducer(endpoints, multiplex=False) as producer:
                receipt = await producer.send("orders", b"once")
            assert receipt.message_id == servicers[0].calls[0]
        finally:
            for server in servers:
                await server.stop(None)
        return servicers[0].calls, servicers[1].calls

    first, second = asyncio.run(scenario())
    if outcome_unknown:
        assert len(first) == 2 and first[0] == first[1] and second == []
    else:  # moved on to the second (which fails its first too, so back to the first)
        assert second == [first[0]]
