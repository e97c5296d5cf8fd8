"""A TCP relay in front of a broker that injects the faults a send's retry must survive.

`FaultRelay()` listens on 127.0.0.1:0 and forwards each connection to `target` (set once the
broker behind it has a port: a connection that comes before waits for it; a broker registers
the relay's address with `[cluster] advertise`, so proxies dial the relay). Faults, armed from
any thread:

- `cut = True`: every connection is closed as soon as it is accepted (the broker is
  unreachable), until `cut` is False again;

- `drop_next_answer(min_bytes)`: the next chunk of at least `min_bytes` from the client (a
  send request, not a ping) is forwarded, then nothing more reaches the client on that
  connection, and after `hold_s` (time for the broker to store the send) the connection is
  closed both ways: the broker stored the send, the proxy never hears of it.
- `pause(seconds)`: everything the clients send is held for that long and then forwarded,
  as to a broker stopped (SIGSTOP) and resumed: the calls made meanwhile time out on the
  client's side, and the broker takes them all when it resumes.

It runs in the event loop it is started on (an InProcessCluster's, or `relay_loop()`'s: a
loop in a thread of its own, for a relay between processes; `on_loop` runs a coroutine
there from the test's thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

from popmq.runtime.tracked_server import TrackedServer
from tests.support.thread_loops import stop_thread_loop

T = TypeVar("T")


@contextlib.contextmanager
def relay_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop in a thread of its own, for FaultRelays between processes."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="relay-loop")
    thread.start()
    try:
        yield loop
    finally:
        stop_thread_loop(loop, thread)


def on_loop(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on `loop` (another thread's) and return its result."""
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=60)


class FaultRelay:
    def __init__(self) -> None:
        self.target: tuple[str, int] | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tracked = TrackedServer(self._accept)
        """Every accepted connection and its handler, ended by close()."""
        # Set from the test's thread, read on the loop: single attribute writes.
        self._drop_min_bytes: int | None = None
        self._hold_s = 0.5
        self._paused_until = 0.0
        self.cut = False
        self.dropped = 0
        """Answers dropped so far."""
        self.holding = 0
        """Requests forwarded whose answers are being held back (`drop_next_answer`)."""
        # Set by close(abort=True): an answer held back is let go of at once.
        self._aborted = asyncio.Event()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self._tracked.port}"

    async def start(self) -> str:
        await self._tracked.start()
        return self.endpoint

    async def close(self, *, abort: bool = False) -> None:
        """Stop listening (a new connection is refused) and close every connection;
        `abort` also ends at once the handlers holding an answer back."""
        if self._tracked.closed:
            return
        self._tracked.stop_listening()
        await asyncio.sleep(0)  # a handler created as it closed registers itself first
        for writer in list(self._writers):
            writer.close()
        if abort:
            self._aborted.set()
        # A handler still running after 5 s (its peer never read what it was sent) is
        # cancelled: its finally aborts both sockets, none left for the collector to warn of.
        await self._tracked.end_handlers(5)
        # A connection whose handler never ran (accepted as the relay closed) has only its
        # transport: every accepted one is aborted (popmq/runtime/tracked_server.py).
        await self._tracked.close()

    def drop_next_answer(self, min_bytes: int, hold_s: float = 0.5) -> None:
        self._hold_s = hold_s
        self._drop_min_bytes = min_bytes

    def pause(self, seconds: float) -> None:
        self._paused_until = time.monotonic() + seconds

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._tracked.closed:
            writer.transport.abort()
            return
        up_writer: asyncio.StreamWriter | None = None
        try:
            for _ in range(200):  # a connection before the broker has a port waits (10 s)
                if self.target is not None or self.cut:
                    break
                await asyncio.sleep(0.05)
            if self.cut or self.target is None:
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                return
            self._writers |= {writer, up_writer}
            cut = asyncio.Event()
            await asyncio.gather(
                self._upstream(reader, up_writer, cut),
                self._downstream(up_reader, writer, cut),
                return_exceptions=True,
            )
        finally:
            for w in (writer, up_writer):
                if w is not None:
                    self._writers.discard(w)
                    # abort, not close: close waits for unsent bytes a dead peer never takes
                    w.transport.abort()

    async def _upstream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cut: asyncio.Event
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                wait = self._paused_until - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
                wanted = self._drop_min_bytes
                if wanted is not None and len(data) >= wanted and not cut.is_set():
                    self._drop_min_bytes = None
                    cut.set()  # the answer to this request never reaches the client
                    self.holding += 1
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._aborted.wait(), self._hold_s)
                    self.dropped += 1
                    break
        writer.close()

    async def _downstream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cut: asyncio.Event
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                if cut.is_set():
                    continue
                writer.write(data)
                await writer.drain()
        writer.close()
