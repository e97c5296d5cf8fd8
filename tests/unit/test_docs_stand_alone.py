"""README.md and docs/*.md stand alone: a reader of the repository has nothing else, so they
name no file outside it and no issue number (they say the thing itself instead)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_OUTSIDE = re.compile(
    r"\bissues? ?#?\d+"  # "issue 23", "issues 8", "issue #4"
    r"|(?<![\w/.#-])#\d+\b"  # a bare "#23" (an upstream "apache/rocketmq#9583" is fine)
    r"|\.\./shared|/work/|shared folder|/tmp/setup",
    re.IGNORECASE,
)


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _references(path: Path) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r} in {line.strip()!r}"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        for match in _OUTSIDE.finditer(line)
    ]


def test_docs_name_no_issue_numbers_or_files_outside_the_repository() -> None:
    found = [ref for path in _docs() for ref in _references(path)]
    assert not found, "say the thing itself instead:\n" + "\n".join(found)


def test_the_stand_alone_check_recognises_what_it_forbids(tmp_path: Path) -> None:
    sample = tmp_path / "docs" / "x.md"
    sample.parent.mkdir()
    lines = [
        "as before issue 23",
        "(see #23)",
        "Issue #4's FIFO topics",
        "`../shared/architecture.md`",
        "/work/shared/conventions.md",
        "the team's shared folder",
    ]
    allowed = "fixed upstream in apache/rocketmq#9583; see [TLS](#tls) and `--max 32`"
    sample.write_text("\n".join([*lines, allowed]) + "\n")
    found = [
        match.group(0)
        for line in sample.read_text().splitlines()
        for match in _OUTSIDE.finditer(line)
    ]
    assert len(found) == len(lines), found
