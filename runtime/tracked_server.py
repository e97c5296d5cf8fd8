"""A stream server that can close every connection it ever accepted.

asyncio's Server (3.11) closes only its listening socket: a connection whose handler never
ran (accepted as the server closed, or its task cancelled before its first step), or whose
transport waits to flush bytes a dead peer never takes, keeps its socket until the garbage
collector finds it (ResourceWarning: unclosed transport). `TrackedServer` keeps every
accepted transport until it is lost, and `close()` aborts them all, including one the loop
was still setting up when the server closed; it keeps the connections' handler tasks too,
which `end_handlers` lets finish for a while and then cancels. The metrics endpoint
(runtime/metrics.py) and the tests' relays use it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import cast

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class TrackedServer:
    """A stream server (`asyncio.start_server`'s handler signature) whose `close()` also
    ends every connection it accepted."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.Transport] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self.closed = False

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> asyncio.Server:
        loop = asyncio.get_running_loop()

        def accepted() -> asyncio.Protocol:
            return _Tracked(asyncio.StreamReader(), self._run, self)

        self._server = await loop.create_server(accepted, host, port)
        return self._server

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def stop_listening(self) -> None:
        """Accept no more connections; open ones stay (`close()` ends them)."""
        self.closed = True
        if self._server is not None:
            # Not Server.close() yet: a connection accepted in this loop pass gets its
            # transport in a task's first step, which on a closed Server fails an assertion
            # before the socket is owned by anything (3.11), leaving it to the collector.
            loop = asyncio.get_running_loop()
            for listening in self._server.sockets:
                loop.remove_reader(listening.fileno())

    async def _run(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        handler.add_done_callback(self._handlers.discard)
        await self._handler(reader, writer)

    async def end_handlers(self, timeout_s: float) -> None:
        """Let the connections' handlers finish for up to `timeout_s`, then cancel the rest
        (a handler cancelled at the loop's end makes asyncio's stream protocol log an
        error) and wait for them."""
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=timeout_s)
        stragglers = list(self._handlers)
        for handler in stragglers:
            handler.cancel()
        await asyncio.gather(*stragglers, return_exceptions=True)

    def abort_all(self) -> None:
        for transport in list(self._transports):
            transport.abort()

    async def close(self) -> None:
        """Stop listening and abort every accepted connection (their handlers then see
        their streams end)."""
        self.stop_listening()
        await asyncio.sleep(0)  # accepted connections get their transports (aborted as made)
        self.abort_all()
        if self._server is not None:
            self._server.close()  # the listening sockets
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
        self._own: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        own = self._own = cast(asyncio.Transport, transport)  # a stream server's: a Transport
        self._tracker._transports.add(own)
        super().connection_made(transport)
        if self._tracker.closed:  # made after the server closed: nothing is served
            own.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._own is not None:
            self._tracker._transports.discard(self._own)
        super().connection_lost(exc)
