"""SQL92 property filters: grammar, JMS three-valued semantics, error positions, limits."""

from __future__ import annotations

import operator
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pytest

from popmq.broker_core.errors import InvalidArgumentError
from popmq.broker_core.sql_filter import (
    MAX_EXPRESSION_LENGTH,
    MAX_NESTING_DEPTH,
    And,
    Between,
    BooleanComparison,
    BooleanLiteral,
    CompareOp,
    Constant,
    In,
    IsNull,
    MatchOp,
    Not,
    NumberComparison,
    NumberLiteral,
    Or,
    Property,
    SqlFilter,
    StringComparison,
    StringLiteral,
    StringMatch,
    parse_sql_filter,
)

PROPERTIES = {
    "region": "eu",
    "amount": "150",
    "price": "9.5",
    "neg": "-3",
    "vip": "TRUE",
    "word": "abc",
    "name": "O'Brien",
    "empty": "",
}


def truth(expression: str, properties: Mapping[str, str] = PROPERTIES, tag: str = "") -> str:
    """The three-valued result through the public API: NOT (x) separates FALSE from UNKNOWN."""
    positive = parse_sql_filter(expression).matches(properties, tag)
    negative = parse_sql_filter(f"NOT ({expression})").matches(properties, tag)
    assert not (positive and negative), expression
    return "TRUE" if positive else "FALSE" if negative else "UNKNOWN"


def error_message(expression: str) -> str:
    with pytest.raises(InvalidArgumentError) as info:
        parse_sql_filter(expression)
    return str(info.value)


# -- a filter with AND, OR, IS NOT NULL and a comparison -----------------------------------

EXAMPLE = "region = 'eu' AND (amount > 100 OR vip IS NOT NULL)"


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        ({"region": "eu", "amount": "150"}, True),
        ({"region": "eu", "amount": "50"}, False),
        ({"region": "eu", "amount": "50", "vip": "1"}, True),
        ({"region": "eu", "vip": ""}, True),
        ({"region": "eu"}, False),
        ({"region": "eu", "amount": "lots"}, False),  # UNKNOWN OR FALSE
        ({"region": "eu", "amount": "lots", "vip": "x"}, True),  # UNKNOWN OR TRUE
        ({"region": "us", "amount": "150"}, False),
        ({"region": "EU", "amount": "150"}, False),
        ({"amount": "150"}, False),
        ({}, False),
    ],
)
def test_example_filter_matches_eu_messages_with_big_amount_or_vip(
    properties: dict[str, str], expected: bool
) -> None:
    assert parse_sql_filter(EXAMPLE).matches(properties) is expected


def test_parsed_filter_keeps_its_text_and_compares_by_value() -> None:
    sql_filter = parse_sql_filter(EXAMPLE)
    assert isinstance(sql_filter, SqlFilter)
    assert sql_filter.expression == EXAMPLE
    assert sql_filter == parse_sql_filter(EXAMPLE)
    assert hash(sql_filter) == hash(parse_sql_filter(EXAMPLE))
    assert sql_filter != parse_sql_filter("region = 'eu'")


# -- every operator -------------------------------------------------------------------------

