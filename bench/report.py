"""Run the side-by-side scenarios against the peers (Redis Streams, NATS JetStream), and cluster
mode beside `popmq serve`, and write docs/benchmarks.md + PNG.

Usage (what ``make bench`` runs, after installing the peers):

    python -m bench.report                  # full sizes, several runs, ~15 min
    python -m bench.report --quick          # seconds; peers only if installed
    python -m bench.report --render-only    # re-render from bench/results/latest.json

The raw samples go to bench/results/latest.json (git-ignored) and py-spy profiles of the
server to bench/results/profile-*.raw, so the doc can be re-rendered without re-running.
``--with-others`` also runs the other scenarios registered in ``bench.__main__`` (popmq
only, several minutes more) and appends their tables as they print them; by default the doc
lists them with the command that runs each.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.load import machine_info
from bench.peers.servers import find_binary
from bench.profile import HotSpot, Profile, PySpy, summarize
from bench.results import (
    ScenarioResult,
    format_number,
    load_results,
    markdown_table,
    save_results,
)
from bench.scenarios import (
    backlog,
    cluster,
    consumers,
    latency,
    long_poll,
    paced_cost,
    pop_ack,
    produce,
    revive,
)

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
DOC = REPO / "docs" / "benchmarks.md"
CHART = REPO / "docs" / "benchmarks.png"
FULL_COMMAND = "make bench"
SIDE_BY_SIDE = (
    "produce",
    "pop-ack",
    "e2e-latency",
    "paced-cost",
    "long-poll",
    "backlog",
    "consumers-beyond-queues",
    "revive-storm",
)
REPORTED = (*SIDE_BY_SIDE, "cluster")
"""Every scenario of the doc's own sections: the side-by-side ones, then cluster mode's."""
_RENDER: dict[str, Callable[[ScenarioResult], str]] = {
    "produce": produce.render,
    "pop-ack": pop_ack.render,
    "e2e-latency": latency.render,
    "paced-cost": paced_cost.render,
    "long-poll": long_poll.render,
    "backlog": backlog.render,
    "consumers-beyond-queues": consumers.render,
    "revive-storm": revive.render,
    "cluster": cluster.render,
}
_PROFILED = {"produce": "batch 32 · 8 producers", "pop-ack": "batch 32 · 4 consumers"}


def _log(text: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def run_scenarios(quick: bool, *, profile: bool) -> tuple[list[ScenarioResult], dict[str, Any]]:
    """Every scenario of REPORTED, in order; profiles of produce and pop+ack when asked."""
    require = not quick
    profiles: dict[str, dict[str, Any]] = {}
    results: list[ScenarioResult] = []
    out = {name: RESULTS / f"profile-{name}.raw" for name in _PROFILED}
    can_profile = profile and PySpy.available()

    steps: list[tuple[str, Callable[[], ScenarioResult]]] = [
        (
            "produce",
            lambda: produce.run(
                produce.settings(quick),
                require_peers=require,
                profile_out=out["produce"] if can_profile else None,
            ),
        ),
        (
            "pop-ack",
            lambda: pop_ack.run(
                pop_ack.settings(quick),
                require_peers=require,
                profile_out=out["pop-ack"] if can_profile else None,
            ),
        ),
        ("e2e-latency", lambda: latency.run(latency.settings(quick), require_peers=require)),
        (
            "paced-cost",
            lambda: paced_cost.run(paced_cost.settings(quick), require_peers=require),
        ),
        ("long-poll", lambda: long_poll.run(long_poll.settings(quick))),
        ("backlog", lambda: backlog.run(backlog.settings(quick))),
        ("consumers-beyond-queues", lambda: consumers.run(consumers.settings(quick))),
        ("revive-storm", lambda: revive.run(revive.settings(quick))),
        ("cluster", lambda: cluster.run(cluster.settings(quick))),
    ]
    for name, step in steps:
        _log(f"{name} ...")
        result = step()
        _log(f"{name} took {result.seconds:.0f} s")
        results.append(result)
        if name in _PROFILED and can_profile and out[name].exists():
            summary = summarize(out[name])
            profiles[name] = asdict(summary)
    return results, profiles


def _other_names() -> list[str]:
    from bench.__main__ import SCENARIOS  # the registry (it imports bench.scenarios)

    return sorted(set(SCENARIOS) - set(REPORTED))


def run_others(quick: bool) -> dict[str, dict[str, Any]]:
    """The other scenarios of ``python -m bench``, their printed tables and wall time."""
    from bench.__main__ import SCENARIOS

    others: dict[str, dict[str, Any]] = {}
    for name in _other_names():
        _log(f"{name} (other scenario) ...")
        began = time.perf_counter()
        text = SCENARIOS[name](quick=quick)
        others[name] = {"markdown": text, "seconds": time.perf_counter() - began}
    return others


def _version(binary: str, *args: str) -> str:
    path = find_binary(binary)
    if path is None:
        return "not installed"
    done = subprocess.run([path, *args], capture_output=True, text=True, check=False)
    return (done.stdout or done.stderr).strip().splitlines()[0] if done.returncode == 0 else "?"


def _git_revision() -> str:
    done = subprocess.run(
        ["git", "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    return done.stdout.strip() or "unknown"


def _by_name(results: list[ScenarioResult]) -> dict[str, ScenarioResult]:
    return {r.name: r for r in results}


def _status(value: float, goal: float, *, higher_is_better: bool = True) -> str:
    if math.isnan(value):
        return "not measured"
    met = value >= goal if higher_is_better else value <= goal
    return "met" if met else "short"


def _x(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}x"


def targets_table(results: list[ScenarioResult]) -> str:
    """Each performance target, what this run measured, and met/short."""
    by = _by_name(results)
    rows: list[list[str]] = []

    def add(target: str, measured: str, status: str) -> None:
        rows.append([target, measured, status])

    prod = by.get("produce")
    if prod is not None:
        for peer, goal in (("redis-always", 1.0), ("redis-everysec", 0.8)):
            one = prod.ratio("batch 32 · 1 producer", "msg/s", "popmq", peer)
            eight = prod.ratio("batch 32 · 8 producers", "msg/s", "popmq", peer)
            add(
                f"produce batch 32, sync flush ≥ {goal:.1f}x Redis appendfsync "
                f"{peer.split('-')[1]}",
                f"{_x(one)} (1 producer), {_x(eight)} (8 producers)",
                _status(min(one, eight), goal),
            )
        raw = ("batch 32 · 1 producer", "rocksdb raw")
        one = prod.pair_ratio("msg/s", ("batch 32 · 1 producer", "popmq"), raw)
        eight = prod.pair_ratio("msg/s", ("batch 32 · 8 producers", "popmq"), raw)
        add(
            "produce batch 32 ≥ 40% of raw RocksDB batch put rate",
            f"{one:.0%} (1 producer), {eight:.0%} (8 producers)",
            _status(max(one, eight), 0.4),
        )
    pop = by.get("pop-ack")
    if pop is not None:
        for on_receive in (False, True):
            if not pop.samples(pop_ack.case_name(1, on_receive), "popmq", "msg/s"):
                continue
            for peer, label in (
                ("redis-everysec", "Redis XREADGROUP + XACK (everysec)"),
                ("redis-always", "Redis XREADGROUP + XACK (always)"),
                ("nats", "NATS JetStream pull fetch + ack"),
            ):
                one = pop.ratio(pop_ack.case_name(1, on_receive), "msg/s", "popmq", peer)
                four = pop.ratio(pop_ack.case_name(4, on_receive), "msg/s", "popmq", peer)
                add(
                    f"pop + ack batch 32 ≥ 1.0x {label}"
                    + (f", {pop_ack.ACK_ON_RECEIVE}" if on_receive else ""),
                    f"{_x(one)} (1 consumer), {_x(four)} (4 consumers)",
                    _status(min(one, four), 1.0),
                )
    lat = by.get("e2e-latency")
    if lat is not None and lat.cases():
        case = lat.cases()[0]
        p99 = lat.median(case, "popmq", "p99 ms")
        add(
            f"end-to-end p99 ≤ 5 ms at {case}",
            f"{format_number(p99)} ms",
            _status(p99, 5, higher_is_better=False),
        )
    lp = by.get("long-poll")
    if lp is not None and lp.cases():
        case = lp.cases()[0]
        wake = lp.median(case, "popmq", "wake p99 ms")
        rss = lp.median(case, "popmq", "rss MB")
        add(
            f"long-poll wake p99 ≤ 10 ms ({case})",
            f"{format_number(wake)} ms",
            _status(wake, 10, higher_is_better=False),
        )
        add(
            "… using ≤ 150 MB server RSS",
            f"{format_number(rss)} MB",
            _status(rss, 150, higher_is_better=False),
        )
    bl = by.get("backlog")
    if bl is not None and len(bl.cases()) == 2:
        small, large = bl.cases()
        ratio = bl.cross_ratio("msg/s", large, small)
        add(f"backlog ratio ({large} ÷ {small}) ≥ 0.9", _x(ratio), _status(ratio, 0.9))
    cq = by.get("consumers-beyond-queues")
    if cq is not None and len(cq.cases()) == 2:
        few, many = cq.cases()
        ratio = cq.cross_ratio("msg/s", many, few)
        add(f"{many} on 4 queues ≥ 3x the throughput of {few}", _x(ratio), _status(ratio, 3.0))
    return markdown_table(["target", "measured (median)", "status"], rows)


def chart(results: list[ScenarioResult], path: Path) -> None:
    """Throughput (produce, pop+ack) and latency (p50/p99/p99.9) per system, log scales."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = _by_name(results)
    colors = {
        "popmq": "#d62728",
        "redis-always": "#1f77b4",
        "redis-everysec": "#aec7e8",
        "nats": "#2ca02c",
        "rocksdb raw": "#7f7f7f",
        "grpc echo": "#c7c7c7",
    }
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    for ax, name, title, log in (
        (axes[0], "produce", "1. produce, msg/s (median, log scale)", True),
        (axes[1], "pop-ack", "2. pop + ack, msg/s (median)", False),
    ):
        result = by.get(name)
        if result is None:
            continue
        cases = result.cases()
        systems = [s for s in colors if any(result.samples(c, s, "msg/s") for c in cases)]
        rates = {(i, s): result.median(c, s, "msg/s") for i, c in enumerate(cases) for s in systems}
        labels = [c.replace(" · ", "\n") for c in cases]
        _bars(ax, labels, systems, colors, rates)
        if log:
            ax.set_yscale("log")
        ax.set_title(title)
    lat = by.get("e2e-latency")
    if lat is not None and lat.cases():
        groups = [(case, m) for case in lat.cases() for m in ("p50 ms", "p99 ms")]
        labels = [f"{m.split()[0]}\n{case.split(' · ')[0]}" for case, m in groups]
        systems = lat.systems()
        ms = {
            (i, s): lat.median(case, s, metric)
            for i, (case, metric) in enumerate(groups)
            for s in systems
        }
        _bars(axes[2], labels, systems, colors, ms)
        axes[2].set_yscale("log")
        axes[2].set_ylabel("ms")
        axes[2].set_title("3. end-to-end latency, ms (median of runs; log, lower is better)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _bars(
    ax: Any,
    labels: list[str],
    systems: list[str],
    colors: dict[str, str],
    values: dict[tuple[int, str], float],
) -> None:
    """Grouped bars: one group per label, one bar per system; values by (label index, system)."""
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        ys = [values.get((j, system), math.nan) for j in range(len(labels))]
        ax.bar(
            [j + i * width for j in range(len(labels))],
            [0 if math.isnan(y) else y for y in ys],
            width,
            label=system,
            color=colors.get(system, "#999999"),
        )
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))])
    ax.set_xticklabels(labels, fontsize=8)
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7)


