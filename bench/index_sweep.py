"""How long a retention pass's scan of the index's expiry markers holds the event loop once
many were swept: from the first marker key, or from where the last sweep stopped.

``python -m bench.index_sweep [--entries 600000] [--runs 3]``

A sweep (broker_core/retention.py `sweep_index`) deletes expired index entries and their
expiry markers, a chunk at a time, each chunk found by a scan of the markers due
(`message_index.expired_entries`) on the loop. A deleted marker stays in RocksDB as a
tombstone until compactions drop it, and a scan steps over every tombstone between its start
and the first live marker. Each run writes ``--entries`` id index entries through `Store`,
32 a write with one expiry marker each, expiring over a span of time (as sends do), all
expired by the sweep's time; then sweeps them twice over, in fresh stores: ``from the first
key`` starts every scan at the first possible marker key (what every scan did before);
``resumed`` starts each at the expiry time of the last marker the sweep deleted (what
`retention.swept_below_ms`, as `Retention` does). After the sweep, it times the scan a pass
makes when nothing is left to find, both ways (each pass of a broker that keeps up ends with
one). Reported: the scans' median and maximum while sweeping, and that last scan, in ms of
this thread's CPU; medians of the runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Final

from popmq.broker_core import keys, message_index
from popmq.broker_core.message_index import Expiries, QueueRecords
from popmq.broker_core.retention import swept_below_ms
from popmq.broker_core.store import Store

TOPIC_ID: Final = 7
_PER_WRITE: Final = 32
_TTL: Final = {b"i": 0, b"k": 0, b"d": 0, b"h": 0}
"""Every entry's lifetime is over at the sweep's time (none was refreshed)."""


def _fill(store: Store, entries: int, stamp_ms: int) -> int:
    """Write the entries; returns a time by which all of them expired."""
    for first in range(0, entries, _PER_WRITE):
        batch = store.batch()
        expiries = Expiries()
        records = QueueRecords(first // _PER_WRITE % 8, stamp_ms)
        for n in range(first, min(first + _PER_WRITE, entries)):
            raw_id = os.urandom(16).hex().encode()
            entry = keys.id_index_key_of(TOPIC_ID, raw_id)
            batch.put("index", entry, records.record(n + 1, "", raw_id))
            expiries.add(stamp_ms + n // 1000, entry)  # a thousand entries a millisecond
        expiries.put(batch)
        store.write(batch, sync=False)
    return stamp_ms + entries // 1000 + 1


def _scan(store: Store, now_ms: int, start: bytes) -> tuple[list[tuple[bytes, list[bytes]]], float]:
    began = time.thread_time()
    markers = message_index.expired_entries(store, now_ms, start)
    return markers, (time.thread_time() - began) * 1000


def _one_run(entries: int, resumed: bool) -> tuple[float, float, float, int]:
    """(median scan ms, max scan ms, the last, empty scan's ms, entries swept)."""
    root = Path(tempfile.mkdtemp(prefix="popmq-index-sweep-"))
    try:
        store = Store(root / "data")
        try:
            stamp = int(time.time() * 1000)
            now = _fill(store, entries, stamp)
            start = message_index.EXPIRY_START
            scans: list[float] = []
            swept = 0
            while True:
                markers, took = _scan(store, now, start)
                if not markers:
                    break
                scans.append(took)
                batch = store.batch()
                message_index.sweep_batch(store, batch, markers, now, _TTL)
                store.write(batch, sync=False)
                swept += sum(len(found) for _, found in markers)
                if resumed:
                    start = keys.expiry_key(swept_below_ms(markers, now), b"")
            _, empty = _scan(store, now, start)
        finally:
            store.close()
        return statistics.median(scans), max(scans), empty, swept
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=600_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    results: dict[bool, list[tuple[float, float, float, int]]] = {False: [], True: []}
    for run in range(args.runs):
        for resumed in (False, True) if run % 2 == 0 else (True, False):
            results[resumed].append(_one_run(args.entries, resumed))
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{args.entries:,} index entries swept; medians of {args.runs} runs")
    print()
    print("| scans start | scan while sweeping: median ms | max ms | scan with nothing left: ms |")
    print("|---|---|---|---|")
    for resumed, label in ((False, "from the first key"), (True, "resumed")):
        runs = results[resumed]
        if any(r[3] != args.entries for r in runs):
            raise RuntimeError(f"{label}: not every entry was swept")
        cells = [f"{statistics.median(r[i] for r in runs):.2f}" for i in range(3)]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
