"""The console's vendored front end is exactly the released files, with their licences,
and its own pages keep to the CSP (no inline script, no inline handlers or styles)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

import popmq.console

CONSOLE = Path(popmq.console.__file__).resolve().parent
VENDOR = CONSOLE / "static" / "vendor"

PINNED = {
    # htmx 2.0.11 (npm htmx.org, dist/htmx.min.js), Zero-Clause BSD.
    "htmx-2.0.11.min.js": "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717",
    "htmx.LICENSE": "d3d2456f76414f2456104660ebd65aff1c04cd7966b942bdabd63f3cdb316a38",
    # uPlot 1.6.32 (npm uplot, dist/uPlot.iife.min.js and dist/uPlot.min.css), MIT.
    "uPlot-1.6.32.iife.min.js": "19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f",
    "uPlot-1.6.32.min.css": "df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04",
    "uPlot.LICENSE": "8f989229699b4fe2f1a0432d0e9edc338a8a911e250e2d1b01ecd770a5f5b1bd",
}
"""Every vendored file and its sha256: a changed or added file is a deliberate update."""


def test_vendored_files_are_the_pinned_releases_with_their_licences() -> None:
    found = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in VENDOR.iterdir()}
    assert found == PINNED
    assert "Zero-Clause BSD" in (VENDOR / "htmx.LICENSE").read_text()
    assert "The MIT License" in (VENDOR / "uPlot.LICENSE").read_text()


@pytest.mark.parametrize("template", sorted(p.name for p in (CONSOLE / "templates").iterdir()))
def test_templates_have_no_inline_script_handler_or_style(template: str) -> None:
    """The CSP (`default-src 'self'`) would block them: the page would silently break."""
    text = (CONSOLE / "templates" / template).read_text()
    for tag in re.findall(r"<script\b[^>]*>", text):
        assert "src=" in tag, f"inline script in {template}: {tag}"
    assert not re.search(r"\son[a-z]+=", text), f"inline event handler in {template}"
    assert not re.search(r"\sstyle=", text), f"inline style in {template}"
    assert "<style" not in text
    assert "javascript:" not in text
