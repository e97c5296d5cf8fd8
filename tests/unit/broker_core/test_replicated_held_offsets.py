"""Offsets held back on a replicating leader: a failed barrier's sends become visible once
a follower rejoins the in-sync set, with no new send.

Real broker on a real store whose tap is the real ReplicationLog with one in-sync follower
r2, whose acknowledgements the test gives (as its stream would).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from popmq.broker_core.errors import OutcomeUnknownError
from tests.support.waiting import until
from tests.unit.broker_core.test_duplicate_durability import _send, _shard


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