OPERATOR_CASES = [
    # string equality: exact and case-sensitive; either side may be the literal
    ("region = 'eu'", "TRUE"),
    ("region = 'EU'", "FALSE"),
    ("'eu' = region", "TRUE"),
    ("region <> 'eu'", "FALSE"),
    ("region <> 'us'", "TRUE"),
    ("region != 'us'", "TRUE"),
    ("region != 'eu'", "FALSE"),
    ("region = word", "FALSE"),
    ("region = region", "TRUE"),
    ("empty = ''", "TRUE"),
    ("'a' = 'a'", "TRUE"),
    ("'a' <> 'a'", "FALSE"),
    ("amount = '150'", "TRUE"),
    ("amount = '150.0'", "FALSE"),  # a string literal compares text, not numbers
    ("missing = 'eu'", "UNKNOWN"),
    ("missing <> 'eu'", "UNKNOWN"),
    ("region = missing", "UNKNOWN"),
    # numbers: the property is converted
    ("amount = 150", "TRUE"),
    ("amount = 150.0", "TRUE"),
    ("amount <> 150", "FALSE"),
    ("amount != 151", "TRUE"),
    ("amount > 100", "TRUE"),
    ("amount > 150", "FALSE"),
    ("amount >= 150", "TRUE"),
    ("amount >= 151", "FALSE"),
    ("amount < 200", "TRUE"),
    ("amount < 150", "FALSE"),
    ("amount <= 150", "TRUE"),
    ("amount <= 149", "FALSE"),
    ("100 < amount", "TRUE"),
    ("200 <= amount", "FALSE"),
    ("price > 9", "TRUE"),
    ("price < 9.51", "TRUE"),
    ("price = 9.5", "TRUE"),
    ("neg < -2", "TRUE"),
    ("neg = - 3", "TRUE"),
    ("neg > -3.5", "TRUE"),
    ("amount > +100", "TRUE"),
    ("amount > 1e2", "TRUE"),
    ("amount < 1.5E2", "FALSE"),
    ("amount = .15e3", "TRUE"),
    ("amount = 150.", "TRUE"),
    ("amount > neg", "TRUE"),  # two properties order as numbers
    ("neg >= amount", "FALSE"),
    ("1 < 2", "TRUE"),
    ("2 <= 1", "FALSE"),
    ("0 = -0", "TRUE"),
    # booleans: compared with 'true'/'false', any case
    ("vip = TRUE", "TRUE"),
    ("vip = true", "TRUE"),
    ("TRUE = vip", "TRUE"),
    ("vip = FALSE", "FALSE"),
    ("vip <> FALSE", "TRUE"),
    ("vip != TRUE", "FALSE"),
    ("word = TRUE", "FALSE"),
    ("word = FALSE", "FALSE"),
    ("missing = TRUE", "UNKNOWN"),
    ("vip = 'TRUE'", "TRUE"),
    ("vip = 'true'", "FALSE"),  # a string literal stays a case-sensitive string comparison
    ("TRUE = TRUE", "TRUE"),
    ("TRUE <> FALSE", "TRUE"),
    ("TRUE", "TRUE"),
    ("FALSE", "FALSE"),
    # BETWEEN: inclusive, numeric
    ("amount BETWEEN 100 AND 200", "TRUE"),
    ("amount BETWEEN 150 AND 150", "TRUE"),
    ("amount BETWEEN 151 AND 200", "FALSE"),
    ("amount BETWEEN 200 AND 100", "FALSE"),
    ("amount NOT BETWEEN 100 AND 200", "FALSE"),
    ("amount NOT BETWEEN 151 AND 200", "TRUE"),
    ("price BETWEEN 9 AND 10", "TRUE"),
    ("neg BETWEEN -5 AND -1", "TRUE"),
    ("amount BETWEEN neg AND 200", "TRUE"),
    ("amount BETWEEN word AND 200", "UNKNOWN"),
    ("amount BETWEEN word AND 100", "FALSE"),  # x >= UNKNOWN AND x <= 100: FALSE
    ("word BETWEEN 1 AND 2", "UNKNOWN"),
    ("word NOT BETWEEN 1 AND 2", "UNKNOWN"),
    ("missing BETWEEN 1 AND 2", "UNKNOWN"),
    # IN
    ("region IN ('eu', 'us')", "TRUE"),
    ("region IN ('us')", "FALSE"),
    ("region IN ('EU')", "FALSE"),
    ("region NOT IN ('us', 'ap')", "TRUE"),
    ("region NOT IN ('eu')", "FALSE"),
    ("region IN ('eu', 'eu')", "TRUE"),
    ("'eu' IN ('eu')", "TRUE"),
    ("amount IN ('150')", "TRUE"),
    ("name IN ('O''Brien')", "TRUE"),
    ("empty IN ('')", "TRUE"),
    ("missing IN ('eu')", "UNKNOWN"),
    ("missing NOT IN ('eu')", "UNKNOWN"),
    # IS NULL: only a missing property is NULL
    ("missing IS NULL", "TRUE"),
    ("missing IS NOT NULL", "FALSE"),
    ("region IS NULL", "FALSE"),
    ("region IS NOT NULL", "TRUE"),
    ("empty IS NULL", "FALSE"),
    ("'x' IS NULL", "FALSE"),
    # RocketMQ 5's string operators
    ("word CONTAINS 'b'", "TRUE"),
    ("word CONTAINS 'B'", "FALSE"),
    ("word CONTAINS ''", "TRUE"),
    ("word NOT CONTAINS 'z'", "TRUE"),
    ("word NOT CONTAINS 'a'", "FALSE"),
    ("word STARTSWITH 'ab'", "TRUE"),
    ("word STARTSWITH 'bc'", "FALSE"),
    ("word NOT STARTSWITH 'bc'", "TRUE"),
    ("word ENDSWITH 'bc'", "TRUE"),
    ("word ENDSWITH 'ab'", "FALSE"),
    ("word NOT ENDSWITH 'bc'", "FALSE"),
    ("name CONTAINS ''''", "TRUE"),
    ("'abc' STARTSWITH 'a'", "TRUE"),
    ("missing CONTAINS 'a'", "UNKNOWN"),
    ("missing NOT STARTSWITH 'a'", "UNKNOWN"),
    ("missing ENDSWITH 'a'", "UNKNOWN"),
]


@pytest.mark.parametrize(("expression", "expected"), OPERATOR_CASES)
def test_operator_yields_the_jms_truth_value(expression: str, expected: str) -> None:
    assert truth(expression) == expected


# -- three-valued logic ---------------------------------------------------------------------

