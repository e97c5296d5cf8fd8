"""The one adapter between broker_core and RocksDB (rocksdict in raw mode).

Column families (see docs/architecture.md): messages, offsets, checkpoints, revive, meta,
timers (delayed messages by due time), index (message ids, dedup ids, keys, expiries).
All calls here are blocking and short (point reads, small scans, one write batch); they run
on the event loop thread. rocksdict holds the GIL during a write, so a separate writer thread
would not overlap fsync with other work (measured, see GroupCommitWriter).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import rocksdict

from broker_core.errors import PopMQError, StoreFullError, UnavailableError

log = logging.getLogger(__name__)

FAMILIES = ("messages", "offsets", "checkpoints", "revive", "meta", "timers", "index")
_REOPEN_INTERVAL_S = 0.5
"""After a failed write, how often a new write may try to reopen the store."""
_REOPEN_FREE_BYTES = 1024 * 1024
"""Free space the store's disk needs before a reopen is tried."""
_RECYCLED_WAL_FILES = 2
"""Obsolete WAL files kept for reuse (RocksDB's default is none): at most this many extra
files of up to a memtable's worth each on disk, for cheaper fsyncs (see `_open`)."""


def _free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


class Batch:
    """An atomic set of changes, written by Store.write in one WriteBatch."""

    __slots__ = ("_batch", "_handles", "puts")

    def __init__(self, handles: dict[str, Any]) -> None:
        self._batch = rocksdict.WriteBatch(raw_mode=True)
        self._handles = handles
        self.puts = 0

    def put(self, family: str, key: bytes, value: bytes) -> None:
        self._batch.put(key, value, self._handles[family])
        self.puts += 1

    def delete(self, family: str, key: bytes) -> None:
        self._batch.delete(key, self._handles[family])
        self.puts += 1

    def delete_range(self, family: str, start: bytes, end: bytes) -> None:
        self._batch.delete_range(start, end, self._handles[family])
        self.puts += 1

    def __len__(self) -> int:
        return self.puts


class Store:
    """RocksDB with popmq's column families; keys and values are bytes."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._families: dict[str, Any] = {}
        self._handles: dict[str, Any] = {}
        self._is_open = False
        self._open()
        self._sync = rocksdict.WriteOptions()
        self._sync.sync = True
        self._nosync = rocksdict.WriteOptions()
        self._closed = False
        self._failure: PopMQError | None = None
        """Set after a failed write: RocksDB keeps refusing writes until it is reopened."""
        self._next_reopen = 0.0

    def _open(self) -> None:
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        options.create_missing_column_families(True)
        # A new WAL file grows with every append, so each fsync must also journal the inode's
        # new size; a recycled one is overwritten in place and an fsync writes data only.
        # `python -m bench.wal_sync` (medians of 3 runs): the fsync of a 32-message batch
        # 430 -> 225 us, of a lone message 259 -> 169 us, and a third less CPU. RocksDB's
        # recyclable record format tells a reused file's old records from new ones, so
        # recovery stops at the true end (tests/unit/test_store_wal_recycling.py kills a
        # writer to check).
        options.set_recycle_log_file_num(_RECYCLED_WAL_FILES)
        families = {name: rocksdict.Options(raw_mode=True) for name in FAMILIES}
        # Every send looks its message ids up in `index`, and almost all are misses: a bloom
        # filter answers a miss without reading table blocks (0.65 vs 4-6 us a key, measured
        # on 400k keys in table files).
        # The memtable gets one too (whole keys, 5% of the write buffer, ~3 MB): the ids of
        # the last seconds' sends are there, and a miss costs 0.4 instead of 1.7 us a key.
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(10, False)
        families["index"].set_block_based_table_factory(table)
        families["index"].set_memtable_prefix_bloom_ratio(0.05)
        families["index"].set_memtable_whole_key_filtering(True)
        self._db = rocksdict.Rdict(str(self.path), options, column_families=families)
        self._families = {name: self._db.get_column_family(name) for name in FAMILIES}
        self._handles = {name: self._db.get_column_family_handle(name) for name in FAMILIES}
        self._is_open = True

    def _recover(self) -> None:
        """After a failed write, reopen the database once the disk has room again.

        RocksDB stops taking writes after a WAL write error ("Writer has previous error")
        and rocksdict cannot resume it; reads keep working on the old handle meanwhile.
        Reopening replays the WAL, dropping any torn tail, so nothing half-written survives.
        """
        failure = self._failure
        if failure is None:
            return
        now = time.monotonic()
        # Reopening flushes the WAL into a table file of about its size: wait for that room.
        needed = _REOPEN_FREE_BYTES + sum(p.stat().st_size for p in self.path.glob("*.log"))
        if now < self._next_reopen:
            raise failure
        self._next_reopen = now + _REOPEN_INTERVAL_S
        if _free_bytes(self.path) < needed:
            raise failure
        if self._is_open:
            self._families.clear()
            self._handles.clear()
            with contextlib.suppress(Exception):
                self._db.close()
            self._is_open = False
        try:
            self._open()
        except Exception as exc:
            self._failure = UnavailableError(
                f"the store could not be reopened ({exc}); it is retried on the next request"
            )
            raise self._failure from exc
        self._failure = None
        log.warning("store %s reopened after a write failure; writes resume", self.path)

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
        """The largest key in [start, end), or None."""
        it = self._readable()[family].iter()
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
        if self._closed:
            raise UnavailableError("the store is closed (server shutting down); retry elsewhere")
        self._recover()
        return Batch(self._handles)

    def write(self, batch: Batch, *, sync: bool) -> None:
        """Write the batch atomically; with sync, return after the WAL is fsynced."""
        if self._closed:
            raise UnavailableError("the store is closed (server shutting down); retry elsewhere")
        try:
            self._db.write(batch._batch, self._sync if sync else self._nosync)
        except Exception as exc:
            raise self._failed("write", exc) from exc

    def sync_wal(self) -> None:
        """fsync what was written without sync (every WAL file not yet synced).

        Safe on another thread while the loop reads and writes, and it releases the GIL
        through the fsync, which a synced write does not: see writer.py.
        """
        if self._closed:
            raise UnavailableError("the store is closed (server shutting down); retry elsewhere")
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
        if "No space left" in text or "ENOSPC" in text or str(errno.ENOSPC) in text:
            error = StoreFullError(
                f"the disk holding the store is full ({text}); {outcome}, "
                "writes resume when space is freed"
            )
        else:
            error = UnavailableError(f"the store could not {what} ({text}); {outcome}, retry later")
        self._failure = error
        self._next_reopen = time.monotonic() + _REOPEN_INTERVAL_S
        return error

    def approximate_size(self) -> int:
        """Bytes of SST files plus memtables, across families."""
        total = 0
        for family in self._families.values():
            for prop in ("rocksdb.total-sst-files-size", "rocksdb.cur-size-all-mem-tables"):
                value = family.property_int_value(prop)
                total += int(value or 0)
        return total

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._is_open:
            return
        if self._failure is None:
            self._db.flush_wal(True)
        # Column-family objects keep the database (and its LOCK file) alive: drop them first.
        self._families.clear()
        self._handles.clear()
        with contextlib.suppress(Exception) if self._failure else contextlib.nullcontext():
            self._db.close()
        self._is_open = False
