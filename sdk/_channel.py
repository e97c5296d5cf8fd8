"""The gRPC channels behind each async client, failover between proxies, and the client base.

Endpoints. A client's ``endpoint`` is ``HOST:PORT`` (IPv6 as ``[::1]:8081``), several of them
comma-separated (``"10.0.0.1:8081,10.0.0.2:8081"``) or as a sequence of strings, or one gRPC
target (``unix:/path``, ``ipv4:A:P,B:P``, ``dns:///host:port``, ``xds:///...``). A gRPC target
is one endpoint: gRPC balances inside it, the SDK does not fail over within it. A sequence's
items may each be HOST:PORT or a gRPC target.

Failover. Any popmq proxy serves any request (handles name the broker that issued them), so a
client talks to one proxy at a time, the current endpoint, and moves on when it is gone:

- Before a call or a new stream, the current endpoint's channel must be connected; one that
  does not connect within ``CONNECT_TIMEOUT_S`` (refused, unreachable, silent) is passed
  over for the next one, round-robin. Nothing was sent to it, so this is safe for any
  request. An endpoint that failed rests (``ENDPOINT_BACKOFF``: 0.1 s doubling to 2 s,
  reset by an answer): while it rests the others are tried first. When no endpoint
  connects the request fails at once with ``UnavailableError`` naming each endpoint and why
  (each is tried at most once per request; gRPC paces reconnects to a dead one, 0.1 s
  growing to 2 s).
- A call that fails ``UNAVAILABLE`` (the proxy went away mid-call, or a live proxy refused
  it for now) or ``DEADLINE_EXCEEDED`` moves the client to the next endpoint, unless the
  proxy marked its answer ``popmq-outcome: unknown`` (a send that may have been stored: its
  repeat must reach the proxy that knows which broker has it, so the client stays); the endpoint
  rests unless it answered the refusal itself on a working connection. Whether the request
  is repeated is the caller's choice (``Connection.call(retry=...)``), because it may have
  been applied: reads, receives, acks, nacks, invisible-time changes, offset commits,
  heartbeats and lease calls are (idempotent, or a repeat is refused with a clear error);
  admin writes and recalls are not (their ``UnavailableError`` reaches the caller, who
  knows whether repeating is right); sends are retried by the producer's ``RetryPolicy``
  with the same message ids. A repeat waits ``RETRY_BACKOFF`` and goes to the next
  endpoint, at most once per other endpoint: a single-endpoint client never repeats here.
- Every other status (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, RESOURCE_EXHAUSTED,
  ...) is the request's: returned to the caller untouched, never repeated, never a reason
  to move.
- Streams (sdk/_stream_call.py) are opened on a connected endpoint and, when one breaks,
  mark their endpoint like a failed call; the next request opens a new stream on the
  endpoint the client moved to.

A client given a ``channel`` uses it as its only endpoint, as is: no connection check and
no failover (the channel's owner decides how it connects).

Event loops. A ``grpc.aio`` channel belongs to the event loop it was created on, so each
endpoint's channel is opened lazily inside the first call, on the loop that runs it. When
the running loop changes (the sync facades' loop thread is restarted in a forked child), a
new channel is opened; the old one belonged to a loop that no longer runs and is dropped,
not closed. Everything here runs on the client's event loop; nothing blocks.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

import grpc
import grpc.aio
from google.protobuf.message import Message as ProtoMessage

from popmq._gen.popmq.v1 import admin_pb2_grpc, messaging_pb2_grpc
from popmq.sdk._retry import RetryBackoff
from popmq.sdk.credentials import Credentials, Metadata
from popmq.sdk.errors import InvalidArgumentError, UnavailableError, error_from_rpc_error
from popmq.sdk.tls import TLS, ChannelSecurity, channel_security

__all__ = [
    "CHANNEL_OPTIONS",
    "CONNECT_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "ENDPOINT_BACKOFF",
    "MAX_MESSAGE_BYTES",
    "RETRY_BACKOFF",
    "AsyncClient",
    "Connection",
    "Endpoint",
    "Endpoints",
    "NoEndpointError",
    "Service",
    "check_endpoint",
    "parse_endpoints",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

Endpoints = str | Sequence[str]
"""What a client takes as ``endpoint``: a string (one or comma-separated HOST:PORT, or a
gRPC target) or a sequence of such single endpoints."""

# Bodies go up to 4 MiB and a batch or a pop of up to 32 messages must fit in one message.
MAX_MESSAGE_BYTES = 130 * 1024 * 1024
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # A dead proxy's channel retries in the background; gRPC's default backoff grows to
    # 120 s, which would keep a proxy that came back unused for minutes.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
    # Ping while calls are open, so a proxy that vanished without closing its connections
    # (host down, network cut) breaks them within 40 s instead of never. The server allows
    # pings every 10 s (proxy ConnectionConfig.min_client_ping_interval_s).
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
)
DEFAULT_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 3.0
"""How long a request waits for one endpoint's connection before trying the next."""
ENDPOINT_BACKOFF = RetryBackoff(initial_s=0.1, max_s=2.0)
"""How long an endpoint that failed is tried after the others, by consecutive failures."""
RETRY_BACKOFF = RetryBackoff(initial_s=0.05, max_s=1.0)
"""Pause before a request is repeated on the next endpoint, by failures so far."""

