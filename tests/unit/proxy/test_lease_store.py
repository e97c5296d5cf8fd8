"""Lease entries' paths: any group and any printable token (Spark's `spark/<run>/<batch>/<i>`)
become valid coordination paths, distinct tokens distinct paths."""

from __future__ import annotations

import pytest

from popmq.coordination.coordinator import check_path
from popmq.proxy.lease_pages import MAX_TOKEN_LENGTH
from popmq.proxy.lease_store import MAX_SEGMENT_CHARS, encode_segment, lease_path, page_path

TOKENS = [
    "spark/5f0c9a1e-2b3d-4c6f/17/3",
    "t",
    "%",
    "%25",
    "a/b",
    "a%2Fb",
    "with space",
    "ünïcødé ✓",
    "..",
    "x" * MAX_TOKEN_LENGTH,
    "/" * MAX_TOKEN_LENGTH,
    "/" * MAX_TOKEN_LENGTH + "!",
    "é" * MAX_TOKEN_LENGTH,
]


@pytest.mark.parametrize("token", TOKENS)
def test_every_printable_token_makes_a_valid_path(token: str) -> None:
    path = page_path("%RETRY%g_-1", token, "0123456789abcdef", 4095)
    assert check_path(path) == path
    assert path.startswith(lease_path("%RETRY%g_-1", token) + "/")


def test_distinct_tokens_get_distinct_segments_and_the_readable_ones_stay_readable() -> None:
    segments = [encode_segment(t) for t in TOKENS]
    assert len(set(segments)) == len(TOKENS)
    assert encode_segment("spark/run-1/17/3") == "spark%2Frun-1%2F17%2F3"
    assert encode_segment("%") == "%25" and encode_segment("%25") == "%2525"
    assert encode_segment("ü") == "%C3%BC"
    assert all(len(s) <= MAX_SEGMENT_CHARS for s in segments)


def test_a_token_too_long_to_spell_out_is_hashed_where_no_spelled_out_one_can_land() -> None:
    long = "/" * MAX_TOKEN_LENGTH
    hashed = encode_segment(long)
    assert hashed.startswith("%%") and len(hashed) == 66
    assert hashed != encode_segment("/" * (MAX_TOKEN_LENGTH - 1))
    # Percent encoding writes '%' only before two hex digits: never "%%".
    assert not any("%%" in encode_segment(t) for t in TOKENS if len(t) < 40)