ATOM = {"TRUE": "region = 'eu'", "FALSE": "region = 'us'", "UNKNOWN": "missing = 'x'"}
KLEENE_AND = {
    ("TRUE", "TRUE"): "TRUE",
    ("TRUE", "FALSE"): "FALSE",
    ("TRUE", "UNKNOWN"): "UNKNOWN",
    ("FALSE", "FALSE"): "FALSE",
    ("FALSE", "UNKNOWN"): "FALSE",
    ("UNKNOWN", "UNKNOWN"): "UNKNOWN",
}
KLEENE_OR = {
    ("TRUE", "TRUE"): "TRUE",
    ("TRUE", "FALSE"): "TRUE",
    ("TRUE", "UNKNOWN"): "TRUE",
    ("FALSE", "FALSE"): "FALSE",
    ("FALSE", "UNKNOWN"): "UNKNOWN",
    ("UNKNOWN", "UNKNOWN"): "UNKNOWN",
}


@pytest.mark.parametrize(("pair", "expected"), sorted(KLEENE_AND.items()))
def test_and_follows_kleene_logic_in_either_order(pair: tuple[str, str], expected: str) -> None:
    left, right = pair
    assert truth(f"{ATOM[left]} AND {ATOM[right]}") == expected
    assert truth(f"{ATOM[right]} AND {ATOM[left]}") == expected


@pytest.mark.parametrize(("pair", "expected"), sorted(KLEENE_OR.items()))
def test_or_follows_kleene_logic_in_either_order(pair: tuple[str, str], expected: str) -> None:
    left, right = pair
    assert truth(f"{ATOM[left]} OR {ATOM[right]}") == expected
    assert truth(f"{ATOM[right]} OR {ATOM[left]}") == expected


@pytest.mark.parametrize(
    ("value", "expected"), [("TRUE", "FALSE"), ("FALSE", "TRUE"), ("UNKNOWN", "UNKNOWN")]
)
def test_not_inverts_true_and_false_and_keeps_unknown(value: str, expected: str) -> None:
    assert truth(f"NOT {ATOM[value]}") == expected
    assert truth(f"NOT NOT {ATOM[value]}") == value


def test_matches_is_true_only_for_true() -> None:
    unknown = parse_sql_filter("missing > 1")
    assert not unknown.matches({})
    assert not parse_sql_filter("NOT (missing > 1)").matches({})
    assert parse_sql_filter("missing > 1 OR TRUE").matches({})
    assert not parse_sql_filter("missing > 1 AND TRUE").matches({})


# -- precedence: NOT > AND > OR -------------------------------------------------------------

A = NumberComparison(CompareOp.EQ, Property("a"), NumberLiteral(1))
B = NumberComparison(CompareOp.EQ, Property("b"), NumberLiteral(1))
C = NumberComparison(CompareOp.EQ, Property("c"), NumberLiteral(1))


@pytest.mark.parametrize(
    ("expression", "tree"),
    [
        ("a = 1 OR b = 1 AND c = 1", Or((A, And((B, C))))),
        ("a = 1 AND b = 1 OR c = 1", Or((And((A, B)), C))),
        ("(a = 1 OR b = 1) AND c = 1", And((Or((A, B)), C))),
        ("NOT a = 1 AND b = 1", And((Not(A), B))),
        ("NOT a = 1 OR b = 1", Or((Not(A), B))),
        ("NOT (a = 1 OR b = 1)", Not(Or((A, B)))),
        ("NOT NOT a = 1", Not(Not(A))),
        ("a = 1 AND b = 1 AND c = 1", And((A, B, C))),
        ("a = 1 AND (b = 1 AND c = 1)", And((A, B, C))),
        ("(a = 1 OR b = 1) OR c = 1", Or((A, B, C))),
        ("((a = 1))", A),
        ("a = 1 AND b BETWEEN 1 AND 2 AND c = 1",
         And((A, Between(Property("b"), NumberLiteral(1), NumberLiteral(2)), C))),
    ],
)  # fmt: skip
def test_parser_builds_the_tree_precedence_implies(expression: str, tree: object) -> None:
    assert parse_sql_filter(expression).condition == tree


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # each differs from what the other grouping would give
        ("region = 'eu' OR region = 'us' AND region = 'us'", "TRUE"),
        ("(region = 'eu' OR region = 'us') AND region = 'us'", "FALSE"),
        ("NOT region = 'us' AND region = 'us'", "FALSE"),
        ("NOT (region = 'us' AND region = 'us')", "TRUE"),
        ("NOT region = 'eu' OR region = 'eu'", "TRUE"),
        ("NOT (region = 'eu' OR region = 'eu')", "FALSE"),
    ],
)
def test_precedence_changes_results_as_sql_does(expression: str, expected: str) -> None:
    assert truth(expression) == expected


