"""What the console does, done as its user through the gRPC admin path.

The console has no admin logic of its own. Each action builds the popmq.v1 request the
`popmq admin` CLI or grpcurl would send and runs it through what a gRPC call of that
method meets on the server:

1. the user as it is now (`Gate.refreshed`: a deleted or disabled user is refused, and
   the console ends its session);
2. access control (`Gate.authorize` with the method's full name: the same rpc_table
   checks and ACL evaluation as the gRPC gate interceptor); a refusal is counted, logged
   and, for a mutation, audited (`audit.denied`), as the interceptor does;
3. the AdminService servicer's own method (proxy/admin.py), with the user as the current
   principal, so its `audited` decorator writes the same audit line a gRPC call writes
   (`source` is the browser's address).

A read whose answer a page would only shrink again (ListTopics over 10,000 topics: the
servicer converts every topic to a message, ~150 ms) takes steps 1 and 2 (`authorize`)
and reads the same `BrokerAPI` method the servicer reads.

The servicer is handed in by the server that starts the console (the console imports no
proxy module: the proxy imports the console). `ConsoleCall` stands in for the grpc.aio
context those methods read: the peer, and `abort`, which raises `ActionRefused` with the
status the gRPC call would have ended with.

Runs on the event loop, as the gRPC calls do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.message import Message

from popmq.broker_core import PermissionDeniedError, PopMQError
from popmq.security import audit
from popmq.security.gate import Gate
from popmq.security.model import Principal, set_principal

ADMIN_SERVICE = "/popmq.v1.AdminService/"
MESSAGING_SERVICE = "/popmq.v1.MessagingService/"

HTTP_STATUS = {
    "INVALID_ARGUMENT": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "FAILED_PRECONDITION": 409,
    "ABORTED": 409,
    "RESOURCE_EXHAUSTED": 429,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
"""The HTTP status of a page whose action ended with a gRPC status code (500 otherwise)."""

_Response = TypeVar("_Response", bound=Message)
_T = TypeVar("_T")


class ActionRefused(Exception):
    """An action the server refused or failed: the gRPC status it would have ended with.

    Attributes:
        code: The status code's name ("PERMISSION_DENIED", "NOT_FOUND", ...).
        message: What the gRPC caller would read (safe to show: names, never secrets).
        user_gone: The user was deleted or disabled: the session must end.
    """

    def __init__(self, code: str, message: str, *, user_gone: bool = False) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.user_gone = user_gone

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code, 500)


class ConsoleCall:
    """The grpc.aio ServicerContext a servicer method reads, for one console action."""

    def __init__(self, peer: str) -> None:
        self._peer = peer
        self._code: grpc.StatusCode | None = None
        self._details = ""

    def peer(self) -> str:
        return self._peer

    def invocation_metadata(self) -> Sequence[tuple[str, str]]:
        return ()

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str:
        return self._details

    async def abort(self, code: grpc.StatusCode, details: str = "", *_: object) -> NoReturn:
        self._code, self._details = code, details
        raise ActionRefused(code.name, details)


Method = Callable[[Any, Any], Awaitable[Any]]


class AdminActions:
    """Runs AdminService methods as a console user (see the module docstring).

    Args:
        admin: The server's AdminService servicer (proxy/admin.py `AdminServicer`).
        gate: The server's gate: its authenticator (users) and authorizer (policies).
    """

    def __init__(self, admin: object, gate: Gate) -> None:
        self._admin = admin
        self.gate = gate

    def current(self, principal: Principal) -> Principal:
        """`principal` as its user is now.

        Raises:
            ActionRefused: The user was deleted or disabled (`user_gone`).
        """
        try:
            return self.gate.refreshed(principal)
        except PermissionDeniedError as exc:
            raise ActionRefused(exc.code, str(exc), user_gone=True) from None

    def allowed(
        self, principal: Principal, method: str, request: Message, *, service: str = ADMIN_SERVICE
    ) -> bool:
        """Whether `principal` may call `method` of `service` with `request` (to offer the
        button); no audit line, no count: nothing was asked yet."""
        try:
            self.gate.authorize(service + method, principal, request)
        except PopMQError:
            return False
        return True

    def authorize(
        self, principal: Principal, method: str, request: Message, *, service: str = ADMIN_SERVICE
    ) -> Principal:
        """`principal` as it is now, once access control lets it call `method` of `service`
        (AdminService unless said) with `request`; a refusal is counted, logged and (a
        mutation's) audited, as the gRPC gate does. It becomes the current principal of
        this request's task.

        Raises:
            ActionRefused: The user is gone, or access control refuses.
        """
        full = service + method
        principal = self.current(principal)
        # This request's task only: the console's handlers run one request a task.
        set_principal(principal)
        try:
            self.gate.authorize(full, principal, request)
        except PopMQError as exc:
            if exc.code in audit.DENIED_CODES:
                fields = audit.request_fields(request) if full in audit.AUDITED_METHODS else None
                audit.denied(full, exc.code, peer=principal.source, detail=str(exc), request=fields)
            raise ActionRefused(exc.code, str(exc)) from None
        return principal

    async def call(
        self, principal: Principal, method: str, request: Message, *, response: type[_Response]
    ) -> _Response:
        """The answer of AdminService `method` to `request`, asked as `principal`.

        Raises:
            ActionRefused: Refused (access control, a gone user) or failed (the status
                the gRPC call would have ended with).
        """
        principal = self.authorize(principal, method, request)
        handler: Method = getattr(self._admin, method)
        answer = await handler(request, ConsoleCall(principal.source))
        if not isinstance(answer, response):
            raise TypeError(f"{method} answered {type(answer).__name__}, not {response.__name__}")
        return answer


async def broker_read(work: Awaitable[_T]) -> _T:
    """`work` (a BrokerAPI call whose access was checked), with a broker error turned into
    the ActionRefused its gRPC call would have ended with."""
    try:
        return await work
    except PopMQError as exc:
        raise ActionRefused(exc.code, str(exc)) from None
