"""PopStreamSession's acks against a fake call context and fake broker calls (no server).

The fake ack waits until the test lets it finish, which a real broker's ack (mostly done in
one step) does not allow: a cancel that arrives while an ack is in flight, and which observer
each answer reaches.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc.aio

from popmq._gen.popmq.store.v1 import records_pb2
from popmq._gen.popmq.v1 import messaging_pb2
from popmq.broker_core import MessageRecord, PoppedMessage, ReceivedBatch
from popmq.broker_core.errors import FailedPreconditionError, PopMQError
from popmq.proxy.pop_stream import PopStreamSession
from tests.unit.proxy.test_proxy_send_stream import FakeContext as SendContext


class FakeContext(SendContext):
    """A PopStream call: as the SendStream one, and without a deadline."""

    answer_type = messaging_pb2.PopStreamResponse

    def time_remaining(self) -> float | None:
        return None


class FakeBroker:
    """Pops that wait until the test ends them; acks that wait until the test lets them."""

    def __init__(self) -> None:
        self.ack_gate = asyncio.Event()
        self.acked: list[str] = []

    def start_pop(
        self,
        request: messaging_pb2.PopRequest,
        remaining: float | None,
        max_bytes: int | None,
        reserve: Any = None,
    ) -> Any:
        return asyncio.sleep(3600, result=[])

    def start_ack(self, request: messaging_pb2.AckRequest) -> Any:
        return self._ack(list(request.receipt_handles))

    async def _ack(self, handles: list[str]) -> list[PopMQError | None]:
        await self.ack_gate.wait()
        self.acked.extend(handles)
        return [
            None if h.startswith("ok") else FailedPreconditionError(f"{h} expired") for h in handles
        ]


def _ack(request_id: int, *handles: str) -> messaging_pb2.PopStreamRequest:
    return messaging_pb2.PopStreamRequest(
        request_id=request_id,
        ack=messaging_pb2.AckRequest(group="g", receipt_handles=list(handles)),
    )


def _cancel(request_id: int) -> messaging_pb2.PopStreamRequest:
    return messaging_pb2.PopStreamRequest(
        request_id=request_id, cancel=messaging_pb2.PopStreamCancel()
    )


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_cancel_does_not_stop_an_ack_in_flight_and_each_kind_has_its_observer() -> None:
    pops: list[str] = []
    acks: list[tuple[str, str]] = []

    async def scenario() -> tuple[FakeContext, FakeBroker]:
        context, broker = FakeContext(), FakeBroker()
        session = PopStreamSession(
            broker.start_pop,
            broker.start_ack,
            context,  # type: ignore[arg-type]
            lambda code, _s, _request, _p, _d: pops.append(code),
            lambda code, _s, request, _p, _d: acks.append((code, request.group)),
        )
        serving = asyncio.ensure_future(session.serve())
        context.reads.put_nowait(
            messaging_pb2.PopStreamRequest(request_id=1, pop=messaging_pb2.PopRequest())
        )
        context.reads.put_nowait(_ack(2, "ok-1", "old-2"))
        await _settle()
        context.reads.put_nowait(_cancel(2))  # the ack is in flight: not cancelled
        context.reads.put_nowait(_cancel(1))  # the pop is: cancelled
        await _settle()
        assert [a.request_id for a in context.written] == [1]
        broker.ack_gate.set()
        await _settle()
        context.reads.put_nowait(grpc.aio.EOF)
        await serving
        return context, broker

    context, broker = asyncio.run(scenario())
    answers = context.answers()
    assert answers[1].error.code == "CANCELLED"
    assert broker.acked == ["ok-1", "old-2"]
    results = [(r.receipt_handle, r.code, r.message) for r in answers[2].ack.results]
    assert results == [("ok-1", "OK", ""), ("old-2", "FAILED_PRECONDITION", "old-2 expired")]
    assert pops == ["CANCELLED"]
    assert acks == [("OK", "g")]


def test_a_request_without_an_action_names_the_actions_allowed() -> None:
    async def scenario() -> FakeContext:
        context, broker = FakeContext(), FakeBroker()
        session = PopStreamSession(broker.start_pop, broker.start_ack, context)  # type: ignore[arg-type]
        serving = asyncio.ensure_future(session.serve())
        context.reads.put_nowait(messaging_pb2.PopStreamRequest(request_id=7))
        context.reads.put_nowait(grpc.aio.EOF)
        await serving
        return context

    answer = asyncio.run(scenario()).answers()[7]
    assert answer.error.code == "INVALID_ARGUMENT"
    assert "set pop, ack or cancel" in answer.error.message


class _UnreadContext(FakeContext):
    """A client that never reads: no write returns."""

    async def write(self, response: Any) -> None:
        await asyncio.Event().wait()


def test_deliveries_passed_on_as_bytes_are_given_back_by_handle_when_never_written() -> None:
    """A cluster proxy's pop answers its deliveries encoded (ReceivedBatch), their handles
    kept apart as bytes: when the call ends before its answers are written, each answer's
    messages are given back by those handles, as PoppedMessages' are."""
    batches = [
        ReceivedBatch.of(
            [
                PoppedMessage(
                    "orders",
                    queue,
                    offset,
                    MessageRecord.from_bytes(
                        records_pb2.StoredMessage(message_id=f"m{n}", body=b"x").SerializeToString()
                    ),
                    f"b1.handle-{n}-{offset}",
                    60_000,
                )
                for offset, queue in enumerate((0, 1, 1))
            ],
            (4, 5),
        )
        for n in range(2)
    ]
    given: list[tuple[str, list[str]]] = []

    def start_pop(request: messaging_pb2.PopRequest, *_: Any) -> Any:
        async def pop() -> ReceivedBatch:
            return batches[request.max_messages - 1]

        return pop()

    async def scenario() -> None:
        context = _UnreadContext()
        session = PopStreamSession(
            start_pop,
            FakeBroker().start_ack,
            context,  # type: ignore[arg-type]
            give_back=lambda group, handles: given.append((group, handles)),
        )
        serving = asyncio.ensure_future(session.serve())
        for n in (1, 2):
            pop = messaging_pb2.PopRequest(group="g", topic="orders", max_messages=n)
            context.reads.put_nowait(messaging_pb2.PopStreamRequest(request_id=n, pop=pop))
        await _settle()
        serving.cancel()  # the client went away with both answers unwritten
        with contextlib.suppress(asyncio.CancelledError):
            await serving

    asyncio.run(scenario())
    assert sorted(given) == [
        ("g", [f"b1.handle-{n}-{offset}" for offset in range(3)]) for n in range(2)
    ]
