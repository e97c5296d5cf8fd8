"""bench.record_view_cost runs, and its two converter paths build the same messages.

Its copy of the converters from before MessageRecord must answer exactly what the proxy's
converters answer from the view (the script checks this before it times anything), or the
comparison it prints would time different work. No timing is asserted. It runs on the Python
sources (the old paths duck-type the proto, which compiled modules refuse), in a process of
its own where the hot path is compiled.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from popmq import _compiled

ROOT = Path(__file__).resolve().parents[3]


def test_the_script_prints_its_table_after_checking_both_paths_agree() -> None:
    command = [sys.executable, "-m", "bench.record_view_cost", "--number", "3", "--repeat", "1"]
    env = {**os.environ, _compiled.PURE_ENV: "1"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    table = result.stdout
    assert "| v1 ReceivedMessage (convert.fill_received_message) |" in table
    assert "| v2 Message (rocketmq convert.v2_message) |" in table
    assert "v2: view vs old converter on the proto" in table
