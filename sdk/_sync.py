"""The sync facade: blocking clients that run their async core on the SDK loop thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import warnings
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from popmq.sdk import _loop
from popmq.sdk._channel import AsyncClient

__all__ = ["SyncClient"]

CoreT = TypeVar("CoreT", bound=AsyncClient)
T = TypeVar("T")

# Close tasks started for clients that were garbage-collected unclosed; held here because
# the loop keeps only weak references to tasks.
_background_closes: set[asyncio.Task[None]] = set()


def _close_in_background(core: AsyncClient) -> None:
    task = asyncio.ensure_future(core.close())
    _background_closes.add(task)
    task.add_done_callback(_background_closes.discard)


class SyncClient(Generic[CoreT]):
    """Base of the blocking clients: each method runs the core's coroutine to completion.

    Args:
        core: The async client doing the work; this facade owns and closes it.
    """

    def __init__(self, core: CoreT) -> None:
        self._core = core
        self._closed = False

    @property
    def endpoint(self) -> str:
        """The endpoint this client talks to, as given (a sequence joined by commas)."""
        return self._core.endpoint

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called."""
        return self._closed

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError(f"{type(self).__name__} is closed")
        return _loop.get_loop_thread().run(coro)

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start a coroutine on the loop thread and return its future without waiting."""
        if self._closed:
            coro.close()
            raise RuntimeError(f"{type(self).__name__} is closed")
        return _loop.get_loop_thread().submit(coro)

    def close(self) -> None:
        """Close the client and its channel. Idempotent."""
        if self._closed:
            return
        self._closed = True
        _loop.get_loop_thread().run(self._core.close())

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # getattr: __init__ may have failed before _closed was set.
        if getattr(self, "_closed", True):
            return
        self._closed = True
        # Release the channel first (the warning may be turned into an exception), and
        # without blocking whatever thread runs the garbage collector.
        loop_thread = _loop.current_loop_thread()
        if loop_thread is None:
            # No loop in this process ran the core, so it holds no live channel here.
            self._core.abandon()
        else:
            try:
                loop_thread.loop.call_soon_threadsafe(_close_in_background, self._core)
            except RuntimeError:  # the loop closed meanwhile (interpreter shutdown)
                self._core.abandon()
        warnings.warn(
            f"unclosed {type(self).__name__} to {self._core.endpoint}; call close()",
            ResourceWarning,
            stacklevel=2,
        )
