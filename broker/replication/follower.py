"""The follower's side: copy the leader's batches into the local store, in order, fsynced.

The follower holds its store open as a plain Store (no broker core runs on it: no revive,
no timers, nothing that writes on its own). It opens a Follow stream to the leader with
its position, swaps in a snapshot when the leader sends one, then writes each batch as the
leader wrote it (its position key included), fsyncs, and acknowledges the last lsn. A
batch out of order, or from a leader older than one it has seen, ends the stream
(FollowError): the replica then looks up the leader again.

A snapshot is written next to the data dir (`.<name>.incoming`), every file fsynced, then
swapped in by two renames; a crash halfway leaves a data dir that is missing or stale,
which the next start clears (`prepare`), and the follower starts from an empty store: it
acknowledged nothing of the snapshot before the swap, so it was not in the in-sync set.

Lease promises: `heard_at` is when the follower last received anything from a leader
(monotonic, stamped as it is read, before it is answered). It answers each heartbeat at
once; the replica campaigns only once `heard_at` is a lease window behind (replica.py). A
stopping leader's last heartbeat releases it (the leader counts on no promise after it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import grpc

from popmq._gen.popmq.broker.v1 import replication_pb2 as pb
from popmq._gen.popmq.broker.v1 import replication_pb2_grpc
from popmq.broker.replication import last_leader, oplog
from popmq.broker.replication.last_leader import LastLeader
from popmq.broker_core.store import Store
from popmq.security.signing import Signer
from popmq.security.tls import ChannelTLS

log = logging.getLogger(__name__)


class FollowError(Exception):
    """The stream cannot go on (out of order, stale leader, a bad snapshot)."""


def _incoming(directory: Path) -> Path:
    return directory.parent / f".{directory.name}.incoming"


def _discard(directory: Path) -> Path:
    return directory.parent / f".{directory.name}.discard"


def prepare(directory: Path) -> None:
    """Clear what an interrupted snapshot swap left (the store then starts empty)."""
    for leftover in (_incoming(directory), _discard(directory)):
        if leftover.exists():
            log.warning("removing %s, left by an interrupted snapshot", leftover)
            shutil.rmtree(leftover, ignore_errors=True)


async def _write(call: Any, request: pb.FollowRequest) -> None:
    """Write to the leader's stream.

    Raises:
        FollowError: the stream is already over: the leader died or stepped down while this
            follower applied its last batch (grpc.aio says so with InvalidStateError, not
            with the call's status).
    """
    try:
        await call.write(request)
    except asyncio.InvalidStateError:
        code = await call.code()
        raise FollowError(f"the leader's stream is over ({code.name})") from None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Follower:
    """Keeps `directory`'s store a copy of the shard leader's.

    Args:
        directory: The replica's data dir.
        shard: The shard's name.
        replica: This replica's name.
        tls: TLS of the connection to the leader (None: plaintext).
        signer: Signs the stream (brokers with authentication).
    """

    def __init__(
        self,
        directory: Path,
        *,
        shard: str,
        replica: str,
        tls: ChannelTLS | None = None,
        signer: Signer | None = None,
    ) -> None:
        self.directory = directory
        self.shard = shard
        self.replica = replica
        self._tls = tls
        self._signer = signer
        self.store: Store | None = None
        self.known_epoch = 0
        """The newest leader epoch seen; older leaders are refused."""
        self.applied_batches = 0
        self.snapshots = 0
        self.heard_at = time.monotonic()
        """When a leader was last heard from; a process that just started counts as having
        heard from one now (it may have answered a heartbeat before it restarted)."""
        self.released = False
        """The last message from a leader released this replica: that leader stopped
        cleanly, once the sends in flight had finished (a replica taking over after that
        need not look its last messages up on the other brokers). Cleared by anything
        else a leader sends, and by this replica's own takeover."""
        self.last_leader: LastLeader | None = None
        """The leader this replica followed (or was) last, as written in its data dir."""

    def open(self) -> None:
        prepare(self.directory)
        self.store = Store(self.directory)
        epoch, _ = oplog.read_position(self.store)
        if self.last_leader is None:
            self.last_leader = last_leader.read(self.directory)
        remembered = 0 if self.last_leader is None else self.last_leader.epoch
        self.known_epoch = max(self.known_epoch, epoch, remembered)

    async def remember(self, leader: LastLeader) -> None:
        """Write `leader` down as the last known one (no-op when it already is); its epoch
        is the newest seen from now on.

        Raises:
            FollowError: `leader` is older than a leader already seen.
            OSError: the record could not be written.
        """
        if leader.epoch < self.known_epoch:
            raise FollowError(f"leader epoch {leader.epoch} is older than {self.known_epoch}")
        self.known_epoch = leader.epoch
        last = self.last_leader
        if (
            leader.stopped_at is None
            and last is not None
            and (last.epoch, last.address) == (leader.epoch, leader.address)
        ):
            # Following the same leader again (at a restart) keeps its clean stop on record:
            # any batch it sends changes the position the mark is compared with.
            leader = dataclasses.replace(leader, stopped_at=last.stopped_at)
        if leader == self.last_leader:
            return
        await asyncio.to_thread(last_leader.write, self.directory, leader)
        self.last_leader = leader

    async def _remember_release(self) -> None:
        """The leader stopped cleanly with this copy as it is now: written down, so that
        this replica, elected even after a restart, need not reconcile (last_leader.py).
        Not written, it reconciles: safe, only slower."""
        leader = self.last_leader
        if leader is None or leader.epoch != self.known_epoch:
            return
        try:
            await self.remember(dataclasses.replace(leader, stopped_at=self.position))
        except OSError as exc:
            log.warning(
                "shard %s: the leader's clean stop could not be written down: %s", self.shard, exc
            )

    def close(self) -> None:
        if self.store is not None:
            store, self.store = self.store, None
            store.close()

    @property
    def position(self) -> tuple[int, int]:
        assert self.store is not None
        return oplog.read_position(self.store)

    async def follow(self, address: str, epoch: int, *, leader: str = "") -> None:
        """Copy from the leader `leader` at `address` (of `epoch`) until the stream ends;
        it is written down as the last known leader first.

        Raises:
            FollowError: the leader is stale, sent something out of order, or ended the
                stream before an ack was written.
            grpc.aio.AioRpcError: the stream failed (the leader died or refused).
            OSError: the last known leader could not be written down.
        """
        await self.remember(LastLeader(replica=leader, address=address, epoch=epoch))
        options = [
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            # Servers answer pings more often than every 10 s with GOAWAY too_many_pings
            # (connections.min_client_ping_interval_s); a leader that stops answering is
            # found sooner through etcd (its registration lapses).
            ("grpc.keepalive_time_ms", 10_000),
            ("grpc.keepalive_timeout_ms", 5_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]
        if self._tls is None:
            channel = grpc.aio.insecure_channel(address, options=options)
        else:
            channel = grpc.aio.secure_channel(
                address, self._tls.credentials, options=[*options, *self._tls.options()]
            )
        async with channel:
            stub = replication_pb2_grpc.ReplicationServiceStub(channel)  # type: ignore[no-untyped-call]
            metadata = None if self._signer is None else self._signer.metadata()
            call = stub.Follow(metadata=metadata)
            try:
                await self._run(call)
            finally:
                call.cancel()

    async def _run(self, call: Any) -> None:
        assert self.store is not None
        last_epoch, last_lsn = self.position
        await _write(
            call,
            pb.FollowRequest(
                hello=pb.FollowHello(
                    shard=self.shard,
                    replica=self.replica,
                    last_epoch=last_epoch,
                    last_lsn=last_lsn,
                    known_epoch=self.known_epoch,
                )
            ),
        )
        incoming: dict[str, Any] = {}
        try:
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    return
                if response.epoch < self.known_epoch:
                    raise FollowError(
                        f"the leader's epoch {response.epoch} is older than {self.known_epoch}"
                    )
                if response.epoch > self.known_epoch and self.last_leader is not None:
                    # A newer leader at the same address (elected while this replica did
                    # not look): it is the one to remember now.
                    await self.remember(
                        LastLeader(
                            replica="", address=self.last_leader.address, epoch=response.epoch
                        )
                    )
                self.known_epoch = response.epoch
                self.heard_at = max(self.heard_at, time.monotonic())
                kind = response.WhichOneof("kind")
                self.released = kind == "heartbeat" and response.heartbeat.release
                if self.released:
                    # The leader counts on no promise any more (it is stopping).
                    self.heard_at = -math.inf
                    await self._remember_release()
                elif kind == "heartbeat":
                    await _write(call, pb.FollowRequest(heartbeat=response.heartbeat))
                elif kind == "batches":
                    lsn = await self._apply(response.batches.batches)
                    await _write(call, pb.FollowRequest(ack=pb.FollowAck(lsn=lsn)))
                elif kind == "snapshot_file":
                    self._receive(incoming, response.snapshot_file)
                elif kind == "snapshot_end":
                    await self._swap_in(incoming, response.snapshot_end)
                    incoming = {}
                    await _write(
                        call,
                        pb.FollowRequest(ack=pb.FollowAck(lsn=response.snapshot_end.last_lsn)),
                    )
        finally:
            for file in incoming.values():
                file.close()

    async def _apply(self, batches: Any) -> int:
        store = self.store
        assert store is not None
        _, lsn = oplog.read_position(store)
        for batch in batches:
            if batch.lsn != lsn + 1:
                raise FollowError(f"batch {batch.lsn} arrived after {lsn}: out of order")
            try:
                ops = oplog.decode(batch.ops)
            except ValueError as exc:
                raise FollowError(f"batch {batch.lsn} is corrupt: {exc}") from exc
            store.write_ops(ops, sync=False)
            lsn = batch.lsn
            self.applied_batches += 1
        await asyncio.to_thread(store.sync_wal)
        return lsn

    def _receive(self, incoming: dict[str, Any], part: pb.SnapshotFile) -> None:
        name = part.name
        if not name or "/" in name or name in (".", ".."):
            raise FollowError(f"snapshot file name {name!r} is not a plain file name")
        target = _incoming(self.directory)
        if not incoming:
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(mode=0o700, parents=True)
        file = incoming.get(name)
        if file is None:
            file = incoming[name] = (target / name).open("wb")
        if file.tell() != part.offset:
            raise FollowError(f"snapshot file {name} part at {part.offset}, expected {file.tell()}")
        file.write(part.data)

    async def _swap_in(self, incoming: dict[str, Any], end: pb.SnapshotEnd) -> None:
        target = _incoming(self.directory)

        def finish() -> None:
            for file in incoming.values():
                file.flush()
                os.fsync(file.fileno())
                file.close()
            _fsync_dir(target)

        await asyncio.to_thread(finish)
        if self.last_leader is not None:
            # Into the copy before it is swapped in: the record survives the swap.
            await asyncio.to_thread(last_leader.write, target, self.last_leader)
        self.close()
        discard = _discard(self.directory)
        if self.directory.exists():
            self.directory.rename(discard)
        target.rename(self.directory)
        _fsync_dir(self.directory.parent)
        with contextlib.suppress(OSError):
            (self.directory / "receipt.key").chmod(0o600)
        await asyncio.to_thread(shutil.rmtree, discard, True)
        self.store = Store(self.directory)
        epoch, lsn = oplog.read_position(self.store)
        if (epoch, lsn) != (end.last_epoch, end.last_lsn):
            raise FollowError(
                f"the snapshot ends at epoch {epoch} lsn {lsn}, not at the announced "
                f"epoch {end.last_epoch} lsn {end.last_lsn}"
            )
        self.snapshots += 1
        log.info("shard %s: snapshot at lsn %d swapped in", self.shard, lsn)
