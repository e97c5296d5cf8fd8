"""Which failed BrokerService calls a proxy treats as "the broker did not answer" (retriable,
the send perhaps stored) and which as the deployment's fault."""

from __future__ import annotations

import grpc
import pytest
from grpc.aio import AioRpcError, Metadata

from popmq.broker_core import InternalError
from popmq.cluster.call_errors import call_error
from popmq.cluster.send_outcome import BrokerUnansweredError, may_be_stored


def _error(code: grpc.StatusCode, details: str) -> AioRpcError:
    return AioRpcError(code, Metadata(), Metadata(), details=details)


@pytest.mark.parametrize(
    ("code", "details", "stored"),
    [
        (grpc.StatusCode.UNAVAILABLE, "Socket closed", True),
        (grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses; last error", False),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", True),
        (grpc.StatusCode.CANCELLED, "", True),
        # grpc's own report of a connection cut while the call wrote: a broker killed under
        # a hop stream. Not the broker's answer; the send may have been stored.
        (grpc.StatusCode.INTERNAL, "Internal error from Core", True),
    ],
)
def test_no_answer_is_retriable_and_says_whether_the_send_may_be_stored(
    code: grpc.StatusCode, details: str, stored: bool
) -> None:
    error = call_error(_error(code, details), "'b1' at 127.0.0.1:1")
    assert isinstance(error, BrokerUnansweredError)
    assert "'b1' at 127.0.0.1:1" in str(error)
    assert may_be_stored(error) is stored


@pytest.mark.parametrize(
    ("code", "details"),
    [
        (grpc.StatusCode.INTERNAL, "Failed parsing HTTP/2"),
        (grpc.StatusCode.UNIMPLEMENTED, "Method not found!"),
        (grpc.StatusCode.UNAUTHENTICATED, "bad signature"),
    ],
)
def test_a_refusal_of_the_grpc_layer_is_the_deployments_fault(
    code: grpc.StatusCode, details: str
) -> None:
    error = call_error(_error(code, details), "'b1' at 127.0.0.1:1")
    assert isinstance(error, InternalError)
    assert not isinstance(error, BrokerUnansweredError)
