"""bench.spark_drain's report: one row per run with its load, and the spread over runs, so
docs/spark.md can quote min to max (median) straight from a results file. No Spark here."""

from __future__ import annotations

import pytest

from bench.spark_drain import (
    DrainResult,
    RunResult,
    _from_json,
    _to_json,
    _without_base,
    cli,
    render,
)


def _run(
    spark_s: float, steady: float | None, sdk_s: float, load: tuple[float, float]
) -> RunResult:
    return RunResult(
        spark=DrainResult("Spark", 200_000, spark_s, steady),
        sdk=DrainResult("SDK", 200_000, sdk_s),
        load_min=load[0],
        load_max=load[1],
    )


def test_the_report_gives_each_run_its_load_and_the_spread_of_all_runs() -> None:
    runs = [_run(50.0, 5_000.0, 40.0, (1.0, 2.5)), _run(100.0, 4_000.0, 50.0, (3.0, 7.0))]
    *rows, spread = render(runs).splitlines()
    assert rows[2] == (
        "| 1 | 1.0 to 2.5 | 50.0 | 4,000 | 5,000 | 40.0 | 5,000 | 0.80 | - | - | - | - |"
    )
    assert rows[3] == (
        "| 2 | 3.0 to 7.0 | 100.0 | 2,000 | 4,000 | 50.0 | 4,000 | 0.50 | - | - | - | - |"
    )
    assert spread == (
        "| min to max (median) | 1.0 to 7.0 | 50.0 to 100.0 (75.0) | 2,000 to 4,000 (3,000) "
        "| 4,000 to 5,000 (4,500) | 40.0 to 50.0 (45.0) | 4,000 to 5,000 (4,500) "
        "| 0.50 to 0.80 (0.65) | - | - | - | - |"
    )


def test_a_single_run_has_no_spread_row_and_a_run_without_a_second_batch_no_steady_rate() -> None:
    lines = render([_run(10.0, None, 5.0, (0.5, 0.5))]).splitlines()
    assert lines[2:] == [
        "| 1 | 0.5 to 0.5 | 10.0 | 20,000 | - | 5.0 | 40,000 | 0.50 | - | - | - | - |"
    ]


def test_the_lease_drain_and_cpu_per_message_have_their_columns_and_survive_json() -> None:
    run = RunResult(
        spark=DrainResult("Spark", 1_000, 1.0, 2_000.0, server_us=150.0),
        sdk=DrainResult("SDK", 1_000, 0.5, server_us=100.0, client_us=60.4),
        lease=DrainResult("lease", 1_000, 0.25, server_us=80.0, client_us=40.0),
        load_min=1.0,
        load_max=2.0,
    )
    [row] = render([run]).splitlines()[2:]
    assert row == (
        "| 1 | 1.0 to 2.0 | 1.0 | 1,000 | 2,000 | 0.5 | 2,000 | 0.50 | 4,000 | 150 "
        "| 100 + 60 | 80 + 40 |"
    )
    assert _from_json(_to_json(run)) == run


def test_the_base_checkout_is_dropped_from_what_each_child_run_is_given() -> None:
    argv = ["--runs", "2", "--base", "/x/base", "--messages", "10", "--base=/y"]
    assert _without_base(argv) == ["--runs", "2", "--messages", "10"]


@pytest.mark.parametrize(
    "flag", ["--runs", "--messages", "--batches", "--partitions", "--pop-batch", "--page"]
)
def test_counts_below_one_are_refused_naming_the_flag(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli([flag, "0"])
    assert exit_info.value.code == 2
    assert f"{flag} must be at least 1" in capsys.readouterr().err
