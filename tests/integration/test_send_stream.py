"""SendStream end to end: a producer's sends over one bidirectional stream, SDK and raw.

The real server on 127.0.0.1 (a `popmq serve` subprocess on a pinned port where a test
crashes and restarts it, so the producer's endpoint stays valid), the SDK's AsyncProducer
(multiplexed by default) and the raw generated stub for what the SDK never sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc

from popmq import (
    Admin,
    AsyncProducer,
    Message,
    NotFoundError,
    RetryBackoff,
    RetryPolicy,
    UnavailableError,
)
from popmq._gen.popmq.v1 import messaging_pb2, messaging_pb2_grpc
from tests.support.server_thread import ServerThread
from tests.support.waiting import wait_until

_Stub: Any = messaging_pb2_grpc.MessagingServiceStub


def _setup(endpoint: str, topic: str = "orders", queues: int = 4, kind: str = "normal") -> None:
    with Admin(endpoint) as admin:
        admin.create_topic(topic, queues=queues, message_type=kind)


def _send_streams(server: ServerThread) -> int:
    return server.sync(lambda: server.server.messaging.send_streams)  # type: ignore[union-attr]


def _stored(endpoint: str, topic: str, queues: int) -> list[messaging_pb2.PulledMessage]:
    """Every message stored in the topic, queue by queue, in offset order."""

    async def read() -> list[messaging_pb2.PulledMessage]:
        found: list[messaging_pb2.PulledMessage] = []
        async with grpc.aio.insecure_channel(endpoint) as channel:
            stub = _Stub(channel)
            for queue_id in range(queues):
                offset = 0
                while True:
                    pulled = await stub.PullMessages(
                        messaging_pb2.PullMessagesRequest(
                            topic=topic, queue_id=queue_id, offset=offset, max_messages=1024
                        )
                    )
                    if not pulled.messages:
                        break
                    found.extend(pulled.messages)
                    offset = pulled.next_offset
        return found

    return asyncio.run(read())


def _send_request(request_id: int, *messages: messaging_pb2.OutgoingMessage) -> Any:
    return messaging_pb2.SendStreamRequest(
        request_id=request_id, send=messaging_pb2.SendMessagesRequest(messages=messages)
    )


def _message(body: bytes, topic: str = "orders", **fields: Any) -> Any:
    return messaging_pb2.OutgoingMessage(topic=topic, body=body, **fields)


# -- the SDK over the stream -------------------------------------------------------------


def test_sends_go_over_one_stream_and_get_their_receipts(server: ServerThread) -> None:
    _setup(server.endpoint, queues=1)

    async def scenario() -> tuple[list[Any], list[Any], int]:
        async with AsyncProducer(server.endpoint) as producer:
            one = [await producer.send("orders", f"m{i}".encode()) for i in range(3)]
            batch = await producer.send_batch("orders", [Message(b"b0"), Message(b"b1")])
            return one, batch, _send_streams(server)

    one, batch, streams = asyncio.run(scenario())
    assert streams == 1
    assert [(r.queue_id, r.offset) for r in one + batch] == [(0, n) for n in range(5)]
    stored = _stored(server.endpoint, "orders", 1)
    assert [m.body for m in stored] == [b"m0", b"m1", b"m2", b"b0", b"b1"]
    assert [m.message_id for m in stored] == [r.message_id for r in one + batch]
    wait_until(lambda: _send_streams(server) == 0, "closing the producer to end its stream", 10.0)


def test_concurrent_sends_keep_the_order_of_each_message_group(server: ServerThread) -> None:
    _setup(server.endpoint, queues=4, kind="fifo")
    groups, each = 6, 40

    async def scenario() -> list[Any]:
        async with AsyncProducer(server.endpoint) as producer:
            sends = [
                producer.send("orders", f"{g}:{i}".encode(), message_group=f"g{g}")
                for i in range(each)
                for g in range(groups)
            ]
            return await asyncio.gather(*sends)

    receipts = asyncio.run(scenario())
    assert len({r.message_id for r in receipts}) == groups * each
    stored = _stored(server.endpoint, "orders", 4)
    by_id = {m.message_id: m for m in stored}
    for receipt, (i, g) in zip(
        receipts, ((i, g) for i in range(each) for g in range(groups)), strict=True
    ):
        message = by_id[receipt.message_id]  # each send got its own message's receipt
        assert message.body == f"{g}:{i}".encode()
        assert (message.queue_id, message.offset) == (receipt.queue_id, receipt.offset)
    for g in range(groups):
        bodies = [m.body for m in stored if m.message_group == f"g{g}"]
        assert bodies == [f"{g}:{i}".encode() for i in range(each)]


def test_a_refused_send_fails_alone_and_the_stream_keeps_working(server: ServerThread) -> None:
    _setup(server.endpoint)

    async def scenario() -> tuple[BaseException | None, Any, int]:
        async with AsyncProducer(server.endpoint) as producer:
            await producer.send("orders", b"before")
            failed: BaseException | None = None
            try:
                await producer.send("missing", b"x")
            except NotFoundError as exc:
                failed = exc
            after = await producer.send("orders", b"after")
            return failed, after, _send_streams(server)

    failed, after, streams = asyncio.run(scenario())
    assert failed is not None
    assert "topic 'missing' does not exist" in str(failed)
    assert after.offset >= 0
    assert streams == 1


def test_multiplex_false_sends_with_unary_calls(server: ServerThread) -> None:
    _setup(server.endpoint)

    async def scenario() -> tuple[Any, int]:
        async with AsyncProducer(server.endpoint, multiplex=False) as producer:
            receipt = await producer.send("orders", b"x")
            return receipt, _send_streams(server)

    receipt, streams = asyncio.run(scenario())
    assert receipt.message_id
    assert streams == 0


# -- the raw protocol --------------------------------------------------------------------


def test_requests_are_stored_in_the_order_read(server: ServerThread) -> None:
    _setup(server.endpoint, queues=1)
    count = 300

    async def scenario() -> dict[int, Any]:
        async with grpc.aio.insecure_channel(server.endpoint) as channel:
            call = _Stub(channel).SendStream()
            # All written before any answer is read: the server has many in flight at once.
            for n in range(count):
                await call.write(_send_request(n, _message(str(n).encode())))
            await call.done_writing()
            answers = {a.request_id: a async for a in call}
            assert await call.code() == grpc.StatusCode.OK
            return answers

    answers = asyncio.run(scenario())
    assert sorted(answers) == list(range(count))
    offsets = [answers[n].send.results[0].offset for n in range(count)]
    assert offsets == list(range(count))
    bodies = [m.body for m in _stored(server.endpoint, "orders", 1)]
    assert bodies == [str(n).encode() for n in range(count)]


class _CountingSender:
    """The broker's sender, counting the sends handed to it at once (a compiled Sender takes
    no new attributes, so the broker's reference to it is what changes)."""

    def __init__(self, sender: Any) -> None:
        self.sender = sender
        self.handed: list[int] = []

    def send_now(self, messages: Any) -> Any:
        self.handed.append(len(messages))
        return self.sender.send_now(messages)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sender, name)


