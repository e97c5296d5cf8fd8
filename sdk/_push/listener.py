"""Calling the user's listener: on a thread pool (sync) or on the event loop (async).

``ListenerRunner`` owns the consume threads and the slots that bound listener calls to
``consume_threads`` at once, and turns a listener's result into ok / not ok.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from popmq.sdk._push.shared import LOGGER_NAME, Counters
from popmq.sdk.types import ReceivedMessage

logger = logging.getLogger(LOGGER_NAME)

T = TypeVar("T")


class ConsumeResult(enum.Enum):
    """What a listener returns: SUCCESS acks the message, FAILURE has it redelivered."""

    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"


Listener = Callable[[ReceivedMessage], Any]
"""``(message) -> ConsumeResult``, or an ``async def`` returning one."""

_RAISED = "push consumer %s: the listener raised on message %s; treated as FAILURE"

# Marks the consume threads, so a listener that calls close() fails instead of deadlocking.
in_listener = threading.local()


def called_from_listener() -> bool:
    """Whether this thread is running a sync listener now."""
    return bool(getattr(in_listener, "active", False))


class ListenerRunner:
    """Runs the listener, at most ``consume_threads`` calls at once, and counts results."""

    def __init__(
        self, listener: Listener, *, consume_threads: int, counters: Counters, client_id: str
    ) -> None:
        self.listener = listener
        self.is_async = inspect.iscoroutinefunction(listener)
        self._consume_threads = consume_threads
        self._counters = counters
        self._client_id = client_id
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._slots: asyncio.Semaphore | None = None

    def start(self) -> None:
        """Make the thread pool (sync listeners) and the slots; called once, on the loop."""
        if not self.is_async:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=self._consume_threads, thread_name_prefix="popmq-consume"
            )
        self._slots = asyncio.Semaphore(self._consume_threads)

    def shutdown(self) -> None:
        """Let the consume threads end once their calls return (does not wait)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    @property
    def slots(self) -> asyncio.Semaphore:
        """Held for each listener call (or run of calls): ``consume_threads`` at once."""
        assert self._slots is not None, "start() makes the slots"
        return self._slots

    async def in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on a consume thread (sync listeners only)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    async def call(self, message: ReceivedMessage) -> bool:
        """Run the listener once and count it; True only for ConsumeResult.SUCCESS.

        The caller holds a slot.
        """
        if self.is_async:
            try:
                result = await self.listener(message)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.warning(_RAISED, self._client_id, message.message_id, exc_info=True)
                ok = False
            else:
                ok = self.judge(result, message)
        else:
            ok = await self.in_thread(self.invoke, message)
        if ok:
            self._counters.succeeded += 1
        else:
            self._counters.failed += 1
        return ok

    def invoke(self, message: ReceivedMessage) -> bool:
        """Call a sync listener on a consume thread; True only for ConsumeResult.SUCCESS."""
        in_listener.active = True
        try:
            result = self.listener(message)
        except Exception:
            logger.warning(_RAISED, self._client_id, message.message_id, exc_info=True)
            return False
        finally:
            in_listener.active = False
        return self.judge(result, message)

    def judge(self, result: object, message: ReceivedMessage) -> bool:
        """True for ConsumeResult.SUCCESS; anything else is a failure (logged if odd)."""
        if result is ConsumeResult.SUCCESS:
            return True
        if result is not ConsumeResult.FAILURE:
            logger.warning(
                "push consumer %s: listener returned %r for message %s; treated as FAILURE "
                "(return ConsumeResult.SUCCESS to ack)",
                self._client_id, result, message.message_id,
            )  # fmt: skip
        return False
