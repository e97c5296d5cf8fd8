"""ReplicationService: the leader streams its log (or first a snapshot) to each follower.

One Follow stream per follower (protos/popmq/broker/v1/replication.proto). The follower's
hello says where its store ends; the leader continues from there when its history agrees
and its in-memory log still reaches back that far, and otherwise sends a snapshot first: a
RocksDB checkpoint of its store (consistent across families, made on the loop so no write
interleaves) plus the receipt key, file by file. A follower that diverged (it holds batches
of an epoch past where the leader's history ends that epoch: an old leader's writes that
were never acknowledged) is replaced by the snapshot as a whole; that is how it "truncates"
what the new leader never had.

Heartbeats: the leader sends one every `heartbeat_s` of its log, between batches and when
idle; the follower echoes it, promising not to campaign for the lease window after it
received it (log.py counts the promise from the send).

Only the leader answers; a follower's servicer refuses with UNAVAILABLE naming no leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from popmq._gen.popmq.broker.v1 import replication_pb2 as pb
from popmq._gen.popmq.broker.v1 import replication_pb2_grpc
from popmq.broker.replication import oplog
from popmq.broker.replication.log import FollowerState, ReplicationLog
from popmq.broker_core import data_dir
from popmq.broker_core.store import Store

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""Largest Follow message the leader builds (batches are grouped up to this)."""
SNAPSHOT_CHUNK_BYTES = 1024 * 1024
SNAPSHOT_PREFIX = "replication-snapshot-"
"""Checkpoints for followers are made in the data dir under this name (same filesystem, so
RocksDB hard-links the table files) and removed once sent."""


@dataclass
class Leadership:
    """What the servicer serves from while this replica leads."""

    log: ReplicationLog
    store: Store
    directory: Path


