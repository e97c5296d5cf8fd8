"""The one adapter between broker_core and RocksDB (rocksdict in raw mode).

Column families (see docs/architecture.md): messages, offsets, checkpoints, revive, meta,
timers (delayed messages by due time), index (message ids, dedup ids, keys, expiries).
All calls here are blocking and short (point reads, small scans, one write batch); they run
on the event loop thread. rocksdict holds the GIL during a write, so a separate writer thread
would not overlap fsync with other work (measured, see GroupCommitWriter).

A full disk (docs/durability.md, "Disk full"): sends stop while less than
`SEND_FLOOR_BYTES` would stay free (`check_room`), so the last megabytes go to what keeps
consumers going (acks, nacks, checkpoints, new groups and topics) and to RocksDB's memtable
flush; the memtables and WAL are capped at `MEMTABLE_BUDGET_BYTES`, so a reopen after a
write error needs only that much room. A store that cannot open read-write on a full disk
opens read-only (reads and pops work) and reopens read-write once there is room.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import logging
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import rocksdict

from popmq.broker_core import data_dir
from popmq.broker_core.errors import (
    OutcomeUnknownError,
    PopMQError,
    StoreFullError,
    UnavailableError,
)

# Re-exported: the store's users import the batch from here.
from popmq.broker_core.write_batch import DELETE as DELETE
from popmq.broker_core.write_batch import DELETE_RANGE as DELETE_RANGE
from popmq.broker_core.write_batch import PUT as PUT
from popmq.broker_core.write_batch import Batch as Batch
from popmq.broker_core.write_batch import Op as Op

log = logging.getLogger(__name__)

FAMILIES = ("messages", "offsets", "checkpoints", "revive", "meta", "timers", "index")
_REOPEN_INTERVAL_S = 0.5
"""After a failed write, how often a new write may try to reopen the store."""
_REOPEN_MARGIN_BYTES = 1024 * 1024
"""Free space a reopen needs beyond the memtables it flushes (MANIFEST, OPTIONS, new WAL)."""
MEMTABLE_BUDGET_BYTES = 4 * 1024 * 1024
"""Each family's memtable and the live WAL (past it, RocksDB flushes every family holding
its oldest part) are capped at this (RocksDB's defaults: 64 MiB a family and a WAL of up to
4x all of them). A reopen flushes what the WAL holds: with one memtable mid-flush, at most
about twice this, which is the free space a reopen after a write error needs."""
SEND_FLOOR_BYTES = 8 * 1024 * 1024
"""Sends are refused while storing them would leave less free space than this: room for a
memtable flush (`MEMTABLE_BUDGET_BYTES`) plus as much for acks, nacks, checkpoints and new
groups and topics, which keep working on a disk that sends filled."""
_INFO_LOG_FILES = 5
"""RocksDB LOG files kept (RocksDB keeps 1000): each open starts one."""
_RECYCLED_WAL_FILES = 2
_FREE_READING_MAX_AGE_S = 0.1
"""How long `check_room` may go by its last reading of the free space, while that reading
is far from the floor (see `_FREE_READING_SLACK_BYTES`)."""
_FREE_READING_SLACK_BYTES = 64 * 1024 * 1024
"""Free space beyond `SEND_FLOOR_BYTES` under which every send reads it afresh: what the
store's own upkeep (memtable flushes, compactions) and other writers to the disk may take
between two readings, `_FREE_READING_MAX_AGE_S` apart, without a send noticing."""
_LEVEL_BASE_BYTES = 16 * 1024 * 1024
"""Target size of the level that level 0 compacts into, in `messages` and `index` (RocksDB's
default is 256 MiB; see `_open`)."""
_MESSAGE_BLOCK_CACHE_BYTES = 32 * 1024 * 1024
"""Block cache of the `messages` family (RocksDB's default size, but in one shard, see
`_open`): a data block holds a whole message body, up to 4 MiB."""
"""Obsolete WAL files kept for reuse (RocksDB's default is none): at most this many extra
files of up to a memtable's worth each on disk, for cheaper fsyncs (see `_open`)."""


def _free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use (statvfs f_bavail; ~2 us)."""
    return shutil.disk_usage(path).free


def _no_space(exc: BaseException) -> bool:
    text = str(exc)
    return "No space left" in text or "ENOSPC" in text or f"errno {errno.ENOSPC}" in text


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


class WriteTap(Protocol):
    """What sees every write of a replicating store (the leader's replication log)."""

    def stamp(self, batch: Batch) -> None:
        """Before the write: give the batch its log position (adds the position key), or
        raise a PopMQError to refuse it (a fenced leader)."""

    def written(self, batch: Batch) -> None:
        """After a successful write: ship the batch."""

    def unwritten(self, batch: Batch) -> None:
        """After a failed write: take the position back."""

    def admit_send(self) -> None:
        """Raise a PopMQError when sends cannot be acknowledged now (too few replicas)."""


class Store:
    """RocksDB with popmq's column families; keys and values are bytes."""

    def __init__(self, path: Path) -> None:
        """Open (or create) the store in `path`, read-only when the disk is too full.

        Raises:
            DataDirError: the path cannot hold a store (a file, read-only, not permitted,
                in use by another process, corrupt), in one line saying which.
        """
        data_dir.prepare(path)
        self.path = path
        self._families: dict[str, Any] = {}
        self._handles: dict[str, Any] = {}
        self._is_open = False
        self._generation = 0
        """Opens so far; a Batch made before the last one is refused (stale handles)."""
        self._sync = rocksdict.WriteOptions()
        self._sync.sync = True
        self._nosync = rocksdict.WriteOptions()
        self._closed = False
        self._failure: PopMQError | None = None
        """Set after a failed write: RocksDB keeps refusing writes until it is reopened."""
        self._next_reopen = 0.0
        self._claimed = 0
        """Bytes of sends admitted by `check_room` and not yet written (see there)."""
        self._free_read = 0
        """Free bytes at `check_room`'s last statvfs, and the bytes of sends admitted since
        (written or not) and when that reading goes stale (monotonic seconds)."""
        self._admitted_since_read = 0
        self._free_read_until = 0.0
        self.tap: WriteTap | None = None
        """Sees every write (a replicating leader's log); batches then record their ops."""
        try:
            self._open()
        except Exception as exc:
            if not _no_space(exc):
                raise data_dir.describe_error(path, exc) from exc
            self._open_read_only(exc)

    def _open_read_only(self, cause: Exception) -> None:
        """Serve reads from a store the full disk will not let open read-write."""
        try:
            self._open(read_only=True)
        except Exception as exc:
            # Most often there is no store yet to open: the full disk is the news.
            raise data_dir.describe_error(self.path, cause) from exc
        free = _free_bytes(self.path)
        self._failure = StoreFullError(
            f"the disk holding the store is full ({_mib(free)} free): the store is "
            "read-only, writes resume when space is freed"
        )
        self._next_reopen = time.monotonic() + _REOPEN_INTERVAL_S
        log.warning(
            "store %s opened READ-ONLY: the disk is full (%s free; %s); pops and reads of "
            "stored messages work; writes resume by themselves once %s are free, sends "
            "once %s are",
            self.path,
            _mib(free),
            cause,
            _mib(self._reopen_needs()),
            _mib(SEND_FLOOR_BYTES),
        )

    @property
    def generation(self) -> int:
        """Opens so far (a reopen after a failed write counts): a reopen replays the WAL
        and flushes it, so what the store holds then is durable."""
        return self._generation

    @property
    def read_only(self) -> bool:
        """Whether writes are refused until the store reopens (after a failed write)."""
        return self._failure is not None

    def _open(self, *, read_only: bool = False) -> None:
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        options.create_missing_column_families(True)
        # A new WAL file grows with every append, so each fsync must also journal the inode's
        # new size; a recycled one is overwritten in place and an fsync writes data only.
        # `python -m bench.wal_sync` (medians of 3 runs): the fsync of a 32-message batch
        # 430 -> 225 us, of a lone message 259 -> 169 us, and a third less CPU. RocksDB's
        # recyclable record format tells a reused file's old records from new ones, so
        # recovery stops at the true end (tests/unit/broker_core/test_store_wal_recycling.py kills a
        # writer to check).
        options.set_recycle_log_file_num(_RECYCLED_WAL_FILES)
        # Small memtables and WAL: a reopen replays the WAL and flushes it, and on a full
        # disk that flush must fit in what little is free (see MEMTABLE_BUDGET_BYTES).
        # `python -m bench.store_memtables`: 153k instead of 182k unsynced 1 KiB puts/s;
        # a shared db_write_buffer_size instead cost half (its accounting counts whole
        # arena blocks and flushed every ~0.5 MB).
        options.set_max_total_wal_size(MEMTABLE_BUDGET_BYTES)
        options.set_keep_log_file_num(_INFO_LOG_FILES)
        families = {name: rocksdict.Options(raw_mode=True) for name in FAMILIES}
        for family_options in families.values():
            family_options.set_write_buffer_size(MEMTABLE_BUDGET_BYTES)
        # A small first level below level 0. The keys a send writes interleave (the queues
        # of `messages`, the random ids of `index`), so each level-0 file spans the family
        # and compacting level 0 rewrites the whole level it merges into: the smaller that
        # level, the less each compaction rewrites; below it, files split by key range and
        # move down with little overlap. Once 3.2 million messages were stored, compactions
        # cost each 30 µs with RocksDB's 256 MiB and 24 with 16 MiB (`python -m
        # bench.store_compaction`); `popmq serve`'s produce 0.85x the CPU a message
        # (docs/architecture.md, "What RocksDB does in the background"). Files stay 64 MiB
        # each: no more of them to keep open.
        for name in ("messages", "index"):
            families[name].set_max_bytes_for_level_base(_LEVEL_BASE_BYTES)
        # Every send looks its message ids up in `index`, and almost all are misses: a bloom
        # filter answers a miss without reading table blocks (0.65 vs 4-6 us a key, measured
        # on 400k keys in table files).
        # The memtable gets one too (whole keys, 5% of the write buffer, ~200 KB): the ids of
        # the last seconds' sends are there, and a miss costs 0.4 instead of 1.7 us a key.
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(10, False)
        families["index"].set_block_based_table_factory(table)
        # A message body is stored whole in one data block, so a block is as large as the
        # body (up to 4 MiB). RocksDB's default cache (32 MiB, LRU) has 64 shards of 512 KiB
        # and keeps no block larger than a shard: every read of a queue's edge next to a
        # large body read and checksummed (and for a compressible body, decompressed) that
        # block again. Loading the next offset of 1,024 cold queues, one reverse seek each,
        # held the loop 170-250 ms on a store whose 1 MiB bodies were in table files
        # (docs/limits.md). A clock cache of the same 32 MiB uses one shard at this size (it
        # sizes shards from 32 MiB up), so such a block stays cached: 3.9 s -> 16 ms for
        # those 1,024 lookups on a store next to a 3.9 MiB body. Memory stays bounded by
        # the capacity.
        messages_table = rocksdict.BlockBasedOptions()
        messages_table.set_block_cache(
            rocksdict.Cache.new_hyper_clock_cache(_MESSAGE_BLOCK_CACHE_BYTES, 0)
        )
        families["messages"].set_block_based_table_factory(messages_table)
        families["index"].set_memtable_prefix_bloom_ratio(0.05)
        families["index"].set_memtable_whole_key_filtering(True)
        access = (
            rocksdict.AccessType.read_only(False)
            if read_only
            else rocksdict.AccessType.read_write()
        )
        # The files RocksDB creates now (WAL, MANIFEST, LOG) are the user's alone, like
        # the 0700 data dir holding them (`popmq serve` keeps this umask for later files).
        umask = os.umask(data_dir.PRIVATE_UMASK)
        try:
            self._db = rocksdict.Rdict(
                str(self.path), options, column_families=families, access_type=access
            )
        finally:
            os.umask(umask)
        self._families = {name: self._db.get_column_family(name) for name in FAMILIES}
        self._handles = {name: self._db.get_column_family_handle(name) for name in FAMILIES}
        self._is_open = True
        self._generation += 1

    def _memtable_bytes(self) -> int:
        total = 0
        for family in self._families.values():
            value = family.property_int_value("rocksdb.cur-size-all-mem-tables")
            total += int(value or 0)
        return total

    def _reopen_needs(self) -> int:
        """Free bytes a read-write reopen needs: it flushes the memtables (the WAL)."""
        return _REOPEN_MARGIN_BYTES + self._memtable_bytes()

    def _recover(self) -> None:
        """After a failed write, reopen the database once the disk has room again.

        RocksDB stops taking writes after a WAL write error ("Writer has previous error")
        and rocksdict cannot resume it; reads keep working on the old handle meanwhile.
        Reopening replays the WAL, dropping any torn tail, so nothing half-written survives,
        and flushes it: that needs about the memtables' size free. If the read-write open
        still fails, the store opens read-only again so reads keep working.
        """
        if self._failure is None:
            return
        now = time.monotonic()
        if now < self._next_reopen:
            raise self._refusal()
        self._next_reopen = now + _REOPEN_INTERVAL_S
        if self._is_open and _free_bytes(self.path) < self._reopen_needs():
            raise self._refusal()
        if self._is_open:
            self._close_handle()
        try:
            self._open()
        except Exception as exc:
            error: PopMQError = (
                StoreFullError(
                    f"the disk holding the store is still full ({exc}); "
                    "writes resume when space is freed"
                )
                if _no_space(exc)
                else UnavailableError(
                    f"the store could not be reopened ({exc}); it is retried on the next request"
                )
            )
            self._failure = error
            with contextlib.suppress(Exception):
                self._open(read_only=True)
            raise self._refusal() from exc
        self._failure = None
        log.warning("store %s reopened read-write; writes resume", self.path)

    def _close_handle(self) -> None:
        # Column-family objects keep the database (and its LOCK file) alive: drop them first.
        self._families.clear()
        self._handles.clear()
        with contextlib.suppress(Exception):
            self._db.close()
        self._is_open = False

    def check_room(self, nbytes: int) -> None:
        """Refuse a send of about `nbytes` that would leave less than SEND_FLOOR_BYTES free.

        Sends admitted in the same loop iteration are written later, in one batch: their
        bytes count as claimed until the next write, so a burst cannot overshoot the floor.

        The free space is read (a statvfs: ~4 us of kernel time on ext4, a tenth of a
        paced send's own work) at most every `_FREE_READING_MAX_AGE_S` while the last
        reading, less every send admitted since, stays `_FREE_READING_SLACK_BYTES` above the
        floor: so far from it, no send in between could have been refused. Nearer, every
        send reads it, and a refusal always comes from a fresh reading.

        Raises:
            StoreFullError: the disk is (nearly) full.
        """
        if self._failure is not None:
            self._recover()
        if self.tap is not None:
            self.tap.admit_send()
        now = time.monotonic()
        if (
            now < self._free_read_until
            and self._free_read - self._admitted_since_read - nbytes
            >= SEND_FLOOR_BYTES + _FREE_READING_SLACK_BYTES
        ):
            self._claimed += nbytes
            self._admitted_since_read += nbytes
            return
        free = _free_bytes(self.path)
        if free - self._claimed - nbytes < SEND_FLOOR_BYTES:
            raise StoreFullError(
                f"the disk holding the store is full ({_mib(free)} free; sends need "
                f"{_mib(SEND_FLOOR_BYTES)} to stay free for acks, nacks and the store's own "
                "upkeep); nothing was written, sends resume when space is freed"
            )
        # The claimed bytes are not in this reading yet: they count as admitted since.
        self._free_read = free
        self._admitted_since_read = self._claimed + nbytes
        self._free_read_until = now + _FREE_READING_MAX_AGE_S
        self._claimed += nbytes

    def _readable(self) -> dict[str, Any]:
        if self._closed:
            raise UnavailableError("the store is closed (server shutting down); retry elsewhere")
        if not self._is_open:
            self._recover()
        return self._families

    def get(self, family: str, key: bytes) -> bytes | None:
        value: bytes | None = self._readable()[family].get(key)
        return value

    def multi_get(self, family: str, keys: Sequence[bytes]) -> list[bytes | None]:
        values = self._readable()[family].get(list(keys))
        return list(values) if values is not None else [None] * len(keys)

    def values_between(self, family: str, start: bytes, end: bytes) -> list[bytes]:
        """The values of the keys in [start, end), in key order, read by one bounded
        iterator: for a run of adjacent keys a third of what a multi_get of them costs (a
        seek and steps instead of a lookup a key: `python -m bench.compiled_cost`)."""
        bounds = rocksdict.ReadOptions()
        bounds.set_iterate_upper_bound(end)
        return list(self._readable()[family].values(from_key=start, read_opt=bounds))

    def scan(self, family: str, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Yield (key, value) for start <= key < end, in key order."""
        it = self._readable()[family].iter()
        it.seek(start)
        while it.valid():
            key: bytes = it.key()
            if key >= end:
                return
            yield key, it.value()
            it.next()

    def first_key(self, family: str, start: bytes, end: bytes) -> bytes | None:
        for key, _ in self.scan(family, start, end):
            return key
        return None

    def last_key(self, family: str, start: bytes, end: bytes) -> bytes | None:
        """The largest key in [start, end), or None.

        An empty range is answered by a forward seek: a reverse one lands on the key before
        `start` and copies its value (RocksDB copies values when stepping back), which for
        an empty queue next to large bodies cost a body-sized copy per lookup.
        """
        it = self._readable()[family].iter()
        it.seek(start)
        if not it.valid() or it.key() >= end:
            return None
        it.seek_for_prev(end)
        while it.valid():
            key: bytes = it.key()
            if key < start:
                return None
            if key < end:
                return key
            it.prev()
        return None

    def batch(self) -> Batch:
        """A new batch; reopens a failed store first when the disk has room again.

        A store that stays read-only still gives a batch (its write fails), so callers
        collect their changes the same way whether or not the disk is full.
        """
        if self._closed:
            raise UnavailableError("the store is closed (server shutting down); retry elsewhere")
        # Checked here first: this module runs as Python, and every write asks for a batch.
        if self._failure is not None:
            try:
                self._recover()
            except PopMQError:
                if not self._is_open:
                    raise
        return Batch(self._handles, self._generation, record=self.tap is not None)

    def write(self, batch: Batch, *, sync: bool) -> None:
        """Write the batch atomically; with sync, return after the WAL is fsynced."""
        if self._closed:
            raise UnavailableError("the store is closed (server shutting down); retry elsewhere")
        self._claimed = 0  # what check_room admitted is written now, or failed
        if self._failure is not None:
            raise self._refusal()
        if batch.generation != self._generation:
            raise UnavailableError(
                "the store was reopened while this write was prepared; nothing was written, retry"
            )
        tap = self.tap
        if tap is not None:
            tap.stamp(batch)
        try:
            self._db.write(batch._batch, self._sync if sync else self._nosync)
        except Exception as exc:
            if tap is not None:
                tap.unwritten(batch)
            raise self._failed("write", exc) from exc
        if tap is not None:
            tap.written(batch)

    def write_ops(self, ops: Sequence[Op], *, sync: bool) -> None:
        """Write changes recorded elsewhere (a follower applying its leader's batch)."""
        batch = self.batch()
        for kind, family, key, value in ops:
            if kind == PUT:
                batch.put(family, key, value)
            elif kind == DELETE:
                batch.delete(family, key)
            else:
                batch.delete_range(family, key, value)
        self.write(batch, sync=sync)

    def checkpoint(self, path: Path) -> None:
        """A consistent copy of every family in `path` (hard links where possible)."""
        rocksdict.Checkpoint(self._readable_db()).create_checkpoint(str(path))

    def _readable_db(self) -> Any:
        self._readable()
        return self._db

    def sync_wal(self) -> None:
        """fsync what was written without sync (every WAL file not yet synced).

        Safe on another thread while the loop reads and writes, and it releases the GIL
        through the fsync, which a synced write does not: see group_commit.py.
        """
        if self._closed:
            raise UnavailableError("the store is closed (server shutting down); retry elsewhere")
        if self._failure is not None:
            # After a failed write or fsync this handle's WAL cannot be trusted (an fsync
            # after a failed one may succeed without what the failed one lost): only the
            # reopen, which replays and flushes the WAL, makes writes durable again.
            raise self._refusal()
        try:
            self._db.flush_wal(True)
        except Exception as exc:
            raise self._failed("sync", exc) from exc

    def _failed(self, what: str, exc: Exception) -> PopMQError:
        """The error for a failed write or sync; the store reopens before the next write."""
        text = str(exc)
        outcome = (
            "nothing was written"
            if what == "write"
            else "what it covered may or may not be stored (a retried send is deduplicated)"
        )
        error: PopMQError
        if _no_space(exc):
            error = StoreFullError(
                f"the disk holding the store is full ({text}); {outcome}, "
                "writes resume when space is freed"
            )
        elif what == "write":
            error = UnavailableError(f"the store could not {what} ({text}); {outcome}, retry later")
        else:
            error = OutcomeUnknownError(
                f"the store could not {what} ({text}); {outcome}, retry later"
            )
        self._failure = error
        self._next_reopen = time.monotonic() + _REOPEN_INTERVAL_S
        self._free_read_until = 0.0  # the disk filled behind the last reading: read again
        return self._refusal()

    def _refusal(self) -> PopMQError:
        """A fresh copy of `_failure` to raise, never `_failure` itself: each raise of one
        exception object adds its frames to that object's traceback, so a failure that
        lasts (a full disk) would keep every failed write's frames, batches and all, alive
        until the store reopens."""
        assert self._failure is not None
        return copy.copy(self._failure)

    def approximate_size(self) -> int:
        """Bytes of SST files plus memtables, across families."""
        total = 0
        for family in self._families.values():
            for prop in ("rocksdb.total-sst-files-size", "rocksdb.cur-size-all-mem-tables"):
                value = family.property_int_value(prop)
                total += int(value or 0)
        return total

    def purge(self, family: str) -> None:
        """Flush and compact `family`, so deleted values leave the WAL and table files."""
        handle = self._readable()[family]
        handle.flush(True)
        handle.compact_range(None, None)

    def close(self) -> None:
        """Sync the WAL and close; never raises: a full disk must not spoil a clean stop.

        Everything acknowledged is in the synced WAL already; a failure here is logged.
        """
        if self._closed:
            return
        self._closed = True
        if not self._is_open:
            return
        if self._failure is None:
            try:
                self._db.flush_wal(True)
            except Exception as exc:  # noqa: BLE001 - logged, and the stop goes on
                log.warning("store %s: the WAL sync at close failed: %s", self.path, exc)
        self._families.clear()
        self._handles.clear()
        try:
            self._db.close()
        except Exception as exc:  # noqa: BLE001 - logged, and the stop goes on
            log.warning(
                "store %s closed with an error (%s); acknowledged writes are in the WAL and "
                "are replayed at the next start",
                self.path,
                exc,
            )
        self._is_open = False
