"""CPU of handing a WAL fsync to a thread and back: ThreadPoolExecutor vs the writer's thread.

``python -m bench.wal_sync_handoff [--handoffs 5000] [--runs 5]``

The group commit (broker_core/group_commit.py) fsyncs a contended batch off the event loop.
This measures the hand-off alone, on uvloop (as ``popmq serve`` runs): ``--handoffs``
awaited round trips to a thread that runs a no-op in place of ``Store.sync_wal`` (a real
fsync's CPU varies with the disk far more than the hand-off costs), handed over

- ``executor``: with ``loop.run_in_executor`` to a one-thread ThreadPoolExecutor (how the
  writer did it before);
- ``sync thread``: through ``_SyncThread``, the writer's own long-lived thread (a queue put
  there, one ``call_soon_threadsafe`` back).

Reported: this process's CPU (every thread) per hand-off, median of ``--runs``, which
alternate the two.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import statistics
import time
from typing import cast

import uvloop

from popmq.broker_core.group_commit import _settle, _SyncThread
from popmq.broker_core.store import Store


class _NoFsync:
    """Stands in for the store: its `sync_wal` returns at once."""

    def sync_wal(self) -> None:
        return None


async def _executor(handoffs: int) -> float:
    loop = asyncio.get_running_loop()
    store = _NoFsync()
    executor = concurrent.futures.ThreadPoolExecutor(1, "popmq-wal-sync")
    try:
        await loop.run_in_executor(executor, store.sync_wal)  # the thread starts
        cpu = time.process_time()
        for _ in range(handoffs):
            await loop.run_in_executor(executor, store.sync_wal)
        return (time.process_time() - cpu) / handoffs
    finally:
        executor.shutdown(wait=True)


async def _sync_thread(handoffs: int) -> float:
    loop = asyncio.get_running_loop()
    thread = _SyncThread(cast(Store, _NoFsync()))

    async def handed() -> None:
        done: asyncio.Future[None] = loop.create_future()
        thread.sync(loop, lambda error: _settle(done, error))
        await done

    try:
        await handed()  # the thread starts
        cpu = time.process_time()
        for _ in range(handoffs):
            await handed()
        return (time.process_time() - cpu) / handoffs
    finally:
        thread.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.wal_sync_handoff", description=__doc__)
    parser.add_argument("--handoffs", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    kinds = {"executor": _executor, "sync thread": _sync_thread}
    results: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(args.runs):
        for kind, run in kinds.items():
            results[kind].append(uvloop.run(run(args.handoffs)))
    print(f"{args.handoffs:,} hand-offs, median of {args.runs} run(s):\n")
    print("| fsync handed over by | CPU us per hand-off |")
    print("|---|---|")
    for kind, values in results.items():
        print(f"| {kind} | {statistics.median(values) * 1e6:.1f} |")


if __name__ == "__main__":
    main()