def _profile_section(profiles: dict[str, dict[str, Any]]) -> str:
    if not profiles:
        return "No profile in this run (py-spy missing, or `--quick`/`--no-profile`)."
    parts = [
        "`py-spy record --native` (100 Hz) on the `popmq serve` process during one extra "
        "window of each case below (native sampling pauses the server briefly, so that "
        "window is not in the tables). Shares are of the busy samples (threads waiting in "
        "epoll/poll dropped). *Charged* = native time is charged to the innermost Python "
        "frame that called it, so `Runner.run (asyncio/runners.py)` is the time spent in C "
        "called straight from the event loop: grpc's Cython server and its socket "
        "writes/reads, below any popmq code. popmq's mypyc-compiled functions count as "
        "Python frames, named `Class.method (popmq compiled: module)`; their own time is "
        "the library *popmq compiled*. *On stack* = the function is anywhere on the "
        "stack. Raw stacks: `bench/results/profile-*.raw` after `make bench`."
    ]
    for name, data in profiles.items():
        summary = Profile(
            samples=data["samples"],
            by_python_frame=[HotSpot(**h) for h in data["by_python_frame"]],
            by_library=[HotSpot(**h) for h in data["by_library"]],
            own_by_total=[HotSpot(**h) for h in data["own_by_total"]],
        )
        parts.append(f"### {name}, {_PROFILED[name]} ({summary.samples:,} busy samples)")
        rows = [
            [h.function, f"{h.self_share:.1%}", f"{h.total_share:.1%}"]
            for h in summary.by_python_frame
        ]
        parts.append(markdown_table(["innermost Python frame", "charged", "on stack"], rows))
        libraries = ", ".join(f"{h.function} {h.self_share:.0%}" for h in summary.by_library)
        parts.append(f"Where the CPU goes, by the innermost frame's library: {libraries}.")
        rows = [
            [h.function, f"{h.total_share:.1%}", f"{h.self_share:.1%}"]
            for h in summary.own_by_total
        ]
        parts.append(f"{name}: popmq's own functions (entry points above 80% left out)")
        parts.append(markdown_table(["function (file)", "on stack", "charged"], rows))
    return "\n\n".join(parts)


