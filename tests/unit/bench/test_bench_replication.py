"""The replication scenario's report: the ratios to the standalone broker, the spreads and
the persist_checkpoints line are computed from the samples as the doc says (no process
started here; tests/integration/test_bench_quick.py runs the scenario itself)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import replication
from bench.peers.cluster import ShardLaunch, launch_shard, replication_events
from bench.peers.targets import PopmqTarget
from bench.replication import ASYNC, STANDALONE, SYNC, SYNC_BUFFERED, cpu_metric
from bench.results import ScenarioResult

_SEND = replication.send_case(16)
_POP = replication.pop_case(32, 4)


def _result() -> ScenarioResult:
    """Three runs; the per-run ratios' median differs from the ratio of the medians."""
    result = ScenarioResult(replication.NAME, "replication", settings={"runs": 3})
    runs = [
        # (a), (b), (c) send msg/s; (a), (b) p99 ms; (a), (b), (d) pop msg/s
        (1000.0, 500.0, 900.0, 10.0, 30.0, 4000.0, 2000.0, 3000.0),
        (2000.0, 1500.0, 1800.0, 20.0, 20.0, 4000.0, 3000.0, 3000.0),
        (1000.0, 700.0, 800.0, 10.0, 40.0, 4000.0, 2500.0, 2500.0),
    ]
    for a, b, c, p99a, p99b, pop_a, pop_b, pop_d in runs:
        result.add(_SEND, STANDALONE, "msg/s", a)
        result.add(_SEND, SYNC, "msg/s", b)
        result.add(_SEND, ASYNC, "msg/s", c)
        for system, p99 in ((STANDALONE, p99a), (SYNC, p99b), (ASYNC, p99a)):
            result.add(_SEND, system, "p50 ms", p99 / 2)
            result.add(_SEND, system, "p99 ms", p99)
        for system, rate in ((STANDALONE, pop_a), (SYNC, pop_b), (SYNC_BUFFERED, pop_d)):
            result.add(_POP, system, "msg/s", rate)
        for case in (_SEND, _POP):
            for system in (STANDALONE, SYNC):
                result.add(case, system, replication.SERVER, 450.0 if system == SYNC else 300.0)
                result.add(case, system, cpu_metric("proxy"), 100.0)
                result.add(case, system, cpu_metric("leader"), 150.0)
                result.add(case, system, replication.CORES, 1.5)
            result.add(case, SYNC, cpu_metric("follower"), 50.0)
    return result


def test_throughput_shows_median_range_and_paired_ratios_to_standalone() -> None:
    text = replication.render(_result())
    # (b) ÷ (a) per run: 0.5, 0.75, 0.7 -> 0.70x (the medians' ratio would be 0.70 too, but
    # (c): 0.9, 0.9, 0.8 -> 0.90x where the medians give 900 / 1000)
    assert (
        f"| {_SEND} | 1,000 (1,000-2,000) | 700 (500-1,500) | 900 (800-1,800) | - "
        "| 0.70x | 0.90x | n/a |" in text
    )
    # pop: (b) 0.5, 0.75, 0.625 -> 0.62x; (d) 0.75, 0.75, 0.625 -> 0.75x; no (c) samples
    assert f"| {_POP} | 4,000 (4,000-4,000) | 2,500 (2,000-3,000) | - |" in text
    assert "| n/a | 0.75x |" in text


def test_latency_rows_are_per_deployment_with_ratios_to_standalone() -> None:
    text = replication.render(_result())
    # p99 (b) ÷ (a) per run: 3, 1, 4 -> 3.00x
    assert f"| {_SEND} | {SYNC} | 15.0 (10.0-20.0) | 30.0 (20.0-40.0) | 3.00x | 3.00x |" in text
    assert f"| {_SEND} | {STANDALONE} | 5.00 (5.00-10.0) | 10.0 (10.0-20.0) | 1.00x | 1.00x |" in (
        text
    )


def test_cpu_table_splits_the_server_into_proxy_leader_and_follower() -> None:
    text = replication.render(_result())
    assert f"| {_SEND} | {SYNC} | 450 | 1.50x | 100 | 150 | 50.0 | - | - | 1.50 |" in text
    assert f"| {_SEND} | {STANDALONE} | 300 | 1.00x | 100 | 150 | - | - | - | 1.50 |" in text


def test_summary_names_the_persist_checkpoints_cost() -> None:
    text = replication.render(_result())
    # (b) ÷ (d) per run: 0.667, 1.0, 1.0 -> 1.00x
    assert "persist_checkpoints under sync replication: (b) ÷ (d) = 1.00x in msg/s and n/a" in (
        text
    )
    assert f"{_SEND}: throughput vs (a): (b) sync 0.70x, (c) async 0.90x; p99 10.0 ms" in text
    assert "ms async; server CPU per message vs (a): (b) sync 1.50x." in text


def test_unknown_deployment_and_empty_shard_are_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown deployment 'x'; known: \(a\) standalone"):
        replication.deploy("x").__enter__()
    with pytest.raises(ValueError, match="at least 1 replica, not 0"):
        launch_shard(replicas=0).__enter__()


def test_isr_notes_count_windows_out_of_sync_and_cite_the_departures(tmp_path: Path) -> None:
    leader_log = tmp_path / "r1.log"
    leader_log.write_text(
        "2026-01-01T00:00:01Z INFO x: shard s1: follower r2 joined the in-sync set at lsn 1\n"
        "2026-01-01T00:00:09Z WARNING x: shard s1: follower r2 left the in-sync set: "
        "its stream ended (the follower closed it)\n"
    )
    follower_log = tmp_path / "r2.log"
    follower_log.write_text(
        "2026-01-01T00:00:08Z INFO x: shard s1: following r1 ended: UNAVAILABLE: gone\n"
    )
    shard = ShardLaunch(
        target=PopmqTarget("127.0.0.1:1"),
        shard="s1",
        proxy_pid=1,
        leader="r1",
        replica_pids={"r1": 2, "r2": 3},
        etcd_pid=4,
        etcd_endpoint="127.0.0.1:2",
        logs={"replica-s1-r1": leader_log, "replica-s1-r2": follower_log},
    )
    assert [line.split(": ")[0] for line in replication_events(shard)] == [
        "replica-s1-r1",
        "replica-s1-r2",
        "replica-s1-r1",
    ], "in time order across the replicas' logs"
    deployment = replication.Deployment(SYNC, shard.target, {"leader": 2}, shard)
    result = ScenarioResult(replication.NAME, "replication")
    for in_sync, nudged in ((1.0, 0.0), (0.0, 0.0), (1.0, 1.0)):
        result.add(_SEND, SYNC, replication.IN_SYNC, in_sync)
        result.add(_SEND, SYNC, replication.NUDGED, nudged)
    (note,) = replication.isr_notes(result, {SYNC: deployment})
    assert note.startswith(
        f"{SYNC}: the follower was in the in-sync set at the start of every window (1 of 3 "
        "after a nudge) and at the end of 2 of 3 (it was still out 3 s after its stream ended"
    )
    assert "acknowledge and rejoin); the replicas logged 1 departure(s)" in note
    assert "follower r2 left the in-sync set: its stream ended (the follower closed it)." in note
