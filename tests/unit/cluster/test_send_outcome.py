"""Retries that never store a second copy: which failed sends may have been stored
(cluster/send_outcome.py), where the SendRouter retries them (cluster/fault_tolerance.py),
and the proxy's memory of where recent sends went (cluster/in_doubt.py). On a fake clock."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

import pytest

from popmq.broker_core import (
    NewMessage,
    NotLeaderError,
    OutcomeUnknownError,
    StoreFullError,
    UnavailableError,
)
from popmq.broker_core.message_id import MessageIdGenerator
from popmq.cluster.fault_tolerance import FaultTable, Routed, SendRouter
from popmq.cluster.in_doubt import InDoubtSends, send_keys
from popmq.cluster.send_outcome import BrokerUnansweredError, known_down, may_be_stored
from popmq.coordination.config import FaultToleranceConfig
from popmq.coordination.routes import QueueRef

THREE = {"a": [0, 1], "b": [0, 1], "c": [0, 1]}
REFUSED = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
    "Failed to connect to remote host: Connection refused"
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


class Brokers:
    """A send function over named brokers: each answers its scripted errors in turn, then
    stores; `stored` counts the copies each broker holds of the (one) message."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.script: dict[str, list[BaseException | None]] = {}
        self.always: dict[str, BaseException] = {}
        self.calls: list[str] = []
        self.stored: dict[str, int] = {}

    async def send(self, queue: QueueRef) -> str:
        broker = queue.broker
        self.calls.append(broker)
        await asyncio.sleep(0)
        self.clock.now += 0.01
        steps = self.script.get(broker)
        error = steps.pop(0) if steps else self.always.get(broker)
        if isinstance(error, _StoredThenLost):
            self.stored[broker] = 1  # dedup: one copy however often it is repeated
            raise error.error
        if error is not None:
            raise error
        self.stored[broker] = 1
        return broker


