"""Transactional messages on a real store: half messages stay invisible until committed,
resolutions are final and idempotent, unresolved ones are checked on schedule, discarded
after check_max checks and resumable, and all of it survives a kill -9."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from popmq.broker_core.broker import Broker
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import BrokerConfig, StoreConfig, TransactionsConfig
from popmq.broker_core.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    OutcomeUnknownError,
)
from popmq.broker_core.handles import issuer_of
from popmq.broker_core.send import QueueChooser
from popmq.broker_core.transactions import TRANSACTION_ID_PROPERTY
from popmq.broker_core.types import NewMessage
from popmq.broker_core.validation import TRANSACTION_DISCARD_TOPIC
from tests.support.waiting import until
from tests.unit.conftest import OpenBroker, settle

FAST = TransactionsConfig(check_first_s=0.3, check_interval_s=0.3, check_max=3)
_FIRST_MS = round(FAST.check_first_s * 1000)
_INTERVAL_MS = round(FAST.check_interval_s * 1000)


async def _bodies(broker: Broker, topic: str, group: str = "g") -> list[bytes]:
    """Pop (and ack) everything visible in `topic` now."""
    popped = await broker.pop(group, topic, max_messages=32, wait_s=0)
    if popped:
        await broker.ack(group, [m.receipt_handle for m in popped])
    return [m.record.body for m in popped]


async def _stored(broker: Broker, topic: str) -> int:
    _, queues = await broker.get_topic(topic)
    return sum(q.max_offset - q.min_offset for q in queues)


def test_a_half_message_is_invisible_until_committed_then_delivered_once(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("tx", 2, message_type="transaction")
            await broker.create_group("g")
            [half] = await broker.send_half([NewMessage("tx", b"order-1")], producer_group="pg")
            assert half.offset == -1 and half.transaction_id
            assert await _bodies(broker, "tx") == []
            assert await broker.peek("tx") == []
            assert (await broker.pull("tx", half.queue_id, 0)).messages == []
            with pytest.raises(NotFoundError):
                await broker.query_message("tx", half.message_id)
            [listed] = await broker.list_transactions("open")
            assert (listed.transaction_id, listed.producer_group) == (half.transaction_id, "pg")

            info = await broker.end_transaction(half.transaction_id, commit=True)
            assert (info.state, info.resolved_by, info.offset) == ("committed", "client", 0)
            assert await _bodies(broker, "tx") == [b"order-1"]
            again = await broker.end_transaction(
                half.transaction_id, commit=True, source="server_check"
            )
            assert again == info  # a no-op: the first resolution's answer
            assert await _bodies(broker, "tx") == []
            assert await _stored(broker, "tx") == 1
            assert await broker.list_transactions("open") == []
            snapshot = await broker.metrics_snapshot()
            assert snapshot.transactions_open == 0
            assert snapshot.half_sent == {"tx": 1}
            assert snapshot.transaction_resolutions == {("commit", "client"): 1}

    asyncio.run(scenario())


def test_a_rolled_back_message_is_never_delivered_and_cannot_be_committed(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("tx", 1, message_type="transaction")
            [half] = await broker.send_half([NewMessage("tx", b"x")])
            info = await broker.end_transaction(half.transaction_id, commit=False, source="admin")
            assert (info.state, info.resolved_by) == ("rolled_back", "admin")
            assert await broker.end_transaction(half.transaction_id, commit=False) == info
            with pytest.raises(FailedPreconditionError, match="rolled back already"):
                await broker.end_transaction(half.transaction_id, commit=True)
            assert await _stored(broker, "tx") == 0
            assert await _bodies(broker, "tx") == []
            [committed] = await broker.send_half([NewMessage("tx", b"y")])
            await broker.end_transaction(committed.transaction_id, commit=True)
            with pytest.raises(FailedPreconditionError, match="committed already"):
                await broker.end_transaction(committed.transaction_id, commit=False)

    asyncio.run(scenario())


def test_concurrent_resolutions_have_exactly_one_winner(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("tx", 1, message_type="transaction")
            halves = await broker.send_half([NewMessage("tx", b"%d" % i) for i in range(6)])
            commits = 0
            for i, half in enumerate(halves):
                tid = half.transaction_id
                first, second = (True, False) if i % 2 else (False, True)
                outcomes = await asyncio.gather(
                    broker.end_transaction(tid, commit=first),
                    broker.end_transaction(tid, commit=second, source="server_check"),
                    return_exceptions=True,
                )
                failed = [o for o in outcomes if isinstance(o, BaseException)]
                assert len(failed) == 1 and isinstance(failed[0], FailedPreconditionError)
                commits += (await broker.get_transaction(tid)).state == "committed"
            # Two commits at once: both succeed, the message is stored once.
            [double] = await broker.send_half([NewMessage("tx", b"double")])
            both = await asyncio.gather(
                broker.end_transaction(double.transaction_id, commit=True),
                broker.end_transaction(double.transaction_id, commit=True, source="admin"),
            )
            assert both[0] == both[1]
            assert await _stored(broker, "tx") == commits + 1

    asyncio.run(scenario())


def test_transaction_ids_name_their_broker_and_cannot_be_forged(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("tx", 1, message_type="transaction")
            [half] = await broker.send_half([NewMessage("tx", b"x")])
            tid = half.transaction_id
            assert issuer_of(tid) == broker.config.broker_name
            name, _, payload = tid.partition(".")
            flipped = payload[:5] + ("A" if payload[5] != "A" else "B") + payload[6:]
            with pytest.raises(InvalidArgumentError, match="signature"):
                await broker.end_transaction(f"{name}.{flipped}", commit=True)
            with pytest.raises(InvalidArgumentError, match="issued by broker 'broker-b'"):
                await broker.end_transaction(f"broker-b.{payload}", commit=True)
            with pytest.raises(InvalidArgumentError, match="malformed"):
                await broker.end_transaction(tid + "x", commit=True)
            with pytest.raises(InvalidArgumentError, match="belongs to topic 'tx'"):
                await broker.end_transaction(tid, commit=True, topic="other")
            with pytest.raises(InvalidArgumentError, match="source 'proxy'"):
                await broker.end_transaction(tid, commit=True, source="proxy")
            assert (await broker.get_transaction(tid)).state == "open"

    asyncio.run(scenario())


def test_topic_types_decide_which_half_messages_they_take(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("plain", 1)
            await broker.create_topic("ordered", 4, message_type="fifo")
            await broker.create_topic("tx", 1, message_type="transaction")
            with pytest.raises(FailedPreconditionError, match="is a normal topic"):
                await broker.send_half([NewMessage("plain", b"x")])
            with pytest.raises(FailedPreconditionError, match="accepts only fifo"):
                await broker.send_half([NewMessage("ordered", b"x")])
            with pytest.raises(FailedPreconditionError, match="accepts only transactional"):
                await broker.send([NewMessage("tx", b"x")])
            with pytest.raises(InvalidArgumentError, match="check_first_s 7200"):
                await broker.send_half([NewMessage("tx", b"x")], check_first_s=7200)
            assert await broker.list_transactions("open") == []

    asyncio.run(scenario())


def test_fifo_half_messages_go_to_their_group_queue_in_commit_order(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            topic = await broker.create_topic("ordered", 4, message_type="fifo")
            first, second = await broker.send_half(
                [
                    NewMessage("ordered", b"first", message_group="order-7"),
                    NewMessage("ordered", b"second", message_group="order-7"),
                ]
            )
            queue = QueueChooser().choose(topic, "order-7")
            assert first.queue_id == second.queue_id == queue
            await broker.end_transaction(second.transaction_id, commit=True)
            await broker.end_transaction(first.transaction_id, commit=True)
            pulled = await broker.pull("ordered", queue, 0)
            assert [r.body for _, r in pulled.messages] == [b"second", b"first"]
            assert [r.message_group for _, r in pulled.messages] == ["order-7"] * 2

    asyncio.run(scenario())


def test_a_committed_delayed_half_message_waits_for_its_delivery_time(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("later", 1, message_type="delay")
            await broker.create_group("g")
            due = clock.now_ms() + 800
            [half] = await broker.send_half([NewMessage("later", b"x", deliver_at_ms=due)])
            info = await broker.end_transaction(half.transaction_id, commit=True)
            assert info.offset == -1 and info.recall_handle
            assert await _bodies(broker, "later") == []
            clock.advance(799)
            await settle()
            assert await _bodies(broker, "later") == []
            clock.advance(1)
            popped = await broker.pop("g", "later", wait_s=5)
            assert [m.record.body for m in popped] == [b"x"]
            # A delivery time already past by the commit: stored at once.
            deliver_at = clock.now_ms() + 1
            [late] = await broker.send_half([NewMessage("later", b"y", deliver_at_ms=deliver_at)])
            clock.advance(10)
            info = await broker.end_transaction(late.transaction_id, commit=True)
            assert info.offset == 1 and not info.recall_handle

    asyncio.run(scenario())


def test_unresolved_transactions_are_checked_on_schedule_then_discarded_and_resumable(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(transactions=FAST, clock=clock) as broker:
            await broker.create_topic("tx", 1, message_type="transaction")
            await broker.create_group("g")
            sent = clock.now_ms()
            [half] = await broker.send_half([NewMessage("tx", b"pay")], producer_group="pg")
            [patient] = await broker.send_half([NewMessage("tx", b"later")], check_first_s=60)
            attempts = []
            for wait_ms in [_FIRST_MS] + [_INTERVAL_MS] * (FAST.check_max - 1):
                clock.advance(wait_ms - 1)
                assert await broker.due_checks() == []  # never sooner than scheduled
                clock.advance(1)
                checks = await broker.due_checks(wait_s=5)
                assert [c.transaction_id for c in checks] == [half.transaction_id]
                assert await broker.due_checks() == []  # claimed: nobody else gets it
                attempts.append((checks[0].attempt, clock.now_ms() - sent))
                check = checks[0]
                assert (check.topic, check.producer_group, check.message.body) == (
                    "tx",
                    "pg",
                    b"pay",
                )
            assert attempts == [
                (i + 1, _FIRST_MS + i * _INTERVAL_MS) for i in range(FAST.check_max)
            ]

            async def discarded() -> bool:
                return bool(await broker.list_transactions("discarded"))

            assert not await discarded()
            clock.advance(_INTERVAL_MS)  # the check after the last is due: a discard instead
            await until(discarded, "the transaction discarded", 5.0)
            [gone] = await broker.list_transactions("discarded")
            assert (gone.transaction_id, gone.checks, gone.resolved_by) == (
                half.transaction_id,
                3,
                "check_max",
            )
            [copy] = await broker.peek(TRANSACTION_DISCARD_TOPIC)
            assert copy.record.body == b"pay" and copy.record.origin_topic == "tx"
            # A discarded one's half message is still read, as an open one's is.
            read = await broker.get_transaction(half.transaction_id, half=True)
            assert read.half_message is not None and read.half_message.body == b"pay"
            assert (await broker.get_transaction(half.transaction_id)).half_message is None
            opened = await broker.get_transaction(patient.transaction_id, half=True)
            assert opened.half_message is not None and opened.half_message.body == b"later"
            assert copy.record.properties[TRANSACTION_ID_PROPERTY] == half.transaction_id
            for commit in (True, False):
                with pytest.raises(FailedPreconditionError, match="discarded after 3"):
                    await broker.end_transaction(half.transaction_id, commit=commit)
            [still_open] = await broker.list_transactions("open")
            assert still_open.transaction_id == patient.transaction_id
            assert (await broker.metrics_snapshot()).transactions_discarded == {"tx": 1}

            resumed = await broker.resume_discarded(half.transaction_id)
            assert (resumed.state, resumed.checks) == ("open", 0)
            assert await broker.list_transactions("discarded") == []
            assert await broker.peek(TRANSACTION_DISCARD_TOPIC) == []
            with pytest.raises(FailedPreconditionError, match="not discarded"):
                await broker.resume_discarded(half.transaction_id)
            clock.advance(_FIRST_MS)
            [check] = await broker.due_checks(wait_s=5)
            assert (check.transaction_id, check.attempt) == (half.transaction_id, 1)
            await broker.end_transaction(half.transaction_id, commit=True, source="server_check")
            assert await _bodies(broker, "tx") == [b"pay"]
            # Resolved, its body is dropped: nothing to read.
            done = await broker.get_transaction(half.transaction_id, half=True)
            assert (done.state, done.half_message) == ("committed", None)
            # Resolved: never checked again.
            clock.advance(_INTERVAL_MS * 2)
            await settle()
            assert await broker.due_checks() == []
            assert [t.transaction_id for t in await broker.list_transactions("open")] == [
                patient.transaction_id
            ]

    asyncio.run(scenario())


def test_an_overdue_check_nobody_claims_does_not_keep_the_broker_busy(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(transactions=FAST, clock=clock) as broker:
            await broker.create_topic("tx", 1, message_type="transaction")
            [half] = await broker.send_half([NewMessage("tx", b"x")])
            clock.advance(_FIRST_MS + 100)  # due, and nobody claims it
            cpu, wall = time.process_time(), time.monotonic()
            await asyncio.sleep(1.0)
            # A loop spinning on the overdue entry burns a fifth of it and more (measured);
            # a sleeping one, under a thousandth.
            assert time.process_time() - cpu < 0.1 * (time.monotonic() - wall)
            [check] = await broker.due_checks()
            assert (check.transaction_id, check.attempt) == (half.transaction_id, 1)

    asyncio.run(scenario())


def test_resolved_transactions_are_forgotten_after_resolved_ttl(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        config = TransactionsConfig(resolved_ttl_s=0.2)
        async with open_broker(transactions=config, clock=clock) as broker:
            await broker.create_topic("tx", 1, message_type="transaction")
            [half] = await broker.send_half([NewMessage("tx", b"x")])
            await broker.end_transaction(half.transaction_id, commit=False)
            await broker.get_transaction(half.transaction_id)  # kept for resolved_ttl_s
            clock.advance(200)

            async def forgotten() -> bool:
                try:
                    await broker.get_transaction(half.transaction_id)
                except NotFoundError:
                    return True
                return False

            await until(forgotten, "the resolved transaction forgotten", 5.0)
            with pytest.raises(NotFoundError, match="resolved more than"):
                await broker.end_transaction(half.transaction_id, commit=True)

    asyncio.run(scenario())


def test_transactions_config_refuses_bad_ranges() -> None:
    with pytest.raises(ValueError, match="check_interval_s 0 must be positive"):
        TransactionsConfig(check_interval_s=0)
    with pytest.raises(ValueError, match=r"check_max 0 must be within 1\.\.1000"):
        TransactionsConfig(check_max=0)
    with pytest.raises(ValueError, match="max_check_first_s 1 must be at least"):
        TransactionsConfig(check_first_s=6, max_check_first_s=1)


_PRODUCER = r"""
import asyncio, sys
from pathlib import Path
from popmq.broker_core.broker import Broker
from popmq.broker_core.config import BrokerConfig, StoreConfig, TransactionsConfig
from popmq.broker_core.types import NewMessage

