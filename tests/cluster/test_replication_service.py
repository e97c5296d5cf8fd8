"""ReplicationService's Follow stream on 127.0.0.1:0 over a leader's real store and log,
with a raw Follow client that decides when to acknowledge: what the leader counts as held
by a follower is what the follower acknowledged, never what was only sent to it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest

from popmq._gen.popmq.broker.v1 import replication_pb2 as pb
from popmq._gen.popmq.broker.v1 import replication_pb2_grpc
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


def _log(store: Store, epoch: int, persisted: list[frozenset[str]]) -> ReplicationLog:
    async def persist(isr: frozenset[str]) -> None:
        persisted.append(isr)

    log = ReplicationLog(
        store,
        shard="s1",
        replica="r1",
        epoch=epoch,
        isr=(),
        min_insync=0,  # the leader acknowledges sends alone
        buffer_bytes=1 << 20,
        lag_timeout_s=10.0,
        fenced=lambda: None,
        persist=persist,
    )
    store.tap = log
    return log


async def _acknowledged_sends(store: Store, log: ReplicationLog, count: int) -> None:
    for n in range(count):
        batch = store.batch()
        batch.put("messages", b"m%d" % n, b"acknowledged")
        batch.quorum = True
        store.write(batch, sync=True)
        waiting = log.barrier(batch, True)
        assert waiting is not None
        await waiting


@asynccontextmanager
async def _following(
    log: ReplicationLog, store: Store, directory: Path
) -> AsyncIterator[grpc.aio.StreamStreamCall[pb.FollowRequest, pb.FollowResponse]]:
    """The leader's ReplicationService on 127.0.0.1:0, and replica r2's Follow call to it,
    hello sent (from nothing: the leader starts with a snapshot)."""
    servicer = ReplicationServicer("s1")
    servicer.leading = Leadership(log, store, directory)
    server = grpc.aio.server()
    add_replication_service(server, servicer)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = replication_pb2_grpc.ReplicationServiceStub(channel)  # type: ignore[no-untyped-call]
            call = stub.Follow()
            hello = pb.FollowHello(shard="s1", replica="r2", last_epoch=0, last_lsn=0)
            await call.write(pb.FollowRequest(hello=hello))
            yield call
    finally:
        log.fail_all("the test ended")
        await server.stop(None)
        store.close()


@pytest.mark.parametrize("acknowledged", ["in this term", "in an earlier term"])
@run_async
async def test_a_follower_sent_a_snapshot_joins_the_in_sync_set_only_once_it_acknowledged_it(
    tmp_path: Path, acknowledged: str
) -> None:
    directory = tmp_path / "leader"
    store = Store(directory)
    (directory / data_dir.KEY_FILE).write_bytes(b"k" * 32)
    persisted: list[frozenset[str]] = []
    log = _log(store, 7, persisted)
    await _acknowledged_sends(store, log, 3)
    if acknowledged == "in an earlier term":
        # Re-elected: nothing acknowledged in the new term yet, and its in-memory log is
        # empty, but the store holds what the earlier term acknowledged.
        log = _log(store, 8, persisted)
    async with _following(log, store, directory) as call:
        while (response := await call.read()).WhichOneof("kind") != "snapshot_end":
            assert response.WhichOneof("kind") == "snapshot_file", response
        assert response.snapshot_end.last_lsn == 3
        await until(
            lambda: "r2" in log.followers, "the leader streams to r2", 10.0, interval_s=0.01
        )

        # Received, but not yet written, fsynced and swapped in: a follower that
        # crashed now would hold none of it, so it must not be electable yet.
        await log.check_lag()
        assert "r2" not in log.isr and persisted == []

        await call.write(pb.FollowRequest(ack=pb.FollowAck(lsn=3)))
        await until(
            lambda: persisted == [{"r2"}], "r2 joins the in-sync set", 10.0, interval_s=0.01
        )
        assert log.isr == {"r2"}
        call.cancel()


@pytest.mark.parametrize("releases", [True, False])
@run_async
async def test_a_stopping_leader_releases_its_followers_only_once_its_takeover_is_reconciled(
    tmp_path: Path, releases: bool
) -> None:
    """A stop ends each follower's stream once nothing is owed to it; the last heartbeat
    releases the follower (it may take over without the crash-tail lookups) unless the
    leader's own takeover reconciliation was not done (`ReplicationLog.releases`)."""
    directory = tmp_path / "leader"
    store = Store(directory)
    (directory / data_dir.KEY_FILE).write_bytes(b"k" * 32)
    log = _log(store, 7, [])
    log.releases = releases
    await _acknowledged_sends(store, log, 1)
    async with _following(log, store, directory) as call:
        while (response := await call.read()).WhichOneof("kind") != "snapshot_end":
            assert response.WhichOneof("kind") == "snapshot_file", response
        await call.write(pb.FollowRequest(ack=pb.FollowAck(lsn=1)))
        await until(lambda: log.isr == {"r2"}, "r2 in sync", 10.0, interval_s=0.01)
        log.close_streams()
        released = False
        while (response := await call.read()) is not grpc.aio.EOF:
            if response.WhichOneof("kind") == "heartbeat":
                released = released or response.heartbeat.release
        assert released is releases
