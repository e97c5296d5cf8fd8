"""Which gRPC errors end an etcd watch stream as an outage (resume) and which as a refusal."""

from __future__ import annotations

import grpc
import pytest
from grpc.aio import AioRpcError, Metadata

from popmq.coordination.errors import CoordinationUnavailableError
from popmq.coordination.etcd import _stream_outage, error_from_rpc


def _error(code: grpc.StatusCode, details: str) -> AioRpcError:
    return AioRpcError(code, Metadata(), Metadata(), details=details)


@pytest.mark.parametrize(
    ("code", "details", "outage"),
    [
        (grpc.StatusCode.UNAVAILABLE, "connection refused", True),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "", True),
        (grpc.StatusCode.CANCELLED, "", True),
        # grpc's own report of a link cut mid-write, not etcd's answer.
        (grpc.StatusCode.INTERNAL, "Internal error from Core", True),
        (grpc.StatusCode.INTERNAL, "etcdserver: something broke", False),
        (grpc.StatusCode.INVALID_ARGUMENT, "etcdserver: key is not provided", False),
    ],
)
def test_stream_outage(code: grpc.StatusCode, details: str, outage: bool) -> None:
    assert _stream_outage(_error(code, details)) is outage


@pytest.mark.parametrize(
    "details",
    [
        "raft: stopped",
        "etcdserver: server stopped",
        "etcdserver: no leader",
        "etcdserver: leader changed",
        "etcdserver: request timed out",
        "etcdserver: too many requests",
    ],
)
def test_a_stopping_or_leaderless_etcds_answer_is_an_outage_not_a_refusal(details: str) -> None:
    # A stopping etcd answered a lease reader's txn "UNKNOWN: raft: stopped", which the
    # proxy passed on as INTERNAL instead of serving through the outage.
    error = error_from_rpc(_error(grpc.StatusCode.UNKNOWN, details), "txn")
    assert isinstance(error, CoordinationUnavailableError)
    assert details in str(error)


def test_an_unexpected_etcd_answer_stays_a_refusal() -> None:
    error = error_from_rpc(_error(grpc.StatusCode.UNKNOWN, "etcdserver: something broke"), "txn")
    assert not isinstance(error, CoordinationUnavailableError)
