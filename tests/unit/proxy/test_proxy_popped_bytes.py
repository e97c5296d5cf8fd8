"""The server-wide budget of popped bytes (proxy/memory.py): its bound and its wake-ups."""

from __future__ import annotations

import asyncio

import pytest

from popmq.broker_core.validation import MAX_RESPONSE_BYTES
from popmq.proxy.memory import MAX_POPPED_BYTES, PoppedBytes


def test_the_limit_holds_at_least_one_answer() -> None:
    assert PoppedBytes().limit == MAX_POPPED_BYTES
    with pytest.raises(ValueError, match="below one pop answer"):
        PoppedBytes(MAX_RESPONSE_BYTES - 1)


def test_streams_waiting_for_bytes_are_called_in_order_once_bytes_come_back() -> None:
    calls: list[str] = []

    async def scenario() -> PoppedBytes:
        pool = PoppedBytes(MAX_RESPONSE_BYTES)
        pool.hold(MAX_RESPONSE_BYTES)
        first, second = (lambda: calls.append("first")), (lambda: calls.append("second"))
        pool.wait(first)
        pool.wait(second)
        pool.wait(first)  # once, in its first place
        pool.let_go(1024)
        assert calls == []  # not from inside the caller's bookkeeping
        await asyncio.sleep(0)
        assert calls == ["first", "second"]
        pool.unwait(first)
        pool.let_go(1024)
        await asyncio.sleep(0)
        return pool

    pool = asyncio.run(scenario())
    assert calls == ["first", "second", "second"]
    assert pool.free() == 2048
