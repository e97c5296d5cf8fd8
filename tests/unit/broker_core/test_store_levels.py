"""The families a send writes compact level 0 into a small first level, and a store written
with RocksDB's default level sizes (every store before) opens and keeps every record."""

from __future__ import annotations

from pathlib import Path

import pytest
import rocksdict

from popmq.broker_core.store import Store


def _family_option(data_dir: Path, family: str, name: str) -> str:
    """An option of `family` as the newest OPTIONS file RocksDB wrote says."""
    newest = max(data_dir.glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    section = newest.read_text().split(f'[CFOptions "{family}"]')[1].split("[CFOptions")[0]
    for line in section.splitlines():
        key, _, value = line.strip().partition("=")
        if key == name:
            return value
    raise AssertionError(f"{name} is not in {family}'s options")


def _write(store: Store, first: int, count: int) -> None:
    for start in range(first, first + count, 200):
        batch = store.batch()
        for n in range(start, min(start + 200, first + count)):
            batch.put("messages", b"m%08d" % n, b"record %d " % n + b"x" * 1000)
            batch.put("index", b"i%08d" % n, b"entry %d" % n)
        store.write(batch, sync=False)
    for family in ("messages", "index"):
        store.purge(family)  # into table files, through a compaction


def _check(store: Store, count: int) -> None:
    messages = dict(store.scan("messages", b"m", b"n"))
    index = dict(store.scan("index", b"i", b"j"))
    assert len(messages) == len(index) == count
    for n in range(count):
        assert messages[b"m%08d" % n].startswith(b"record %d " % n)
        assert index[b"i%08d" % n] == b"entry %d" % n


def test_messages_and_index_have_a_16_mib_first_level(tmp_path: Path) -> None:
    store = Store(tmp_path / "data")
    store.close()
    for family in ("messages", "index"):
        assert _family_option(tmp_path / "data", family, "max_bytes_for_level_base") == str(
            16 * 1024 * 1024
        )
    # The others keep RocksDB's default: what they hold is written rarely or is small.
    assert _family_option(tmp_path / "data", "offsets", "max_bytes_for_level_base") == str(
        256 * 1024 * 1024
    )


def test_a_store_written_with_the_default_levels_opens_and_keeps_every_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    with monkeypatch.context() as patch:
        # The store as it was: no family set its first level's size.
        patch.setattr(rocksdict.Options, "set_max_bytes_for_level_base", lambda self, size: None)
        store = Store(data_dir)
        try:
            _write(store, 0, 3000)
        finally:
            store.close()
    assert _family_option(data_dir, "messages", "max_bytes_for_level_base") == str(256 << 20)

    for reopen in range(2):
        store = Store(data_dir)
        try:
            _check(store, 3000 + 1000 * reopen)
            _write(store, 3000 + 1000 * reopen, 1000)
            _check(store, 4000 + 1000 * reopen)
        finally:
            store.close()
        assert _family_option(data_dir, "messages", "max_bytes_for_level_base") == str(16 << 20)
