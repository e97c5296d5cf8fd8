"""When one etcd client counts etcd unreachable or hung (coordination/etcd_reachability.py),
from what its requests saw: no server here, real time passing (the rules are about how long
a request waited). tests/cluster/test_etcd.py and test_etcd_hangs.py have the same against a
real etcd."""

from __future__ import annotations

import asyncio
import time

from popmq.coordination.etcd_reachability import (
    PROBE_TIMEOUT_S,
    UNANSWERED_AFTER_S,
    UNREACHABLE_AFTER_S,
    Reachability,
)

PAST_S = max(UNANSWERED_AFTER_S, UNREACHABLE_AFTER_S) + 0.1


def test_a_request_left_unanswered_means_silent_unless_its_endpoint_answered_since() -> None:
    async def scenario() -> None:
        hung = Reachability(["a:1"])
        slow = Reachability(["a:1"])  # a slow request while etcd answers others
        two = Reachability(["a:1", "b:1"])  # one endpoint silent, the other never asked
        with hung.asking("a:1"), slow.asking("a:1"), two.asking("a:1"):
            assert hung.unreachable_for is None and hung.answering("a:1")  # not yet
            await asyncio.sleep(0.1)
            slow.answered("a:1")
            await asyncio.sleep(PAST_S)
            silent = hung.unreachable_for
            assert silent is not None and silent >= UNANSWERED_AFTER_S
            assert not hung.answering("a:1")
            assert slow.unreachable_for is None and slow.answering("a:1")
            assert two.unreachable_for is None  # b:1 may answer
            assert not two.answering("a:1") and two.answering("b:1")
            two.answered("b:1")  # another endpoint's answer says nothing of a:1
            assert not two.answering("a:1")
            hung.answered("a:1")  # the first answer ends it
            assert hung.unreachable_for is None and hung.answering("a:1")
        refused = str(hung.refusal("put 'k'", 3.0, "a reason"))
        assert "put 'k' was refused at once" in refused and "Retry once it is back" in refused
        tried = str(hung.refusal("put 'k'", 3.0, "a reason", tried=True))
        assert "put 'k' failed after one short try of each endpoint" in tried

    asyncio.run(scenario())


def test_hung_only_once_a_probe_has_waited_at_every_endpoint() -> None:
    async def scenario() -> None:
        reachability = Reachability(["a:1", "b:1"])
        with reachability.asking("a:1"), reachability.asking("b:1"):
            await asyncio.sleep(PAST_S)
            # Silent everywhere, but no probe was sent since: a call still gets its one try
            # (the answers may have come while the client's own loop stood still).
            assert reachability.unreachable_for is not None
            assert reachability.hung_for is None
        with reachability.asking("a:1", probe=True), reachability.asking("b:1", probe=True):
            assert reachability.hung_for is None
            await asyncio.sleep(PROBE_TIMEOUT_S + 0.1)
            assert reachability.hung_for is not None
            reachability.answered("b:1")
            assert reachability.hung_for is None and reachability.unreachable_for is None

    asyncio.run(scenario())


def test_a_probe_left_unanswered_is_silence_sooner_than_a_request() -> None:
    async def scenario() -> None:
        reachability = Reachability(["a:1"])
        with reachability.asking("a:1", probe=True):
            await asyncio.sleep(PROBE_TIMEOUT_S + 0.1)
            assert reachability.unreachable_for is not None
            assert reachability.hung_for is not None

    asyncio.run(scenario())


def test_a_failure_counts_from_when_it_was_found_even_after_a_long_wait() -> None:
    async def scenario() -> None:
        reachability = Reachability(["a:1"])
        with reachability.asking("a:1"):
            await asyncio.sleep(PAST_S)
            assert reachability.unreachable_for is not None  # while it waits
        # It timed out: a slow etcd gets the ride-through from now, not a refusal.
        reachability.failed("a:1")
        assert reachability.unreachable_for is None
        assert not reachability.answering("a:1")  # skipped while another may answer
        await asyncio.sleep(UNREACHABLE_AFTER_S + 0.1)
        assert reachability.unreachable_for is not None
        assert reachability.hung_for is None  # failing, nothing waits: no refusal untried

    asyncio.run(scenario())


def test_a_request_left_unanswered_calls_on_silence_once_it_is_overdue() -> None:
    async def scenario() -> None:
        calls: list[float] = []
        began = time.monotonic()
        reachability = Reachability(["a:1"], on_silence=lambda: calls.append(time.monotonic()))
        with reachability.asking("a:1"):
            await asyncio.sleep(PAST_S)
        assert len(calls) == 1 and calls[0] - began >= UNANSWERED_AFTER_S
        with reachability.asking("a:1"):  # merely slow: its endpoint answered meanwhile
            await asyncio.sleep(0.1)
            reachability.answered("a:1")
            await asyncio.sleep(UNANSWERED_AFTER_S)
        assert len(calls) == 1

    asyncio.run(scenario())


def test_next_answer_wakes_at_the_next_answer_or_says_it_did_not_come() -> None:
    async def scenario() -> None:
        reachability = Reachability(["a:1"])
        assert not await reachability.next_answer(0.05)
        waiter = asyncio.create_task(reachability.next_answer(30))
        await asyncio.sleep(0)
        reachability.answered("a:1")
        assert await asyncio.wait_for(waiter, 5)

    asyncio.run(scenario())
