"""How long a revive storm holds the broker's event loop (in process, no gRPC).

``python -m bench.revive_lag [--messages 100000] [--invisible-s 3] [--runs 1]``

A broker on a fresh data dir (flush async) gets ``--messages`` 1 KiB messages on 8 queues,
and one group pops them all at batch 32 with one invisible time, acking none. A ticker task
sleeps 2 ms at a time and records how late it wakes; the lateness from the first deadline
until every message is revived is the time other work (pops, acks) would have waited for the
loop. The bench scenario ``revive-storm`` measures the same over gRPC, where client noise and
the popping overlap blur it; this isolates the revive loop's chunking.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from bench.results import percentile
from popmq.broker_core.broker import Broker
from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.broker_core.types import NewMessage

_TICK_S = 0.002
_TOPIC = "storm"
_GROUP = "storm"
_TIMEOUT_S = 120


async def _one_run(messages: int, invisible_s: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as data_dir:
        store = dataclasses.replace(StoreConfig(), data_dir=Path(data_dir), flush="async")
        broker = Broker(BrokerConfig(store=store))
        await broker.start()
        try:
            await broker.create_topic(_TOPIC, 8)
            await broker.create_group(_GROUP)
            body = b"x" * 1024
            for start in range(0, messages, 256):
                count = min(256, messages - start)
                await broker.send([NewMessage(topic=_TOPIC, body=body) for _ in range(count)])
            popped = 0
            first = time.perf_counter()
            while popped < messages:
                got = await broker.pop(
                    _GROUP, _TOPIC, max_messages=32, invisible_s=invisible_s, wait_s=0
                )
                popped += len(got)
            last = time.perf_counter()
            lags: list[tuple[float, float]] = []

            async def ticker() -> None:
                while True:
                    started = time.perf_counter()
                    await asyncio.sleep(_TICK_S)
                    lags.append((started, time.perf_counter() - started - _TICK_S))

            ticking = asyncio.create_task(ticker())
            cpu = time.process_time()
            give_up = last + invisible_s + _TIMEOUT_S
            while broker.stats.revived[(_GROUP, _TOPIC)] < messages:
                if time.perf_counter() > give_up:
                    raise TimeoutError(f"not all revived {_TIMEOUT_S:g} s after the last deadline")
                await asyncio.sleep(0.01)
            done = time.perf_counter()
            cpu = time.process_time() - cpu
            ticking.cancel()
        finally:
            await broker.close()
    storm = sorted(lag for at, lag in lags if at >= first + invisible_s)
    return {
        "after last deadline s": done - (last + invisible_s),
        "cpu s": cpu,
        "loop lag p50 ms": percentile(storm, 0.5) * 1000,
        "loop lag p99 ms": percentile(storm, 0.99) * 1000,
        "loop lag max ms": storm[-1] * 1000 if storm else 0.0,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.revive_lag", description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--invisible-s", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    runs = [asyncio.run(_one_run(args.messages, args.invisible_s)) for _ in range(args.runs)]
    print(f"{args.messages:,} messages popped and never acked, {args.runs} run(s), medians:")
    for metric in runs[0]:
        print(f"  {metric}: {statistics.median(run[metric] for run in runs):.3g}")


if __name__ == "__main__":
    main()