@pytest.mark.parametrize(
    ("expression", "tree"),
    [
        ("region = 'eu'", StringComparison(CompareOp.EQ, Property("region"), StringLiteral("eu"))),
        ("a != 'x'", StringComparison(CompareOp.NE, Property("a"), StringLiteral("x"))),
        ("a >= -2.5", NumberComparison(CompareOp.GE, Property("a"), NumberLiteral(-2.5))),
        ("flag = FALSE", BooleanComparison(CompareOp.EQ, Property("flag"), BooleanLiteral(False))),
        ("a NOT IN ('x', 'y')", Not(In(Property("a"), frozenset({"x", "y"})))),
        ("a IS NOT NULL", Not(IsNull(Property("a")))),
        ("a NOT BETWEEN 1 AND 2", Not(Between(Property("a"), NumberLiteral(1), NumberLiteral(2)))),
        ("a ENDSWITH 'z'", StringMatch(MatchOp.ENDSWITH, Property("a"), "z")),
        ("a.b_c9 NOT CONTAINS 'z'", Not(StringMatch(MatchOp.CONTAINS, Property("a.b_c9"), "z"))),
        ("FALSE", Constant(False)),
    ],
)  # fmt: skip
def test_each_form_parses_to_its_node(expression: str, tree: object) -> None:
    assert parse_sql_filter(expression).condition == tree


# -- numeric conversion ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "number"),
    [
        ("150", 150),
        ("+150", 150),
        ("-7", -7),
        ("007", 7),
        ("2.5", 2.5),
        ("-0.5", -0.5),
        (".5", 0.5),
        ("5.", 5),
        ("1e3", 1000),
        ("1.5E-1", 0.15),
    ],
)
def test_numeric_property_text_converts(value: str, number: float) -> None:
    assert truth(f"x = {number!r}", {"x": value}) == "TRUE"
    assert truth(f"x <> {number!r}", {"x": value}) == "FALSE"
    assert truth(f"x BETWEEN {number!r} AND {number!r}", {"x": value}) == "TRUE"
    assert truth(f"x > {number!r}", {"x": value}) == "FALSE"


def test_property_longer_than_pythons_int_parsing_limit_is_still_a_number() -> None:
    huge = "9" * 5000
    assert truth("x > 100000000000000000000", {"x": huge}) == "TRUE"
    assert truth("x < 0", {"x": "-" + huge}) == "TRUE"


@pytest.mark.parametrize(
    "value",
    ["", " ", "abc", "12abc", "1_000", " 7", "7 ", "1,5", "0x10", "NaN", "Infinity", "inf",
     "--1", "1e", "e3", ".", "+", "\u0663", "\uff11"],
)  # fmt: skip
def test_non_numeric_property_makes_numeric_comparisons_unknown(value: str) -> None:
    for expression in ["x = 1", "x <> 1", "x < 1", "x >= 1", "x BETWEEN 0 AND 10", "1 < x"]:
        assert truth(expression, {"x": value}) == "UNKNOWN", expression


def test_int_and_float_compare_exactly() -> None:
    assert truth("x = 9007199254740993", {"x": "9007199254740993"}) == "TRUE"
    assert truth("x > 9007199254740992", {"x": "9007199254740993"}) == "TRUE"
    assert truth("x = 0.1", {"x": "0.10"}) == "TRUE"


# -- quotes, whitespace, keywords, identifiers ----------------------------------------------


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("x = 'O''Brien'", "O'Brien"),
        ("x = ''''", "'"),
        ("x = ''", ""),
        ("x = 'a''''b'", "a''b"),
        ("x = 'AND OR NOT ( ) , = < >'", "AND OR NOT ( ) , = < >"),
        ("x = 'tab\there'", "tab\there"),
        ("x = 'naïve 日本'", "naïve 日本"),
        ("x = '\"'", '"'),
    ],
)
def test_string_literals_decode_doubled_quotes(expression: str, value: str) -> None:
    assert parse_sql_filter(expression).matches({"x": value})
    assert not parse_sql_filter(expression).matches({"x": value + " "})


@pytest.mark.parametrize(
    "expression",
    [
        "region = 'eu' and amount between 100 And 200",
        "Region_Missing is null AND vip is Not null",
        "region in ('eu') oR FaLsE",
        "not region not in ('eu')",
        "word contains 'b' AND word StartsWith 'a' AND word endswith 'c'",
        "vip = true AND NOT vip = false",
        "region\n=\t'eu'\r\nAND amount>100",
        "region='eu'AND(amount>100)",
    ],
)
def test_keywords_are_case_insensitive_and_whitespace_is_free(expression: str) -> None:
    assert truth(expression) == "TRUE"


def test_identifiers_are_case_sensitive() -> None:
    assert truth("Region = 'eu'", {"region": "eu"}) == "UNKNOWN"
    assert truth("region = 'eu'", {"Region": "eu", "region": "us"}) == "FALSE"


@pytest.mark.parametrize("name", ["a", "_a", "a.b.c", "a1", "a_1.x9", "é", "Ünïcode", "x."])
def test_identifiers_take_letters_digits_underscore_and_dot(name: str) -> None:
    assert parse_sql_filter(f"{name} = 'v'").matches({name: "v"})


