"""How a failed BrokerService call becomes the PopMQError a proxy raises.

A broker's own error comes back as itself: the `ErrorDetail` in the call's
`popmq-error-bin` trailer (broker/wire.py). A call that ended without it either got no
answer (the broker is down, the connection broke, the deadline passed: a retriable
`BrokerUnansweredError` naming the broker, send_outcome.py says whether a send may have been
stored; grpc reports a connection cut mid-write as INTERNAL "Internal error from Core", which
counts as no answer too) or was refused by the gRPC layer itself, a fault of the deployment
(InternalError).
"""

from __future__ import annotations

import grpc

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq.broker import wire as w
from popmq.broker_core import InternalError, PopMQError
from popmq.cluster.send_outcome import BrokerUnansweredError

_UNREACHABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
    }
)
"""Statuses without our error detail that mean "the broker did not answer": retriable."""
_CORE_CUT = "Internal error from Core"
"""grpc's own INTERNAL for a call whose connection was cut while it wrote (a broker killed
under a hop stream): the broker never said it, so it did not answer either."""


def call_error(exc: grpc.aio.AioRpcError, shown: str) -> PopMQError:
    """The error of the failed call `exc` to the broker `shown` (its name and address)."""
    for key, value in exc.trailing_metadata() or ():
        if key == w.ERROR_TRAILER and isinstance(value, bytes):
            return w.error_from_detail(pb.ErrorDetail.FromString(value))
    code = exc.code()
    details = exc.details()
    details = details if isinstance(details, str) else ""
    if code in _UNREACHABLE or (code == grpc.StatusCode.INTERNAL and _CORE_CUT in details):
        return BrokerUnansweredError.from_status(
            f"broker {shown} is unavailable ({code.name}: {details}); retry later",
            code=code.name,
            details=details,
        )
    if code == grpc.StatusCode.UNAUTHENTICATED:
        # Not the client's UnauthenticatedError: its own credentials were fine.
        return InternalError(
            f"broker {shown} refused this proxy's credentials ({details}): "
            "proxies sign BrokerService calls with [security] root_access_key and its "
            "secret; give proxies and brokers the same root credential"
        )
    return InternalError(f"broker {shown} answered {code.name} without a broker error: {details}")
