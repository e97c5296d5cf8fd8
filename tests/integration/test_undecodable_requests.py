"""Request bodies that do not parse: INVALID_ARGUMENT, counted, logged once, no traceback.

grpc.aio decodes a request before any handler runs and answers a failure UNKNOWN with an
ERROR traceback per call; the server's interceptor checks decoding for every method of
every service, unary and streaming.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import grpc
import pytest
from google.protobuf.message import DecodeError

from popmq._gen.apache.rocketmq.v2 import service_pb2 as sv
from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.proxy.server import PopMQServer
from popmq.runtime.config import ServerConfig
from popmq.runtime.metrics import MetricsConfig
from tests.support.logs import logged_errors

GARBAGE = b"\x0a\x05ab\xff\x0f"
"""A length-delimited field that claims 5 bytes but has 2, then an invalid wire type."""

# (full method, request type, shape): one unary and one streaming method of each service
# (AdminService has no streaming method), and Ack, whose request popmq reads from its bytes
# itself (proxy/ack_request.py) as it does PopStream's and SendStream's.
METHODS = [
    ("/popmq.v1.MessagingService/Pop", messaging_pb2.PopRequest, "unary_unary"),
    ("/popmq.v1.MessagingService/PopStream", messaging_pb2.PopStreamRequest, "stream_stream"),
    ("/popmq.v1.MessagingService/Ack", messaging_pb2.AckRequest, "unary_unary"),
    ("/popmq.v1.MessagingService/SendStream", messaging_pb2.SendStreamRequest, "stream_stream"),
    ("/popmq.v1.AdminService/CreateTopic", admin_pb2.CreateTopicRequest, "unary_unary"),
    ("/apache.rocketmq.v2.MessagingService/QueryRoute", sv.QueryRouteRequest, "unary_unary"),
    (
        "/apache.rocketmq.v2.MessagingService/ReceiveMessage",
        sv.ReceiveMessageRequest,
        "unary_stream",
    ),
    ("/apache.rocketmq.v2.MessagingService/Telemetry", sv.TelemetryCommand, "stream_stream"),
]


async def _call(channel: grpc.aio.Channel, method: str, shape: str) -> grpc.aio.AioRpcError:
    """Send GARBAGE as the request body (no serializer: raw bytes) and return the error."""
    metadata = (("x-mq-client-id", "garbage-client"),)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        if shape == "unary_unary":
            await channel.unary_unary(method)(GARBAGE, timeout=10, metadata=metadata)
        elif shape == "unary_stream":
            async for _ in channel.unary_stream(method)(GARBAGE, timeout=10, metadata=metadata):
                pass
        else:
            call = channel.stream_stream(method)(timeout=10, metadata=metadata)
            await call.write(GARBAGE)
            async for _ in call:
                pass
    return info.value


def test_undecodable_requests_answer_invalid_argument_counted_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for _, request_type, _ in METHODS:
        with pytest.raises(DecodeError):  # the body really is not a valid request
            request_type.FromString(GARBAGE)
    config = ServerConfig(
        listen="127.0.0.1:0",
        shutdown_grace_s=1.0,
        broker=BrokerConfig(store=StoreConfig(data_dir=tmp_path / "data")),
        metrics=MetricsConfig(listen="127.0.0.1:0"),
    )

    async def scenario() -> None:
        server = PopMQServer(config)
        port = await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                for method, request_type, shape in METHODS:
                    for _ in range(3):
                        error = await _call(channel, method, shape)
                        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, error)
                        name = request_type.DESCRIPTOR.full_name
                        assert f"request is not a valid {name} message" in (error.details() or "")
            assert server.metrics is not None
            for method, _, _ in METHODS:
                count = server.metrics.registry.get_sample_value(
                    "popmq_rpc_duration_seconds_count",
                    {"method": method.lstrip("/"), "code": "INVALID_ARGUMENT"},
                )
                assert count == 3, method
        finally:
            await server.stop()

    with caplog.at_level(logging.INFO):
        asyncio.run(scenario())
    assert logged_errors(caplog.records) == []
    for method, _, _ in METHODS:
        warned = [
            r
            for r in caplog.records
            if r.levelno == logging.WARNING
            and r.getMessage().startswith(method.lstrip("/") + " from ")
        ]
        assert len(warned) == 1, (method, [r.getMessage() for r in warned])
        assert "request is not a valid" in warned[0].getMessage()
