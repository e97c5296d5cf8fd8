"""The crash tail (broker_core/crash_tail.py), on the real store: after a run that did not end
cleanly, the messages stored within `messages.crash_tail_s` before the last one; none after
a clean close. Removing some of them leaves gaps that pops step over, keeps the queue's end
across a restart, and drops their index entries.

A crash is simulated as in test_broker_ack_after_crash: the store is closed under the
broker, so its clean close never runs, and the next broker over the same dir is the restart.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from popmq.broker.replication.log import ReplicationLog
from popmq.broker_core import keys
from popmq.broker_core.broker import Broker
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import (
    BrokerConfig,
    MessagesConfig,
    StoreConfig,
    TransactionsConfig,
)
from popmq.broker_core.errors import NotFoundError
from popmq.broker_core.store import Store
from popmq.broker_core.types import NewMessage


def _config(data_dir: Path, crash_tail_s: float = 30.0) -> BrokerConfig:
    return BrokerConfig(
        store=StoreConfig(data_dir=data_dir),
        messages=MessagesConfig(crash_tail_s=crash_tail_s),
    )


async def _send_over_time(broker: Broker, clock: ManualClock) -> None:
    """a (queue 0) at 0 s, b (queue 1) at 40 s, c (queue 1) at 55 s, d (queue 0) at 80 s:
    with a 30 s tail, c and d are within it."""
    await broker.create_topic("orders", 2)
    await broker.create_group("g")
    for name, queue_id, at_s in (("a", 0, 0), ("b", 1, 40), ("c", 1, 55), ("d", 0, 80)):
        clock.advance(at_s * 1000 - (clock.now_ms() - _START_MS))
        await broker.send(
            [
                NewMessage(
                    "orders",
                    name.encode(),
                    message_id=f"ID-{name}",
                    dedup_id=f"order-{name}" if name == "c" else "",
                    keys=(f"key-{name}",),
                    queue_id=queue_id,
                )
            ]
        )


_START_MS = 1_700_000_000_000


def test_a_clean_close_leaves_no_crash_tail(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock(_START_MS)
        broker = Broker(_config(tmp_path), clock=clock)
        await broker.start()
        assert not broker.unclean_end  # a new store
        await _send_over_time(broker, clock)
        await broker.close()
        again = Broker(_config(tmp_path), clock=clock)
        await again.start()
        try:
            assert not again.unclean_end
            assert (await again.crash_tail()) == []
        finally:
            await again.close()

    asyncio.run(scenario())


def test_after_an_unclean_end_the_tail_is_what_was_stored_within_crash_tail_s_of_the_last(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        clock = ManualClock(_START_MS)
        broker = Broker(_config(tmp_path), clock=clock)
        await broker.start()
        await _send_over_time(broker, clock)
        broker.store.close()  # crash
        await broker.close()
        clock.advance(3_600_000)  # however long it stayed down: the tail ends at its last write
        again = Broker(_config(tmp_path), clock=clock)
        await again.start()
        try:
            assert again.unclean_end
            tail = await again.crash_tail()
            assert sorted((m.message_id, m.queue_id, m.offset) for m in tail) == [
                ("ID-c", 1, 1),
                ("ID-d", 0, 1),
            ]
            by_id = {m.message_id: m for m in tail}
            assert by_id["ID-c"].dedup_id == "order-c" and by_id["ID-d"].dedup_id == ""
            assert by_id["ID-d"].keys == ("key-d",) and by_id["ID-d"].topic == "orders"
            assert by_id["ID-d"].store_time_ms == _START_MS + 80_000
        finally:
            await again.close()
        # This run ended cleanly: no tail next time, even though nothing was removed.
        third = Broker(_config(tmp_path), clock=clock)
        await third.start()
        try:
            assert not third.unclean_end and (await third.crash_tail()) == []
        finally:
            await third.close()

    asyncio.run(scenario())


def test_crash_tail_s_zero_selects_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock(_START_MS)
        broker = Broker(_config(tmp_path), clock=clock)
        await broker.start()
        await _send_over_time(broker, clock)
        broker.store.close()
        await broker.close()
        again = Broker(_config(tmp_path, crash_tail_s=0), clock=clock)
        await again.start()
        try:
            assert again.unclean_end and (await again.crash_tail()) == []
        finally:
            await again.close()

    asyncio.run(scenario())


def test_removed_tail_messages_leave_gaps_pops_step_over_and_the_queue_keeps_its_end(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        clock = ManualClock(_START_MS)
        broker = Broker(_config(tmp_path), clock=clock)
        await broker.start()
        await _send_over_time(broker, clock)
        broker.store.close()
        await broker.close()
        again = Broker(_config(tmp_path), clock=clock)
        await again.start()
        try:
            await again.remove_crash_tail(await again.crash_tail())
            assert again.lookup_sends("orders", [("ID-d", ""), ("x", "order-c")]) == [
                False,
                False,
            ]
            topic_id = again.topic_info("orders").topic_id
            assert again.store.get("index", keys.key_index_key(topic_id, "key-d", 0, 1)) is None
            assert again.store.get("index", keys.id_index_key(topic_id, "ID-c")) is None
            # Not in the tail: untouched.
            assert again.store.get("index", keys.key_index_key(topic_id, "key-b", 1, 0)) == b""
            assert again.lookup_sends("orders", [("ID-b", "")]) == [True]
        finally:
            await again.close()
        third = Broker(_config(tmp_path), clock=clock)
        await third.start()
        try:
            # d was queue 0's last message: its offset is not given to the next one.
            (new,) = await third.send([NewMessage("orders", b"e", message_id="ID-e", queue_id=0)])
            assert new.offset == 2
            popped = await third.pop("g", "orders", max_messages=10, invisible_s=60, wait_s=0)
            assert sorted(p.record.body for p in popped) == [b"a", b"b", b"e"]
            # A send of a removed message's id is a new message now (another broker holds
            # the first copy, which the proxies' lookups find there).
            (d,) = await third.send([NewMessage("orders", b"d", message_id="ID-d", queue_id=0)])
            assert not d.duplicate and d.offset == 3
        finally:
            await third.close()

    asyncio.run(scenario())


def test_a_replicating_store_keeps_no_run_marker_and_has_a_crash_tail_on_takeovers(
    tmp_path: Path,
) -> None:
    """A shard's leader writes through its replication log, which would ship the marker to
    its followers, so it keeps none: its tail is taken on every takeover instead."""

    async def persist(isr: frozenset[str]) -> None:
        return None

    def tap(store: Store) -> ReplicationLog:
        return ReplicationLog(
            store,
            shard="s1",
            epoch=1,
            isr=(),
            min_insync=0,
            buffer_bytes=1 << 20,
            lag_timeout_s=10.0,
            fenced=lambda: None,
            persist=persist,
        )

    async def scenario() -> None:
        clock = ManualClock(_START_MS)
        standalone = Broker(_config(tmp_path), clock=clock)
        await standalone.start()
        await _send_over_time(standalone, clock)
        standalone.store.close()  # an unclean end, with the marker left behind
        await standalone.close()
        leader = Broker(_config(tmp_path), tap=tap, clock=clock)
        await leader.start()
        try:
            assert not leader.unclean_end and (await leader.crash_tail()) == []
            # A shard's new leader takes its tail on a takeover, marker or not.
            tail = await leader.crash_tail(takeover=True)
            assert sorted(m.message_id for m in tail) == ["ID-c", "ID-d"]
        finally:
            await leader.close()
        # It neither wrote nor cleared the marker: the store as a standalone broker's again
        # still finds the earlier unclean end.
        again = Broker(_config(tmp_path), clock=clock)
        await again.start()
        try:
            assert again.unclean_end
        finally:
            await again.close()

    asyncio.run(scenario())


def test_open_half_messages_are_in_the_crash_tail_and_go_with_their_transaction(
    tmp_path: Path,
) -> None:
    """A half send a proxy moved off a killed broker is a second transaction there: its
    check-back would have the producer commit it. The tail holds the open halves sent within
    it (a half sent last sets where it ends), and removing one removes its transaction: no
    check, no dedup entry, and its id is unknown."""

    async def scenario() -> None:
        clock = ManualClock(_START_MS)
        config = BrokerConfig(
            store=StoreConfig(data_dir=tmp_path),
            messages=MessagesConfig(crash_tail_s=30.0),
            transactions=TransactionsConfig(check_first_s=1.0),
        )
        broker = Broker(config, clock=clock)
        await broker.start()
        await broker.create_topic("tx", 2, message_type="transaction")
        await broker.send_half([NewMessage("tx", b"old", message_id="ID-old")])  # at 0 s
        clock.advance(60_000)
        (committed,) = await broker.send_half([NewMessage("tx", b"c", message_id="ID-c")])
        await broker.end_transaction(committed.transaction_id, commit=True)
        clock.advance(10_000)
        (half,) = await broker.send_half(
            [NewMessage("tx", b"h", message_id="ID-h", dedup_id="order-h")]
        )
        clock.advance(15_000)  # the last write: 85 s; the tail starts at 55 s
        (last,) = await broker.send_half([NewMessage("tx", b"l", message_id="ID-l")])
        broker.store.close()  # crash
        await broker.close()
        again = Broker(config, clock=clock)
        await again.start()
        try:
            tail = await again.crash_tail()
            # The committed one's message is in its queue (the tail of the queues), its
            # transaction resolved: only the open halves are there as halves.
            halves = [(m.message_id, m.dedup_id, m.offset) for m in tail if m.transaction_seq]
            assert halves == [("ID-h", "order-h", -1), ("ID-l", "", -1)]
            assert [m.message_id for m in tail if not m.transaction_seq] == ["ID-c"]
            removed = [m for m in tail if m.message_id == "ID-h"]
            await again.remove_crash_tail(removed)
            assert again.lookup_sends("tx", [("x", "order-h"), ("ID-l", "")]) == [False, True]
            with pytest.raises(NotFoundError):
                await again.get_transaction(half.transaction_id)
            with pytest.raises(NotFoundError):
                await again.end_transaction(half.transaction_id, commit=True)
            assert (await again.metrics_snapshot()).transactions_open == 2  # old and last
            clock.advance(3_600_000)
            checked = await again.due_checks(32)
            assert sorted(c.message_id for c in checked) == ["ID-l", "ID-old"]
            assert last.transaction_id in {c.transaction_id for c in checked}
        finally:
            await again.close()

    asyncio.run(scenario())
