"""How often Python's cyclic garbage collector runs in `popmq serve`, how long each pass
takes, and which of the end-to-end latency tail's messages it overlaps.

Usage: python -m bench.gc_pauses [--scenario e2e|pop-ack|produce ...] [--rounds 1]

Runs bench scenarios (popmq only) against a ``popmq serve`` started as the scenarios start
it (flush sync, its own process), but through this module, which puts a ``gc.callbacks``
hook and a wrapper around ``Store.sync_wal`` into the server before running the CLI (the
code under test carries no tracing). The server writes its events at exit; the load
generator records its own collections the same way, and, for the end-to-end scenario, each
message's scheduled send time and the time its receive returned. Both processes read
CLOCK_MONOTONIC (``perf_counter_ns`` on Linux), so the windows line up.

Prints, per scenario and process: collections per second of each generation, their wall
duration and the CPU time of their thread (p50, p99, max, total per second), the objects
each generation tracks at exit, the frozen (permanent) count and the process's CPU time; for
e2e, of the messages at or above the run's p99 latency, how many windows overlap a server
collection of each generation or an fsync, against the same share for all messages (the base
rate a random window would show).

POPMQ_* variables in the environment reach the server (e.g. the collector's settings).
"""

from __future__ import annotations

import argparse
import atexit
import functools
import gc
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Pass = tuple[int, int, int, int, int]
"""(start ns, end ns, generation, objects collected, CPU ns of the pass's thread)."""

_passes: list[Pass] = []
_started = [0, 0]


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    now = time.perf_counter_ns()
    cpu = time.thread_time_ns()
    if phase == "start":
        _started[0] = now
        _started[1] = cpu
    else:
        _passes.append((_started[0], now, info["generation"], info["collected"], cpu - _started[1]))


def _heap() -> dict[str, Any]:
    return {
        "tracked": [len(gc.get_objects(generation)) for generation in range(3)],
        "frozen": gc.get_freeze_count(),
        "threshold": list(gc.get_threshold()),
        "process_cpu_s": round(time.process_time(), 3),
    }


# --- server side ---------------------------------------------------------------------------


def _serve_traced(out: str, argv: list[str]) -> int:
    """Run ``popmq <argv>`` with the hooks in; write the events to ``out`` at exit."""
    from popmq.broker_core.store import Store
    from popmq.cli.main import main

    fsyncs: list[tuple[int, int]] = []
    original: Callable[[Any], None] = Store.sync_wal

    @functools.wraps(original)
    def sync_wal(self: Any) -> None:
        began = time.perf_counter_ns()
        try:
            original(self)
        finally:
            fsyncs.append((began, time.perf_counter_ns()))

    Store.sync_wal = sync_wal  # type: ignore[method-assign]
    gc.callbacks.append(_on_gc)

    def dump() -> None:
        gc.callbacks.remove(_on_gc)
        record = {"passes": _passes, "fsyncs": fsyncs, "heap": _heap(), "pid": os.getpid()}
        Path(out, f"server-{os.getpid()}.json").write_text(json.dumps(record))

    atexit.register(dump)
    return main(argv)


# --- load side -----------------------------------------------------------------------------


def _traced_command(out: Path) -> Callable[[], list[str]]:
    def command() -> list[str]:
        return [sys.executable, "-m", "bench.gc_pauses", "--serve-traced", str(out), "--"]

    return command


def _record_receives(received: list[tuple[int, float]]) -> None:
    """Wrap the popmq target's receive: (receive returned ns, scheduled send s) per
    recorded message of the end-to-end scenario."""
    from bench.peers import targets
    from bench.scenarios import latency

    stamp = latency._STAMP
    original = targets._PopmqReceiver.receive

    async def receive(self: Any, max_messages: int, wait_s: float) -> Any:
        messages = await original(self, max_messages, wait_s)
        now = time.perf_counter_ns()
        for message in messages:
            due, recorded = stamp.unpack_from(message.body)
            if recorded:
                received.append((now, due))
        return messages

    targets._PopmqReceiver.receive = receive  # type: ignore[method-assign]


def _run_scenario(name: str) -> Any:
    if name == "e2e":
        from bench.scenarios import latency

        config = latency.LatencySettings(runs=1, loads=((1000, 10.0), (300, 6.0)), warmup_s=1.0)
        return latency.run(config, systems=("popmq",))
    if name == "pop-ack":
        from bench.scenarios import pop_ack

        return pop_ack.run(pop_ack.settings(quick=False), systems=("popmq",))
    if name == "produce":
        from bench.scenarios import produce

        return produce.run(produce.settings(quick=False), systems=("popmq",))
    raise SystemExit(f"unknown scenario {name!r}: e2e, pop-ack or produce")