_PATH_SCHEMES = ("unix:", "unix-abstract:", "vsock:")
"""gRPC target schemes that name no TCP port (checked for a non-empty rest only)."""
_ADDRESS_LIST_SCHEMES = ("ipv4:", "ipv6:")
"""gRPC target schemes that take a comma-separated list of HOST:PORT addresses."""
_ALLOWED = (
    "use HOST:PORT (IPv6 as [::1]:8081), several comma-separated (10.0.0.1:8081,10.0.0.2:8081)"
    " to fail over between proxies, or one gRPC target such as unix:/path/popmq.sock or "
    "ipv4:10.0.0.1:8081,10.0.0.2:8081"
)
_OUTAGE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
"""Statuses that move a client to the next endpoint; every other one is the request's."""
_OUTCOME_UNKNOWN = ("popmq-outcome", "unknown")
"""Trailing metadata of a proxy's answer that a request may have been applied and that its
repeat belongs there (a send whose broker did not answer: the proxy sends its repeat to that
broker, whose dedup window answers it). The server's side is grpc_calls/errors.py."""
_HEALTH_CHECK = "/grpc.health.v1.Health/Check"
"""A call every popmq server answers; made only to learn why a channel did not connect."""


def _bad_endpoint(endpoint: object, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"endpoint {endpoint!r} {why}; {_ALLOWED}")


def _check_address(endpoint: object, address: str, *, port_required: bool = True) -> None:
    """One HOST:PORT; IPv6 hosts in brackets."""
    if address.startswith("["):
        host, bracket, rest = address[1:].partition("]")
        if not bracket or not host:
            raise _bad_endpoint(endpoint, f"has an unclosed or empty IPv6 bracket in {address!r}")
        if not rest and not port_required:
            return
        sep, port = rest[:1], rest[1:]
        if sep != ":":
            raise _bad_endpoint(endpoint, f"has no port after the IPv6 address in {address!r}")
    else:
        host, sep, port = address.rpartition(":")
        if not sep and not port_required and address:
            return
        if not sep or not host:
            raise _bad_endpoint(endpoint, f"has no HOST:PORT in {address!r}")
        if ":" in host:
            raise _bad_endpoint(endpoint, f"has an IPv6 host without brackets in {address!r}")
    # gRPC parses the port modulo 65536, so 99999 would silently reach port 34463.
    if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise _bad_endpoint(endpoint, f"has port {port!r}, not a number in 1..65535")


def _is_target(endpoint: str) -> bool:
    """Whether ``endpoint`` is a gRPC target with a scheme (one endpoint, commas included)."""
    return endpoint.startswith((*_PATH_SCHEMES, *_ADDRESS_LIST_SCHEMES, "dns:")) or (
        "://" in endpoint
    )


