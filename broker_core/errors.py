"""The broker's error hierarchy.

Every error the broker raises is a `PopMQError` subclass whose `code` names the gRPC status
the proxy answers with (the proxy maps it once, at the boundary) and whose `retriable` says
whether the same request may succeed later. Messages say what was wrong and what is allowed.

An argument error may also name, in structured fields, the request `field` it is about (a
stable dotted name: "topic", "message.body", "invisible_duration"), the `value` given (a
short, bounded text) and what is `allowed` ("1..1024"), so a front end can choose its own
protocol's code by field (proxy/rocketmq/codes.py) without repeating the rule.
"""

from __future__ import annotations

from typing import ClassVar

MAX_VALUE_CHARS = 80
"""Longest `value` an error keeps: a 4 MiB argument never lands in an error (or a log)."""


def shown_value(value: object) -> str:
    """A short text of what was given: bytes by their size only, anything else by its repr,
    cut to MAX_VALUE_CHARS."""
    if isinstance(value, bytes | bytearray | memoryview):
        return f"{len(value)} B"
    text = repr(value) if isinstance(value, str) else str(value)
    if len(text) > MAX_VALUE_CHARS:
        text = text[: MAX_VALUE_CHARS - 3] + "..."
    return text


class PopMQError(Exception):
    """Root of every error raised by broker_core.

    Args:
        *args: The message (the human text, which says what is allowed).
        field: The request field the error is about, as a stable dotted name, or None.
        value: What was given for it (kept as a short text, see shown_value), or None.
        allowed: What would have been accepted, as a short text ("1..32", "1 B..4,128,768 B").
    """

    code: ClassVar[str] = "INTERNAL"
    retriable: ClassVar[bool] = False
    field: str | None = None
    value: str | None = None
    allowed: str | None = None

    def __init__(
        self,
        *args: object,
        field: str | None = None,
        value: object = None,
        allowed: str | None = None,
    ) -> None:
        super().__init__(*args)
        self.field = field
        self.value = None if value is None else shown_value(value)
        self.allowed = allowed


class InvalidArgumentError(PopMQError, ValueError):
    """The request is malformed or out of range; retrying it unchanged will fail again."""

    code = "INVALID_ARGUMENT"


class NotFoundError(PopMQError, LookupError):
    """A named topic or group does not exist."""

    code = "NOT_FOUND"


class AlreadyExistsError(PopMQError):
    """The topic or group to create exists already."""

    code = "ALREADY_EXISTS"


class FailedPreconditionError(PopMQError):
    """The request is well-formed but the system is not in a state that allows it."""

    code = "FAILED_PRECONDITION"


class ResourceExhaustedError(PopMQError):
    """A bound was reached (held long polls, disk space); retry later."""

    code = "RESOURCE_EXHAUSTED"
    retriable = True


class AnswerBoundError(ResourceExhaustedError):
    """A pop given a byte bound (`Broker.pop`'s `max_bytes`) found messages, none of which
    fit it; it took nothing. `needed_bytes` is the bound that lets the smallest one through.
    """

    def __init__(self, message: str, needed_bytes: int) -> None:
        super().__init__(message)
        self.needed_bytes = needed_bytes


class UnavailableError(PopMQError):
    """The store cannot take writes right now (I/O error, shutting down); retry later."""

    code = "UNAVAILABLE"
    retriable = True


class OutcomeUnknownError(UnavailableError):
    """A write failed after it may have been applied (a WAL sync failed, a shard's leader lost
    its followers or its leadership while the write was replicated): it may or may not be
    stored. A send that gets it is retried on the same broker, whose dedup window answers a
    copy that was stored after all; sent elsewhere it could be stored twice."""


class NotEnoughReplicasError(UnavailableError):
    """A replicated shard refuses sends: fewer followers are in sync than
    replication.min_insync (broker/replication/log.py). Retriable on another shard at once;
    the shard takes sends again as soon as a follower has caught up."""


class NotLeaderError(UnavailableError):
    """A replica of a shard that does not lead it now (it follows, or is taking over after an
    election and still opening its store): ask the shard's leader, or again in a moment."""


class InternalError(PopMQError):
    """A bug: an invariant of the broker does not hold."""

    code = "INTERNAL"


class UnauthenticatedError(PopMQError):
    """The request carries no valid credentials (authentication is on): no signature, an
    unknown or disabled access key, or a signature that does not match."""

    code = "UNAUTHENTICATED"


class PermissionDeniedError(PopMQError):
    """The authenticated user may not do this: no policy allows the action on the resource,
    or one denies it."""

    code = "PERMISSION_DENIED"


class InvalidReceiptHandleError(InvalidArgumentError):
    """The receipt handle is malformed, forged, or belongs to another group."""


class ReceiptHandleExpiredError(FailedPreconditionError):
    """The handle's invisible time has passed; the message is (or will be) redelivered."""


class ReceiptHandleSupersededError(FailedPreconditionError):
    """ChangeInvisibleTime or Nack replaced this handle; only the newest handle is valid."""


class ReceiptHandleLostError(FailedPreconditionError):
    """The server restarted before recording this delivery; the message comes back.

    Not a silent success: the consumer's work on it is not recorded, and it will see the
    message again (with its delivery attempt unchanged).
    """


class StoreFullError(ResourceExhaustedError):
    """The disk is full; writes fail until space returns, reads keep working."""


class DataDirError(FailedPreconditionError):
    """The data dir cannot hold the store (a file, read-only, not permitted, in use by
    another process, disk full on a new store); the server cannot start on it."""
