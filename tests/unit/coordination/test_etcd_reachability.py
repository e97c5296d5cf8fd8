"""When one etcd client counts etcd unreachable or hung (coordination/etcd_reachability.py),
from what its requests saw: no server here, real time passing (the rules are about how long
a request waited). tests/cluster/test_etcd.py has the same against a real etcd."""

from __future__ import annotations

import asyncio
import time

from popmq.coordination.etcd_reachability import (
    UNANSWERED_AFTER_S,
    UNREACHABLE_AFTER_S,
    Reachability,
)

PAST_S = max(UNANSWERED_AFTER_S, UNREACHABLE_AFTER_S) + 0.1


def test_a_request_left_unanswered_means_hung_unless_etcd_answered_since_it_was_sent() -> None:
    async def scenario() -> None:
        hung = Reachability(["a:1"])
        slow = Reachability(["a:1"])  # a slow request while etcd answers others
        two = Reachability(["a:1", "b:1"])  # one endpoint silent, the other never asked
        with hung.asking("a:1"), slow.asking("a:1"), two.asking("a:1"):
            assert hung.unreachable_for is None and hung.hung_for is None  # not yet
            await asyncio.sleep(0.1)
            slow.answered()
            await asyncio.sleep(PAST_S)
            silent = hung.unreachable_for
            assert silent is not None and silent >= UNANSWERED_AFTER_S
            assert hung.hung_for is not None
            assert slow.unreachable_for is None and slow.hung_for is None
            assert two.unreachable_for is None  # b:1 may answer
            hung.answered()  # the first answer ends it
            assert hung.unreachable_for is None and hung.hung_for is None
        assert "Retry once it is back" in str(hung.refusal("put 'k'", 3.0, "a reason"))

    asyncio.run(scenario())


def test_a_timed_out_request_counts_from_when_it_was_sent_and_no_waiting_is_no_hang() -> None:
    reachability = Reachability(["a:1"])
    reachability.failed("a:1", since=time.monotonic() - PAST_S)
    silent = reachability.unreachable_for
    assert silent is not None and silent >= UNREACHABLE_AFTER_S
    # Unreachable, but nothing waits there to be answered: a call still gets its one try.
    assert reachability.hung_for is None
    with reachability.asking("a:1"):
        assert reachability.hung_for is not None
    # A failure found at once (a refused connection) counts from now.
    fresh = Reachability(["a:1"])
    fresh.failed("a:1")
    assert fresh.unreachable_for is None


def test_next_answer_wakes_at_the_next_answer_or_says_it_did_not_come() -> None:
    async def scenario() -> None:
        reachability = Reachability(["a:1"])
        assert not await reachability.next_answer(0.05)
        waiter = asyncio.create_task(reachability.next_answer(30))
        await asyncio.sleep(0)
        reachability.answered()
        assert await asyncio.wait_for(waiter, 5)

    asyncio.run(scenario())
