"""Recycled WAL files never bring back old records or lose synced ones after a kill -9.

A recycled WAL file still holds the records of its previous life past the point the new
writes reached. A writer process makes the store recycle files (memtable flushes retire the
WAL), acknowledges each synced write on stdout, and is killed at arbitrary points; every
reopening must hold exactly what was acknowledged: each acked put present, each acked
delete still deleted (a stale put from a recycled file's tail must not reappear).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from popmq.broker_core.store import Store

_WRITER = r"""
import sys
from pathlib import Path
from popmq.broker_core.store import Store

store = Store(Path(sys.argv[1]))
start = int(sys.argv[2])
for i in range(start, start + 1_000_000):
    batch = store.batch()
    batch.put("messages", b"k%08d" % i, b"v%08d" % i + b"x" * 2000)
    if i >= 300:
        batch.delete("messages", b"k%08d" % (i - 300))
    store.write(batch, sync=True)
    print(i, flush=True)
    if i % 200 == 199:
        store._families["messages"].flush()  # retires the WAL: the next file is a reused one
"""


def _run_writer(data_dir: Path, start: int, acks: int) -> int:
    """Run the writer until it acknowledged `acks` writes, kill -9 it; the last acked i."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(data_dir), str(start)],
        stdout=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    last = start - 1
    with proc.stdout:
        try:
            for line in proc.stdout:
                last = int(line)
                if last >= start + acks - 1:
                    break
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        # What it acknowledged before it died, including what this process had not read.
        unread = proc.stdout.read().split()
    if unread:
        last = int(unread[-1])
    assert last >= start + acks - 1, f"the writer died early (rc {proc.returncode})"
    return last


def _check(data_dir: Path, last_acked: int) -> int:
    """Every acked put of the last 300 is there, nothing older is; return the next i."""
    store = Store(data_dir)
    try:
        present = [int(key[1:]) for key, _ in store.scan("messages", b"k", b"l")]
        values = dict(store.scan("messages", b"k", b"l"))
    finally:
        store.close()
    assert present, "acknowledged writes were lost"
    newest = present[-1]
    # The writer may have written (not acked) one more before the kill.
    assert last_acked <= newest <= last_acked + 1
    assert present == list(range(max(0, newest - 299), newest + 1)), (
        "a deleted record came back or an acked one is missing"
    )
    for i in present:
        assert values[b"k%08d" % i].startswith(b"v%08d" % i)
    return newest + 1


def test_acked_writes_survive_kills_across_recycled_wal_files(tmp_path: Path) -> None:
    data_dir = tmp_path / "store"
    start = 0
    for acks in (900, 450, 777, 1210):
        last = _run_writer(data_dir, start, acks)
        start = _check(data_dir, last)
    # The writers really wrote into reused files (RocksDB logs each reuse).
    assert "reusing log" in "".join(p.read_text() for p in data_dir.glob("LOG*"))
