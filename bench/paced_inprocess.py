"""CPU per paced operation in one process, no gRPC: what waking up costs on this machine.

``python -m bench.paced_inprocess [--rate 1000] [--seconds 4] [--runs 2]``

A loop sleeps until each scheduled time (``--rate`` a second) and starts one task. Rows:

- ``bare loop``: the task does nothing, which leaves the cost of sleeping, waking and
  starting a task;
- ``Broker.send, flush async`` / ``flush sync``: the task sends one 1 KiB message through an
  embedded broker on a fresh data dir (the default event loop policy: run it under uvloop
  to match ``popmq serve``).

Reported: this process's CPU (every thread) per operation, median of ``--runs``. Compare with
the same broker sending back to back in batches (``make bench``'s produce profile), and with
scenario 3b (``python -m bench --scenario paced-cost``), which adds gRPC.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Literal

from popmq.broker_core.broker import Broker
from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.broker_core.types import NewMessage


async def _paced(
    operation: Callable[[], Coroutine[Any, Any, None]], rate: int, seconds: float
) -> float:
    """CPU seconds per operation, started ``rate`` times a second for ``seconds``."""
    count = round(rate * seconds)
    tasks: list[asyncio.Task[None]] = []
    start = time.perf_counter()
    cpu = time.process_time()
    for i in range(count):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(operation()))
    await asyncio.gather(*tasks)
    return (time.process_time() - cpu) / count


async def _bare(rate: int, seconds: float) -> float:
    async def nothing() -> None:
        return None

    return await _paced(nothing, rate, seconds)


async def _sends(flush: Literal["sync", "async"], rate: int, seconds: float) -> float:
    with tempfile.TemporaryDirectory() as data_dir:
        store = dataclasses.replace(StoreConfig(), data_dir=Path(data_dir), flush=flush)
        broker = Broker(BrokerConfig(store=store))
        await broker.start()
        try:
            await broker.create_topic("paced", 8)
            body = b"x" * 1024

            async def send() -> None:
                await broker.send([NewMessage(topic="paced", body=body)])

            return await _paced(send, rate, seconds)
        finally:
            await broker.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.paced_inprocess", description=__doc__)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args(argv)
    rows: dict[str, Callable[[], Coroutine[Any, Any, float]]] = {
        "bare loop": lambda: _bare(args.rate, args.seconds),
        "Broker.send, flush async": lambda: _sends("async", args.rate, args.seconds),
        "Broker.send, flush sync": lambda: _sends("sync", args.rate, args.seconds),
    }
    results: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(args.runs):
        for name, run in rows.items():
            results[name].append(asyncio.run(run()))
    print(f"{args.rate:,} operations/s for {args.seconds:g} s, median of {args.runs} run(s):\n")
    print("| operation | CPU us/operation |")
    print("|---|---|")
    for name, values in results.items():
        print(f"| {name} | {statistics.median(values) * 1e6:.0f} |")


if __name__ == "__main__":
    main()