def _check_single(endpoint: str, name: object) -> None:
    """One endpoint: HOST:PORT (port 1..65535) or a known gRPC target form; errors name
    ``name`` (the whole list the endpoint is part of)."""
    if endpoint.startswith(_PATH_SCHEMES):
        if not endpoint.partition(":")[2]:
            raise _bad_endpoint(name, "names no path")
        return
    if endpoint.startswith(_ADDRESS_LIST_SCHEMES):
        for address in endpoint.partition(":")[2].split(","):
            _check_address(name, address)
        return
    if endpoint.startswith("dns:"):
        rest = endpoint[4:]
        if rest.startswith("//"):  # dns://AUTHORITY/HOST[:PORT]
            rest = rest[2:].partition("/")[2]
        _check_address(name, rest, port_required=False)  # gRPC's default port: 443
        return
    if "://" in endpoint:
        return  # another resolver's target (xds:///service): its own rules
    _check_address(name, endpoint)


def parse_endpoints(endpoint: Endpoints) -> tuple[str, ...]:
    """The endpoints a client fails over between, each checked, in the order given.

    A string with a gRPC scheme (``unix:``, ``ipv4:``, ``dns:``, ``xds://``...) is one
    endpoint; any other string is split at commas and each item must be HOST:PORT. A
    sequence's items are single endpoints (HOST:PORT or a gRPC target).

    Raises:
        InvalidArgumentError: An empty list or item, a repeated endpoint, or one that is not
            HOST:PORT (port 1..65535) nor a known gRPC target form.
    """
    if isinstance(endpoint, str):
        if not endpoint or endpoint != endpoint.strip():
            raise _bad_endpoint(endpoint, "is empty or has surrounding spaces")
        if _is_target(endpoint):
            _check_single(endpoint, endpoint)
            return (endpoint,)
        items = endpoint.split(",")
    elif isinstance(endpoint, Sequence) and all(isinstance(item, str) for item in endpoint):
        items = list(endpoint)
        if not items:
            raise _bad_endpoint(endpoint, "is an empty list")
    else:
        raise TypeError(
            f"endpoint must be a str or a sequence of str, got {type(endpoint).__name__}"
        )
    seen: dict[str, int] = {}
    for position, item in enumerate(items, start=1):
        if not item or item != item.strip():
            raise _bad_endpoint(
                endpoint, f"has an empty or space-padded item at position {position}"
            )
        if isinstance(endpoint, str) and _is_target(item):
            raise _bad_endpoint(
                endpoint,
                f"lists the gRPC target {item!r}; a comma-separated list takes HOST:PORT "
                "items only (give targets as a sequence of strings)",
            )
        if not isinstance(endpoint, str) and "," in item and not _is_target(item):
            raise _bad_endpoint(
                endpoint, f"has {item!r} at position {position}: one endpoint per item"
            )
        _check_single(item, endpoint)
        key = item.lower()
        if key in seen:
            raise _bad_endpoint(
                endpoint, f"names {item!r} twice (positions {seen[key]} and {position})"
            )
        seen[key] = position
    return tuple(items)


def check_pinnable(endpoint: str) -> str:
    """Refuse an endpoint that may reach more than one proxy process, for pinned lease
    tokens (every call on a token to one proxy); returns it unchanged.

    Allowed: one HOST:PORT, or a gRPC target of one address (``unix:``, ``ipv4:`` of one
    address). A list fails over, a ``dns:`` target may resolve to several addresses and an
    ``xds://``-like one balances between them. A plain HOST:PORT whose name resolves to
    several addresses, or a load balancer, cannot be told apart here: the docs say so.

    Raises:
        InvalidArgumentError: What it may reach, and what is allowed.
    """
    items = parse_endpoints(endpoint)
    if len(items) > 1:
        why = f"lists {len(items)} endpoints, which a client fails over between"
    elif items[0].startswith(_ADDRESS_LIST_SCHEMES) and "," in items[0]:
        why = "lists several addresses, which gRPC fails over between"
    elif items[0].startswith("dns:") or "://" in items[0]:
        why = "is a gRPC target that may resolve to several proxies"
    else:
        return endpoint
    raise InvalidArgumentError(
        f"endpoint {endpoint!r} {why}; a pinned lease token needs one proxy process: give "
        "HOST:PORT (or unix:PATH) of one proxy, not a load balancer nor a DNS name of "
        "several addresses"
    )


