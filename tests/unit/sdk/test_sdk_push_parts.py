"""The push consumer's parts on their own: flow control accounting, held messages, options,
the listener runner and ack batching. No server: the network seam of the acker is the
``ack_handles`` call it is given; the integration tests run the parts together."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from datetime import datetime

import pytest

from popmq import (
    AsyncPushConsumer,
    ConsumeResult,
    InvalidArgumentError,
    PushConsumerOptions,
    ReceivedMessage,
)
from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk._push.acker import ACK_DELAY_S, Acker
from popmq.sdk._push.flow_control import FlowControl, Held, HeldMessages
from popmq.sdk._push.listener import ListenerRunner, called_from_listener
from popmq.sdk._push.shared import Counters
from popmq.sdk.push_consumer import (
    DEFAULT_MAX_CACHED_BYTES,
    DEFAULT_MAX_CACHED_MESSAGES,
    DEFAULT_MAX_PROCESSING_S,
)


def _message(n: int, body: bytes = b"x", topic: str = "t") -> ReceivedMessage:
    return ReceivedMessage.from_proto(
        messaging_pb2.ReceivedMessage(
            message_id=f"id{n}", topic=topic, offset=n, body=body, receipt_handle=f"h{n}"
        )
    )


def _held(n: int, body: bytes = b"x") -> Held:
    # The simple consumer is not used by the parts under test here.
    return Held(_message(n, body), consumer=None, size=len(body), received_at=0.0)  # type: ignore[arg-type]


# -- flow control -------------------------------------------------------------------------


def test_room_is_what_the_message_limit_leaves_and_none_at_the_byte_limit() -> None:
    async def scenario() -> None:
        flow = FlowControl(max_messages=3, max_bytes=100)
        assert flow.room() == 3
        flow.add(60)
        assert flow.room() == 2
        flow.add(30, count=2)
        assert (flow.messages, flow.bytes, flow.room()) == (3, 90, 0)
        flow.remove(90, count=3)
        flow.add(100)  # one message at the byte limit: no room though 2 are left by count
        assert flow.room() == 0

    asyncio.run(scenario())


def test_freeing_room_wakes_a_receiver_waiting_for_it() -> None:
    async def scenario() -> None:
        flow = FlowControl(max_messages=1, max_bytes=100)
        flow.add(10)
        waiter = asyncio.ensure_future(flow.wait_for_room())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        flow.remove(10)
        assert await asyncio.wait_for(waiter, 1.0) == 1

    asyncio.run(scenario())


def test_wake_has_a_waiter_check_its_condition_again_without_room() -> None:
    async def scenario() -> None:
        flow = FlowControl(max_messages=1, max_bytes=100)
        flow.add(10)
        ready = False
        waiter = asyncio.ensure_future(flow.wait_until(lambda: ready))
        await asyncio.sleep(0.01)
        flow.wake()  # condition still false: keeps waiting
        await asyncio.sleep(0.01)
        assert not waiter.done()
        ready = True
        flow.wake()
        await asyncio.wait_for(waiter, 1.0)
        assert flow.room() == 0

    asyncio.run(scenario())


def test_forgetting_a_held_message_frees_its_room_once() -> None:
    async def scenario() -> None:
        flow = FlowControl(max_messages=10, max_bytes=100)
        held = HeldMessages(flow)
        a, b = _held(1, b"aaaa"), _held(2, b"bb")
        held.add(a)
        held.add(b)
        assert (flow.messages, flow.bytes) == (2, 6)
        held.forget(a)
        held.forget(a)  # ack, nack and release may each forget it
        assert (flow.messages, flow.bytes) == (1, 2)

    asyncio.run(scenario())


def test_unstarted_leaves_out_running_and_settled_messages() -> None:
    async def scenario() -> None:
        held = HeldMessages(FlowControl(max_messages=10, max_bytes=100))
        waiting, running, settled = _held(1), _held(2), _held(3)
        running.started = True
        settled.settled = True
        for h in (waiting, running, settled):
            held.add(h)
        assert held.unstarted() == [waiting]

    asyncio.run(scenario())


# -- options ------------------------------------------------------------------------------


def test_option_defaults_are_rocketmqs() -> None:
    options = PushConsumerOptions()
    assert options.max_cached_messages == DEFAULT_MAX_CACHED_MESSAGES == 1024
    assert options.max_cached_bytes == DEFAULT_MAX_CACHED_BYTES == 64 * 1024 * 1024
    assert options.max_processing_s == DEFAULT_MAX_PROCESSING_S == 900.0
    assert (options.consume_threads, options.mode, options.strategy) == (20, "pop", "average")


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("consume_threads", 0, "consume_threads must be an integer >= 1, got 0"),
        ("max_cached_bytes", True, "max_cached_bytes must be an integer >= 1, got True"),
        ("pull_batch_size", 1.5, "pull_batch_size must be an integer >= 1, got 1.5"),
        ("invisible_duration_s", 0, "invisible_duration_s must be a positive number, got 0"),
        ("max_processing_s", math.inf, "max_processing_s must be finite, got inf"),
        ("wait_s", -1, "wait_s must be >= 0, got -1"),
        ("mode", "push", "mode 'push' is unknown: use 'pop' or 'queue_exclusive'"),
        ("strategy", "random", "strategy 'random' is unknown: use one of average, "),
        ("consume_from", datetime(2026, 1, 1), "consume_from must be timezone-aware"),
        ("consume_from", "middle", "consume_from 'middle' is unknown: use 'last', 'first' or"),
        ("configured_queues", {"t": [0]}, "configured_queues is only for strategy 'by_config'"),
    ],
)
def test_a_bad_option_is_refused_naming_what_is_allowed(
    field: str, value: object, error: str
) -> None:
    with pytest.raises(InvalidArgumentError, match="^" + error.replace("(", r"\(")):
        PushConsumerOptions(**{field: value})  # type: ignore[arg-type]


def test_options_are_frozen_keyword_only_and_keep_their_own_copy_of_the_queues() -> None:
    queues = {"t": [0, 1]}
    options = PushConsumerOptions(strategy="by_config", configured_queues=queues, wait_s=1)
    queues["t"].append(2)
    assert dict(options.configured_queues or {}) == {"t": (0, 1)}
    assert isinstance(options.wait_s, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.wait_s = 2.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        PushConsumerOptions(20)  # type: ignore[misc]
    assert dataclasses.replace(options, wait_s=2.0).wait_s == 2.0


def test_options_and_a_differing_keyword_together_are_refused() -> None:
    def listener(_message: ReceivedMessage) -> ConsumeResult:
        return ConsumeResult.SUCCESS

    options = PushConsumerOptions(wait_s=1.0)
    with pytest.raises(TypeError, match="consume_threads, wait_s given both as keywords"):
        AsyncPushConsumer(
            "127.0.0.1:1",
            "g",
            subscriptions={"t": "*"},
            listener=listener,
            options=options,
            wait_s=5.0,
            consume_threads=2,
        )
    with pytest.raises(TypeError, match="options must be a PushConsumerOptions, got dict"):
        AsyncPushConsumer(
            "127.0.0.1:1",
            "g",
            subscriptions={"t": "*"},
            listener=listener,
            options={},  # type: ignore[arg-type]
        )


def test_options_given_alone_are_the_consumers_settings() -> None:
    async def scenario() -> None:
        options = PushConsumerOptions(mode="queue_exclusive", wait_s=1.0, client_id="me")
        consumer = AsyncPushConsumer(
            "127.0.0.1:1",
            "g",
            subscriptions={"t": "*"},
            listener=lambda _m: ConsumeResult.SUCCESS,
            options=options,
        )
        await consumer.close()
        assert consumer.options is options
        assert (consumer.mode, consumer.client_id) == ("queue_exclusive", "me")

    asyncio.run(scenario())


# -- the listener runner ------------------------------------------------------------------


def test_only_success_counts_as_success_and_a_raising_listener_is_a_logged_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answers = iter([ConsumeResult.SUCCESS, ConsumeResult.FAILURE, None, RuntimeError("boom")])
    inside: list[bool] = []

    def listener(_message: ReceivedMessage) -> object:
        inside.append(called_from_listener())
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def scenario() -> list[bool]:
        counters = Counters()
        runner = ListenerRunner(listener, consume_threads=2, counters=counters, client_id="c")
        runner.start()
        try:
            results = [await runner.call(_message(n)) for n in range(4)]
        finally:
            runner.shutdown()
        assert (counters.succeeded, counters.failed) == (1, 3)
        return results

    with caplog.at_level(logging.WARNING, logger="popmq.sdk.push_consumer"):
        assert asyncio.run(scenario()) == [True, False, False, False]
    assert inside == [True] * 4
    assert not called_from_listener()
    messages = [r.getMessage() for r in caplog.records]
    assert any("listener returned None for message id2" in m for m in messages), messages
    assert any("the listener raised on message id3" in m for m in messages), messages


def test_an_async_listener_runs_on_the_loop_without_threads() -> None:
    async def listener(message: ReceivedMessage) -> ConsumeResult:
        await asyncio.sleep(0)
        return ConsumeResult.SUCCESS if message.offset % 2 else ConsumeResult.FAILURE

    async def scenario() -> None:
        counters = Counters()
        runner = ListenerRunner(listener, consume_threads=1, counters=counters, client_id="c")
        runner.start()
        assert runner.is_async
        assert [await runner.call(_message(n)) for n in range(3)] == [False, True, False]
        assert (counters.succeeded, counters.failed) == (1, 2)
        runner.shutdown()

    asyncio.run(scenario())


# -- ack batching -------------------------------------------------------------------------


class _AckCalls:
    """Records each Ack call's handles and answers OK, or a refusal for the handles named."""

    def __init__(self, refuse: frozenset[str] = frozenset()) -> None:
        self.calls: list[list[str]] = []
        self.refuse = refuse

    async def __call__(self, handles: list[str]) -> messaging_pb2.AckResponse:
        self.calls.append(handles)
        return messaging_pb2.AckResponse(
            results=[
                messaging_pb2.EntryResult(code="FAILED_PRECONDITION" if h in self.refuse else "OK")
                for h in handles
            ]
        )


