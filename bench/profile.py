"""Sampling the popmq server with py-spy while a scenario loads it, and its hot spots.

py-spy attaches to the server's pid (``--nonblocking``: it reads the process's memory without
pausing it, so the profile costs the server nothing), records collapsed stacks (``--format
raw``), and is stopped with SIGINT when the measured window ends. The summary ranks functions
by *self* share (samples where the function is the innermost frame) and by *total* share
(samples where it is anywhere on the stack), over the samples where the server was not idle.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["HotSpot", "Profile", "PySpy", "summarize"]

# "function (path/to/file.py:123)" -> "function (path/to/file.py)"
_LINE = re.compile(r":\d+\)$")
_STOP_TIMEOUT_S = 30.0
_REPO = Path(__file__).resolve().parents[1]


def _py_spy() -> str | None:
    local = Path(sys.executable).with_name("py-spy")
    return str(local) if local.is_file() else shutil.which("py-spy")


@dataclass(frozen=True, slots=True)
class HotSpot:
    function: str
    self_share: float
    total_share: float


@dataclass(frozen=True, slots=True)
class Profile:
    samples: int
    hot_by_self: list[HotSpot]
    hot_by_total: list[HotSpot]


class PySpy:
    """``py-spy record`` on a pid for the duration of a ``with`` block."""

    def __init__(self, pid: int, out: Path, *, rate: int = 250) -> None:
        self.pid = pid
        self.out = out
        self.rate = rate
        self._proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def available() -> bool:
        return _py_spy() is not None

    def __enter__(self) -> Self:
        binary = _py_spy()
        if binary is None:
            raise RuntimeError("py-spy is not installed (it comes with the bench extra)")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            [
                binary, "record", "--pid", str(self.pid), "--rate", str(self.rate),
                "--format", "raw", "--nonblocking", "--output", str(self.out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(0.3)  # attach before the window starts
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            proc.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _function(frame: str) -> str:
    """``func (/abs/path/file.py:12)`` -> ``func (file path under the repo or site-packages)``."""
    name = _LINE.sub(")", frame.strip())
    for prefix in ("site-packages/", f"{_REPO}/"):
        head, found, tail = name.partition(prefix)
        if found:
            return f"{head.rstrip('(').rstrip()} ({tail}"
    return name


def summarize(raw: Path, *, top: int = 15) -> Profile:
    """Rank functions of a py-spy raw (collapsed) profile by self and total share."""
    self_counts: Counter[str] = Counter()
    total_counts: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_function(f) for f in stack.split(";") if f.strip()]
        if not frames:
            continue
        samples += count
        self_counts[frames[-1]] += count
        for name in set(frames):
            total_counts[name] += count

    def rank(counts: Counter[str]) -> list[HotSpot]:
        return [
            HotSpot(name, self_counts[name] / samples, total_counts[name] / samples)
            for name, _ in counts.most_common(top)
        ]

    if samples == 0:
        return Profile(0, [], [])
    return Profile(samples, rank(self_counts), rank(total_counts))
