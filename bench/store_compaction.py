"""What RocksDB's background work (memtable flushes, compactions) costs a message sent, by
family, and what other family options would change: the store's share of a send that no
profile of the event loop shows.

``python -m bench.store_compaction [--batches 8000] [--runs 3] [--body pattern|random]
[--variants base,messages-blob,...]``

Each run writes ``--batches`` sends of 32 records of 1,100 bytes (about a 1 KiB body's
StoredMessage) round-robin over 8 queues of one topic, as a send stores them today
(broker_core/send.py `_store_queued`): the send's duplicate check first (one multi-get of
its 32 ids in `index`, as `message_index.find_duplicates` reads them), then per message its
record in `messages` and its id index entry in `index` (SDK-style random ids), one expiry
marker per send, one unsynced WriteBatch per send (the fsync is the same whatever RocksDB
does later). It then waits until no flush or compaction runs, and reads everything back in
pops of 32 per queue (`Store.values_between`, as the reader does). Every variant runs in a
fresh temp dir through `Store` as configured, with the variant's options added to its
families at open; the variants alternate within each run. A variant may join several with
"+" (``messages-blob+index-universal``).

Reported, medians over the runs, per message written: the CPU of this thread (the writes:
what a broker's event loop pays), of RocksDB's flush threads (``rocksdb:high``) and of its
compaction threads (``rocksdb:low``), then for `messages` and `index` their write
amplification (bytes written by flushes and compactions over bytes flushed) and the keys
their compactions read (each key is read again by every compaction that rewrites it), and
the read pass's CPU of this thread per message. Variants:

- ``base``: the store as configured (leveled compaction, dynamic level sizes, a first
  level of 16 MiB below level 0 in `messages` and `index`, Snappy).
- ``level-base-256``: that level at RocksDB's default of 256 MiB, as the store had it.
- ``messages-blob``: `messages` values in blob files (RocksDB's BlobDB: values of 256
  bytes and more written once at flush, compactions move only their references).
- ``messages-lz4``, ``messages-uncompressed``: `messages` with LZ4, or without compression.
- ``messages-universal``, ``index-universal``: the family with universal compaction.
- ``messages-l0-16``: `messages` compacting level 0 after 16 files instead of 4.
- ``index-l0-16``: `index` compacting after 16 level-0 files instead of 4.
- ``write-order``: a layout rather than an option (RocketMQ's: one commit log, each queue an
  index into it). `messages` keys are a sequence number in write order (8 bytes, big
  endian), so every level-0 file sorts after everything before it; a new family `queues`
  maps (topic, queue, offset) to that number (8 bytes a message), and a pop reads its 32
  numbers there and then multi-gets their records from `messages`. Its first level is
  16 MiB like the other two. Only what the bench measures is modelled (no retention).
- ``write-order-batched``: the same log, but `queues` holds one entry a send (the queue's
  first offset -> the send's first sequence number and count: a send's messages are
  consecutive in the log); a pop finds the entry at or before its offset (a reverse seek)
  and reads its records as one range of `messages`.
- ``index-by-time``: id entries keyed by a time bucket first (as RocketMQ's index files
  are by time): bucket = send number // ``--bucket-sends`` (default 9,375 sends of 32:
  300,000 messages, the 300 s dedup window at 1,000 msg/s), so a send's duplicate check
  multi-gets its ids in its bucket and the one before.
- ``index-files-4m``: `index` table files of 4 MiB instead of 64 (a compaction that
  reaches the newest bucket then rewrites files of that bucket only).

``--body pattern`` stores the benchmark's body (bench/scenarios/_common.py `body_of`: the
same bytes in every message, which Snappy shrinks); ``--body random`` 4,096 different
random bodies, which nothing shrinks.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import rocksdict

from bench.load import cpu_s_by_thread_name, thread_cpu_s
from bench.scenarios._common import body_of
from popmq.broker_core import keys
from popmq.broker_core import store as store_module
from popmq.broker_core.message_index import Expiries, QueueRecords
from popmq.broker_core.store import Store

BATCH: Final = 32
QUEUES: Final = 8
RECORD_BYTES: Final = 1100
TOPIC_ID: Final = 7
_EXPIRE_MS: Final = 86_400_000
_UNITS: Final = {"K": 1e3, "M": 1e6, "G": 1e9}
"""Suffixes of counts in RocksDB's stats (KeyIn 1096K); sizes are read as they are."""
_SEQUENCE: Final = struct.Struct(">Q")
"""A `messages` key of the write-order layout."""
_SPAN: Final = struct.Struct(">QI")
"""A `queues` value of the batched write-order layout: first sequence number, count."""
WRITE_ORDER: Final = "write-order"
WRITE_ORDER_BATCHED: Final = "write-order-batched"
LOGS: Final = (WRITE_ORDER, WRITE_ORDER_BATCHED)
"""The variants that are layouts: `messages` in write order, each queue an index into it."""
INDEX_BY_TIME: Final = "index-by-time"
_BUCKET: Final = struct.Struct(">I")
"""The time bucket before an id entry's key in ``index-by-time``."""
BUCKET_SENDS: Final = 9375
"""Sends of 32 a bucket of ``index-by-time`` spans by default (300 s at 1,000 msg/s)."""
_SETTLED_S: Final = 0.5
"""How long no flush or compaction must run before the background work counts as done."""
_SETTLE_TIMEOUT_S: Final = 60.0


