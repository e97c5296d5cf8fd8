"""Whether a send that failed on a broker may have been stored there.

A proxy retries a failed send, and where it may retry depends on this: a send the broker
provably did not store may go to any broker, but one that it may have stored must go back to
the same broker, whose dedup window answers a copy stored after all with the first send's
result. Sent to another broker instead, it would be stored twice (dedup is per broker).

- Not stored: the broker answered with an error of its own before writing (a fenced or
  taking-over replica, a full disk, a topic it does not hold yet, too few in-sync followers
  at admission: `nothing was written`), or the request never left the proxy (the broker is
  not a live member, or its channel could not connect: gRPC's `failed to connect to all
  addresses`, which it answers before sending anything).
- May be stored: the call ended without the broker's answer after the request may have gone
  out (a deadline, a connection dropped mid-call, a broker that left while the call was in
  flight), or the broker said so itself (`OutcomeUnknownError`: its WAL sync failed, or a
  shard's leader lost its followers while the write was being replicated).

`known_down` says when the broker of such a send is gone rather than slow: its address
refuses connections (nothing listens there). Pure functions, no I/O.
"""

from __future__ import annotations

from typing import ClassVar

from popmq.broker_core import OutcomeUnknownError, PopMQError, UnavailableError

__all__ = ["BrokerUnansweredError", "known_down", "may_be_stored"]

_NOT_CONNECTED = "failed to connect to all addresses"
"""How gRPC's status begins for a call it failed before sending: no connection was up."""
_REFUSED = "Connection refused"
"""In such a status: the broker's host answered that nothing listens on the port."""


class BrokerUnansweredError(UnavailableError):
    """A broker call that ended without the broker's answer (retriable).

    Args:
        message: What happened, naming the broker.
        request_sent: Whether the request may have reached the broker (False only when the
            call failed before anything was sent).
        refused: The broker's address refused the connection: no process listens there.
    """

    # Class defaults: an error rebuilt from the wire skips __init__ (broker/wire.py).
    request_sent: ClassVar[bool] = True
    refused: ClassVar[bool] = False

    def __init__(self, message: str, *, request_sent: bool, refused: bool = False) -> None:
        super().__init__(message)
        self.request_sent = request_sent  # type: ignore[misc]
        self.refused = refused  # type: ignore[misc]

    @classmethod
    def from_status(cls, message: str, *, code: str, details: str) -> BrokerUnansweredError:
        """The error of a call that failed with gRPC status `code` and `details` and no
        broker error: not sent only when gRPC failed it for want of a connection."""
        not_sent = code == "UNAVAILABLE" and details.startswith(_NOT_CONNECTED)
        return cls(message, request_sent=not not_sent, refused=not_sent and _REFUSED in details)


def may_be_stored(error: BaseException) -> bool:
    """Whether a send that failed with `error` may have been stored by the broker it went to
    (module docstring)."""
    if isinstance(error, BrokerUnansweredError):
        return error.request_sent
    if isinstance(error, OutcomeUnknownError | TimeoutError):
        return True
    return isinstance(error, PopMQError) and error.code == "DEADLINE_EXCEEDED"


def known_down(error: BaseException) -> bool:
    """Whether `error` shows the broker's process is gone: its address refused a connection.
    A broker that is slow, paused or cut off by the network times out instead, and is not."""
    return isinstance(error, BrokerUnansweredError) and error.refused
