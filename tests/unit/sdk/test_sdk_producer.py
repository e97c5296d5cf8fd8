"""Producer behaviour over a scripted channel: what goes on the wire, retries, oneway, close.

No server: the channel answers each call from a script (a response, an error, or a gate to
wait on), and records the requests, so a test sees exactly what the producer sent.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf.message import Message as ProtoMessage

from popmq import sdk
from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk._compression import ZLIB
from popmq.sdk._retry import RetryBackoff, RetryPolicy
from popmq.sdk.consumer import build_pop_request
from popmq.sdk.producer import _InFlightWindow, build_send_request
from popmq.sdk.types import ReceivedMessage, Sql

ID_PATTERN = re.compile(r"^01[0-9A-F]{32}$")
NO_WAIT = RetryPolicy(backoff=RetryBackoff(initial_s=0, max_s=0))


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


Step = ProtoMessage | Exception | asyncio.Event


@dataclass
class ScriptedChannel:
    """A grpc.aio channel stand-in: answers each call with the next step of its method.

    A step is a response, an exception to raise, or an Event to wait for before answering
    with an OK SendMessages response that echoes the request's ids.
    """

    script: dict[str, list[Step]] = field(default_factory=dict)
    requests: list[tuple[str, Any]] = field(default_factory=list)

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Callable[..., Awaitable[Any]]:
        name = method.rsplit("/", 1)[-1]

        async def call(request: Any, timeout: float | None = None, **_: Any) -> Any:  # noqa: ASYNC109
            self.requests.append((name, request))
            steps = self.script.get(name, [])
            step = steps.pop(0) if steps else None
            if isinstance(step, asyncio.Event):
                await step.wait()
                step = None
            if isinstance(step, Exception):
                raise step
            if step is None and name == "SendMessages":
                return _echo(request)
            return step

        return call

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Callable[..., Any]:
        def call(*_: Any, **__: Any) -> Any:
            raise AssertionError(
                f"{method}: a producer with multiplex=False makes no streaming calls"
            )

        return call

    unary_stream = stream_stream  # TransactionChecks: unused here too

    def sent(self) -> list[messaging_pb2.SendMessagesRequest]:
        return [request for name, request in self.requests if name == "SendMessages"]

    async def close(self) -> None:
        raise AssertionError("a borrowed channel must be left to its owner")


def _echo(request: messaging_pb2.SendMessagesRequest) -> messaging_pb2.SendMessagesResponse:
    return messaging_pb2.SendMessagesResponse(
        results=[
            messaging_pb2.SendResult(message_id=m.message_id, topic=m.topic, offset=n)
            for n, m in enumerate(request.messages)
        ]
    )


def _producer(channel: ScriptedChannel, **kwargs: Any) -> sdk.AsyncProducer:
    kwargs.setdefault("retry", NO_WAIT)
    # Unary SendMessages: the fake answers unary calls (SendStream has tests of its own).
    kwargs.setdefault("multiplex", False)
    return sdk.AsyncProducer("fake", channel=channel, **kwargs)


def _send(channel: ScriptedChannel, **kwargs: Any) -> sdk.SendReceipt:
    async def scenario() -> sdk.SendReceipt:
        async with _producer(channel) as producer:
            return await producer.send("orders", b"x", **kwargs)

    return asyncio.run(scenario())


# -- what goes on the wire ----------------------------------------------------------------


def test_send_assigns_a_message_id_and_born_host_and_leaves_dedup_to_the_server() -> None:
    channel = ScriptedChannel()

    receipt = _send(channel)

    ((sent,),) = [r.messages for r in channel.sent()]
    assert ID_PATTERN.match(sent.message_id)
    assert receipt.message_id == sent.message_id
    assert sent.born_host
    assert sent.dedup_id == ""  # the server's default for an empty dedup id is the message id
    assert sent.WhichOneof("schedule") is None
    assert (sent.message_group, sent.body_encoding) == ("", "")


def test_every_message_of_a_batch_gets_its_own_id_and_a_given_one_is_kept() -> None:
    request = build_send_request(
        "orders", [sdk.Message(b"a"), sdk.Message(b"b", message_id="mine"), sdk.Message(b"c")]
    )

    ids = [m.message_id for m in request.messages]
    assert ids[1] == "mine"
    assert ID_PATTERN.match(ids[0]) and ID_PATTERN.match(ids[2])
    assert ids[0] < ids[2]


def test_group_and_dedup_id_go_on_the_wire() -> None:
    channel = ScriptedChannel()

    _send(channel, message_group="user-42", dedup_id="order-7")

    (sent,) = channel.sent()[0].messages
    assert (sent.message_group, sent.dedup_id) == ("user-42", "order-7")


def test_delay_s_becomes_a_delay_duration() -> None:
    channel = ScriptedChannel()

    _send(channel, delay_s=2.5)

    (sent,) = channel.sent()[0].messages
    assert sent.WhichOneof("schedule") == "delay"
    assert (sent.delay.seconds, sent.delay.nanos) == (2, 500_000_000)


def test_delay_level_is_sent_as_the_level_for_the_server_to_resolve() -> None:
    channel = ScriptedChannel()

    _send(channel, delay_level=3)

    (sent,) = channel.sent()[0].messages
    assert sent.WhichOneof("schedule") == "delay_level"
    assert sent.delay_level == 3


def test_deliver_at_datetime_and_epoch_seconds_become_the_same_delivery_time() -> None:
    when = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    in_paris = when.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Paris"))

    wires = [
        sdk.Message(b"x", deliver_at=value).to_proto("t")
        for value in (when, in_paris, when.timestamp())
    ]

    for wire in wires:
        assert wire.WhichOneof("schedule") == "delivery_time"
        assert wire.delivery_time.ToDatetime(tzinfo=UTC) == when
    assert wires[0].delivery_time.nanos == 123_456_000


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"delay_s": 1, "delay_level": 2}, "sets delay_s and delay_level"),
        ({"deliver_at": datetime.now(UTC) + timedelta(hours=1), "delay_s": 5}, "at most one"),
        ({"delay_level": 19}, "delay_level 19 is above the maximum 18"),
        ({"delay_s": -1}, "use 0 or more seconds"),
        ({"deliver_at": datetime(2031, 1, 1)}, "no time zone"),
    ],
)
def test_bad_schedules_fail_before_any_call(kwargs: dict[str, Any], message: str) -> None:
    channel = ScriptedChannel()

    with pytest.raises(sdk.InvalidArgumentError, match=message):
        _send(channel, **kwargs)

    assert channel.requests == []


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"delay_level": True}, "delay_level must be an int"),
        ({"delay_s": "5"}, "delay_s must be a number"),
        ({"deliver_at": "2031-01-01"}, "deliver_at must be a datetime or epoch seconds"),
    ],
)
def test_schedule_values_of_the_wrong_type_are_type_errors(
    kwargs: dict[str, Any], error: str
) -> None:
    with pytest.raises(TypeError, match=error):
        sdk.Message(b"x", **kwargs)


@pytest.mark.parametrize(
    ("topic", "body", "message"),
    [
        ("orders", b"", r"messages\[0\].body is empty"),
        ("bad topic", b"x", "topic name 'bad topic' is invalid"),
        ("%DLQ%billing", b"x", "dead-letter topics can only be read"),
    ],
)
def test_invalid_sends_fail_before_any_call(topic: str, body: bytes, message: str) -> None:
    channel = ScriptedChannel()

    async def scenario() -> None:
        async with _producer(channel) as producer:
            await producer.send(topic, body)

    with pytest.raises(sdk.InvalidArgumentError, match=message):
        asyncio.run(scenario())
    assert channel.requests == []


def test_large_compressible_body_is_sent_compressed_and_flagged() -> None:
    body = b"the same line again\n" * 1000
    channel = ScriptedChannel()

    async def scenario() -> None:
        async with _producer(channel) as producer:
            await producer.send_batch("orders", [sdk.Message(body), sdk.Message(b"small")])

    asyncio.run(scenario())

    big, small = channel.sent()[0].messages
    assert big.body_encoding == ZLIB
    assert len(big.body) < len(body) // 10
    assert (small.body, small.body_encoding) == (b"small", "")


def test_a_body_large_enough_to_build_in_a_worker_thread_is_sent_the_same_way() -> None:
    body = b"0123456789abcdef" * 65_536  # 1 MiB: built off the event loop
    channel = ScriptedChannel()

    async def scenario() -> sdk.SendReceipt:
        async with _producer(channel) as producer:
            with pytest.raises(sdk.InvalidArgumentError, match="at most one"):
                await producer.send("orders", body, delay_s=1, delay_level=1)
            return await producer.send("orders", body, message_group="g")

    receipt = asyncio.run(scenario())

    (sent,) = channel.sent()[0].messages
    assert (sent.message_id, sent.message_group, sent.body_encoding) == (
        receipt.message_id,
        "g",
        ZLIB,
    )
    assert (
        ReceivedMessage.from_proto(
            messaging_pb2.ReceivedMessage(body=sent.body, body_encoding=sent.body_encoding)
        ).body
        == body
    )


def test_batch_over_4_mib_as_sent_fails_before_any_call() -> None:
    incompressible = [sdk.Message(os.urandom(1024 * 1024)) for _ in range(5)]
    channel = ScriptedChannel()

    async def scenario(messages: list[sdk.Message]) -> list[sdk.SendReceipt]:
        async with _producer(channel) as producer:
            return await producer.send_batch("orders", messages)

    with pytest.raises(sdk.InvalidArgumentError, match="split it into smaller batches"):
        asyncio.run(scenario(incompressible))
    assert channel.requests == []

    # The limit is on bytes as sent: 12 MiB that compress well fit in one batch.
    compressible = [sdk.Message(b"a" * (3 * 1024 * 1024)) for _ in range(4)]
    assert len(asyncio.run(scenario(compressible))) == 4


def test_receipts_carry_recall_handle_and_duplicate() -> None:
    result = messaging_pb2.SendResult(
        message_id="m", topic="t", queue_id=1, offset=-1, recall_handle="rh", duplicate=True
    )

    assert sdk.SendReceipt.from_proto(result) == sdk.SendReceipt(
        "m", "t", 1, -1, recall_handle="rh", duplicate=True
    )


# -- retries ------------------------------------------------------------------------------


def test_a_retriable_failure_is_retried_with_the_same_message_ids_marked_repeat() -> None:
    channel = ScriptedChannel(
        {"SendMessages": [_rpc_error(grpc.StatusCode.UNAVAILABLE, "restarting")]}
    )

    async def scenario() -> list[sdk.SendReceipt]:
        async with _producer(channel) as producer:
            return await producer.send_batch("orders", [sdk.Message(b"a"), sdk.Message(b"b")])

    receipts = asyncio.run(scenario())

    first, second = channel.sent()
    # The same request, ids included, marked as a repeat: the first may have been stored
    # through a proxy that went away (a cluster proxy then looks it up on the brokers).
    assert not first.repeat and second.repeat
    second.repeat = False
    assert first == second
    assert [r.message_id for r in receipts] == [m.message_id for m in first.messages]


def test_retries_stop_after_three_attempts() -> None:
    down = [_rpc_error(grpc.StatusCode.UNAVAILABLE, f"down {n}") for n in range(5)]
    channel = ScriptedChannel({"SendMessages": list(down)})

    with pytest.raises(sdk.UnavailableError, match="down 2"):
        _send(channel)

    assert len(channel.sent()) == 3
    assert len({r.messages[0].message_id for r in channel.sent()}) == 1
    assert [r.repeat for r in channel.sent()] == [False, True, True]


def test_a_non_retriable_failure_is_not_retried() -> None:
    channel = ScriptedChannel(
        {"SendMessages": [_rpc_error(grpc.StatusCode.NOT_FOUND, "topic orders does not exist")]}
    )

    with pytest.raises(sdk.NotFoundError):
        _send(channel)

    assert len(channel.sent()) == 1


# -- oneway, in-flight bounds and close ------------------------------------------------------


def test_oneway_send_is_not_retried_and_its_failure_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    channel = ScriptedChannel(
        {"SendMessages": [_rpc_error(grpc.StatusCode.UNAVAILABLE, "restarting")]}
    )

    async def scenario() -> None:
        async with _producer(channel) as producer:
            await producer.send_oneway("orders", b"x")

    with caplog.at_level(logging.WARNING, logger="popmq.sdk.producer"):
        asyncio.run(scenario())

    assert len(channel.sent()) == 1
    assert "the message is lost" in caplog.text
    assert "UNAVAILABLE restarting" in caplog.text


def test_oneway_send_checks_its_arguments_before_returning() -> None:
    channel = ScriptedChannel()

    async def scenario() -> None:
        async with _producer(channel) as producer:
            await producer.send_oneway("orders", b"x", delay_s=1, delay_level=1)

    with pytest.raises(sdk.InvalidArgumentError, match="at most one"):
        asyncio.run(scenario())
    assert channel.requests == []


def test_close_waits_for_oneway_sends_already_started() -> None:
    gate = asyncio.Event()
    channel = ScriptedChannel({"SendMessages": [gate]})

    async def scenario() -> None:
        producer = _producer(channel)
        await producer.send_oneway("orders", b"x")
        closing = asyncio.create_task(producer.close())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not closing.done()
        gate.set()
        await closing

    asyncio.run(scenario())

    assert len(channel.sent()) == 1


def test_close_waits_for_the_send_in_flight_not_for_the_task_that_sent_it() -> None:
    gate = asyncio.Event()
    channel = ScriptedChannel({"SendMessages": [gate]})

    async def scenario() -> None:
        producer = _producer(channel)
        closed = asyncio.Event()

        async def user() -> None:
            await producer.send("orders", b"x")
            await closed.wait()  # this task lives on after its send

        sender = asyncio.create_task(user())
        for _ in range(5):
            await asyncio.sleep(0)
        assert len(channel.sent()) == 1  # the send waits at the gate
        closing = asyncio.create_task(producer.close())
        for _ in range(5):
            await asyncio.sleep(0)
        assert not closing.done()  # the send is still on the wire
        gate.set()
        await asyncio.wait_for(closing, timeout=10)
        closed.set()
        await sender

    asyncio.run(scenario())


def test_oneway_sends_wait_for_a_slot_beyond_max_in_flight() -> None:
    gates = [asyncio.Event(), asyncio.Event()]
    channel = ScriptedChannel({"SendMessages": list(gates)})

    async def scenario() -> None:
        async with _producer(channel, max_in_flight=2) as producer:
            await producer.send_oneway("orders", b"1")
            await producer.send_oneway("orders", b"2")
            third = asyncio.create_task(producer.send_oneway("orders", b"3"))
            for _ in range(5):
                await asyncio.sleep(0)
            assert not third.done()
            assert len(channel.sent()) == 2
            gates[0].set()
            await third
            gates[1].set()

    asyncio.run(scenario())

    assert [r.messages[0].body for r in channel.sent()] == [b"1", b"2", b"3"]


def test_closed_producer_refuses_sends() -> None:
    async def scenario() -> None:
        producer = _producer(ScriptedChannel())
        await producer.close()
        with pytest.raises(RuntimeError, match="closed"):
            await producer.send_oneway("orders", b"x")

    asyncio.run(scenario())


def test_in_flight_window_blocks_at_its_count_and_lets_one_large_send_through() -> None:
    window = _InFlightWindow(max_count=2, max_bytes=100)
    window.acquire(10)
    window.acquire(10)
    entered = threading.Event()

    def third() -> None:
        window.acquire(10)
        entered.set()

    thread = threading.Thread(target=third)
    thread.start()
    assert not entered.wait(0.05)  # a full window holds the caller
    window.release(10)
    assert entered.wait(10)
    thread.join()
    window.release(10)
    window.release(10)
    window.acquire(1_000)  # larger than max_bytes, but alone: it goes
    window.release(1_000)


def test_recall_sends_the_topic_and_handle_and_returns_the_message_id() -> None:
    channel = ScriptedChannel(
        {"RecallMessage": [messaging_pb2.RecallMessageResponse(message_id="m-1")]}
    )

    async def scenario() -> str:
        async with _producer(channel) as producer:
            with pytest.raises(sdk.InvalidArgumentError, match="recall_handle is empty"):
                await producer.recall("orders", "")
            return await producer.recall("orders", "rh-1")

    assert asyncio.run(scenario()) == "m-1"
    assert channel.requests == [
        ("RecallMessage", messaging_pb2.RecallMessageRequest(topic="orders", recall_handle="rh-1"))
    ]


# -- consumer side ------------------------------------------------------------------------


def test_a_str_filter_is_a_tag_expression_and_sql_is_a_sql_filter() -> None:
    tag = build_pop_request("g", "t", filter="TagA || TagB").filter
    sql = build_pop_request("g", "t", filter=Sql("amount > 100")).filter

    assert (tag.type, tag.expression) == (messaging_pb2.FILTER_TYPE_TAG, "TagA || TagB")
    assert (sql.type, sql.expression) == (messaging_pb2.FILTER_TYPE_SQL, "amount > 100")
    with pytest.raises(TypeError, match=r"tag expression \(str\) or Sql"):
        build_pop_request("g", "t", filter=42)  # type: ignore[arg-type]
    with pytest.raises(sdk.InvalidArgumentError, match="Sql expression is empty"):
        Sql("  ")


def test_received_message_carries_group_due_time_and_born_host() -> None:
    due = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    wire = messaging_pb2.ReceivedMessage(
        message_id="m", message_group="user-42", deliver_time=due, born_host="web-1"
    )

    message = ReceivedMessage.from_proto(wire)
    plain = ReceivedMessage.from_proto(messaging_pb2.ReceivedMessage(message_id="n"))

    assert (message.message_group, message.deliver_at, message.born_host) == (
        "user-42",
        due,
        "web-1",
    )
    assert plain.deliver_at is None
    assert ReceivedMessage.from_proto(message.to_proto()) == message
