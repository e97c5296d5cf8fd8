"""A loopback stream server that can close every connection it ever accepted.

asyncio's Server (3.11) closes only its listening socket: a connection whose handler never
ran (accepted as the server closed, or its task cancelled before its first step), or whose
transport waits to flush bytes a dead peer never takes, keeps its socket until the garbage
collector finds it, and warns (ResourceWarning: unclosed transport) in whichever test runs
then. `TrackedServer` keeps every accepted transport until it is lost, and `close()`
aborts them all, including one the loop was still setting up when the server closed.
The test relays (fault_relay.py, tests/cluster/link.py, brokers.py's GatedPort) use it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class TrackedServer:
    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.BaseTransport] = set()
        self.closed = False

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> asyncio.Server:
        loop = asyncio.get_running_loop()

        def accepted() -> asyncio.Protocol:
            return _Tracked(asyncio.StreamReader(), self._handler, self)

        self._server = await loop.create_server(accepted, host, port)
        return self._server

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def stop_listening(self) -> None:
        """Refuse new connections (the listening socket closes); open ones stay."""
        self.closed = True
        if self._server is not None:
            self._server.close()

    def abort_all(self) -> None:
        for transport in list(self._transports):
            transport.abort()

    async def close(self) -> None:
        """Stop listening and abort every accepted connection (their handlers then see
        their streams end)."""
        self.stop_listening()
        await asyncio.sleep(0)
        self.abort_all()
        if self._server is not None:
            await self._server.wait_closed()
        # A connection accepted as the server closed gets its transport a few loop passes
        # later (aborted as it is made); the pause lets those and the aborts settle.
        await asyncio.sleep(0.1)
        self.abort_all()
        await asyncio.sleep(0)


class _Tracked(asyncio.StreamReaderProtocol):
    """A stream server's protocol that registers its transport with its TrackedServer."""

    def __init__(
        self, reader: asyncio.StreamReader, handler: Handler, server: TrackedServer
    ) -> None:
        super().__init__(reader, handler)
        self._tracker = server  # (StreamReaderProtocol has attributes of its own: no clash)
        self._own: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._own = transport
        self._tracker._transports.add(transport)
        super().connection_made(transport)
        if self._tracker.closed:  # made after the server closed: nothing is served
            transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._own is not None:
            self._tracker._transports.discard(self._own)
        super().connection_lost(exc)