class _StoredThenLost(Exception):
    """Script step: the broker stores the send, then its answer is lost."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def dropped() -> BrokerUnansweredError:
    return BrokerUnansweredError.from_status(
        "broker 'x' is unavailable", code="UNAVAILABLE", details="Socket closed"
    )


def refused() -> BrokerUnansweredError:
    return BrokerUnansweredError.from_status(
        "broker 'x' is unavailable", code="UNAVAILABLE", details=REFUSED
    )


def router_on(clock: FakeClock, **config: float) -> SendRouter:
    table = FaultTable(FaultToleranceConfig(**config), clock=clock)  # type: ignore[arg-type]
    return SendRouter(table, sleep=clock.sleep)


def first_pick(router: SendRouter, queues: Mapping[str, Sequence[int]] = THREE) -> str:
    queue = router.table.pick("t", queues)
    assert queue is not None
    router.table.forget_topic("t")  # the router's own first pick is this one again
    return queue.broker


def run(
    router: SendRouter,
    brokers: Brokers,
    queues: Mapping[str, Sequence[int]] = THREE,
    **kwargs: object,
) -> Routed[str]:
    return asyncio.run(router.send("t", queues, brokers.send, **kwargs))  # type: ignore[arg-type]


# -- what may have been stored ---------------------------------------------------------------


def test_only_a_call_that_never_connected_or_a_broker_refusal_is_provably_not_stored() -> None:
    assert may_be_stored(dropped())
    assert may_be_stored(
        BrokerUnansweredError.from_status("slow", code="DEADLINE_EXCEEDED", details=REFUSED)
    )
    assert may_be_stored(TimeoutError())
    assert may_be_stored(OutcomeUnknownError("the WAL sync failed"))
    not_sent = refused()
    assert not may_be_stored(not_sent) and known_down(not_sent)
    silent = BrokerUnansweredError.from_status(
        "x",
        code="UNAVAILABLE",
        details="failed to connect to all addresses; last error: Timeout occurred",
    )
    assert not may_be_stored(silent) and not known_down(silent)
    for refusal in (
        UnavailableError("broker 'b1' refuses writes: fenced; retry later"),
        NotLeaderError("follows r1"),
        StoreFullError("disk full"),
    ):
        assert not may_be_stored(refusal) and not known_down(refusal)
    assert not known_down(dropped())


# -- where the router retries ----------------------------------------------------------------


def test_a_send_stored_but_unanswered_is_retried_on_its_broker_and_stored_once() -> None:
    clock = FakeClock()
    router = router_on(clock)
    brokers = Brokers(clock)
    home = first_pick(router)
    brokers.script[home] = [_StoredThenLost(dropped()), _StoredThenLost(TimeoutError())]
    routed = run(router, brokers)
    assert routed.result == home and routed.attempts == 3
    assert brokers.calls == [home, home, home]
    assert brokers.stored == {home: 1}
    assert router.in_doubt_counts == (2, 0, 0)
    (state,) = [b for b in router.table.snapshot().brokers if b.broker == home]
    assert state.unknown_outcomes == 2  # exported per broker (popmq_broker_send_unknown_...)


def test_an_unknown_outcome_never_moves_and_fails_retriably_after_the_retry_time() -> None:
    clock = FakeClock()
    router = router_on(clock, in_doubt_retry_s=3.0)
    brokers = Brokers(clock)
    home = first_pick(router)
    brokers.always[home] = BrokerUnansweredError.from_status(
        "broker paused", code="DEADLINE_EXCEEDED", details="Deadline Exceeded"
    )
    began = clock.now
    with pytest.raises(OutcomeUnknownError) as caught:
        run(router, brokers)
    assert set(brokers.calls) == {home} and len(brokers.calls) > 3
    assert 3.0 <= clock.now - began < 5.0
    assert caught.value.retriable and caught.value.code == "UNAVAILABLE"
    assert f"may or may not be stored on broker {home!r}" in str(caught.value)
    assert "the last: broker paused" in str(caught.value)
    assert router.in_doubt_counts[1] == 1
    # A broker's own refusal after the unknown try does not move it either.
    brokers.always[home] = UnavailableError("refuses writes: its registration was lost")
    brokers.calls.clear()
    with pytest.raises(OutcomeUnknownError):
        run(router, brokers, pinned=home)
    assert set(brokers.calls) == {home}


def test_an_unknown_outcome_is_tried_again_no_later_than_the_deadline() -> None:
    clock = FakeClock()
    router = router_on(clock, in_doubt_retry_s=5.0)
    brokers = Brokers(clock)
    home = first_pick(router)
    brokers.always[home] = dropped()
    began = clock.now
    with pytest.raises(OutcomeUnknownError, match=f"may or may not be stored on broker {home!r}"):
        run(router, brokers, deadline=began + 1.5)
    assert set(brokers.calls) == {home}
    assert began + 1.5 <= clock.now < began + 3.0  # not the 5 s window


def test_a_send_that_never_left_moves_to_another_broker_at_once() -> None:
    clock = FakeClock()
    router = router_on(clock)
    brokers = Brokers(clock)
    home = first_pick(router)
    brokers.always[home] = refused()
    routed = run(router, brokers)
    assert routed.result != home and brokers.calls == [home, routed.result]
    assert router.in_doubt_counts == (0, 0, 0)


def test_an_unknown_send_moves_on_once_its_broker_is_known_down() -> None:
    clock = FakeClock()
    router = router_on(clock)
    brokers = Brokers(clock)
    home = first_pick(router)
    brokers.script[home] = [dropped(), refused()]
    routed = run(router, brokers)
    assert brokers.calls == [home, home, routed.result] and routed.result != home
    assert router.in_doubt_counts == (2, 0, 1)


def test_a_pinned_send_goes_to_its_broker_even_when_it_is_isolated_or_not_writable() -> None:
    clock = FakeClock()
    router = router_on(clock)
    router.table.update("b", 0.0, failed=True)
    brokers = Brokers(clock)
    routed = run(router, brokers, {"a": [0], "c": [0]}, pinned="b")
    assert (routed.result, brokers.calls) == ("b", ["b"])


def test_an_unreachable_broker_gets_no_send_until_it_is_reachable_again() -> None:
    clock = FakeClock()
    router = router_on(clock)
    table = router.table
    assert table.unreachable("b") and not table.unreachable("b")  # once: one probe
    clock.now += 3600  # no fixed isolation ends a quarantine
    picked = {pick.broker for _ in range(30) if (pick := table.pick("t", THREE)) is not None}
    assert picked == {"a", "c"}
    assert not table.is_available("b") and table.isolated_for_s("b") > 0
    with pytest.raises(UnavailableError, match="cannot be reached now"):
        table.pick_fifo("t", "g", [QueueRef("b", 0)])
    # Every other broker out too: the quarantined one is taken last, not never.
    table.update("a", 0.0, failed=True)
    table.update("c", 0.0, failed=True)
    assert table.pick("t", {"a": [0], "b": [0]}) == QueueRef("a", 0)
    table.reachable("b")  # the probe saw its connection up: its failures' isolation ends
    assert table.is_available("b") and table.isolated_for_s("b") == 0.0
    # A send that got an answer from it ends the quarantine as well.
    table.unreachable("c")
    table.update("c", 0.01, failed=False)
    assert table.is_reachable("c")


def test_the_snapshot_says_how_long_a_broker_has_been_quarantined() -> None:
    clock = FakeClock()
    table = FaultTable(clock=clock)
    table.update("a", 0.01, failed=False)
    table.unreachable("b")
    clock.now += 12.0
    table.update("b", 0.0, failed=True)  # a failed try meanwhile does not restart the count
    shown = {state.broker: state.quarantined_for_s for state in table.snapshot().brokers}
    assert shown == {"a": None, "b": 12.0}
    table.reachable("b")
    assert [s.quarantined_for_s for s in table.snapshot().brokers] == [None, None]


def test_a_disabled_table_quarantines_nothing() -> None:
    router = router_on(FakeClock(), enabled=False)
    assert not router.table.unreachable("b") and router.table.is_available("b")


def test_a_repeat_pinned_to_an_unreachable_broker_waits_for_it_then_goes_there() -> None:
    clock = FakeClock()
    brokers = Brokers(clock)
    table = FaultTable(clock=clock)
    table.unreachable("b")
    began = clock.now

    async def sleep(seconds: float) -> None:
        await clock.sleep(seconds)
        assert router.quarantine_waits == (1, 1) and brokers.calls == []
        if clock.now - began >= 2.0:
            table.reachable("b")  # the probe saw its connection up

    router = SendRouter(table, sleep=sleep)
    routed = run(router, brokers, pinned="b")
    assert (routed.result, brokers.calls) == ("b", ["b"])
    assert router.quarantine_waits == (0, 1) and router.in_doubt_counts == (0, 0, 0)


def test_a_repeat_whose_broker_stays_unreachable_fails_after_the_window_and_goes_nowhere() -> None:
    clock = FakeClock()
    router = router_on(clock, in_doubt_retry_s=3.0)
    brokers = Brokers(clock)
    router.table.unreachable("b")
    began = clock.now
    with pytest.raises(
        OutcomeUnknownError, match=r"cannot be reached now.*waited 3\.0 s"
    ) as caught:
        run(router, brokers, pinned="b")
    assert caught.value.retriable and brokers.calls == []
    assert began + 3.0 <= clock.now < began + 3.5  # the fake clock: the window, not more
    assert router.in_doubt_counts == (0, 1, 0) and router.quarantine_waits == (0, 1)
    # A new send (nothing pinned) goes to a broker that is reachable.
    routed = run(router, brokers)
    assert routed.result != "b" and routed.attempts == 1


def test_a_repeat_waits_no_longer_than_its_deadline() -> None:
    clock = FakeClock()
    router = router_on(clock)
    router.table.unreachable("b")
    began = clock.now
    with pytest.raises(OutcomeUnknownError, match="cannot be reached now"):
        run(router, Brokers(clock), pinned="b", deadline=began + 1.0)
    assert began + 1.0 <= clock.now < began + 1.5


def test_waiting_repeats_are_bounded_and_the_rest_fail_at_once() -> None:
    clock = FakeClock()
    router = router_on(clock, quarantine_max_waiting=2)
    brokers = Brokers(clock)
    router.table.unreachable("b")

    async def scenario() -> None:
        waiting = [
            asyncio.create_task(router.send("t", THREE, brokers.send, pinned="b")) for _ in range(2)
        ]
        await asyncio.sleep(0)
        assert router.quarantine_waits == (2, 2)
        with pytest.raises(OutcomeUnknownError, match=r"not waited: .*quarantine_max_waiting is 2"):
            await router.send("t", THREE, brokers.send, pinned="b")
        router.table.reachable("b")
        routed = await asyncio.gather(*waiting)
        assert [r.result for r in routed] == ["b", "b"]

    asyncio.run(scenario())
    assert router.quarantine_waits == (0, 2) and brokers.calls == ["b", "b"]


def test_a_cancelled_repeat_stops_waiting() -> None:
    clock = FakeClock()
    brokers = Brokers(clock)
    gate = asyncio.Event()

    async def sleep(seconds: float) -> None:
        gate.set()
        await asyncio.Event().wait()  # the client goes away meanwhile

    router = SendRouter(FaultTable(clock=clock), sleep=sleep)
    router.table.unreachable("b")

    async def scenario() -> None:
        task = asyncio.create_task(router.send("t", THREE, brokers.send, pinned="b"))
        await gate.wait()
        assert router.quarantine_waits == (1, 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert router.quarantine_waits == (0, 1) and brokers.calls == []


def test_waits_and_refusals_are_counted_per_broker_and_a_refusal_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    router = router_on(clock, quarantine_max_waiting=1)
    brokers = Brokers(clock)
    router.table.unreachable("b")

    def counts() -> tuple[int, int, int]:
        (state,) = [s for s in router.table.snapshot().brokers if s.broker == "b"]
        return (state.quarantine_waiting, state.quarantine_waits, state.quarantine_wait_refusals)

    async def scenario() -> None:
        waiting = asyncio.create_task(router.send("t", THREE, brokers.send, pinned="b"))
        await asyncio.sleep(0)
        assert counts() == (1, 1, 0)
        for _ in range(3):
            with pytest.raises(OutcomeUnknownError, match="quarantine_max_waiting is 1"):
                await router.send("t", THREE, brokers.send, pinned="b")
        assert counts() == (1, 1, 3) and router.quarantine_wait_refusals == 3
        router.table.reachable("b")
        await waiting

    with caplog.at_level(logging.WARNING, logger="popmq.cluster.fault_tolerance"):
        asyncio.run(scenario())
    assert counts() == (0, 1, 3)
    (record,) = [r for r in caplog.records if "quarantine_max_waiting" in r.getMessage()]
    assert "quarantined broker b failed at once" in record.getMessage()


def test_a_repeat_with_no_time_left_fails_at_once_and_is_not_counted_as_a_wait() -> None:
    clock = FakeClock()
    router = router_on(clock, in_doubt_retry_s=0.0)
    router.table.unreachable("b")
    began = clock.now
    with pytest.raises(OutcomeUnknownError, match="not waited: no time was left"):
        run(router, Brokers(clock), pinned="b")
    assert clock.now == began and router.quarantine_waits == (0, 0)
    # Nor when the call's deadline has passed.
    router = router_on(clock)
    router.table.unreachable("b")
    with pytest.raises(OutcomeUnknownError, match="not waited: no time was left"):
        run(router, Brokers(clock), pinned="b", deadline=clock.now - 1.0)
    assert router.quarantine_waits == (0, 0)


def test_no_wait_when_quarantine_max_waiting_is_0() -> None:
    clock = FakeClock()
    router = router_on(clock, quarantine_max_waiting=0)
    router.table.unreachable("b")
    began = clock.now
    with pytest.raises(OutcomeUnknownError, match=r"not waited: .*quarantine_max_waiting is 0"):
        run(router, Brokers(clock), pinned="b")
    assert clock.now == began and router.quarantine_waits == (0, 0)


# -- the proxy's memory of where sends went --------------------------------------------------


def keys(*ids: str) -> list[tuple[str, str]]:
    return [("t", i) for i in ids]


def test_the_keys_are_the_dedup_ids_or_else_the_message_ids() -> None:
    ids = MessageIdGenerator()
    plain = NewMessage(topic="t", body=b"x", message_id=ids.next())
    deduped = NewMessage(topic="t", body=b"y", message_id=ids.next(), dedup_id="order-7")
    assert send_keys([plain, deduped]) == [("t", plain.message_id), ("t", "order-7")]


def test_a_send_in_flight_is_remembered_and_a_quick_stored_one_forgotten() -> None:
    clock = FakeClock()
    memory = InDoubtSends(clock, keep_s=300, quick_s=1.0)
    memory.sending(keys("m1", "m2"), "b2")
    clock.now += 3600  # in flight: kept whatever the time
    assert memory.broker_of(keys("x", "m2")) == "b2"
    memory.done(keys("m1", "m2"), "b2", took_s=0.01, stored=True)
    assert memory.broker_of(keys("m1")) is None and len(memory) == 0


@pytest.mark.parametrize(
    ("took_s", "stored"), [(2.0, True), (0.01, False)], ids=["slow", "unknown"]
)
def test_a_slow_or_unknown_send_is_remembered_for_the_dedup_window(
    took_s: float, stored: bool
) -> None:
    clock = FakeClock()
    memory = InDoubtSends(clock, keep_s=300, quick_s=1.0)
    memory.sending(keys("m1"), "b2")
    memory.done(keys("m1"), "b2", took_s=took_s, stored=stored)
    clock.now += 299
    assert memory.broker_of(keys("m1")) == "b2"
    clock.now += 2
    assert memory.broker_of(keys("m1")) is None and len(memory) == 0


def test_a_refusal_forgets_a_send_unless_an_earlier_try_was_unknown() -> None:
    clock = FakeClock()
    memory = InDoubtSends(clock)
    memory.sending(keys("m1"), "b2")
    memory.refused(keys("m1"), "b2")
    assert memory.broker_of(keys("m1")) is None
    memory.sending(keys("m2"), "b2")
    memory.done(keys("m2"), "b2", took_s=0.01, stored=False)
    memory.sending(keys("m2"), "b2")  # the retry on the same broker
    memory.refused(keys("m2"), "b2")
    assert memory.broker_of(keys("m2")) == "b2"
    memory.sending(keys("m2"), "b2")
    memory.done(keys("m2"), "b2", took_s=0.01, stored=True)  # answered: still kept
    assert memory.broker_of(keys("m2")) == "b2"
    memory.sending(keys("m2"), "b1")  # moved off a broker known down: the newest place
    assert memory.broker_of(keys("m2")) == "b1"


def test_the_memory_is_bounded_and_forgets_the_oldest_first() -> None:
    memory = InDoubtSends(FakeClock(), max_entries=3)
    for i in range(5):
        memory.sending(keys(f"m{i}"), "b1")
    assert len(memory) == 3
    assert memory.broker_of(keys("m0")) is None and memory.broker_of(keys("m1")) is None
    assert memory.broker_of(keys("m4")) == "b1"


def test_the_in_doubt_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="in_doubt_retry_s -1"):
        FaultToleranceConfig(in_doubt_retry_s=-1)
    with pytest.raises(ValueError, match="in_doubt_keep_s 0"):
        FaultToleranceConfig(in_doubt_keep_s=0)
    with pytest.raises(ValueError, match="in_doubt_max_sends 0"):
        FaultToleranceConfig(in_doubt_max_sends=0)
