"""Reading the console's query strings and forms: every number, time and name is checked
and a bad one refused (400, saying what is allowed), never clamped or replaced silently,
so an operator never acts on a value other than the one typed.

Pure functions over strings; they raise `ActionRefused("INVALID_ARGUMENT", ...)`, which
the console renders as a page with the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from popmq.console.actions import ActionRefused

MAX_TEXT = 200
"""Characters of a search, name or key kept (longer input is refused)."""
PAGE_SIZE = 50
"""Rows on one page of a list."""
_LAST_MS = 253_402_300_799_999
"""9999-12-31 23:59:59.999 UTC, the last time a page can show."""


def invalid(message: str) -> ActionRefused:
    return ActionRefused("INVALID_ARGUMENT", message)


def text(values: Mapping[str, object], name: str, *, required: bool = False) -> str:
    """A text field, stripped; refused when longer than MAX_TEXT or (required) empty."""
    value = str(values.get(name) or "").strip()
    if len(value) > MAX_TEXT:
        raise invalid(f"{name} is {len(value)} characters long; at most {MAX_TEXT} are allowed")
    if required and not value:
        raise invalid(f"{name} is required")
    return value


def integer(
    values: Mapping[str, object],
    name: str,
    *,
    low: int,
    high: int,
    default: int | None = None,
) -> int | None:
    """A whole number within [low, high]; `default` when absent or empty (None: optional).

    Raises:
        ActionRefused: Not a whole number, or out of range.
    """
    raw = str(values.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw, 10)
    except ValueError:
        raise invalid(f"{name} {raw[:20]!r} is not a whole number") from None
    if not low <= value <= high:
        raise invalid(f"{name} {value} is out of range: {low}..{high}")
    return value


def required_integer(values: Mapping[str, object], name: str, *, low: int, high: int) -> int:
    value = integer(values, name, low=low, high=high)
    if value is None:
        raise invalid(f"{name} is required ({low}..{high})")
    return value


def page_number(values: Mapping[str, object]) -> int:
    """`page`, 1 when absent; refused when not a whole number >= 1."""
    page = integer(values, "page", low=1, high=10**9, default=1)
    assert page is not None
    return page


def check_page(page: int, pages: int) -> None:
    """Refuse a page beyond the last (a stale link after rows went away says so)."""
    if page > pages:
        raise invalid(f"page {page} is beyond the last page, {pages}")


def timestamp_ms(values: Mapping[str, object], name: str) -> int | None:
    """A UTC time "YYYY-MM-DDTHH:MM[:SS]" (as a datetime-local input sends it, or with a
    space), or epoch milliseconds, as epoch ms; None when absent.

    Raises:
        ActionRefused: Not such a time.
    """
    raw = str(values.get(name) or "").strip()
    if not raw:
        return None
    if raw.isdigit():
        if len(raw) > 15 or int(raw) > _LAST_MS:
            raise invalid(f"{name} {raw[:20]!r} is after the year 9999")
        return int(raw)
    try:
        when = datetime.fromisoformat(raw.replace(" ", "T", 1))
    except ValueError:
        raise invalid(
            f"{name} {raw[:40]!r} is not a time: give YYYY-MM-DDTHH:MM[:SS] (UTC) or epoch "
            "milliseconds"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    millis = int(when.timestamp() * 1000)
    if millis < 0:
        raise invalid(f"{name} {raw[:40]!r} is before 1970")
    return millis


def utc(millis: int) -> str:
    """Epoch ms as "YYYY-MM-DD HH:MM:SS.mmm" (UTC); "" for 0."""
    if millis <= 0:
        return ""
    when = datetime.fromtimestamp(millis / 1000, tz=UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{millis % 1000:03d}"


def confirmed(values: Mapping[str, object], name: str) -> bool:
    """Whether the operator typed `name` exactly into the form's `confirm` field."""
    return bool(name) and str(values.get("confirm") or "") == name
