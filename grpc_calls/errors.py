"""The one place broker errors become gRPC statuses."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from popmq.broker_core import (
    MAX_REQUEST_BYTES,
    MAX_SMALL_REQUEST_BYTES,
    InvalidArgumentError,
    OutcomeUnknownError,
    PopMQError,
)

log = logging.getLogger(__name__)

INTERNAL_MESSAGE = "internal error; see the server log"
"""What a client is told of a bug; the details go to the server log."""
OUTCOME_UNKNOWN_TRAILER = ("popmq-outcome", "unknown")
"""Trailing metadata of a call that failed with an OutcomeUnknownError: the request may have
been applied, and its repeat belongs on this server, which knows where it went (a cluster
proxy sends a repeated send to the broker the first went to). The SDK keeps such a call's
repeat on this endpoint rather than moving to the next one (sdk/_channel.py)."""

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
            if isinstance(exc, OutcomeUnknownError):
                await context.abort(
                    status_code(exc), str(exc), trailing_metadata=(OUTCOME_UNKNOWN_TRAILER,)
                )
            await context.abort(status_code(exc), str(exc))
            raise  # abort raises; this line is never reached
        except grpc.aio.AbortError:
            raise
        except Exception:
            log.exception("%s failed unexpectedly", handler.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)
            raise

    return wrapper


class RefusedRequestError(Exception):
    """What a read of a stream call raises for a request message the security gate refused
    (security/gate.py): `error` says why (a PermissionDeniedError, usually).

    Servicers that answer a stream's requests one by one (PopStream, SendStream, v2
    Telemetry) catch it around their read and answer that request alone with `error`, as
    they answer any other failed request; in any other servicer it ends the call, and the
    gate answers `error` in the protocol's shape. Not a PopMQError: it carries one.
    """

    def __init__(self, request: Any, error: PopMQError) -> None:
        super().__init__(str(error))
        self.request = request
        """The refused request message, as read."""
        self.error = error


class UndecodableRequestError(InvalidArgumentError):
    """A request body that does not parse as the method's request message."""


class Undecodable:
    """What a checked deserializer of a unary-request method gives for a body that does not
    parse: grpc.aio decodes such a request before any handler runs, and an exception there
    is answered UNKNOWN with a logged traceback, so the error is carried to the handler."""

    __slots__ = ("error",)

    def __init__(self, error: UndecodableRequestError) -> None:
        self.error = error


LARGE_REQUEST_METHODS = frozenset(
    {
        "popmq.v1.MessagingService/SendMessages",
        "popmq.v1.MessagingService/SendStream",
        "popmq.v1.AdminService/CreateGroup",
        "popmq.v1.AdminService/UpdateGroup",
        "apache.rocketmq.v2.MessagingService/SendMessage",
        "apache.rocketmq.v2.MessagingService/Telemetry",
    }
)
"""Methods whose valid requests reach the server's receive limit (validation.
MAX_REQUEST_BYTES): sends with 4 MiB of bodies, group settings with 1,024 SQL filters.
Every other request is at most MAX_SMALL_REQUEST_BYTES."""


def request_limit(method: str) -> int:
    """The largest request body `method` ("package.Service/Method") accepts."""
    if method in LARGE_REQUEST_METHODS:
        return MAX_REQUEST_BYTES
    return MAX_SMALL_REQUEST_BYTES
