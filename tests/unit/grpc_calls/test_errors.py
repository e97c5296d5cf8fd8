"""The one boundary where broker errors become gRPC statuses (grpc_calls/errors.py): a send
whose outcome is unknown is marked so, for the SDK to repeat it on the same proxy."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from popmq.broker_core import OutcomeUnknownError, PopMQError, UnavailableError
from popmq.grpc_calls.errors import OUTCOME_UNKNOWN_TRAILER, rpc


class _Aborted(Exception):
    pass


class _Context:
    """What `rpc` uses of a grpc.aio.ServicerContext: the peer, and abort (which raises)."""

    def __init__(self) -> None:
        self.aborted: tuple[grpc.StatusCode, str, Any] | None = None

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    async def abort(self, code: grpc.StatusCode, details: str, trailing_metadata: Any = ()) -> None:
        self.aborted = (code, details, tuple(trailing_metadata))
        raise _Aborted


def _answer(error: PopMQError) -> tuple[grpc.StatusCode, str, Any]:
    class Servicer:
        @rpc
        async def Send(self, request: object, context: Any) -> object:
            raise error

    context = _Context()
    with pytest.raises(_Aborted):
        asyncio.run(Servicer().Send(object(), context))
    assert context.aborted is not None
    return context.aborted


def test_an_unknown_outcome_is_unavailable_and_marked_for_a_repeat_on_this_server() -> None:
    code, details, trailer = _answer(OutcomeUnknownError("may or may not be stored on b2"))
    assert code is grpc.StatusCode.UNAVAILABLE and "b2" in details
    assert trailer == (OUTCOME_UNKNOWN_TRAILER,)


def test_other_errors_carry_no_mark() -> None:
    code, _, trailer = _answer(UnavailableError("shutting down"))
    assert code is grpc.StatusCode.UNAVAILABLE and trailer == ()
