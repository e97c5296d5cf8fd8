"""The enforcement point: every call is authenticated and authorized here, or refused.

Where it sits: `GateInterceptor`, a grpc.aio server interceptor after the server's
`RpcInterceptor` (proxy/rpc_observer.py), installed only when `[security] authentication` is on.
It wraps each method's handler once (cached like RpcInterceptor's observed handlers), so
both protocols pass the same code path (`Gate.admit` for a call, `Gate.check_request` for a
stream's request message) and only the last step, how a refusal is told, differs:

- popmq.v1 (and any other service): the call ends with the gRPC status of the error's code,
  UNAUTHENTICATED or PERMISSION_DENIED, and its message (as grpc_calls/errors.py `rpc` does).
- a protocol that tells outcomes its own way, a `Dialect` the server gives the gate:
  apache.rocketmq.v2's (proxy/rocketmq/refusals.py) answers with the method's response,
  its `status` set (official clients read outcomes only from it, gRPC status OK). A unary
  call returns it; ReceiveMessage and PullMessage write it as their one frame; a Telemetry
  stream writes it as its one command. The dialect also says where a call names its
  client (v2: the `x-mq-client-id` header).

A stream refused when it opens (SendStream, PopStream, Telemetry) first reads the client's
first request, then answers (write_errors.read_first_request: else the client's grpc may
report its failed write instead of the refusal).

grpc.health and reflection are never gated: load balancers and `grpcurl list` work without
credentials. With authentication off the interceptor is not installed at all, so the gate
costs nothing per call, and the current principal is the default ANONYMOUS_SUPER.

Per call: authenticate the `authorization` and `x-mq-date-time` headers (authn.py), set the
Principal (`set_principal`, in the call's own task, which the tasks it starts inherit; its
`source` is the peer as grpc reports it), then unless the principal is SUPER,
`authorizer.checks(method, request)` and `authorizer.authorize(principal, checks)`. `method`
is the full name "/pkg.Service/Method". Every refusal (UNAUTHENTICATED or PERMISSION_DENIED,
of a call or of one stream message) goes to `audit.denied(method, code, ...)`: the
denied-request metric, a rate-limited warning, and the audit line of a refused admin
mutation. Nothing logs a header's value.

Streams (SendStream, PopStream, Telemetry): the headers are checked once, when the stream
opens; each request message is then authorized as it is read (the servicer's
`context.read()` and the request iterator both check). A refused message raises
`RefusedRequestError` from the read: the stream servicers catch it and answer that request
alone, as they answer any failed request (PopStream and SendStream with the request's error,
Telemetry with a TelemetryCommand status), and the stream goes on. In a servicer that does
not catch it the call ends with the refusal in the protocol's shape (fail closed).

A request that does not parse is answered INVALID_ARGUMENT by RpcInterceptor before the gate
sees it (the gate needs a decoded request to authorize).

Until the acl helper's store is wired, the Authorizer allows everything (`AllowAll`) and the
only user is root (`StaticDirectory()` beside the Authenticator's root). The server wires
access control with `Gate.use(authorizer=..., directory=...)` in one place, PopMQServer.start
(calls read both each time). A cluster broker's gate (broker/server.py) keeps root as
its only user on purpose: only proxies call BrokerService. Everything runs on the event
loop; nothing blocks.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, NoReturn, Protocol

import grpc
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2

from popmq.broker_core import InvalidArgumentError, PermissionDeniedError, PopMQError
from popmq.grpc_calls.errors import RefusedRequestError, status_code
from popmq.grpc_calls.write_errors import WRITE_FAILED, after_failed_write, read_first_request
from popmq.security import audit
from popmq.security.authn import Authenticator
from popmq.security.client_owners import ClientOwners
from popmq.security.config import SecurityConfig
from popmq.security.model import Check, Principal, User, set_principal

log = logging.getLogger(__name__)

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
OPEN_PREFIXES = (f"/{HEALTH_SERVICE}/", "/grpc.reflection.")
"""Methods never gated: grpc.health.v1 and server reflection (v1alpha and v1)."""
STREAM_REFUSAL_READ_S = 5.0
"""How long a stream refused when it opens waits for the client's first request before it
answers anyway (write_errors.read_first_request says why it waits)."""
_MAX_CACHED_METHODS = 256
"""Gated handlers kept; the services have about 60 methods (unknown names resolve to None)."""


class Answers(Protocol):
    """How a protocol tells a client that its call was refused."""

    async def answer(self, context: grpc.aio.ServicerContext, error: PopMQError) -> Any:
        """The response that carries `error`, or end the call with it (then never return)."""
        ...


class Dialect(Protocol):
    """A protocol whose refusals are told in its own shape, and whose calls name their client
    in their own place (the RocketMQ front end's: proxy/rocketmq/refusals.py). The calls of
    no dialect (popmq.v1, BrokerService, ...) end with the gRPC status of the error."""

    prefix: str
    """Its methods' full names start with it ("/apache.rocketmq.v2.")."""

    def answers(self, method: str) -> Answers:
        """How a refused call of `method` ("/pkg.Service/Method") is answered."""
        ...

    def client_id(self, context: grpc.aio.ServicerContext, request: Message | None) -> object:
        """The client id the call names ("" for none); `request` is None for a stream."""
        ...


class Authorizer(Protocol):
    """What access control answers the gate (acl helper: `AclAuthorizer`)."""

    def checks(self, method: str, request: Message) -> Sequence[Check]:
        """What a call of `method` ("/pkg.Service/Method") with `request` (for a stream: one
        request message) needs."""
        ...

    def authorize(self, principal: Principal, checks: Sequence[Check]) -> None:
        """Return when `principal` may do all of `checks`; raise PermissionDeniedError
        naming the resource and action otherwise."""
        ...


class UserDirectory(Protocol):
    """Where the Authenticator finds users other than root (acl helper: the store's)."""

    def user(self, access_key: str) -> User | None:
        """The user of `access_key`, None if there is none; synchronous, from a cache."""
        ...


class AllowAll:
    """The Authorizer until access control is wired: every authenticated caller may do all."""

    def checks(self, method: str, request: Message) -> Sequence[Check]:
        return ()

    def authorize(self, principal: Principal, checks: Sequence[Check]) -> None:
        return None


class StaticDirectory:
    """A fixed set of users. Empty (the default), it leaves root as the only user."""

    def __init__(self, users: Iterable[User] = ()) -> None:
        self._users = {user.access_key: user for user in users}

    def user(self, access_key: str) -> User | None:
        return self._users.get(access_key)


Behavior = Callable[..., Any]


class Gate:
    """Authenticates and authorizes calls (see the module docstring).

    Args:
        authenticator: Checks the signature; None turns authentication off (the gate then
            admits everything and `interceptor()` is None).
        authorizer: Access control for authenticated callers; default `AllowAll`.
        dialects: The protocols whose refusals are told in their own shape (`Dialect`).
    """

    def __init__(
        self,
        authenticator: Authenticator | None = None,
        authorizer: Authorizer | None = None,
        *,
        dialects: Sequence[Dialect] = (),
    ) -> None:
        self.authenticator = authenticator
        self.dialects = tuple(dialects)
        self.authorizer: Authorizer = authorizer if authorizer is not None else AllowAll()
        """Replaceable before the server turns SERVING (acl's AclAuthorizer)."""
        self.client_owners = ClientOwners()
        """Which user each client id belongs to (client_owners.py says why)."""

    @classmethod
    def from_config(
        cls,
        config: SecurityConfig,
        *,
        directory: UserDirectory | None = None,
        authorizer: Authorizer | None = None,
        dialects: Sequence[Dialect] = (),
    ) -> Gate:
        """The gate `[security]` asks for: off unless `authentication` is on.

        Raises:
            InvalidArgumentError: Authentication is on and no user could sign in (no root
                user), or the root user's secret cannot be loaded (authn.load_root_user).
        """
        if not config.authentication:
            return cls(None, authorizer, dialects=dialects)
        authenticator = Authenticator(
            directory if directory is not None else StaticDirectory(), config
        )
        if authenticator.root is None and directory is None:
            raise InvalidArgumentError(
                "security.authentication is on but no user can sign in: set "
                "security.root_access_key and security.root_secret_key (or "
                "POPMQ_SECURITY_ROOT_SECRET_KEY, or security.root_secret_key_file)"
            )
        return cls(authenticator, authorizer, dialects=dialects)

    def use(self, *, authorizer: Authorizer, directory: UserDirectory) -> None:
        """Put access control in: `authorizer` decides, `directory` finds users besides root
        (acl's `AclAuthorizer(store)` and the store's directory). Call it before the server
        turns SERVING; with authentication off only the authorizer is kept (unused)."""
        self.authorizer = authorizer
        if self.authenticator is not None:
            self.authenticator.directory = directory

    def dialect(self, method: str) -> Dialect | None:
        """The dialect of `method`, None for a call answered with its gRPC status."""
        for dialect in self.dialects:
            if method.startswith(dialect.prefix):
                return dialect
        return None

    @property
    def enabled(self) -> bool:
        """Whether calls are authenticated (`[security] authentication`)."""
        return self.authenticator is not None

    def interceptor(self) -> GateInterceptor | None:
        """The server interceptor that applies this gate; None when it is off (no cost)."""
        return GateInterceptor(self) if self.enabled else None

    # -- the one code path ----------------------------------------------------------------

    def authenticate(self, context: grpc.aio.ServicerContext) -> Principal:
        """The caller of the call, made the current principal of its task.

        Raises:
            UnauthenticatedError: Which credential failed.
        """
        authenticator = self.authenticator
        if authenticator is None:
            raise AssertionError("the gate is off: nothing authenticates")
        principal = authenticator.authenticate(context.invocation_metadata(), context.peer())
        set_principal(principal)
        return principal

    def authorize(self, method: str, principal: Principal, request: Message) -> None:
        """Return when `principal` may make `request` of `method`; SUPER users always may.

        Raises:
            PermissionDeniedError: Access control refuses it (or another PopMQError of the
                authorizer's, such as a request it cannot map).
        """
        if principal.is_super:
            return
        authorizer = self.authorizer
        authorizer.authorize(principal, authorizer.checks(method, request))

    def admit(self, method: str, request: Message, context: grpc.aio.ServicerContext) -> None:
        """Authenticate and authorize a call with one request (unary request)."""
        principal = self.authenticate(context)
        self.claim_client(method, principal, context, request)
        self.authorize(method, principal, request)

    def claim_client(
        self,
        method: str,
        principal: Principal,
        context: grpc.aio.ServicerContext,
        request: Message | None = None,
    ) -> None:
        """Refuse a call naming another user's client id (where its dialect says, v2:
        `x-mq-client-id`; else a request's `client_id`); the first use binds it
        (client_owners.py).

        Raises:
            PermissionDeniedError: The client id is another user's.
        """
        if principal.is_super:
            return
        client_id: object = ""
        dialect = self.dialect(method)
        if dialect is not None:
            client_id = dialect.client_id(context, request)
        elif request is not None:
            client_id = getattr(request, "client_id", "")
        if isinstance(client_id, str) and client_id:
            self.client_owners.claim(client_id, principal.access_key)

    def refreshed(self, principal: Principal) -> Principal:
        """`principal` as its user is now: a stream's user may have been disabled, deleted
        or changed type since the stream opened.

        Raises:
            PermissionDeniedError: The user is gone or disabled.
        """
        authenticator = self.authenticator
        if authenticator is None or not principal.access_key:
            return principal
        user = authenticator.user(principal.access_key)
        if user is None or not user.enabled:
            state = "deleted" if user is None else "disabled"
            raise PermissionDeniedError(
                f"user {principal.access_key!r} is {state}: this stream's further requests "
                "are refused"
            )
        if user.user_type is principal.user_type:
            return principal
        return Principal(principal.access_key, user.user_type, principal.source)

    def check_request(self, method: str, principal: Principal, request: Message) -> None:
        """Authorize one request message of a stream, as its user is now.

        Raises:
            RefusedRequestError: Carrying why (the servicer answers this request with it).
        """
        try:
            self.authorize(method, self.refreshed(principal), request)
        except PopMQError as exc:
            _refused(method, exc, principal.source, request)
            raise RefusedRequestError(request, exc) from None

    # -- handlers ---------------------------------------------------------------------------

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """`handler` with the gate in front (the same handler for open methods)."""
        if method.startswith(OPEN_PREFIXES):
            return handler
        dialect = self.dialect(method)
        answers = STATUS_ANSWERS if dialect is None else dialect.answers(method)
        options = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            behavior = handler.unary_unary
            if inspect.iscoroutinefunction(behavior):
                return grpc.unary_unary_rpc_method_handler(
                    self._unary_unary(method, behavior, answers), **options
                )
        elif handler.unary_stream is not None:
            behavior = handler.unary_stream
            gated = self._unary_stream(method, behavior, answers)
            if gated is not None:
                return grpc.unary_stream_rpc_method_handler(gated, **options)
        elif handler.stream_stream is not None:
            behavior = handler.stream_stream
            gated = self._stream_request(method, behavior, answers, unary_response=False)
            if gated is not None:
                return grpc.stream_stream_rpc_method_handler(gated, **options)
        elif handler.stream_unary is not None:
            behavior = handler.stream_unary
            gated = self._stream_request(method, behavior, answers, unary_response=True)
            if gated is not None:
                return grpc.stream_unary_rpc_method_handler(gated, **options)
        # A synchronous behavior (the server has none): refused rather than let through.
        log.error("%s has a handler the security gate cannot wrap: its calls are refused", method)
        return _UNGATEABLE

    def _unary_unary(self, method: str, behavior: Behavior, answers: Answers) -> Behavior:
        async def gated(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                self.admit(method, request, context)
            except PopMQError as exc:
                _refused(method, exc, context.peer(), request)
                return await answers.answer(context, exc)
            return await behavior(request, context)

        return gated

    def _unary_stream(self, method: str, behavior: Behavior, answers: Answers) -> Any:
        if inspect.isasyncgenfunction(behavior):

            async def generator(request: Any, context: grpc.aio.ServicerContext) -> Any:
                try:
                    self.admit(method, request, context)
                except PopMQError as exc:
                    _refused(method, exc, context.peer(), request)
                    yield await answers.answer(context, exc)
                    return
                async for response in behavior(request, context):
                    yield response

            return generator
        if inspect.iscoroutinefunction(behavior):

            async def coroutine(request: Any, context: grpc.aio.ServicerContext) -> Any:
                try:
                    self.admit(method, request, context)
                except PopMQError as exc:
                    _refused(method, exc, context.peer(), request)
                    await context.write(await answers.answer(context, exc))
                    return None
                return await behavior(request, context)

            return coroutine
        return None

    def _stream_request(
        self, method: str, behavior: Behavior, answers: Answers, *, unary_response: bool
    ) -> Any:
        """A stream-request behavior: headers checked at open, each message when read."""

        def opened(
            request_iterator: Any, context: grpc.aio.ServicerContext
        ) -> tuple[Any, Any] | PopMQError:
            try:
                principal = self.authenticate(context)
                self.claim_client(method, principal, context)
            except PopMQError as exc:
                _refused(method, exc, context.peer())
                return exc
            check = functools.partial(self.check_request, method, principal)
            return _checked_iterator(request_iterator, check), _CheckedReads(context, check)

        if inspect.isasyncgenfunction(behavior):

            async def generator(request_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
                checked = opened(request_iterator, context)
                if isinstance(checked, PopMQError):
                    if await read_first_request(context, STREAM_REFUSAL_READ_S):
                        yield await answers.answer(context, checked)
                    return
                try:
                    async for response in behavior(*checked):
                        yield response
                except RefusedRequestError as exc:
                    yield await answers.answer(context, exc.error)

            return generator
        if inspect.iscoroutinefunction(behavior):

            async def coroutine(request_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
                checked = opened(request_iterator, context)
                try:
                    if not isinstance(checked, PopMQError):
                        return await behavior(*checked)
                    if not await read_first_request(context, STREAM_REFUSAL_READ_S):
                        return None  # the client went away: nobody to answer
                    refusal = await answers.answer(context, checked)
                except RefusedRequestError as exc:
                    refusal = await answers.answer(context, exc.error)
                if unary_response:
                    return refusal
                try:
                    await context.write(refusal)
                except WRITE_FAILED:
                    await after_failed_write(method)
                return None

            return coroutine
        return None


def _refused(method: str, error: PopMQError, peer: str, request: Message | None = None) -> None:
    """Count and log a refusal (audit.denied: the denied-request metric, a rate-limited
    warning, and the audit line of a refused admin mutation). Other errors of the
    authorizer's (a request it cannot map) are answered the same way but not counted."""
    if error.code in audit.DENIED_CODES:
        fields = (
            audit.request_fields(request)
            if request is not None and method in audit.AUDITED_METHODS
            else None
        )
        audit.denied(method, error.code, peer=peer, detail=str(error), request=fields)
    else:
        log.debug("%s from %s refused: %s", method, peer, error)


class StatusAnswers:
    """popmq.v1 and every call of no dialect: the gRPC status of the error's code, with its
    message."""

    async def answer(self, context: grpc.aio.ServicerContext, error: PopMQError) -> NoReturn:
        await context.abort(status_code(error), str(error))
        raise error  # abort raises; never reached


STATUS_ANSWERS = StatusAnswers()


async def _checked_iterator(
    requests: Any, check: Callable[[Message], None]
) -> AsyncIterator[Message]:
    async for request in requests:
        check(request)
        yield request


class _CheckedReads:
    """A servicer context whose `read()` authorizes each request message; every other
    attribute is the call's own context's."""

    __slots__ = ("_check", "_context")

    def __init__(self, context: grpc.aio.ServicerContext, check: Callable[[Message], None]) -> None:
        self._context = context
        self._check = check

    async def read(self) -> Any:
        request = await self._context.read()
        if request is not grpc.aio.EOF:
            self._check(request)
        return request

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


async def _ungateable(request_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
    await context.abort(
        grpc.StatusCode.INTERNAL, "this method cannot be authenticated; see the server log"
    )
    yield b""  # never reached: abort raises; makes this an async generator


_UNGATEABLE = grpc.stream_stream_rpc_method_handler(_ungateable)


class GateInterceptor(grpc.aio.ServerInterceptor):
    """Puts the gate in front of every method's handler but health's and reflection's.

    Installed after RpcInterceptor (which times and logs the gated call, refusals
    included). Each method's gated handler is built on its first call and reused while the
    lookup returns the same (or an equal) handler, as RpcInterceptor does, so that one's
    cache of observed handlers keeps hitting.
    """

    def __init__(self, gate: Gate) -> None:
        self._gate = gate
        # "/pkg.Service/Method" -> (the handler resolved for it, its gated handler).
        # Touched on the event loop only; at most _MAX_CACHED_METHODS entries.
        self._gated: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or method.startswith(OPEN_PREFIXES):
            return handler
        cached = self._gated.get(method)
        if cached is not None and (cached[0] is handler or cached[0] == handler):
            return cached[1]
        gated = self._gate.wrap(method, handler)
        if cached is not None or len(self._gated) < _MAX_CACHED_METHODS:
            self._gated[method] = (handler, gated)
        return gated


__all__ = [
    "OPEN_PREFIXES",
    "STATUS_ANSWERS",
    "AllowAll",
    "Answers",
    "Authorizer",
    "Dialect",
    "Gate",
    "GateInterceptor",
    "StaticDirectory",
    "StatusAnswers",
    "UserDirectory",
]