# -- TAGS -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "properties", "tag", "expected"),
    [
        ("TAGS = 'TagA'", {}, "TagA", "TRUE"),
        ("TAGS = 'TagA'", {}, "TagB", "FALSE"),
        ("TAGS IN ('TagA', 'TagB')", {}, "TagB", "TRUE"),
        ("TAGS = 'TagA'", {}, "", "UNKNOWN"),
        ("TAGS IS NULL", {}, "", "TRUE"),
        ("TAGS IS NULL", {}, "TagA", "FALSE"),
        ("TAGS STARTSWITH 'Tag'", {}, "TagA", "TRUE"),
        ("TAGS = 'X'", {"TAGS": "X"}, "TagA", "TRUE"),  # a real property named TAGS wins
        ("TAGS = 'TagA'", {"TAGS": "X"}, "TagA", "FALSE"),
        ("TAGS IS NULL", {"TAGS": ""}, "TagA", "FALSE"),
        ("tags = 'TagA'", {}, "TagA", "UNKNOWN"),  # identifiers are case-sensitive
        ("Tags IS NULL", {}, "TagA", "TRUE"),
        ("TAGS = 'TagA' AND amount > 100", {"amount": "150"}, "TagA", "TRUE"),
    ],
)
def test_tags_refers_to_the_message_tag_unless_a_property_is_named_so(
    expression: str, properties: dict[str, str], tag: str, expected: str
) -> None:
    assert truth(expression, properties, tag) == expected


def test_matches_defaults_to_an_untagged_message() -> None:
    assert parse_sql_filter("TAGS IS NULL").matches({})
    assert not parse_sql_filter("TAGS = 'a'").matches({})


# -- malformed expressions: every class names what was expected and the 1-based position ----