def _blob(families: dict[str, Any]) -> None:
    options = families["messages"]
    options.set_enable_blob_files(True)
    options.set_min_blob_size(256)
    options.set_blob_file_size(64 * 1024 * 1024)
    options.set_blob_compression_type(rocksdict.DBCompressionType.snappy())


def _level_base_256(families: dict[str, Any]) -> None:
    for name in ("messages", "index"):
        families[name].set_max_bytes_for_level_base(256 * 1024 * 1024)


def _write_order(families: dict[str, Any]) -> None:
    families["queues"].set_max_bytes_for_level_base(store_module._LEVEL_BASE_BYTES)


VARIANTS: Final[dict[str, Callable[[dict[str, Any]], None]]] = {
    "base": lambda families: None,
    "messages-blob": _blob,
    "messages-lz4": lambda families: families["messages"].set_compression_type(
        rocksdict.DBCompressionType.lz4()
    ),
    "messages-uncompressed": lambda families: families["messages"].set_compression_type(
        rocksdict.DBCompressionType.none()
    ),
    "messages-universal": lambda families: families["messages"].set_compaction_style(
        rocksdict.DBCompactionStyle.universal()
    ),
    "messages-l0-16": lambda families: families[
        "messages"
    ].set_level_zero_file_num_compaction_trigger(16),
    "level-base-256": _level_base_256,
    "index-universal": lambda families: families["index"].set_compaction_style(
        rocksdict.DBCompactionStyle.universal()
    ),
    "index-l0-16": lambda families: families["index"].set_level_zero_file_num_compaction_trigger(
        16
    ),
    WRITE_ORDER: _write_order,
    WRITE_ORDER_BATCHED: _write_order,
    INDEX_BY_TIME: lambda families: None,  # a key layout: see `_write`
    "index-files-4m": lambda families: families["index"].set_target_file_size_base(4 << 20),
}


class _Rocksdict:
    """The rocksdict module as store.py sees it, with `Rdict` adding a variant's options."""

    def __init__(self, variant: Callable[[dict[str, Any]], None]) -> None:
        self._variant = variant

    def __getattr__(self, name: str) -> Any:
        return getattr(rocksdict, name)

    def Rdict(self, path: str, options: Any, **kwargs: Any) -> Any:
        self._variant(kwargs["column_families"])
        return rocksdict.Rdict(path, options, **kwargs)


@contextmanager
def _variant_store(path: Path, variant: str) -> Iterator[Store]:
    def apply(families: dict[str, Any]) -> None:
        for name in variant.split("+"):
            VARIANTS[name](families)

    families = store_module.FAMILIES
    setattr(store_module, "rocksdict", _Rocksdict(apply))  # noqa: B010 (store.py's import)
    if _layout(variant) != "":
        setattr(store_module, "FAMILIES", (*families, "queues"))  # noqa: B010
    try:
        store = Store(path)
    finally:
        setattr(store_module, "rocksdict", rocksdict)  # noqa: B010
        setattr(store_module, "FAMILIES", families)  # noqa: B010
    try:
        yield store
    finally:
        store.close()


def _layout(variant: str) -> str:
    """The variant's log layout (one of LOGS), or "" for `messages` keyed by queue."""
    found = [name for name in variant.split("+") if name in LOGS]
    if len(found) > 1:
        raise ValueError(f"{variant}: at most one of {', '.join(LOGS)}")
    return found[0] if found else ""


