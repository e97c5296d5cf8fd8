"""Benchmarks stay runnable: each scenario in --quick mode (asserts nothing about speed)."""

from __future__ import annotations

import pytest

from bench.__main__ import SCENARIOS, main


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_bench_scenario_runs_in_quick_mode(
    scenario: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--scenario", scenario, "--quick"]) == 0
    output = capsys.readouterr().out
    assert f"## {scenario}" in output
    assert "|---" in output
