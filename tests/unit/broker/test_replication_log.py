"""The leader's replication log on a real store: positions, what a follower is sent, the
in-sync wait, fencing.

The in-sync set's etcd writes are a recording function here (tests/cluster/test_replication.py
runs the real thing); everything else is the real Store and ReplicationLog.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from popmq.broker.replication import oplog
from popmq.broker.replication.log import NotEnoughReplicasError, ReplicationLog
from popmq.broker_core.errors import OutcomeUnknownError, UnavailableError
from popmq.broker_core.store import Batch, Store


class _Harness:
    def __init__(
        self,
        path: Path,
        *,
        min_insync: int = 1,
        isr: tuple[str, ...] = (),
        buffer_bytes: int = 1 << 20,
        epoch: int = 7,
        store: Store | None = None,
        promise_s: float = 0.0,
    ) -> None:
        self.store = store or Store(path)
        self.persisted: list[frozenset[str]] = []
        self.fence: str | None = None
        self.persist_gate = asyncio.Event()
        self.persist_gate.set()

        async def persist(isr: frozenset[str]) -> None:
            await self.persist_gate.wait()
            self.persisted.append(isr)

        self.log = ReplicationLog(
            self.store,
            shard="s1",
            epoch=epoch,
            isr=isr,
            min_insync=min_insync,
            buffer_bytes=buffer_bytes,
            lag_timeout_s=10.0,
            fenced=lambda: self.fence,
            persist=persist,
            promise_s=promise_s,
        )
        self.store.tap = self.log

    def send(self) -> tuple[Batch, asyncio.Future[None]]:
        """A send's batch, written synced: it and its wait for the in-sync followers."""
        batch = self.store.batch()
        batch.put("messages", b"k", b"v")
        batch.quorum = True
        self.store.write(batch, sync=True)
        waiting = self.log.barrier(batch, True)
        assert waiting is not None
        return batch, waiting

    def write(self, value: bytes, *, quorum: bool = False) -> int:
        batch = self.store.batch()
        batch.put("messages", b"k" + value, value)
        batch.quorum = quorum
        self.store.write(batch, sync=False)
        return batch.lsn


def test_every_write_gets_the_next_position_stored_with_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = _Harness(tmp_path / "db", min_insync=0)
        assert [h.write(b"a"), h.write(b"b")] == [1, 2]
        assert oplog.read_position(h.store) == (7, 2)
        assert oplog.read_epochs(h.store) == [(7, 1)]
        entries = h.log.entries_from(2)
        assert entries is not None and [e.lsn for e in entries] == [2]
        ops = oplog.decode(entries[0].ops)
        assert ops[0] == (0, "messages", b"kb", b"b")
        assert any(op[2] == oplog.POSITION_KEY for op in ops)
        h.store.close()

    asyncio.run(scenario())


