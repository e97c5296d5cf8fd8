"""Does rocksdict release the GIL during a synced write? (It does not; see writer.py.)

Runs a pure-Python counting loop on the main thread alone, then again while a second
thread does synced 1 KiB writes, and prints both rates. If the write released the GIL during
its fsync, the second rate would stay close to the first.

Usage: python tools/gil_probe.py [DIR]
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time

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
    stop = threading.Event()
    writes = [0]

    def writer() -> None:
        while not stop.is_set():
            batch = rocksdict.WriteBatch(raw_mode=True)
            batch.put(b"key", b"v" * 1024)
            db.write(batch, synced)
            writes[0] += 1

    alone = spin(0.5)
    thread = threading.Thread(target=writer)
    thread.start()
    shared = spin(0.5)
    stop.set()
    thread.join()
    db.close()
    print(f"main-thread loop alone: {alone}; with a synced writer thread: {shared}")
    print(f"ratio {shared / alone:.2f} ({writes[0]} synced writes in 0.5 s)")


if __name__ == "__main__":
    main()
