"""The store benches (bench.batch_storage_cost, bench.store_compaction, bench.index_sweep)
write, read back and sweep everything they claim to, for every layout or variant, and their
scripts print their tables; bench.serve_threads charges a window the CPU spent in it. No
timing is asserted."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import batch_storage_cost, index_sweep, serve_threads, store_compaction

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("layout", batch_storage_cost.LAYOUTS)
def test_each_layout_reads_back_every_record(layout: str) -> None:
    ids = batch_storage_cost._ids(20)
    write_us, all_us, read_us = batch_storage_cost._one_run(layout, ids)  # raises if short
    assert write_us >= 0 and all_us >= 0 and read_us >= 0


@pytest.mark.parametrize("variant", [*store_compaction.VARIANTS, "messages-blob+index-universal"])
def test_each_variant_stores_and_reads_every_message(variant: str) -> None:
    result = store_compaction._one_run(variant, 40, [b"x" * store_compaction.RECORD_BYTES])
    assert {"write", "flush", "compaction", "read", "index w-amp"} <= set(result)


@pytest.mark.parametrize("layout", store_compaction.LOGS)
def test_a_log_layout_keys_messages_by_sequence_and_reads_them_back(
    layout: str, tmp_path: Path
) -> None:
    with store_compaction._variant_store(tmp_path / "data", layout) as store:
        offsets = store_compaction._write(store, [b"body"], 4, layout=layout)
        logged = [key for key, _ in store.scan("messages", b"", b"\xff" * 9)]
        assert len(logged) == 4 * store_compaction.BATCH
        assert logged == sorted(logged) and {len(key) for key in logged} == {8}
        entries = len(list(store.scan("queues", b"", b"\xff" * 20)))
        assert entries == (4 if layout == store_compaction.WRITE_ORDER_BATCHED else len(logged))
        assert store_compaction._read(store, offsets, layout=layout) == len(logged)
        assert store_compaction._read(store, offsets, layout="") == 0


def test_index_by_time_keys_ids_by_bucket_and_finds_a_repeat_in_the_bucket_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with store_compaction._variant_store(tmp_path / "data", "index-by-time") as store:
        store_compaction._write(store, [b"body"], 6, layout="", bucket_sends=2)
        ids = [key for key, _ in store.scan("index", b"i", b"j")]
        assert len(ids) == 6 * store_compaction.BATCH
        assert len({key[1:5] for key in ids}) == 3
    # Every send's ids the same: the second send, in the next bucket, finds the first's.
    monkeypatch.setattr(os, "urandom", lambda n: b"\x01" * n)
    with store_compaction._variant_store(tmp_path / "again", "index-by-time") as store:
        with pytest.raises(RuntimeError, match="was found in the index"):
            store_compaction._write(store, [b"body"], 2, layout="", bucket_sends=1)


def test_a_variant_really_changes_the_family(tmp_path: Path) -> None:
    with store_compaction._variant_store(tmp_path / "data", "index-universal") as store:
        store.purge("index")
    options = max((tmp_path / "data").glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    text = options.read_text()
    index_options = text.split('[CFOptions "index"]')[1].split("[CFOptions")[0]
    assert "compaction_style=kCompactionStyleUniversal" in index_options
    messages_options = text.split('[CFOptions "messages"]')[1].split("[CFOptions")[0]
    assert "compaction_style=kCompactionStyleLevel" in messages_options


@pytest.mark.parametrize("resumed", [False, True])
def test_the_sweep_removes_every_entry_either_way(resumed: bool) -> None:
    _, _, _, swept = index_sweep._one_run(3000, resumed)
    assert swept == 3000


@pytest.mark.parametrize(
    "command",
    [
        ["bench.batch_storage_cost", "--batches", "10", "--runs", "1"],
        ["bench.store_compaction", "--batches", "20", "--runs", "1", "--variants", "base"],
        ["bench.index_sweep", "--entries", "2000", "--runs", "1"],
    ],
)
def test_the_scripts_print_their_tables(command: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, env=dict(os.environ), capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "|---|" in result.stdout


def test_a_thread_window_charges_the_cpu_spent_in_it() -> None:
    window = serve_threads._ThreadWindow(os.getpid())
    window.window_started()
    deadline = time.thread_time() + 0.1
    while time.thread_time() < deadline:
        pass
    window.window_ended(1000)
    asyncio.run(window.settled())  # no RocksDB thread here: idle at once
    assert sum(window.per_item.values()) >= 50.0  # at least 0.05 s over 1,000 items