def test_a_send_waits_for_every_in_sync_follower(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = _Harness(tmp_path / "db", isr=("r2", "r3"))
        r2 = h.log.connected("r2", 0)
        r3 = h.log.connected("r3", 0)
        batch, waiting = h.send()
        h.log.acked(r2, batch.lsn)
        await asyncio.sleep(0)
        assert not waiting.done()
        h.log.acked(r3, batch.lsn)
        await asyncio.sleep(0)
        assert waiting.done() and waiting.exception() is None
        assert h.log.acknowledged_lsn == batch.lsn
        h.store.close()

    asyncio.run(scenario())


def test_sends_are_refused_with_too_few_in_sync_followers(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = _Harness(tmp_path / "db", min_insync=1)
        with pytest.raises(NotEnoughReplicasError, match=r"0 in-sync follower.*min_insync = 1"):
            h.log.admit_send()
        # Acks and pops still write: a batch without sends completes with the leader alone.
        batch = h.store.batch()
        batch.put("checkpoints", b"c", b"1")
        h.store.write(batch, sync=True)
        waiting = h.log.barrier(batch, True)
        assert waiting is not None
        await asyncio.sleep(0)
        assert waiting.done() and waiting.exception() is None
        h.store.close()

    asyncio.run(scenario())


def test_a_follower_leaves_in_etcd_before_sends_stop_waiting_for_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = _Harness(tmp_path / "db", min_insync=0, isr=("r2",))
        r2 = h.log.connected("r2", 0)
        _, waiting = h.send()
        h.persist_gate.clear()  # etcd is slow to take the smaller set
        h.log.disconnected(r2, "killed")
        await asyncio.sleep(0.01)
        assert not waiting.done(), "completed before etcd knew r2 left"
        h.persist_gate.set()
        await asyncio.sleep(0.01)
        assert h.persisted == [frozenset()]
        assert waiting.done() and waiting.exception() is None
        h.store.close()

    asyncio.run(scenario())


def test_a_send_fails_when_the_isr_shrinks_below_min_insync_while_it_waits(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        h = _Harness(tmp_path / "db", min_insync=1, isr=("r2",))
        r2 = h.log.connected("r2", 0)
        _, waiting = h.send()
        h.log.disconnected(r2, "killed")
        await asyncio.sleep(0.01)
        assert isinstance(waiting.exception(), OutcomeUnknownError)
        assert "may or may not be stored" in str(waiting.exception())
        h.store.close()

    asyncio.run(scenario())


def test_a_caught_up_follower_joins_and_pending_sends_wait_for_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = _Harness(tmp_path / "db", min_insync=0)
        first = h.write(b"a", quorum=True)
        r2 = h.log.connected("r2", 0)
        h.log.acked(r2, first)
        await asyncio.sleep(0.01)
        assert h.log.isr == {"r2"} and h.persisted == [frozenset({"r2"})]
        batch = h.store.batch()
        batch.put("messages", b"k2", b"v")
        batch.quorum = True
        h.store.write(batch, sync=True)
        waiting = h.log.barrier(batch, True)
        assert waiting is not None
        await asyncio.sleep(0)
        assert not waiting.done()
        h.log.acked(r2, batch.lsn)
        await asyncio.sleep(0)
        assert waiting.done()
        h.store.close()

    asyncio.run(scenario())


def test_a_fenced_leader_writes_nothing_and_fails_what_waits(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = _Harness(tmp_path / "db", min_insync=0, isr=("r2",))
        r2 = h.log.connected("r2", 0)
        batch, waiting = h.send()
        h.fence = "its leader lease lapsed"
        h.log.acked(r2, batch.lsn)  # the follower's ack arrives after the lease lapsed
        assert isinstance(waiting.exception(), UnavailableError)
        with pytest.raises(UnavailableError, match="no longer its leader"):
            h.write(b"late")
        assert oplog.read_position(h.store) == (7, batch.lsn)
        assert h.store.get("messages", b"klate") is None
        h.store.close()

    asyncio.run(scenario())


def test_a_follower_gets_the_tail_from_its_lsn_in_order_after_the_buffer_trimmed(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        # ~1 KiB a batch, 20 KiB kept: the oldest batches are dropped from memory.
        h = _Harness(tmp_path / "db", min_insync=0, buffer_bytes=20 * 1024)
        for n in range(100):
            h.write(b"%03d" % n + b"v" * 500)  # key and value: ~1 KiB
        assert h.log.lsn == 100
        first = next(start for start in range(1, 101) if h.log.entries_from(start) is not None)
        assert 1 < first < 90, "the buffer should have dropped the oldest batches"
        for start in (first, first + 1, 95, 100):
            entries = h.log.entries_from(start)
            assert entries is not None
            assert [e.lsn for e in entries] == list(range(start, 101))
            assert all(e.epoch == 7 for e in entries)
            keys = [oplog.decode(e.ops)[0][2][:4] for e in entries]
            assert keys == [b"k%03d" % (lsn - 1) for lsn in range(start, 101)]
        assert h.log.entries_from(101) == []
        assert h.log.entries_from(first - 1) is None, "older than the buffer: a snapshot"
        h.store.close()

    asyncio.run(scenario())


def test_a_new_term_sends_a_snapshot_to_a_follower_behind_its_own_start(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = _Harness(tmp_path / "db", min_insync=0)
        for n in range(5):
            h.write(b"%d" % n)
        # A new leadership on the same store: its memory starts empty at lsn 5.
        again = _Harness(tmp_path / "db", min_insync=0, epoch=8, store=h.store)
        assert again.log.lsn == 5
        assert again.log.entries_from(3) is None
        assert again.log.entries_from(6) == []
        assert again.write(b"5") == 6
        entries = again.log.entries_from(6)
        assert entries is not None
        assert [(e.lsn, e.epoch) for e in entries] == [(6, 8)]
        assert again.log.entries_from(5) is None
        h.store.close()

    asyncio.run(scenario())


def test_the_epoch_history_tells_where_a_returning_replica_diverged() -> None:
    history = [(3, 1), (9, 120), (15, 300)]
    assert oplog.end_of_epoch(history, 3, 500) == 119
    assert oplog.end_of_epoch(history, 9, 500) == 299
    assert oplog.end_of_epoch(history, 15, 500) == 500
    assert oplog.end_of_epoch(history, 5, 500) is None
    ops = [(0, "messages", b"k", b"v" * 3), (1, "index", b"gone", b""), (2, "offsets", b"a", b"z")]
    assert oplog.decode(oplog.encode(ops)) == ops
    with pytest.raises(ValueError, match="corrupt"):
        oplog.decode(b"\x09" + oplog.encode(ops)[1:])


def test_a_closing_leaders_streams_end_once_no_write_waits_for_the_followers(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        h = _Harness(tmp_path / "db", isr=("r2",))
        r2 = h.log.connected("r2", 0)
        batch, waiting = h.send()
        # A stream that sent everything waits for the log to grow, however long.
        grown = asyncio.ensure_future(h.log.wait_grown(batch.lsn))
        await asyncio.sleep(0.01)
        assert not grown.done() and not h.log.streams_may_end(batch.lsn + 1)
        h.log.close_streams()
        await asyncio.sleep(0.01)
        # Closing: the write in flight still needs r2's ack, so the stream goes on...
        assert not grown.done() and not h.log.streams_may_end(batch.lsn + 1)
        assert not h.log.streams_may_end(batch.lsn)  # ...and one behind sends the rest first
        h.log.acked(r2, batch.lsn)
        await asyncio.wait_for(grown, 5)  # ...until it is acknowledged: then it may end
        assert waiting.done() and waiting.exception() is None
        assert h.log.streams_may_end(batch.lsn + 1)
        h.store.close()

    asyncio.run(scenario())


def test_promises_cover_every_follower_etcd_may_name_in_sync_counted_from_the_send(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        h = _Harness(tmp_path / "db", isr=("r2",), promise_s=2.0)
        # Nothing answered yet: r2 may be elected once the leader's lease is gone.
        assert h.log.promised(0.0) == "in-sync follower r2's lease promise ran out"
        r2 = h.log.connected("r2", 0)
        r2.beats.update({1: 100.0, 2: 101.0})
        h.log.heartbeat_answered(r2, 2)
        assert r2.beats == {}  # the earlier one is answered by the later one
        assert h.log.promised(102.9) is None
        assert h.log.promised(103.0) is not None  # 101 (sent) + 2
        # An unknown or stale answer renews nothing.
        h.log.heartbeat_answered(r2, 1)
        assert h.log.promised(103.0) is not None

        # r3 joins: its etcd write fails, but may have landed, so r3's promise counts too.
        r3 = h.log.connected("r3", 0)
        r2.beats[3] = 200.0
        h.log.heartbeat_answered(r2, 3)

        async def timed_out(isr: frozenset[str]) -> None:
            raise TimeoutError("etcd did not answer")

        h.log._persist = timed_out
        await h.log._join("r3")
        assert "r3" not in h.log.isr
        assert h.log.promised(201.0) == "in-sync follower r3's lease promise ran out"
        r3.beats[1] = 200.5
        h.log.heartbeat_answered(r3, 1)
        assert h.log.promised(201.0) is None
        h.store.close()

    asyncio.run(scenario())


def test_with_no_follower_in_sync_only_the_leader_is_electable(tmp_path: Path) -> None:
    h = _Harness(tmp_path / "db", min_insync=0, promise_s=2.0)
    assert h.log.promised(1e9) is None
    h.store.close()


def _repeat(h: _Harness) -> Batch:
    """The empty batch of a send whose every message is a duplicate (nothing written)."""
    batch = h.store.batch()
    batch.quorum = True
    return batch


def test_a_repeat_waits_until_the_followers_hold_what_an_earlier_term_left(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        h = _Harness(tmp_path / "db", min_insync=0)
        lsn = h.write(b"a", quorum=True)  # an earlier term wrote it; no wait completed
        again = _Harness(tmp_path / "db", isr=("r3",), epoch=8, store=h.store)
        r3 = again.log.connected("r3", lsn - 1)
        waiting = again.log.barrier(_repeat(again), False)
        assert waiting is not None
        await asyncio.sleep(0)
        assert not waiting.done(), "a repeat was answered before r3 held what it repeats"
        again.log.acked(r3, lsn)
        await asyncio.sleep(0)
        assert waiting.done() and waiting.exception() is None
        # Acknowledged now: later repeats, and batches without sends, wait for nothing.
        assert again.log.barrier(_repeat(again), False) is None
        assert again.log.barrier(again.store.batch(), True) is None
        h.store.close()

    asyncio.run(scenario())


def test_a_repeat_after_a_failed_wait_is_refused_with_too_few_in_sync_followers(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        h = _Harness(tmp_path / "db", min_insync=1, isr=("r2",))
        r2 = h.log.connected("r2", 0)
        _, waiting = h.send()
        h.log.disconnected(r2, "killed")
        await asyncio.sleep(0.01)
        assert isinstance(waiting.exception(), OutcomeUnknownError)
        repeat = h.log.barrier(_repeat(h), False)
        assert repeat is not None and repeat.done()
        assert isinstance(repeat.exception(), OutcomeUnknownError)
        assert "min_insync = 1" in str(repeat.exception())
        h.store.close()

    asyncio.run(scenario())


def test_a_repeat_after_a_failed_send_waits_even_when_a_later_non_send_batch_completed(
    tmp_path: Path,
) -> None:
    """A batch that is not a send's completes with however few followers are in sync (none,
    even): it does not vouch that `min_insync` followers hold a send whose wait failed."""

    async def scenario() -> None:
        h = _Harness(tmp_path / "db", min_insync=1, isr=("r2",))
        joins: list[int] = []
        h.log.joined = lambda: joins.append(h.log.lsn)
        r2 = h.log.connected("r2", 0)
        _, waiting = h.send()
        h.log.disconnected(r2, "killed")
        await asyncio.sleep(0.01)
        assert isinstance(waiting.exception(), OutcomeUnknownError)
        # An ack's synced batch: no follower is in sync, so its wait completes at once.
        ack = h.store.batch()
        ack.put("checkpoints", b"c", b"v")
        h.store.write(ack, sync=True)
        acked = h.log.barrier(ack, True)
        assert acked is not None and acked.done() and acked.exception() is None
        # r2 comes back holding everything and joins; the joining is announced.
        r2 = h.log.connected("r2", h.log.lsn)
        h.log.acked(r2, h.log.lsn)
        await asyncio.sleep(0.01)
        assert h.log.isr == {"r2"} and joins == [h.log.lsn]
        repeat = h.log.barrier(_repeat(h), False)
        assert repeat is not None, "a repeat was answered on a non-send batch's acknowledgement"
        await asyncio.sleep(0)
        assert repeat.done() and repeat.exception() is None
        # The send's batch is held by min_insync followers now: repeats wait for nothing.
        assert h.log.barrier(_repeat(h), False) is None
        h.store.close()

    asyncio.run(scenario())


def test_a_join_is_announced_only_once_the_in_sync_set_can_pass_a_sends_barrier(
    tmp_path: Path,
) -> None:
    """Below `min_insync` the writer's confirm would fail at once, and every job batched with
    it: a join is announced (`joined`) only when the set reaches `min_insync`."""

    async def scenario() -> None:
        h = _Harness(tmp_path / "db", min_insync=2)
        joins: list[int] = []
        h.log.joined = lambda: joins.append(len(h.log.isr))
        r2 = h.log.connected("r2", h.log.lsn)
        h.log.acked(r2, h.log.lsn)
        await asyncio.sleep(0.01)
        assert h.log.isr == {"r2"} and joins == []  # 1 of 2: a send's barrier would fail
        r3 = h.log.connected("r3", h.log.lsn)
        h.log.acked(r3, h.log.lsn)
        await asyncio.sleep(0.01)
        assert h.log.isr == {"r2", "r3"} and joins == [2]
        h.store.close()

    asyncio.run(scenario())


def test_a_term_is_settled_only_with_no_write_in_doubt(tmp_path: Path) -> None:
    """What a stopping leader needs before it writes its clean stop down (replica.py): no
    batch waiting for its followers, none whose wait failed, not fenced, not failed."""

    async def scenario() -> None:
        h = _Harness(tmp_path / "db", min_insync=0, isr=("r2",))
        r2 = h.log.connected("r2", 0)
        assert h.log.settled()
        batch, waiting = h.send()
        assert not h.log.settled()  # its follower has not acknowledged it
        h.log.acked(r2, batch.lsn)
        await asyncio.sleep(0)
        assert waiting.done() and h.log.settled()
        h.fence = "its leader lease lapsed"
        assert not h.log.settled()
        h.fence = None
        h.log.fail_all("leadership ended")
        assert not h.log.settled()
        h.store.close()

    asyncio.run(scenario())
