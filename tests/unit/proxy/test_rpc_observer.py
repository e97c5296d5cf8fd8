"""The server's one interceptor: readiness gate, per-method observed handlers, histogram, log.

The interceptor is driven the way grpc.aio drives it (a continuation that resolves the
method's handler, then the returned handler's behavior called with the request and a
context), with a stand-in context: no server, no network.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import grpc
import pytest

from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from popmq.proxy.health import Health
from popmq.proxy.rpc_observer import RpcInterceptor
from popmq.runtime.metrics import Metrics

GET_TOPIC = "/popmq.v1.AdminService/GetTopic"
POP = "/popmq.v1.MessagingService/Pop"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"


class Details(NamedTuple):
    method: str
    invocation_metadata: tuple[tuple[str, str], ...] = ()


class Aborted(Exception):
    pass


@dataclass
class Context:
    """What the observer and the refusal use of grpc.aio's ServicerContext."""

    status: grpc.StatusCode | None = None
    text: str = ""

    def code(self) -> grpc.StatusCode | None:
        return self.status

    def details(self) -> str:
        return self.text

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        self.status, self.text = code, details
        raise Aborted(details)


@dataclass
class Resolver:
    """grpc's handler lookup: `handlers[method]` (a callable builds a handler per call)."""

    handlers: dict[str, Any] = field(default_factory=dict)
    lookups: list[str] = field(default_factory=list)

    async def __call__(self, details: Details) -> grpc.RpcMethodHandler | None:
        self.lookups.append(details.method)
        found = self.handlers.get(details.method)
        return found() if callable(found) else found


async def get_topic(request: admin_pb2.GetTopicRequest, context: Context) -> Any:
    if request.name == "missing":
        await context.abort(grpc.StatusCode.NOT_FOUND, "topic 'missing' does not exist")
    return admin_pb2.GetTopicResponse()


def unary(behavior: Callable[..., Awaitable[Any]]) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(
        behavior,
        request_deserializer=admin_pb2.GetTopicRequest.FromString,
        response_serializer=admin_pb2.GetTopicResponse.SerializeToString,
    )


def ready_interceptor(metrics: Metrics | None = None) -> RpcInterceptor:
    health = Health()
    health.ready = True
    return RpcInterceptor(health, metrics)


async def call(handler: grpc.RpcMethodHandler, request: Any, context: Context) -> Any:
    try:
        return await handler.unary_unary(request, context)
    except Aborted:
        return None


def count(metrics: Metrics, method: str, code: str) -> float | None:
    return metrics.registry.get_sample_value(
        "popmq_rpc_duration_seconds_count", {"method": method, "code": code}
    )


def test_calls_of_one_method_share_one_observed_handler_and_each_is_counted_by_code() -> None:
    metrics = Metrics()
    interceptor = ready_interceptor(metrics)
    resolver = Resolver({GET_TOPIC: unary(get_topic)})

    async def scenario() -> None:
        handlers = [
            await interceptor.intercept_service(resolver, Details(GET_TOPIC)) for _ in "abc"
        ]
        assert handlers[0] is handlers[1] is handlers[2]
        assert handlers[0].unary_unary is not get_topic  # observed, not the bare behavior
        assert resolver.lookups == [GET_TOPIC] * 3  # each call still resolves its handler
        for name in ("orders", "orders", "missing"):
            await call(handlers[0], admin_pb2.GetTopicRequest(name=name), Context())

    asyncio.run(scenario())
    assert count(metrics, "popmq.v1.AdminService/GetTopic", "OK") == 2
    assert count(metrics, "popmq.v1.AdminService/GetTopic", "NOT_FOUND") == 1
    assert interceptor.cached_methods == {GET_TOPIC}


def test_a_generic_handler_building_a_new_handler_per_call_still_reuses_the_observed_one() -> None:
    class Servicer:
        async def GetTopic(self, request: Any, context: Context) -> Any:
            return admin_pb2.GetTopicResponse()

    servicer = Servicer()
    # A new namedtuple and a new bound method on every lookup, the same behavior.
    resolver = Resolver({GET_TOPIC: lambda: unary(servicer.GetTopic)})
    interceptor = ready_interceptor()

    async def scenario() -> None:
        first = await interceptor.intercept_service(resolver, Details(GET_TOPIC))
        second = await interceptor.intercept_service(resolver, Details(GET_TOPIC))
        assert first is second

    asyncio.run(scenario())


def test_a_different_handler_for_the_method_is_observed_instead_of_the_cached_one() -> None:
    metrics = Metrics()
    interceptor = ready_interceptor(metrics)
    resolver = Resolver({GET_TOPIC: unary(get_topic)})

    async def replacement(request: Any, context: Context) -> Any:
        return "replaced"

    async def scenario() -> None:
        old = await interceptor.intercept_service(resolver, Details(GET_TOPIC))
        resolver.handlers[GET_TOPIC] = unary(replacement)
        new = await interceptor.intercept_service(resolver, Details(GET_TOPIC))
        assert new is not old
        assert await call(new, admin_pb2.GetTopicRequest(name="orders"), Context()) == "replaced"
        assert await interceptor.intercept_service(resolver, Details(GET_TOPIC)) is new

    asyncio.run(scenario())
    assert count(metrics, "popmq.v1.AdminService/GetTopic", "OK") == 1
    assert interceptor.cached_methods == {GET_TOPIC}


