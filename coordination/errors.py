"""Errors of the coordination layer (popmq.cluster).

They join popmq's one hierarchy: each is a `PopMQError` (so `code` and `retriable` say what a
front end answers and whether to retry) and also a `CoordinationError`, so a caller can catch
everything the coordination layer raises at once. Messages say what was wrong and what is
allowed or what to do.
"""

from __future__ import annotations

from popmq.broker_core.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    PopMQError,
    UnavailableError,
)


class CoordinationError(PopMQError):
    """Root of the coordination errors (it sets no code: each subclass takes its family's)."""


class CoordinationUnavailableError(CoordinationError, UnavailableError):
    """No etcd endpoint answered in time (down, unreachable, no leader); retry later."""


class CoordinationArgumentError(CoordinationError, InvalidArgumentError):
    """A bad key, TTL, value or endpoint; retrying it unchanged fails again."""


class ConflictError(CoordinationError, FailedPreconditionError):
    """A compare-and-swap lost: the key changed (or appeared, or went) since it was read.

    Attributes:
        key: The key written.
        current_revision: The key's mod revision now; 0 when it does not exist.
    """

    def __init__(self, message: str, *, key: str, current_revision: int) -> None:
        super().__init__(message, field="key", value=key)
        self.key = key
        self.current_revision = current_revision


class MemberExistsError(CoordinationError, AlreadyExistsError):
    """Another live member is registered under this name (its session has not lapsed)."""


class LeaseNotFoundError(CoordinationError, NotFoundError):
    """The lease expired or was revoked."""


class CompactedError(CoordinationError, FailedPreconditionError):
    """A read or watch asked for a revision etcd has compacted away: re-list, then watch.

    Attributes:
        compact_revision: The oldest revision still available.
    """

    def __init__(self, message: str, *, compact_revision: int) -> None:
        super().__init__(message)
        self.compact_revision = compact_revision


class SessionClosedError(CoordinationError, FailedPreconditionError):
    """The session (or coordinator, or client) was closed; it cannot be used any more."""


class CorruptValueError(CoordinationError, InternalError):
    """A stored value is not what popmq writes (not a JSON object): written by hand?"""


class EtcdError(CoordinationError, InternalError):
    """etcd refused a request for a reason popmq does not expect (its message is kept)."""
