"""PopStream end to end: many pops over one bidirectional stream, through the SDK and raw.

The real server on 127.0.0.1 (a pinned port where a test restarts it, so the consumer's
endpoint stays valid), the SDK's AsyncSimpleConsumer (multiplexed by default) and the raw
generated stub for what the SDK never does (duplicate ids, half-close, not reading).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from popmq import (
    Admin,
    AsyncProducer,
    AsyncSimpleConsumer,
    InvalidArgumentError,
    Message,
    NotFoundError,
    PopMQError,
    Producer,
    ReceivedMessage,
    Sql,
    UnavailableError,
)
from popmq._gen.popmq.v1 import messaging_pb2, messaging_pb2_grpc
from popmq.broker_core.config import BrokerConfig, LongPollingConfig, StoreConfig
from popmq.proxy.pop_stream import MAX_IN_FLIGHT
from popmq.proxy.server import PopMQServer
from popmq.runtime.config import ServerConfig
from tests.support.server_thread import ServerThread
from tests.support.thread_loops import stop_thread_loop
from tests.support.waiting import until, wait_until

T = TypeVar("T")
_Stub: Any = messaging_pb2_grpc.MessagingServiceStub


def _setup(endpoint: str, topic: str = "orders", queues: int = 4) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic(topic, queues=queues)


def _streams(server: ServerThread) -> int:
    return server.sync(lambda: server.server.messaging.pop_streams)  # type: ignore[union-attr]


def _acked(server: ServerThread) -> int:
    return server.sync(lambda: server.broker.stats.acked[("g", "orders")])


def _held(server: ServerThread) -> int:
    return server.sync(lambda: server.broker.polling.held)


def _pop(topic: str = "orders", group: str = "g", wait_s: int = 30, **fields: Any) -> Any:
    return messaging_pb2.PopRequest(
        group=group, topic=topic, long_polling_timeout=Duration(seconds=wait_s), **fields
    )


def _pop_request(request_id: int, **fields: Any) -> messaging_pb2.PopStreamRequest:
    return messaging_pb2.PopStreamRequest(request_id=request_id, pop=_pop(**fields))


def _cancel_request(request_id: int) -> messaging_pb2.PopStreamRequest:
    return messaging_pb2.PopStreamRequest(
        request_id=request_id, cancel=messaging_pb2.PopStreamCancel()
    )


# -- the SDK over the stream -------------------------------------------------------------


def test_concurrent_receives_share_one_stream_and_get_distinct_messages(
    server: ServerThread,
) -> None:
    _setup(server.endpoint)

    async def scenario() -> list[list[bytes]]:
        async with AsyncSimpleConsumer(server.endpoint, group="g", topic="orders") as consumer:
            receives = [
                asyncio.ensure_future(consumer.receive(max_messages=1, wait_s=10))
                for _ in range(40)
            ]
            await until(lambda: _held(server) == 40, "40 pops held", 10.0)
            assert _streams(server) == 1
            async with AsyncProducer(server.endpoint) as producer:
                for i in range(40):
                    await producer.send("orders", f"m{i}".encode())
            got = await asyncio.gather(*receives)
            return [[m.body for m in messages] for messages in got]

    got = asyncio.run(scenario())
    assert all(len(bodies) == 1 for bodies in got)
    assert sorted(b for bodies in got for b in bodies) == sorted(
        f"m{i}".encode() for i in range(40)
    )
    wait_until(lambda: _streams(server) == 0, "closing the consumer to end its stream", 10.0)


def test_a_held_receive_is_woken_by_a_send(server: ServerThread) -> None:
    _setup(server.endpoint)

    async def scenario() -> tuple[list[bytes], float]:
        async with AsyncSimpleConsumer(server.endpoint, group="g", topic="orders") as consumer:
            receive = asyncio.ensure_future(consumer.receive(wait_s=20))
            await until(lambda: _held(server) == 1, "1 pop held", 10.0)
            sent = time.monotonic()
            async with AsyncProducer(server.endpoint) as producer:
                await producer.send("orders", b"wake")
            messages = await receive
            return [m.body for m in messages], time.monotonic() - sent

    bodies, elapsed = asyncio.run(scenario())
    assert bodies == [b"wake"]
    assert elapsed < 10  # woken by the send, not by the end of its 20 s wait


def test_bad_arguments_fail_their_receive_only_with_the_unary_pop_error(
    server: ServerThread,
) -> None:
    _setup(server.endpoint)
    bad: list[tuple[str, dict[str, Any]]] = [
        ("orders", {"max_messages": 0}),
        ("orders", {"max_messages": 33}),
        ("orders", {"invisible_duration_s": 0.5}),
        ("orders", {"wait_s": 31}),
        ("missing", {}),
    ]

    async def errors(multiplex: bool) -> list[tuple[type[PopMQError], str, str]]:
        found = []
        async with (
            AsyncSimpleConsumer(
                server.endpoint, group="g", topic="orders", multiplex=multiplex
            ) as held_by,
            AsyncSimpleConsumer(
                server.endpoint, group="g", topic="orders", filter=Sql("a >"), multiplex=multiplex
            ) as bad_filter,
        ):
            # A receive held on the same stream all along: the errors end only their own.
            held = asyncio.ensure_future(held_by.receive(wait_s=20))
            await until(lambda: _held(server) == 1, "1 pop held", 10.0)
            for topic, arguments in bad:
                held_by.topic = topic
                try:
                    await held_by.receive(**{"wait_s": 0, **arguments})
                except PopMQError as exc:
                    found.append((type(exc), exc.code, exc.message))
            held_by.topic = "orders"
            try:
                await bad_filter.receive(wait_s=0)
            except PopMQError as exc:
                found.append((type(exc), exc.code, exc.message))
            assert not held.done()
            assert _streams(server) == (2 if multiplex else 0)
            async with AsyncProducer(server.endpoint) as producer:
                await producer.send("orders", b"still works")
            assert [m.body for m in await held] == [b"still works"]
            await held_by.ack(await held)
        return found

    streamed = asyncio.run(errors(multiplex=True))
    assert [cls for cls, _, _ in streamed] == [InvalidArgumentError] * 4 + [
        NotFoundError,
        InvalidArgumentError,
    ]
    assert "max_messages 0 is below the minimum 1" in streamed[0][2]
    assert streamed == asyncio.run(errors(multiplex=False))


def test_a_cancelled_receive_cancels_its_pop_and_loses_no_message(server: ServerThread) -> None:
    _setup(server.endpoint)

    async def scenario() -> list[bytes]:
        async with AsyncSimpleConsumer(server.endpoint, group="g", topic="orders") as consumer:
            receive = asyncio.ensure_future(consumer.receive(wait_s=20))
            await until(lambda: _held(server) == 1, "1 pop held", 10.0)
            receive.cancel()
            with pytest.raises(asyncio.CancelledError):
                await receive
            await until(lambda: _held(server) == 0, "the server to cancel the pop", 10.0)
            async with AsyncProducer(server.endpoint) as producer:
                await producer.send("orders", b"for the next receive")
            return [m.body for m in await consumer.receive(wait_s=5)]

    assert asyncio.run(scenario()) == [b"for the next receive"]


def test_messages_a_cancelled_receive_got_anyway_are_given_back_at_once(
    server: ServerThread,
) -> None:
    _setup(server.endpoint, queues=1)

    def popped() -> int:
        return server.sync(lambda: server.broker.stats.popped[("g", "orders")])

    async def attempt(producer: AsyncProducer, round_: int) -> bool:
        """Cancel a receive whose 5 messages the server popped, a little later each round
        (its answer unread, or read and not yet taken); False when the receive took its
        answer first."""
        bodies = [f"r{round_}-{i}".encode() for i in range(5)]
        await producer.send_batch("orders", [Message(b) for b in bodies])
        before = popped()
        async with AsyncSimpleConsumer(server.endpoint, group="g", topic="orders") as consumer:
            receive = asyncio.ensure_future(
                consumer.receive(max_messages=5, invisible_duration_s=60, wait_s=5)
            )
            # Blocking looks at the server between single loop turns (on purpose: the client
            # must not get to read the answer), then a blocking wait in some rounds.
            while popped() < before + 5:  # noqa: ASYNC110
                await asyncio.sleep(0)
            if round_ % 2:
                time.sleep(0.05)  # noqa: ASYNC251 - the answer reaches grpc, not this loop
            for _ in range(round_ // 2):
                await asyncio.sleep(0)
            if receive.done():
                await consumer.ack(await receive)
                return False
            receive.cancel()
            with pytest.raises(asyncio.CancelledError):
                await receive
        # Closing gave them back (Nack, no delay) rather than leaving them invisible 60 s.
        async with AsyncSimpleConsumer(server.endpoint, group="g", topic="orders") as other:
            got: list[ReceivedMessage] = []
            give_up = time.monotonic() + 5.0
            while len(got) < 5 and time.monotonic() < give_up:
                got += await other.receive(max_messages=5, invisible_duration_s=60, wait_s=1)
            await other.ack(got)
        assert sorted(m.body for m in got) == bodies
        assert {m.delivery_attempt for m in got} == {2}
        return True

    async def scenario() -> int:
        async with AsyncProducer(server.endpoint) as producer:
            return sum([await attempt(producer, round_) for round_ in range(24)])

    assert asyncio.run(scenario()) >= 1  # at least one receive was cancelled


def test_receives_beyond_the_stream_limit_use_unary_pops(tmp_path: Path) -> None:
    config = BrokerConfig(long_polling=LongPollingConfig(max_per_key=2 * MAX_IN_FLIGHT))
    server = ServerThread(tmp_path / "data", broker=config)
    server.start()
    try:
        _setup(server.endpoint)
        count = MAX_IN_FLIGHT + 10

        async def scenario() -> int:
            async with AsyncSimpleConsumer(server.endpoint, group="g", topic="orders") as consumer:
                receives = [
                    asyncio.ensure_future(consumer.receive(max_messages=1, wait_s=20))
                    for _ in range(count)
                ]
                await until(lambda: _held(server) == count, f"{count} pops held", 30)
                assert _streams(server) == 1
                async with AsyncProducer(server.endpoint) as producer:
                    for i in range(count):
                        await producer.send("orders", str(i).encode())
                got = await asyncio.gather(*receives)
                return len({m.body for messages in got for m in messages})

        assert asyncio.run(scenario()) == count
    finally:
        server.stop()


def test_multiplex_false_receives_with_unary_pops(server: ServerThread) -> None:
    _setup(server.endpoint)

    async def scenario() -> list[bytes]:
        async with AsyncSimpleConsumer(
            server.endpoint, group="g", topic="orders", multiplex=False
        ) as consumer:
            assert not consumer.multiplex
            receives = [asyncio.ensure_future(consumer.receive(wait_s=10)) for _ in range(3)]
            await until(lambda: _held(server) == 3, "3 pops held", 10.0)
            assert _streams(server) == 0
            async with AsyncProducer(server.endpoint) as producer:
                await producer.send("orders", b"unary")
            done, pending = await asyncio.wait(receives, return_when=asyncio.FIRST_COMPLETED)
            for receive in pending:
                receive.cancel()
            return [m.body for task in done for m in task.result()]

    assert asyncio.run(scenario()) == [b"unary"]


def test_a_server_not_ready_refuses_the_stream_as_it_refuses_pop(tmp_path: Path) -> None:
    async def scenario() -> list[tuple[type[PopMQError], str]]:
        server = PopMQServer(
            ServerConfig(
                listen="127.0.0.1:0", broker=BrokerConfig(store=StoreConfig(data_dir=tmp_path))
            )
        )
        port = await server.listen()  # health and reflection only: the store is not open
        refused = []
        try:
            for multiplex in (True, False):
                async with AsyncSimpleConsumer(
                    f"127.0.0.1:{port}", group="g", topic="orders", multiplex=multiplex
                ) as consumer:
                    with pytest.raises(PopMQError) as raised:
                        await consumer.receive(wait_s=1)
                    refused.append((type(raised.value), raised.value.message))
        finally:
            await server.stop()
        return refused

    streamed, unary = asyncio.run(scenario())
    assert streamed == unary
    assert streamed[0] is UnavailableError and "starting or stopping" in streamed[1]


# -- shutdown and crashes ----------------------------------------------------------------


class _GracefulServer:
    """The server on a loop thread with a long shutdown grace period (ServerThread's is 1 s),
    to show that held pops do not wait for it."""

    def __init__(self, data_dir: Path, grace_s: float) -> None:
        self._config = ServerConfig(
            listen="127.0.0.1:0",
            shutdown_grace_s=grace_s,
            broker=BrokerConfig(store=StoreConfig(data_dir=data_dir)),
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="popmq-graceful")
        self._thread.start()
        self.server = PopMQServer(self._config)
        self.endpoint = f"127.0.0.1:{self.call(self.server.start)}"

    def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        async def run() -> T:
            return await fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=60)

    def held(self) -> int:
        async def read() -> int:
            return self.server.broker.polling.held

        return self.call(read)

    def stop(self) -> None:
        self.call(self.server.stop)

    def close(self) -> None:
        self.stop()
        stop_thread_loop(self._loop, self._thread)


def test_shutdown_answers_held_receives_at_once(tmp_path: Path) -> None:
    server = _GracefulServer(tmp_path / "data", grace_s=10.0)
    try:
        _setup(server.endpoint)

        async def scenario() -> tuple[list[list[Any]], float]:
            async with AsyncSimpleConsumer(server.endpoint, group="g", topic="orders") as consumer:
                receives = [asyncio.ensure_future(consumer.receive(wait_s=30)) for _ in range(5)]
                await until(lambda: server.held() == 5, "5 pops held", 10.0)
                began = time.monotonic()
                await asyncio.to_thread(server.stop)
                stopped = time.monotonic() - began
                answered = await asyncio.gather(*receives)
                with pytest.raises(UnavailableError):
                    await consumer.receive(wait_s=1)  # nobody listens any more
                return answered, stopped

        answered, stopped = asyncio.run(scenario())
    finally:
        server.close()
    assert answered == [[]] * 5
    # Answered and ended at once: neither the 30 s waits nor the 10 s grace period ran out.
    assert stopped < 5


def _serve(data_dir: Path, port: int) -> subprocess.Popen[str]:
    """`popmq serve` on a fixed port, so the consumer's endpoint survives a restart."""
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


def test_a_crash_fails_receives_in_flight_and_the_next_receive_reopens(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"127.0.0.1:{port}"
    process = _serve(tmp_path / "data", port)
    try:
        _setup(endpoint)

        async def scenario() -> tuple[list[BaseException | list[Any]], list[bytes]]:
            nonlocal process
            async with AsyncSimpleConsumer(endpoint, group="g", topic="orders") as consumer:
                receives = [asyncio.ensure_future(consumer.receive(wait_s=30)) for _ in range(3)]
                await asyncio.sleep(1.0)  # held (a subprocess: nothing to poll)
                assert not any(r.done() for r in receives)
                process.kill()  # no graceful answers: the stream just breaks
                process.communicate()
                failed = await asyncio.gather(*receives, return_exceptions=True)
                process = await asyncio.to_thread(_serve, tmp_path / "data", port)
                async with AsyncProducer(endpoint) as producer:
                    await producer.send("orders", b"after the restart")
                again = await consumer.receive(wait_s=5)
                return failed, [m.body for m in again]

        failed, again = asyncio.run(scenario())
    finally:
        process.kill()
        process.communicate()
    assert all(isinstance(f, UnavailableError) for f in failed), failed
    assert again == [b"after the restart"]


# -- the raw protocol --------------------------------------------------------------------


async def _open(endpoint: str) -> tuple[grpc.aio.Channel, Any]:
    channel = grpc.aio.insecure_channel(endpoint)
    return channel, _Stub(channel).PopStream()


def test_a_pop_beyond_the_limit_is_rejected_until_an_answer_frees_room(tmp_path: Path) -> None:
    config = BrokerConfig(long_polling=LongPollingConfig(max_per_key=2 * MAX_IN_FLIGHT))
    server = ServerThread(tmp_path / "data", broker=config)
    server.start()
    try:
        _setup(server.endpoint)

        async def scenario() -> tuple[Any, Any, int]:
            channel, call = await _open(server.endpoint)
            async with channel:
                for i in range(MAX_IN_FLIGHT):
                    await call.write(_pop_request(i))
                await until(
                    lambda: _held(server) == MAX_IN_FLIGHT, f"{MAX_IN_FLIGHT} pops held", 30
                )
                await call.write(_pop_request(5000))
                rejected = await call.read()
                await call.write(_cancel_request(7))
                cancelled = await call.read()
                await call.write(_pop_request(5001))
                await until(
                    lambda: _held(server) == MAX_IN_FLIGHT, f"{MAX_IN_FLIGHT} pops held", 30
                )
                held = _held(server)
                call.cancel()
            return rejected, cancelled, held

        rejected, cancelled, held = asyncio.run(scenario())
        assert rejected.request_id == 5000
        assert rejected.error.code == "RESOURCE_EXHAUSTED"
        assert f"at most {MAX_IN_FLIGHT}" in rejected.error.message
        assert (cancelled.request_id, cancelled.error.code) == (7, "CANCELLED")
        assert held == MAX_IN_FLIGHT  # pop 5001 took the room pop 7 left
    finally:
        server.stop()


def test_ending_the_call_cancels_its_pops(server: ServerThread) -> None:
    _setup(server.endpoint)

    async def scenario() -> None:
        channel, call = await _open(server.endpoint)
        async with channel:
            for i in range(10):
                await call.write(_pop_request(i))
            await until(lambda: _held(server) == 10, "10 pops held", 10.0)
            call.cancel()
            await until(
                lambda: _held(server) == 0 and _streams(server) == 0,
                "no pop held and no stream open",
                10.0,
            )

    asyncio.run(scenario())


def test_a_message_popped_on_a_stream_that_died_comes_back_after_its_invisible_time(
    server: ServerThread,
) -> None:
    _setup(server.endpoint, queues=1)
    invisible = Duration(seconds=2)

    async def scenario() -> tuple[list[Any], list[Any], float]:
        channel, call = await _open(server.endpoint)
        async with channel:
            await call.write(_pop_request(1, invisible_duration=invisible))
            await until(lambda: _held(server) == 1, "1 pop held", 10.0)
            popped_at = time.monotonic()  # the pop is woken by the send, so not before this
            with Producer(server.endpoint) as producer:
                producer.send("orders", b"popped, never read")
            await until(lambda: _held(server) == 0, "no pop held", 10.0)
            call.cancel()  # its answer is never read
        async with AsyncSimpleConsumer(server.endpoint, group="g", topic="orders") as consumer:
            early = await consumer.receive(wait_s=1)
            again = await consumer.receive(wait_s=10)
            return early, again, time.monotonic() - popped_at

    early, again, elapsed = asyncio.run(scenario())
    assert early == []  # still invisible
    assert [(m.body, m.delivery_attempt) for m in again] == [(b"popped, never read", 2)]
    assert elapsed >= 2


def test_half_close_answers_the_pops_in_flight_then_ends_ok(server: ServerThread) -> None:
    _setup(server.endpoint)

    async def scenario() -> tuple[list[int], Any]:
        channel, call = await _open(server.endpoint)
        async with channel:
            for i in range(3):
                await call.write(_pop_request(i, wait_s=1))
            await call.done_writing()
            ids = []
            while (answer := await call.read()) is not grpc.aio.EOF:
                assert answer.WhichOneof("result") == "pop"
                ids.append(answer.request_id)
            return sorted(ids), await call.code()

    ids, code = asyncio.run(scenario())
    assert ids == [0, 1, 2]
    assert code == grpc.StatusCode.OK


def test_answers_wait_for_a_client_that_reads_late(server: ServerThread) -> None:
    _setup(server.endpoint)
    count = 60
    with Producer(server.endpoint) as producer:
        for i in range(count):
            # 100 KiB that zlib cannot shrink: a few answers fill the connection's window.
            producer.send("orders", i.to_bytes(2, "big") + os.urandom(100 * 1024))

    async def scenario() -> tuple[list[int], set[bytes]]:
        channel, call = await _open(server.endpoint)
        async with channel:
            for i in range(count):
                await call.write(_pop_request(i, wait_s=0, max_messages=1))
            await asyncio.sleep(1.0)  # the answers are ready and wait to be written
            async with asyncio.timeout(30):
                answers = [await call.read() for _ in range(count)]
            call.cancel()
        return [a.request_id for a in answers], {a.pop.messages[0].body[:2] for a in answers}

    ids, heads = asyncio.run(scenario())
    assert sorted(ids) == list(range(count))
    assert heads == {i.to_bytes(2, "big") for i in range(count)}


def test_a_repeated_request_id_in_flight_ends_the_stream(server: ServerThread) -> None:
    _setup(server.endpoint)

    async def scenario() -> grpc.aio.AioRpcError:
        channel, call = await _open(server.endpoint)
        async with channel:
            await call.write(_pop_request(1))
            await call.write(_pop_request(1))
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await call.read()
            await until(lambda: _held(server) == 0, "no pop held", 10.0)
            return raised.value

    error = asyncio.run(scenario())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "request_id 1 repeats a request still in flight" in (error.details() or "")


def _ack_request(request_id: int, *handles: str, group: str = "g") -> Any:
    return messaging_pb2.PopStreamRequest(
        request_id=request_id,
        ack=messaging_pb2.AckRequest(group=group, receipt_handles=list(handles)),
    )


def _results(response: Any) -> list[tuple[str, str]]:
    return [(r.receipt_handle, r.code) for r in response.results]


def test_acks_on_the_stream_answer_as_the_ack_rpc_and_the_messages_stay_acked(
    server: ServerThread,
) -> None:
    _setup(server.endpoint)
    with Producer(server.endpoint) as producer:
        for i in range(4):
            producer.send("orders", f"m{i}".encode())

    async def scenario() -> tuple[Any, Any, Any, Any, Any]:
        channel, call = await _open(server.endpoint)
        async with channel:
            stub = _Stub(channel)
            await call.write(_pop_request(1, max_messages=4, wait_s=5))
            popped = (await call.read()).pop.messages
            assert len(popped) == 4
            first, second = [m.receipt_handle for m in popped[:2]]
            rest = [m.receipt_handle for m in popped[2:]]
            # Two handles, one of them twice, and a garbage one: per-entry results.
            await call.write(_ack_request(2, first, second, first, "garbage"))
            on_stream = await call.read()
            by_rpc = await stub.Ack(
                messaging_pb2.AckRequest(group="g", receipt_handles=[first, "garbage", *rest])
            )
            # Nothing is left to deliver (a short invisible time would bring back the rest).
            await call.write(_pop_request(3, wait_s=0, invisible_duration=Duration(seconds=1)))
            again = await call.read()
            await asyncio.sleep(1.2)
            await call.write(_pop_request(4, wait_s=0))
            later = await call.read()
            call.cancel()
            return on_stream, by_rpc, again, later, (first, second, rest)

    on_stream, by_rpc, again, later, (first, second, rest) = asyncio.run(scenario())
    assert on_stream.request_id == 2 and on_stream.HasField("ack")
    garbage_code = by_rpc.results[1].code
    assert garbage_code == "INVALID_ARGUMENT"
    assert _results(on_stream.ack) == [
        (first, "OK"),
        (second, "OK"),
        (first, "OK"),  # acked before: still OK, as for the Ack RPC
        ("garbage", garbage_code),
    ]
    assert on_stream.ack.results[3].message == by_rpc.results[1].message
    assert _results(by_rpc) == [
        (first, "OK"),
        ("garbage", garbage_code),
        *((h, "OK") for h in rest),
    ]
    assert list(again.pop.messages) == [] and list(later.pop.messages) == []


def test_a_bad_ack_fails_that_request_only_with_the_ack_rpc_error(server: ServerThread) -> None:
    _setup(server.endpoint)

    async def scenario() -> list[tuple[Any, grpc.aio.AioRpcError]]:
        channel, call = await _open(server.endpoint)
        async with channel:
            stub = _Stub(channel)
            pairs = []
            for request_id, group, handles in ((1, "g", ()), (2, "bad group!", ("x",))):
                await call.write(_ack_request(request_id, *handles, group=group))
                answer = await call.read()
                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    await stub.Ack(messaging_pb2.AckRequest(group=group, receipt_handles=handles))
                pairs.append((answer, raised.value))
            await call.write(_pop_request(3, wait_s=0))  # the stream still works
            assert (await call.read()).HasField("pop")
            call.cancel()
            return pairs

    for answer, unary_error in asyncio.run(scenario()):
        assert answer.WhichOneof("result") == "error"
        assert answer.error.code == unary_error.code().name == "INVALID_ARGUMENT"
        assert answer.error.message == unary_error.details()


def test_a_cancel_does_not_take_back_an_ack(server: ServerThread) -> None:
    _setup(server.endpoint)
    with Producer(server.endpoint) as producer:
        producer.send("orders", b"kept acked")

    async def scenario() -> tuple[Any, Any]:
        channel, call = await _open(server.endpoint)
        async with channel:
            await call.write(_pop_request(1, wait_s=5, invisible_duration=Duration(seconds=1)))
            handle = (await call.read()).pop.messages[0].receipt_handle
            await call.write(_ack_request(2, handle))
            await call.write(_cancel_request(2))
            answer = await call.read()
            await asyncio.sleep(1.2)
            await call.write(_pop_request(3, wait_s=0))
            later = await call.read()
            call.cancel()
            return answer, later

    answer, later = asyncio.run(scenario())
    assert answer.request_id == 2 and answer.HasField("ack")
    assert [r.code for r in answer.ack.results] == ["OK"]
    assert list(later.pop.messages) == []


def test_the_sdk_acks_over_the_stream_and_falls_back_to_unary_when_asked(
    server: ServerThread,
) -> None:
    _setup(server.endpoint)
    with Producer(server.endpoint) as producer:
        for i in range(4):
            producer.send("orders", f"m{i}".encode())

    async def acks_with(multiplex: bool) -> tuple[int, int]:
        async with AsyncSimpleConsumer(
            server.endpoint, group="g", topic="orders", multiplex=multiplex
        ) as consumer:
            got = await consumer.receive(max_messages=2, invisible_duration_s=1, wait_s=5)
            assert len(got) == 2
            before = _acked(server)
            await consumer.ack(got)
            got[0].receipt_handle = "garbage"  # the server's error for an entry is raised
            with pytest.raises(InvalidArgumentError):
                await consumer.ack(got[0])
            return _acked(server) - before, _streams(server)

    assert asyncio.run(acks_with(True)) == (2, 1)
    assert asyncio.run(acks_with(False)) == (2, 0)


def test_a_request_without_pop_or_cancel_is_answered_invalid_argument(
    server: ServerThread,
) -> None:
    _setup(server.endpoint)

    async def scenario() -> tuple[Any, Any]:
        channel, call = await _open(server.endpoint)
        async with channel:
            await call.write(messaging_pb2.PopStreamRequest(request_id=3))
            empty = await call.read()
            await call.write(_cancel_request(99))  # nothing in flight: ignored
            await call.write(_pop_request(4, wait_s=0))
            answer = await call.read()
            call.cancel()
            return empty, answer

    empty, answer = asyncio.run(scenario())
    assert (empty.request_id, empty.error.code) == (3, "INVALID_ARGUMENT")
    assert answer.request_id == 4 and answer.HasField("pop")
