"""SQL92 property filters: RocketMQ's SQL92 subset with JMS-selector semantics.

A filter is parsed once, when a subscription changes, and evaluated for every candidate
message on the pop path. So the parser does every check it can (operand types, NULL misuse,
length and nesting limits) and evaluation is only a walk over a small tree of frozen nodes.
Pure code: no I/O, no eval.

Pipeline: `_tokenize` (a hand-written scanner) -> `_Parser` (recursive descent, precedence
climbing for OR < AND, prefix NOT, then one predicate per operand) -> the AST node classes
below -> `_evaluate`.

Semantics, as RocketMQ's (JMS) selector:
- Property values are strings. `TAGS` is the message tag unless a property named `TAGS`
  exists; a message without a tag has `TAGS IS NULL`.
- The literal on either side picks the comparison: a number converts the property to a number
  (int or float; a missing or non-numeric property makes the comparison UNKNOWN), TRUE/FALSE
  compare with the strings 'true'/'false' case-insensitively, a string compares exactly.
- Ordering (`<`, `<=`, `>`, `>=`, BETWEEN) is numeric only, as in RocketMQ; ordering against a
  string or boolean literal is a parse error. IN lists, CONTAINS, STARTSWITH and ENDSWITH take
  string literals.
- Three-valued logic: evaluation yields True, False or None (UNKNOWN); a missing property is
  NULL and makes every comparison UNKNOWN. `SqlFilter.matches` is True only for True.
- NULL is not a value: `x = NULL` (always UNKNOWN in SQL) is refused in favour of `x IS NULL`.
  A lone property is not a condition either (write `vip = TRUE` or `vip IS NOT NULL`); a lone
  TRUE or FALSE is.

Errors are InvalidArgumentError. Positions in messages are 1-based character columns of
`expression`; the end of the expression is position len(expression) + 1.
"""

from __future__ import annotations

import enum
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeAlias, assert_never

from popmq.broker_core.errors import InvalidArgumentError

MAX_EXPRESSION_LENGTH = 4096
"""Longest accepted expression, in characters (bounds parse time and error messages)."""
MAX_NESTING_DEPTH = 64
"""Deepest accepted nesting of parentheses and NOT (bounds recursion)."""

TAGS_PROPERTY = "TAGS"

# ---------------------------------------------------------------------------------------------
# AST


@dataclass(frozen=True, slots=True)
class Property:
    """A message property by its case-sensitive name."""

    name: str


@dataclass(frozen=True, slots=True)
class StringLiteral:
    value: str


@dataclass(frozen=True, slots=True)
class NumberLiteral:
    value: int | float


@dataclass(frozen=True, slots=True)
class BooleanLiteral:
    value: bool


Operand: TypeAlias = Property | StringLiteral | NumberLiteral | BooleanLiteral
StringOperand: TypeAlias = Property | StringLiteral
NumberOperand: TypeAlias = Property | NumberLiteral
BooleanOperand: TypeAlias = Property | BooleanLiteral


class CompareOp(enum.Enum):
    EQ = "="
    NE = "<>"
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="


class MatchOp(enum.Enum):
    """RocketMQ 5's string predicates."""

    CONTAINS = "CONTAINS"
    STARTSWITH = "STARTSWITH"
    ENDSWITH = "ENDSWITH"


@dataclass(frozen=True, slots=True)
class StringComparison:
    """`=` or `<>` between strings: exact, case-sensitive."""

    op: CompareOp
    left: StringOperand
    right: StringOperand


@dataclass(frozen=True, slots=True)
class NumberComparison:
    """Any comparison with a number on one side; properties are converted to numbers."""

    op: CompareOp
    left: NumberOperand
    right: NumberOperand


@dataclass(frozen=True, slots=True)
class BooleanComparison:
    """`=` or `<>` with TRUE/FALSE: the property is compared with 'true'/'false', any case."""

    op: CompareOp
    left: BooleanOperand
    right: BooleanOperand


