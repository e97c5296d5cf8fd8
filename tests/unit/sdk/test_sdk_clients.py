"""Client behaviour over a fake channel, and the sync facade's loop thread (no server)."""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf import duration_pb2
from google.protobuf.message import Message as ProtoMessage

from popmq import sdk
from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from popmq.sdk import _loop

# Nothing listens on this path; a unix socket keeps the test off the network.
UNREACHABLE = "unix:/nonexistent-popmq-test/popmq.sock"
INVISIBLE_UNTIL = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


@dataclass
class Call:
    method: str
    request: Any
    timeout: float | None


@dataclass
class FakeChannel:
    """Stands in for a grpc.aio channel: records requests, answers from a table."""

    responses: dict[str, ProtoMessage | Exception] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)

    def unary_unary(
        self, method: str, *args: Any, **kwargs: Any
    ) -> Callable[..., Awaitable[ProtoMessage]]:
        name = method.rsplit("/", 1)[-1]

        # grpc multicallables take `timeout`; the fake records it rather than applying it.
        async def call(request: Any, timeout: float | None = None, **_: Any) -> ProtoMessage:  # noqa: ASYNC109
            self.calls.append(Call(name, request, timeout))
            response = self.responses[name]
            if isinstance(response, Exception):
                raise response
            return response

        return call

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Callable[..., Any]:
        def call(*_: Any, **__: Any) -> Any:
            raise AssertionError(f"{method}: this fake serves unary calls only")

        return call

    unary_stream = stream_stream  # TransactionChecks: unused here too

    async def close(self) -> None:
        raise AssertionError("a borrowed channel must be left to its owner")


def _received(handle: str, offset: int = 0) -> messaging_pb2.ReceivedMessage:
    return messaging_pb2.ReceivedMessage(
        message_id=f"m-{offset}",
        topic="orders",
        offset=offset,
        body=b"x",
        delivery_attempt=1,
        receipt_handle=handle,
    )


def _consumer(channel: FakeChannel, **kwargs: Any) -> sdk.AsyncSimpleConsumer:
    # Unary Pop: the fake answers unary calls (PopStream has tests of its own).
    return sdk.AsyncSimpleConsumer(
        "fake", group="billing", topic="orders", channel=channel, multiplex=False, **kwargs
    )


def test_receive_sends_defaults_and_allows_the_long_poll_in_its_timeout() -> None:
    channel = FakeChannel({"Pop": messaging_pb2.PopResponse(messages=[_received("rh-1")])})

    async def scenario() -> list[sdk.ReceivedMessage]:
        async with _consumer(channel, filter="TagA", timeout_s=10) as consumer:
            return await consumer.receive()

    messages = asyncio.run(scenario())

    assert [m.receipt_handle for m in messages] == ["rh-1"]
    (call,) = channel.calls
    assert call.method == "Pop"
    assert call.request.HasField("max_messages")
    assert call.request.max_messages == 32
    assert call.request.invisible_duration == duration_pb2.Duration(seconds=30)
    assert call.request.long_polling_timeout == duration_pb2.Duration(seconds=20)
    assert call.request.filter.expression == "TagA"
    assert call.timeout == 30


def test_receive_timeout_follows_wait_s() -> None:
    channel = FakeChannel({"Pop": messaging_pb2.PopResponse()})

    async def scenario() -> list[sdk.ReceivedMessage]:
        async with _consumer(channel, timeout_s=10) as consumer:
            return await consumer.receive(max_messages=1, invisible_duration_s=5, wait_s=2)

    assert asyncio.run(scenario()) == []
    assert channel.calls[0].timeout == 12


def test_ack_of_many_messages_is_one_rpc_and_raises_the_first_failure() -> None:
    channel = FakeChannel(
        {
            "Ack": messaging_pb2.AckResponse(
                results=[
                    messaging_pb2.EntryResult(receipt_handle="rh-0", code="OK"),
                    messaging_pb2.EntryResult(
                        receipt_handle="rh-1", code="FAILED_PRECONDITION", message="expired"
                    ),
                    messaging_pb2.EntryResult(
                        receipt_handle="rh-2", code="INVALID_ARGUMENT", message="bad handle"
                    ),
                ]
            )
        }
    )
    messages = [sdk.ReceivedMessage.from_proto(_received(f"rh-{i}", i)) for i in range(3)]

    async def scenario() -> None:
        async with _consumer(channel) as consumer:
            await consumer.ack(messages)

    with pytest.raises(sdk.FailedPreconditionError) as raised:
        asyncio.run(scenario())

    assert raised.value.message == "expired"
    (call,) = channel.calls
    assert list(call.request.receipt_handles) == ["rh-0", "rh-1", "rh-2"]
    assert call.request.group == "billing"


