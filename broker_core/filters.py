"""Subscription filters evaluated in the broker: tag expressions (`*`, `A`, `A || B`) and
SQL92 property expressions (broker_core/sql_filter.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from popmq.broker_core.errors import InvalidArgumentError
from popmq.broker_core.sql_filter import SqlFilter, parse_sql_filter

FILTER_TYPES = ("tag", "sql")


class Filterable(Protocol):
    """What a filter reads of a message: the stored record on the pop path, a MessageRecord
    after a pull."""

    @property
    def tag(self) -> str: ...

    @property
    def properties(self) -> Mapping[str, str]: ...


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


MAX_TAG_EXPRESSION_LENGTH = 4096
"""As a SQL filter's (sql_filter.MAX_EXPRESSION_LENGTH): checked before the expression is split."""


def parse_tag_expression(expression: str) -> TagFilter:
    """Parse `*`, `TagA` or `TagA || TagB`; empty means `*`."""
    if len(expression) > MAX_TAG_EXPRESSION_LENGTH:
        raise InvalidArgumentError(
            f"tag expression is {len(expression)} characters long: at most "
            f"{MAX_TAG_EXPRESSION_LENGTH} are allowed",
            field="filter_expression",
            value=expression,
            allowed=f"at most {MAX_TAG_EXPRESSION_LENGTH} characters",
        )
    text = expression.strip()
    if text in ("", "*"):
        return MATCH_ALL
    tags = []
    for part in text.split("||"):
        tag = part.strip()
        if not tag or "|" in tag or tag == "*":
            raise InvalidArgumentError(
                f"tag expression {expression!r} is invalid: use '*', 'TagA' or 'TagA || TagB'",
                field="filter_expression",
                value=expression,
                allowed="'*', 'TagA' or 'TagA || TagB'",
            )
        tags.append(tag)
    return TagFilter(frozenset(tags))


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """A group's subscription filter applied to stored records."""

    tag: TagFilter = MATCH_ALL
    sql: SqlFilter | None = None

    @property
    def matches_all(self) -> bool:
        return self.sql is None and self.tag.matches_all

    def accepts(self, record: Filterable) -> bool:
        if self.sql is not None:
            return self.sql.matches(record.properties, record.tag)
        return self.tag.matches(record.tag)


def parse_filter(expression: str, filter_type: str = "tag") -> RecordFilter:
    """A tag expression (filter_type "tag") or a SQL92 expression ("sql")."""
    if filter_type == "tag":
        return RecordFilter(parse_tag_expression(expression))
    if filter_type == "sql":
        return RecordFilter(sql=parse_sql_filter(expression))
    raise InvalidArgumentError(
        f"filter type {filter_type!r} is not supported: use one of {', '.join(FILTER_TYPES)}",
        field="filter_type",
        value=filter_type,
        allowed=", ".join(FILTER_TYPES),
    )
