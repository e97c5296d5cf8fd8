"""Where `popmq serve`'s CPU per message goes, by thread: the event loop, gRPC's threads and
RocksDB's background threads (memtable flushes, compactions), which a profile of the loop
does not show.

``python -m bench.serve_threads [--rounds 3] [--seconds 5] [--against CHECKOUT]``

Starts ``popmq serve --flush sync`` (this checkout, as `make bench` runs it; with
``--against``, also CHECKOUT's, its ``src`` on the child's PYTHONPATH, each with a store of
its own, measured in turn within each round) and, in each round, measures a window of
produce batch 32 from 8 producers, then one of pop + ack batch 32 from 4 consumers of what
was produced (the cluster scenario's loads, bench/scenarios/cluster.py), through the SDK.
For each window it reads every server thread's utime + stime (/proc/PID/task/*/stat) at its
start and end and divides by the messages counted in it. Threads are grouped by name:
``popmq`` is the event loop (and the store's calls it makes), ``popmq-wal-sync`` the
group-commit sync thread, ``event_engine`` and ``grpc_*`` gRPC's, ``rocksdb:high`` the
flushes, ``rocksdb:low`` the compactions. Medians over the rounds.

RocksDB's threads keep working after a window ends: each window's count runs from its start
until they have been idle for a second, so the flushes and compactions its writes set off
are charged to it (the loop is idle meanwhile) and none spills into the next window. The
store grows by each round's messages (nothing is deleted), and a round's line shows how the
compactions' share grows with it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
from pathlib import Path
from typing import Final

from bench.load import cpu_s_by_thread_name, thread_cpu_s
from bench.peers.servers import PopmqServer
from bench.peers.targets import PopmqTarget
from bench.scenarios._common import body_of
from bench.scenarios.pop_ack import consume_rate
from bench.scenarios.produce import TOPIC, produce_rate

GROUP: Final = "threads"
THIS: Final = Path(__file__).resolve().parents[1]
_SETTLE_POLLS: Final = 240
"""Polls (0.5 s apart) for RocksDB's threads to go idle after a window: two minutes."""


class _ThreadWindow:
    """A WindowObserver: each thread name's CPU over the measured window, per item."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._before: dict[int, tuple[str, float]] = {}
        self._count = 0
        self.per_item: dict[str, float] = {}

    def window_started(self) -> None:
        self._before = thread_cpu_s(self._pid)

    def window_ended(self, count: int) -> None:
        self._count = count

    async def settled(self) -> None:
        """Wait until RocksDB's threads are idle, then count from the window's start: the
        flushes and compactions its writes set off are charged to it, and none runs into
        the next window (another server's, with --against)."""
        quiet = 0
        last = -1.0
        for _ in range(_SETTLE_POLLS):
            now = sum(
                t for name, t in thread_cpu_s(self._pid).values() if name.startswith("rocksdb")
            )
            quiet = quiet + 1 if abs(now - last) < 1e-6 else 0  # a tick is 10 ms
            if quiet >= 2:
                break
            last = now
            await asyncio.sleep(0.5)
        used = cpu_s_by_thread_name(self._before, thread_cpu_s(self._pid))
        count = max(self._count, 1)
        self.per_item = {name: cpu / count * 1e6 for name, cpu in used.items()}


async def _round(
    target: PopmqTarget, pid: int, body: bytes, seconds: float
) -> dict[str, dict[str, float]]:
    produce = _ThreadWindow(pid)
    await produce_rate(
        target, batch=32, producers=8, body=body, warmup_s=0.5, duration_s=seconds,
        observer=produce,
    )  # fmt: skip
    await produce.settled()
    popack = _ThreadWindow(pid)
    await consume_rate(
        target, topic=TOPIC, group=GROUP, consumers=4, batch=32, warmup_s=0.5,
        duration_s=seconds, observer=popack,
    )  # fmt: skip
    await popack.settled()
    return {"produce b32 x 8": produce.per_item, "pop+ack b32 x 4": popack.per_item}


def _start(checkout: Path) -> PopmqServer:
    """`popmq serve` of `checkout` (its ``src`` on the child's PYTHONPATH)."""
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(checkout / "src")
    try:
        server = PopmqServer(flush="sync")
        server.start()
        return server
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _table(case: str, rounds: list[dict[str, dict[str, float]]]) -> None:
    names = sorted({name for r in rounds for name in r[case]})
    medians = {n: statistics.median(r[case].get(n, 0.0) for r in rounds) for n in names}
    total = statistics.median(sum(r[case].values()) for r in rounds)
    print("| thread | us/msg | share |")
    print("|---|---|---|")
    for name, value in sorted(medians.items(), key=lambda kv: -kv[1]):
        if value >= 0.05:
            print(f"| {name} | {value:.2f} | {value / total:.0%} |")
    print(f"| all threads | {total:.2f} | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="each measured window")
    parser.add_argument(
        "--against", type=Path, metavar="CHECKOUT", help="also measure CHECKOUT's serve, in turn"
    )
    args = parser.parse_args()
    checkouts = {"new": THIS} if args.against is None else {"base": args.against, "new": THIS}
    servers = {}
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    results: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in checkouts}
    try:
        for name, checkout in checkouts.items():
            servers[name] = server = _start(checkout)
            target = PopmqTarget(server.endpoint)
            asyncio.run(target.create_topic(TOPIC))
            asyncio.run(target.create_group(TOPIC, GROUP))
        body = body_of(1024)
        for n in range(args.rounds):
            order = list(checkouts) if n % 2 == 0 else list(reversed(checkouts))
            for name in order:
                server = servers[name]
                result = asyncio.run(
                    _round(PopmqTarget(server.endpoint), server.pid, body, args.seconds)
                )
                results[name].append(result)
                shares = "; ".join(
                    f"{case}: loop {per.get('popmq', 0.0):.1f}, compactions "
                    f"{per.get('rocksdb:low', 0.0):.1f}, all {sum(per.values()):.1f}"
                    for case, per in result.items()
                )
                print(f"round {n + 1} {name} (us/msg) {shares}; load {os.getloadavg()[0]:.2f}")
    finally:
        for server in servers.values():
            server.stop()
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for case in results["new"][0]:
        for name, rounds in results.items():
            print()
            print(
                f"{case}, {name}: `popmq serve` CPU us a message by thread, medians of "
                f"{len(rounds)} rounds"
            )
            print()
            _table(case, rounds)
        if "base" in results:
            paired = [
                sum(new[case].values()) / sum(base[case].values())
                for base, new in zip(results["base"], results["new"], strict=True)
            ]
            print()
            print(
                f"{case}: all threads new / base, median of the rounds' ratios: "
                f"{statistics.median(paired):.2f}x"
            )


if __name__ == "__main__":
    main()
