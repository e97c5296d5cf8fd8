"""bench/request_stall.py in its CI size: no single request stalls the server.

The bench reports the worst ListTopics ping beside each hostile request; here the bound is
a generous sanity one (the target, 100 ms, is for the committed full run on a quiet machine:
docs/limits.md), and each attack must get a clear answer, never UNKNOWN or INTERNAL, and
never take the server down.
"""

from __future__ import annotations

import pytest

from bench import request_stall

pytestmark = pytest.mark.slow

_CLEAR = {"OK", "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"}


def test_no_single_request_stalls_the_server_or_gets_an_unclear_answer() -> None:
    rows = request_stall.measure(quick=True)
    assert len(rows) >= 20
    for row in rows:
        assert row.status in _CLEAR, row
        assert row.pings > 0, row
        assert row.worst_ping_ms < 2000, row
        assert 0 < row.server_rss_mb < 2000, row
