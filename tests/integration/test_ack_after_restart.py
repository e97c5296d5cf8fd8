"""Acks of handles issued before a kill -9, sent to the restarted server.

A pop's checkpoint stays in the in-memory buffer for up to 10 s; a kill -9 loses it, the
consumer offset never passed the message, and the restarted server pops it again as attempt
1. An ack of the pre-crash handle must then be an explicit error, not a silent success,
while an ack of a handle whose message was acked (and recorded) before the crash stays OK.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from popmq import AsyncAdmin, AsyncProducer, AsyncSimpleConsumer, FailedPreconditionError
from tests.support.server_process import ServerProcess

_BUFFER_S = 10.0
"""The server's default ck_buffer_time_s: a checkpoint older than this may be persisted."""


async def _ack_across_kill(data_dir: Path) -> None:
    server = ServerProcess(data_dir / "store", flush="sync", log_path=data_dir / "server.log")
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
            [m1] = await consumer.receive(invisible_duration_s=300, wait_s=5)
            popped_at = time.monotonic()
        await server.kill()
        if time.monotonic() - popped_at >= _BUFFER_S:
            pytest.skip("too slow: m1's checkpoint may have been persisted before the kill")
        await server.start()
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