def test_ack_of_one_message_succeeds_when_its_entry_is_ok() -> None:
    channel = FakeChannel(
        {"Ack": messaging_pb2.AckResponse(results=[messaging_pb2.EntryResult(code="OK")])}
    )
    message = sdk.ReceivedMessage.from_proto(_received("rh-0"))

    async def scenario() -> None:
        async with _consumer(channel) as consumer:
            await consumer.ack(message)
            await consumer.ack([])

    asyncio.run(scenario())

    assert [list(c.request.receipt_handles) for c in channel.calls] == [["rh-0"]]


def test_change_invisible_duration_replaces_the_receipt_handle_in_place() -> None:
    channel = FakeChannel(
        {
            "ChangeInvisibleTime": messaging_pb2.ChangeInvisibleTimeResponse(
                receipt_handle="rh-new", invisible_until=INVISIBLE_UNTIL
            )
        }
    )
    message = sdk.ReceivedMessage.from_proto(_received("rh-old"))

    async def scenario() -> None:
        async with _consumer(channel) as consumer:
            await consumer.change_invisible_duration(message, 60)

    asyncio.run(scenario())

    assert message.receipt_handle == "rh-new"
    assert message.invisible_until == INVISIBLE_UNTIL
    request = channel.calls[0].request
    assert request.receipt_handle == "rh-old"
    assert request.invisible_duration == duration_pb2.Duration(seconds=60)


def test_nack_without_delay_leaves_backoff_to_the_group() -> None:
    channel = FakeChannel({"Nack": messaging_pb2.NackResponse(redeliver_time=INVISIBLE_UNTIL)})
    message = sdk.ReceivedMessage.from_proto(_received("rh-1"))

    async def scenario() -> datetime:
        async with _consumer(channel) as consumer:
            return await consumer.nack(message)

    assert asyncio.run(scenario()) == INVISIBLE_UNTIL
    assert not channel.calls[0].request.HasField("delay")


def test_send_batch_is_one_rpc_with_receipts_in_order() -> None:
    channel = FakeChannel(
        {
            "SendMessages": messaging_pb2.SendMessagesResponse(
                results=[
                    messaging_pb2.SendResult(message_id="a", topic="orders", queue_id=0, offset=0),
                    messaging_pb2.SendResult(message_id="b", topic="orders", queue_id=1, offset=0),
                ]
            )
        }
    )

    async def scenario() -> list[sdk.SendReceipt]:
        async with sdk.AsyncProducer("fake", channel=channel, multiplex=False) as producer:
            return await producer.send_batch("orders", [sdk.Message(b"a"), sdk.Message(b"b")])

    receipts = asyncio.run(scenario())

    assert [r.message_id for r in receipts] == ["a", "b"]
    assert len(channel.calls) == 1
    assert [m.body for m in channel.calls[0].request.messages] == [b"a", b"b"]
    assert channel.calls[0].timeout == 10


def test_send_passes_tag_keys_and_properties() -> None:
    channel = FakeChannel(
        {
            "SendMessages": messaging_pb2.SendMessagesResponse(
                results=[messaging_pb2.SendResult(message_id="a", topic="orders")]
            )
        }
    )

    async def scenario() -> sdk.SendReceipt:
        async with sdk.AsyncProducer(
            "fake", channel=channel, timeout_s=3, multiplex=False
        ) as producer:
            return await producer.send(
                "orders", b"body", tag="TagA", keys=["k1"], properties={"region": "eu"}
            )

    assert asyncio.run(scenario()).message_id == "a"
    (sent,) = channel.calls[0].request.messages
    assert (sent.topic, sent.tag, list(sent.keys), dict(sent.properties)) == (
        "orders",
        "TagA",
        ["k1"],
        {"region": "eu"},
    )
    assert channel.calls[0].timeout == 3