def test_plain_sends_go_to_group_commit_as_read_and_repeats_run_as_tasks(
    server: ServerThread,
) -> None:
    """The stream's fast path is taken: a plain send is handed to group commit as it is read
    (`Broker.send_now`, no task), a repeat runs as a task; offsets follow the order read."""
    _setup(server.endpoint, queues=1)
    count = 120
    broker = server.broker
    counting = _CountingSender(broker._sender)
    server.sync(lambda: setattr(broker, "_sender", counting))

    async def scenario() -> dict[int, Any]:
        async with grpc.aio.insecure_channel(server.endpoint) as channel:
            call = _Stub(channel).SendStream()
            for n in range(count):
                request = _send_request(n, _message(str(n).encode(), message_id=f"id-{n:04d}"))
                request.send.repeat = n % 10 == 5  # a task (the embedded broker's send)
                await call.write(request)
            await call.done_writing()
            answers = {a.request_id: a async for a in call}
            assert await call.code() == grpc.StatusCode.OK
            return answers

    try:
        answers = asyncio.run(scenario())
    finally:
        server.sync(lambda: setattr(broker, "_sender", counting.sender))
    offsets = [answers[n].send.results[0].offset for n in range(count)]
    assert offsets == list(range(count))
    assert [m.body for m in _stored(server.endpoint, "orders", 1)] == [
        str(n).encode() for n in range(count)
    ]
    # Plain sends were handed over at once (those read while a repeat's task ran wait as
    # tasks of their own), never a repeat.
    assert 1 <= len(counting.handed) <= count - count // 10, len(counting.handed)


def test_a_bad_request_gets_the_unary_error_for_itself_only(server: ServerThread) -> None:
    _setup(server.endpoint)
    bad = messaging_pb2.SendMessagesRequest(messages=[_message(b"")])

    async def scenario() -> tuple[dict[int, Any], Any]:
        async with grpc.aio.insecure_channel(server.endpoint) as channel:
            stub = _Stub(channel)
            try:
                await stub.SendMessages(bad)
            except grpc.aio.AioRpcError as exc:
                unary = (exc.code().name, exc.details())
            call = stub.SendStream()
            await call.write(_send_request(1, _message(b"ok")))
            await call.write(messaging_pb2.SendStreamRequest(request_id=2, send=bad))
            await call.write(_send_request(3, _message(b"x", topic="missing")))
            await call.write(messaging_pb2.SendStreamRequest(request_id=4))
            await call.write(_send_request(5, _message(b"ok too")))
            await call.done_writing()
            answers = {a.request_id: a async for a in call}
            return answers, unary

    answers, unary = asyncio.run(scenario())
    assert answers[1].WhichOneof("result") == answers[5].WhichOneof("result") == "send"
    assert (answers[2].error.code, answers[2].error.message) == unary
    assert unary[0] == "INVALID_ARGUMENT"
    assert answers[3].error.code == "NOT_FOUND"
    assert (answers[4].error.code, answers[4].error.message) == (
        "INVALID_ARGUMENT",
        "the request has no send",
    )
    assert [m.body for m in _stored(server.endpoint, "orders", 4)].count(b"ok too") == 1