def test_unknown_and_streaming_methods_pass_through_and_are_never_cached() -> None:
    async def stream(request: Any, context: Context) -> AsyncIterator[Any]:
        yield None

    streaming = grpc.unary_stream_rpc_method_handler(stream)
    resolver = Resolver({"/popmq.v1.Test/Stream": streaming})
    interceptor = ready_interceptor(Metrics())

    async def scenario() -> None:
        for n in range(1000):
            assert await interceptor.intercept_service(resolver, Details(f"/x.Y/M{n}")) is None
        found = await interceptor.intercept_service(resolver, Details("/popmq.v1.Test/Stream"))
        assert found is streaming

    asyncio.run(scenario())
    assert interceptor.cached_methods == frozenset()


def test_a_cancelled_call_is_counted_as_cancelled() -> None:
    metrics = Metrics()
    interceptor = ready_interceptor(metrics)

    async def wait_forever(request: Any, context: Context) -> Any:
        await asyncio.Event().wait()

    resolver = Resolver({POP: unary(wait_forever)})

    async def scenario() -> None:
        handler = await interceptor.intercept_service(resolver, Details(POP))
        task = asyncio.create_task(handler.unary_unary(messaging_pb2.PopRequest(), Context()))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert count(metrics, "popmq.v1.MessagingService/Pop", "CANCELLED") == 1


def test_until_ready_only_health_and_reflection_reach_their_handlers() -> None:
    health = Health()
    interceptor = RpcInterceptor(health, Metrics())
    resolver = Resolver({GET_TOPIC: unary(get_topic), HEALTH_CHECK: unary(get_topic)})

    async def scenario() -> None:
        refused = await interceptor.intercept_service(resolver, Details(GET_TOPIC))
        context = Context()
        with pytest.raises(Aborted):
            await anext(refused.stream_stream(iter(()), context))
        assert context.status == grpc.StatusCode.UNAVAILABLE
        assert "starting" in context.text
        assert await interceptor.intercept_service(resolver, Details("/x.Y/Z")) is refused
        assert resolver.lookups == []
        await interceptor.intercept_service(resolver, Details(HEALTH_CHECK))
        assert resolver.lookups == [HEALTH_CHECK]

        health.ready = True
        served = await interceptor.intercept_service(resolver, Details(GET_TOPIC))
        assert served is not refused and served.unary_unary is not None

    asyncio.run(scenario())


def test_the_rpc_log_line_keeps_its_format_levels_and_fields(
    caplog: pytest.LogCaptureFixture,
) -> None:
    interceptor = ready_interceptor()

    async def broken(request: Any, context: Context) -> Any:
        await context.abort(grpc.StatusCode.INTERNAL, "store failed")

    async def popped(request: Any, context: Context) -> Any:
        return messaging_pb2.PopResponse()

    resolver = Resolver(
        {
            GET_TOPIC: unary(get_topic),
            POP: unary(popped),
            "/popmq.v1.MessagingService/Ack": unary(broken),
        }
    )

    async def scenario() -> None:
        for method, request in (
            (GET_TOPIC, admin_pb2.GetTopicRequest(name="orders")),
            (GET_TOPIC, admin_pb2.GetTopicRequest(name="missing")),
            (POP, messaging_pb2.PopRequest(group="billing", topic="orders")),
            ("/popmq.v1.MessagingService/Ack", messaging_pb2.AckRequest(group="billing")),
        ):
            handler = await interceptor.intercept_service(resolver, Details(method))
            await call(handler, request, Context())

    with caplog.at_level(logging.DEBUG, logger="popmq.rpc"):
        asyncio.run(scenario())
    records = [r for r in caplog.records if r.name == "popmq.rpc"]
    assert [(r.levelno, r.getMessage().rsplit(" ", 1)[0]) for r in records] == [
        (logging.INFO, "popmq.v1.AdminService/GetTopic OK"),
        (logging.INFO, "popmq.v1.AdminService/GetTopic NOT_FOUND"),
        (logging.DEBUG, "popmq.v1.MessagingService/Pop OK"),
        (logging.WARNING, "popmq.v1.MessagingService/Ack INTERNAL"),
    ]
    assert all(r.getMessage().endswith("ms") for r in records)
    fields = [
        tuple(getattr(r, name, "") for name in ("code", "detail", "peer", "topic", "group"))
        for r in records
    ]
    assert fields == [
        ("OK", "", "ipv4:127.0.0.1:50000", "orders", ""),
        ("NOT_FOUND", "topic 'missing' does not exist", "ipv4:127.0.0.1:50000", "missing", ""),
        ("OK", "", "ipv4:127.0.0.1:50000", "orders", "billing"),
        ("INTERNAL", "store failed", "ipv4:127.0.0.1:50000", "", "billing"),
    ]
