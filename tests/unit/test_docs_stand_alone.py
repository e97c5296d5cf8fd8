"""README.md and docs/*.md stand alone: a reader of the repository has nothing else, so they
name no file outside it and no issue number (they say the thing itself instead). Code
comments and docstrings name no issue number either: they say why."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.source_tree import hand_written

ROOT = Path(__file__).resolve().parents[2]
_OUTSIDE = re.compile(
    r"\bissues? ?#?\d+"  # "issue 23", "issues 8", "issue #4"
    r"|(?<![\w/.#-])#\d+\b"  # a bare "#23" (an upstream "apache/rocketmq#9583" is fine)
    r"|\.\./shared|/work/|shared folder|/tmp/setup",
    re.IGNORECASE,
)


_ISSUE_NUMBER = re.compile(r"\bissues? ?#?\d+", re.IGNORECASE)
"""In code only "issue 20" and the like: a bare "#23" there is mostly a colour or a count."""
_CODE_SUFFIXES = {".py", ".proto", ".sh", ".toml", ".yaml", ".cfg"}


def _code() -> list[Path]:
    found = [ROOT / "Makefile", ROOT / ".ci" / "run", *hand_written(_CODE_SUFFIXES)]
    return [path for path in found if path != Path(__file__).resolve()]


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _references(path: Path, pattern: re.Pattern[str] = _OUTSIDE) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r} in {line.strip()!r}"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        for match in pattern.finditer(line)
    ]


def test_docs_name_no_issue_numbers_or_files_outside_the_repository() -> None:
    found = [ref for path in _docs() for ref in _references(path)]
    assert not found, "say the thing itself instead:\n" + "\n".join(found)


def test_code_names_no_issue_numbers() -> None:
    code = _code()
    assert ROOT / "broker_core" / "api.py" in code  # the walk reaches the packages
    found = [ref for path in code for ref in _references(path, _ISSUE_NUMBER)]
    assert not found, "say why instead:\n" + "\n".join(found)


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
    code_lines = ["# the server past 1 GB (issue 20)", '"""Issues 8 and 22: side by side."""']
    assert all(_ISSUE_NUMBER.search(line) for line in code_lines)
    assert not _ISSUE_NUMBER.search('color="#999999"  # failover #1, issue_handle()')