def _acker(calls: _AckCalls) -> tuple[Acker, FlowControl, HeldMessages, Counters]:
    flow = FlowControl(max_messages=100, max_bytes=1000)
    held = HeldMessages(flow)
    counters = Counters()
    acker = Acker("t", ack_handles=calls, flow=flow, held=held, counters=counters, client_id="c")
    return acker, flow, held, counters


def test_successes_close_together_share_one_ack_call_that_frees_their_room() -> None:
    calls = _AckCalls(refuse=frozenset({"h2"}))

    async def scenario() -> None:
        acker, flow, held, counters = _acker(calls)
        batch = [_held(n) for n in range(3)]
        for h in batch:
            held.add(h)
            acker.add(h)
        assert calls.calls == []  # waits up to ACK_DELAY_S for a receive to carry them
        await asyncio.sleep(ACK_DELAY_S * 4)
        await acker.drain()
        assert calls.calls == [["h0", "h1", "h2"]]
        assert counters.acked == 2  # h2 was refused: not counted, redelivered by the server
        assert (flow.messages, flow.bytes) == (0, 0)

    asyncio.run(scenario())


def test_a_receive_loop_waiting_for_room_gets_the_due_batch_instead_of_an_ack_call() -> None:
    calls = _AckCalls()

    async def scenario() -> None:
        acker, flow, held, _counters = _acker(calls)
        h = _held(1)
        held.add(h)
        acker.riders_wanted = True
        acker.add(h)
        await asyncio.sleep(ACK_DELAY_S * 4)
        assert acker.ready
        assert calls.calls == []
        assert acker.take() == [h]
        assert not acker.ready
        assert flow.messages == 1  # the receive loop forgets what it takes

    asyncio.run(scenario())
