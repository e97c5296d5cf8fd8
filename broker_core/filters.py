"""Subscription filters evaluated in the broker: tag expressions (`*`, `A`, `A || B`)."""

from __future__ import annotations

from dataclasses import dataclass

from broker_core.errors import InvalidArgumentError


@dataclass(frozen=True, slots=True)
class TagFilter:
    """Matches messages whose tag is one of `tags`; `tags is None` matches everything."""

    tags: frozenset[str] | None

    def matches(self, tag: str) -> bool:
        return self.tags is None or tag in self.tags

    @property
    def matches_all(self) -> bool:
        return self.tags is None


MATCH_ALL = TagFilter(None)


def parse_tag_expression(expression: str) -> TagFilter:
    """Parse `*`, `TagA` or `TagA || TagB`; empty means `*`."""
    text = expression.strip()
    if text in ("", "*"):
        return MATCH_ALL
    tags = []
    for part in text.split("||"):
        tag = part.strip()
        if not tag or "|" in tag or tag == "*":
            raise InvalidArgumentError(
                f"tag expression {expression!r} is invalid: use '*', 'TagA' or 'TagA || TagB'"
            )
        tags.append(tag)
    return TagFilter(frozenset(tags))
