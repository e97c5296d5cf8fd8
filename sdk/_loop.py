"""The background event loop that runs the async clients for the sync facades.

One daemon thread per process runs an asyncio loop forever; sync clients hand their
coroutines to it with ``asyncio.run_coroutine_threadsafe`` and get a
``concurrent.futures.Future`` back. The thread is started lazily on first use and is tied
to the process that started it: after ``os.fork()`` (Spark forks its Python workers) the
child has no such thread, so the first use in the child starts a fresh one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread", "current_loop_thread", "get_loop_thread"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class LoopThread:
    """An asyncio event loop running forever on a daemon thread.

    Attributes:
        pid: The process that started the thread; the thread exists only there.
        loop: The event loop the thread runs.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="popmq-sdk-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self._drain()

    def _drain(self) -> None:
        """Cancel what is left on the loop once it stops, then close it."""
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    @property
    def is_alive(self) -> bool:
        """Whether the loop thread is running (False in a forked child)."""
        return self._thread.is_alive()

    def in_loop_thread(self) -> bool:
        """Whether the caller runs on this loop's thread (where blocking would deadlock)."""
        return threading.get_ident() == self._thread.ident

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule a coroutine on the loop from any other thread.

        Raises:
            RuntimeError: Called from the loop thread itself, where waiting on the result
                would deadlock; use the async client there instead.
        """
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError(
                "a sync popmq client was called from the SDK's event loop thread; "
                "use the Async* client inside coroutines"
            )
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the loop and block until it finishes.

        An interrupt while waiting (e.g. Ctrl-C) cancels the coroutine so it does not keep
        running in the background.
        """
        future = self.submit(coro)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def stop(self) -> None:
        """Stop the loop and wait for its thread; a no-op outside the owning process."""
        if self.pid != os.getpid() or not self._thread.is_alive():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if not self.in_loop_thread():
            self._thread.join()


# The loop thread of the current process, or None before first use.
_current: LoopThread | None = None
# Guards _current so concurrent first uses start one thread, not several.
_lock = threading.Lock()


def _reset_lock_in_child() -> None:
    # A fork while another thread held _lock would leave the child's copy locked forever.
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_lock_in_child)


def get_loop_thread() -> LoopThread:
    """Return this process's loop thread, starting it on first use or after a fork."""
    global _current
    with _lock:
        current = _current
        if current is None or current.pid != os.getpid():
            if current is not None:
                logger.debug(
                    "process changed from pid %d to %d; starting a new SDK loop thread",
                    current.pid,
                    os.getpid(),
                )
            current = _current = LoopThread()
        return current


def current_loop_thread() -> LoopThread | None:
    """Return this process's loop thread if it is running, without starting one."""
    current = _current
    if current is None or current.pid != os.getpid() or not current.is_alive:
        return None
    return current
