"""The gate's refusals in each protocol's shape: popmq.v1 (gRPC status) and
apache.rocketmq.v2 (the response's Status), for unary calls, server streams and streams.

A stand-in servicer context records what the gate does to the call (grpc's own context
cannot be made without a server; tests/integration/test_authentication.py runs the real one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as v2pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as v2
from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from popmq.broker_core import PermissionDeniedError
from popmq.grpc_calls.errors import RefusedRequestError
from popmq.proxy.rocketmq.refusals import ROCKETMQ
from popmq.security import audit, signing
from popmq.security.config import SecurityConfig
from popmq.security.gate import Gate, StaticDirectory
from popmq.security.model import (
    ANONYMOUS_SUPER,
    Action,
    Check,
    Principal,
    Resource,
    ResourceType,
    User,
    UserType,
    current_principal,
)

V1_UNARY = "/popmq.v1.AdminService/ListTopics"
V1_STREAM = "/popmq.v1.MessagingService/SendStream"
V2_UNARY = "/apache.rocketmq.v2.MessagingService/QueryRoute"
V2_SERVER_STREAM = "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
V2_STREAM = "/apache.rocketmq.v2.MessagingService/Telemetry"
FORBIDDEN_TOPIC = "payroll"


class FakeContext:
    """What the gate uses of a grpc.aio servicer context."""

    def __init__(self, metadata: Sequence[tuple[str, str]] = (), requests: Sequence[Any] = ()):
        self._metadata = tuple(metadata)
        self._requests = list(requests)
        self.reads = 0
        self.written: list[Any] = []
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def peer(self) -> str:
        return "ipv4:10.1.2.3:5555"

    def time_remaining(self) -> float | None:
        return None

    async def read(self) -> Any:
        self.reads += 1
        return self._requests.pop(0) if self._requests else grpc.aio.EOF

    async def write(self, message: Any) -> None:
        self.written.append(message)

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise grpc.aio.AbortError()


class TopicAuthorizer:
    """Denies NORMAL users the topic FORBIDDEN_TOPIC; counts the checks it was asked for."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def checks(self, method: str, request: Message) -> Sequence[Check]:
        self.asked.append(method)
        topics: list[str] = []
        if isinstance(request, messaging_pb2.SendStreamRequest):
            topics = [m.topic for m in request.send.messages]
        elif isinstance(request, v2.QueryRouteRequest):
            topics = [request.topic.name]
        elif isinstance(request, v2.TelemetryCommand):
            topics = [s.topic.name for s in request.settings.subscription.subscriptions]
        elif isinstance(request, admin_pb2.ListTopicsRequest):
            topics = [FORBIDDEN_TOPIC]  # as if listing needed the forbidden topic
        return [Check(Resource(ResourceType.TOPIC, t), Action.PUB) for t in topics]

    def authorize(self, principal: Principal, checks: Sequence[Check]) -> None:
        for check in checks:
            if check.resource.name == FORBIDDEN_TOPIC:
                raise PermissionDeniedError(f"no PUB on topic {FORBIDDEN_TOPIC!r}")


CONFIG = SecurityConfig(authentication=True, root_access_key="root", root_secret_key="rs")


def gate() -> tuple[Gate, TopicAuthorizer]:
    authorizer = TopicAuthorizer()
    made = Gate.from_config(
        CONFIG,
        directory=StaticDirectory([User("app", "as", UserType.NORMAL)]),
        authorizer=authorizer,
        dialects=(ROCKETMQ,),  # as PopMQServer's gate
    )
    return made, authorizer


def as_user(access_key: str, secret: str) -> list[tuple[str, str]]:
    return list(signing.headers(access_key, secret).items())


APP = as_user("app", "as")
ROOT = as_user("root", "rs")
WRONG = as_user("app", "nope")


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


# -- popmq.v1 -----------------------------------------------------------------------------


def unary(method: str, seen: list[Principal]) -> grpc.RpcMethodHandler:
    async def behavior(request: Any, context: Any) -> Any:
        seen.append(current_principal())
        return admin_pb2.ListTopicsResponse()

    return grpc.unary_unary_rpc_method_handler(behavior)