MALFORMED = [
    # missing operands
    ("region = 'eu' AND amount >",
     "expected a value after '>', found the end of the expression at position 27"),
    ("a = ", "expected a value after '=', found the end of the expression at position 5"),
    ("a = )", "expected a value after '=', found ')' at position 5"),
    ("a = AND b = 1", "expected a value after '=', found AND at position 5"),
    ("a = 1 AND", "expected a condition after AND, found the end of the expression at position 10"),
    ("a = 1 OR OR b = 1", "expected a condition after OR, found OR at position 10"),
    ("AND a = 1", "expected a condition, found AND at position 1"),
    ("NOT", "expected a condition after NOT, found the end of the expression at position 4"),
    ("= 1", "expected a condition, found '=' at position 1"),
    ("a = --1", "expected a number after '-', found '-' at position 6"),
    ("a = -b", "expected a number after '-', found 'b' at position 6"),
    ("a = -'x'", "expected a number after '-', found string 'x' at position 6"),
    # operands without an operator, and extra tokens
    ("a", "expected a comparison (=, <>, <, <=, >, >=, BETWEEN, IN, IS, CONTAINS, STARTSWITH, "
          "ENDSWITH) after 'a', found the end of the expression at position 2"),
    ("a AND b = 1", "expected a comparison (=, <>, <, <=, >, >=, BETWEEN, IN, IS, CONTAINS, "
                    "STARTSWITH, ENDSWITH) after 'a', found AND at position 3"),
    ("5 OR a = 1", "expected a comparison (=, <>, <, <=, >, >=, BETWEEN, IN, IS, CONTAINS, "
                   "STARTSWITH, ENDSWITH) after number 5, found OR at position 3"),
    ("a - 1 > 2", "expected a comparison (=, <>, <, <=, >, >=, BETWEEN, IN, IS, CONTAINS, "
                  "STARTSWITH, ENDSWITH) after 'a', found '-' at position 3"),
    ("a = 1 b = 2", "expected AND, OR or the end of the expression after number 1, "
                    "found 'b' at position 7"),
    ("a = 1 = 2", "expected AND, OR or the end of the expression after number 1, "
                  "found '=' at position 7"),
    ("a == 1", "expected a value after '=', found '=' at position 4"),
    ("TRUE a = 1", "expected AND, OR or the end of the expression after TRUE, "
                   "found 'a' at position 6"),
    ("a LIKE 'x%'", "LIKE is not supported: use CONTAINS, STARTSWITH or ENDSWITH at position 3"),
    # parentheses
    ("(a = 1", "expected ')' to close the '(' at position 1, or AND/OR after number 1, "
               "found the end of the expression at position 7"),
    ("((a = 1) AND (b = 1)", "expected ')' to close the '(' at position 1, or AND/OR after ')', "
                             "found the end of the expression at position 21"),
    ("(a = 1 b = 2)", "expected ')' to close the '(' at position 1, or AND/OR after number 1, "
                      "found 'b' at position 8"),
    ("a = 1)", "unexpected ')' without a matching '(' at position 6"),
    ("()", "expected a condition after '(', found ')' at position 2"),
    ("a IN ()", "expected a string literal in the IN list, found ')' at position 7"),
    # NOT, IS, BETWEEN, IN, string operators
    ("a NOT = 1", "expected IN, BETWEEN, CONTAINS, STARTSWITH or ENDSWITH after NOT, "
                  "found '=' at position 7"),
    ("a NOT NULL", "expected IN, BETWEEN, CONTAINS, STARTSWITH or ENDSWITH after NOT, "
                   "found NULL at position 7"),
    ("a IS 1", "expected NULL after IS, found number 1 at position 6"),
    ("a IS NOT", "expected NULL after NOT, found the end of the expression at position 9"),
    ("a IS NOT NOT NULL", "expected NULL after NOT, found NOT at position 10"),
    ("a BETWEEN 1 2", "expected AND after BETWEEN 1, found number 2 at position 13"),
    ("a BETWEEN 1 OR 2", "expected AND after BETWEEN 1, found OR at position 13"),
    ("a BETWEEN AND 2", "expected a number after BETWEEN, found AND at position 11"),
    ("a BETWEEN 1 AND", "expected a number after AND, found the end of the expression "
                        "at position 16"),
    ("a IN 'x'", "expected '(' after IN, found string 'x' at position 6"),
    ("a IN ('x'", "expected ',' or ')' in the IN list, found the end of the expression "
                  "at position 10"),
    ("a IN ('x' 'y')", "expected ',' or ')' in the IN list, found string 'y' at position 11"),
    ("a IN ('x',)", "expected a string literal in the IN list, found ')' at position 11"),
    ("a CONTAINS b", "expected a string literal after CONTAINS, found 'b' at position 12"),
    ("a STARTSWITH", "expected a string literal after STARTSWITH, "
                     "found the end of the expression at position 13"),
    # types: ordering is numeric, IN and the string operators take strings, NULL is no value
    ("a > 'x'", "'>' orders numbers only, found string 'x' at position 5"),
    ("'x' <= a", "'<=' orders numbers only, found string 'x' at position 1"),
    ("a < TRUE", "'<' orders numbers only, found TRUE at position 5"),
    ("a BETWEEN 'a' AND 'z'", "BETWEEN orders numbers only, found string 'a' at position 11"),
    ("'a' BETWEEN 1 AND 2", "BETWEEN orders numbers only, found string 'a' at position 1"),
    ("a IN (1, 2)", "expected a string literal in the IN list, found number 1 at position 7"),
    ("5 IN ('5')", "IN compares strings, found number 5 at position 1"),
    ("TRUE CONTAINS 'T'", "CONTAINS matches strings, found TRUE at position 1"),
    ("'a' = 1", "'=' cannot compare string 'a' with number 1 at position 7"),
    ("1 <> TRUE", "'<>' cannot compare number 1 with TRUE at position 6"),
    ("a = NULL", "NULL is not a value: test a property with IS NULL or IS NOT NULL "
                 "at position 5"),
    ("NULL IS NULL", "NULL is not a value: test a property with IS NULL or IS NOT NULL "
                     "at position 1"),
    # characters, strings and numbers
    ("a = 'x", "unterminated string literal: close it with ' (write '' for a quote) "
               "at position 5"),
    ("a = 'it''s", "unterminated string literal: close it with ' (write '' for a quote) "
                   "at position 5"),
    ('a = "x"', "unexpected character '\"' (string literals use single quotes) at position 5"),
    ("a # 1", "unexpected character '#' at position 3"),
    ("a ! 1", "unexpected character '!' at position 3"),
    ("a = 1 && b = 2", "unexpected character '&' at position 7"),
    ("a = 1;", "unexpected character ';' at position 6"),
    ("a\u00a0= 1", "unexpected character '\\xa0' at position 2"),
    ("a = 1abc", "malformed number '1abc': write 12, -3, 1.5 or 2e3 at position 5"),
    ("a = 1.2.3", "malformed number '1.2.3': write 12, -3, 1.5 or 2e3 at position 5"),
    ("a = 1e", "malformed number '1e': write 12, -3, 1.5 or 2e3 at position 5"),
    ("a = 0x1F", "malformed number '0x1F': write 12, -3, 1.5 or 2e3 at position 5"),
    ("1a = 1", "malformed number '1a': write 12, -3, 1.5 or 2e3 at position 1"),
    (".a = 1", "unexpected character '.' at position 1"),
]  # fmt: skip


@pytest.mark.parametrize(("expression", "problem"), MALFORMED)
def test_malformed_expression_names_the_problem_and_its_position(
    expression: str, problem: str
) -> None:
    assert error_message(expression) == f"SQL filter: {problem}: {expression}"


@pytest.mark.parametrize("expression", ["", " ", "\t\n  "])
def test_empty_expression_is_refused_pointing_at_tag_filters(expression: str) -> None:
    assert error_message(expression) == (
        "SQL filter is empty: write a condition such as amount > 100, "
        "or use the tag filter '*' to match every message"
    )


