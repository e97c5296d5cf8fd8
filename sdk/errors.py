"""Errors raised by the popmq SDK.

The server reports failures as gRPC status codes (and per-entry code names in multi-entry
responses such as Ack). Both are mapped back here, through one registry, to one exception
family per status so callers can catch by meaning (``except NotFoundError``) or by builtin
(``except LookupError``) and decide on retries with ``retriable``.
"""

from __future__ import annotations

import grpc
import grpc.aio

__all__ = [
    "AlreadyExistsError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "NotFoundError",
    "PermissionDeniedError",
    "PopMQError",
    "ResourceExhaustedError",
    "ServerError",
    "UnauthenticatedError",
    "UnavailableError",
    "error_from_code_name",
    "error_from_rpc_error",
    "error_from_status",
]


class PopMQError(Exception):
    """Root of every error the SDK raises for a failed server call.

    Attributes:
        code: gRPC status code name, e.g. ``"NOT_FOUND"``. A class attribute; an instance
            overrides it when its status has no class of its own (see ``ServerError``).
        retriable: Whether repeating the same call may succeed.
        message: The server's details string (what was wrong and what is allowed).
    """

    code: str = "UNKNOWN"
    retriable: bool = False

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None and code != type(self).code:
            self.code = code


class InvalidArgumentError(PopMQError, ValueError):
    """The request was malformed or a value is out of range."""

    code = "INVALID_ARGUMENT"


class NotFoundError(PopMQError, LookupError):
    """A named topic, group or message does not exist."""

    code = "NOT_FOUND"


class AlreadyExistsError(PopMQError):
    """A topic or group with that name already exists."""

    code = "ALREADY_EXISTS"


class FailedPreconditionError(PopMQError):
    """The server state forbids the call, e.g. a receipt handle that is no longer valid."""

    code = "FAILED_PRECONDITION"


class ResourceExhaustedError(PopMQError):
    """A server limit was hit; retrying later may succeed."""

    code = "RESOURCE_EXHAUSTED"
    retriable = True


class UnavailableError(PopMQError):
    """The server could not be reached or is shutting down; retrying may succeed."""

    code = "UNAVAILABLE"
    retriable = True


class DeadlineExceededError(PopMQError, TimeoutError):
    """The call did not finish within its timeout; retrying may succeed."""

    code = "DEADLINE_EXCEEDED"
    retriable = True


class UnauthenticatedError(PopMQError):
    """The server requires credentials and these are missing or wrong (an unknown or
    disabled access key, a bad signature): give ``credentials=Credentials(ak, sk)``."""

    code = "UNAUTHENTICATED"


class PermissionDeniedError(PopMQError):
    """The server's access control does not let this user do this (it names the resource
    and the action)."""

    code = "PERMISSION_DENIED"


class ServerError(PopMQError):
    """The server failed internally, or answered with a status the SDK has no class for."""

    code = "INTERNAL"


# Status code name -> class. Names absent here map to ServerError.
_BY_CODE_NAME: dict[str, type[PopMQError]] = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        NotFoundError,
        AlreadyExistsError,
        FailedPreconditionError,
        ResourceExhaustedError,
        UnavailableError,
        DeadlineExceededError,
        UnauthenticatedError,
        PermissionDeniedError,
        ServerError,
    )
}
_BY_CODE_NAME["UNKNOWN"] = ServerError

# The same registry keyed by grpc.StatusCode, for errors raised by RPCs.
_BY_STATUS: dict[grpc.StatusCode, type[PopMQError]] = {
    grpc.StatusCode[name]: cls for name, cls in _BY_CODE_NAME.items()
}


def error_from_code_name(code: str, message: str = "") -> PopMQError:
    """Build the error for a status code name, as found in per-entry results.

    Args:
        code: gRPC status code name such as ``"INVALID_ARGUMENT"``.
        message: The server's human-readable reason.
    """
    return _BY_CODE_NAME.get(code, ServerError)(message, code=code)


def error_from_status(status: grpc.StatusCode, message: str = "") -> PopMQError:
    """Build the error for a gRPC status code.

    Args:
        status: The call's status code.
        message: The server's details string.
    """
    cls = _BY_STATUS.get(status, ServerError)
    name: str = status.name
    return cls(message, code=name)


def error_from_rpc_error(exc: grpc.aio.AioRpcError) -> PopMQError:
    """Translate a failed grpc.aio call into the SDK's error for its status."""
    details = exc.details()
    return error_from_status(exc.code(), details if isinstance(details, str) else "")