def _families(store: Store) -> tuple[str, ...]:
    return tuple(name for name in ("messages", "index", "queues") if name in store._families)


def _busy(store: Store) -> bool:
    for family in _families(store):
        handle = store._families[family]
        for prop in ("rocksdb.num-running-compactions", "rocksdb.num-running-flushes"):
            if int(handle.property_int_value(prop) or 0):
                return True
    return False


def _settle(store: Store) -> None:
    deadline = time.monotonic() + _SETTLE_TIMEOUT_S
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        if _busy(store):
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= _SETTLED_S:
            return
        time.sleep(0.05)


def _compaction_stats(store: Store, family: str) -> dict[str, float]:
    """The `Sum` row of the family's compaction stats, by column name."""
    text = store._families[family].property_value("rocksdb.cfstats-no-file-histogram") or ""
    header: list[str] = []
    for line in text.splitlines():
        tokens = line.split()
        if tokens[:1] == ["Level"] and not header:
            header = tokens
        elif tokens[:1] == ["Sum"] and header:
            values = [*tokens[:2], tokens[2] + tokens[3], *tokens[4:]]  # "81.2 MB": one column
            found = {}
            for name, value in zip(header, values, strict=False):
                scale = _UNITS.get(value[-1:], 1.0)
                try:
                    found[name] = float(value.rstrip("KMG")) * scale
                except ValueError:
                    continue
            return found
    return {}


def _write(
    store: Store,
    bodies: list[bytes],
    batches: int,
    *,
    layout: str,
    bucket_sends: int = 0,
) -> list[int]:
    """Store the sends; with ``bucket_sends``, id entries are keyed by time bucket first."""
    offsets = [0] * QUEUES
    sequence = 0
    stamp = int(time.time() * 1000)
    for n in range(batches):
        queue_id = n % QUEUES
        batch = store.batch()
        expiries = Expiries()
        records = QueueRecords(queue_id, stamp)
        ids = [os.urandom(16).hex().encode() for _ in range(BATCH)]
        entries = [keys.id_index_key_of(TOPIC_ID, raw_id) for raw_id in ids]
        probes = entries
        if bucket_sends:
            bucket = n // bucket_sends
            entries = [b"i" + _BUCKET.pack(bucket) + entry[1:] for entry in entries]
            probes = entries
            if bucket:
                earlier = _BUCKET.pack(bucket - 1)
                probes = [*entries, *(b"i" + earlier + entry[5:] for entry in entries)]
        if any(store.multi_get("index", probes)):  # the send's duplicate check
            raise RuntimeError("a random message id was found in the index")
        for position, (raw_id, entry) in enumerate(zip(ids, entries, strict=True)):
            offset = offsets[queue_id]
            offsets[queue_id] += 1
            key = keys.message_key(TOPIC_ID, queue_id, offset)
            body = bodies[(n * BATCH + offset) % len(bodies)]
            if layout == "":
                batch.put("messages", key, body)
            else:
                logged = _SEQUENCE.pack(sequence)
                if layout == WRITE_ORDER:
                    batch.put("queues", key, logged)
                elif position == 0:
                    batch.put("queues", key, _SPAN.pack(sequence, BATCH))
                sequence += 1
                batch.put("messages", logged, body)
            batch.put("index", entry, records.record(offset + 1, "", raw_id))
            expiries.add(stamp + _EXPIRE_MS, entry)
        expiries.put(batch)
        store.write(batch, sync=False)
    return offsets


def _read(store: Store, offsets: list[int], *, layout: str) -> int:
    count = 0
    for queue_id, end in enumerate(offsets):
        for first in range(0, end, BATCH):
            start = keys.message_key(TOPIC_ID, queue_id, first)
            stop = keys.message_key(TOPIC_ID, queue_id, first + BATCH)
            if layout == "":
                values = store.values_between("messages", start, stop)
            elif layout == WRITE_ORDER:
                values = store.values_between("queues", start, stop)
                values = [value for value in store.multi_get("messages", values) if value]
            else:  # the send that holds `first`, then its records as one range of the log
                found = store.last_key(
                    "queues",
                    keys.queue_prefix(TOPIC_ID, queue_id),
                    keys.message_key(TOPIC_ID, queue_id, first + 1),
                )
                span = store.get("queues", found) if found is not None else None
                if found is None or span is None:
                    continue
                sequence, length = _SPAN.unpack(span)
                skip = first - keys.message_offset(found)
                low = sequence + skip
                high = sequence + min(length, skip + BATCH)
                values = store.values_between("messages", _SEQUENCE.pack(low), _SEQUENCE.pack(high))
            count += len(values)
    return count