@dataclass(frozen=True, slots=True)
class Between:
    """`operand BETWEEN low AND high`, inclusive, numeric."""

    operand: NumberOperand
    low: NumberOperand
    high: NumberOperand


@dataclass(frozen=True, slots=True)
class In:
    operand: StringOperand
    values: frozenset[str]


@dataclass(frozen=True, slots=True)
class IsNull:
    operand: Operand


@dataclass(frozen=True, slots=True)
class StringMatch:
    op: MatchOp
    operand: StringOperand
    pattern: str


@dataclass(frozen=True, slots=True)
class Not:
    """Also the NOT forms of the predicates: `x NOT IN (...)` is `Not(In(...))`."""

    operand: Condition


@dataclass(frozen=True, slots=True)
class And:
    """N-ary so that long chains stay shallow trees."""

    operands: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class Or:
    operands: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class Constant:
    """A lone TRUE or FALSE."""

    value: bool


Condition: TypeAlias = (
    StringComparison
    | NumberComparison
    | BooleanComparison
    | Between
    | In
    | IsNull
    | StringMatch
    | Not
    | And
    | Or
    | Constant
)

# ---------------------------------------------------------------------------------------------
# Public API


@dataclass(frozen=True, slots=True)
class SqlFilter:
    """A parsed SQL92 filter; build it with `parse_sql_filter`."""

    expression: str
    condition: Condition = field(repr=False)

    def matches(self, properties: Mapping[str, str], tag: str = "") -> bool:
        """True only when the condition is TRUE; FALSE and UNKNOWN both reject the message."""
        return _evaluate(self.condition, properties, tag) is True


def parse_sql_filter(text: str) -> SqlFilter:
    """Parse `text`, raising InvalidArgumentError that names the position of any mistake."""
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise InvalidArgumentError(
            f"SQL filter is {len(text)} characters long: at most {MAX_EXPRESSION_LENGTH} "
            "are allowed",
            field="filter_expression",
            value=text,
            allowed=f"1..{MAX_EXPRESSION_LENGTH} characters",
        )
    if not text.strip():
        raise InvalidArgumentError(
            "SQL filter is empty: write a condition such as amount > 100, "
            "or use the tag filter '*' to match every message",
            field="filter_expression",
            value=text,
            allowed="a SQL92 condition",
        )
    return SqlFilter(text, _Parser(text, _tokenize(text)).parse())


# ---------------------------------------------------------------------------------------------
# Tokenizer


class _Kind(enum.Enum):
    IDENT = "identifier"
    KEYWORD = "keyword"
    STRING = "string"
    NUMBER = "number"
    OP = "operator"
    LPAREN = "("
    RPAREN = ")"
    COMMA = ","
    END = "end"


@dataclass(frozen=True, slots=True)
class _Token:
    kind: _Kind
    text: str
    """The source text, as written (for messages)."""
    position: int
    """0-based index into the expression."""
    value: str = ""
    """Identifier name, upper-cased keyword, decoded string literal or operator."""
    number: int | float = 0


_KEYWORDS = frozenset(
    {
        "AND",
        "BETWEEN",
        "CONTAINS",
        "ENDSWITH",
        "FALSE",
        "IN",
        "IS",
        "NOT",
        "NULL",
        "OR",
        "STARTSWITH",
        "TRUE",
    }
)
_WHITESPACE = frozenset(" \t\r\n")
_DIGITS = frozenset("0123456789")
_TWO_CHAR_OPERATORS = frozenset({"<>", "!=", "<=", ">="})
_ONE_CHAR_OPERATORS = frozenset("=<>+-")
_PUNCTUATION = {"(": _Kind.LPAREN, ")": _Kind.RPAREN, ",": _Kind.COMMA}


def _is_identifier_start(char: str) -> bool:
    return char == "_" or char.isalpha()


def _is_identifier_part(char: str) -> bool:
    return char in "_." or char in _DIGITS or char.isalpha()


