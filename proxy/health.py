"""The ops surface of the serving port: grpc.health.v1, server reflection, readiness.

The server listens before the store is open, so health checks and grpcurl work while it
recovers: health answers NOT_SERVING, every other RPC UNAVAILABLE ("starting"). `refusal`
says which calls are refused and with what; the server's one interceptor
(proxy/rpc_observer.py `RpcInterceptor`) applies it while `Health.ready` is false. Servicers
that need the open store are registered after it opened, into `LateServices`, a generic
handler the gRPC server holds from the start (grpc only accepts handlers before it starts).
On shutdown health turns NOT_SERVING before in-flight RPCs are drained.

Reflection lists every service registered here, whenever it was registered, so
`grpcurl -plaintext HOST:PORT list` always shows what the server really serves. For the
project's own protos it serves the descriptors with their comments (proxy/descriptors.py),
so `grpcurl describe` shows the API's documentation.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence

import grpc
from google.protobuf import descriptor, descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from popmq._gen import _pool
from popmq.proxy.descriptors import source_code_info

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
REFLECTION_SERVICE = reflection.SERVICE_NAME
_ALWAYS_OPEN = (f"/{HEALTH_SERVICE}/", f"/{REFLECTION_SERVICE}/")
"""Method prefixes served while the server is not ready."""


class LateServices(grpc.GenericRpcHandler):
    """Servicers added after the gRPC server started (when the store is open).

    Generated `add_*Servicer_to_server(servicer, server)` functions accept it in place of a
    server: it records their method handlers and serves them from then on.
    """

    def __init__(self) -> None:
        # "/pkg.Service/Method" -> handler; filled before the server turns SERVING.
        self._methods: dict[str, grpc.RpcMethodHandler] = {}
        self._generic: list[grpc.GenericRpcHandler] = []
        self._names: list[str] = []

    @property
    def service_names(self) -> list[str]:
        return list(self._names)

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        if service_name not in self._names:
            self._names.append(service_name)
        for method, handler in method_handlers.items():
            self._methods[f"/{service_name}/{method}"] = handler

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        # Generated code registers each method twice (generic and registered); the dict of
        # registered methods answers first, generic handlers cover hand-written services.
        self._generic.extend(handlers)

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = self._methods.get(handler_call_details.method)
        if handler is not None:
            return handler
        for generic in self._generic:
            found: grpc.RpcMethodHandler | None = generic.service(handler_call_details)
            if found is not None:
                return found
        return None


class Health:
    """The server's serving status, published through grpc.health.v1.

    The overall status ("") and one per registered service follow the server: NOT_SERVING
    until `serving()`, NOT_SERVING again (for good) from `failed()` (the broker can no longer
    do its job: an orchestrator should restart the server) or `shutting_down()`, and
    NOT_SERVING while `degraded()` (it cannot do its job now, and may again: a proxy with no
    broker to route to) until `restored()`.
    """

    def __init__(self) -> None:
        self.servicer = health_aio.HealthServicer()
        self.ready = False
        self.failure: str | None = None
        """Why health turned NOT_SERVING while the server runs (see `failed`), or None."""
        self.degradation: str | None = None
        """Why health is NOT_SERVING for now (see `degraded`), or None."""
        self._services: tuple[str, ...] = ()

    async def starting(self) -> None:
        await self.servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)

    async def serving(self, services: Sequence[str]) -> None:
        self._services = tuple(services)
        await self._publish()
        self.ready = True

    async def failed(self, reason: str) -> None:
        """Answer NOT_SERVING from now on; RPCs are still served (acks may still work)."""
        if self.failure is not None:
            return
        self.failure = reason
        await self._publish()

    async def degraded(self, reason: str) -> None:
        """Answer NOT_SERVING until `restored`; RPCs are still served (and answer why they
        cannot be done)."""
        if self.degradation == reason:
            return
        self.degradation = reason
        if self.ready:  # else serving() publishes it
            await self._publish()

    async def restored(self) -> None:
        """The degradation is over: SERVING again, unless failed."""
        if self.degradation is None:
            return
        self.degradation = None
        if self.ready:
            await self._publish()

    async def _publish(self) -> None:
        serving = self.failure is None and self.degradation is None
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", *self._services):
            await self.servicer.set(name, status)

    async def shutting_down(self) -> None:
        self.ready = False
        await self.servicer.enter_graceful_shutdown()


def refusal(method: str) -> grpc.RpcMethodHandler | None:
    """How a call to `method` is answered while the server is not ready.

    UNAVAILABLE for everything but health and reflection, which are served (None).
    """
    return None if method.startswith(_ALWAYS_OPEN) else _REFUSED


async def _refuse(
    request_iterator: AsyncIterable[bytes], context: grpc.aio.ServicerContext
) -> AsyncIterator[bytes]:
    await context.abort(
        grpc.StatusCode.UNAVAILABLE,
        "popmq is starting or stopping (the store is not open); retry shortly",
    )
    yield b""  # never reached: abort raises; makes this an async generator


# A stream-stream handler fits every call shape: it reads nothing and only answers.
_REFUSED = grpc.stream_stream_rpc_method_handler(_refuse)


class _Reflection(reflection.aio.ReflectionServicer):
    """Server reflection: services read at call time, proto files with their comments.

    The service list is read per call because services are registered late. Files are still
    looked up in the descriptor pools (popmq's private one with apache.rocketmq.v2, then the
    default one), so reflection answers exactly what the server has loaded; the project's
    own files (and what they import) are sent with their comments added. Everything else
    (health, reflection, well-known types) is the base class's answer. The private pool
    goes first because a process that also imported the official RocketMQ client has that
    client's own apache.rocketmq.v2 files (other names, no comments) in the default pool,
    and they are not what this server serves.
    """

    def __init__(self, names: Callable[[], Sequence[str]]) -> None:
        super().__init__(())
        self._names = names
        self._comments = source_code_info()
        # File name -> serialized documented FileDescriptorProto; the pool never changes.
        self._documented: dict[str, bytes] = {}

    def _file_by_filename(
        self, request: reflection_pb2.ServerReflectionRequest, filename: str
    ) -> reflection_pb2.ServerReflectionResponse:
        file = _find(filename, _pool.POOL.FindFileByName, self._pool.FindFileByName)
        if file is not None and file.name in self._comments:
            return self._documented_response(request, file)
        return super()._file_by_filename(request, filename)

    def _file_containing_symbol(
        self, request: reflection_pb2.ServerReflectionRequest, fully_qualified_name: str
    ) -> reflection_pb2.ServerReflectionResponse:
        file = _find(
            fully_qualified_name,
            _pool.POOL.FindFileContainingSymbol,
            self._pool.FindFileContainingSymbol,
        )
        if file is not None and file.name in self._comments:
            return self._documented_response(request, file)
        return super()._file_containing_symbol(request, fully_qualified_name)

    def _documented_response(
        self, request: reflection_pb2.ServerReflectionRequest, file: descriptor.FileDescriptor
    ) -> reflection_pb2.ServerReflectionResponse:
        """The file and its transitive imports (what the base class sends), with comments."""
        files: dict[str, descriptor.FileDescriptor] = {}
        pending = [file]
        while pending:
            current = pending.pop()
            if current.name not in files:
                files[current.name] = current
                pending.extend(current.dependencies)
        return reflection_pb2.ServerReflectionResponse(
            file_descriptor_response=reflection_pb2.FileDescriptorResponse(
                file_descriptor_proto=[self._serialized(f) for f in files.values()]
            ),
            original_request=request,
        )

    def _serialized(self, file: descriptor.FileDescriptor) -> bytes:
        cached = self._documented.get(file.name)
        if cached is None:
            proto = descriptor_pb2.FileDescriptorProto()
            file.CopyToProto(proto)
            comments = self._comments.get(file.name)
            if comments is not None:
                proto.source_code_info.CopyFrom(comments)
            cached = proto.SerializeToString()
            self._documented[file.name] = cached
        return cached

    async def ServerReflectionInfo(
        self,
        request_iterator: AsyncIterable[reflection_pb2.ServerReflectionRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[reflection_pb2.ServerReflectionResponse]:
        async for request in request_iterator:
            if request.HasField("list_services"):
                yield reflection_pb2.ServerReflectionResponse(
                    list_services_response=reflection_pb2.ListServiceResponse(
                        service=[
                            reflection_pb2.ServiceResponse(name=name)
                            for name in sorted(self._names())
                        ]
                    ),
                    original_request=request,
                )
                continue
            async for response in super().ServerReflectionInfo(_one(request), context):
                yield response


async def _one(
    request: reflection_pb2.ServerReflectionRequest,
) -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
    yield request


def _find(
    name: str, *lookups: Callable[[str], descriptor.FileDescriptor]
) -> descriptor.FileDescriptor | None:
    for lookup in lookups:
        try:
            return lookup(name)
        except KeyError:
            continue
    return None  # the base class answers NOT_FOUND


def add_ops_services(server: grpc.aio.Server, health: Health, late: LateServices) -> None:
    """Register health, reflection and the late services on a server before it starts."""
    health_pb2_grpc.add_HealthServicer_to_server(health.servicer, server)

    def names() -> list[str]:
        return [HEALTH_SERVICE, REFLECTION_SERVICE, *late.service_names]

    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(_Reflection(names), server)
    server.add_generic_rpc_handlers((late,))
