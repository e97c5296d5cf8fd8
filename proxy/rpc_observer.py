"""The server's one interceptor (readiness, RPC latency, RPC log line), and the observer of
stream requests.

`RpcInterceptor` is the only gRPC interceptor of the server (but for the security gate's,
security/gate.py, installed only when authentication is on), because each one costs on
every call: grpc.aio runs the chain as one coroutine and one `functools.partial`
continuation per interceptor, and whatever the interceptor builds for a call (a closure, a
method handler) lives as long as the call, which for a held long poll is up to 30 s, times
thousands of polls. So the readiness gate (while the store is not open; what it refuses and
how is `popmq.proxy.health.refusal`) is a flag check in the same interceptor, and each
method's observed handler is built once, on its first call, and reused. It lives here,
beside the `popmq.rpc` log line it writes and the stream observer that writes the same line
per stream request; the histogram it feeds is the process's metrics' (`Metrics.rpc_duration`,
runtime/metrics.py), and the readiness part is one flag check and one call into
proxy/health.py.

Everything here runs on the event loop; nothing blocks it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import grpc
from prometheus_client import Histogram

from popmq.broker_core import MAX_SEND_MESSAGES
from popmq.grpc_calls.deserializers import checked_deserializer
from popmq.grpc_calls.errors import Undecodable, UndecodableRequestError, request_limit
from popmq.proxy.health import Health, refusal
from popmq.runtime.metrics import Metrics

log = logging.getLogger(__name__)
rpc_log = logging.getLogger("popmq.rpc")

_CLIENT_ERRORS = frozenset(
    {"INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "FAILED_PRECONDITION", "CANCELLED"}
)
"""Codes that mean the caller asked for something wrong (logged at info, not warning)."""

Behavior = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]
Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]
_MAX_CACHED_METHODS = 4096
"""Observed handlers kept; a method beyond it (only a catch-all generic handler resolves
that many names) is wrapped per call, as correct and only slower."""


class RpcInterceptor(grpc.aio.ServerInterceptor):
    """The server's one interceptor: the readiness gate, then RPC timing and the log line.

    Until `health.ready`, calls that `popmq.proxy.health.refusal` refuses get its UNAVAILABLE
    answer (neither timed nor logged). Every unary-unary RPC is timed by method and status
    code and logged; streaming RPCs are not timed (PopStream and SendStream report each
    request to a StreamObserver instead). Log levels: admin RPCs and failed RPCs at info
    (server-side failures at warning), successful messaging RPCs and health/reflection calls
    at debug.

    Every method's request decoding is checked, streaming ones included: a body that does not
    parse is answered INVALID_ARGUMENT naming the expected message, counted with that code,
    and logged at warning at most once a minute per method (grpc.aio would answer UNKNOWN and
    log a traceback per call). That costs one function call per decoded request, and for a
    streaming call one coroutine frame living with the call.

    Per call, once ready: one flag check, grpc's handler lookup (the continuation) and one
    dict lookup; the only object of ours that lives with the call is its `observed`
    coroutine. The observed handler of a method is cached with the handler it wraps and reused
    while the lookup returns that handler: the same object or an equal one (same behavior,
    serializers and shape; a generic handler may build a new handler per call around the same
    functions). A different handler replaces the entry. Only methods that resolved to a
    unary-unary handler are cached, so unknown method names never grow the cache.
    """

    def __init__(self, health: Health, metrics: Metrics | None) -> None:
        self._health = health
        self._histogram = metrics.rpc_duration if metrics is not None else None
        # "/pkg.Service/Method" -> (the handler resolved for it, its observed handler).
        # Touched on the event loop only; at most _MAX_CACHED_METHODS entries.
        self._observed: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}
        self._undecodable = _UndecodableRequests(self._histogram)

    @property
    def cached_methods(self) -> frozenset[str]:
        """Methods whose observed handler is cached ("/pkg.Service/Method")."""
        return frozenset(self._observed)

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        if not self._health.ready:
            refused = refusal(handler_call_details.method)
            if refused is not None:
                return refused
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        key: str = handler_call_details.method
        cached = self._observed.get(key)
        if cached is not None and (cached[0] is handler or cached[0] == handler):
            return cached[1]
        observed = self._wrap(key.lstrip("/"), handler)
        if observed is None:
            return handler
        if cached is not None or len(self._observed) < _MAX_CACHED_METHODS:
            self._observed[key] = (handler, observed)
        return observed

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler | None:
        """The handler that checks request decoding (and times unary-unary calls).

        A body that does not parse is answered INVALID_ARGUMENT, counted and logged by
        `_UndecodableRequests`, instead of grpc's UNKNOWN with a traceback per call. None for
        handlers of a shape this does not wrap (synchronous ones: the server has none).
        """
        deserializer = handler.request_deserializer
        serializer = handler.response_serializer
        refuse = functools.partial(self._undecodable.refuse, method)
        limit = request_limit(method)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _observed(method, handler.unary_unary, self._histogram, refuse),
                request_deserializer=checked_deserializer(
                    deserializer, unary=True, max_bytes=limit
                ),
                response_serializer=serializer,
            )
        if handler.unary_stream is not None:
            behavior = _checked_stream(handler.unary_stream, refuse)
            if behavior is None:
                return None
            return grpc.unary_stream_rpc_method_handler(
                behavior,
                request_deserializer=checked_deserializer(
                    deserializer, unary=True, max_bytes=limit
                ),
                response_serializer=serializer,
            )
        stream_stream = handler.stream_stream is not None
        behavior = _checked_stream(handler.stream_stream or handler.stream_unary, refuse)
        if behavior is None:
            return None
        make = (
            grpc.stream_stream_rpc_method_handler
            if stream_stream
            else grpc.stream_unary_rpc_method_handler
        )
        return make(
            behavior,
            request_deserializer=checked_deserializer(deserializer, unary=False, max_bytes=limit),
            response_serializer=serializer,
        )


_UNDECODABLE_LOG_INTERVAL_S = 60.0
"""Undecodable requests of one method are logged at most once per this many seconds."""


class _UndecodableRequests:
    """Answers, counts and logs requests whose body does not parse.

    Each is counted in the RPC histogram with code INVALID_ARGUMENT; the warning is
    rate-limited per method, since a broken or hostile client can send them in a loop.
    """

    def __init__(self, histogram: Histogram | None) -> None:
        self._histogram = histogram
        # method -> (time.monotonic() of its last warning, refusals not logged since).
        # Touched on the event loop only; one entry per method that got such a request.
        self._logged: dict[str, tuple[float, int]] = {}

    async def refuse(
        self,
        method: str,
        error: UndecodableRequestError,
        context: grpc.aio.ServicerContext,
        began: float,
        *,
        observe: bool = True,
    ) -> NoReturn:
        """Abort the call with INVALID_ARGUMENT (`observe`: count it here; unary-unary calls
        are counted by their observed handler)."""
        now = time.monotonic()
        last, suppressed = self._logged.get(method, (-_UNDECODABLE_LOG_INTERVAL_S, 0))
        if now - last >= _UNDECODABLE_LOG_INTERVAL_S:
            self._logged[method] = (now, 0)
            log.warning(
                "%s from %s: %s (%d more such requests since the last line; at most one "
                "line a minute per method)",
                method,
                context.peer(),
                error,
                suppressed,
            )
        else:
            self._logged[method] = (last, suppressed + 1)
        if observe and self._histogram is not None:
            self._histogram.labels(method, "INVALID_ARGUMENT").observe(time.perf_counter() - began)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        raise error  # abort raises; this line is never reached


Refuse = Callable[..., Awaitable[NoReturn]]


def _checked_stream(behavior: Any, refuse: Refuse) -> Any:
    """A streaming `behavior` that answers an undecodable request INVALID_ARGUMENT: the
    `Undecodable` request of a unary-stream call, or the UndecodableRequestError a read of
    a stream-request call raises. Keeps the shape grpc dispatches on (coroutine function or
    async generator function); None for any other (synchronous) behavior."""
    if inspect.isasyncgenfunction(behavior):

        async def generator(request: Any, context: grpc.aio.ServicerContext) -> Any:
            began = time.perf_counter()
            if isinstance(request, Undecodable):
                await refuse(request.error, context, began)
            try:
                async for response in behavior(request, context):
                    yield response
            except UndecodableRequestError as exc:
                await refuse(exc, context, began)

        return generator
    if inspect.iscoroutinefunction(behavior):

        async def coroutine(request: Any, context: grpc.aio.ServicerContext) -> Any:
            began = time.perf_counter()
            if isinstance(request, Undecodable):
                await refuse(request.error, context, began)
            try:
                return await behavior(request, context)
            except UndecodableRequestError as exc:
                await refuse(exc, context, began)

        return coroutine
    return None


def _observed(
    method: str, behavior: Behavior, histogram: Histogram | None, refuse: Refuse
) -> Behavior:
    """`behavior` timed into `histogram` and logged as `method` (built once per method); an
    undecodable request is answered by `refuse` instead."""
    admin = method.startswith("popmq.v1.AdminService/")
    # Status code name -> the histogram's child for (method, code): `labels()` validates,
    # converts and takes a lock on every call. Nothing removes histogram children.
    children: dict[str, Any] = {}

    async def observed(request: Any, context: grpc.aio.ServicerContext) -> Any:
        began = time.perf_counter()
        code = "OK"
        try:
            if isinstance(request, Undecodable):
                await refuse(request.error, context, began, observe=False)
            return await behavior(request, context)
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        except BaseException:
            status = context.code()
            code = status.name if isinstance(status, grpc.StatusCode) else "UNKNOWN"
            raise
        finally:
            elapsed = time.perf_counter() - began
            if histogram is not None:
                child = children.get(code)
                if child is None:
                    child = children[code] = histogram.labels(method, code)
                child.observe(elapsed)
            _log_rpc(method, code, elapsed, request, context, admin=admin)

    return observed


def _log_rpc(
    method: str,
    code: str,
    elapsed: float,
    request: Any,
    context: grpc.aio.ServicerContext,
    *,
    admin: bool,
) -> None:
    details = context.details() if code != "OK" else None
    log_call(method, code, elapsed, request, context.peer(), details or "", admin=admin)


def log_call(
    method: str,
    code: str,
    elapsed: float,
    request: Any,
    peer: str,
    detail: str,
    *,
    admin: bool = False,
) -> None:
    """The `popmq.rpc` log line of one call (or of one pop of a PopStream)."""
    if code == "OK":
        level = logging.INFO if admin else logging.DEBUG
    elif code in _CLIENT_ERRORS:
        level = logging.INFO
    else:
        level = logging.WARNING
    if not rpc_log.isEnabledFor(level):
        return
    context_fields = _request_context(method, request)
    rpc_log.log(
        level,
        "%s %s %.3fms",
        method,
        code,
        elapsed * 1000,
        extra={
            "rpc": method,
            "code": code,
            "duration_ms": round(elapsed * 1000, 3),
            "peer": peer,
            "detail": detail,
            **context_fields,
        },
    )


class StreamObserver:
    """Times and logs each request of a PopStream or SendStream as the interceptor does a call.

    The interceptor cannot time a stream's requests (only the whole stream), so the stream
    reports each answered request here: `popmq_rpc_duration_seconds{method=".../PopStream"}`
    counts pops (`.../SendStream`: sends), not streams, and each gets its `popmq.rpc` log line.
    """

    def __init__(self, metrics: Metrics | None, method: str) -> None:
        self.method = method
        """The stream's full method name, e.g. "popmq.v1.MessagingService/PopStream"."""
        self._histogram = metrics.rpc_duration if metrics is not None else None
        self._children: dict[str, Any] = {}

    def __call__(self, code: str, elapsed: float, request: Any, peer: str, detail: str) -> None:
        if self._histogram is not None:
            child = self._children.get(code)
            if child is None:
                child = self._children[code] = self._histogram.labels(self.method, code)
            child.observe(elapsed)
        log_call(self.method, code, elapsed, request, peer, detail)


def _request_context(method: str, request: Any) -> dict[str, str]:
    """The topic and group a request is about, for the log line."""
    found: dict[str, str] = {}
    fields = getattr(getattr(request, "DESCRIPTOR", None), "fields_by_name", {})
    for name in ("topic", "group"):
        if name in fields and getattr(request, name):
            found[name] = getattr(request, name)
    if "name" in fields and request.name:
        if "Topic" in method:
            found.setdefault("topic", request.name)
        elif "Group" in method:
            found.setdefault("group", request.name)
    if "messages" in fields and method.endswith(("/SendMessages", "/SendStream")):
        # A refused request may hold far more messages than a send may: name the topics of
        # the first MAX_SEND_MESSAGES only, so the log line costs what a valid send's does.
        first = itertools.islice(request.messages, MAX_SEND_MESSAGES)
        topics = sorted({m.topic for m in first})
        if topics:
            found["topic"] = ",".join(topics)
    return found
