"""What the store's small memtables and capped WAL cost in raw write throughput.

``python -m bench.store_memtables [--puts 200000] [--runs 3]``

broker_core/store.py caps each family's memtable and the WAL at 4 MiB so that a reopen on a
nearly full disk has little to flush (docs/durability.md, "Disk full"). This times
``--puts`` 1 KiB message puts, 4 per unsynced WriteBatch with an index entry each (the
shape of popmq's sends without the fsync), through ``Store`` as configured and through
``Store`` with RocksDB's default memtable and WAL sizes, alternating, in fresh temp dirs.
Reported, medians over the runs: puts/s, the CPU time of the writing thread per put (what
the event loop pays, under the GIL), the CPU time of all threads per put including the
close (so RocksDB's background flushes and compactions count, and the flush of what the
memtables still hold at the end), table files written, and the memtables' size at the end
(what a reopen would flush).

The default of 200,000 puts (~200 MiB) is several times RocksDB's 64 MiB memtables, so
both configurations flush during the run: with 40,000 puts the defaults never flushed
within the timed loop, so their flush came after it. At 200,000 the 4 MiB ones still
make fewer puts/s at no more CPU: RocksDB stops writes while both write buffers wait for
a flush (docs/durability.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import rocksdict

from popmq.broker_core.store import Store

_BODY_BYTES = 1024
_PER_BATCH = 4


@contextmanager
def _rocksdb_defaults() -> Iterator[None]:
    """Make the store's memtable and WAL caps no-ops while it opens."""
    saved = rocksdict.Options.set_write_buffer_size, rocksdict.Options.set_max_total_wal_size

    def ignore(self: Any, size: int) -> None:
        del self, size

    rocksdict.Options.set_write_buffer_size = ignore  # type: ignore[method-assign]
    rocksdict.Options.set_max_total_wal_size = ignore  # type: ignore[method-assign]
    try:
        yield
    finally:
        rocksdict.Options.set_write_buffer_size, rocksdict.Options.set_max_total_wal_size = saved  # type: ignore[method-assign]


def _one_run(puts: int, *, capped: bool) -> tuple[float, float, float, int, float]:
    root = Path(tempfile.mkdtemp(prefix="popmq-memtables-"))
    try:
        if capped:
            store = Store(root / "data")
        else:
            with _rocksdb_defaults():
                store = Store(root / "data")
        body = os.urandom(_BODY_BYTES)
        began, thread_began, process_began = (
            time.perf_counter(),
            time.thread_time(),
            time.process_time(),
        )
        for first in range(0, puts, _PER_BATCH):
            batch = store.batch()
            for n in range(first, first + _PER_BATCH):
                batch.put("messages", b"m%012d" % n, body)
                batch.put("index", b"i%012d" % n, b"x" * 40)
            store.write(batch, sync=False)
        rate = puts / (time.perf_counter() - began)
        loop_cpu_us = (time.thread_time() - thread_began) / puts * 1e6
        tables = len(list((root / "data").glob("*.sst")))
        memtables = sum(
            int(store._families[name].property_int_value("rocksdb.cur-size-all-mem-tables") or 0)
            for name in ("messages", "index")
        )
        store.close()
        all_cpu_us = (time.process_time() - process_began) / puts * 1e6
        return rate, loop_cpu_us, all_cpu_us, tables, memtables / 2**20
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--puts", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results: dict[bool, list[tuple[float, float, float, int, float]]] = {True: [], False: []}
    for _ in range(args.runs):
        for capped in (False, True):
            results[capped].append(_one_run(args.puts, capped=capped))
    print(
        "| memtables and WAL | puts/s | writing thread CPU/put | all threads CPU/put "
        "| table files | memtables at the end (MiB) |"
    )
    print("|---|---|---|---|---|---|")
    for capped, label in ((False, "RocksDB defaults"), (True, "popmq: 4 MiB each")):
        runs = results[capped]
        print(
            f"| {label} | {statistics.median(r[0] for r in runs):,.0f} | "
            f"{statistics.median(r[1] for r in runs):.2f} us | "
            f"{statistics.median(r[2] for r in runs):.2f} us | "
            f"{statistics.median(r[3] for r in runs):.0f} | "
            f"{statistics.median(r[4] for r in runs):.1f} |"
        )


if __name__ == "__main__":
    main()