_SEQUENTIAL = "batch 32 · 1 producer"


def floors_section(results: list[ScenarioResult]) -> str:
    """What the transport and the storage alone cost, next to the systems, from this run.

    A sequential producer waits for each batch: its round trip is at least the transport's
    round trip (the bare grpc.aio echo) plus a synced write of the batch (raw RocksDB). Put
    side by side with a peer's whole round trip, this says how much of a shortfall any
    amount of work on popmq's own code could win back. Empty without the produce rows.
    """
    by = _by_name(results)
    prod = by.get("produce")
    if prod is None:
        return ""
    rows = []
    per_batch: dict[str, float] = {}
    for system, label in (
        ("popmq", "popmq (gRPC, broker, synced write)"),
        ("redis-always", "redis-always"),
        ("redis-everysec", "redis-everysec"),
        ("nats", "nats"),
        (produce.ECHO, "grpc echo: the transport alone"),
        (produce.ROCKSDB, "rocksdb raw: the synced write alone"),
    ):
        rate = prod.median(_SEQUENTIAL, system, "msg/s")
        if math.isnan(rate) or rate <= 0:
            continue
        per_batch[system] = 32 / rate * 1000
        rows.append([label, format_number(per_batch[system])])
    echo, raw = per_batch.get(produce.ECHO), per_batch.get(produce.ROCKSDB)
    redis, popmq = per_batch.get("redis-always"), per_batch.get("popmq")
    if echo is None or raw is None or redis is None or popmq is None:
        return ""
    floor = echo + raw
    rows.append(["grpc echo + rocksdb raw: popmq's floor", format_number(floor)])
    table = markdown_table([f"{_SEQUENTIAL} (medians)", "ms per batch round trip"], rows)
    lines = [
        table,
        "",
        f"- The transport alone takes {echo / redis:.0%} of Redis (always)'s whole round "
        f"trip, and the transport plus the synced write alone {floor / redis:.0%} of it: "
        f"popmq's own work (conversion, validation, indexes, group commit) is the other "
        f"{max(0.0, popmq - floor):.2f} ms. "
        + (
            f"Even with no work of its own popmq would stay below 1.0x Redis (always) here "
            f"({redis / floor:.2f}x): the target needs a transport cheaper than grpc.aio's."
            if floor >= redis
            else f"To reach 1.0x Redis (always), that work would have to fit in "
            f"{redis - floor:.2f} ms a batch ({(redis - floor) / 32 * 1000:.1f} µs a message)."
        ),
    ]
    paced = by.get("paced-cost")
    if paced is not None and paced.cases():
        case = paced.cases()[0]
        own = paced.median(case, "popmq", "server us/msg")
        bare = paced.median(case, paced_cost.ECHO, "server us/msg")
        peer = paced.median(case, "redis-always", "server us/msg")
        if not any(math.isnan(v) for v in (own, bare, peer)):
            lines.append(
                f"- A lone paced send ({case}, section 3b): the bare grpc.aio echo server "
                f"spends {format_number(bare)} µs of CPU per message, Redis (always) "
                f"{format_number(peer)} µs for all of its work, popmq {format_number(own)} µs."
            )
    return "\n".join(lines)


