"""Benchmarks stay runnable: each scenario in --quick mode (asserts nothing about speed).

The side-by-side scenarios include the Redis and NATS rows when `make setup` could install
redis-server and nats-server, and skip them with a note otherwise.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import paced_inprocess, report, revive_lag, wal_sync
from bench.__main__ import SCENARIOS, main
from bench.results import ScenarioResult, load_results, save_results
from bench.scenarios import consumers, long_poll
from tests.spark.conftest import SPARK_TEST_TIMEOUT_S


def _quick_case(scenario: str) -> object:
    if scenario != "spark-drain":
        return scenario
    # Its own SparkSession (a JVM) in a spawned process: it gets the Spark tests' time bound
    # and their worker, so two JVMs never start at once on the two cores.
    return pytest.param(
        scenario,
        marks=[pytest.mark.timeout(SPARK_TEST_TIMEOUT_S), pytest.mark.xdist_group("spark")],
    )


@pytest.mark.slow
@pytest.mark.parametrize("scenario", [_quick_case(s) for s in sorted(SCENARIOS)])
def test_bench_scenario_runs_in_quick_mode(
    scenario: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--scenario", scenario, "--quick"]) == 0
    output = capsys.readouterr().out
    assert f"## {scenario}" in output
    assert "|---" in output


def test_paired_ratio_is_the_median_of_per_run_ratios() -> None:
    result = ScenarioResult("produce", "1. Produce")
    for popmq, peer in ((100.0, 200.0), (300.0, 100.0), (100.0, 100.0)):
        result.add("case", "popmq", "msg/s", popmq)
        result.add("case", "peer", "msg/s", peer)
    # Per run 0.5, 3.0, 1.0 -> median 1.0; the ratio of medians would be 0.5.
    assert result.ratio("case", "msg/s", "popmq", "peer") == 1.0
    assert result.median("case", "popmq", "msg/s") == 100.0


def test_floors_put_the_transport_and_the_write_beside_the_peers() -> None:
    result = ScenarioResult("produce", "1. Produce")
    # ms per batch of 32: popmq 2, redis-always 1, echo 0.5, raw 0.25
    for system, rate in (
        ("popmq", 16_000.0),
        ("redis-always", 32_000.0),
        ("grpc echo", 64_000.0),
        ("rocksdb raw", 128_000.0),
    ):
        result.add("batch 32 · 1 producer", system, "msg/s", rate)
    text = report.floors_section([result])
    assert "| grpc echo + rocksdb raw: popmq's floor | 0.750 |" in text
    assert "The transport alone takes 50% of Redis (always)'s whole round trip" in text
    assert (
        "popmq's own work (conversion, validation, indexes, group commit) is the other 1.25 ms"
        in text
    )
    assert "would have to fit in 0.25 ms a batch (7.8 µs a message)" in text
    result.add("batch 32 · 1 producer", "rocksdb raw", "msg/s", 32_000.0)  # floor 1.5 ms now
    for _ in range(2):  # the medians move to the new values
        for system, rate in (("popmq", 16_000.0), ("redis-always", 32_000.0)):
            result.add("batch 32 · 1 producer", system, "msg/s", rate)
        result.add("batch 32 · 1 producer", "grpc echo", "msg/s", 64_000.0)
        result.add("batch 32 · 1 producer", "rocksdb raw", "msg/s", 32_000.0)
    assert "would stay below 1.0x Redis (always) here (0.67x)" in report.floors_section([result])
    assert report.floors_section([]) == ""


def test_report_renders_doc_and_chart_from_saved_results(tmp_path: Path) -> None:
    results = [
        long_poll.run(long_poll.settings(quick=True)),
        consumers.run(consumers.settings(quick=True)),
    ]
    meta = {
        "date": "today",
        "quick": True,
        "command": "python -m bench.report --quick",
        "machine": {"cores": "2", "cpu": "cpu", "memory": "1 GiB", "os": "os", "python": "3"},
        "load_start": "0",
        "load_end": "0",
        "revision": "abc",
        "redis": "redis",
        "nats": "nats",
        "profiles": {},
        "others": {},
    }
    saved = tmp_path / "latest.json"
    save_results(results, saved, meta)
    doc, chart = tmp_path / "benchmarks.md", tmp_path / "benchmarks.png"
    code = report.main(
        ["--render-only", "--results", str(saved), "--doc", str(doc), "--chart", str(chart)]
    )
    assert code == 0
    text = doc.read_text()
    assert "## Performance targets and where we stand" in text
    assert "16 consumers on 4 queues ≥ 3x the throughput of 4 consumers" in text
    assert "## 4. Long-poll scale" in text
    assert chart.read_bytes().startswith(b"\x89PNG")
    assert load_results(saved)[0][0].name == "long-poll"


def test_revive_lag_probe_runs(capsys: pytest.CaptureFixture[str]) -> None:
    revive_lag.main(["--messages", "300", "--invisible-s", "1"])
    output = capsys.readouterr().out
    assert "300 messages popped and never acked" in output
    assert "loop lag p99 ms" in output


def test_wal_sync_probe_runs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    wal_sync.main(["--writes", "60", "--runs", "1", "--dir", str(tmp_path)])
    output = capsys.readouterr().out
    assert "| batch of 32 | 2 |" in output
    assert "| lone message | 0 |" in output


def test_paced_inprocess_probe_runs(capsys: pytest.CaptureFixture[str]) -> None:
    paced_inprocess.main(["--rate", "200", "--seconds", "0.2", "--runs", "1"])
    output = capsys.readouterr().out
    assert "| bare loop |" in output
    assert "| Broker.send, flush sync |" in output