async def main():
    broker = Broker(BrokerConfig(
        store=StoreConfig(data_dir=Path(sys.argv[1])),
        transactions=TransactionsConfig(check_first_s=0.5),
    ))
    await broker.start()
    await broker.create_topic("tx", 1, message_type="transaction")
    committed, rolled_back, pending = await broker.send_half(
        [NewMessage("tx", b"committed"), NewMessage("tx", b"rolled-back"),
         NewMessage("tx", b"pending")]
    )
    await broker.end_transaction(committed.transaction_id, commit=True)
    await broker.end_transaction(rolled_back.transaction_id, commit=False)
    print(committed.transaction_id, rolled_back.transaction_id, pending.transaction_id,
          flush=True)
    await asyncio.sleep(3600)  # killed here, between the half send and the commit

asyncio.run(main())
"""


def test_a_kill_between_half_send_and_commit_loses_nothing_and_exposes_nothing(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [sys.executable, "-c", _PRODUCER, str(data_dir)], stdout=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None
    with proc.stdout:
        try:
            line = proc.stdout.readline().decode()
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    committed, rolled_back, pending = line.split()

    async def scenario() -> None:
        config = BrokerConfig(
            store=StoreConfig(data_dir=data_dir),
            transactions=TransactionsConfig(check_first_s=0.5),
        )
        clock = ManualClock()  # the killed broker's system time, and on
        broker = Broker(config, clock=clock)
        await broker.start()
        try:
            await broker.create_group("g")
            assert await _bodies(broker, "tx") == [b"committed"]
            [listed] = await broker.list_transactions("open")
            assert listed.transaction_id == pending
            assert (await broker.metrics_snapshot()).transactions_open == 1
            clock.advance(500)  # check_first_s after the half send, at the latest
            [check] = await broker.due_checks(wait_s=5)
            assert (check.transaction_id, check.message.body) == (pending, b"pending")
            assert (await broker.get_transaction(rolled_back)).state == "rolled_back"
            with pytest.raises(FailedPreconditionError):
                await broker.end_transaction(rolled_back, commit=True)
            await broker.end_transaction(pending, commit=True, source="server_check")
            await broker.end_transaction(committed, commit=True)  # a client retry: no-op
            assert await _bodies(broker, "tx") == [b"pending"]
            assert await _stored(broker, "tx") == 2
        finally:
            await broker.close()

    asyncio.run(scenario())


def test_a_retried_commit_is_answered_only_once_the_first_ones_write_is_durable(
    open_broker: OpenBroker,
) -> None:
    """The commit's batch was written but its fsync failed (the caller is told the outcome
    is unknown, and retries): the retry finds the transaction committed in the store, yet
    must not say so before an fsync makes that durable, nor while fsyncs keep failing."""

    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("tx", 1, message_type="transaction")
            [half] = await broker.send_half([NewMessage("tx", b"o")], producer_group="pg")
            real_sync = broker.store.sync_wal
            syncs: list[bool] = []
            failing = True

            def sync_wal() -> None:
                syncs.append(failing)
                if failing:
                    raise OutcomeUnknownError("the store could not sync (injected)")
                real_sync()

            broker.store.sync_wal = sync_wal  # type: ignore[method-assign]
            with pytest.raises(OutcomeUnknownError):
                await broker.end_transaction(half.transaction_id, commit=True)
            with pytest.raises(OutcomeUnknownError):
                await broker.end_transaction(half.transaction_id, commit=True)
            assert syncs == [True, True]  # the retry ran an fsync of its own, which failed
            failing = False
            info = await broker.end_transaction(half.transaction_id, commit=True)
            assert info.state == "committed" and syncs == [True, True, False]
            again = await broker.end_transaction(half.transaction_id, commit=True)
            assert again.state == "committed" and syncs == [True, True, False]  # no doubt left

    asyncio.run(scenario())