def test_v1_unary_without_credentials_ends_unauthenticated_with_the_message() -> None:
    seen: list[Principal] = []
    handler = gate()[0].wrap(V1_UNARY, unary(V1_UNARY, seen))
    context = FakeContext()
    with pytest.raises(grpc.aio.AbortError):
        run(handler.unary_unary(admin_pb2.ListTopicsRequest(), context))
    assert context.aborted is not None
    assert context.aborted[0] is grpc.StatusCode.UNAUTHENTICATED
    assert "no authorization header" in context.aborted[1]
    assert seen == []


def test_v1_unary_denied_by_access_control_ends_permission_denied() -> None:
    seen: list[Principal] = []
    handler = gate()[0].wrap(V1_UNARY, unary(V1_UNARY, seen))
    context = FakeContext(APP)
    with pytest.raises(grpc.aio.AbortError):
        run(handler.unary_unary(admin_pb2.ListTopicsRequest(), context))
    assert context.aborted == (
        grpc.StatusCode.PERMISSION_DENIED,
        f"no PUB on topic {FORBIDDEN_TOPIC!r}",
    )
    assert seen == []


def test_v1_unary_admitted_runs_as_its_principal() -> None:
    seen: list[Principal] = []
    made, authorizer = gate()
    handler = made.wrap(V1_UNARY, unary(V1_UNARY, seen))
    run(handler.unary_unary(admin_pb2.ListTopicsRequest(), FakeContext(ROOT)))
    assert seen == [Principal("root", UserType.SUPER, "ipv4:10.1.2.3:5555")]
    assert authorizer.asked == []  # SUPER users are not checked against policies
    assert current_principal() is ANONYMOUS_SUPER  # the call's task only


def stream_behavior(*, per_request: bool) -> tuple[grpc.RpcMethodHandler, list[Any]]:
    """A SendStream servicer: reads every request; with `per_request` it answers a refused
    one alone and goes on, as PopStream and SendStream do."""
    handled: list[Any] = []

    async def behavior(request_iterator: Any, context: Any) -> None:
        while True:
            try:
                request = await context.read()
            except RefusedRequestError as refused:
                if not per_request:
                    raise
                handled.append(("refused", refused.error.code))
                continue
            if request is grpc.aio.EOF:
                return
            handled.append(("ok", request.request_id))

    return grpc.stream_stream_rpc_method_handler(behavior), handled


def send_request(request_id: int, topic: str) -> messaging_pb2.SendStreamRequest:
    request = messaging_pb2.SendStreamRequest(request_id=request_id)
    request.send.messages.add(topic=topic, body=b"x")
    return request


def test_v1_stream_opened_without_valid_credentials_reads_first_then_ends_unauthenticated() -> None:
    handler, handled = stream_behavior(per_request=True)
    context = FakeContext(WRONG, [send_request(1, "orders")])
    with pytest.raises(grpc.aio.AbortError):
        run(gate()[0].wrap(V1_STREAM, handler).stream_stream(iter(()), context))
    assert context.reads == 1  # the client's first write is done before the refusal
    assert context.aborted is not None
    assert context.aborted[0] is grpc.StatusCode.UNAUTHENTICATED
    assert "signature of access key 'app' does not match" in context.aborted[1]
    assert handled == []


def test_v1_stream_refused_request_is_answered_alone_and_the_stream_goes_on() -> None:
    handler, handled = stream_behavior(per_request=True)
    requests = [send_request(1, "orders"), send_request(2, FORBIDDEN_TOPIC), send_request(3, "a")]
    context = FakeContext(APP, requests)
    run(gate()[0].wrap(V1_STREAM, handler).stream_stream(iter(()), context))
    assert handled == [("ok", 1), ("refused", "PERMISSION_DENIED"), ("ok", 3)]
    assert context.aborted is None


