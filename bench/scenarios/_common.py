"""What the scenario modules share: body making, ratio columns, system lists."""

from __future__ import annotations

import math
from collections.abc import Sequence

from bench.results import ScenarioResult, format_number, markdown_table

__all__ = ["PEERS", "body_of", "format_ratio", "ratio_table", "with_notes"]

PEERS = ("redis-always", "redis-everysec", "nats")
"""The peers, in the order of their ratio columns."""


def body_of(size: int) -> bytes:
    """A body of ``size`` bytes that does not compress (zlib would shrink a run of one byte)."""
    pattern = bytes(range(251))
    return (pattern * (size // len(pattern) + 1))[:size]


def format_ratio(value: float) -> str:
    """``0.52x``; "n/a" when a side is missing."""
    return "n/a" if math.isnan(value) else f"{value:.2f}x"


def ratio_table(
    result: ScenarioResult,
    metric: str,
    *,
    columns: Sequence[str],
    ratio_to: Sequence[str],
    system: str = "popmq",
    first_header: str = "case",
) -> str:
    """Rows = cases; a median column per system, then ``system ÷ other`` per other.

    Ratios are medians of per-run ratios; above 1 means ``system`` measured higher.
    """
    present = [
        c for c in columns if any(result.samples(case, c, metric) for case in result.cases())
    ]
    others = [o for o in ratio_to if o in present and o != system]
    headers = [first_header, *(f"{c} {metric}" for c in present)]
    headers += [f"{system} ÷ {o}" for o in others]
    rows = []
    for case in result.cases():
        row = [case]
        row += [format_number(result.median(case, c, metric)) for c in present]
        for other in others:
            row.append(format_ratio(result.ratio(case, metric, system, other)))
        rows.append(row)
    return markdown_table(headers, rows)


def with_notes(table: str, result: ScenarioResult) -> str:
    """The table, then the scenario's notes as a list."""
    notes = "\n".join(f"- {note}" for note in result.notes)
    return f"{table}\n\n{notes}" if notes else table
