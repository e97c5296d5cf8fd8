"""Acks of handles issued before a kill -9, sent to the restarted server.

A pop's checkpoint stays in the in-memory buffer for a while (10 s by default); a kill -9
loses it, the consumer offset never passed the message, and the restarted server pops it
again as attempt 1. An ack of the pre-crash handle must then be an explicit error, not a
silent success, while an ack of a handle whose message was acked (and recorded) before the
crash stays OK.

The server keeps checkpoints buffered for an hour here (and the pop is invisible as long),
far past the test's timeout, so no slow machine can have the checkpoint persisted before the
kill; the restart's recovery count shows that it was not. (The same scenario with a
ManualClock: tests/unit/broker_core/test_broker_ack_after_crash.py.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from popmq import AsyncAdmin, AsyncProducer, AsyncSimpleConsumer, FailedPreconditionError
from tests.support.server_process import ServerProcess

_HOLD_S = 3600.0
"""The server's ck_buffer_time_s and m1's invisible time: m1's checkpoint is persisted only
after this (or this less ck_persist_ahead_s), never within the test's timeout."""


async def _ack_across_kill(data_dir: Path) -> None:
    server = ServerProcess(
        data_dir / "store",
        flush="sync",
        log_path=data_dir / "server.log",
        extra_args=("--set", f"pop.ck_buffer_time_s={_HOLD_S}"),
    )
    await server.start()
    try:
        endpoint = server.holder.address
        async with AsyncAdmin(endpoint) as admin:
            await admin.create_topic("t", queues=1)
            await admin.create_group("g")
        async with (
            AsyncProducer(endpoint) as producer,
            AsyncSimpleConsumer(endpoint, group="g", topic="t") as consumer,
        ):
            await producer.send("t", b"m0")
            [m0] = await consumer.receive(invisible_duration_s=300, wait_s=5)
            await consumer.ack(m0)
            # A synced send after the ack: the offset write the ack scheduled is in this
            # batch or an earlier one, so the ack of m0 is on disk before the kill.
            await producer.send("t", b"m1")
            [m1] = await consumer.receive(invisible_duration_s=_HOLD_S, wait_s=5)
        await server.kill()
        restarted = await server.start()
        # m0's checkpoint was acked, m1's only buffered: the kill left none to recover.
        assert restarted.recovered_checkpoints == 0
        endpoint = server.holder.address
        async with AsyncSimpleConsumer(endpoint, group="g", topic="t") as consumer:
            with pytest.raises(FailedPreconditionError, match="no longer tracked") as lost:
                await consumer.ack(m1)
            assert "restarted" in lost.value.message
            assert "delivered again" in lost.value.message
            await consumer.ack(m0)  # acked and recorded before the crash: still OK

            [again] = await consumer.receive(invisible_duration_s=300, wait_s=5)
            assert (again.body, again.delivery_attempt) == (b"m1", 1)
            assert again.receipt_handle != m1.receipt_handle
            # Popped again: the old handle still does not ack it.
            with pytest.raises(FailedPreconditionError, match="no longer tracked"):
                await consumer.ack(m1)
            await consumer.ack(again)
            await consumer.ack(again)  # a repeated ack of a valid handle is idempotent
            assert await consumer.receive(invisible_duration_s=300, wait_s=1) == []
        assert await server.stop() == 0
    finally:
        if server.running:
            await server.kill()


def test_ack_of_a_handle_lost_in_a_kill_is_an_error_and_the_message_comes_back(
    tmp_path: Path,
) -> None:
    asyncio.run(_ack_across_kill(tmp_path))
