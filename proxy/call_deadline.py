"""The deadline of the unary call being served, for code deep in its path.

A unary call's handler runs in a task of its own, so a context variable set there is seen by
everything it awaits, without a deadline argument through every layer between the servicer
and the cluster's send path (security/model.py carries the caller the same way). A send that
would wait past the client's deadline (a repeat waiting for its broker's quarantine to end,
cluster/fault_tolerance.py) stops just before it, so that the client is answered a retriable
error rather than cut off with DEADLINE_EXCEEDED. Stream calls set nothing: their requests
share one call whose deadline says nothing of each request's.

Times are `time.monotonic()` seconds.
"""

from __future__ import annotations

import contextvars
import time

import grpc

__all__ = ["call_deadline", "set_call_deadline"]

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "popmq_call_deadline", default=None
)


def set_call_deadline(context: grpc.aio.ServicerContext) -> None:
    """Note the deadline of the call `context` serves for the code it runs (its task):
    nothing when the client set none."""
    remaining = context.time_remaining()
    if remaining is not None:
        _DEADLINE.set(time.monotonic() + remaining)


def call_deadline() -> float | None:
    """The deadline of the unary call being served (monotonic seconds); None when there is
    none (no deadline set, a stream call, or code outside a call)."""
    return _DEADLINE.get()
