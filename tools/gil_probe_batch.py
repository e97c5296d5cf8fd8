"""Does rocksdict hold the GIL through an (unsynced) write of a large batch?

The largest valid send is one WriteBatch of 1,024 x 4 KiB bodies plus their index entries.
If rocksdict released the GIL during `write`, running that write on a thread would keep the
event loop serving meanwhile. A thread writes `--batches` such batches through `Store`; the
main thread spins, noting the time of every iteration. For each write it reports the longest
stretch during which the main thread did not run once, and the main thread's iteration rate
during writes and between them. A write that releases the GIL leaves the rate unchanged and
no long stretch; one that holds it stops the main thread for about the write's length (the
rest of it is the thread switch interval at its ends).

Usage: python tools/gil_probe_batch.py [--batches 30]
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from popmq.broker_core.store import Batch, Store


def _batch(store: Store, n: int, body: bytes) -> Batch:
    batch = store.batch()
    for i in range(1024):
        batch.put("messages", b"m%06d%06d" % (n, i), body)
        batch.put("index", b"i%06d%06d" % (n, i), b"x" * 40)
    return batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=30)
    args = parser.parse_args()
    store = Store(Path(tempfile.mkdtemp(prefix="gil-probe-batch-")) / "data")
    body = os.urandom(4096)
    batches = [_batch(store, n, body) for n in range(args.batches)]
    spans: list[tuple[float, float]] = []
    done = threading.Event()

    def writer() -> None:
        time.sleep(0.2)
        for batch in batches:
            began = time.perf_counter()
            store.write(batch, sync=False)
            spans.append((began, time.perf_counter()))
            time.sleep(0.03)
        done.set()

    stamps: list[float] = []
    thread = threading.Thread(target=writer)
    thread.start()
    while not done.is_set():
        stamps.append(time.perf_counter())
    thread.join()
    store.close()
    longest, inside, inside_s = [], 0, 0.0
    for began, ended in spans:
        lo, hi = bisect.bisect_left(stamps, began), bisect.bisect_right(stamps, ended)
        points = [began, *stamps[lo:hi], ended]
        longest.append(max(b - a for a, b in itertools.pairwise(points)))
        inside += hi - lo
        inside_s += ended - began
    outside_rate = (len(stamps) - inside) / (stamps[-1] - stamps[0] - inside_s)
    print(
        f"write of 1,024 x 4 KiB: median {statistics.median(e - b for b, e in spans) * 1000:.1f}"
        f" ms; main thread stopped for {statistics.median(longest) * 1000:.1f} ms of it "
        f"(median longest stretch); main-thread iterations/ms during writes "
        f"{inside / inside_s / 1000:.0f}, between writes {outside_rate / 1000:.0f}; "
        f"switch interval {sys.getswitchinterval() * 1000:.0f} ms; load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
