"""The byte budget of one answer: what fits, and how much to read at a time."""

from __future__ import annotations

from popmq.broker_core.budget import FIRST_READ, ResponseBudget
from popmq.broker_core.validation import MAX_BODY_BYTES, MESSAGE_OVERHEAD_BYTES

MiB = 1024 * 1024


def test_the_first_message_always_fits_and_the_next_must_fit_what_is_left() -> None:
    budget = ResponseBudget(limit=3 * MiB)
    assert budget.take(MAX_BODY_BYTES)  # larger than the limit, but the first
    assert not budget.take(1)
    budget = ResponseBudget(limit=3 * MiB)
    assert budget.take(MiB) and budget.take(MiB)
    assert not budget.take(MiB)  # 3 MiB + 3 allowances would pass the limit
    assert budget.taken == 2 and budget.left == 3 * MiB - 2 * (MiB + MESSAGE_OVERHEAD_BYTES)


def test_reads_follow_the_sizes_seen_so_an_answer_reads_about_what_fits() -> None:
    budget = ResponseBudget(limit=4 * MiB)
    assert budget.reads(256) == FIRST_READ  # sizes unknown: a message may be 4 MiB
    assert budget.reads(2) == 2
    for _ in range(FIRST_READ):
        budget.saw(MiB)
    assert budget.reads(256) == 4  # ~4 MiB fit: three and the one that stops the answer
    small = ResponseBudget(limit=4 * MiB)
    small.saw(100)
    assert small.reads(256) == 256


def test_a_strict_bound_refuses_even_the_first_message_and_says_what_it_needed() -> None:
    budget = ResponseBudget(limit=MiB, strict=True)
    assert not budget.take(2 * MiB) and not budget.take(3 * MiB)
    assert budget.taken == 0 and budget.refused == 2 * MiB + MESSAGE_OVERHEAD_BYTES
    assert budget.take(1000)  # a smaller one fits
    probe = ResponseBudget(limit=0, strict=True)
    assert probe.reads(256) == 1  # one message is enough to learn what is needed
    assert not probe.take(1) and probe.refused == 1 + MESSAGE_OVERHEAD_BYTES


def test_a_strict_bound_that_can_reserve_asks_once_for_what_the_first_message_needs() -> None:
    asked: list[int] = []

    def reserve(needed: int) -> int:
        asked.append(needed)
        return 2 * MiB

    probe = ResponseBudget(limit=0, strict=True, reserve=reserve)
    assert probe.take(1000) and probe.take(1000)  # the second one fits what was reserved
    assert asked == [1000 + MESSAGE_OVERHEAD_BYTES]
    assert probe.reserved == 2 * MiB and probe.refused == 0
    assert not probe.take(2 * MiB)  # past the reserved bytes: not asked again
    assert asked == [1000 + MESSAGE_OVERHEAD_BYTES]

    refusing = ResponseBudget(limit=0, strict=True, reserve=lambda needed: 0)
    assert not refusing.take(1000) and refusing.refused == 1000 + MESSAGE_OVERHEAD_BYTES
    assert refusing.reserved == 0
    short = ResponseBudget(limit=0, strict=True, reserve=lambda needed: needed - 1)
    assert not short.take(1000) and short.reserved == 0  # less than needed counts as none