def check_endpoint(endpoint: str) -> str:
    """Refuse an endpoint gRPC would misread, before any channel exists; returns it unchanged.

    gRPC takes ``127.0.0.1:99999`` without complaint and connects to another port, so a
    typo must fail here with a message saying what is allowed. A comma-separated list of
    HOST:PORT is checked item by item (see `parse_endpoints`).

    Raises:
        InvalidArgumentError: Not HOST:PORT (port 1..65535), a list of them, nor a known
            gRPC target form.
    """
    parse_endpoints(endpoint)
    return endpoint


# The generated gRPC stubs have no type hints; calls through them are Any by nature and
# their results are annotated with the pb2 response types at each call site.
_MessagingStub: Any = messaging_pb2_grpc.MessagingServiceStub
_AdminStub: Any = admin_pb2_grpc.AdminServiceStub

Service = Literal["messaging", "admin"]


class NoEndpointError(UnavailableError):
    """No endpoint could be connected; each was tried once (an ``UnavailableError``)."""


class Endpoint:
    """One endpoint: its channel and stubs, opened on first use, and how it fared lately.

    Touched on the client's event loop only. ``security``: open the channel with TLS.
    """

    def __init__(
        self, address: str, channel: Any = None, security: ChannelSecurity | None = None
    ) -> None:
        self.address = address
        self.channel: Any = channel
        self.owned = channel is None
        self.security = security
        # The loop an owned channel was opened on; None until then.
        self.loop: asyncio.AbstractEventLoop | None = None
        self._messaging: Any = None
        self._admin: Any = None
        self.failures = 0
        """Consecutive failures; 0 once it answers."""
        self.resting_until = 0.0
        """Loop time until which the other endpoints are tried first."""
        self.last_error = ""

    def open(self) -> Any:
        """The channel, opened (or reopened after a loop change) on the running loop."""
        loop = asyncio.get_running_loop()
        if self.channel is None or (self.owned and self.loop is not loop):
            if self.channel is not None:
                logger.debug("event loop changed; reopening the channel to %s", self.address)
            if self.security is None:
                self.channel = grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS)
            else:
                self.channel = grpc.aio.secure_channel(
                    self.address,
                    self.security.credentials,
                    options=CHANNEL_OPTIONS + self.security.options,
                )
            self.loop = loop
            self._messaging = self._admin = None
        return self.channel

    def stub(self, service: Service) -> Any:
        """The service's stub on this endpoint's channel."""
        channel = self.open()
        if service == "messaging":
            if self._messaging is None:
                self._messaging = _MessagingStub(channel)
            return self._messaging
        if self._admin is None:
            self._admin = _AdminStub(channel)
        return self._admin

    def ready(self) -> bool:
        """Whether the channel is open on this loop and connected (not for borrowed ones)."""
        return (
            self.channel is not None
            and self.loop is asyncio.get_running_loop()
            and self.channel.get_state() is grpc.ChannelConnectivity.READY
        )

    async def connect(self, timeout_s: float) -> str | None:
        """Wait until the channel is connected; None then, else why it is not."""
        channel = self.open()
        if not self.owned:
            return None  # a borrowed channel: its owner decides how it connects
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        state = channel.get_state(try_to_connect=True)
        while state is not grpc.ChannelConnectivity.READY:
            if state in (
                grpc.ChannelConnectivity.TRANSIENT_FAILURE,
                grpc.ChannelConnectivity.SHUTDOWN,
            ):
                return await self._why_not_connected(channel, state)
            remaining = deadline - loop.time()
            try:
                async with asyncio.timeout(max(remaining, 0.0)):
                    await channel.wait_for_state_change(state)
            except TimeoutError:
                return f"did not connect within {timeout_s:g}s"
            state = channel.get_state(try_to_connect=True)
        return None

    async def _why_not_connected(self, channel: Any, state: grpc.ChannelConnectivity) -> str:
        """Why the channel failed, as grpc last saw it (refused, TLS handshake failed...),
        with what to check when it looks like a TLS mismatch. grpc's channel states do not
        say; a call that fails fast (no wait for ready) carries the last error."""
        why = f"refused or unreachable (channel {state.name})"
        try:
            await channel.unary_unary(_HEALTH_CHECK)(b"", timeout=1.0, wait_for_ready=False)
        except grpc.aio.AioRpcError as exc:
            details = exc.details() or ""
            last = details.rpartition("last error: ")[2].removeprefix("UNAVAILABLE: ")
            if last:
                why = f"{why}: {last}"
        else:
            return why  # connected meanwhile: the caller's next check finds it READY
        if self.security is None and "Socket closed" in why:
            why += (
                "; a server that takes TLS only closes plaintext connections: connect with "
                "tls=True or tls=TLSConfig(ca_file=...) (CLI: --tls, --tls-ca FILE)"
            )
        elif self.security is not None and ("Socket closed" in why or "handshake" in why):
            why += (
                "; check the CA that verifies the server (TLSConfig ca_file), the name its "
                "certificate carries (server_name), that the server listens with TLS, and "
                "whether it requires a client certificate (cert_file, key_file)"
            )
        return why

    async def close(self) -> None:
        """Close an owned channel opened on the running loop; drop it either way."""
        channel, self.channel = self.channel, None
        self._messaging = self._admin = None
        if channel is None or not self.owned:
            return
        if self.loop is asyncio.get_running_loop():
            await channel.close()
        else:
            logger.debug("dropping a channel to %s opened on another event loop", self.address)


