"""Tag expressions: `*`, `TagA`, `TagA || TagB`; anything else is refused."""

from __future__ import annotations

import pytest

from popmq.broker_core.errors import InvalidArgumentError
from popmq.broker_core.filters import parse_tag_expression


@pytest.mark.parametrize("expression", ["*", "", "   ", " * "])
def test_star_or_empty_expression_matches_every_tag(expression: str) -> None:
    tag_filter = parse_tag_expression(expression)
    assert tag_filter.matches_all
    assert all(tag_filter.matches(tag) for tag in ["", "A", "B", "anything"])


def test_single_tag_matches_only_that_tag() -> None:
    tag_filter = parse_tag_expression("TagA")
    assert not tag_filter.matches_all
    assert tag_filter.matches("TagA")
    assert not tag_filter.matches("TagB")
    assert not tag_filter.matches("taga")  # tags are case-sensitive
    assert not tag_filter.matches("")  # an untagged message matches no tag filter


@pytest.mark.parametrize("expression", ["A || B", "A||B", "  A ||   B  ", "B || A || A"])
def test_alternatives_match_any_listed_tag(expression: str) -> None:
    tag_filter = parse_tag_expression(expression)
    assert tag_filter.matches("A")
    assert tag_filter.matches("B")
    assert not tag_filter.matches("C")
    assert not tag_filter.matches("A || B")


@pytest.mark.parametrize("expression", ["A ||", "||", "|| A", "A || || B", "A | B", "A || *", "|"])
def test_malformed_expression_is_refused_naming_the_allowed_forms(expression: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        parse_tag_expression(expression)
    assert str(info.value) == (
        f"tag expression {expression!r} is invalid: use '*', 'TagA' or 'TagA || TagB'"
    )


def test_a_tag_expression_longer_than_4096_characters_is_refused_before_it_is_split() -> None:
    parse_tag_expression(" || ".join(["t"] * 819))  # 4,091 characters
    with pytest.raises(InvalidArgumentError) as info:
        parse_tag_expression(" || ".join(["t"] * 200_000))
    assert str(info.value) == "tag expression is 999996 characters long: at most 4096 are allowed"
