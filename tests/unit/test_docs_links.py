"""Every relative link in README.md and docs/*.md leads somewhere: the file exists and, when
the link names a section (`page.md#anchor` or `#anchor`), the page has a heading whose
GitHub anchor is that. Moving a section between pages breaks no reader's link unnoticed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} (.+?)\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to
    hyphens."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match is None:
            continue
        anchor = _anchor(match.group(1))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def _links(page: Path) -> list[tuple[int, str]]:
    links: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            links.extend((number, target) for target in _LINK.findall(line))
    return links


def test_anchor_follows_githubs_rules() -> None:
    assert _anchor("When etcd is down") == "when-etcd-is-down"
    assert _anchor("BrokerService: the broker API over the wire") == (
        "brokerservice-the-broker-api-over-the-wire"
    )
    anchor = _anchor("Server settings (`ServerConfig.clients`)")
    assert anchor == "server-settings-serverconfigclients"


def test_every_relative_link_leads_to_a_page_and_section() -> None:
    anchors = {page: _anchors(page) for page in _pages()}
    broken: list[str] = []
    for page in _pages():
        for number, target in _links(page):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            path, _, section = target.partition("#")
            linked = page if not path else (page.parent / path).resolve()
            where = f"{page.relative_to(ROOT)}:{number}: {target}"
            if not linked.exists():
                broken.append(f"{where} (no such file)")
            elif section and linked.suffix == ".md":
                if section not in anchors.get(linked, _anchors(linked)):
                    broken.append(f"{where} (no such section in {linked.name})")
    assert not broken, "broken links:\n" + "\n".join(broken)
