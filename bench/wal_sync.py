"""A synced RocksDB write with and without WAL file recycling (``recycle_log_file_num``).

``python -m bench.wal_sync [--writes 600] [--runs 3]``

Each run opens a fresh rocksdict store in a temp dir (in ``--dir``, default the system's temp
dir: put it on the disk the data dir lives on) and makes ``--writes`` writes, each a
WriteBatch written without sync and then ``flush_wal(True)``, the way popmq's group commit
does it. Every 50 writes the memtable is flushed, which retires the WAL, so with recycling on
the next WAL is a reused file. Only the second half of the writes is measured (by then the
files in use are reused ones). Two shapes: a batch of 32 x 1 KiB messages (a producer's
batch) and a lone 1 KiB message. Reported: the fsync's p50 / p90 and the CPU of write + sync
per write, medians over the runs, which alternate the two settings.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import rocksdict

_FLUSH_EVERY = 50
_SHAPES = {"batch of 32": 32, "lone message": 1}
_BODY_BYTES = 1024


def _one_run(recycle: int, per_batch: int, writes: int, parent: str | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory(dir=parent) as path:
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_recycle_log_file_num(recycle)
        db = rocksdict.Rdict(path, options)
        unsynced = rocksdict.WriteOptions()
        body = os.urandom(_BODY_BYTES)
        syncs: list[float] = []
        cpu = 0.0
        try:
            for i in range(writes):
                batch = rocksdict.WriteBatch(raw_mode=True)
                for _ in range(per_batch):
                    batch.put(os.urandom(16), body)
                cpu_began = time.process_time()
                db.write(batch, unsynced)
                began = time.perf_counter()
                db.flush_wal(True)
                took = time.perf_counter() - began
                if i >= writes // 2:
                    syncs.append(took)
                    cpu += time.process_time() - cpu_began
                if i % _FLUSH_EVERY == _FLUSH_EVERY - 1:
                    db.flush()
        finally:
            db.close()
    syncs.sort()
    return {
        "fsync p50 us": syncs[len(syncs) // 2] * 1e6,
        "fsync p90 us": syncs[int(len(syncs) * 0.9)] * 1e6,
        "cpu us/write": cpu / len(syncs) * 1e6,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.wal_sync", description=__doc__)
    parser.add_argument("--writes", type=int, default=600)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=None, help="parent of the temp stores")
    args = parser.parse_args(argv)
    print(f"{args.writes} synced writes per run, second half measured, {args.runs} run(s):\n")
    print("| shape | recycled WAL files | fsync p50 us | fsync p90 us | cpu us/write |")
    print("|---|---|---|---|---|")
    for shape, per_batch in _SHAPES.items():
        runs: dict[int, list[dict[str, float]]] = {0: [], 2: []}
        for _ in range(args.runs):
            for recycle in runs:
                runs[recycle].append(_one_run(recycle, per_batch, args.writes, args.dir))
        for recycle, values in runs.items():
            cells = [f"{statistics.median(v[m] for v in values):.0f}" for m in values[0]]
            print(f"| {shape} | {recycle} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
