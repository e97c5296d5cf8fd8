"""Retention: old messages go by ranges, the min offset moves up, consumers skip and count."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from popmq.broker_core import (
    Broker,
    BrokerConfig,
    NewMessage,
    NotFoundError,
    StoreConfig,
    keys,
    message_index,
)
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import RetentionConfig
from popmq.broker_core.store import Store


def _run(tmp_path: Path, clock: ManualClock, scenario: Callable[[Broker], Awaitable[None]]) -> None:
    async def main() -> None:
        broker = Broker(
            BrokerConfig(
                store=StoreConfig(data_dir=tmp_path / "data"),
                retention=RetentionConfig(retention_s=60),
            ),
            clock=clock,
        )
        await broker.start()
        try:
            await scenario(broker)
        finally:
            await broker.close()

    asyncio.run(main())


def test_messages_older_than_retention_are_deleted_by_range_and_min_offset_moves(
    tmp_path: Path, clock: ManualClock
) -> None:
    async def scenario(broker: Broker) -> None:
        topic = await broker.create_topic("t", 1)
        await broker.send([NewMessage("t", b"old-%d" % i) for i in range(5)])
        clock.advance(20)
        boundary = clock.now_ms()
        clock.advance(20)
        await broker.send([NewMessage("t", b"new-%d" % i) for i in range(5)])
        # Retention is 60 s: at boundary + 60 s, exactly the first five are too old.
        assert await broker.apply_retention(now=boundary + 60_000) == 5
        _, stats = await broker.get_topic("t")
        assert (stats[0].min_offset, stats[0].max_offset) == (5, 10)
        prefix = keys.queue_prefix(topic.topic_id, 0)
        end = keys.queue_prefix(topic.topic_id, 1)
        assert len(list(broker.store.scan("messages", prefix, end))) == 5
        assert await broker.apply_retention(now=boundary + 60_000) == 0  # idempotent
        popped = await broker.pop("g", "t", max_messages=32, wait_s=0)
        assert [m.record.body for m in popped] == [b"new-%d" % i for i in range(5)]

    _run(tmp_path, clock, scenario)


def test_pop_below_min_offset_starts_at_min_and_lag_counts_the_skipped(
    tmp_path: Path, clock: ManualClock
) -> None:
    async def scenario(broker: Broker) -> None:
        await broker.create_topic("t", 1)
        await broker.send([NewMessage("t", b"%d" % i) for i in range(10)])
        first = await broker.pop("g", "t", max_messages=2, wait_s=0)
        await broker.ack("g", [m.receipt_handle for m in first])  # g is at offset 2
        deleted = await broker.apply_retention(now=clock.now_ms() + 61_000)
        assert deleted == 10
        (row, _retry) = await broker.group_lag("g", "t")
        assert (row.consumer_offset, row.retention_skipped) == (2, 8)
        await broker.send([NewMessage("t", b"fresh")])
        popped = await broker.pop("g", "t", max_messages=32, wait_s=0)
        assert [(m.record.body, m.offset) for m in popped] == [(b"fresh", 10)]
        (row, _retry) = await broker.group_lag("g", "t")
        assert row.retention_skipped == 8
        await broker.ack("g", [m.receipt_handle for m in popped])
        (row, _retry) = await broker.group_lag("g", "t")
        assert (row.consumer_offset, row.lag, row.retention_skipped) == (11, 0, 8)

    _run(tmp_path, clock, scenario)


def test_retention_keeps_messages_younger_than_retention(
    tmp_path: Path, clock: ManualClock
) -> None:
    async def scenario(broker: Broker) -> None:
        await broker.create_topic("t", 2)
        await broker.send([NewMessage("t", b"%d" % i) for i in range(6)])
        clock.advance(59_000)
        assert await broker.apply_retention() == 0
        popped = await broker.pop("g", "t", max_messages=32, wait_s=0)
        assert len(popped) == 6
        clock.advance(2_000)  # now older than the 60 s retention, by the broker's clock
        assert await broker.apply_retention() == 6

    _run(tmp_path, clock, scenario)


class _SettableClock:
    """A ManualClock that can also be set back, as a wall clock can be (a Clock of its own:
    the compiled ManualClock cannot be subclassed by a test)."""

    def __init__(self) -> None:
        self._clock = ManualClock()
        self._back_ms = 0

    def now_ms(self) -> int:
        return self._clock.now_ms() - self._back_ms

    def on_advance(self, callback: Callable[[], None]) -> None:
        self._clock.on_advance(callback)

    def advance(self, ms: int) -> None:
        self._clock.advance(ms)

    def go_back(self, ms: int) -> None:
        self._back_ms += ms


def test_index_sweep_starts_after_the_markers_it_deleted_unless_the_clock_went_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleted expiry markers stay as tombstones until compactions drop them: a sweep's
    scan starts after those its broker deleted, and from the first key again when the
    clock went back (a marker written then may sort before them)."""
    starts: list[bytes] = []
    original = message_index.expired_entries

    def recording(store: Store, now_ms: int, start: bytes = message_index.EXPIRY_START) -> Any:
        starts.append(start)
        return original(store, now_ms, start)

    monkeypatch.setattr(message_index, "expired_entries", recording)
    clock = _SettableClock()

    async def scenario(broker: Broker) -> None:
        await broker.create_topic("t", 1)
        first = await broker.send([NewMessage("t", b"a", keys=("k",)) for _ in range(3)])
        clock.advance(61_000)
        assert await broker.sweep_index() == 6  # 3 id and 3 key entries
        assert starts[0] == message_index.EXPIRY_START
        swept_at = clock.now_ms()
        starts.clear()

        second = await broker.send([NewMessage("t", b"b") for _ in range(2)])
        clock.advance(61_000)
        assert await broker.sweep_index() == 2
        assert message_index.EXPIRY_START < starts[0] <= keys.expiry_key(swept_at, b"")
        for sent in (*first, *second):
            with pytest.raises(NotFoundError):
                await broker.query_message("t", sent.message_id)
        starts.clear()

        clock.go_back(100_000)  # a marker written now expires before those deleted
        (late,) = await broker.send([NewMessage("t", b"c")])
        clock.advance(61_000)
        assert await broker.sweep_index() == 1
        assert starts[0] == message_index.EXPIRY_START
        with pytest.raises(NotFoundError):
            await broker.query_message("t", late.message_id)

    _run(tmp_path, clock, scenario)
