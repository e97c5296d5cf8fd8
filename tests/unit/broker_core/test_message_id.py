"""Server-assigned message ids: RocketMQ 5's 34 upper-case hex characters, unique, ordered
by time and then by sequence."""

from __future__ import annotations

import re
import time

from popmq.broker_core.message_id import MessageIdGenerator

_EPOCH_2021_MS = 1_609_459_200_000


def test_ids_have_the_format_and_the_given_second() -> None:
    ids = MessageIdGenerator(node=bytes.fromhex("a1b2c3d4e5f6"))
    now = 1_764_000_000_123
    first = ids.next(now)
    assert re.fullmatch(r"01A1B2C3D4E5F6[0-9A-F]{4}[0-9A-F]{8}[0-9A-F]{8}", first)
    assert int(first[18:26], 16) == (now - _EPOCH_2021_MS) // 1000
    assert int(first[26:], 16) == 0


def test_ids_are_unique_and_ordered_across_seconds() -> None:
    ids = MessageIdGenerator()
    now = 1_764_000_000_000
    made = [ids.next(now + step * 250) for step in range(12)]  # four ids a second
    assert len(set(made)) == len(made)
    assert made == sorted(made)
    assert len({m[18:26] for m in made}) == 3


def test_without_a_reading_it_reads_the_clock() -> None:
    before = int(time.time())
    made = MessageIdGenerator().next()
    after = int(time.time())
    assert before - 1_609_459_200 <= int(made[18:26], 16) <= after - 1_609_459_200
