"""A follower's durable memory of its last known leader (broker/replication/last_leader.py).

A real Follower on a real store follows a real ReplicationService (grpc.aio on 127.0.0.1:0)
over a leader's real store and log: the leader it followed is in its data dir after the
snapshot swap and after a restart, and the epoch it remembers is the newest it has seen, so
after a restart neither side of a stream to an older leader goes on.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from popmq.broker.replication import last_leader
from popmq.broker.replication.follower import Follower, FollowError
from popmq.broker.replication.last_leader import LastLeader
from popmq.broker.replication.log import ReplicationLog
from popmq.broker.replication.service import (
    Leadership,
    ReplicationServicer,
    add_replication_service,
)
from popmq.broker_core import data_dir
from popmq.broker_core.store import Store
from tests.support.run_async import run_async
from tests.support.waiting import until

EPOCH = 7


class _Leader:
    """A shard leader's store (three acknowledged writes), log and ReplicationService."""

    def __init__(self, directory: Path) -> None:
        self.store = Store(directory)
        (directory / data_dir.KEY_FILE).write_bytes(b"k" * 32)

        async def persist(isr: frozenset[str]) -> None:
            pass

        self.log = ReplicationLog(
            self.store,
            shard="s1",
            replica="r1",
            epoch=EPOCH,
            isr=(),
            min_insync=0,
            buffer_bytes=1 << 20,
            lag_timeout_s=10.0,
            fenced=lambda: None,
            persist=persist,
            promise_s=1.0,
        )
        self.store.tap = self.log
        for n in range(3):
            batch = self.store.batch()
            batch.put("messages", b"m%d" % n, b"acknowledged")
            self.store.write(batch, sync=True)
        servicer = ReplicationServicer("s1")
        servicer.leading = Leadership(self.log, self.store, directory)
        self.server = grpc.aio.server()
        add_replication_service(self.server, servicer)
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"

    async def __aenter__(self) -> _Leader:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.log.fail_all("the test ended")
        await self.server.stop(None)
        self.store.close()


@run_async
async def test_the_followed_leader_is_remembered_through_a_snapshot_and_a_restart(
    tmp_path: Path,
) -> None:
    async with _Leader(tmp_path / "r1") as leader:
        follower = Follower(tmp_path / "r2", shard="s1", replica="r2")
        follower.open()
        assert follower.last_leader is None
        stream = asyncio.ensure_future(follower.follow(leader.address, EPOCH, leader="r1"))
        try:
            # An empty follower gets a snapshot: the data dir is replaced as a whole.
            await until(
                lambda: follower.snapshots == 1 and follower.position == (EPOCH, 3),
                "the follower swapped the snapshot in",
                10.0,
                interval_s=0.01,
            )
        finally:
            stream.cancel()
            with pytest.raises(asyncio.CancelledError):
                await stream
            follower.close()

    remembered = LastLeader(replica="r1", address=leader.address, epoch=EPOCH)
    assert last_leader.read(tmp_path / "r2") == remembered
    restarted = Follower(tmp_path / "r2", shard="s1", replica="r2")
    restarted.open()
    try:
        assert restarted.last_leader == remembered
        assert restarted.known_epoch == EPOCH
    finally:
        restarted.close()


