"""No hand-written Python file grows past 1,000 lines: past that a module holds more than
one mechanism and should be split along them."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 1000
_SKIPPED = {"node_modules", "gen", "src", "__pycache__", "build", "dist", "data"}
"""Generated code, installed packages, build output, a local data dir and src/popmq's
symlinks (the folders they point to are walked themselves); dot-folders are skipped too."""


def _python_files() -> list[Path]:
    found: list[Path] = []
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [s for s in subfolders if s not in _SKIPPED and not s.startswith(".")]
        found += [Path(folder) / f for f in files if f.endswith(".py")]
    return found


def test_no_python_file_is_over_1000_lines() -> None:
    files = _python_files()
    assert ROOT / "broker_core" / "broker.py" in files  # the walk reaches the packages
    long = sorted(
        f"{path.relative_to(ROOT)}: {count} lines"
        for path in files
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    )
    assert not long, f"split these along their mechanisms (at most {MAX_LINES} lines):\n" + (
        "\n".join(long)
    )