def _tokenize(text: str) -> list[_Token]:
    """Split `text` into tokens, ending with one END token at len(text)."""
    tokens: list[_Token] = []
    index = 0
    length = len(text)
    while index < length:
        char = text[index]
        if char in _WHITESPACE:
            index += 1
        elif char == "'":
            index = _scan_string(text, index, tokens)
        elif char in _DIGITS or (char == "." and text[index + 1 : index + 2] in _DIGITS):
            index = _scan_number(text, index, tokens)
        elif _is_identifier_start(char):
            end = index + 1
            while end < length and _is_identifier_part(text[end]):
                end += 1
            word = text[index:end]
            if word.upper() in _KEYWORDS:
                tokens.append(_Token(_Kind.KEYWORD, word, index, word.upper()))
            else:
                tokens.append(_Token(_Kind.IDENT, word, index, word))
            index = end
        elif text[index : index + 2] in _TWO_CHAR_OPERATORS:
            pair = text[index : index + 2]
            tokens.append(_Token(_Kind.OP, pair, index, "<>" if pair == "!=" else pair))
            index += 2
        elif char in _ONE_CHAR_OPERATORS:
            tokens.append(_Token(_Kind.OP, char, index, char))
            index += 1
        elif char in _PUNCTUATION:
            tokens.append(_Token(_PUNCTUATION[char], char, index, char))
            index += 1
        else:
            hint = " (string literals use single quotes)" if char == '"' else ""
            raise _syntax_error(text, index, f"unexpected character {char!r}{hint}")
    tokens.append(_Token(_Kind.END, "", length))
    return tokens


def _scan_string(text: str, start: int, tokens: list[_Token]) -> int:
    """Scan a single-quoted literal at `start` ('' is a quote); return the index after it."""
    parts: list[str] = []
    index = start + 1
    while True:
        quote = text.find("'", index)
        if quote < 0:
            raise _syntax_error(
                text, start, "unterminated string literal: close it with ' (write '' for a quote)"
            )
        parts.append(text[index:quote])
        if text[quote + 1 : quote + 2] == "'":
            parts.append("'")
            index = quote + 2
            continue
        end = quote + 1
        tokens.append(_Token(_Kind.STRING, text[start:end], start, "".join(parts)))
        return end


def _scan_number(text: str, start: int, tokens: list[_Token]) -> int:
    """Scan `12`, `1.5`, `.5`, `2.` or `1e3` at `start`; return the index after it."""
    index = _skip_digits(text, start)
    is_integer = True
    if text[index : index + 1] == ".":
        is_integer = False
        index = _skip_digits(text, index + 1)
    if text[index : index + 1] in ("e", "E"):
        exponent = index + 1
        if text[exponent : exponent + 1] in ("+", "-"):
            exponent += 1
        digits_end = _skip_digits(text, exponent)
        if digits_end > exponent:
            is_integer = False
            index = digits_end
    if index < len(text) and _is_identifier_part(text[index]):
        end = index
        while end < len(text) and _is_identifier_part(text[end]):
            end += 1
        raise _syntax_error(
            text, start, f"malformed number {text[start:end]!r}: write 12, -3, 1.5 or 2e3"
        )
    literal = text[start:index]
    number = _parse_integer(literal) if is_integer else float(literal)
    tokens.append(_Token(_Kind.NUMBER, literal, start, number=number))
    return index


def _skip_digits(text: str, index: int) -> int:
    while index < len(text) and text[index] in _DIGITS:
        index += 1
    return index


def _syntax_error(text: str, position: int, message: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"SQL filter: {message} at position {position + 1}: {_excerpt(text, position)}",
        field="filter_expression",
        value=text,
        allowed="a SQL92 condition",
    )


_EXCERPT_RADIUS = 50


def _excerpt(text: str, position: int) -> str:
    """The expression (or the part around `position`) on one line, for an error message."""
    if len(text) > 2 * _EXCERPT_RADIUS + 20:
        start = max(0, position - _EXCERPT_RADIUS)
        end = min(len(text), position + _EXCERPT_RADIUS)
        text = ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")
    return text.replace("\n", " ").replace("\r", " ").replace("\t", " ")


