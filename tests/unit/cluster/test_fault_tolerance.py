"""Latency fault tolerance for cluster sends (cluster/fault_tolerance.py), on a fake clock."""

from __future__ import annotations

import asyncio
import collections
import itertools
import zlib
from collections.abc import Mapping, Sequence

import pytest

from popmq.broker_core import (
    InvalidArgumentError,
    NotEnoughReplicasError,
    NotFoundError,
    NotLeaderError,
    PopMQError,
    StoreFullError,
    UnavailableError,
)
from popmq.broker_core.catalog import KIND_NORMAL, TopicInfo
from popmq.broker_core.send import QueueChooser
from popmq.cluster.fault_tolerance import (
    FaultTable,
    Routed,
    SendRouter,
    fifo_queue_index,
    is_broker_failure,
)
from popmq.coordination.config import FaultToleranceConfig
from popmq.coordination.routes import QueueRef

STEPS = (0.05, 0.1, 0.55, 1.8, 3.0, 5.0, 15.0)
ISOLATION = (0.0, 0.0, 2.0, 5.0, 6.0, 10.0, 30.0)
THREE = {"a": [0, 1, 2, 3], "b": [0, 1, 2, 3], "c": [0, 1, 2, 3]}


class FakeClock:
    """Monotonic seconds that move only when a test moves them."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def table_on(clock: FakeClock, **config: object) -> FaultTable:
    return FaultTable(FaultToleranceConfig(**config), clock=clock)  # type: ignore[arg-type]


def pick(table: FaultTable, topic: str, queues: Mapping[str, Sequence[int]]) -> QueueRef:
    """A pick that must find a queue."""
    queue = table.pick(topic, queues)
    assert queue is not None
    return queue


# -- the latency -> isolation table --------------------------------------------------------


def test_defaults_are_rocketmq_5_tables() -> None:
    config = FaultToleranceConfig()
    assert config.enabled
    assert config.latency_thresholds_s == STEPS
    assert config.isolation_s == ISOLATION
    assert config.failure_latency_s == 10.0
    assert config.max_attempts == 3


@pytest.mark.parametrize(("index", "step"), list(enumerate(STEPS)))
def test_every_step_boundary_maps_to_its_isolation(index: int, step: float) -> None:
    config = FaultToleranceConfig()
    below = 0.0 if index == 0 else ISOLATION[index - 1]
    assert config.isolation_for(step) == ISOLATION[index]
    assert config.isolation_for(step - 1e-9) == below


def test_latency_below_the_first_step_and_past_the_last() -> None:
    config = FaultToleranceConfig()
    assert config.isolation_for(0.0) == 0.0
    assert config.isolation_for(0.549) == 0.0
    assert config.isolation_for(3600.0) == 30.0


def test_a_failure_isolates_for_10_s_as_a_10_s_send(clock: FakeClock) -> None:
    table = table_on(clock)
    table.update("a", 0.002, failed=True)
    assert table.isolated_for_s("a") == 10.0
    assert table.snapshot().brokers[0].latency_s == 10.0


def test_a_failure_slower_than_the_charge_is_charged_its_real_time(clock: FakeClock) -> None:
    table = table_on(clock)
    table.update("a", 20.0, failed=True)
    assert table.isolated_for_s("a") == 30.0


# -- isolation and recovery over time ------------------------------------------------------


def test_a_slow_broker_is_isolated_then_back_when_its_time_is_up(clock: FakeClock) -> None:
    table = table_on(clock)
    table.update("a", 0.6, failed=False)
    assert not table.is_available("a")
    clock.advance(1.999)
    assert not table.is_available("a")
    assert table.isolated_for_s("a") == pytest.approx(0.001)
    clock.advance(0.001)
    assert table.is_available("a")
    assert table.isolated_for_s("a") == 0.0


def test_a_fast_send_is_never_isolated_and_unknown_brokers_are_available(
    clock: FakeClock,
) -> None:
    table = table_on(clock)
    table.update("a", 0.549, failed=False)
    assert table.is_available("a")
    assert table.is_available("never-seen")
    assert table.snapshot().isolations == 0


def test_a_fast_success_begun_after_the_failure_ends_the_isolation(clock: FakeClock) -> None:
    table = table_on(clock)
    table.update("a", 0.01, failed=True)
    clock.advance(1.0)
    table.update("a", 0.02, failed=False)  # began 0.98 s after the failure
    assert table.is_available("a")


def test_a_success_begun_before_the_failure_does_not_end_it(clock: FakeClock) -> None:
    table = table_on(clock)
    table.update("a", 0.01, failed=True)
    clock.advance(0.3)
    table.update("a", 0.4, failed=False)  # began 0.1 s before the failure was recorded
    assert table.isolated_for_s("a") == pytest.approx(9.7)


def test_a_shorter_failure_charge_does_not_shorten_a_longer_isolation(clock: FakeClock) -> None:
    table = table_on(clock)
    table.update("a", 16.0, failed=False)  # 30 s
    table.update("a", 0.01, failed=True)  # 10 s
    assert table.isolated_for_s("a") == 30.0


def test_isolations_count_transitions_not_updates(clock: FakeClock) -> None:
    table = table_on(clock)
    table.update("a", 0.01, failed=True)
    table.update("a", 0.01, failed=True)  # already isolated
    clock.advance(10.0)
    table.update("a", 0.01, failed=True)
    snap = table.snapshot()
    assert (snap.isolations, snap.failures) == (2, 3)
    assert (snap.brokers[0].isolations, snap.brokers[0].failures) == (2, 3)


def test_forget_drops_the_broker_but_keeps_the_totals(clock: FakeClock) -> None:
    table = table_on(clock)
    table.update("a", 0.01, failed=True)
    table.update("b", 0.01, failed=False)
    table.forget("a")
    table.forget("gone-already")
    snap = table.snapshot()
    assert [b.broker for b in snap.brokers] == ["b"]
    assert (snap.isolations, snap.failures) == (1, 1)
    assert table.is_available("a")


def test_a_negative_or_infinite_latency_is_refused(clock: FakeClock) -> None:
    table = table_on(clock)
    for bad in (-0.001, float("inf"), float("nan")):
        with pytest.raises(InvalidArgumentError, match=r"latency_s .* must be finite and >= 0"):
            table.update("a", bad, failed=False)


def test_disabled_records_nothing_and_isolates_nobody(clock: FakeClock) -> None:
    table = table_on(clock, enabled=False)
    table.update("a", 0.01, failed=True)
    table.update("b", 20.0, failed=False)
    assert table.is_available("a")
    assert table.is_available("b")
    picked = {table.pick("t", THREE) for _ in range(12)}
    assert len(picked) == 12  # every queue, isolated or not


# -- picking ---------------------------------------------------------------------------------


def test_rotation_gives_every_queue_the_same_share_and_alternates_brokers(
    clock: FakeClock,
) -> None:
    table = table_on(clock)
    picks = [pick(table, "t", THREE) for _ in range(1200)]
    counts = collections.Counter(picks)
    assert len(counts) == 12
    assert set(counts.values()) == {100}
    assert all(a.broker != b.broker for a, b in itertools.pairwise(picks))


def test_an_isolated_brokers_share_is_spread_evenly_over_the_others(clock: FakeClock) -> None:
    table = table_on(clock)
    table.update("b", 0.01, failed=True)
    picks = [pick(table, "t", THREE) for _ in range(800)]
    counts = collections.Counter(picks)
    assert {q.broker for q in counts} == {"a", "c"}
    assert set(counts.values()) == {100}  # each of the 8 queues, no skew to the one after b


def test_a_brokers_share_follows_its_queue_count(clock: FakeClock) -> None:
    table = table_on(clock)
    picks = [pick(table, "t", {"a": [0, 1, 2, 3], "b": [5, 7]}) for _ in range(600)]
    per_broker = collections.Counter(p.broker for p in picks)
    assert per_broker == {"a": 400, "b": 200}
    assert {p.queue_id for p in picks if p.broker == "b"} == {5, 7}


def test_each_topic_rotates_on_its_own(clock: FakeClock) -> None:
    table = table_on(clock)
    queues = {"a": [0], "b": [0]}
    # Interleaved sends of two topics must not lock each topic onto one broker.
    picks = [(pick(table, "x", queues), pick(table, "y", queues)) for _ in range(10)]
    for column in (0, 1):
        assert collections.Counter(p[column].broker for p in picks) == {"a": 5, "b": 5}


def test_the_rotation_positions_are_bounded(clock: FakeClock) -> None:
    table = table_on(clock, max_tracked_topics=1)
    queues = {"a": [0], "b": [0]}
    first = table.pick("x", queues)
    table.pick("y", queues)  # forgets x
    assert table.pick("x", queues) == first  # x starts its rotation again
    assert table.pick("x", queues) != first
    table.forget_topic("x")
    assert table.pick("x", queues) == first


def test_a_route_change_is_followed_at_the_next_pick(clock: FakeClock) -> None:
    table = table_on(clock)
    pick(table, "t", THREE)
    assert pick(table, "t", {"a": [2]}) == QueueRef("a", 2)  # queues of b and c went away
    grown = {**THREE, "d": [0, 1, 2, 3]}
    assert {pick(table, "t", grown) for _ in range(16)} == {
        QueueRef(b, q) for b in "abcd" for q in range(4)
    }


def test_the_rotation_does_not_depend_on_the_order_queues_are_given_in(
    clock: FakeClock,
) -> None:
    ordered, shuffled = table_on(clock), table_on(clock)
    given = {"d": [3, 2, 1, 0], "c": [0, 1, 2, 3], "b": [3, 1, 2, 0], "a": [0, 1, 2, 3]}
    sequence = [pick(shuffled, "t", given) for _ in range(16)]
    in_order = {"a": [0, 1, 2, 3], "b": [0, 1, 2, 3], "c": [0, 1, 2, 3], "d": [0, 1, 2, 3]}
    assert sequence == [pick(ordered, "t", in_order) for _ in range(16)]
    # Interleaved: the brokers in name order, cyclically, then the next queue of each.
    start = "abcd".index(sequence[0].broker)
    assert "".join(q.broker for q in sequence[:4]) == ("abcd" * 2)[start : start + 4]


def test_brokers_without_queues_are_ignored_and_none_means_nothing_to_pick(
    clock: FakeClock,
) -> None:
    table = table_on(clock)
    assert table.pick("t", {}) is None
    assert table.pick("t", {"a": []}) is None
    assert table.pick("t", {"a": [], "b": [3]}) == QueueRef("b", 3)


def test_when_all_are_isolated_the_soonest_back_is_picked(clock: FakeClock) -> None:
    table = table_on(clock)
    table.update("a", 0.01, failed=True)  # 10 s
    table.update("b", 2.0, failed=False)  # 5 s
    table.update("c", 0.01, failed=True)  # 10 s
    picks = {pick(table, "t", THREE) for _ in range(8)}
    assert {p.broker for p in picks} == {"b"}
    assert len(picks) == 4  # rotating over b's queues
    assert table.snapshot().fallback_picks == 8


def test_fallback_ties_go_to_the_lower_latency(clock: FakeClock) -> None:
    table = table_on(clock)
    table.update("a", 0.01, failed=True)  # 10 s, charged 10 s
    table.update("b", 5.5, failed=False)  # 10 s, 5.5 s
    assert table.pick("t", {"a": [0], "b": [0]}) == QueueRef("b", 0)


def test_next_after_failure_picks_another_broker(clock: FakeClock) -> None:
    table = table_on(clock)
    for _ in range(20):
        retry = table.next_after_failure("t", "a", THREE)
        assert retry is not None
        assert retry.broker != "a"
    assert table.next_after_failure("t", "a", {"a": [0, 1]}) is None


def test_avoided_brokers_are_not_picked_even_as_fallback(clock: FakeClock) -> None:
    table = table_on(clock)
    table.update("a", 0.01, failed=True)
    table.update("b", 0.01, failed=True)
    assert table.pick("t", {"a": [0], "b": [0]}, avoid=["a"]) == QueueRef("b", 0)
    assert table.pick("t", {"a": [0], "b": [0]}, avoid=["a", "b"]) is None


# -- FIFO ------------------------------------------------------------------------------------


def test_fifo_hash_is_crc32_of_the_group_as_local_mode_places_it() -> None:
    chooser = QueueChooser()
    for count in (1, 2, 3, 8, 16, 17):
        topic = TopicInfo(
            name="t", topic_id=1, queues=count, message_type=0, kind=KIND_NORMAL, create_time_ms=0
        )
        for group in ("order-1", "order-2", "用户-42", "g" * 200):
            assert fifo_queue_index(group, count) == chooser.choose(topic, group)
    # Pinned: the hash must never change (groups would move, and reorder, on an upgrade).
    assert zlib.crc32(b"order-1") == 3769860079
    assert [fifo_queue_index("order-1", n) for n in (4, 7, 12)] == [3, 6, 7]


def test_fifo_hash_refuses_an_empty_group_or_no_queues() -> None:
    with pytest.raises(InvalidArgumentError, match="message_group is empty"):
        fifo_queue_index("", 4)
    with pytest.raises(InvalidArgumentError, match="queue_count 0 must be at least 1"):
        fifo_queue_index("g", 0)


ROUTE = [QueueRef(b, q) for b in ("a", "b", "c") for q in range(4)]


def test_a_fifo_group_keeps_its_queue(clock: FakeClock) -> None:
    table = table_on(clock)
    for group in (f"group-{i}" for i in range(50)):
        queue = table.pick_fifo("t", group, ROUTE)
        assert queue == ROUTE[zlib.crc32(group.encode()) % 12]
        assert all(table.pick_fifo("t", group, ROUTE) == queue for _ in range(3))


def test_a_fifo_send_to_an_isolated_broker_fails_retriably_and_moves_nothing(
    clock: FakeClock,
) -> None:
    table = table_on(clock)
    groups = [f"group-{i}" for i in range(60)]
    before = {g: table.pick_fifo("t", g, ROUTE) for g in groups}
    table.update("b", 0.01, failed=True)
    for group, queue in before.items():
        if queue.broker != "b":
            assert table.pick_fifo("t", group, ROUTE) == queue  # other groups do not move
            continue
        with pytest.raises(UnavailableError) as caught:
            table.pick_fifo("t", group, ROUTE)
        assert caught.value.retriable
        text = str(caught.value)
        assert f"group {group!r}" in text
        assert "broker 'b'" in text
        assert "isolated for another 10.0 s" in text
        assert "FIFO order forbids moving the group" in text
    refused = sum(q.broker == "b" for q in before.values())
    assert refused > 0
    assert table.snapshot().fifo_refusals == refused
    clock.advance(10.0)
    assert {g: table.pick_fifo("t", g, ROUTE) for g in groups} == before


def test_a_fifo_send_to_a_broker_that_left_fails_and_others_keep_their_queue(
    clock: FakeClock,
) -> None:
    table = table_on(clock)
    group_on_c = next(
        g for g in (f"g{i}" for i in range(100)) if ROUTE[fifo_queue_index(g, 12)].broker == "c"
    )
    group_on_a = next(
        g for g in (f"g{i}" for i in range(100)) if ROUTE[fifo_queue_index(g, 12)].broker == "a"
    )
    with pytest.raises(UnavailableError, match="'c', which is not a live member of the cluster"):
        table.pick_fifo("t", group_on_c, ROUTE, live={"a", "b"})
    assert table.pick_fifo("t", group_on_a, ROUTE, live={"a", "b"}).broker == "a"


def test_a_fifo_send_of_a_topic_without_queues_is_unavailable(clock: FakeClock) -> None:
    with pytest.raises(UnavailableError, match="topic 't' has no queue"):
        table_on(clock).pick_fifo("t", "g", [])


# -- the attempts loop ---------------------------------------------------------------------


class FakeBrokers:
    """A send function over named brokers: each fails with its set error or stores."""

    def __init__(self, clock: FakeClock, *, took_s: float = 0.001) -> None:
        self.clock = clock
        self.took_s = took_s
        self.errors: dict[str, BaseException] = {}
        self.calls: list[QueueRef] = []

    async def send(self, queue: QueueRef) -> str:
        self.calls.append(queue)
        await asyncio.sleep(0)
        self.clock.advance(self.took_s)
        error = self.errors.get(queue.broker)
        if error is not None:
            raise error
        return f"stored on {queue.broker}/{queue.queue_id}"


def run_send(
    router: SendRouter,
    brokers: FakeBrokers,
    queues: Mapping[str, Sequence[int]] = THREE,
    **kwargs: float,
) -> Routed[str]:
    return asyncio.run(router.send("t", queues, brokers.send, **kwargs))


def test_a_broker_failure_is_retried_on_another_broker(clock: FakeClock) -> None:
    table = table_on(clock)
    router = SendRouter(table)
    brokers = FakeBrokers(clock)
    first = table.pick("t", THREE)
    assert first is not None
    table.forget_topic("t")  # the router's first pick is the same queue again
    brokers.errors[first.broker] = UnavailableError(f"broker {first.broker} is down")
    routed = run_send(router, brokers)
    assert routed.attempts == 2
    assert routed.queue.broker != first.broker
    assert routed.result == f"stored on {routed.queue.broker}/{routed.queue.queue_id}"
    assert [q.broker for q in brokers.calls] == [first.broker, routed.queue.broker]
    assert not table.is_available(first.broker)
    assert table.snapshot().retries == 1


@pytest.mark.parametrize(
    ("error", "moved"),
    [
        (UnavailableError("down"), True),
        (StoreFullError("disk full"), True),
        (TimeoutError(), False),
        (type("DeadlineError", (PopMQError,), {"code": "DEADLINE_EXCEEDED"})("slow"), False),
    ],
    ids=["unavailable", "resource-exhausted", "timeout", "deadline-exceeded"],
)
def test_broker_failures_are_retried(clock: FakeClock, error: BaseException, moved: bool) -> None:
    """A refusal on another broker; a timeout, which may have been stored, on the same one
    (tests/unit/cluster/test_send_outcome.py has the rest)."""
    assert is_broker_failure(error)
    table = table_on(clock)
    first = table.pick("t", THREE)
    assert first is not None
    table.forget_topic("t")
    failing = FakeBrokers(clock)
    failing.errors = {first.broker: error}

    async def scenario() -> Routed[str]:
        router = SendRouter(table, sleep=lambda _: asyncio.sleep(0))
        attempt = 0

        async def send(queue: QueueRef) -> str:
            nonlocal attempt
            attempt += 1
            if attempt > 1:
                failing.errors.clear()  # the first try alone fails
            return await failing.send(queue)

        return await router.send("t", THREE, send)

    routed = asyncio.run(scenario())
    assert routed.attempts == 2
    assert (routed.queue.broker != first.broker) is moved


@pytest.mark.parametrize(
    "refusal",
    [NotEnoughReplicasError("0 in-sync followers"), NotLeaderError("taking over at epoch 9")],
    ids=["too-few-in-sync", "taking-over"],
)
def test_a_shard_refusing_for_moments_is_tried_elsewhere_but_not_isolated(
    clock: FakeClock, refusal: PopMQError
) -> None:
    # A replicated shard refuses sends until a follower catches up (seconds): the send goes
    # to another broker at once, and the shard is not kept out for a 10 s isolation.
    table = table_on(clock)
    router = SendRouter(table)
    brokers = FakeBrokers(clock)
    first = table.pick("t", THREE)
    assert first is not None
    table.forget_topic("t")
    brokers.errors[first.broker] = refusal
    routed = run_send(router, brokers)
    assert routed.attempts == 2 and routed.queue.broker != first.broker
    assert table.is_available(first.broker)
    assert table.snapshot().failures == 0


@pytest.mark.parametrize(
    "error",
    [InvalidArgumentError("body too large"), NotFoundError("no topic"), ValueError("bug")],
    ids=["invalid-argument", "not-found", "not-a-popmq-error"],
)
def test_request_errors_are_not_retried_and_isolate_nobody(
    clock: FakeClock, error: Exception
) -> None:
    table = table_on(clock)
    brokers = FakeBrokers(clock)
    brokers.errors = {b: error for b in THREE}
    with pytest.raises(type(error)):
        run_send(SendRouter(table), brokers)
    assert len(brokers.calls) == 1
    assert all(table.is_available(b) for b in THREE)
    snap = table.snapshot()
    assert (snap.retries, snap.exhausted, snap.failures) == (0, 0, 0)


def test_when_every_attempt_fails_the_last_error_is_raised(clock: FakeClock) -> None:
    table = table_on(clock)
    brokers = FakeBrokers(clock)
    brokers.errors = {b: UnavailableError(f"{b} down") for b in ("a", "b", "c", "d")}
    with pytest.raises(UnavailableError) as caught:
        run_send(SendRouter(table), brokers, {b: [0] for b in "abcd"})
    tried = [q.broker for q in brokers.calls]
    assert len(tried) == 3
    assert len(set(tried)) == 3
    assert str(caught.value) == f"{tried[-1]} down"
    snap = table.snapshot()
    assert (snap.retries, snap.exhausted) == (2, 1)


def test_a_send_is_never_tried_twice_on_one_broker(clock: FakeClock) -> None:
    brokers = FakeBrokers(clock)
    brokers.errors = {"a": UnavailableError("a down"), "b": UnavailableError("b down")}
    with pytest.raises(UnavailableError):
        run_send(SendRouter(table_on(clock)), brokers, {"a": [0, 1], "b": [0, 1]})
    assert sorted(q.broker for q in brokers.calls) == ["a", "b"]


def test_max_attempts_1_does_not_retry(clock: FakeClock) -> None:
    brokers = FakeBrokers(clock)
    brokers.errors = {b: UnavailableError("down") for b in THREE}
    with pytest.raises(UnavailableError):
        run_send(SendRouter(table_on(clock, max_attempts=1)), brokers)
    assert len(brokers.calls) == 1


def test_no_attempt_starts_after_the_deadline(clock: FakeClock) -> None:
    brokers = FakeBrokers(clock, took_s=1.0)
    brokers.errors = {b: UnavailableError("down") for b in THREE}
    with pytest.raises(UnavailableError):
        run_send(SendRouter(table_on(clock)), brokers, deadline=clock.now + 1.5)
    assert len(brokers.calls) == 2  # the second started at +1.0, the third would at +2.0


def test_the_send_latency_is_recorded(clock: FakeClock) -> None:
    table = table_on(clock)
    brokers = FakeBrokers(clock, took_s=0.6)
    routed = run_send(SendRouter(table), brokers)
    assert routed.attempts == 1
    assert table.isolated_for_s(routed.queue.broker) == 2.0
    assert table.snapshot().brokers[0].latency_s == pytest.approx(0.6)


def test_a_topic_without_writable_queues_is_unavailable(clock: FakeClock) -> None:
    brokers = FakeBrokers(clock)
    with pytest.raises(UnavailableError, match="topic 't' has no writable queue on a live"):
        run_send(SendRouter(table_on(clock)), brokers, {})
    assert brokers.calls == []


def test_a_cancelled_send_records_nothing(clock: FakeClock) -> None:
    table = table_on(clock)
    router = SendRouter(table)

    async def hangs(queue: QueueRef) -> str:
        clock.advance(20.0)
        await asyncio.Event().wait()
        raise AssertionError("never set")

    async def scenario() -> None:
        task = asyncio.create_task(router.send("t", THREE, hangs))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert table.snapshot().brokers == ()


def test_a_dead_broker_costs_the_clients_no_error(clock: FakeClock) -> None:
    """Steady sends while broker b is dead: every send succeeds, and b is tried once per
    isolation (10 s) rather than once per rotation."""
    table = table_on(clock)
    router = SendRouter(table)
    brokers = FakeBrokers(clock, took_s=0.01)
    brokers.errors["b"] = UnavailableError("connection refused")
    results = [run_send(router, brokers) for _ in range(1500)]  # 15 s of fake time
    assert all(r.queue.broker in ("a", "c") for r in results)
    assert sum(q.broker == "b" for q in brokers.calls) == 2  # at 0 s and once back at ~10 s
    snap = table.snapshot()
    assert (snap.exhausted, snap.retries, snap.isolations) == (0, 2, 2)


def test_a_fifo_send_goes_to_its_queue_once(clock: FakeClock) -> None:
    table = table_on(clock)
    router = SendRouter(table)
    brokers = FakeBrokers(clock)
    group = "order-1"
    home = ROUTE[fifo_queue_index(group, len(ROUTE))]
    routed = asyncio.run(router.send_fifo("t", group, ROUTE, brokers.send))
    assert (routed.queue, routed.attempts) == (home, 1)
    brokers.errors[home.broker] = UnavailableError("down")
    with pytest.raises(UnavailableError, match="down"):
        asyncio.run(router.send_fifo("t", group, ROUTE, brokers.send))
    assert brokers.calls == [home, home]  # not moved to another broker
    with pytest.raises(UnavailableError, match="FIFO order forbids"):
        asyncio.run(router.send_fifo("t", group, ROUTE, brokers.send))
    assert len(brokers.calls) == 2  # refused without a call while isolated
    snap = table.snapshot()
    assert (snap.retries, snap.exhausted, snap.fifo_refusals) == (0, 1, 1)


# -- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"latency_thresholds_s": (), "isolation_s": ()}, "must have at least one step"),
        (
            {"isolation_s": (0.0, 0.0, 2.0, 5.0, 6.0, 10.0)},
            "isolation_s has 6 entries for 7 latency_thresholds_s: give one isolation per",
        ),
        (
            {"latency_thresholds_s": (0.05, 0.1, 0.1, 1.8, 3.0, 5.0, 15.0)},
            r"latency_thresholds_s \(0.05, 0.1, 0.1, .*\) must be strictly ascending",
        ),
        (
            {"isolation_s": (0.0, 0.0, 2.0, 1.0, 6.0, 10.0, 30.0)},
            "must not decrease: a slower send must not isolate",
        ),
        (
            {"latency_thresholds_s": (-0.05, 0.1, 0.55, 1.8, 3.0, 5.0, 15.0)},
            "latency_thresholds_s .* has -0.05: every entry must be a finite number >= 0",
        ),
        (
            {"isolation_s": (0.0, 0.0, 2.0, 5.0, 6.0, 10.0, float("inf"))},
            "isolation_s .* has inf: every entry must be a finite number >= 0",
        ),
        ({"failure_latency_s": 0.0}, r"failure_latency_s 0.0 must be a finite number > 0"),
        ({"max_attempts": 0}, r"max_attempts 0 must be at least 1 \(1 = no retry\)"),
        ({"max_tracked_topics": 0}, "max_tracked_topics 0 must be at least 1"),
    ],
)
def test_config_errors_say_what_is_allowed(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FaultToleranceConfig(**fields)  # type: ignore[arg-type]


def test_config_is_frozen_and_keyword_only() -> None:
    config = FaultToleranceConfig(max_attempts=2)
    with pytest.raises(AttributeError):
        config.max_attempts = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        FaultToleranceConfig(True)  # type: ignore[call-arg]


def test_a_custom_table_is_used(clock: FakeClock) -> None:
    table = table_on(
        clock, latency_thresholds_s=(0.2, 1.0), isolation_s=(1.0, 4.0), failure_latency_s=1.0
    )
    table.update("a", 0.3, failed=False)
    table.update("b", 0.0, failed=True)
    assert (table.isolated_for_s("a"), table.isolated_for_s("b")) == (1.0, 4.0)


def test_a_failure_of_a_send_begun_before_the_broker_registered_again_is_not_recorded(
    clock: FakeClock,
) -> None:
    # A paused shard leader's calls time out after its successor registered: that failure
    # is the old process's, and must not isolate the new leader.
    table = table_on(clock)
    clock.advance(5.0)
    table.forget("a")  # "a" registered again (a new leader)
    clock.advance(5.0)
    table.update("a", 10.0, failed=True)  # begun 10 s ago, before the forget
    assert table.is_available("a")
    table.update("a", 1.0, failed=True)  # begun after it
    assert not table.is_available("a")
