"""A server process raises its soft limit on open files to the hard one at start, and keeps
the limit it has when that is already the hard one or when the system refuses."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest

from popmq.runtime import file_limit

_REPORT = """
import json, logging, resource, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
from popmq.runtime.file_limit import raise_open_file_limit
changed = raise_open_file_limit()
print(json.dumps([changed, resource.getrlimit(resource.RLIMIT_NOFILE)]))
"""


def _run(soft: int, hard: int) -> tuple[list[int], list[int], str]:
    """(raise_open_file_limit's answer, the limits after it, the log) in a process started
    with these limits."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    done = subprocess.run(
        [sys.executable, "-c", _REPORT],
        preexec_fn=limit,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    changed, after = json.loads(done.stdout)
    return changed, after, done.stderr


_, _HARD = resource.getrlimit(resource.RLIMIT_NOFILE)
needs_room = pytest.mark.skipif(
    _HARD == resource.RLIM_INFINITY or _HARD < 512,
    reason=f"the hard limit on open files here ({_HARD}) leaves no room below it to test",
)


@needs_room
def test_a_low_soft_limit_is_raised_to_the_hard_one_and_logged() -> None:
    changed, after, logged = _run(256, _HARD)
    assert changed == [256, _HARD]
    assert after == [_HARD, _HARD]
    assert f"raised the open-file limit from 256 to {_HARD}" in logged


@needs_room
def test_a_soft_limit_at_the_hard_one_is_left_alone_without_a_line() -> None:
    changed, after, logged = _run(300, 300)
    assert changed == [300, 300]
    assert after == [300, 300]
    assert "open-file limit" not in logged


def test_a_refused_raise_keeps_the_limit_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(which: int, limits: tuple[int, int]) -> None:
        raise ValueError("not allowed to raise the current limit")

    monkeypatch.setattr(file_limit.resource, "getrlimit", lambda which: (256, 4096))
    monkeypatch.setattr(file_limit.resource, "setrlimit", refuse)
    with caplog.at_level("WARNING", logger=file_limit.__name__):
        assert file_limit.raise_open_file_limit() == (256, 256)
    assert "open files are limited to 256 and could not be raised to 4096" in caplog.text
