"""Suite-wide scheduling for parallel runs (`make test` runs pytest-xdist workers).

xdist hands out work in collection order, so a long test collected late becomes the run's
tail while the other workers sit idle. Every test keeps its place except that the longest
kinds are moved to the front: the Spark tests that share one SparkSession (one xdist group,
so one worker and one JVM run them in turn) and the tests marked `slow`. A serial run is
reordered the same way, which no test may depend on.
"""

from __future__ import annotations

import pytest


def _rank(item: pytest.Item) -> int:
    if item.get_closest_marker("xdist_group") is not None:
        return 0
    if item.get_closest_marker("slow") is not None:
        return 1
    return 2


@pytest.hookimpl(trylast=True)  # after the folders' conftests have added their marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: the order within each rank is the collection's
