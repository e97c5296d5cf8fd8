"""The cluster hop's CPU per message, two checkouts side by side: an A/B of proxy + 1 broker.

``python -m bench.hop_cost --base CHECKOUT [--rounds 4] [--out FILE]``

Starts two ``proxy + 1 broker`` deployments (scenario 8's (b)) at once, one running the
popmq of ``--base`` (its ``src`` on the children's PYTHONPATH) and one this checkout's, and
measures them in turn, window by window, with the same load generator (this process):
produce batch 32 from 8 producers and pop + ack batch 32 from 4 consumers on a backlog,
scenario 8's load. For each window it prints the proxy's and the broker's CPU per message
(utime + stime of every thread over the window, /proc/PID/stat) and the load average.
Interleaving the two deployments window by window is what makes the comparison hold on a
shared machine, where wall-clock rates are noise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
from pathlib import Path

from bench.load import CpuWindow
from bench.peers.cluster import launch_cluster
from bench.peers.targets import prefill
from bench.scenarios._common import body_of
from bench.scenarios.cluster import ClusterSettings, Deployment, _setup
from bench.scenarios.pop_ack import consume_rate
from bench.scenarios.produce import produce_rate

THIS = Path(__file__).resolve().parents[1]
_PROCESSES = ("proxy", "b1", "client")


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _window(deployment: Deployment, config: ClusterSettings, body: bytes, case: str) -> CpuWindow:
    window = CpuWindow(deployment.pids)
    target = deployment.target
    if case == "produce":
        asyncio.run(
            produce_rate(
                target,
                batch=32,
                producers=config.producers,
                body=body,
                warmup_s=config.warmup_s,
                duration_s=config.duration_s,
                observer=window,
            )
        )
        return window
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
    return window


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    config = ClusterSettings(
        runs=1,
        warmup_s=0.5,
        duration_s=2.5,
        backlog=100_000,
        paced_rate=0,
        paced_s=0,
        paced_warmup_s=0,
    )
    body = body_of(config.body_bytes)
    checkouts = {"base": args.base.resolve(), "new": THIS}
    lines = [
        f"python -m bench.hop_cost --base <base checkout> --rounds {args.rounds}",
        f"load average at the start: {_load()}",
    ]
    samples: dict[tuple[str, str, str], list[float]] = {}
    with contextlib.ExitStack() as stack:
        deployments: dict[str, Deployment] = {}
        saved = os.environ.get("PYTHONPATH")
        for name, checkout in checkouts.items():
            os.environ["PYTHONPATH"] = str(checkout / "src")
            cluster = stack.enter_context(launch_cluster(brokers=1, name=name))
            deployments[name] = Deployment(
                name,
                cluster.target,
                {"proxy": cluster.proxy_pid, **cluster.broker_pids},
                cluster.etcd_pid,
            )
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
        for deployment in deployments.values():
            asyncio.run(_setup(deployment, config, body))
        for round_ in range(args.rounds):
            order = list(deployments) if round_ % 2 == 0 else list(reversed(deployments))
            for case in ("pop+ack", "produce"):
                for name in order:
                    window = _window(deployments[name], config, body, case)
                    cells = []
                    for process in _PROCESSES:
                        us = window.us_per_item(process)
                        samples.setdefault((case, name, process), []).append(us)
                        cells.append(f"{process} {us:.1f}")
                    lines.append(
                        f"round {round_ + 1} {case:8} {name}: {', '.join(cells)} us/msg "
                        f"(load {_load()})"
                    )
                    print(lines[-1], flush=True)
    lines.append("medians (us/msg):")
    for case in ("pop+ack", "produce"):
        for name in checkouts:
            cells = [f"{p} {statistics.median(samples[case, name, p]):.1f}" for p in _PROCESSES]
            proxy_broker = statistics.median(samples[case, name, "proxy"]) + statistics.median(
                samples[case, name, "b1"]
            )
            lines.append(
                f"  {case:8} {name}: {', '.join(cells)}; proxy + broker {proxy_broker:.1f}"
            )
    lines.append(f"load average at the end: {_load()}")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