def test_v1_stream_servicer_that_does_not_answer_a_refusal_ends_permission_denied() -> None:
    handler, handled = stream_behavior(per_request=False)
    context = FakeContext(APP, [send_request(1, "orders"), send_request(2, FORBIDDEN_TOPIC)])
    with pytest.raises(grpc.aio.AbortError):
        run(gate()[0].wrap(V1_STREAM, handler).stream_stream(iter(()), context))
    assert handled == [("ok", 1)]
    assert context.aborted is not None
    assert context.aborted[0] is grpc.StatusCode.PERMISSION_DENIED


# -- apache.rocketmq.v2 -------------------------------------------------------------------


def v2_unary() -> tuple[grpc.RpcMethodHandler, list[Any]]:
    called: list[Any] = []

    async def behavior(request: Any, context: Any) -> Any:
        called.append(request)
        return v2.QueryRouteResponse(status=v2pb.Status(code=v2pb.OK))

    return grpc.unary_unary_rpc_method_handler(behavior), called


def route_request(topic: str) -> v2.QueryRouteRequest:
    return v2.QueryRouteRequest(topic=v2pb.Resource(name=topic))


def test_v2_unary_without_credentials_answers_unauthorized_40100_inside_the_response() -> None:
    handler, called = v2_unary()
    context = FakeContext([("x-mq-client-id", "c1")])
    response = run(gate()[0].wrap(V2_UNARY, handler).unary_unary(route_request("t"), context))
    assert isinstance(response, v2.QueryRouteResponse)
    assert response.status.code == v2pb.UNAUTHORIZED == 40100
    assert "no authorization header" in response.status.message
    assert context.aborted is None and called == []


def test_a_gate_without_the_v2_dialect_ends_a_v2_call_with_its_grpc_status() -> None:
    """A broker's gate knows no dialect: every refusal is a gRPC status."""
    handler, called = v2_unary()
    made = Gate.from_config(CONFIG, directory=StaticDirectory(), authorizer=TopicAuthorizer())
    context = FakeContext([("x-mq-client-id", "c1")])
    with pytest.raises(grpc.aio.AbortError):
        run(made.wrap(V2_UNARY, handler).unary_unary(route_request("t"), context))
    assert context.aborted is not None
    assert context.aborted[0] is grpc.StatusCode.UNAUTHENTICATED
    assert called == []


def test_v2_unary_with_python_clients_empty_credential_answers_40100() -> None:
    handler, _ = v2_unary()
    empty = [
        ("x-mq-date-time", "20261127T102242Z"),
        (
            "authorization",
            "MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, "
            "Signature=8864ff5edcd9fb2fe45751f81fd153da58bc0618",
        ),
    ]
    response = run(
        gate()[0].wrap(V2_UNARY, handler).unary_unary(route_request("t"), FakeContext(empty))
    )
    assert response.status.code == v2pb.UNAUTHORIZED
    assert "names no access key" in response.status.message


def test_v2_unary_denied_answers_forbidden_40300() -> None:
    handler, called = v2_unary()
    response = run(
        gate()[0]
        .wrap(V2_UNARY, handler)
        .unary_unary(route_request(FORBIDDEN_TOPIC), FakeContext(APP))
    )
    assert response.status.code == v2pb.FORBIDDEN == 40300
    assert called == []


def test_v2_unary_admitted_reaches_the_servicer() -> None:
    handler, called = v2_unary()
    response = run(
        gate()[0].wrap(V2_UNARY, handler).unary_unary(route_request("orders"), FakeContext(APP))
    )
    assert response.status.code == v2pb.OK and len(called) == 1


def test_v2_server_stream_refusal_is_its_one_frame() -> None:
    async def behavior(request: Any, context: Any) -> None:
        raise AssertionError("not admitted")

    handler = grpc.unary_stream_rpc_method_handler(behavior)
    context = FakeContext(WRONG)
    request = v2.ReceiveMessageRequest(group=v2pb.Resource(name="g"))
    run(gate()[0].wrap(V2_SERVER_STREAM, handler).unary_stream(request, context))
    assert len(context.written) == 1
    assert isinstance(context.written[0], v2.ReceiveMessageResponse)
    assert context.written[0].status.code == v2pb.UNAUTHORIZED
    assert context.aborted is None


