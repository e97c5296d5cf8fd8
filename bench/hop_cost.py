"""The cluster hop's CPU per message, two checkouts side by side: an A/B of proxy + 1 broker.

``python -m bench.hop_cost --base CHECKOUT [--other NAME=CHECKOUT ...] [--serve]
[--rounds 4] [--cases pop+ack,produce,produce-b1,paced] [--out FILE]``

Starts ``proxy + 1 broker`` deployments (scenario 8's (b)) at once, one running the popmq
of ``--base`` (its ``src`` on the children's PYTHONPATH), one of each ``--other`` and one
this checkout's (``new``), with ``--serve`` also a ``popmq serve --flush sync`` (scenario
8's (a)) of ``--base`` and of this checkout (the hop's price is a cluster's proxy + broker
minus serve), and measures them in turn, window by window, with the same load generator
(this process):
produce batch 32 from 8 producers (``produce``), produce batch 1 from 8 producers
(``produce-b1``), pop + ack batch 32 from 4 consumers on a backlog (``pop+ack``) and the
paced send of 500 single messages a second over 8 senders (``paced``, with its round trip's
p50 and p99), scenario 8's load. For each window it prints the proxy's and the broker's CPU
per message (utime + stime of every thread over the window, /proc/PID/stat) and the load
average.
Interleaving the two deployments window by window is what makes the comparison hold on a
shared machine, where wall-clock rates are noise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench.load import CPU_CLIENT, CpuWindow
from bench.peers.cluster import launch_cluster
from bench.peers.servers import PopmqServer
from bench.peers.targets import PopmqTarget, prefill
from bench.results import percentile
from bench.scenarios._common import body_of
from bench.scenarios.cluster import ClusterSettings, Deployment, _paced, _setup
from bench.scenarios.pop_ack import consume_rate
from bench.scenarios.produce import produce_rate

THIS = Path(__file__).resolve().parents[1]
CASES = ("pop+ack", "produce", "produce-b1", "paced")


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _window(
    deployment: Deployment, config: ClusterSettings, body: bytes, case: str
) -> tuple[CpuWindow, list[float]]:
    """One window of `case`: its CPU, and for the paced send its round trips (s), sorted."""
    window = CpuWindow(deployment.pids)
    target = deployment.target
    if case == "paced":
        trips, window = asyncio.run(_paced(deployment, config, body))
        return window, trips
    if case in ("produce", "produce-b1"):
        asyncio.run(
            produce_rate(
                target,
                batch=32 if case == "produce" else 1,
                producers=config.producers,
                body=body,
                warmup_s=config.warmup_s,
                duration_s=config.duration_s,
                observer=window,
            )
        )
        return window, []
    consumed = asyncio.run(
        consume_rate(
            target,
            topic="popack",
            group="bench",
            consumers=config.consumers,
            batch=config.pop_batch,
            warmup_s=config.warmup_s,
            duration_s=config.duration_s,
            limit=max(1, config.backlog // 4),
            observer=window,
        )
    )
    asyncio.run(prefill(target, "popack", consumed.taken, body))
    return window, []


def _build(checkout: Path) -> str:
    """Whether `checkout`'s popmq runs compiled in a child, as the deployments' processes do
    (src/popmq/_compiled.py), and why not when it does not."""
    probe = "from popmq._compiled import state; print(state())"
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    found = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    return found.stdout.strip()


def _deploy(stack: contextlib.ExitStack, name: str, checkout: Path, serve: bool) -> Deployment:
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(checkout / "src")
    try:
        if serve:
            server = stack.enter_context(PopmqServer(flush="sync"))
            return Deployment(name, PopmqTarget(server.endpoint, name), {"serve": server.pid})
        cluster = stack.enter_context(launch_cluster(brokers=1, name=name))
        return Deployment(
            name,
            cluster.target,
            {"proxy": cluster.proxy_pid, **cluster.broker_pids},
            cluster.etcd_pid,
        )
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--other", action="append", default=[], metavar="NAME=CHECKOUT")
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--cases", default=",".join(CASES), help="comma-separated, of " + ", ".join(CASES)
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cases = args.cases.split(",")
    for case in cases:
        if case not in CASES:
            parser.error(f"--cases: {case!r} is not one of {', '.join(CASES)}")
    config = ClusterSettings(
        runs=1,
        warmup_s=0.5,
        duration_s=2.5,
        backlog=100_000,
        paced_rate=500,
        paced_s=5.0,
        paced_warmup_s=0.5,
    )
    body = body_of(config.body_bytes)
    plan: list[tuple[str, Path, bool]] = [("base", args.base.resolve(), False)]
    for other in args.other:
        name, _, path = other.partition("=")
        plan.append((name, Path(path).resolve(), False))
    plan.append(("new", THIS, False))
    if args.serve:
        plan += [("serve base", args.base.resolve(), True), ("serve new", THIS, True)]
    lines = [
        "python -m bench.hop_cost "
        + " ".join(f"{n}=<{'serve of ' if s else ''}checkout>" for n, _, s in plan)
        + f" --rounds {args.rounds} --cases {','.join(cases)}",
        *(f"{n}: compiled (True) or not, and why: {_build(path)}" for n, path, _ in plan),
        f"load average at the start: {_load()}",
    ]
    samples: dict[tuple[str, str, str], list[float]] = {}
    processes: dict[str, list[str]] = {}
    with contextlib.ExitStack() as stack:
        deployments = {n: _deploy(stack, n, path, serve) for n, path, serve in plan}
        for deployment in deployments.values():
            asyncio.run(_setup(deployment, config, body))
        for round_ in range(args.rounds):
            order = list(deployments) if round_ % 2 == 0 else list(reversed(deployments))
            for case in cases:
                for name in order:
                    deployment = deployments[name]
                    window, trips = _window(deployment, config, body, case)
                    processes[name] = [*deployment.servers, CPU_CLIENT]
                    cells = []
                    for process in processes[name]:
                        us = window.us_per_item(process)
                        samples.setdefault((case, name, process), []).append(us)
                        cells.append(f"{process} {us:.1f}")
                    latency = []
                    for label, q in (("p50", 0.5), ("p99", 0.99)) if trips else ():
                        ms = percentile(trips, q) * 1e3
                        samples.setdefault((case, name, label), []).append(ms)
                        latency.append(f"{label} {ms:.2f}")
                    lines.append(
                        f"round {round_ + 1} {case:8} {name}: {', '.join(cells)} us/msg"
                        + (f"; {', '.join(latency)} ms" if latency else "")
                        + f" (load {_load()})"
                    )
                    print(lines[-1], flush=True)
    lines.append("medians (us/msg; server = every process but the client; paced: ms):")
    for case in cases:
        for name in deployments:
            medians = {p: statistics.median(samples[case, name, p]) for p in processes[name]}
            server = sum(v for p, v in medians.items() if p != CPU_CLIENT)
            cells = [f"{p} {v:.1f}" for p, v in medians.items()]
            latency = [
                f"{label} {statistics.median(samples[case, name, label]):.2f}"
                for label in ("p50", "p99")
                if (case, name, label) in samples
            ]
            lines.append(
                f"  {case:8} {name}: {', '.join(cells)}; server {server:.1f}"
                + (f"; {', '.join(latency)}" if latency else "")
            )
    lines.append(f"load average at the end: {_load()}")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
