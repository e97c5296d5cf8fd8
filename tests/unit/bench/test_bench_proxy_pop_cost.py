"""bench.proxy_pop_cost runs a cluster, counts the proxy's window (receives and acks, or
sends) and says a message's count.

A real etcd, broker and proxy (the proxy under callgrind): a short window, so the script
stays runnable; no count is asserted, only that one was taken over the window's messages.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _counted(command: list[str]) -> re.Match[str]:
    """Run the script; its count line (instructions, messages)."""
    result = subprocess.run(
        command, cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = re.search(r"proxy: ([\d,]+) instructions over (\d+) messages", result.stdout)
    assert found is not None, result.stdout
    return found


@pytest.mark.timeout(600)  # ~20 s here; a callgrind proxy is slow with both cores busy
def test_the_script_counts_the_proxys_instructions_over_the_windows_messages(
    tmp_path: Path,
) -> None:
    profile = tmp_path / "window.out"
    command = [
        sys.executable, "-m", "bench.proxy_pop_cost", "--batches", "3", "--warmup", "1",
        "--consumers", "2", "--profile", str(profile),
    ]  # fmt: skip
    found = _counted(command)
    assert int(found.group(2)) == 96  # three receives of 32, shared by two consumers
    assert int(found.group(1).replace(",", "")) > 0
    assert profile.read_text().startswith("# callgrind format")


@pytest.mark.timeout(600)
def test_the_send_phase_counts_the_proxys_instructions_over_the_messages_sent() -> None:
    command = [
        sys.executable, "-m", "bench.proxy_pop_cost", "--phase", "send", "--send-batch", "2",
        "--consumers", "2", "--batches", "3", "--warmup", "1",
    ]  # fmt: skip
    found = _counted(command)
    assert int(found.group(2)) == 6  # three sends of two, shared by two producers
    assert int(found.group(1).replace(",", "")) > 0
