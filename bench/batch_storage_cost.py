"""What storing a send's messages as one value per queue would save: the ceiling of the
batch-granular storage lever, measured on the store before building it.

``python -m bench.batch_storage_cost [--batches 3000] [--runs 5]``

Today a send of 32 messages to one queue puts 32 records in the `messages` family and 32
id index entries in `index` (broker_core/send.py `_store_queued`, message_index.py), and a
pop of 32 reads 32 records with one iterator (`Store.values_between`). The lever would put
one value per (send, queue) holding its records, keyed by the first offset, and a pop
would read it and cut it into records. This measures the store's side of both through
`Store` as configured (its families, memtables, WAL cap and bloom filters), nothing of
popmq around it, in fresh temp dirs, the layouts alternating within each run:

- ``per message``: today's write: 32 record puts + 32 id index puts + one expiry marker.
- ``one value``: the records of the 32 in one value (each with a 4-byte length) + the same
  32 id index entries + marker: the lever as it could be built (lookups by id still need
  their entry).
- ``one value, no index``: the value alone: the bound if the id entries went too (they
  cannot while lookups and deduplication by id exist; shown as the limit).

Writes are unsynced: the bytes the WAL takes are the same in every layout, so an fsync
costs the same; what differs is RocksDB's per-put work (the WriteBatch, the memtable's skip
list, the WAL record's framing) and the Python calls that make the puts. Reads are pops
of 32 from a backlog of ``--batches`` batches, in offset order: ``per message`` iterates 32
keys; the others read the value by its key and cut it into 32 records (a Python loop here;
a compiled one would cost less).

Reported, medians over the runs: CPU time of this thread per message (what a broker's event
loop would pay, under the GIL) to write and to read, and of all threads per message for the
writes including the close (RocksDB's flushes and compactions of what was written).
Compare the differences with a message's whole server CPU in docs/benchmarks.md (cluster
section, (a) serve: produce batch 32 and pop + ack batch 32), which they are a part of.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import tempfile
import time
from pathlib import Path
from typing import Final

from popmq.broker_core import keys
from popmq.broker_core.message_index import Expiries, QueueRecords
from popmq.broker_core.store import Store

BATCH: Final = 32
RECORD_BYTES: Final = 1100
"""About a 1 KiB body's StoredMessage (its body, id, topic, times and properties)."""
TOPIC_ID: Final = 7
QUEUE_ID: Final = 3
LAYOUTS: Final = ("per message", "one value", "one value, no index")
_LENGTH: Final = struct.Struct(">I")


def _ids(batches: int) -> list[list[bytes]]:
    """Message ids as the SDK makes them: 32 hex characters, new for every message."""
    return [[os.urandom(16).hex().encode() for _ in range(BATCH)] for _ in range(batches)]


def _write(store: Store, layout: str, ids: list[list[bytes]], record: bytes) -> None:
    offset = 0
    stamp = int(time.time() * 1000)
    for batch_ids in ids:
        batch = store.batch()
        expiries = Expiries()
        records = QueueRecords(QUEUE_ID, stamp)
        if layout == "per message":
            for n, raw_id in enumerate(batch_ids):
                at = offset + n
                batch.put("messages", keys.message_key(TOPIC_ID, QUEUE_ID, at), record)
                entry = keys.id_index_key_of(TOPIC_ID, raw_id)
                batch.put("index", entry, records.record(at, "", raw_id))
                expiries.add(stamp + 86_400_000, entry)
        else:
            parts: list[bytes] = []
            for _ in batch_ids:
                parts.append(_LENGTH.pack(len(record)))
                parts.append(record)
            batch.put("messages", keys.message_key(TOPIC_ID, QUEUE_ID, offset), b"".join(parts))
            if layout == "one value":
                for n, raw_id in enumerate(batch_ids):
                    entry = keys.id_index_key_of(TOPIC_ID, raw_id)
                    batch.put("index", entry, records.record(offset + n, "", raw_id))
                    expiries.add(stamp + 86_400_000, entry)
        expiries.put(batch)
        store.write(batch, sync=False)
        offset += BATCH


def _read(store: Store, layout: str, batches: int) -> int:
    """Pop-sized reads of everything written; the records read (a check that all were)."""
    count = 0
    for n in range(batches):
        first = n * BATCH
        if layout == "per message":
            values = store.values_between(
                "messages",
                keys.message_key(TOPIC_ID, QUEUE_ID, first),
                keys.message_key(TOPIC_ID, QUEUE_ID, first + BATCH),
            )
            count += len(values)
        else:
            value = store.get("messages", keys.message_key(TOPIC_ID, QUEUE_ID, first))
            assert value is not None
            pos, end = 0, len(value)
            records: list[bytes] = []
            while pos < end:
                (size,) = _LENGTH.unpack_from(value, pos)
                records.append(value[pos + 4 : pos + 4 + size])
                pos += 4 + size
            count += len(records)
    return count


def _one_run(layout: str, ids: list[list[bytes]]) -> tuple[float, float, float]:
    """(write CPU of this thread, write CPU of all threads incl. the close, read CPU of this
    thread), each in us a message."""
    root = Path(tempfile.mkdtemp(prefix="popmq-batch-storage-"))
    messages = len(ids) * BATCH
    record = os.urandom(RECORD_BYTES)
    try:
        store = Store(root / "data")
        thread_began, process_began = time.thread_time(), time.process_time()
        _write(store, layout, ids, record)
        write_us = (time.thread_time() - thread_began) / messages * 1e6
        read_began = time.thread_time()
        read = _read(store, layout, len(ids))
        read_us = (time.thread_time() - read_began) / messages * 1e6
        if read != messages:
            raise RuntimeError(f"{layout}: read {read} of {messages} records")
        reading_cpu = time.thread_time() - read_began
        store.close()
        all_write_us = (time.process_time() - process_began - reading_cpu) / messages * 1e6
        return write_us, all_write_us, read_us
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=3000, help="sends of 32 per run")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float, float]]] = {layout: [] for layout in LAYOUTS}
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for run in range(args.runs):
        ids = _ids(args.batches)
        # Alternate the order, so no layout always runs first (or right after the big one).
        order = LAYOUTS if run % 2 == 0 else tuple(reversed(LAYOUTS))
        for layout in order:
            results[layout].append(_one_run(layout, ids))
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"{args.batches:,} sends of {BATCH} records of {RECORD_BYTES} bytes to one queue, "
        f"then pops of {BATCH}; medians of {args.runs} runs"
    )
    print()
    print(
        "| layout | write: this thread us/msg | write: all threads us/msg (with the close) "
        "| read: this thread us/msg |"
    )
    print("|---|---|---|---|")
    base = results["per message"]
    for layout in LAYOUTS:
        runs = results[layout]
        cells = []
        for i in range(3):
            value = statistics.median(r[i] for r in runs)
            if layout == "per message":
                cells.append(f"{value:.2f}")
            else:
                saved = statistics.median(b[i] - r[i] for b, r in zip(base, runs, strict=True))
                cells.append(f"{value:.2f} ({saved:.2f} saved)")
        print(f"| {layout} | " + " | ".join(cells) + " |")
    print()
    print("saved = median over the runs of (per message - this layout), paired by run.")


if __name__ == "__main__":
    main()
