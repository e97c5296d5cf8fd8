"""Offsets held back on a replicating leader: a failed barrier's sends become visible once
a follower rejoins the in-sync set, with no new send; a batch a failed fsync lost after it
was shipped keeps its offsets (the followers may hold it under them).

Real broker on a real store whose tap is the real ReplicationLog with one in-sync follower
r2, whose acknowledgements the test gives (as its stream would).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from popmq.broker_core import keys
from popmq.broker_core.errors import OutcomeUnknownError, PopMQError
from popmq.broker_core.types import NewMessage
from tests.support.waiting import until
from tests.unit.broker_core.test_duplicate_durability import _send, _shard
from tests.unit.broker_core.test_failed_fsync_visibility import _Fsyncs


def test_a_send_held_by_a_failed_barrier_is_delivered_once_a_follower_rejoins(
    data_dir: Path,
) -> None:
    """The send's wait fails (r2 leaves: too few in sync), an ack's batch then completes
    with nobody in sync, r2 rejoins and nothing more is sent: the message held back becomes
    poppable, and its retry is answered as a duplicate of it."""

    async def scenario() -> None:
        async with _shard(data_dir) as shard:
            log, broker = shard.log, shard.broker
            assert await broker.pop("g", "orders", wait_s=0) == []  # the group exists
            shard.acking.clear()
            first = _send(broker, b"first")
            await until(lambda: log.lsn > shard.r2.acked, "the send written", 10)
            log.disconnected(shard.r2, "killed")
            with pytest.raises(OutcomeUnknownError, match="lost in-sync followers"):
                await first
            # A batch that is not a send's (a new group) completes with no follower in sync.
            assert await broker.pop("other", "orders", wait_s=0) == []
            assert await broker.pop("g", "orders", wait_s=0) == []  # still held back
            r2 = log.connected("r2", log.lsn)
            log.acked(r2, log.lsn)
            await until(lambda: log.isr == {"r2"}, "r2 back in sync", 10)
            (got,) = await broker.pop("g", "orders", wait_s=5)
            assert (got.offset, got.record.body) == (0, b"first")
            (retry,) = await asyncio.wait_for(_send(broker, b"retry"), 10)
            assert retry.duplicate and retry.offset == 0

    asyncio.run(scenario())


def test_offsets_a_reopened_leader_lost_after_shipping_them_are_not_given_again(
    data_dir: Path,
) -> None:
    """A batch whose fsync failed was shipped to r2 when it was written; the reopened store
    lost it. The next message goes past its offsets (a message written there would
    overwrite r2's copy while r2's id and key entries kept pointing at the lost one), and
    readers step over the gap once a message lies past it."""

    async def scenario() -> None:
        async with _shard(data_dir) as shard:
            broker = shard.broker
            store = broker.store
            assert await broker.pop("g", "orders", wait_s=0) == []  # the group exists
            await broker.send([NewMessage("orders", b"durable")])
            fsyncs = _Fsyncs(broker, through_store=True)
            fsyncs.failing = True
            with pytest.raises(PopMQError):
                await broker.send([NewMessage("orders", b"lost")])
            fsyncs.failing = False
            generation = store.generation
            await until(
                lambda: store.batch().generation > generation and not store.read_only,
                "the store reopened",
                10,
            )
            # What the reopened store lost of the failed batch.
            topic_id = broker.catalog.topic("orders").topic_id
            loss = store.batch()
            loss.delete("messages", keys.message_key(topic_id, 0, 1))
            store.write(loss, sync=True)
            # A write after the reopen (a new group's) lets the writer see the store again.
            await broker.pop("other", "orders", wait_s=0)
            assert (await broker.pull("orders", 0, 0)).max_offset == 1  # the store's end
            (new,) = await broker.send([NewMessage("orders", b"new")])
            assert new.offset == 2
            pulled = await broker.pull("orders", 0, 0)
            assert [(o, r.body) for o, r in pulled.messages] == [(0, b"durable"), (2, b"new")]
            got = await broker.pop("g", "orders", max_messages=8, wait_s=0)
            assert [(m.offset, m.record.body) for m in got] == [(0, b"durable"), (2, b"new")]

    asyncio.run(scenario())
