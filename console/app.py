"""The console's ASGI application: pages, forms, the live stream (Starlette + Jinja2).

Pages are rendered on the server (templates/); the browser runs only the vendored htmx and
uPlot and the console's own static/console.js: no inline script, no Node build.

Who a request is (`Console.visitor`):
- authentication off: an anonymous SUPER session, made at the first visit (it carries
  the CSRF token); the page says the console is open;
- authentication on: the session of the cookie, or the login form. A login checks the
  access key and secret key against the same users as the gRPC API (root and the
  security store, through the gate's Authenticator) and keeps nothing of the secret.

Rules every request meets (docs/console.md, "Security"):
- a state change only on POST, which needs the session's CSRF token (form field `csrf`
  or header `X-CSRF-Token`) and an `Origin` (else `Referer`) of this console;
- with authentication off (so on loopback, protected mode) the `Host` must be a loopback
  name: a page of another site whose name was made to resolve to 127.0.0.1 (DNS
  rebinding) gets 421;
- every answer carries the CSP `default-src 'self'; frame-ancestors 'none'` and friends;
- every action runs through `AdminActions`: the user as it is now (a deleted or disabled
  user's session ends here), access control, the admin servicer and its audit line.

Runs on the server's event loop (uvicorn in the same loop as grpc.aio, server.py).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from google.protobuf.message import Message
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.types import Message as ASGIMessage

from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from popmq.broker_core import KIND_DLQ, BrokerAPI, TopicInfo
from popmq.console import forms
from popmq.console.actions import MESSAGING_SERVICE, ActionRefused, AdminActions
from popmq.console.groups import GroupPages
from popmq.console.history import History
from popmq.console.messages import MessagePages
from popmq.console.sessions import COOKIE, SECURE_COOKIE, LoginLimiter, Session, SessionStore
from popmq.console.topic_changes import TopicChangePages
from popmq.console.transactions import TransactionPages
from popmq.console.users import UserPages
from popmq.security import audit
from popmq.security.model import Action, Decision, Principal, ResourceType, UserType
from popmq.security.protected import is_loopback
from popmq.security.store import SecurityStore

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
CSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
"""The content security policy of every answer: scripts, styles and connections from the
console's own origin only (no inline script), never framed."""
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
)
PAGE_SIZE = 50
"""Topics on one page of the list."""
LOGIN_METHOD = "/popmq.console/Login"
"""The `method` of a refused console login in popmq_requests_denied_total and the log."""
_SAFE_METHODS = frozenset({"GET", "HEAD"})
_MAX_QUERY = 200
"""Characters of a search kept."""


class SecurityHeaders:
    """ASGI middleware: SECURITY_HEADERS on every answer, and `Cache-Control: no-store` on
    all but static files (pages carry CSRF tokens and names)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def send_with_headers(message: ASGIMessage) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.extend(SECURITY_HEADERS)
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


@dataclass(frozen=True, slots=True)
class Visitor:
    """Who a request is: its session and principal (None: must log in)."""

    session: Session
    principal: Principal


def _peer(request: Request) -> str:
    """The browser's address as audit lines show gRPC peers ("ipv4:127.0.0.1:5555")."""
    client = request.client
    if client is None:
        return ""
    host = client.host
    return f"ipv6:[{host}]:{client.port}" if ":" in host else f"ipv4:{host}:{client.port}"


def _ip(request: Request) -> str:
    return request.client.host if request.client is not None else ""


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