class Connection:
    """The channels to a client's endpoints, and failover between them.

    Args:
        endpoint: One or several endpoints (see `parse_endpoints`); checked unless a channel
            is given.
        channel: An already open ``grpc.aio`` channel to use as the only endpoint instead;
            the caller keeps ownership and closes it. No failover.
        tls: Open the channels with TLS (``True``: the system's roots; a ``TLSConfig``);
            not with ``channel``, which has its own credentials.
        credentials: Sign every call and stream with them (``call_metadata``).
    """

    def __init__(
        self,
        endpoint: Endpoints,
        channel: Any = None,
        credentials: Credentials | None = None,
        *,
        tls: TLS = False,
    ) -> None:
        self.credentials = credentials
        self.endpoint = endpoint if isinstance(endpoint, str) else ",".join(endpoint)
        """The endpoint as given (a sequence joined by commas), for messages."""
        if channel is None:
            addresses = parse_endpoints(endpoint)
            security = channel_security(tls)
            self._endpoints = [Endpoint(address, security=security) for address in addresses]
        elif tls is not False:
            raise ValueError("tls is for channels the client opens: a given channel has its own")
        else:
            self._endpoints = [Endpoint(self.endpoint, channel)]
        # Index of the endpoint requests go to; moves on when it fails.
        self._current = 0

    def call_metadata(self) -> Metadata | None:
        """The metadata of a call or stream made now: its signature, with credentials."""
        credentials = self.credentials
        return None if credentials is None else credentials.metadata()

    @property
    def endpoints(self) -> tuple[str, ...]:
        """Every endpoint, in the order given."""
        return tuple(e.address for e in self._endpoints)

    @property
    def given_channel(self) -> bool:
        """Whether the caller gave the channel (its endpoint is theirs, unchecked)."""
        return not self._endpoints[0].owned

    @property
    def current(self) -> str:
        """The endpoint requests go to now."""
        return self._endpoints[self._current].address

    async def connected(self, timeout_s: float) -> Endpoint:
        """The current endpoint once connected; those that do not connect are passed over.

        Each endpoint is tried once at most: the current one, then the others round-robin,
        those resting last. Nothing was sent to an endpoint that did not connect.

        Raises:
            NoEndpointError: No endpoint connected; says why for each.
        """
        current = self._endpoints[self._current]
        if not current.owned or current.ready():
            current.open()  # a borrowed channel, or the common case: connected already
            return current
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        tried: list[Endpoint] = []
        while (candidate := self._next_to_try(tried, loop.time())) is not None:
            tried.append(candidate)
            remaining = deadline - loop.time()
            why = (
                await candidate.connect(min(CONNECT_TIMEOUT_S, remaining))
                if remaining > 0
                else "no time left to connect"
            )
            if why is None:
                self._current = self._endpoints.index(candidate)
                return candidate
            self._rest(candidate, why)
        reasons = "; ".join(f"{e.address}: {e.last_error}" for e in tried)
        raise NoEndpointError(
            f"no popmq proxy could be reached ({reasons}); is the popmq server running?"
        )

    def _next_to_try(self, tried: list[Endpoint], now: float) -> Endpoint | None:
        """The next untried endpoint, round-robin from the current one; resting ones last."""
        count = len(self._endpoints)
        order = [self._endpoints[(self._current + i) % count] for i in range(count)]
        untried = [e for e in order if e not in tried]
        if not untried:
            return None
        awake = [e for e in untried if e.resting_until <= now]
        return awake[0] if awake else min(untried, key=lambda e: e.resting_until)

    def _rest(self, endpoint: Endpoint, why: str) -> None:
        """``endpoint`` failed: it rests, and requests move on from it."""
        now = asyncio.get_running_loop().time()
        if endpoint.resting_until <= now:  # failures seen while it rests count once
            endpoint.failures += 1
            endpoint.resting_until = now + ENDPOINT_BACKOFF.delay_s(endpoint.failures)
        endpoint.last_error = why
        self._move_on(endpoint)
        # Once per outage, not per request; a single endpoint's failure is the caller's error.
        log = (
            logger.warning if endpoint.failures == 1 and len(self._endpoints) > 1 else logger.debug
        )
        log("popmq proxy %s failed (%s); requests go to %s", endpoint.address, why, self.current)

    def _move_on(self, endpoint: Endpoint) -> None:
        if self._endpoints[self._current] is endpoint:
            self._current = (self._current + 1) % len(self._endpoints)

    def failed(self, endpoint: Endpoint, status: grpc.StatusCode, details: str) -> None:
        """A call or stream on ``endpoint`` ended with ``status``; move on if it is an outage.

        The endpoint rests too, unless it refused the call itself on a connection that still
        works (a live proxy's deliberate UNAVAILABLE: retriable, but the proxy is there).
        """
        if status not in _OUTAGE_CODES or not endpoint.owned:
            return
        why = f"{status.name}: {details}" if details else status.name
        if status is grpc.StatusCode.UNAVAILABLE and endpoint.ready():
            endpoint.last_error = why
            self._move_on(endpoint)
            logger.debug("popmq proxy %s refused a call (%s); moving on", endpoint.address, why)
        else:
            self._rest(endpoint, why)

    @staticmethod
    def answered(endpoint: Endpoint) -> None:
        """``endpoint`` answered a call: its failures are forgiven, it rests no more."""
        if endpoint.failures:
            endpoint.failures = 0
            endpoint.resting_until = 0.0

    async def unary(
        self,
        method: str,
        request: ProtoMessage,
        timeout_s: float,
        *,
        service: Service = "messaging",
    ) -> Any:
        """One call of a unary RPC on a connected endpoint, translating a failed status.

        The call has ``timeout_s``; waiting for a connection before it is bounded apart
        (``CONNECT_TIMEOUT_S`` per endpoint). Not repeated after an outage (see ``call``);
        the client moves on to the next endpoint for the next request.

        Raises:
            PopMQError: The subclass registered for the call's status code.
        """
        endpoint = await self.connected(timeout_s)
        try:
            response = await getattr(endpoint.stub(service), method)(
                request, timeout=timeout_s, metadata=self.call_metadata()
            )
        except grpc.aio.AioRpcError as exc:
            details = exc.details()
            if _OUTCOME_UNKNOWN in [tuple(pair) for pair in exc.trailing_metadata() or ()]:
                # The proxy answered, and the repeat must come back to it: stay.
                endpoint.last_error = details if isinstance(details, str) else ""
            else:
                self.failed(endpoint, exc.code(), details if isinstance(details, str) else "")
            raise error_from_rpc_error(exc) from exc
        self.answered(endpoint)
        return response

    async def call(
        self,
        method: str,
        request: ProtoMessage,
        timeout_s: float,
        *,
        service: Service = "messaging",
        retry: bool,
    ) -> Any:
        """A unary RPC; with ``retry``, repeated on the next endpoint after an UNAVAILABLE.

        Pass ``retry=True`` only for requests that are safe to repeat when the first attempt
        may have been applied (see the module docstring).
        """
        return await self.retrying(
            lambda: self.unary(method, request, timeout_s, service=service), retry=retry
        )

    async def retrying(self, attempt: Callable[[], Awaitable[T]], *, retry: bool = True) -> T:
        """Run ``attempt``; with ``retry``, again after an ``UnavailableError``, at most once
        per other endpoint, after ``RETRY_BACKOFF``.

        An attempt that found no endpoint at all (``NoEndpointError``) is not repeated: it
        tried every one already.
        """
        failures = 0
        while True:
            try:
                return await attempt()
            except UnavailableError as exc:
                failures += 1
                if (
                    not retry
                    or isinstance(exc, NoEndpointError)
                    or failures >= len(self._endpoints)
                ):
                    raise
                delay = RETRY_BACKOFF.delay_s(failures)
                logger.debug(
                    "%s (%s); repeating on %s in %.3fs", exc.code, exc.message, self.current, delay
                )
            await asyncio.sleep(delay)

    async def close(self) -> None:
        """Close the owned channels; borrowed ones are left to their owner."""
        for endpoint in self._endpoints:
            await endpoint.close()