class ReplicationServicer(replication_pb2_grpc.ReplicationServiceServicer):
    """Follow streams of one shard's leader (module docstring)."""

    def __init__(self, shard: str) -> None:
        self.shard = shard
        self.leading: Leadership | None = None
        self._snapshots = itertools.count(1)

    async def Follow(
        self, request_iterator: AsyncIterator[pb.FollowRequest], context: Any
    ) -> AsyncIterator[pb.FollowResponse]:
        lead = self.leading
        if lead is None:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"this replica does not lead shard {self.shard!r} now; follow its leader",
            )
        assert lead is not None
        first = await anext(aiter(request_iterator), None)
        if first is None or first.WhichOneof("kind") != "hello":
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "a Follow stream starts with a hello"
            )
        assert first is not None
        hello = first.hello
        if hello.shard != self.shard:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"this replica leads shard {self.shard!r}, not {hello.shard!r}",
            )
        if hello.known_epoch > lead.log.epoch:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"shard {self.shard!r} has a newer leader (epoch {hello.known_epoch}) than "
                f"this one (epoch {lead.log.epoch})",
            )
        start = self._continue_from(lead.log, hello)
        held = 0 if start is None else start - 1
        if start is None:
            after: list[int] = []
            async for response in self._snapshot(lead, hello.replica, after):
                yield response
            start = after[0]
            # Sent is not held: until it acknowledges the snapshot (written, fsynced and
            # swapped in) it holds nothing of this log, so it must not join the ISR yet.
        state = lead.log.connected(hello.replica, held)
        reader = asyncio.get_running_loop().create_task(
            self._read_acks(lead.log, state, request_iterator)
        )
        why = "the leader stopped"
        try:
            async for response in self._stream(lead.log, start, reader, state):
                yield response
            why = "the follower closed it" if reader.done() else "the leader ended it"
        except asyncio.CancelledError:
            why = "the stream was cancelled"
            raise
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
            lead.log.disconnected(state, why)

    def _continue_from(self, log_: ReplicationLog, hello: pb.FollowHello) -> int | None:
        """The lsn to stream from, or None when the follower needs a snapshot."""
        if hello.last_lsn == 0:
            return None
        end = oplog.end_of_epoch(log_.epochs, hello.last_epoch, log_.lsn)
        if end is None or hello.last_lsn > end:
            log.info(
                "shard %s: follower %s diverged (it ends at epoch %d lsn %d; this leader's "
                "history ends that epoch at %s): it gets a snapshot",
                self.shard,
                hello.replica,
                hello.last_epoch,
                hello.last_lsn,
                end,
            )
            return None
        if log_.entries_from(hello.last_lsn + 1) is None:
            return None
        return int(hello.last_lsn) + 1

    async def _snapshot(
        self, lead: Leadership, replica: str, after: list[int]
    ) -> AsyncIterator[pb.FollowResponse]:
        """A checkpoint of the store and the receipt key; appends the lsn after it."""
        target = lead.directory / f"{SNAPSHOT_PREFIX}{next(self._snapshots)}"
        if target.exists():
            shutil.rmtree(target)
        # On the loop: no write can land between the checkpoint and the position read.
        lead.store.checkpoint(target)
        last_epoch, last_lsn = oplog.read_position(lead.store)
        log.info(
            "shard %s: sending follower %s a snapshot at lsn %d", self.shard, replica, last_lsn
        )
        try:
            files = sorted(p for p in target.iterdir() if p.is_file())
            files.append(lead.directory / data_dir.KEY_FILE)
            for path in files:
                offset = 0
                with path.open("rb") as file:
                    while True:
                        data = await asyncio.to_thread(file.read, SNAPSHOT_CHUNK_BYTES)
                        if not data and offset > 0:
                            break
                        yield pb.FollowResponse(
                            epoch=lead.log.epoch,
                            snapshot_file=pb.SnapshotFile(name=path.name, data=data, offset=offset),
                        )
                        offset += len(data)
                        if not data:
                            break
        finally:
            await asyncio.to_thread(shutil.rmtree, target, True)
        yield pb.FollowResponse(
            epoch=lead.log.epoch,
            snapshot_end=pb.SnapshotEnd(last_epoch=last_epoch, last_lsn=last_lsn),
        )
        after.append(last_lsn + 1)

    async def _stream(
        self,
        log_: ReplicationLog,
        start: int,
        reader: asyncio.Task[None],
        state: FollowerState,
    ) -> AsyncIterator[pb.FollowResponse]:
        next_lsn = start
        loop = asyncio.get_running_loop()
        beats = itertools.count(1)
        next_beat = loop.time()
        while not reader.done():
            if log_.failure is not None:
                return
            if log_.streams_may_end(next_lsn):
                if log_.releases:
                    # Stopping: from here it writes only under its etcd lease, so the
                    # follower may campaign as soon as the lease is revoked, not a window
                    # later.
                    log_.waive_promises()
                    yield pb.FollowResponse(epoch=log_.epoch, heartbeat=pb.Heartbeat(release=True))
                return
            if loop.time() >= next_beat:
                # Stamped before it leaves: the promise it earns is counted from here.
                beat = next(beats)
                state.beats[beat] = loop.time()
                next_beat = state.beats[beat] + log_.heartbeat_s
                yield pb.FollowResponse(epoch=log_.epoch, heartbeat=pb.Heartbeat(id=beat))
                continue
            entries = log_.entries_from(next_lsn)
            if entries is None:
                log.warning(
                    "shard %s: a follower fell behind the in-memory log (needs lsn %d): "
                    "ending its stream, it gets a snapshot when it follows again",
                    self.shard,
                    next_lsn,
                )
                return
            if not entries:
                grown = asyncio.ensure_future(log_.wait_grown(next_lsn - 1))
                await asyncio.wait(
                    (grown, reader),
                    timeout=max(0.0, next_beat - loop.time()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                grown.cancel()
                continue
            group: list[pb.ReplicatedBatch] = []
            size = 0
            for entry in entries:
                if group and size + len(entry.ops) > MAX_MESSAGE_BYTES:
                    yield self._batches(log_, group)
                    group, size = [], 0
                group.append(pb.ReplicatedBatch(lsn=entry.lsn, epoch=entry.epoch, ops=entry.ops))
                size += len(entry.ops)
            yield self._batches(log_, group)
            next_lsn = entries[-1].lsn + 1

    @staticmethod
    def _batches(log_: ReplicationLog, group: list[pb.ReplicatedBatch]) -> pb.FollowResponse:
        return pb.FollowResponse(epoch=log_.epoch, batches=pb.ReplicatedBatches(batches=group))

    @staticmethod
    async def _read_acks(
        log_: ReplicationLog, state: FollowerState, requests: AsyncIterator[pb.FollowRequest]
    ) -> None:
        async for request in requests:
            kind = request.WhichOneof("kind")
            if kind == "ack":
                log_.acked(state, request.ack.lsn)
            elif kind == "heartbeat":
                log_.heartbeat_answered(state, request.heartbeat.id)


def add_replication_service(server: grpc.aio.Server, servicer: ReplicationServicer) -> None:
    replication_pb2_grpc.add_ReplicationServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
