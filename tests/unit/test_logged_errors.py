"""tests.support.logs: the server's errors count; grpc's multi-loop poller noise does not."""

from __future__ import annotations

import logging

from tests.support.logs import logged_errors


def _record(
    name: str, message: str, exc: BaseException | None, level: int = logging.ERROR
) -> logging.LogRecord:
    exc_info = (type(exc), exc, None) if exc is not None else None
    return logging.LogRecord(name, level, __file__, 1, message, None, exc_info)


_POLLER = "Exception in callback PollerCompletionQueue._handle_events(<_UnixSelectorEventLoop>)()"


def test_the_poller_dispatching_to_a_closed_loop_is_not_a_server_error() -> None:
    closed = _record("asyncio", _POLLER, RuntimeError("Event loop is closed"))
    raced = _record("asyncio", _POLLER, BlockingIOError(11, "Resource temporarily unavailable"))
    assert logged_errors([closed, raced]) == []


def test_every_other_error_counts() -> None:
    records = [
        _record("asyncio", "Task exception was never retrieved", RuntimeError("boom")),
        _record("asyncio", _POLLER, ValueError("a real bug in a callback")),
        _record("popmq.proxy", "pop failed", None),
        _record("popmq.proxy", "slow", None, level=logging.WARNING),
    ]
    assert logged_errors(records) == [
        "Task exception was never retrieved",
        _POLLER,
        "pop failed",
    ]