def test_error_message_shows_a_multiline_expression_on_one_line() -> None:
    message = error_message("a = 1\nAND\tb >")
    assert message == (
        "SQL filter: expected a value after '>', found the end of the expression "
        "at position 14: a = 1 AND b >"
    )


def test_error_in_a_long_expression_shows_the_surroundings_of_the_position() -> None:
    expression = " AND ".join(["amount > 1"] * 100) + " AND amount > 'x' AND " + "b = 1 AND " * 10
    message = error_message(expression.removesuffix(" AND "))
    position = expression.index("'x'") + 1
    assert message.startswith(
        f"SQL filter: '>' orders numbers only, found string 'x' at position {position}: ..."
    )
    assert message.endswith("...")
    assert "amount > 'x' AND b = 1" in message
    assert len(message) < 200


# -- limits ---------------------------------------------------------------------------------


def test_expression_of_the_maximum_length_is_accepted_and_one_more_is_refused() -> None:
    longest = "a = 1" + " " * (MAX_EXPRESSION_LENGTH - 5)
    assert parse_sql_filter(longest).matches({"a": "1"})
    assert error_message(longest + " ") == (
        f"SQL filter is {MAX_EXPRESSION_LENGTH + 1} characters long: "
        f"at most {MAX_EXPRESSION_LENGTH} are allowed"
    )


