"""The full-disk scenario of tests/chaos/disk_full.py against the real `popmq serve`.

Sends stop before the disk is full while acks, nacks, new topics and new groups keep
working; after space is freed, sends resume within seconds without a restart; SIGTERM on a
full disk exits 0; a restart on a full disk serves read-only; nothing acknowledged is lost.
Needs root to mount a tmpfs (as on our CI machines); skipped elsewhere with the reason.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.chaos.disk_full import MountError, run


@pytest.mark.slow
def test_a_full_disk_recovers_by_itself_and_loses_nothing_acknowledged(tmp_path: Path) -> None:
    try:
        result = asyncio.run(run(tmp_path, disk_mib=64, filler_mib=40, free_mib=10))
    except MountError as exc:
        pytest.skip(str(exc))
    report = result.report()
    assert result.acknowledged > 5, report
    assert "sends need 8.0 MiB to stay free" in result.full_error, report
    assert result.while_full == {
        "ack": "ok",
        "nack": "ok",
        "create topic": "ok",
        "new group pop": "ok",
    }, report
    assert result.resume_after_free_s is not None and result.resume_after_free_s < 5, report
    assert (result.sigterm_exit_code, result.sigterm_traceback) == (0, False), report
    assert "opened READ-ONLY: the disk is full" in result.restart_read_only_line, report
    assert result.restart_pop == "ok", report
    assert result.restart_send.startswith("FAILED ResourceExhaustedError"), report
    assert result.resume_after_restart_s is not None, report
    assert result.resume_after_restart_s < 5, report
    assert result.lost == 0, report
    assert result.violations == [], report