@run_async
async def test_after_a_restart_an_older_leader_than_the_remembered_one_is_refused_both_ways(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "r2"
    directory.mkdir()
    # This replica saw (or was) the leader of a newer epoch before it restarted.
    last_leader.write(directory, LastLeader(replica="r3", address="127.0.0.1:1", epoch=EPOCH + 2))
    async with _Leader(tmp_path / "r1") as leader:
        follower = Follower(directory, shard="s1", replica="r2")
        follower.open()
        try:
            assert follower.known_epoch == EPOCH + 2
            # Named by etcd (or remembered) as of its own, older epoch: refused here.
            with pytest.raises(FollowError, match="older than 9"):
                await follower.follow(leader.address, EPOCH, leader="r1")
            # Looked for under the newer epoch: the older leader refuses the hello.
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await follower.follow(leader.address, EPOCH + 2, leader="r1")
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "newer leader (epoch 9)" in str(refused.value.details())
        finally:
            follower.close()
        # It made no promise to the older leader, nor did it take a batch from it.
        assert "r2" not in leader.log.followers
        assert "r2" not in leader.log.promised_until
        assert follower.applied_batches == 0 and follower.snapshots == 0


def test_a_missing_or_damaged_record_is_no_memory(tmp_path: Path) -> None:
    assert last_leader.read(tmp_path) is None
    path = tmp_path / last_leader.FILE
    for damaged in (b"", b"{not json", b'{"replica": "r1"}', b'{"replica": "r1", '
                    b'"address": "h:1", "epoch": 0}', b"[1, 2]"):  # fmt: skip
        path.write_bytes(damaged)
        assert last_leader.read(tmp_path) is None, damaged
    record = LastLeader(replica="r1", address="127.0.0.1:9000", epoch=12)
    last_leader.write(tmp_path, record)
    assert last_leader.read(tmp_path) == record
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [last_leader.FILE]


def test_a_clean_stop_is_remembered_with_the_position_and_a_damaged_one_is_dropped(
    tmp_path: Path,
) -> None:
    stopped = LastLeader(replica="r1", address="127.0.0.1:9000", epoch=12, stopped_at=(12, 40))
    last_leader.write(tmp_path, stopped)
    assert last_leader.read(tmp_path) == stopped
    path = tmp_path / last_leader.FILE
    for damaged in ('"12"', "[12]", "[1, 2, 3]", '["a", 1]', "[1.5, 2]", "[-1, 2]", "{}"):
        path.write_text(
            f'{{"replica": "r1", "address": "h:1", "epoch": 3, "stopped_at": {damaged}}}'
        )
        # The leader is still remembered; only the clean stop is dropped.
        assert last_leader.read(tmp_path) == LastLeader(replica="r1", address="h:1", epoch=3)


@run_async
async def test_a_release_is_remembered_with_the_copy_s_position_across_a_restart(
    tmp_path: Path,
) -> None:
    """A leader that stops cleanly releases its follower once the follower holds every
    batch: the follower writes that position down with the leader, keeps it when it
    follows the same leader again after a restart, and drops it for a newer leader."""
    async with _Leader(tmp_path / "r1") as leader:
        # One heartbeat (at the stream's start), answered before the stop: an answer still
        # being written as the stream ends fails, and the release after it goes unread.
        leader.log.heartbeat_s = 60.0
        follower = Follower(tmp_path / "r2", shard="s1", replica="r2")
        follower.open()
        stream = asyncio.ensure_future(follower.follow(leader.address, EPOCH, leader="r1"))
        await until(
            lambda: (
                follower.snapshots == 1
                and follower.position == (EPOCH, 3)
                and "r2" in leader.log.promised_until
            ),
            "the follower caught up and answered the heartbeat",
            10.0,
            interval_s=0.01,
        )
        leader.log.close_streams()  # what a stopping leader does
        await asyncio.wait_for(stream, 10.0)
        assert follower.released
        follower.close()

    restarted = Follower(tmp_path / "r2", shard="s1", replica="r2")
    restarted.open()
    try:
        kept = restarted.last_leader
        assert kept is not None and kept.stopped_at == (EPOCH, 3) == restarted.position
        await restarted.remember(LastLeader(replica="r1", address=kept.address, epoch=EPOCH))
        assert restarted.last_leader == kept  # the same leader: its clean stop stays
        newer = LastLeader(replica="r1", address=kept.address, epoch=EPOCH + 1)
        await restarted.remember(newer)
        assert last_leader.read(tmp_path / "r2") == newer  # stopped_at None
    finally:
        restarted.close()
