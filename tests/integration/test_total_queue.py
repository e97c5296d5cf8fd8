"""Total-queue durability under kill -9: the chaos checker (tests/chaos/checker.py) in CI.

The checker tests run the real server as a subprocess and SIGKILL it three times while
producers send unique ids and consumers pop and ack them, then drain and check the history.
Sizes are small so that the file stays well under a minute and a half on a 2-core machine;
the large setting is run by hand (``python -m tests.chaos.checker --help``). Run with ``-s``
to see the summaries. The last test is a step-by-step reproduction of a crash-recovery bug
the checker found (an acked message delivered again after kill -9, a nack and a restart),
kept as a regression test; its nack delay outlasts the test, and the part that waits for
the delay runs in process with a ManualClock (tests/unit/broker_core/test_live_checkpoints.py).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from popmq import AsyncAdmin, AsyncProducer, AsyncSimpleConsumer, Message, SendReceipt
from tests.chaos.checker import CheckConfig, CheckResult, History, check, evaluate
from tests.support.server_process import ServerProcess


def _run(config: CheckConfig) -> CheckResult:
    result = check(config)
    print()
    print(result.summary())
    return result


@pytest.mark.slow
def test_sync_flush_loses_no_acknowledged_send_across_kill_minus_9(tmp_path: Path) -> None:
    result = _run(
        CheckConfig(
            messages=3000,
            kills=3,
            producers=2,
            consumers=2,
            flush="sync",
            seed=20261121,
            data_dir=tmp_path,
            drain_timeout_s=45,
        )
    )
    summary = result.summary()
    assert result.kills == 3, summary
    assert len(result.restarts_after_kill) == 3, summary
    assert result.acknowledged >= 0.9 * result.attempted, summary
    assert result.lost == [], summary
    assert result.unexpected == [], summary
    assert result.offset_conflicts == [], summary
    assert result.drained, summary
    assert result.clean_stop_exit_code == 0, summary
    assert result.ok, summary


def test_crashing_consumers_unacked_messages_come_back(tmp_path: Path) -> None:
    result = _run(
        CheckConfig(
            messages=2000,
            kills=3,
            producers=2,
            consumers=3,
            flush="sync",
            crashing_consumers=True,
            abandon_probability=0.3,
            seed=7,
            data_dir=tmp_path,
            drain_timeout_s=45,
        )
    )
    summary = result.summary()
    assert result.kills == 3, summary
    # The run did exercise abandoned batches, and they came back with a higher attempt.
    assert result.abandoned_deliveries > 0, summary
    assert result.max_delivery_attempt >= 2, summary
    assert result.given_back_never_returned == [], summary
    assert result.lost == [], summary
    assert result.unexpected == [], summary
    assert result.ok, summary


def test_async_flush_reports_its_losses(tmp_path: Path) -> None:
    result = _run(
        CheckConfig(
            messages=2000,
            kills=3,
            producers=2,
            consumers=2,
            flush="async",
            seed=303,
            data_dir=tmp_path,
            drain_timeout_s=45,
        )
    )
    summary = result.summary()
    # kill -9 keeps what the OS buffered, so async flush usually loses nothing here either;
    # a power loss could. Only report the number; never tolerate made-up messages.
    print(f"async flush: {len(result.lost)} acknowledged sends lost after {result.kills} kills")
    assert result.kills == 3, summary
    assert result.unexpected == [], summary
    assert result.drained, summary


def test_the_checker_itself_flags_lost_unexpected_and_duplicate_ids() -> None:
    """A checker that cannot fail proves nothing: feed it a history with every anomaly."""
    history = History()
    ids = [f"p0-{n:07d}" for n in range(6)]
    history.sending(ids)
    history.sent(ids[:4], [SendReceipt(i, "t", 0, n) for n, i in enumerate(ids[:4])])
    history.sent(ids[4:5], [SendReceipt(ids[4], "t", 0, 3)])  # reuses offset 3
    history.send_failed(ids[5:], "UNAVAILABLE")
    history.processed.update({ids[0]: 2, ids[1]: 1, ids[5]: 1, "p9-0000000": 1})
    history.abandoned.update({ids[2]: 1, ids[1]: 1})
    history.attempts.update({1: 4, 2: 1})
    result = CheckResult(config=CheckConfig(), seed=0, data_dir="")
    evaluate(history, result)
    assert result.lost == [ids[2], ids[3], ids[4]]
    assert result.unexpected == ["p9-0000000"]
    assert result.duplicate_ids == 1 and result.duplicate_deliveries == 1
    assert result.indeterminate == 1 and result.indeterminate_appeared == 1
    assert result.given_back_never_returned == [ids[2]]
    assert result.offset_conflicts == [f"queue0@3:{ids[3]}+{ids[4]}"]
    assert Counter(result.delivery_attempts) == Counter({1: 4, 2: 1})
    assert "3 acknowledged sends lost" in result.violations
    assert "FAIL" in result.summary()


_HOLD_S = 3600.0
"""The server's ck_buffer_time_s, the pop's invisible time and m1's nack delay: far past the
test's timeout, so however slow the machine, the pop's checkpoint is still only buffered at
the kill and m1 is still owned by its nack's checkpoint at every pop here. Its return after
the delay (as attempt 2, once) and that nothing comes back once it is acked are checked in
process, with a ManualClock that passes the delay at once: the twin of this test in
tests/unit/broker_core/test_live_checkpoints.py."""


async def _nack_kill_ack_then_clean_restart(data_dir: Path) -> list[tuple[bytes, int]]:
    """The reproduction of the orphaned-Nack-checkpoint bug, step by step, through the real
    server's kill -9 and clean restarts.

    Returns what a pop delivers after the last clean restart (nothing, if acks are kept and
    the nacked message stays invisible until its delay ends).
    """
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
            # m0 popped and acked: the group's committed offset of the queue is stored.
            await producer.send("t", b"m0")
            await consumer.ack(await consumer.receive(invisible_duration_s=30, wait_s=5))
            # m1 and m2 in one pop; its checkpoint stays buffered (for _HOLD_S).
            await producer.send_batch("t", [Message(b"m1"), Message(b"m2")])
            m1, m2 = await consumer.receive(invisible_duration_s=_HOLD_S, wait_s=5)
            assert (m1.body, m2.body) == (b"m1", b"m2")
            # Nack m1: a new one-message checkpoint, persisted before the nack returns.
            await consumer.nack(m1, delay_s=_HOLD_S)
        await server.kill()  # the buffered checkpoint of m1+m2 is lost; the nack's is not
        assert (await server.start()).recovered_checkpoints == 1  # the nack's
        endpoint = server.holder.address
        async with AsyncSimpleConsumer(endpoint, group="g", topic="t") as consumer:
            again = await consumer.receive(invisible_duration_s=30, wait_s=5)
            # m2's delivery was lost with the buffered checkpoint: popped again. m1 stays
            # owned by its nack's persisted checkpoint and is not popped twice.
            assert [(m.body, m.delivery_attempt) for m in again] == [(b"m2", 1)]
            await consumer.ack(again)
        assert await server.stop() == 0
        # A clean restart keeps the nack's checkpoint (m1 still waits for its delay) and
        # m2's ack: neither message is delivered now.
        assert (await server.start()).recovered_checkpoints == 1
        async with AsyncSimpleConsumer(server.holder.address, group="g", topic="t") as consumer:
            assert await consumer.receive(invisible_duration_s=30, wait_s=1) == []
        async with AsyncAdmin(server.holder.address) as admin:
            rows = await admin.get_group_lag("g", "t")
        assert sum(r.inflight for r in rows) == 1  # m1, until its nack delay ends
        assert await server.stop() == 0
        assert (await server.start()).recovered_checkpoints == 1
        async with AsyncSimpleConsumer(server.holder.address, group="g", topic="t") as consumer:
            after = await consumer.receive(invisible_duration_s=30, wait_s=3)
            if after:
                await consumer.ack(after)
        assert await server.stop() == 0
        return [(m.body, m.delivery_attempt) for m in after]
    finally:
        if server.running:
            await server.kill()


def test_an_acked_message_is_not_delivered_again_after_kill_nack_and_clean_restart(
    tmp_path: Path,
) -> None:
    redelivered = asyncio.run(_nack_kill_ack_then_clean_restart(tmp_path))
    assert redelivered == []
