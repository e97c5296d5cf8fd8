"""What a scenario measured, kept per run so that medians and paired ratios can be taken.

Machines here are shared and noisy, so no number stands alone: each value is measured once
per run, the systems of one run are measured back to back, and a ratio between two systems is
the median of their per-run ratios (paired), which cancels most of the drift between runs.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ScenarioResult",
    "format_number",
    "load_results",
    "markdown_table",
    "percentile",
    "save_results",
]


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (``fraction`` in 0..1)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def format_number(value: float, digits: int = 3) -> str:
    """Three significant digits, thousands separated; "n/a" for a missing value."""
    if value is None or math.isnan(value):
        return "n/a"
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    rounded = round(value, decimals)
    return f"{rounded:,.{decimals}f}"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass
class ScenarioResult:
    """Samples of one scenario: ``values[case][system][metric]`` is one float per run."""

    name: str
    title: str
    settings: dict[str, Any] = field(default_factory=dict)
    """The sizes actually used (quick or full), printed with the tables."""
    values: dict[str, dict[str, dict[str, list[float]]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    """Wall time the scenario took, all runs included."""

    def add(self, case: str, system: str, metric: str, value: float) -> None:
        self.values.setdefault(case, {}).setdefault(system, {}).setdefault(metric, []).append(value)

    def samples(self, case: str, system: str, metric: str) -> list[float]:
        return self.values.get(case, {}).get(system, {}).get(metric, [])

    def median(self, case: str, system: str, metric: str) -> float:
        samples = self.samples(case, system, metric)
        return statistics.median(samples) if samples else math.nan

    def ratio(self, case: str, metric: str, system: str, other: str) -> float:
        """Median over runs of ``system / other`` (paired by run); NaN when either is missing."""
        return self.pair_ratio(metric, (case, system), (case, other))

    def pair_ratio(self, metric: str, a: tuple[str, str], b: tuple[str, str]) -> float:
        """Median over runs of ``(case, system) a / (case, system) b`` (paired by run)."""
        pairs = [
            x / y
            for x, y in zip(self.samples(*a, metric), self.samples(*b, metric), strict=False)
            if y
        ]
        return statistics.median(pairs) if pairs else math.nan

    def cross_ratio(self, metric: str, case: str, other_case: str, system: str = "popmq") -> float:
        """Median over runs of one system's ``case / other_case`` (paired by run)."""
        return self.pair_ratio(metric, (case, system), (other_case, system))

    def cases(self) -> list[str]:
        return list(self.values)

    def systems(self, case: str | None = None) -> list[str]:
        seen: dict[str, None] = {}
        for name in [case] if case is not None else self.values:
            for system in self.values.get(name, {}):
                seen[system] = None
        return list(seen)

    def runs(self) -> int:
        return max(
            (
                len(v)
                for systems in self.values.values()
                for m in systems.values()
                for v in m.values()
            ),
            default=0,
        )


def save_results(results: Sequence[ScenarioResult], path: Path, meta: dict[str, Any]) -> None:
    """Write the raw samples as JSON, so the doc can be re-rendered without re-running."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"meta": meta, "results": [asdict(r) for r in results]}
    path.write_text(json.dumps(payload, indent=1))  # keeps case order (dicts are ordered)


def load_results(path: Path) -> tuple[list[ScenarioResult], dict[str, Any]]:
    payload = json.loads(path.read_text())
    return [ScenarioResult(**r) for r in payload["results"]], payload["meta"]
