"""The repository's hand-written files, for tests that check the code as text."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_HAND_WRITTEN = {"node_modules", "gen", "src", "__pycache__", "build", "dist", "data"}
"""Folders not searched (with every dot-folder: .git, .venv, caches): generated code, installed
packages, build output, a local data dir, and src/popmq's symlinks (the folders they point to
are walked themselves)."""


def hand_written(suffixes: set[str]) -> list[Path]:
    """Files under ROOT whose suffix is one of `suffixes`, sorted by folder and name."""
    found: list[Path] = []
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = sorted(
            s for s in subfolders if s not in NOT_HAND_WRITTEN and not s.startswith(".")
        )
        found += [Path(folder) / f for f in sorted(files) if Path(f).suffix in suffixes]
    return found