def _describe(token: _Token) -> str:
    match token.kind:
        case _Kind.END:
            return "the end of the expression"
        case _Kind.KEYWORD:
            return token.value
        case _Kind.STRING:
            return f"string {token.text}"
        case _Kind.NUMBER:
            return f"number {token.text}"
        case _:
            return f"'{token.text}'"


# ---------------------------------------------------------------------------------------------
# Parser

_BINARY_PRECEDENCE = {"OR": 1, "AND": 2}
_COMPARE_OPS = {
    "=": CompareOp.EQ,
    "<>": CompareOp.NE,
    "<": CompareOp.LT,
    "<=": CompareOp.LE,
    ">": CompareOp.GT,
    ">=": CompareOp.GE,
}
_NEGATABLE = ("IN", "BETWEEN", "CONTAINS", "STARTSWITH", "ENDSWITH")
_Located: TypeAlias = tuple[Operand, _Token]


class _Parser:
    """Recursive descent over the token list; one instance parses one expression.

    condition := unary (("AND" | "OR") unary)*        -- precedence climbing, AND binds tighter
    unary     := "NOT" unary | "(" condition ")" | predicate
    predicate := operand (compare operand
                         | ["NOT"] "BETWEEN" operand "AND" operand
                         | ["NOT"] "IN" "(" string ("," string)* ")"
                         | ["NOT"] ("CONTAINS" | "STARTSWITH" | "ENDSWITH") string
                         | "IS" ["NOT"] "NULL")
               | TRUE | FALSE
    operand   := identifier | string | ["-" | "+"] number | TRUE | FALSE
    """

    def __init__(self, text: str, tokens: list[_Token]) -> None:
        self._text = text
        self._tokens = tokens
        self._index = 0
        self._depth = 0  # open parentheses and NOTs around the current position

    def parse(self) -> Condition:
        condition = self._condition(1)
        token = self._peek()
        if token.kind is _Kind.RPAREN:
            raise self._error("unexpected ')' without a matching '('", token)
        if token.kind is not _Kind.END:
            raise self._expected(f"AND, OR or the end of the expression after {self._previous()}")
        return condition

    # -- token access

    def _peek(self) -> _Token:
        return self._tokens[self._index]

    def _advance(self) -> _Token:
        token = self._tokens[self._index]
        if token.kind is not _Kind.END:
            self._index += 1
        return token

    def _previous(self) -> str:
        return _describe(self._tokens[self._index - 1])

    def _at_keyword(self, *keywords: str) -> bool:
        token = self._peek()
        return token.kind is _Kind.KEYWORD and token.value in keywords

    def _error(self, message: str, token: _Token) -> InvalidArgumentError:
        return _syntax_error(self._text, token.position, message)

    def _expected(self, what: str) -> InvalidArgumentError:
        token = self._peek()
        return self._error(f"expected {what}, found {_describe(token)}", token)

    def _enter(self, token: _Token) -> None:
        self._depth += 1
        if self._depth > MAX_NESTING_DEPTH:
            raise self._error(
                f"nesting is deeper than {MAX_NESTING_DEPTH} levels of parentheses and NOT",
                token,
            )

    # -- grammar

    def _condition(self, min_precedence: int) -> Condition:
        left = self._unary()
        while True:
            token = self._peek()
            precedence = (
                _BINARY_PRECEDENCE.get(token.value) if token.kind is _Kind.KEYWORD else None
            )
            if precedence is None or precedence < min_precedence:
                return left
            self._advance()
            right = self._condition(precedence + 1)
            left = _combine(token.value, left, right)

    def _unary(self) -> Condition:
        token = self._peek()
        if self._at_keyword("NOT"):
            self._enter(token)
            self._advance()
            operand = self._unary()
            self._depth -= 1
            return Not(operand)
        if token.kind is _Kind.LPAREN:
            self._enter(token)
            self._advance()
            condition = self._condition(1)
            if self._peek().kind is not _Kind.RPAREN:
                raise self._expected(
                    f"')' to close the '(' at position {token.position + 1}, "
                    f"or AND/OR after {self._previous()}"
                )
            self._advance()
            self._depth -= 1
            return condition
        return self._predicate()

    def _predicate(self) -> Condition:
        what = f"a condition after {self._previous()}" if self._index else "a condition"
        left = self._operand(what)
        token = self._peek()
        if token.kind is _Kind.OP and token.value in _COMPARE_OPS:
            self._advance()
            right = self._operand(f"a value after '{token.text}'")
            return self._comparison(token, left, right)
        if self._at_keyword("IS"):
            self._advance()
            negated = self._at_keyword("NOT")
            if negated:
                self._advance()
            if not self._at_keyword("NULL"):
                raise self._expected(f"NULL after {self._previous()}")
            self._advance()
            condition: Condition = IsNull(left[0])
            return Not(condition) if negated else condition
        negated = self._at_keyword("NOT")
        if negated:
            self._advance()
            if not self._at_keyword(*_NEGATABLE):
                raise self._expected("IN, BETWEEN, CONTAINS, STARTSWITH or ENDSWITH after NOT")
        if self._at_keyword("BETWEEN"):
            condition = self._between(left)
        elif self._at_keyword("IN"):
            condition = self._in(left)
        elif self._at_keyword(*MatchOp.__members__):
            condition = self._string_match(left)
        elif isinstance(left[0], BooleanLiteral):
            return Constant(left[0].value)
        elif token.kind is _Kind.IDENT and token.value.upper() == "LIKE":
            raise self._error("LIKE is not supported: use CONTAINS, STARTSWITH or ENDSWITH", token)
        else:
            raise self._expected(
                f"a comparison (=, <>, <, <=, >, >=, BETWEEN, IN, IS, CONTAINS, STARTSWITH, "
                f"ENDSWITH) after {_describe(left[1])}"
            )
        return Not(condition) if negated else condition

    def _operand(self, what: str) -> _Located:
        token = self._peek()
        operand: Operand
        match token.kind:
            case _Kind.IDENT:
                operand = Property(token.value)
            case _Kind.STRING:
                operand = StringLiteral(token.value)
            case _Kind.NUMBER:
                operand = NumberLiteral(token.number)
            case _Kind.KEYWORD if token.value in ("TRUE", "FALSE"):
                operand = BooleanLiteral(token.value == "TRUE")
            case _Kind.KEYWORD if token.value == "NULL":
                raise self._error(
                    "NULL is not a value: test a property with IS NULL or IS NOT NULL", token
                )
            case _Kind.OP if token.value in ("-", "+"):
                self._advance()
                number = self._peek()
                if number.kind is not _Kind.NUMBER:
                    raise self._expected(f"a number after '{token.text}'")
                self._advance()
                value = -number.number if token.value == "-" else number.number
                return NumberLiteral(value), token
            case _:
                raise self._expected(what)
        self._advance()
        return operand, token

    def _comparison(self, op_token: _Token, left: _Located, right: _Located) -> Condition:
        op = _COMPARE_OPS[op_token.value]
        sign = f"'{op_token.text}'"
        if op not in (CompareOp.EQ, CompareOp.NE):
            return NumberComparison(
                op,
                self._number_operand(left, f"{sign} orders numbers only"),
                self._number_operand(right, f"{sign} orders numbers only"),
            )
        literal_types = {type(operand) for operand, _ in (left, right)} - {Property}
        if len(literal_types) > 1:
            raise self._error(
                f"{sign} cannot compare {_describe(left[1])} with {_describe(right[1])}",
                right[1],
            )
        if NumberLiteral in literal_types:
            reason = f"{sign} with a number compares numbers"
            return NumberComparison(
                op, self._number_operand(left, reason), self._number_operand(right, reason)
            )
        if BooleanLiteral in literal_types:
            reason = f"{sign} with TRUE/FALSE compares booleans"
            return BooleanComparison(
                op, self._boolean_operand(left, reason), self._boolean_operand(right, reason)
            )
        reason = f"{sign} compares strings"
        return StringComparison(
            op, self._string_operand(left, reason), self._string_operand(right, reason)
        )

    def _between(self, left: _Located) -> Condition:
        self._advance()
        low = self._operand("a number after BETWEEN")
        if not self._at_keyword("AND"):
            raise self._expected(f"AND after BETWEEN {low[1].text}")
        self._advance()
        high = self._operand("a number after AND")
        reason = "BETWEEN orders numbers only"
        return Between(
            self._number_operand(left, reason),
            self._number_operand(low, reason),
            self._number_operand(high, reason),
        )

    def _in(self, left: _Located) -> Condition:
        operand = self._string_operand(left, "IN compares strings")
        self._advance()
        if self._peek().kind is not _Kind.LPAREN:
            raise self._expected("'(' after IN")
        self._advance()
        values: set[str] = set()
        while True:
            if self._peek().kind is not _Kind.STRING:
                raise self._expected("a string literal in the IN list")
            values.add(self._advance().value)
            separator = self._peek()
            if separator.kind is _Kind.RPAREN:
                self._advance()
                return In(operand, frozenset(values))
            if separator.kind is not _Kind.COMMA:
                raise self._expected("',' or ')' in the IN list")
            self._advance()

    def _string_match(self, left: _Located) -> Condition:
        op = MatchOp[self._advance().value]
        operand = self._string_operand(left, f"{op.value} matches strings")
        if self._peek().kind is not _Kind.STRING:
            raise self._expected(f"a string literal after {op.value}")
        return StringMatch(op, operand, self._advance().value)

    # -- operand type checks (parse time, so evaluation never meets a type mismatch)

    def _number_operand(self, located: _Located, reason: str) -> NumberOperand:
        operand, token = located
        if isinstance(operand, Property | NumberLiteral):
            return operand
        raise self._error(f"{reason}, found {_describe(token)}", token)

    def _string_operand(self, located: _Located, reason: str) -> StringOperand:
        operand, token = located
        if isinstance(operand, Property | StringLiteral):
            return operand
        raise self._error(f"{reason}, found {_describe(token)}", token)

    def _boolean_operand(self, located: _Located, reason: str) -> BooleanOperand:
        operand, token = located
        if isinstance(operand, Property | BooleanLiteral):
            return operand
        raise self._error(f"{reason}, found {_describe(token)}", token)


