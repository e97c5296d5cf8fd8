"""The store on a real, small disk (a tmpfs) that fills up: it never needs a restart.

Needs root to mount the tmpfs, as on our CI machines; skipped elsewhere with the reason.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from popmq.broker_core.broker import Broker
from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.broker_core.errors import DataDirError, StoreFullError
from popmq.broker_core.group_commit import GroupCommitWriter, QueueOffsets
from popmq.broker_core.store import MEMTABLE_BUDGET_BYTES, SEND_FLOOR_BYTES, Batch, Store
from popmq.broker_core.types import NewMessage
from tests.chaos.disk_full import MountError, mounted_tmpfs
from tests.support.waiting import until, wait_until

_MIB = 1024 * 1024


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 32 MiB tmpfs."""
    try:
        with mounted_tmpfs(tmp_path / "disk", 32) as mount:
            yield mount
    except MountError as exc:
        pytest.skip(str(exc))


def _free(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def _fill(disk: Path) -> list[Path]:
    """Filler files until not a byte is left; returned newest first, 1 MiB each."""
    files: list[Path] = []
    chunk = b"\x5a" * _MIB
    while True:
        path = disk / f"filler-{len(files)}"
        files.insert(0, path)
        try:
            path.write_bytes(chunk)
        except OSError:
            return files


def _release(files: list[Path], mib: int) -> None:
    for _ in range(mib):
        files.pop(0).unlink()


def _put(store: Store, key: bytes, value: bytes) -> None:
    batch = store.batch()
    batch.put("messages", key, value)
    store.write(batch, sync=True)


def _write_until_it_works(store: Store, key: bytes, limit_s: float = 5.0) -> float:
    began = time.monotonic()
    while True:
        try:
            _put(store, key, b"after")
        except StoreFullError:
            assert time.monotonic() - began < limit_s, "writes did not resume"
            time.sleep(0.05)
            continue
        return time.monotonic() - began


def test_a_write_failed_by_a_full_disk_resumes_after_a_few_mib_are_freed(disk: Path) -> None:
    store = Store(disk / "data")
    try:
        written = []
        for i in range(12):  # ~6 MiB: the WAL rolls over into table files meanwhile
            _put(store, b"k%03d" % i, os.urandom(512 * 1024))
            written.append(b"k%03d" % i)
        fillers = _fill(disk)
        with pytest.raises(StoreFullError, match="disk holding the store is full"):
            for i in range(100):
                _put(store, b"x%03d" % i, os.urandom(512 * 1024))
        assert store.read_only
        assert store.get("messages", b"k000") is not None  # reads keep working
        with pytest.raises(StoreFullError):
            _put(store, b"refused", b"v")
        # The reopen flushes the memtables: the active one and one being flushed, each at
        # most MEMTABLE_BUDGET_BYTES (RocksDB's default: 64 MiB a family), plus 1 MiB.
        _release(fillers, 2 * MEMTABLE_BUDGET_BYTES // _MIB + 2)
        _write_until_it_works(store, b"after")
        assert not store.read_only
        assert all(store.get("messages", key) is not None for key in written)
    finally:
        store.close()


def test_a_store_on_a_full_disk_opens_read_only_and_becomes_writable_when_space_returns(
    disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store(disk / "data")
    for i in range(6):
        _put(store, b"k%03d" % i, os.urandom(512 * 1024))
    store.close()
    fillers = _fill(disk)
    store = Store(disk / "data")
    try:
        assert store.read_only
        assert "opened READ-ONLY: the disk is full" in caplog.text
        assert store.get("messages", b"k005") is not None
        with pytest.raises(StoreFullError, match="read-only"):
            _put(store, b"refused", b"v")
        _release(fillers, 2)
        _write_until_it_works(store, b"after")
        assert store.get("messages", b"k000") is not None
    finally:
        store.close()
    reopened = Store(disk / "data")
    try:
        assert reopened.get("messages", b"after") == b"after"
    finally:
        reopened.close()


def test_a_new_store_on_a_full_disk_is_one_clear_error(disk: Path) -> None:
    _fill(disk)
    with pytest.raises(DataDirError, match="the disk is full, and starting needs to write"):
        Store(disk / "data")


def test_closing_a_store_whose_disk_is_full_does_not_raise(disk: Path) -> None:
    store = Store(disk / "data")
    _fill(disk)
    with pytest.raises(StoreFullError):
        for i in range(100):
            _put(store, b"x%03d" % i, os.urandom(512 * 1024))
    store.close()  # a clean stop on a full disk: no exception, logged at most


def test_sends_stop_at_the_floor_while_acks_new_groups_and_topics_keep_working(
    disk: Path,
) -> None:
    async def scenario() -> None:
        broker = Broker(BrokerConfig(store=StoreConfig(data_dir=disk / "data")))
        await broker.start()
        try:
            await broker.create_topic("t", 1)
            await broker.pop("g", "t", wait_s=0)
            with pytest.raises(StoreFullError, match=r"sends need 8\.0 MiB to stay free"):
                for _ in range(200):
                    await broker.send([NewMessage(topic="t", body=os.urandom(256 * 1024))])
            # Sends stopped with room left; RocksDB's flushes since take at most a memtable
            # once its background work settles (a compaction writes its output before it
            # deletes its inputs, so free space dips while one runs, longer on a busy machine).
            await until(
                lambda: _free(disk) >= SEND_FLOOR_BYTES - MEMTABLE_BUDGET_BYTES,
                f"at least {SEND_FLOOR_BYTES - MEMTABLE_BUDGET_BYTES} bytes free",
                timeout_s=30,
                interval_s=0.1,
            )
            popped = await broker.pop("g", "t", max_messages=2, wait_s=0)
            assert await broker.ack("g", [popped[0].receipt_handle]) == [None]
            await broker.nack("g", popped[1].receipt_handle, 1)
            await broker.create_topic("t2", 1)
            assert len(await broker.pop("new-group", "t", max_messages=4, wait_s=0)) == 4
        finally:
            await broker.close()

    asyncio.run(scenario())


def test_writes_failing_on_a_full_disk_again_and_again_warn_once(
    disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    Store(disk / "data").close()
    _fill(disk)
    store = Store(disk / "data")  # read-only: every write fails until space returns

    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        for _ in range(5):
            job = writer.submit(lambda batch, _: batch.put("meta", b"k", b"v"), sync=True)
            with pytest.raises(StoreFullError):
                await job
        writer.close()

    try:
        with caplog.at_level(logging.DEBUG, logger="popmq.broker_core.group_commit"):
            asyncio.run(scenario())
    finally:
        store.close()
    failures = [r for r in caplog.records if r.getMessage().startswith("write failed")]
    assert [r.levelno for r in failures] == [logging.WARNING] + [logging.DEBUG] * 4


def test_writes_failing_for_long_keep_no_failed_write_alive(disk: Path) -> None:
    """Each refused write gets an error of its own: one error object raised again and again
    would gather every refused write's frames in its traceback, and with them their batches
    and bodies, until space returns."""
    Store(disk / "data").close()
    _fill(disk)
    store = Store(disk / "data")  # read-only: every write fails until space returns
    body = b"\x5a" * 64 * 1024

    def send(batch: Batch, offsets: QueueOffsets) -> None:
        batch.put("messages", b"m%d" % offsets.allocate(1, 0), body)

    async def scenario() -> None:
        writer = GroupCommitWriter(store, QueueOffsets(store))
        for _ in range(200):
            with pytest.raises(StoreFullError):
                await writer.submit(send, sync=True)
        writer.close()

    try:
        asyncio.run(scenario())
        gc.collect()
        alive = [o for o in gc.get_objects() if isinstance(o, Batch)]
        assert len(alive) <= 1, f"{len(alive)} failed batches are still alive"
    finally:
        store.close()


@pytest.fixture
def roomy_disk(tmp_path: Path) -> Iterator[Path]:
    """A 128 MiB tmpfs: far enough above the send floor that `check_room` may go by an
    earlier reading of the free space for a while."""
    try:
        with mounted_tmpfs(tmp_path / "disk", 128) as mount:
            yield mount
    except MountError as exc:
        pytest.skip(str(exc))


def test_sends_admitted_between_readings_of_the_free_space_still_stop_at_the_floor(
    roomy_disk: Path,
) -> None:
    """Admitted sends not yet written count against the free space, whether or not the
    free space was read again for them: a burst leaves the floor free, to the MiB."""
    store = Store(roomy_disk / "data")
    try:
        free = _free(roomy_disk)
        admitted = 0
        with pytest.raises(StoreFullError, match=r"sends need 8\.0 MiB to stay free"):
            while True:
                store.check_room(_MIB)
                admitted += _MIB
        assert free - SEND_FLOOR_BYTES - 2 * _MIB < admitted <= free - SEND_FLOOR_BYTES
    finally:
        store.close()


def test_a_disk_filled_by_another_writer_refuses_sends_within_moments(roomy_disk: Path) -> None:
    store = Store(roomy_disk / "data")
    try:
        store.check_room(1024)  # read far above the floor
        _fill(roomy_disk)
        refusal: list[str] = []

        def refused() -> bool:
            try:
                store.check_room(1024)
            except StoreFullError as exc:
                refusal.append(str(exc))
                return True
            return False

        wait_until(refused, "a send refused on the filled disk", timeout_s=5)
        assert "sends need 8.0 MiB to stay free" in refusal[0]
    finally:
        store.close()