def test_failed_rpc_raises_the_mapped_error() -> None:
    channel = FakeChannel(
        {
            "GetTopic": grpc.aio.AioRpcError(
                grpc.StatusCode.NOT_FOUND,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                details="topic orders does not exist",
            )
        }
    )

    async def scenario() -> None:
        async with sdk.AsyncAdmin("fake", channel=channel) as admin:
            await admin.get_topic("orders")

    with pytest.raises(sdk.NotFoundError, match="topic orders does not exist"):
        asyncio.run(scenario())


def test_create_group_returns_the_group_and_sends_its_settings() -> None:
    channel = FakeChannel(
        {
            "CreateGroup": admin_pb2.CreateGroupResponse(
                group=admin_pb2.Group(
                    name="billing",
                    max_delivery_attempts=3,
                    retry_backoff=[duration_pb2.Duration(seconds=2)],
                )
            )
        }
    )

    async def scenario() -> sdk.Group:
        async with sdk.AsyncAdmin("fake", channel=channel) as admin:
            return await admin.create_group("billing", max_delivery_attempts=3, retry_backoff_s=[2])

    group = asyncio.run(scenario())

    assert (group.name, group.max_delivery_attempts, group.retry_backoff_s) == (
        "billing",
        3,
        (2.0,),
    )
    assert channel.calls[0].request.max_delivery_attempts == 3


def test_closed_client_refuses_calls() -> None:
    async def scenario() -> None:
        producer = sdk.AsyncProducer("fake", channel=FakeChannel())
        await producer.close()
        await producer.close()
        await producer.send("orders", b"x")

    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(scenario())


def test_unclosed_async_client_warns() -> None:
    with pytest.warns(ResourceWarning, match="unclosed AsyncAdmin"):
        admin = sdk.AsyncAdmin("fake:1")
        del admin
        gc.collect()


def test_unclosed_sync_client_warns() -> None:
    with pytest.warns(ResourceWarning, match="unclosed Producer"):
        producer = sdk.Producer(UNREACHABLE)
        del producer
        gc.collect()


def test_sync_client_reports_unreachable_server_as_unavailable() -> None:
    with sdk.Producer(UNREACHABLE, timeout_s=5) as producer:
        with pytest.raises(sdk.UnavailableError) as raised:
            producer.send("orders", b"x")

    assert raised.value.retriable
    assert producer.closed


def test_sync_clients_share_one_loop_thread_and_close_idempotently() -> None:
    admin = sdk.Admin(UNREACHABLE, timeout_s=5)
    consumer = sdk.SimpleConsumer(UNREACHABLE, group="billing", topic="orders", timeout_s=5)
    try:
        with pytest.raises(sdk.UnavailableError):
            admin.list_topics()
        with pytest.raises(sdk.UnavailableError):
            consumer.receive(wait_s=0)
    finally:
        admin.close()
        admin.close()
        consumer.close()

    with pytest.raises(RuntimeError, match="closed"):
        admin.list_topics()


@pytest.fixture
def loop_thread() -> Iterator[_loop.LoopThread]:
    yield _loop.get_loop_thread()


def test_loop_thread_is_reused_within_a_process(loop_thread: _loop.LoopThread) -> None:
    assert _loop.get_loop_thread() is loop_thread
    assert loop_thread.pid == os.getpid()
    assert loop_thread.is_alive


def test_loop_thread_restarts_after_fork(loop_thread: _loop.LoopThread) -> None:
    real_pid = loop_thread.pid
    loop_thread.pid = real_pid - 1  # what a forked child sees: the thread's owner differs
    try:
        fresh = _loop.get_loop_thread()

        assert fresh is not loop_thread
        assert fresh.pid == os.getpid()
        assert fresh.run(asyncio.sleep(0, result="ran")) == "ran"
        assert _loop.get_loop_thread() is fresh
    finally:
        loop_thread.pid = real_pid
        loop_thread.stop()
    assert not loop_thread.is_alive


def test_sync_call_from_the_loop_thread_is_refused_instead_of_deadlocking() -> None:
    loop_thread = _loop.get_loop_thread()

    async def nested() -> None:
        loop_thread.run(asyncio.sleep(0))

    with pytest.raises(RuntimeError, match="event loop thread"):
        loop_thread.run(nested())