def telemetry(topic: str) -> v2.TelemetryCommand:
    command = v2.TelemetryCommand()
    command.settings.subscription.subscriptions.add(topic=v2pb.Resource(name=topic))
    return command


def test_v2_telemetry_opened_without_credentials_reads_the_first_frame_then_answers_40100() -> None:
    async def behavior(request_iterator: Any, context: Any) -> None:
        raise AssertionError("not admitted")

    handler = grpc.stream_stream_rpc_method_handler(behavior)
    context = FakeContext([("x-mq-client-id", "c1")], [telemetry("t")])
    run(gate()[0].wrap(V2_STREAM, handler).stream_stream(iter(()), context))
    assert context.reads == 1
    assert [type(m) for m in context.written] == [v2.TelemetryCommand]
    assert context.written[0].status.code == v2pb.UNAUTHORIZED


def test_v2_telemetry_frame_refused_in_a_servicer_that_does_not_answer_it_ends_forbidden() -> None:
    async def behavior(request_iterator: Any, context: Any) -> None:
        while (await context.read()) is not grpc.aio.EOF:
            await context.write(v2.TelemetryCommand(status=v2pb.Status(code=v2pb.OK)))

    handler = grpc.stream_stream_rpc_method_handler(behavior)
    context = FakeContext(APP, [telemetry("orders"), telemetry(FORBIDDEN_TOPIC)])
    run(gate()[0].wrap(V2_STREAM, handler).stream_stream(iter(()), context))
    assert [m.status.code for m in context.written] == [v2pb.OK, v2pb.FORBIDDEN]
    assert context.aborted is None


def test_stream_requests_read_through_the_request_iterator_are_checked_too() -> None:
    async def behavior(request_iterator: Any, context: Any) -> None:
        async for _ in request_iterator:
            pass

    async def requests() -> Any:
        yield send_request(1, FORBIDDEN_TOPIC)

    handler = grpc.stream_stream_rpc_method_handler(behavior)
    context = FakeContext(APP)
    with pytest.raises(grpc.aio.AbortError):
        run(gate()[0].wrap(V1_STREAM, handler).stream_stream(requests(), context))
    assert context.aborted is not None
    assert context.aborted[0] is grpc.StatusCode.PERMISSION_DENIED


# -- what is never gated ------------------------------------------------------------------


@pytest.mark.parametrize(
    "method",
    [
        "/grpc.health.v1.Health/Check",
        "/grpc.health.v1.Health/Watch",
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    ],
)
def test_health_and_reflection_are_never_gated(method: str) -> None:
    handler, _ = v2_unary()
    assert gate()[0].wrap(method, handler) is handler


def test_every_refusal_is_counted_by_method_and_code() -> None:
    method = "/popmq.v1.AdminService/DeleteTopic"
    handler = gate()[0].wrap(method, unary(method, []))
    before = (
        audit.denied_count(method, "UNAUTHENTICATED"),
        audit.denied_count(method, "PERMISSION_DENIED"),
    )
    for metadata in ((), WRONG):
        with pytest.raises(grpc.aio.AbortError):
            run(handler.unary_unary(admin_pb2.DeleteTopicRequest(name="t"), FakeContext(metadata)))
    assert audit.denied_count(method, "UNAUTHENTICATED") == before[0] + 2
    made, _ = gate()
    listing = made.wrap(V1_UNARY, unary(V1_UNARY, []))
    denied_before = audit.denied_count(V1_UNARY, "PERMISSION_DENIED")
    with pytest.raises(grpc.aio.AbortError):
        run(listing.unary_unary(admin_pb2.ListTopicsRequest(), FakeContext(APP)))
    assert audit.denied_count(V1_UNARY, "PERMISSION_DENIED") == denied_before + 1
    assert audit.denied_count(method, "PERMISSION_DENIED") == before[1]