def test_maximum_nesting_is_accepted() -> None:
    depth = MAX_NESTING_DEPTH
    assert parse_sql_filter("(" * depth + "a = 1" + ")" * depth).matches({"a": "1"})
    assert parse_sql_filter("NOT " * depth + "a = 1").matches({"a": "1"})  # an even count
    assert parse_sql_filter("NOT (" * (depth // 2) + "a = 1" + ")" * (depth // 2)).matches(
        {"a": "1"}
    )


@pytest.mark.parametrize(
    ("expression", "position"),
    [
        ("(" * 65 + "a = 1" + ")" * 65, 65),
        ("NOT " * 65 + "a = 1", 4 * 64 + 1),
        ("NOT (" * 32 + "NOT a = 1" + ")" * 32, 5 * 32 + 1),
        ("(" * 1000 + "a = 1" + ")" * 1000, 65),  # refused long before Python's recursion limit
    ],
)
def test_nesting_deeper_than_the_maximum_is_refused(expression: str, position: int) -> None:
    message = error_message(expression)
    assert message.startswith(
        f"SQL filter: nesting is deeper than {MAX_NESTING_DEPTH} levels of parentheses and NOT "
        f"at position {position}: "
    )


def test_long_flat_chains_are_not_nesting() -> None:
    chain = " OR ".join(f"a = {i}" for i in range(300))
    sql_filter = parse_sql_filter(chain)
    assert isinstance(sql_filter.condition, Or)
    assert len(sql_filter.condition.operands) == 300
    assert sql_filter.matches({"a": "299"})
    assert not sql_filter.matches({"a": "300"})


# -- randomized: the parser and evaluator against a reference written here -------------------
#
# Expressions are generated as small trees, rendered to text with the fewest parentheses
# precedence allows (plus some redundant ones and random keyword case), and evaluated here
# with Kleene logic over 0 = FALSE, 1 = UNKNOWN, 2 = TRUE (AND = min, OR = max, NOT = 2 - x).

RANDOM_VALUES = {
    "n": ["1", "2.5", "-3", "100", "1e2", "x", ""],
    "m": ["0", "7", "-0.5", "abc"],
    "s": ["eu", "us", "EU", "e", ""],
    "f": ["true", "FALSE", "True", "yes"],
}
NUMBERS = ["-3", "0", "1", "2.5", "100", "-0.5", "7"]
STRINGS = ["eu", "us", "EU", "e", "u", ""]
COMPARE: dict[str, Callable[[float, float], bool]] = {
    "=": operator.eq, "<>": operator.ne, "!=": operator.ne,
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}  # fmt: skip


@dataclass
class Node:
    text: str
    precedence: int  # 1 OR, 2 AND, 3 NOT, 4 predicate
    evaluate: Callable[[Mapping[str, str]], int]


def _kleene(value: bool | None) -> int:
    return 1 if value is None else 2 if value else 0


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _random_predicate(rng: random.Random) -> Node:
    def kw(word: str) -> str:
        return rng.choice([word, word.lower(), word.capitalize()])

    kind = rng.randrange(8)
    if kind == 0:
        prop, op, literal = rng.choice("nm"), rng.choice(list(COMPARE)), rng.choice(NUMBERS)

        def numeric(p: Mapping[str, str]) -> int:
            value = _number(p.get(prop))
            return 1 if value is None else _kleene(COMPARE[op](value, float(literal)))

        return Node(f"{prop} {op} {literal}", 4, numeric)
    if kind == 1:
        op, literal = rng.choice(["=", "<>", "!="]), rng.choice(STRINGS)

        def string(p: Mapping[str, str]) -> int:
            value = p.get("s")
            return 1 if value is None else _kleene((value == literal) == (op == "="))

        return Node(f"s {op} '{literal}'", 4, string)
    if kind == 2:
        low, high, negated = rng.choice(NUMBERS), rng.choice(NUMBERS), rng.random() < 0.5

        def between(p: Mapping[str, str]) -> int:
            value = _number(p.get("n"))
            if value is None:
                return 1
            inside = float(low) <= value <= float(high)
            return _kleene(inside != negated)

        return Node(
            f"n {kw('NOT ') if negated else ''}{kw('BETWEEN')} {low} {kw('AND')} {high}", 4, between
        )
    if kind == 3:
        values, negated = rng.sample(STRINGS, rng.randint(1, 3)), rng.random() < 0.5

        def in_list(p: Mapping[str, str]) -> int:
            value = p.get("s")
            return 1 if value is None else _kleene((value in values) != negated)

        listed = ", ".join(f"'{v}'" for v in values)
        return Node(f"s {kw('NOT ') if negated else ''}{kw('IN')} ({listed})", 4, in_list)
    if kind == 4:
        prop, negated = rng.choice(list(RANDOM_VALUES)), rng.random() < 0.5
        return Node(
            f"{prop} {kw('IS')} {kw('NOT ') if negated else ''}{kw('NULL')}",
            4,
            lambda p: _kleene((prop in p) == negated),
        )
    if kind == 5:
        op, literal = rng.choice(["=", "<>"]), rng.choice(["TRUE", "FALSE"])

        def boolean(p: Mapping[str, str]) -> int:
            value = p.get("f")
            if value is None:
                return 1
            return _kleene((value.lower() == literal.lower()) == (op == "="))

        return Node(f"f {op} {kw(literal)}", 4, boolean)
    if kind == 6:
        word, literal = rng.choice(["CONTAINS", "STARTSWITH", "ENDSWITH"]), rng.choice(STRINGS)
        negated = rng.random() < 0.5
        test: Callable[[str], bool] = {
            "CONTAINS": lambda v: literal in v,
            "STARTSWITH": lambda v: v.startswith(literal),
            "ENDSWITH": lambda v: v.endswith(literal),
        }[word]

        def string_match(p: Mapping[str, str]) -> int:
            value = p.get("s")
            return 1 if value is None else _kleene(test(value) != negated)

        return Node(f"s {kw('NOT ') if negated else ''}{kw(word)} '{literal}'", 4, string_match)
    constant = rng.choice(["TRUE", "FALSE"])
    return Node(kw(constant), 4, lambda p: 2 if constant == "TRUE" else 0)


def _random_condition(rng: random.Random, depth: int) -> Node:
    def wrap(node: Node, minimum: int) -> str:
        if node.precedence < minimum or rng.random() < 0.1:
            return f"({node.text})"
        return node.text

    choice = rng.randrange(6) if depth > 0 else 5
    if choice == 0:
        inner = _random_condition(rng, depth - 1)
        return Node(
            f"{rng.choice(['NOT', 'not'])} {wrap(inner, 3)}", 3, lambda p: 2 - inner.evaluate(p)
        )
    if choice in (1, 2):
        left, right = _random_condition(rng, depth - 1), _random_condition(rng, depth - 1)
        text = f"{wrap(left, 2)} {rng.choice(['AND', 'and'])} {wrap(right, 2)}"
        return Node(text, 2, lambda p: min(left.evaluate(p), right.evaluate(p)))
    if choice in (3, 4):
        left, right = _random_condition(rng, depth - 1), _random_condition(rng, depth - 1)
        text = f"{wrap(left, 1)} {rng.choice(['OR', 'Or'])} {wrap(right, 1)}"
        return Node(text, 1, lambda p: max(left.evaluate(p), right.evaluate(p)))
    return _random_predicate(rng)


def _random_properties(rng: random.Random) -> dict[str, str]:
    return {
        name: rng.choice(values) for name, values in RANDOM_VALUES.items() if rng.random() < 0.8
    }


@pytest.mark.parametrize("seed", range(5))
def test_random_expressions_agree_with_a_reference_evaluation(seed: int) -> None:
    rng = random.Random(seed)
    names = ["FALSE", "UNKNOWN", "TRUE"]
    for _ in range(300):
        node = _random_condition(rng, rng.randint(0, 4))
        sql_filter = parse_sql_filter(node.text)
        negated = parse_sql_filter(f"NOT ({node.text})")
        for _ in range(5):
            properties = _random_properties(rng)
            expected = names[node.evaluate(properties)]
            positive, negative = sql_filter.matches(properties), negated.matches(properties)
            got = "TRUE" if positive else "FALSE" if negative else "UNKNOWN"
            assert got == expected, (node.text, properties)
