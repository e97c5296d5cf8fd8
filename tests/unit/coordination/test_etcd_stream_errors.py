"""Which gRPC errors end an etcd watch stream as an outage (resume) and which as a refusal."""

from __future__ import annotations

import grpc
import pytest
from grpc.aio import AioRpcError, Metadata

from popmq.coordination.etcd import _stream_outage


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
