"""A streamed write that fails because the call is over: a client's normal behaviour, quiet.

`context.write` raises grpc's ExecuteBatchError when the call ended under it: the client
cancelled, its connection dropped, or grpc refused an answer larger than the client accepts
(the call then ends RESOURCE_EXHAUSTED). grpc.aio learns that the call is over a moment later
and cancels the handler; a handler that returned or raised first has grpc send a status on a
dead call and log `ExecuteBatchError raised in core by servicer method` as an ERROR with a
traceback, one per client that goes away mid-answer: noise that hides real errors. So a
handler whose write failed waits for that cancellation instead.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from typing import cast

import grpc

from popmq.broker_core import PopMQError

log = logging.getLogger(__name__)

WRITE_FAILED = cast(
    type[Exception], importlib.import_module("grpc._cython.cygrpc").ExecuteBatchError
)
"""What a failed `context.write` raises (grpc's own class, not exported by `grpc.aio`)."""

CANCEL_WAIT_S = 1.0
"""How long a handler whose write failed waits for grpc to cancel it (it takes one loop turn
when the client went away); past it, the handler ends."""


async def after_failed_write(method: str) -> None:
    """Wait, after a failed write, for grpc to cancel the handler (the usual end)."""
    await asyncio.sleep(CANCEL_WAIT_S)
    log.debug(
        "%s: a write failed and the call was not cancelled within %gs; ending it",
        method,
        CANCEL_WAIT_S,
    )


async def read_first_request(context: grpc.aio.ServicerContext, wait_s: float) -> bool:
    """Before a stream call is refused at its start, wait for the client's first request
    (at most `wait_s`, and not past the caller's deadline); False when the client went away
    meanwhile (nobody to answer).

    Why read first: a client opens a stream by writing its first request, then reads. Ended
    at once, the call's end can reach the client while its write is under way, and grpc then
    fails the write and reports INTERNAL ("Internal error from Core") instead of the refusal
    (the Python clients do, popmq's SDK and RocketMQ's; a write after the end is lost in any
    language). Once the first request was read, the client's write is done, so it reads the
    refusal. A request that does not parse was read all the same.
    """
    remaining = context.time_remaining()
    wait = wait_s if remaining is None else min(wait_s, remaining - 0.05)
    read = asyncio.ensure_future(context.read())
    try:
        await asyncio.wait({read}, timeout=max(0.0, wait))
    finally:
        if not read.done():
            read.cancel()
    if not read.done() or read.cancelled():
        return True  # it sent nothing in time: it is answered anyway
    failure = read.exception()
    return failure is None or isinstance(failure, PopMQError)