class Console:
    """The console's pages over one server (see the module docstring).

    Args:
        actions: Runs admin methods as the visitor (the server's admin servicer and gate).
        broker: The server's BrokerAPI, for reads whose access `actions` checked.
        history: The overview's samples (history.py).
        security_store: The stored users' policies, to offer only permitted buttons; None
            when the server has none.
        serving: Why the server is not serving (its health's failure), or None when it is.
        tls: Whether the console serves HTTPS (cookies then carry Secure).
        idle_s, max_s: How long a login lasts (`[console]`).
    """

    def __init__(
        self,
        actions: AdminActions,
        broker: BrokerAPI,
        history: History,
        *,
        security_store: SecurityStore | None = None,
        serving: Callable[[], str | None] = lambda: None,
        tls: bool = False,
        idle_s: float = 1800.0,
        max_s: float = 43200.0,
    ) -> None:
        self.actions = actions
        self.broker = broker
        self.history = history
        self._store = security_store
        self._serving = serving
        self.tls = tls
        self.sessions = SessionStore(idle_s=idle_s, max_s=max_s)
        self.limiter = LoginLimiter()
        self.closing = asyncio.Event()
        """Set when the server stops: live streams end."""
        self._templates = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            enable_async=False,
        )
        self.app = self._application()

    @property
    def authentication(self) -> bool:
        return self.actions.gate.enabled

    @property
    def cookie(self) -> str:
        return SECURE_COOKIE if self.tls else COOKIE

    def _application(self) -> ASGIApp:
        routes = [
            Route("/", self.overview),
            Route("/login", self.login_page, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/events", self.events),
            Route("/topics", self.topics, methods=["GET"]),
            Route("/topics", self.create_topic, methods=["POST"]),
            Route("/topics/view", self.topic_page, methods=["GET"]),
            Route("/topics/delete", self.delete_topic_page, methods=["GET"]),
            Route("/topics/delete", self.delete_topic, methods=["POST"]),
            *GroupPages(self).routes(),
            *MessagePages(self).routes(),
            *TransactionPages(self).routes(),
            *TopicChangePages(self).routes(),
            *UserPages(self).routes(),
            Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
        ]
        app = Starlette(routes=routes)
        app.add_exception_handler(ActionRefused, self._refused)  # type: ignore[arg-type]
        return SecurityHeaders(self._guard(app))

    # -- what every request meets ---------------------------------------------------------

    def _guard(self, app: ASGIApp) -> ASGIApp:
        """The Host and Origin rules of the module docstring, before any route (the CSRF
        token is checked by each POST handler, which reads the form)."""

        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            request = Request(scope)
            refusal = self._host_refusal(request) or self._origin_refusal(request)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
            await app(scope, receive, send)

        return guarded

    def _host_refusal(self, request: Request) -> Response | None:
        if self.authentication:
            return None
        host = request.url.hostname or ""
        if is_loopback(host):
            return None
        return self._plain(
            421,
            f"this console serves loopback names only while authentication is off; {host!r} "
            "is not one (open it as http://127.0.0.1:PORT)",
        )

    def _origin_refusal(self, request: Request) -> Response | None:
        if request.method in _SAFE_METHODS:
            return None
        origin = request.headers.get("origin") or request.headers.get("referer") or ""
        parts = urlsplit(origin)
        own = f"{request.url.scheme}://{request.url.netloc}"
        if origin and f"{parts.scheme}://{parts.netloc}" == own:
            return None
        return self._plain(
            403, "refused: the request did not come from this console's own pages (Origin)"
        )

    def _plain(self, status: int, text: str) -> Response:
        return HTMLResponse(
            self._render("message.html", None, title="Refused", message=text), status_code=status
        )

    async def check_csrf(self, request: Request, visitor: Visitor) -> FormData:
        """The request's form, once its CSRF token is this session's.

        Raises:
            ActionRefused: PERMISSION_DENIED without the right token.
        """
        form = await request.form()
        token = request.headers.get("x-csrf-token") or str(form.get("csrf") or "")
        if not token or not _same(token, visitor.session.csrf):
            raise ActionRefused(
                "PERMISSION_DENIED",
                "the form's CSRF token is missing or stale: reload the page and try again",
            )
        return form

    def visitor(self, request: Request) -> Visitor | None:
        """The request's session and principal, or None when it must log in. An
        anonymous session is made when authentication is off (see `_session_cookie`)."""
        session = self.sessions.get(request.cookies.get(self.cookie, ""))
        if session is None:
            if self.authentication:
                return None
            session = self.sessions.create("", UserType.SUPER, _peer(request))
        principal = Principal(session.access_key, session.user_type, _peer(request))
        if self.authentication:
            try:
                principal = self.actions.current(principal)
            except ActionRefused:
                ended = self.sessions.end_user(session.access_key)
                log.info(
                    "console sessions of user %r ended (%d): the user was deleted or disabled",
                    session.access_key,
                    ended,
                )
                return None
            session.user_type = principal.user_type
        return Visitor(session, principal)

    def _session_cookie(self, response: Response, session: Session) -> Response:
        response.set_cookie(
            self.cookie,
            session.id,
            path="/",
            secure=self.tls,
            httponly=True,
            samesite="strict",
        )
        return response

    def to_login(self, request: Request, message: str = "") -> Response:
        if request.headers.get("hx-request"):
            response: Response = Response(status_code=204, headers={"HX-Redirect": "/login"})
        elif request.method in _SAFE_METHODS and not message:
            response = RedirectResponse("/login", status_code=303)
        else:
            response = self._login_form(request, message, status=401)
        response.delete_cookie(self.cookie, path="/", secure=self.tls, httponly=True)
        return response

    def _render(self, template: str, visitor: Visitor | None, **values: Any) -> str:
        return self._templates.get_template(template).render(
            visitor=visitor,
            authentication=self.authentication,
            csrf=visitor.session.csrf if visitor is not None else "",
            **values,
        )

    def page(
        self, request: Request, visitor: Visitor, template: str, status: int = 200, **values: Any
    ) -> Response:
        response = HTMLResponse(self._render(template, visitor, **values), status_code=status)
        if request.cookies.get(self.cookie) != visitor.session.id:
            self._session_cookie(response, visitor.session)
        return response

    async def _refused(self, request: Request, exc: ActionRefused) -> Response:
        if exc.user_gone:
            return self.to_login(request, "your user was deleted or disabled: log in again")
        visitor = self.visitor(request)
        if visitor is None:
            return self.to_login(request)
        return self.page(
            request,
            visitor,
            "message.html",
            status=exc.http_status,
            title="Refused" if exc.http_status in (401, 403) else "Failed",
            message=f"{exc.code}: {exc.message}",
        )

    # -- login ------------------------------------------------------------------------------

    def _login_form(self, request: Request, message: str = "", *, status: int = 200) -> Response:
        return HTMLResponse(self._render("login.html", None, message=message), status_code=status)

    async def login_page(self, request: Request) -> Response:
        if not self.authentication:
            return RedirectResponse("/", status_code=303)
        return self._login_form(request)

    async def login(self, request: Request) -> Response:
        if not self.authentication:
            return RedirectResponse("/", status_code=303)
        form = await request.form()
        access_key = str(form.get("access_key") or "")[:256]
        secret_key = str(form.get("secret_key") or "")
        ip = _ip(request)
        wait = self.limiter.retry_after(ip, access_key)
        if wait > 0:
            response = self._login_form(
                request,
                f"too many failed logins: try again in {math.ceil(wait)} s",
                status=429,
            )
            response.headers["retry-after"] = str(math.ceil(wait))
            return response
        authenticator = self.actions.gate.authenticator
        user = authenticator.user(access_key) if authenticator is not None and access_key else None
        if user is None or not user.enabled or not _same(secret_key, user.secret_key):
            self.limiter.failed(ip, access_key)
            # Why, for the operator's log; the browser learns only that the pair is wrong.
            why = "unknown" if user is None else "disabled" if not user.enabled else "wrong secret"
            audit.denied(
                LOGIN_METHOD,
                "UNAUTHENTICATED",
                peer=_peer(request),
                detail=f"console login of access key {access_key[:64]!r}: {why}",
            )
            return self._login_form(
                request, "the access key and secret key do not match an enabled user", status=401
            )
        session = self.sessions.create(user.access_key, user.user_type, _peer(request))
        log.info("console login of user %r from %s", user.access_key, _peer(request))
        return self._session_cookie(RedirectResponse("/", status_code=303), session)

    async def logout(self, request: Request) -> Response:
        visitor = self.visitor(request)
        if visitor is not None:
            await self.check_csrf(request, visitor)
            self.sessions.end(visitor.session.id)
        if not self.authentication:
            return RedirectResponse("/", status_code=303)
        return self.to_login(request)

    # -- overview ---------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        visitor = self.visitor(request)
        if visitor is None:
            return self.to_login(request)
        status: admin_pb2.GetClusterStatusResponse | None = None
        refusal = ""
        try:
            status = await self.actions.call(
                visitor.principal,
                "GetClusterStatus",
                admin_pb2.GetClusterStatusRequest(),
                response=admin_pb2.GetClusterStatusResponse,
            )
        except ActionRefused as exc:
            if exc.user_gone:
                raise
            refusal = exc.message
        return self.page(
            request,
            visitor,
            "overview.html",
            status_report=status,
            refusal=refusal,
            failure=self._serving(),
            local=status is not None and status.mode == admin_pb2.CLUSTER_MODE_LOCAL,
            interval_s=self.history.interval_s,
        )

    async def events(self, request: Request) -> Response:
        """Server-sent events: the history so far, then each new point (JSON), until the
        visitor leaves, logs out, loses its user, or the server stops."""
        visitor = self.visitor(request)
        if visitor is None:
            return Response("log in first", status_code=401, media_type="text/plain")
        self._allow_overview(visitor)
        return StreamingResponse(
            self._stream(request, visitor),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    def _allow_overview(self, visitor: Visitor) -> None:
        """The live numbers are the cluster's: GetClusterStatus's check (CLUSTER GET)."""
        if not self.actions.allowed(
            visitor.principal, "GetClusterStatus", admin_pb2.GetClusterStatusRequest()
        ):
            raise ActionRefused(
                "PERMISSION_DENIED",
                f"user {visitor.principal.access_key!r} may not GET the cluster: the live "
                "numbers are the whole server's",
            )

    async def _stream(self, request: Request, visitor: Visitor) -> AsyncIterator[str]:
        points = self.history.points()
        last = points[-1].t if points else -math.inf
        yield "retry: 3000\n\n"
        yield _event("history", {"points": [p.as_json() for p in points]})
        while not self.closing.is_set():
            changed = asyncio.ensure_future(self.history.changed())
            closing = asyncio.ensure_future(self.closing.wait())
            try:
                await asyncio.wait(
                    (changed, closing),
                    timeout=15.0,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                changed.cancel()
                closing.cancel()
            if self.closing.is_set() or await request.is_disconnected():
                return
            # The session and the user are checked again at each tick.
            if self.sessions.get(visitor.session.id) is None:
                yield _event("ended", {"reason": "logged out"})
                return
            try:
                self.actions.current(visitor.principal)
            except ActionRefused:
                self.sessions.end_user(visitor.session.access_key)
                yield _event("ended", {"reason": "the user was deleted or disabled"})
                return
            fresh = self.history.points(after=last)
            if not fresh:
                yield ": keepalive\n\n"
                continue
            last = fresh[-1].t
            for point in fresh:
                yield _event("point", point.as_json())

    # -- topics -----------------------------------------------------------------------------

    async def topics(self, request: Request) -> Response:
        visitor = self.visitor(request)
        if visitor is None:
            return self.to_login(request)
        query = forms.text(request.query_params, "q")
        page = forms.page_number(request.query_params)
        # ListTopics's access check, then the BrokerAPI read its servicer makes (actions.py).
        self.actions.authorize(visitor.principal, "ListTopics", admin_pb2.ListTopicsRequest())
        listing = await self.broker.list_topics()
        found = search_topics(listing, query)
        pages = max(1, math.ceil(len(found) / PAGE_SIZE))
        forms.check_page(page, pages)
        rows = [TopicRow.of(t) for t in found[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]]
        deletable = {
            t.name
            for t in rows
            if self.actions.allowed(
                visitor.principal, "DeleteTopic", admin_pb2.DeleteTopicRequest(name=t.name)
            )
        }
        values: dict[str, Any] = {
            "rows": rows,
            "query": query,
            "page": page,
            "pages": pages,
            "total": len(found),
            "all": len(listing),
            "deletable": deletable,
            "can_create": self.may(visitor.principal, Action.CREATE, ResourceType.TOPIC),
            "message_types": MESSAGE_TYPES,
            "notice": request.query_params.get("done", "")[:_MAX_QUERY],
        }
        template = "topics_table.html" if request.headers.get("hx-request") else "topics.html"
        return self.page(request, visitor, template, **values)

    def may(self, principal: Principal, action: Action, kind: ResourceType) -> bool:
        """Whether some policy of `principal` allows `action` on some resource of `kind`
        (to offer a button whose resource is not named yet; the action is checked again
        when asked)."""
        if principal.is_super:
            return True
        record = self._store.record(principal.access_key) if self._store is not None else None
        if record is None:
            return False
        return any(
            policy.decision is Decision.ALLOW
            and policy.resource_type in (kind, ResourceType.ANY)
            and (action in policy.actions or Action.ALL in policy.actions)
            for policy in record.policies
        )

    async def create_topic(self, request: Request) -> Response:
        visitor = self.visitor(request)
        if visitor is None:
            return self.to_login(request)
        form = await self.check_csrf(request, visitor)
        name = str(form.get("name") or "").strip()
        message_type = str(form.get("message_type") or "MESSAGE_TYPE_NORMAL")
        if message_type not in MESSAGE_TYPES:
            raise ActionRefused("INVALID_ARGUMENT", f"message type {message_type!r} is unknown")
        create = admin_pb2.CreateTopicRequest(name=name, message_type=message_type)
        queues = str(form.get("queues") or "").strip()
        if queues:
            try:
                create.queues = int(queues)
            except ValueError:
                raise ActionRefused(
                    "INVALID_ARGUMENT", f"queues {queues[:20]!r} is not a whole number"
                ) from None
        await self.actions.call(
            visitor.principal, "CreateTopic", create, response=admin_pb2.CreateTopicResponse
        )
        return _after(request, f"created topic {name}", name)

    async def topic_page(self, request: Request) -> Response:
        """One topic: its queues (per broker in cluster mode) with their offsets and newest
        store time, and the groups that consume it (GetTopic, as `popmq topic describe`)."""
        visitor = self.visitor(request)
        if visitor is None:
            return self.to_login(request)
        name = request.query_params.get("name", "")[:_MAX_QUERY]
        described = await self.actions.call(
            visitor.principal,
            "GetTopic",
            admin_pb2.GetTopicRequest(name=name),
            response=admin_pb2.GetTopicResponse,
        )
        queues = [
            QueueRow(
                q.queue_id,
                q.broker,
                q.min_offset,
                q.max_offset,
                q.message_count,
                q.last_store_time.ToDatetime(tzinfo=UTC).strftime("%Y-%m-%d %H:%M:%S")
                if q.HasField("last_store_time")
                else "",
            )
            for q in described.queues
        ]
        return self.page(
            request,
            visitor,
            "topic.html",
            topic=described.topic,
            message_type=admin_pb2.MessageType.Name(described.topic.message_type)
            .removeprefix("MESSAGE_TYPE_")
            .lower(),
            queues=queues,
            groups=list(described.consumer_groups),
            total=sum(q.messages for q in queues),
            can_delete=self.actions.allowed(
                visitor.principal, "DeleteTopic", admin_pb2.DeleteTopicRequest(name=name)
            ),
            can_update=self.actions.allowed(
                visitor.principal, "UpdateTopic", admin_pb2.UpdateTopicRequest(name=name)
            ),
            can_purge=self.actions.allowed(
                visitor.principal, "PurgeTopic", admin_pb2.PurgeTopicRequest(name=name)
            ),
            notice=forms.text(request.query_params, "done"),
            can_browse=self.actions.allowed(
                visitor.principal, "PeekMessages", admin_pb2.PeekMessagesRequest(topic=name)
            ),
            can_send=self.actions.allowed(
                visitor.principal,
                "SendMessages",
                messaging_pb2.SendMessagesRequest(
                    messages=[messaging_pb2.OutgoingMessage(topic=name)]
                ),
                service=MESSAGING_SERVICE,
            ),
            fifo=described.topic.message_type
            in (admin_pb2.MESSAGE_TYPE_FIFO, admin_pb2.MESSAGE_TYPE_MIXED),
        )

    async def delete_topic_page(self, request: Request) -> Response:
        visitor = self.visitor(request)
        if visitor is None:
            return self.to_login(request)
        name = request.query_params.get("name", "")[:_MAX_QUERY]
        return self.page(request, visitor, "topic_delete.html", name=name)

    async def delete_topic(self, request: Request) -> Response:
        visitor = self.visitor(request)
        if visitor is None:
            return self.to_login(request)
        form = await self.check_csrf(request, visitor)
        name = str(form.get("name") or "")
        if str(form.get("confirm") or "") != name or not name:
            return self.page(
                request,
                visitor,
                "topic_delete.html",
                status=400,
                name=name,
                message="type the topic's name exactly to delete it",
            )
        delete = admin_pb2.DeleteTopicRequest(name=name, force=form.get("force") == "on")
        await self.actions.call(
            visitor.principal, "DeleteTopic", delete, response=admin_pb2.DeleteTopicResponse
        )
        return _after(request, f"deleted topic {name}", "")


@dataclass(frozen=True, slots=True)
class TopicRow:
    """One row of the topics list."""

    name: str
    queues: int
    message_type: str
    """"normal", "fifo", "delay", "transaction", "mixed"."""
    dead_letters: bool

    @classmethod
    def of(cls, topic: TopicInfo) -> TopicRow:
        return cls(topic.name, topic.queues, topic.message_type_name, topic.kind == KIND_DLQ)


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One queue on a topic's page."""

    queue_id: int
    broker: str
    """"" from `popmq serve`; the holding broker in cluster mode."""
    min_offset: int
    max_offset: int
    messages: int
    last_stored: str
    """When the newest message was stored (UTC), "" for an empty queue."""


MESSAGE_TYPES = (
    "MESSAGE_TYPE_NORMAL",
    "MESSAGE_TYPE_FIFO",
    "MESSAGE_TYPE_DELAY",
    "MESSAGE_TYPE_TRANSACTION",
    "MESSAGE_TYPE_MIXED",
)
"""What the create form offers (popmq.v1 MessageType names)."""


def search_topics(topics: Sequence[TopicInfo], query: str) -> list[TopicInfo]:
    """`topics` whose name holds `query` (any case), sorted by name."""
    needle = query.casefold()
    found = [t for t in topics if needle in t.name.casefold()] if needle else list(topics)
    found.sort(key=lambda t: t.name)
    return found


def _after(request: Request, done: str, query: str) -> Response:
    """Back to the topics list after a change (POST, then GET: a reload repeats nothing)."""
    target = "/topics?" + urlencode({"done": done, "q": query})
    return RedirectResponse(target, status_code=303)


def _event(name: str, data: Mapping[str, object] | Message) -> str:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"
