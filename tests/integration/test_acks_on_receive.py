"""Acks that ride on a receive (`PopRequest.ack_receipt_handles`), end to end.

The real server over a temporary data dir; the SDK's consumers over the PopStream and over
unary Pops; the raw stub for the wire contract (per-handle results in request order, the
same codes as the Ack RPC, nothing acked when the pop itself is refused as invalid).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from popmq import (
    Admin,
    AsyncSimpleConsumer,
    NotFoundError,
    PopMQError,
    Producer,
    ReceivedMessage,
    SimpleConsumer,
)
from popmq._gen.popmq.v1 import messaging_pb2, messaging_pb2_grpc
from tests.support.server_thread import ServerThread

_Stub: Any = messaging_pb2_grpc.MessagingServiceStub


def _fill(endpoint: str, count: int, topic: str = "orders") -> set[bytes]:
    bodies = {f"m{i}".encode() for i in range(count)}
    with Admin(endpoint) as admin:
        admin.create_topic(topic, queues=4)
    with Producer(endpoint) as producer:
        for body in sorted(bodies):
            producer.send(topic, body)
    return bodies


def _acked(server: ServerThread) -> int:
    return server.sync(lambda: server.broker.stats.acked[("g", "orders")])


def _pop(wait_s: int = 0, **fields: Any) -> messaging_pb2.PopRequest:
    return messaging_pb2.PopRequest(
        group="g", topic="orders", long_polling_timeout=Duration(seconds=wait_s), **fields
    )


@pytest.mark.parametrize("multiplex", [True, False], ids=["stream", "unary"])
def test_a_consume_loop_that_acks_on_receive_gets_each_message_once_and_acks_all(
    server: ServerThread, multiplex: bool
) -> None:
    bodies = _fill(server.endpoint, 40)

    async def consume() -> list[bytes]:
        seen: list[bytes] = []
        async with AsyncSimpleConsumer(
            server.endpoint, group="g", topic="orders", multiplex=multiplex
        ) as consumer:
            messages: list[ReceivedMessage] = []
            while True:
                messages = await consumer.receive(
                    max_messages=7, invisible_duration_s=1, wait_s=0, ack=messages
                )
                if not messages:
                    break
                seen.extend(m.body for m in messages)
            # Nothing comes back once the invisible time is over: every one was acked.
            await asyncio.sleep(1.3)
            assert await consumer.receive(wait_s=0) == []
        return seen

    seen = asyncio.run(consume())
    assert sorted(seen) == sorted(bodies)
    assert _acked(server) == 40


@pytest.mark.parametrize("multiplex", [True, False], ids=["stream", "unary"])
def test_ack_results_match_the_ack_rpc_entry_by_entry(
    server: ServerThread, multiplex: bool
) -> None:
    _fill(server.endpoint, 3)

    async def scenario() -> tuple[Any, Any, list[str]]:
        async with grpc.aio.insecure_channel(server.endpoint) as channel:
            stub = _Stub(channel)
            popped = (await stub.Pop(_pop(max_messages=2))).messages
            first, second = (m.receipt_handle for m in popped)
            handles = [first, "garbage", second, first]  # a repeat is acked before: OK
            request = _pop(max_messages=5, ack_receipt_handles=handles)
            if multiplex:
                call = stub.PopStream()
                await call.write(messaging_pb2.PopStreamRequest(request_id=1, pop=request))
                answer = (await call.read()).pop
                call.cancel()
            else:
                answer = await stub.Pop(request)
            by_rpc = await stub.Ack(messaging_pb2.AckRequest(group="g", receipt_handles=handles))
            return answer, by_rpc, handles

    answer, by_rpc, handles = asyncio.run(scenario())
    results = [(r.receipt_handle, r.code, r.message) for r in answer.ack_results]
    assert results == [(r.receipt_handle, r.code, r.message) for r in by_rpc.results]
    assert [code for _, code, _ in results] == ["OK", "INVALID_ARGUMENT", "OK", "OK"]
    assert [handle for handle, _, _ in results] == handles
    assert len(answer.messages) == 1  # the third message, popped after the acks
    assert _acked(server) == 2


def test_a_pop_refused_as_invalid_acks_nothing(server: ServerThread) -> None:
    _fill(server.endpoint, 1)

    async def scenario() -> tuple[grpc.aio.AioRpcError, list[Any]]:
        async with grpc.aio.insecure_channel(server.endpoint) as channel:
            stub = _Stub(channel)
            request = _pop(invisible_duration=Duration(seconds=1))
            handle = (await stub.Pop(request)).messages[0].receipt_handle
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Pop(_pop(max_messages=0, ack_receipt_handles=[handle]))
            await asyncio.sleep(1.3)
            return refused.value, list((await stub.Pop(_pop())).messages)

    refused, again = asyncio.run(scenario())
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "max_messages" in (refused.details() or "")
    assert [m.body for m in again] == [b"m0"] and again[0].delivery_attempt == 2
    assert _acked(server) == 0


def test_a_failed_ack_goes_to_the_callback_and_the_receive_still_returns(
    server: ServerThread,
) -> None:
    _fill(server.endpoint, 2)
    failures: list[tuple[str, PopMQError]] = []

    with SimpleConsumer(
        server.endpoint,
        group="g",
        topic="orders",
        on_ack_failure=lambda message, error: failures.append((message.message_id, error)),
    ) as consumer:
        first = consumer.receive(max_messages=1, wait_s=0)
        good = first[0]
        forged = dataclasses.replace(good, receipt_handle="garbage")
        second = consumer.receive(max_messages=1, wait_s=0, ack=[good, forged])

    assert len(second) == 1 and second[0].body != good.body
    assert [(mid, error.code) for mid, error in failures] == [(good.message_id, "INVALID_ARGUMENT")]
    assert _acked(server) == 1


def test_without_a_callback_a_failed_ack_is_logged_as_a_warning(
    server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    _fill(server.endpoint, 1)
    with SimpleConsumer(server.endpoint, group="g", topic="orders") as consumer:
        got = consumer.receive(max_messages=1, wait_s=0)
        forged = dataclasses.replace(got[0], receipt_handle="garbage")
        with caplog.at_level(logging.WARNING, logger="popmq.sdk.consumer"):
            assert consumer.receive(wait_s=0, ack=forged) == []
    warnings = [r.getMessage() for r in caplog.records if r.name == "popmq.sdk.consumer"]
    assert len(warnings) == 1
    assert got[0].message_id in warnings[0] and "INVALID_ARGUMENT" in warnings[0]


def test_acks_of_a_receive_that_failed_can_be_sent_again(server: ServerThread) -> None:
    _fill(server.endpoint, 2)
    with SimpleConsumer(server.endpoint, group="g", topic="orders") as consumer:
        got = consumer.receive(max_messages=2, invisible_duration_s=1, wait_s=0)
    # The pop fails after its arguments passed (the topic is unknown): the acks it carried
    # were applied, and acking them again succeeds.
    with SimpleConsumer(server.endpoint, group="g", topic="no-such-topic") as elsewhere:
        with pytest.raises(NotFoundError):
            elsewhere.receive(wait_s=0, ack=got)
        elsewhere.ack(got)
    assert _acked(server) == 2
    time.sleep(1.2)
    with SimpleConsumer(server.endpoint, group="g", topic="orders") as consumer:
        assert consumer.receive(wait_s=0) == []


@pytest.mark.parametrize("multiplex", [True, False], ids=["stream", "unary"])
def test_against_a_server_that_ignores_the_field_the_sdk_acks_with_an_ack_call(
    server: ServerThread, multiplex: bool
) -> None:
    _fill(server.endpoint, 2)
    messaging: Any = server.server.messaging
    start_pop = messaging.start_pop

    def older(
        request: messaging_pb2.PopRequest,
        remaining_s: float | None,
        max_bytes: int | None = None,
        reserve: Any = None,
    ) -> Any:
        request.ClearField("ack_receipt_handles")  # as a server without the field drops it
        return start_pop(request, remaining_s, max_bytes, reserve)

    server.sync(lambda: setattr(messaging, "start_pop", older))
    with SimpleConsumer(
        server.endpoint, group="g", topic="orders", multiplex=multiplex
    ) as consumer:
        got = consumer.receive(max_messages=1, wait_s=0)
        more = consumer.receive(max_messages=1, wait_s=0, ack=got)
    assert len(more) == 1 and more[0].body != got[0].body
    assert _acked(server) == 1
