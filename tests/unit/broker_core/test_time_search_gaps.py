"""Searches by store time over a queue with gaps, on the real store.

Removing a crash tail (crash_tail.py) can leave a gap between messages a queue keeps, and
past its last one. Store times still grow with offsets, so a missing offset counts as the
message stored after it: retention, offsets at a time, a group starting at a timestamp, the
lag's oldest unacked message and a topic's newest store time all see the stored messages
as if the gap were not there.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from popmq.broker_core.broker import Broker
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import BrokerConfig, MessagesConfig, StoreConfig
from popmq.broker_core.types import GroupSettings, NewMessage, Subscription

_START_MS = 1_700_000_000_000


def _config(data_dir: Path) -> BrokerConfig:
    return BrokerConfig(
        store=StoreConfig(data_dir=data_dir), messages=MessagesConfig(crash_tail_s=30.0)
    )


async def _restart_with_gaps(data_dir: Path, clock: ManualClock) -> Broker:
    """Queue 0: a at 0 s, b at 100 s, c at 110 s, d at 120 s; queue 1: x at 0 s, y at 115 s.
    The run ends uncleanly and the restart removes c (a gap between b and d) and y (a gap
    past x, the queue's last)."""
    broker = Broker(_config(data_dir), clock=clock)
    await broker.start()
    await broker.create_topic("t", 2)
    sends = (("a", 0, 0), ("x", 1, 0), ("b", 0, 100), ("c", 0, 110), ("y", 1, 115), ("d", 0, 120))
    for name, queue_id, at_s in sends:
        clock.advance(_START_MS + at_s * 1000 - clock.now_ms())
        await broker.send(
            [NewMessage("t", name.encode(), message_id=f"ID-{name}", queue_id=queue_id)]
        )
    broker.store.close()  # crash: the clean close never runs
    await broker.close()
    again = Broker(_config(data_dir), clock=clock)
    await again.start()
    gone = [m for m in (await again.crash_tail()) if m.message_id in ("ID-c", "ID-y")]
    assert len(gone) == 2
    await again.remove_crash_tail(gone)
    return again


def test_time_searches_treat_a_gap_as_the_message_stored_after_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock(_START_MS)
        broker = await _restart_with_gaps(tmp_path, clock)
        try:
            at = dict(await broker.offsets_at("t", _START_MS + 50_000))
            assert at == {0: 1, 1: 2}  # b; nothing in queue 1 is that new
            assert dict(await broker.offsets_at("t", _START_MS + 105_000)) == {0: 3, 1: 2}
            assert dict(await broker.offsets_at("t", _START_MS + 121_000)) == {0: 4, 1: 2}

            # A new group starting at 50 s reads b and d, and nothing of queue 1.
            since = GroupSettings(
                subscriptions=(Subscription("t"),),
                consume_from="timestamp",
                consume_from_ms=_START_MS + 50_000,
            )
            await broker.create_group_with_settings("since", settings=since)
            popped = await broker.pop("since", "t", max_messages=10, invisible_s=60, wait_s=0)
            assert sorted(p.record.body for p in popped) == [b"b", b"d"]

            # A group whose offset sits on the gap: its oldest unacked message is d.
            await broker.commit_offsets("reader", "t", [(0, 2)])
            report = await broker.lag_report("reader", "t")
            oldest = {b.lag.queue_id: b.oldest_unacked_ms for b in report.queues}
            assert oldest[0] == _START_MS + 120_000

            # Queue 1's end lies past the gap y left: its newest message is x.
            _, queues, _ = await broker.describe_topic("t")
            assert [(q.max_offset, q.last_store_ms) for q in queues] == [
                (4, _START_MS + 120_000),
                (2, _START_MS),
            ]

            # Retention with its cutoff at 50 s deletes a and x only; b and d stay.
            retention_ms = round(broker.config.retention.retention_s * 1000)
            deleted = await broker.apply_retention(_START_MS + 50_000 + retention_ms)
            assert deleted == 2
            topic_id = broker.topic_info("t").topic_id
            assert broker.offsets.min_offset(topic_id, 0) == 1
            pulled = await broker.pull("t", 0, 0, 10)
            assert [r.body for _, r in pulled.messages] == [b"b", b"d"]
        finally:
            await broker.close()

    asyncio.run(scenario())