def _combine(keyword: str, left: Condition, right: Condition) -> Condition:
    """Join two conditions, flattening nested ANDs (ORs): both are associative in 3VL."""
    if keyword == "AND":
        return And(_flatten(And, left) + _flatten(And, right))
    return Or(_flatten(Or, left) + _flatten(Or, right))


def _flatten(kind: type[And] | type[Or], condition: Condition) -> tuple[Condition, ...]:
    if isinstance(condition, kind):
        return condition.operands
    return (condition,)


# ---------------------------------------------------------------------------------------------
# Evaluator

_ORDER: dict[CompareOp, Callable[[int | float, int | float], bool]] = {
    CompareOp.EQ: operator.eq,
    CompareOp.NE: operator.ne,
    CompareOp.LT: operator.lt,
    CompareOp.LE: operator.le,
    CompareOp.GT: operator.gt,
    CompareOp.GE: operator.ge,
}
_MATCH: dict[MatchOp, Callable[[str, str], bool]] = {
    MatchOp.CONTAINS: lambda value, pattern: pattern in value,
    MatchOp.STARTSWITH: str.startswith,
    MatchOp.ENDSWITH: str.endswith,
}
# What a property must look like to be a number (Java's Long/Double.valueOf, minus NaN,
# Infinity and whitespace); Python's int()/float() alone would accept '1_000' and ' 7'.
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
_DECIMAL_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _evaluate(node: Condition, properties: Mapping[str, str], tag: str) -> bool | None:
    """Three-valued evaluation: True, False or None for UNKNOWN."""
    match node:
        case And(operands):
            result: bool | None = True
            for operand in operands:
                value = _evaluate(operand, properties, tag)
                if value is False:
                    return False
                if value is None:
                    result = None
            return result
        case Or(operands):
            result = False
            for operand in operands:
                value = _evaluate(operand, properties, tag)
                if value is True:
                    return True
                if value is None:
                    result = None
            return result
        case Not(operand):
            value = _evaluate(operand, properties, tag)
            return None if value is None else not value
        case Constant(value):
            return value
        case IsNull(operand):
            return isinstance(operand, Property) and _lookup(operand, properties, tag) is None
        case StringComparison(op, left, right):
            left_text = _string_value(left, properties, tag)
            right_text = _string_value(right, properties, tag)
            if left_text is None or right_text is None:
                return None
            equal = left_text == right_text
            return equal if op is CompareOp.EQ else not equal
        case BooleanComparison(op, left, right):
            left_text = _boolean_text(left, properties, tag)
            right_text = _boolean_text(right, properties, tag)
            if left_text is None or right_text is None:
                return None
            equal = left_text == right_text
            return equal if op is CompareOp.EQ else not equal
        case NumberComparison(op, left, right):
            return _compare_numbers(
                op, _number_value(left, properties, tag), _number_value(right, properties, tag)
            )
        case Between(operand, low, high):
            number = _number_value(operand, properties, tag)
            at_least_low = _compare_numbers(
                CompareOp.GE, number, _number_value(low, properties, tag)
            )
            at_most_high = _compare_numbers(
                CompareOp.LE, number, _number_value(high, properties, tag)
            )
            if at_least_low is False or at_most_high is False:
                return False
            if at_least_low is None or at_most_high is None:
                return None
            return True
        case In(operand, values):
            text = _string_value(operand, properties, tag)
            return None if text is None else text in values
        case StringMatch(op, operand, pattern):
            text = _string_value(operand, properties, tag)
            return None if text is None else _MATCH[op](text, pattern)
        case _:
            assert_never(node)