def _pct(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def _describe(
    title: str, passes: list[Pass], seconds: float, heap: dict[str, Any], began: int
) -> str:
    full = ", ".join(
        f"{(p[0] - began) / 1e9:.1f}s: {(p[1] - p[0]) / 1e6:.1f}ms" for p in passes if p[2] == 2
    )
    lines = [f"{title}: {seconds:.1f} s, heap at exit {heap}; gen-2 passes at {full or 'none'}"]
    lines.append(
        "| generation | per s | p50 ms | p99 ms | max ms | ms per s | CPU p50 ms | CPU max ms "
        "| CPU ms per s | collected per pass |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for generation in range(3):
        own = [p for p in passes if p[2] == generation]
        ms = [(p[1] - p[0]) / 1e6 for p in own]
        cpu = [p[4] / 1e6 for p in own]
        collected = statistics.mean(p[3] for p in own) if own else 0.0
        lines.append(
            f"| {generation} | {len(own) / seconds:.1f} | {_pct(ms, 0.5):.3f} | "
            f"{_pct(ms, 0.99):.3f} | {max(ms, default=0):.3f} | {sum(ms) / seconds:.2f} | "
            f"{_pct(cpu, 0.5):.3f} | {max(cpu, default=0):.3f} | {sum(cpu) / seconds:.2f} | "
            f"{collected:.1f} |"
        )
    return "\n".join(lines)


def _overlaps(window: tuple[int, int], spans: list[tuple[int, int]]) -> int:
    """Nanoseconds of `spans` inside `window`."""
    begin, end = window
    return sum(max(0, min(end, b) - max(begin, a)) for a, b in spans if a < end and b > begin)


def _attribute(
    received: list[tuple[int, float]], server: dict[str, Any], client: list[Pass]
) -> str:
    """Which slow messages' windows overlap a collection (the server's or the load
    generator's own) or an fsync."""
    windows = [(round(due * 1e9), now) for now, due in received]
    if not windows:
        return "no recorded messages"
    latencies = [(end - begin) / 1e6 for begin, end in windows]
    p99 = _pct(latencies, 0.99)
    slow = [w for w, ms in zip(windows, latencies, strict=True) if ms >= p99]
    passes = server["passes"]
    kinds: dict[str, list[tuple[int, int]]] = {
        f"gen {g}": [(p[0], p[1]) for p in passes if p[2] == g] for g in range(3)
    }
    kinds["gen 1 or 2"] = kinds["gen 1"] + kinds["gen 2"]
    kinds["fsync >= 2 ms"] = [(a, b) for a, b in server["fsyncs"] if b - a >= 2_000_000]
    kinds["load generator gen 1 or 2"] = [(p[0], p[1]) for p in client if p[2] >= 1]
    lines = [
        f"{len(windows)} messages, p50 {_pct(latencies, 0.5):.2f} ms, p99 {p99:.2f} ms, "
        f"max {max(latencies):.2f} ms; {len(slow)} at or above p99",
        "| overlapping | of slow messages | of all messages | slow: median ms of it inside |",
        "|---|---|---|---|",
    ]
    for kind, spans in kinds.items():
        hit_slow = [_overlaps(w, spans) for w in slow]
        hit_all = sum(1 for w in windows if _overlaps(w, spans))
        inside = [ns / 1e6 for ns in hit_slow if ns]
        lines.append(
            f"| {kind} | {sum(1 for ns in hit_slow if ns) / len(slow):.0%} | "
            f"{hit_all / len(windows):.0%} | "
            f"{statistics.median(inside) if inside else 0:.2f} |"
        )
    return "\n".join(lines)


def _summary(result: Any) -> str:
    """The scenario's popmq medians, one line per case."""
    lines = []
    for case in result.cases():
        metrics = result.values[case].get("popmq", {})
        shown = ", ".join(f"{m} {result.median(case, 'popmq', m):.4g}" for m in metrics)
        lines.append(f"{case}: {shown}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve-traced"]:
        return _serve_traced(argv[1], argv[3:])
    parser = argparse.ArgumentParser(prog="python -m bench.gc_pauses", description=__doc__)
    parser.add_argument(
        "--scenario", action="append", choices=("e2e", "pop-ack", "produce"), default=None
    )
    args = parser.parse_args(argv)
    from bench.peers import servers

    received: list[tuple[int, float]] = []
    _record_receives(received)
    for scenario in args.scenario or ["e2e"]:
        with tempfile.TemporaryDirectory(prefix="popmq-gc-") as tmp:
            servers.popmq_command = _traced_command(Path(tmp))
            received.clear()
            _passes.clear()
            load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
            gc.callbacks.append(_on_gc)
            began = time.perf_counter_ns()
            result = _run_scenario(scenario)
            ended = time.perf_counter_ns()
            gc.callbacks.remove(_on_gc)
            client_passes = list(_passes)
            records = [json.loads(p.read_text()) for p in sorted(Path(tmp).glob("server-*"))]
        seconds = (ended - began) / 1e9
        print(f"\n## {scenario} (load before: {load}; threads {threading.active_count()})\n")
        print(_summary(result))
        for record in records:
            passes = [tuple(p) for p in record["passes"] if began <= p[0] <= ended]
            print()
            print(_describe(f"server pid {record['pid']}", passes, seconds, record["heap"], began))
            if scenario == "e2e":
                print()
                print(_attribute(received, record, client_passes))
        print()
        print(_describe("load generator", client_passes, seconds, _heap(), began))
    return 0


if __name__ == "__main__":
    sys.exit(main())