class AsyncClient:
    """Lifecycle shared by the async clients: lazy channels, idempotent close, warnings.

    Args:
        endpoint: ``host:port`` of the popmq proxy, or several (comma-separated or a
            sequence) to fail over between (see ``popmq.sdk._channel``).
        timeout_s: Timeout of each call, in seconds.
        channel: Optional ``grpc.aio`` channel to use instead of opening one (the caller
            keeps ownership); a seam for tests and custom channel setups. Inside the SDK,
            also another client's `Connection`, shared (its owner closes it; its credentials
            sign the calls).
        tls: Connect with TLS: ``True`` verifies the server with the system's roots, a
            ``TLSConfig`` names the CA file and a client certificate (popmq.sdk.tls).
        credentials: Access key and secret key that sign every call (servers with
            authentication on).
    """

    def __init__(
        self,
        endpoint: Endpoints,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        channel: Any = None,
        tls: TLS = False,
        credentials: Credentials | None = None,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if credentials is not None and not isinstance(credentials, Credentials):
            raise TypeError(f"credentials must be a Credentials, got {type(credentials).__name__}")
        self._owns_conn = not isinstance(channel, Connection)
        self._conn = (
            channel
            if isinstance(channel, Connection)
            else Connection(endpoint, channel, credentials, tls=tls)
        )
        self._timeout_s = timeout_s
        self._closed = False

    @property
    def endpoint(self) -> str:
        """The endpoint this client talks to, as given (a sequence joined by commas)."""
        return self._conn.endpoint

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    async def close(self) -> None:
        """Close the channels. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_conn:
            await self._conn.close()

    def abandon(self) -> None:
        """Mark closed without closing the channels, for owners that already warned.

        Used by the sync facade when it is collected unclosed and no loop can run
        ``close``; the channels, if any, are left to the garbage collector.
        """
        self._closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __del__(self) -> None:
        # getattr: __init__ may have failed before _closed was set.
        if not getattr(self, "_closed", True):
            warnings.warn(
                f"unclosed {type(self).__name__} to {self._conn.endpoint}; call close()",
                ResourceWarning,
                stacklevel=2,
            )