def _load_sentence(load: str) -> str:
    """Whether other work shared the machine, judged by the 1-minute load at the start."""
    try:
        busy = float(load.split("/")[0]) >= 1.0
    except ValueError:
        busy = True
    if busy:
        # The 1-minute average still counts `make bench`'s own build step just before the
        # run, so a busy start does not by itself mean other work shared the machine.
        return (
            "a 1-minute load of 1 or more at the start counts `make bench`'s own build step "
            "just before the run and any other work on the 2 cores, so absolute numbers are "
            "noisy."
        )
    return "the machine was otherwise quiet at the start, but it is a shared VM."


def render_doc(results: list[ScenarioResult], meta: dict[str, Any], *, chart_name: str) -> str:
    machine = meta["machine"]
    quick = meta["quick"]
    command = meta["command"]
    total_s = sum(r.seconds for r in results) + sum(o["seconds"] for o in meta["others"].values())
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `{command}` on {meta['date']} at popmq `{meta['revision']}`; do not edit "
        "by hand. Every table comes from that one run of the committed harness (`bench/`). "
        f"The run took {total_s / 60:.0f} min.",
        "",
        "**Machine:** "
        f"{machine['cores']} cores, {machine['cpu']}, {machine['memory']}, {machine['os']}, "
        f"Python {machine['python']}. Peers: {meta['redis']}; {meta['nats']}. "
        f"Load average at the start {meta['load_start']}, at the end {meta['load_end']}: "
        f"{_load_sentence(meta['load_start'])} Read the **ratios**: systems of one run are "
        "measured back to back, and a ratio is the median of the per-run ratios.",
        "",
        "**How to read:** each value is the median of the runs (the count is in each "
        "section's settings); `popmq ÷ peer` above 1 means popmq measured higher. Clients "
        "and servers run on the same machine over loopback; every client is Python (redis-py, "
        "nats-py, popmq's SDK) in one load-generator process, every server in its own process "
        "(`popmq serve`, not the in-process test server, so they share no GIL).",
        "",
    ]
    if quick:
        lines += [
            "**This is a `--quick` run** (tiny sizes, one run): it proves the harness works "
            "and says nothing about speed.",
            "",
        ]
    lines += [
        "## Performance targets and where we stand",
        "",
        targets_table(results),
        "",
        f"![throughput and latency]({chart_name})",
        "",
    ]
    floors = floors_section(results)
    if floors:
        lines += ["### What the transport and the storage alone take", "", floors, ""]
    for result in results:
        lines += [f"## {result.title}", "", _RENDER[result.name](result), ""]
        settings = ", ".join(f"{k}={_setting(v)}" for k, v in result.settings.items())
        lines += [
            f"Settings: {settings}. Took {result.seconds:.0f} s. Alone: "
            f"`.venv/bin/python -m bench --scenario {result.name}`.",
            "",
        ]
    lines += [
        "## Server profile (for the performance work)",
        "",
        _profile_section(meta["profiles"]),
        "",
    ]
    lines += [
        "## Method",
        "",
        "- **popmq**: `popmq serve --flush sync` on 127.0.0.1 with a fresh store in a temp "
        "dir, reached through its SDK over gRPC (`AsyncProducer.send`/`send_batch`, "
        "`AsyncSimpleConsumer.receive` + one `ack` per batch, or `receive(ack=...)` in the "
        "cases with acks on the next receive). A send returns after its batch is fsynced.",
        "- **redis-always / redis-everysec**: `redis-server` (Debian package) with AOF on and "
        "`appendfsync always` (durability-matched) or `everysec` (Redis's default), no RDB "
        "snapshots; redis-py asyncio: XADD (pipelined per batch), XREADGROUP COUNT n (BLOCK "
        "for long polls) + one XACK per batch, or XACK and the next XREADGROUP in one "
        "pipeline in the cases with acks on the next receive.",
        "- **nats**: `nats-server -js` (Debian package) with a temp store dir, file storage, "
        "its default sync (fsync every 2 min; 2.9 has no per-write sync), so an acked publish "
        "is not yet on disk and the row is *not* durability-matched. nats-py: `publish` for "
        "batch 1, `publish_async` + gathered acks for a batch; a durable pull consumer "
        "(explicit ack, MaxAckPending 100,000) with `fetch(n)` and one `ack()` per message. "
        "`ack()` only publishes the ack; it does not wait for the server to process it "
        "(nats-py's `ack_sync` would), so a NATS consume cycle waits for one round trip "
        "where popmq's and Redis's wait for two (receive, then ack). "
        "nats-py's `fetch(n)` holds an empty pull until n arrive, so the harness fetches "
        "without waiting and long-polls only an empty stream, for one message.",
        "- **rocksdb raw**: rocksdict synced `WriteBatch` of the same `StoredMessage` records, "
        "one writer, no indexes: the storage limit. **grpc echo**: a bare `grpc.aio` server "
        "process returning the `SendMessagesRequest` bytes it gets: the transport limit.",
        "- **Cluster mode** (section 8): an etcd, `popmq broker --flush sync` processes and "
        "one `popmq proxy`, each its own process, beside `popmq serve --flush sync`, all "
        "started once and measured in turn within each run, through the same SDK load as "
        "sections 1, 2 and 3b. CPU per message is each process's utime + stime (from "
        "/proc/PID/stat) over the measured window divided by the messages counted in it.",
        "- Backlogs: popmq's are written by its embedded broker before the server starts "
        "(minutes faster than gRPC; not timed), the peers' through their own clients.",
        "- **Quick mode and CI.** `make setup` installs the peers when it can "
        "(`tools/install_peers.sh`: apt-get, idempotent, skipped in a few ms when they are "
        "present, and non-fatal where apt is unavailable), so `--quick` (what "
        "`tests/integration/test_bench_quick.py` runs in CI, asserting nothing about speed) "
        "includes the peer rows when `redis-server` and `nats-server` are installed and skips "
        "them with a note when they are not. The full run (`make bench`) requires them.",
        "",
    ]
    others = meta["others"]
    names = meta.get("other_names", [])
    if names and not others:
        commands = ", ".join(f"`python -m bench --scenario {n}`" for n in names)
        lines += [
            "## Other scenarios",
            "",
            f"Not part of this run (popmq only, not side by side): {commands}; "
            "`python -m bench.report --with-others` appends them here.",
            "",
        ]
    if others:
        lines += [
            "## Other scenarios",
            "",
            "The rest of `python -m bench`, as each prints itself (popmq only).",
            "",
        ]
        for name, data in others.items():
            lines += [
                f"### {name}",
                "",
                data["markdown"].strip(),
                "",
                f"Took {data['seconds']:.0f} s.",
                "",
            ]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="seconds, tiny sizes")
    parser.add_argument("--render-only", action="store_true", help="re-render the last results")
    parser.add_argument("--no-profile", action="store_true", help="skip the py-spy windows")
    parser.add_argument(
        "--with-others", action="store_true", help="also run the rest of python -m bench"
    )
    parser.add_argument("--doc", type=Path, default=DOC, help=f"markdown output ({DOC.name})")
    parser.add_argument("--chart", type=Path, default=CHART, help=f"PNG output ({CHART.name})")
    parser.add_argument("--results", type=Path, default=RESULTS / "latest.json")
    args = parser.parse_args(argv)

    if args.render_only:
        results, meta = load_results(args.results)
        meta["profiles"] = _summaries_again(meta)
    else:
        meta = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "quick": args.quick,
            "command": FULL_COMMAND if not args.quick else "python -m bench.report --quick",
            "machine": machine_info(),
            "load_start": machine_info()["load"],
            "revision": _git_revision(),
            "redis": _version("redis-server", "--version"),
            "nats": "nats-server " + _version("nats-server", "--version"),
        }
        results, profiles = run_scenarios(args.quick, profile=not (args.no_profile or args.quick))
        meta["profiles"] = profiles
        meta["others"] = run_others(args.quick) if args.with_others else {}
        meta["other_names"] = _other_names()
        meta["load_end"] = machine_info()["load"]
        save_results(results, args.results, meta)
    chart(results, args.chart)
    args.doc.parent.mkdir(parents=True, exist_ok=True)
    args.doc.write_text(render_doc(results, meta, chart_name=_relative(args.chart, args.doc)))
    _log(f"wrote {args.doc} and {args.chart}")
    return 0


def _setting(value: Any) -> str:
    """A setting as the scenario wrote it: results saved as JSON come back with lists for
    tuples, and a re-render must print the same text as the run."""
    if isinstance(value, list):
        inner = ", ".join(_setting(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return str(value)


def _summaries_again(meta: dict[str, Any]) -> dict[str, Any]:
    """The run's profiles summarized again from its raw stacks (so a change to the summary
    applies to the results already taken); a raw file older than the run is another run's."""
    profiles: dict[str, Any] = dict(meta.get("profiles") or {})
    try:
        started = datetime.strptime(str(meta.get("date")), "%Y-%m-%d %H:%M UTC")
    except ValueError:
        return profiles  # not a run's own date: nothing tells which raw stacks are its
    started = started.replace(tzinfo=UTC)
    for name in profiles:
        raw = RESULTS / f"profile-{name}.raw"
        if raw.exists() and raw.stat().st_mtime >= started.timestamp():
            profiles[name] = asdict(summarize(raw))
    return profiles


def _relative(chart: Path, doc: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(chart.resolve().relative_to(doc.resolve().parent))
    return str(chart.resolve())


if __name__ == "__main__":
    sys.exit(main())