def _compare_numbers(
    op: CompareOp, left: int | float | None, right: int | float | None
) -> bool | None:
    if left is None or right is None:
        return None
    return _ORDER[op](left, right)


def _lookup(prop: Property, properties: Mapping[str, str], tag: str) -> str | None:
    value = properties.get(prop.name)
    if value is None and prop.name == TAGS_PROPERTY:
        return tag or None
    return value


def _string_value(operand: StringOperand, properties: Mapping[str, str], tag: str) -> str | None:
    if isinstance(operand, Property):
        return _lookup(operand, properties, tag)
    return operand.value


def _boolean_text(operand: BooleanOperand, properties: Mapping[str, str], tag: str) -> str | None:
    if isinstance(operand, Property):
        value = _lookup(operand, properties, tag)
        return None if value is None else value.lower()
    return "true" if operand.value else "false"


def _number_value(
    operand: NumberOperand, properties: Mapping[str, str], tag: str
) -> int | float | None:
    if isinstance(operand, NumberLiteral):
        return operand.value
    value = _lookup(operand, properties, tag)
    if value is None:
        return None
    return _to_number(value)


def _to_number(text: str) -> int | float | None:
    """The property's numeric value, or None (UNKNOWN) when it is not a number."""
    if _INTEGER_TEXT.fullmatch(text):
        return _parse_integer(text)
    if _DECIMAL_TEXT.fullmatch(text):
        return float(text)
    return None


def _parse_integer(digits: str) -> int | float:
    """`digits` as an int; as a float past Python's int-parsing limit (4300 digits)."""
    try:
        return int(digits)
    except ValueError:
        return float(digits)
