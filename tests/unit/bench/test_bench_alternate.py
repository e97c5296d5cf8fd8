"""bench.alternate runs the base checkout and this one in turn, round by round."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import alternate


def test_rounds_alternate_base_then_new_and_append_to_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[tuple[Path, str]] = []

    def fake_run(checkout: Path, scenario: str) -> str:
        ran.append((checkout, scenario))
        return f"report of {checkout.name}"

    monkeypatch.setattr(alternate, "_run", fake_run)
    monkeypatch.setattr(alternate, "_load", lambda: "0.1 0.2 0.3")
    out = tmp_path / "ab.txt"
    out.write_text("# header\n")
    base = tmp_path / "base-checkout"
    alternate.main(
        ["--base", str(base), "--scenario", "pop-ack", "--rounds", "2", "--out", str(out)]
    )
    assert ran == [
        (base.resolve(), "pop-ack"),
        (alternate.THIS, "pop-ack"),
        (base.resolve(), "pop-ack"),
        (alternate.THIS, "pop-ack"),
    ]
    text = out.read_text()
    assert text.startswith("# header\n### round 1 base load: 0.1 0.2 0.3\nreport of base-checkout")
    assert text.index("### round 1 new") < text.index("### round 2 base")
    assert text.rstrip().endswith("### end load: 0.1 0.2 0.3")
