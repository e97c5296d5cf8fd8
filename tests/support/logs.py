"""Reading what the in-process server logged: its errors, without the test harness's own noise."""

from __future__ import annotations

import logging
from collections.abc import Iterable

# grpc.aio shares one completion-queue poller among every event loop of a process and
# dispatches each event through whichever loop is awake. A test runs its client on one loop
# and the server on another, and closes the client's loop when its scenario ends; an event
# for that loop arriving late then fails in the other loop's callback ("Event loop is
# closed", or BlockingIOError when two loops race for the wake-up byte), logged by asyncio.
# It comes from the two-loop harness, not from popmq: `popmq serve` runs one loop.
_POLLER_CALLBACK = "PollerCompletionQueue._handle_events"
_POLLER_ERRORS = (RuntimeError, BlockingIOError)


def _is_poller_noise(record: logging.LogRecord) -> bool:
    if record.name != "asyncio" or _POLLER_CALLBACK not in record.getMessage():
        return False
    exc = record.exc_info[1] if record.exc_info else None
    return isinstance(exc, _POLLER_ERRORS)


def logged_errors(records: Iterable[logging.LogRecord]) -> list[str]:
    """The messages of the ERROR (and worse) records, except grpc's multi-loop poller noise."""
    return [
        r.getMessage() for r in records if r.levelno >= logging.ERROR and not _is_poller_noise(r)
    ]
