"""A TCP link between a client and etcd that a test can cut: a network partition.

`Link(target)` listens on 127.0.0.1:0 and forwards each connection to `target`. `cut()`
closes every open connection and refuses new ones (accepted, then closed at once) until
`restore()`. It runs in the test's event loop, like the client under test.
"""

from __future__ import annotations

import asyncio
import contextlib

from popmq.runtime.tracked_server import TrackedServer


class Link:
    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._tracked = TrackedServer(self._accept)
        # Both writers of every forwarded connection, closed by cut().
        self._writers: set[asyncio.StreamWriter] = set()
        # Every connection made to the target: a closed one whose peer (a paused etcd)
        # never takes the bytes left stays open, so exit aborts them all.
        self._upstreams: list[asyncio.StreamWriter] = []
        self.is_cut = False

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self._tracked.port}"

    async def __aenter__(self) -> Link:
        await self._tracked.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._tracked.stop_listening()
        self._close_all()
        await self._tracked.end_handlers(5)
        for upstream in self._upstreams:
            upstream.transport.abort()
        await self._tracked.close()  # what is still open (popmq/runtime/tracked_server.py)

    def cut(self) -> None:
        self.is_cut = True
        self._close_all()

    def restore(self) -> None:
        self.is_cut = False

    def _close_all(self) -> None:
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.is_cut:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        self._upstreams.append(up_writer)
        self._writers |= {writer, up_writer}
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            # The other side going (or cut() closing it) ends the copy; ours closes below.
            with contextlib.suppress(ConnectionError, OSError):
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()