def _one_run(
    variant: str, batches: int, bodies: list[bytes], bucket_sends: int = BUCKET_SENDS
) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="popmq-compaction-"))
    messages = batches * BATCH
    layout = _layout(variant)
    buckets = bucket_sends if INDEX_BY_TIME in variant.split("+") else 0
    try:
        with _variant_store(root / "data", variant) as store:
            before = thread_cpu_s(os.getpid())
            began = time.thread_time()
            offsets = _write(store, bodies, batches, layout=layout, bucket_sends=buckets)
            writes = time.thread_time() - began
            _settle(store)
            used = cpu_s_by_thread_name(before, thread_cpu_s(os.getpid()))
            stats = {family: _compaction_stats(store, family) for family in _families(store)}
            began = time.thread_time()
            read = _read(store, offsets, layout=layout)
            reads = time.thread_time() - began
            if read != messages:
                raise RuntimeError(f"{variant}: read {read} of {messages} records")
        result = {
            "write": writes / messages * 1e6,
            "flush": used.get("rocksdb:high", 0.0) / messages * 1e6,
            "compaction": used.get("rocksdb:low", 0.0) / messages * 1e6,
            "read": reads / messages * 1e6,
        }
        for family, row in stats.items():
            result[f"{family} w-amp"] = row.get("W-Amp", float("nan"))
            result[f"{family} keys read"] = row.get("KeyIn", 0.0) / messages
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)


_COLUMNS: Final = (
    ("write", "writes: this thread us/msg", "{:.2f}"),
    ("flush", "flushes us/msg", "{:.2f}"),
    ("compaction", "compactions us/msg", "{:.2f}"),
    ("messages w-amp", "messages w-amp", "{:.1f}"),
    ("messages keys read", "messages keys compacted/msg", "{:.1f}"),
    ("index w-amp", "index w-amp", "{:.1f}"),
    ("index keys read", "index keys compacted/msg", "{:.1f}"),
    ("queues w-amp", "queues w-amp", "{:.1f}"),
    ("read", "pops: this thread us/msg", "{:.2f}"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=8000, help="sends of 32 per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--body", choices=["pattern", "random"], default="pattern")
    parser.add_argument("--variants", default="base,level-base-256")
    parser.add_argument(
        "--bucket-sends", type=int, default=BUCKET_SENDS, help="sends a bucket of index-by-time"
    )
    args = parser.parse_args()
    variants = args.variants.split(",")
    for variant in variants:
        for name in variant.split("+"):
            if name not in VARIANTS:
                parser.error(f"unknown variant {name!r}: choose from {', '.join(VARIANTS)}")
    if args.body == "random":
        bodies = [os.urandom(RECORD_BYTES) for _ in range(4096)]
    else:
        bodies = [body_of(RECORD_BYTES)]
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    results: dict[str, list[dict[str, float]]] = {variant: [] for variant in variants}
    for run in range(args.runs):
        order = variants if run % 2 == 0 else list(reversed(variants))
        for variant in order:
            results[variant].append(_one_run(variant, args.batches, bodies, args.bucket_sends))
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"{args.batches:,} sends of {BATCH} records of {RECORD_BYTES} bytes ({args.body} "
        f"bodies) over {QUEUES} queues, unsynced; medians of {args.runs} runs"
        + (
            f"; {INDEX_BY_TIME} buckets of {args.bucket_sends:,} sends"
            if any(INDEX_BY_TIME in variant.split("+") for variant in variants)
            else ""
        )
    )
    print()
    print("| variant | " + " | ".join(title for _, title, _ in _COLUMNS) + " |")
    print("|---|" + "---|" * len(_COLUMNS))
    for variant in variants:
        cells = [
            form.format(statistics.median(run[key] for run in results[variant]))
            if key in results[variant][0]
            else "-"
            for key, _, form in _COLUMNS
        ]
        print(f"| {variant} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
