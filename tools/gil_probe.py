"""Does rocksdict release the GIL while it fsyncs? A synced write does not; flush_wal does.

Runs a pure-Python counting loop on the main thread alone, then again while a second
thread does 1 KiB writes made durable (a) by a synced write, (b) by an unsynced write plus
`flush_wal(True)`, the way broker_core/group_commit.py syncs, and prints the rates. Where the
fsync releases the GIL the loop's rate stays close to its solo rate.

Usage: python tools/gil_probe.py [DIR]
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from collections.abc import Callable

import rocksdict


def spin(seconds: float) -> int:
    count, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        count += 1
    return count


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="gil-probe-")
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    db = rocksdict.Rdict(path, options)
    synced = rocksdict.WriteOptions()
    synced.sync = True
    unsynced = rocksdict.WriteOptions()

    def synced_write() -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.put(b"key", b"v" * 1024)
        db.write(batch, synced)

    def write_then_flush_wal() -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.put(b"key", b"v" * 1024)
        db.write(batch, unsynced)
        db.flush_wal(True)

    alone = spin(0.5)
    print(f"main-thread loop alone: {alone}")
    for name, durable_write in (
        ("synced write", synced_write),
        ("write + flush_wal(True)", write_then_flush_wal),
    ):
        stop = threading.Event()
        writes = [0]

        def writer(
            durable_write: Callable[[], None] = durable_write,
            stop: threading.Event = stop,
            writes: list[int] = writes,
        ) -> None:
            while not stop.is_set():
                durable_write()
                writes[0] += 1

        thread = threading.Thread(target=writer)
        thread.start()
        shared = spin(0.5)
        stop.set()
        thread.join()
        print(f"with a {name} thread: ratio {shared / alone:.2f} ({writes[0]} writes in 0.5 s)")
    db.close()


if __name__ == "__main__":
    main()
