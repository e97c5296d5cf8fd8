"""docs/operations.md's settings table lists every setting `popmq serve` reads, with its
default, so a setting added to a config dataclass cannot go undocumented."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from popmq.runtime.settings import settings_table

ROOT = Path(__file__).resolve().parents[2]
_ROW = re.compile(r"^\| `([a-z_]+\.[a-z_]+)` \| ([^|]+) \|")


def _table() -> dict[str, str]:
    """The table's rows: key -> default cell."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text[text.index("## Configuring") : text.index("\n## ", text.index("## Configuring"))]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        match = _ROW.match(line)
        if match:
            assert match.group(1) not in rows, f"{match.group(1)} is listed twice"
            rows[match.group(1)] = match.group(2).strip()
    return rows


def _documented(cell: str) -> Any:
    """The cell's first `code` span read as a TOML value; None when the cell says 'unset'."""
    if cell.startswith("unset"):
        return None
    code = re.match(r"`([^`]+)`", cell)
    assert code, f"default {cell!r} does not start with a `value`"
    return tomllib.loads(f"v = {code.group(1)}")["v"]


def test_settings_table_lists_every_setting_and_nothing_else() -> None:
    rows, settings = _table(), settings_table()
    missing = [name for name in settings if name not in rows]
    unknown = [name for name in rows if name not in settings]
    assert not missing, f"add these to docs/operations.md's settings table: {missing}"
    assert not unknown, f"docs/operations.md lists settings that do not exist: {unknown}"


def test_settings_table_shows_each_default() -> None:
    rows = _table()
    for name, setting in settings_table().items():
        cell = rows[name]
        default = setting.default
        if isinstance(default, tuple) and "..." in cell:
            continue  # a long list, abbreviated
        if isinstance(default, tuple):
            default = list(default)
        elif isinstance(default, Path):
            default = str(default)
        assert _documented(cell) == default, f"{name}: the table says {cell}, the code {default!r}"
