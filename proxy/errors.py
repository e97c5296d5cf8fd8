"""The one place broker errors become gRPC statuses."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from broker_core.errors import PopMQError

log = logging.getLogger(__name__)

INTERNAL_MESSAGE = "internal error; see the server log"
"""What a client is told of a bug; the details go to the server log."""

_Request = TypeVar("_Request")
_Response = TypeVar("_Response")
Handler = Callable[[Any, _Request, grpc.aio.ServicerContext], Awaitable[_Response]]


def status_code(error: PopMQError) -> grpc.StatusCode:
    """The gRPC status for a broker error (its `code` is a StatusCode name)."""
    return grpc.StatusCode[error.code]


def rpc(handler: Handler[_Request, _Response]) -> Handler[_Request, _Response]:
    """Run a servicer method, answering broker errors with their status and message."""

    @functools.wraps(handler)
    async def wrapper(self: Any, request: _Request, context: grpc.aio.ServicerContext) -> _Response:
        try:
            return await handler(self, request, context)
        except PopMQError as exc:
            peer = context.peer()
            log.debug("%s from %s failed: %s %s", handler.__name__, peer, exc.code, exc)
            await context.abort(status_code(exc), str(exc))
            raise  # abort raises; this line is never reached
        except grpc.aio.AbortError:
            raise
        except Exception:
            log.exception("%s failed unexpectedly", handler.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)
            raise

    return wrapper
