"""No hand-written Python file grows past 1,000 lines: past that a module holds more than
one mechanism and should be split along them."""

from __future__ import annotations

from tests.support.source_tree import ROOT, hand_written

MAX_LINES = 1000


def test_no_python_file_is_over_1000_lines() -> None:
    files = hand_written({".py"})
    assert ROOT / "broker_core" / "broker.py" in files  # the walk reaches the packages
    long = sorted(
        f"{path.relative_to(ROOT)}: {count} lines"
        for path in files
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    )
    assert not long, f"split these along their mechanisms (at most {MAX_LINES} lines):\n" + (
        "\n".join(long)
    )
