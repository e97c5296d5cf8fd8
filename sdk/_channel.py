"""The gRPC channel behind each async client, and the base class those clients share.

A ``grpc.aio`` channel belongs to the event loop it was created on, so the channel is
opened lazily inside the first call, on the loop that runs it. When the running loop
changes (the sync facades' loop thread is restarted in a forked child), a new channel is
opened; the old one belonged to a loop that no longer runs and is dropped, not closed.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from types import TracebackType
from typing import Any, Self

import grpc
import grpc.aio
from google.protobuf.message import Message as ProtoMessage

from popmq._gen.popmq.v1 import admin_pb2_grpc, messaging_pb2_grpc
from popmq.sdk.errors import InvalidArgumentError, error_from_rpc_error

__all__ = [
    "CHANNEL_OPTIONS",
    "DEFAULT_TIMEOUT_S",
    "MAX_MESSAGE_BYTES",
    "AsyncClient",
    "Connection",
    "check_endpoint",
]

logger = logging.getLogger(__name__)

# Bodies go up to 4 MiB and a batch or a pop of up to 32 messages must fit in one message.
MAX_MESSAGE_BYTES = 130 * 1024 * 1024
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
)
DEFAULT_TIMEOUT_S = 10.0

_PATH_SCHEMES = ("unix:", "unix-abstract:", "vsock:")
"""gRPC target schemes that name no TCP port (checked for a non-empty rest only)."""
_ADDRESS_LIST_SCHEMES = ("ipv4:", "ipv6:")
"""gRPC target schemes that take a comma-separated list of HOST:PORT addresses."""


def _bad_endpoint(endpoint: str, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"endpoint {endpoint!r} {why}; use HOST:PORT (IPv6 as [::1]:8081) or a gRPC target "
        "such as unix:/path/popmq.sock or ipv4:10.0.0.1:8081,10.0.0.2:8081"
    )


def _check_address(endpoint: str, address: str, *, port_required: bool = True) -> None:
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


def check_endpoint(endpoint: str) -> str:
    """Refuse an endpoint gRPC would misread, before any channel exists; returns it unchanged.

    gRPC takes ``127.0.0.1:99999`` without complaint and connects to another port, so a
    typo must fail here with a message saying what is allowed.

    Raises:
        InvalidArgumentError: Not HOST:PORT (port 1..65535) nor a known gRPC target form.
    """
    if not endpoint or endpoint != endpoint.strip():
        raise _bad_endpoint(endpoint, "is empty or has surrounding spaces")
    if endpoint.startswith(_PATH_SCHEMES):
        if not endpoint.partition(":")[2]:
            raise _bad_endpoint(endpoint, "names no path")
        return endpoint
    if endpoint.startswith(_ADDRESS_LIST_SCHEMES):
        for address in endpoint.partition(":")[2].split(","):
            _check_address(endpoint, address)
        return endpoint
    if endpoint.startswith("dns:"):
        rest = endpoint[4:]
        if rest.startswith("//"):  # dns://AUTHORITY/HOST[:PORT]
            rest = rest[2:].partition("/")[2]
        _check_address(endpoint, rest, port_required=False)  # gRPC's default port: 443
        return endpoint
    if "://" in endpoint:
        return endpoint  # another resolver's target (xds:///service): its own rules
    _check_address(endpoint, endpoint)
    return endpoint


# The generated gRPC stubs have no type hints; calls through them are Any by nature and
# their results are annotated with the pb2 response types at each call site.
_MessagingStub: Any = messaging_pb2_grpc.MessagingServiceStub
_AdminStub: Any = admin_pb2_grpc.AdminServiceStub


class Connection:
    """A channel to one endpoint and the service stubs on it, opened on first use.

    Args:
        endpoint: ``host:port`` (or a gRPC target) of the popmq proxy; checked by
            `check_endpoint` unless a channel is given.
        channel: An already open ``grpc.aio`` channel to use instead; the caller keeps
            ownership and closes it.
    """

    def __init__(self, endpoint: str, channel: Any = None) -> None:
        if channel is None:
            check_endpoint(endpoint)
        self.endpoint = endpoint
        self._channel: Any = channel
        self._owned = channel is None
        # The loop an owned channel was opened on; None until then.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._messaging: Any = None
        self._admin: Any = None

    def _open(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._channel is None or (self._owned and self._loop is not loop):
            if self._channel is not None:
                logger.debug("event loop changed; reopening the channel to %s", self.endpoint)
            self._channel = grpc.aio.insecure_channel(self.endpoint, options=CHANNEL_OPTIONS)
            self._loop = loop
            self._messaging = self._admin = None
        return self._channel

    def channel(self) -> Any:
        """Return the ``grpc.aio`` channel, opening it if needed (to share with sub-clients)."""
        return self._open()

    def messaging(self) -> Any:
        """Return the MessagingService stub, opening the channel if needed."""
        channel = self._open()
        if self._messaging is None:
            self._messaging = _MessagingStub(channel)
        return self._messaging

    def admin(self) -> Any:
        """Return the AdminService stub, opening the channel if needed."""
        channel = self._open()
        if self._admin is None:
            self._admin = _AdminStub(channel)
        return self._admin

    async def close(self) -> None:
        """Close an owned channel; a borrowed one is left to its owner."""
        channel, self._channel = self._channel, None
        self._messaging = self._admin = None
        if channel is None or not self._owned:
            return
        if self._loop is asyncio.get_running_loop():
            await channel.close()
        else:
            logger.debug("dropping a channel to %s opened on another event loop", self.endpoint)


async def unary(method: Any, request: ProtoMessage, timeout_s: float) -> Any:
    """Call a unary RPC, translating a failed status into the SDK's error for it.

    Raises:
        PopMQError: The subclass registered for the call's status code.
    """
    try:
        return await method(request, timeout=timeout_s)
    except grpc.aio.AioRpcError as exc:
        raise error_from_rpc_error(exc) from exc


class AsyncClient:
    """Lifecycle shared by the async clients: lazy channel, idempotent close, warnings.

    Args:
        endpoint: ``host:port`` of the popmq proxy.
        timeout_s: Timeout of each call, in seconds.
        channel: Optional ``grpc.aio`` channel to use instead of opening one (the caller
            keeps ownership); a seam for tests and custom channel setups.
    """

    def __init__(
        self, endpoint: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, channel: Any = None
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self._conn = Connection(endpoint, channel)
        self._timeout_s = timeout_s
        self._closed = False

    @property
    def endpoint(self) -> str:
        """The endpoint this client talks to."""
        return self._conn.endpoint

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    async def close(self) -> None:
        """Close the channel. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._conn.close()

    def abandon(self) -> None:
        """Mark closed without closing the channel, for owners that already warned.

        Used by the sync facade when it is collected unclosed and no loop can run
        ``close``; the channel, if any, is left to the garbage collector.
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