def test_shutdown_answers_the_sends_in_flight_then_ends_unavailable(tmp_path: Path) -> None:
    server = ServerThread(tmp_path / "data")
    server.start()
    try:
        _setup(server.endpoint, queues=1)

        async def scenario() -> tuple[list[Any], grpc.StatusCode, str]:
            async with grpc.aio.insecure_channel(server.endpoint) as channel:
                call = _Stub(channel).SendStream()
                for n in range(50):
                    await call.write(_send_request(n, _message(b"x")))
                first = await call.read()  # the server is serving this stream
                await asyncio.to_thread(server.stop)
                answers = [first]
                with contextlib.suppress(grpc.aio.AioRpcError):  # the end, UNAVAILABLE
                    while (answer := await call.read()) is not grpc.aio.EOF:
                        answers.append(answer)
                return answers, await call.code(), await call.details()

        answers, code, details = asyncio.run(scenario())
    finally:
        server.stop()
    assert code == grpc.StatusCode.UNAVAILABLE
    assert "shutting down" in details
    # Every send read before the shutdown was answered, and answered ones were stored.
    stored_ok = [a for a in answers if a.WhichOneof("result") == "send"]
    assert len(stored_ok) == len(answers) >= 1
    server.start()
    try:
        assert len(_stored(server.endpoint, "orders", 1)) >= len(stored_ok)
    finally:
        server.stop()


# -- crashes: retried sends are stored once ----------------------------------------------


def _serve(data_dir: Path, port: int) -> subprocess.Popen[str]:
    """`popmq serve` on a fixed port, so the producer's endpoint survives a restart."""
    process = subprocess.Popen(
        [sys.executable, "-m", "popmq.cli", "serve", "--listen", f"127.0.0.1:{port}",
         "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert process.stdout is not None
    for line in process.stdout:
        if "listening on" in line:
            return process
    process.kill()
    raise AssertionError(f"server did not start: {process.communicate()[0]}")


def test_a_crash_mid_stream_loses_no_acknowledged_send_and_stores_none_twice(
    tmp_path: Path,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"127.0.0.1:{port}"
    process = _serve(tmp_path / "data", port)
    # Patient enough to outlast the restart: sends broken with the stream are retried.
    retry = RetryPolicy(max_attempts=200, backoff=RetryBackoff(initial_s=0.02, max_s=0.1))
    senders, each = 4, 60
    try:
        _setup(endpoint, queues=2)

        async def scenario() -> tuple[list[Any], list[BaseException | None]]:
            nonlocal process
            crashed = asyncio.Event()
            broken: list[BaseException | None] = []

            async def sender(producer: AsyncProducer, s: int) -> list[Any]:
                receipts = []
                for i in range(each):
                    receipts.append(await producer.send("orders", f"{s}:{i}".encode()))
                    if s == 0 and i == each // 3:
                        crashed.set()
                return receipts

            async with AsyncProducer(endpoint, retry=retry) as producer:
                sending = [asyncio.ensure_future(sender(producer, s)) for s in range(senders)]
                await crashed.wait()
                process.kill()  # no graceful answers: the stream just breaks
                await asyncio.to_thread(process.communicate)
                # Sends made meanwhile fail with the broken stream and are retried.
                async with AsyncProducer(endpoint, retry=RetryPolicy(max_attempts=1)) as probe:
                    try:
                        await probe.send("orders", b"never")
                    except UnavailableError as exc:
                        broken.append(exc)
                process = await asyncio.to_thread(_serve, tmp_path / "data", port)
                done = await asyncio.gather(*sending)
            return [r for receipts in done for r in receipts], broken

        receipts, broken = asyncio.run(scenario())
        stored = _stored(endpoint, "orders", 2)
    finally:
        process.kill()
        process.communicate()
    assert len(broken) == 1  # the server really was down while sends were under way
    assert len(receipts) == senders * each
    bodies = [m.body for m in stored]
    # No acknowledged send lost, none stored twice (dedup recognised the retries).
    assert sorted(bodies) == sorted(
        f"{s}:{i}".encode() for s in range(senders) for i in range(each)
    )
    by_id = {m.message_id: m for m in stored}
    for receipt in receipts:
        assert (by_id[receipt.message_id].queue_id, by_id[receipt.message_id].offset) == (
            receipt.queue_id,
            receipt.offset,
        )
