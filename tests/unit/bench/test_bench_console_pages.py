"""bench.console_pages runs and prints its table (no timing is asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_script_times_the_topics_list_and_prints_its_table() -> None:
    command = [sys.executable, "-m", "bench.console_pages", "--topics", "120", "--rounds", "2"]
    result = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "topics list over 120 topics (2 rounds)" in result.stdout
    for row in ("first page, cold", "last page", "search (10 match)", "htmx table, search"):
        assert f"| {row} |" in result.stdout
