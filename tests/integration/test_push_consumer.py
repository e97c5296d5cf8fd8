"""PushConsumer in POP mode against the real server: listener results, flow control, lease
renewal, retries to the DLQ, FIFO groups and a graceful close."""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from popmq import (
    Admin,
    AsyncPushConsumer,
    ConsumeResult,
    InvalidArgumentError,
    Message,
    NotFoundError,
    Producer,
    PushConsumer,
    PushConsumerOptions,
    PushConsumerStats,
    ReceivedMessage,
    SimpleConsumer,
)
from tests.support.server_thread import ServerThread
from tests.support.waiting import wait_until

WAIT = 30.0
"""Generous bound for anything the tests wait for; never expected to be reached."""


class Recorder:
    """A listener that records deliveries and answers with a programmable result."""

    def __init__(self, decide: Callable[[ReceivedMessage], ConsumeResult] | None = None) -> None:
        self._decide = decide or (lambda _m: ConsumeResult.SUCCESS)
        self._cond = threading.Condition()
        self.calls: list[ReceivedMessage] = []

    def __call__(self, message: ReceivedMessage) -> ConsumeResult:
        with self._cond:
            self.calls.append(message)
            self._cond.notify_all()
        return self._decide(message)

    def wait_for(self, count: int, timeout: float = WAIT) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.calls) >= count, timeout):
                raise AssertionError(f"{len(self.calls)} of {count} deliveries within {timeout}s")


def send(endpoint: str, topic: str, bodies: list[bytes], **fields: str) -> None:
    with Producer(endpoint) as producer:
        for start in range(0, len(bodies), 100):
            producer.send_batch(topic, [Message(b, **fields) for b in bodies[start : start + 100]])


def receive_eventually(endpoint: str, group: str, topic: str) -> list[ReceivedMessage]:
    """Receive from a topic that may not exist yet (a DLQ appears with its first message)."""
    got: list[ReceivedMessage] = []

    def attempt() -> bool:
        try:
            with SimpleConsumer(endpoint, group=group, topic=topic) as consumer:
                got.extend(consumer.receive(wait_s=1.0))
                consumer.ack(got)
        except NotFoundError:
            return False
        return bool(got)

    wait_until(attempt, "a first receive of the group", WAIT)
    return got


def settled(endpoint: str, group: str, topic: str) -> bool:
    """Every message of the topic is acked by the group (nothing in flight, no lag)."""
    with Admin(endpoint) as admin:
        rows = admin.get_group_lag(group, topic)
    return all(r.lag == 0 and r.inflight == 0 for r in rows if not r.retry)


@pytest.mark.slow
def test_every_message_reaches_the_listener_once_and_success_acks_it(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("orders", queues=4)
    bodies = [f"m{i}".encode() for i in range(300)]
    send(endpoint, "orders", bodies)
    listener = Recorder()
    with PushConsumer(
        endpoint, "billing", subscriptions={"orders": "*"}, listener=listener, consume_threads=8
    ) as consumer:
        listener.wait_for(300)
        wait_until(lambda: consumer.stats.acked == 300, "300 acks", WAIT)
    assert sorted(m.body for m in listener.calls) == sorted(bodies)
    assert {m.delivery_attempt for m in listener.calls} == {1}
    assert settled(endpoint, "billing", "orders")
    stats = consumer.stats
    assert (stats.received, stats.succeeded, stats.failed) == (300, 300, 0)
    assert (stats.cached_messages, stats.cached_bytes) == (0, 0)


def test_a_tag_expression_subscription_delivers_only_matching_tags(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("tags", queues=2)
    with Producer(endpoint) as producer:
        for tag in ["TagA", "TagB", "TagC", "TagA"]:
            producer.send("tags", tag.encode(), tag=tag)
        producer.send("tags", b"last", tag="TagB")
    listener = Recorder()
    with PushConsumer(
        endpoint, "g", subscriptions={"tags": "TagA || TagB"}, listener=listener
    ) as consumer:
        listener.wait_for(4)
        wait_until(lambda: consumer.stats.acked == 4, "4 acks", WAIT)
    assert sorted(m.tag for m in listener.calls) == ["TagA", "TagA", "TagB", "TagB"]


def test_a_slow_listener_keeps_its_message_by_renewing_the_lease(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("slow", queues=1)
    send(endpoint, "slow", [b"takes a while"])
    finished = threading.Event()

    def slow(message: ReceivedMessage) -> ConsumeResult:
        # Four invisible durations: without renewal it would be redelivered meanwhile.
        time.sleep(4.0)
        finished.set()
        return ConsumeResult.SUCCESS

    slow_listener = Recorder(slow)
    rival = Recorder()
    options = {"invisible_duration_s": 1.0, "wait_s": 1.0}
    with (
        PushConsumer(
            endpoint, "g", subscriptions={"slow": "*"}, listener=slow_listener, **options
        ) as consumer,
        PushConsumer(endpoint, "g", subscriptions={"slow": "*"}, listener=rival, **options),
    ):
        slow_listener.wait_for(1)
        assert finished.wait(WAIT)
        wait_until(lambda: consumer.stats.acked == 1, "1 ack", WAIT)
    assert len(slow_listener.calls) == 1
    assert rival.calls == []  # never redelivered to the other member
    assert consumer.stats.renewed >= 2
    assert settled(endpoint, "g", "slow")


def test_a_message_held_past_max_processing_time_is_released(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("stuck", queues=1)
    send(endpoint, "stuck", [b"never finishes in time"])
    release = threading.Event()

    def stuck(message: ReceivedMessage) -> ConsumeResult:
        release.wait(WAIT)
        return ConsumeResult.SUCCESS

    listener = Recorder(stuck)
    with PushConsumer(
        endpoint,
        "g",
        subscriptions={"stuck": "*"},
        listener=listener,
        # The release is decided when the first renewal falls due (4 s, two thirds of the
        # invisible time), 2 s before the message would come back on its own: a late
        # renewal on a busy machine still releases it rather than letting it expire.
        invisible_duration_s=6.0,
        max_processing_s=1.0,
        max_cached_messages=1,  # the running listener keeps its slot: no second receive
        wait_s=1.0,
    ) as consumer:
        listener.wait_for(1)
        with SimpleConsumer(endpoint, group="g", topic="stuck") as other:
            again: list[ReceivedMessage] = []
            wait_until(
                lambda: bool(again.extend(other.receive(wait_s=1.0)) or again),
                "the released message redelivered",
                WAIT,
            )
            assert [m.body for m in again] == [b"never finishes in time"]
            assert again[0].delivery_attempt == 2
            other.ack(again)
        assert consumer.stats.released == 1
        release.set()
    assert listener.calls[0].delivery_attempt == 1


@pytest.mark.parametrize("failure", ["result", "exception", "none"])
def test_a_failing_listener_is_retried_with_the_group_backoff_then_dead_lettered(
    endpoint: str, failure: str
) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("payments", queues=2)
        admin.create_group("fragile", max_delivery_attempts=3, retry_backoff_s=[1.0, 1.0])
    send(endpoint, "payments", [b"poison"])
    seen: list[tuple[int, float]] = []

    def fail(message: ReceivedMessage) -> ConsumeResult:
        seen.append((message.delivery_attempt, time.monotonic()))
        if failure == "exception":
            raise RuntimeError("cannot process")
        if failure == "none":
            return None  # type: ignore[return-value]  # a listener that forgot to return
        return ConsumeResult.FAILURE

    listener = Recorder(fail)
    with PushConsumer(
        endpoint, "fragile", subscriptions={"payments": "*"}, listener=listener, wait_s=1.0
    ) as consumer:
        listener.wait_for(3)
        wait_until(lambda: consumer.stats.nacked == 3, "3 nacks", WAIT)
        # The third nack's backoff ends, and the server moves the message to the DLQ (whose
        # topic it creates then).
        dead = receive_eventually(endpoint, "inspect", "%DLQ%fragile")
    assert [m.body for m in dead] == [b"poison"]
    assert [attempt for attempt, _ in seen] == [1, 2, 3]
    # The group's backoff (1 s) separates the attempts.
    assert all(b[1] - a[1] >= 0.9 for a, b in itertools.pairwise(seen))
    assert consumer.stats.failed == 3
    assert len(listener.calls) == 3


def test_a_listener_that_recovers_acks_on_a_later_attempt(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("flaky", queues=1)
        admin.create_group("g", max_delivery_attempts=5, retry_backoff_s=[1.0])
    send(endpoint, "flaky", [b"second time lucky"])

    def flaky(message: ReceivedMessage) -> ConsumeResult:
        if message.delivery_attempt == 1:
            raise ValueError("transient")
        return ConsumeResult.SUCCESS

    listener = Recorder(flaky)
    with PushConsumer(
        endpoint, "g", subscriptions={"flaky": "*"}, listener=listener, wait_s=1.0
    ) as consumer:
        listener.wait_for(2)
        wait_until(lambda: consumer.stats.acked == 1, "1 ack", WAIT)
    assert [m.delivery_attempt for m in listener.calls] == [1, 2]
    assert settled(endpoint, "g", "flaky")


def test_close_releases_cached_messages_at_once_and_finishes_the_running_listener(
    endpoint: str,
) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("cache", queues=1)
    send(endpoint, "cache", [f"c{i}".encode() for i in range(20)])
    unblock = threading.Event()

    def blocking(message: ReceivedMessage) -> ConsumeResult:
        unblock.wait(WAIT)
        return ConsumeResult.SUCCESS

    listener = Recorder(blocking)
    consumer = PushConsumer(
        endpoint,
        "g",
        subscriptions={"cache": "*"},
        listener=listener,
        consume_threads=1,
        invisible_duration_s=30.0,
    )
    consumer.start()
    listener.wait_for(1)
    wait_until(lambda: consumer.stats.received == 20, "20 messages received", WAIT)
    closer = threading.Thread(target=consumer.close)
    closer.start()
    # The 19 cached messages come back now, not after their 30 s invisible time.
    released: list[ReceivedMessage] = []
    with SimpleConsumer(endpoint, group="g", topic="cache") as other:
        wait_until(
            lambda: bool(released.extend(other.receive(wait_s=1.0))) or len(released) >= 19,
            "19 cached messages released",
            WAIT,
        )
        assert closer.is_alive()  # close() still waits for the running listener
        unblock.set()
        closer.join(WAIT)
        other.ack(released)
    assert not closer.is_alive()
    running = listener.calls[0].body
    assert sorted(m.body for m in released) == sorted(
        f"c{i}".encode() for i in range(20) if f"c{i}".encode() != running
    )
    assert len(listener.calls) == 1
    assert consumer.stats.released == 19
    assert consumer.stats.acked == 1
    assert settled(endpoint, "g", "cache")


def test_receiving_pauses_while_the_cache_is_full(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("flow", queues=2)
    send(endpoint, "flow", [f"f{i}".encode() for i in range(50)])
    unblock = threading.Event()

    def blocking(message: ReceivedMessage) -> ConsumeResult:
        unblock.wait(WAIT)
        return ConsumeResult.SUCCESS

    listener = Recorder(blocking)
    with PushConsumer(
        endpoint,
        "g",
        subscriptions={"flow": "*"},
        listener=listener,
        consume_threads=2,
        max_cached_messages=5,
        wait_s=1.0,
    ) as consumer:
        listener.wait_for(2)
        wait_until(lambda: consumer.stats.received == 5, "5 messages received", WAIT)
        time.sleep(1.5)  # an absence can only be observed over time: more long polls pass
        with Admin(endpoint) as admin:
            inflight = sum(r.inflight for r in admin.get_group_lag("g", "flow"))
        assert consumer.stats.received == 5
        assert inflight == 5
        unblock.set()
        listener.wait_for(50)
        wait_until(lambda: consumer.stats.acked == 50, "50 acks", WAIT)


def test_with_a_full_cache_the_acks_ride_on_the_next_receive(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("ride", queues=1)
    send(endpoint, "ride", [f"r{i}".encode() for i in range(40)])

    def slow(message: ReceivedMessage) -> ConsumeResult:
        time.sleep(0.01)
        return ConsumeResult.SUCCESS

    listener = Recorder(slow)
    with PushConsumer(
        endpoint,
        "g",
        subscriptions={"ride": "*"},
        listener=listener,
        consume_threads=4,
        max_cached_messages=4,
        wait_s=1.0,
    ) as consumer:
        listener.wait_for(40)
        # The last acks ride on a receive held until wait_s ends: counted when it returns.
        wait_until(lambda: consumer.stats.acked == 40, "40 acks", WAIT)
        stats = consumer.stats
    # Each batch of 4 was acked by the receive that fetched the next 4 (one round trip for
    # both) rather than by an Ack call; a few may still have missed their receive.
    assert stats.acked_on_receive >= 30, stats
    assert {m.delivery_attempt for m in listener.calls} == {1}
    assert settled(endpoint, "g", "ride")


def test_acks_riding_on_a_held_receive_are_applied_at_once_and_counted_by_close(
    endpoint: str,
) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("held", queues=1)
    send(endpoint, "held", [f"h{i}".encode() for i in range(10)])
    listener = Recorder()
    consumer = PushConsumer(
        endpoint,
        "g",
        subscriptions={"held": "*"},
        listener=listener,
        max_cached_messages=10,
        wait_s=20.0,
    )
    with consumer:
        listener.wait_for(10)
        # The full cache made the 10 acks wait for the next receive, which the server holds
        # for up to 20 s with nothing to deliver: it applied the acks before holding it.
        wait_until(lambda: settled(endpoint, "g", "held"), "every message of held acked", WAIT)
        assert consumer.stats.acked == 0  # that receive has not returned
    # close() cancelled the held receive and acked its riders again in an Ack call (acking
    # twice is harmless), so they are counted.
    stats = consumer.stats
    assert (stats.acked, stats.acked_on_receive, stats.cached_messages) == (10, 0, 0)
    assert settled(endpoint, "g", "held")


def test_a_refused_ack_that_rode_on_a_receive_is_logged_and_redelivered(
    endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("stale", queues=1)
    send(endpoint, "stale", [b"s"])

    def stale_handle(message: ReceivedMessage) -> ConsumeResult:
        if message.delivery_attempt == 1:
            # A new invisible time replaces the handle: the consumer's ack of the old one
            # is refused, and the message comes back after that second.
            with SimpleConsumer(endpoint, group="g", topic="stale") as other:
                other.change_invisible_duration(copy.copy(message), 1.0)
        return ConsumeResult.SUCCESS

    listener = Recorder(stale_handle)
    with (
        caplog.at_level(logging.WARNING, logger="popmq.sdk.push_consumer"),
        PushConsumer(
            endpoint,
            "g",
            subscriptions={"stale": "*"},
            listener=listener,
            max_cached_messages=1,
            wait_s=1.0,
        ) as consumer,
    ):
        listener.wait_for(2)
        wait_until(lambda: consumer.stats.acked == 1, "1 ack", WAIT)
    assert [m.delivery_attempt for m in listener.calls] == [1, 2]
    warnings = [r.getMessage() for r in caplog.records if r.name == "popmq.sdk.push_consumer"]
    assert any(f"ack of message {listener.calls[0].message_id} failed" in w for w in warnings), (
        warnings
    )
    assert settled(endpoint, "g", "stale")


def test_an_options_object_configures_the_consumer_as_the_keywords_do(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("opts", queues=1)
    bodies = [f"o{i}".encode() for i in range(5)]
    send(endpoint, "opts", bodies)
    listener = Recorder()
    options = PushConsumerOptions(max_cached_messages=1, wait_s=1.0, client_id="opts-1")
    with PushConsumer(
        endpoint, "g", subscriptions={"opts": "*"}, listener=listener, options=options
    ) as consumer:
        listener.wait_for(5)
        wait_until(lambda: consumer.stats.acked == 5, "5 acks", WAIT)
        assert (consumer.client_id, consumer.options) == ("opts-1", options)
    assert sorted(m.body for m in listener.calls) == bodies
    # One message of room: each receive asked for one message at most.
    assert consumer.stats.receive_calls >= 5
    assert settled(endpoint, "g", "opts")


def test_a_byte_limit_also_pauses_receiving(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("big", queues=1)
    send(endpoint, "big", [bytes(1000) for _ in range(10)])
    unblock = threading.Event()

    def blocking(message: ReceivedMessage) -> ConsumeResult:
        unblock.wait(WAIT)
        return ConsumeResult.SUCCESS

    listener = Recorder(blocking)
    with PushConsumer(
        endpoint,
        "g",
        subscriptions={"big": "*"},
        listener=listener,
        consume_threads=1,
        max_cached_bytes=2500,
        receive_batch_size=1,
        wait_s=1.0,
    ) as consumer:
        listener.wait_for(1)
        wait_until(lambda: consumer.stats.received == 3, "3 messages received", WAIT)
        time.sleep(1.0)  # observing an absence takes time
        assert consumer.stats.received == 3
        assert consumer.stats.cached_bytes == 3000
        unblock.set()
        listener.wait_for(10)


def test_an_idle_consumer_long_polls_instead_of_spinning(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("idle", queues=2)
    listener = Recorder()
    with PushConsumer(
        endpoint, "g", subscriptions={"idle": "*"}, listener=listener, wait_s=5.0
    ) as consumer:
        time.sleep(2.0)  # idle time is what is being measured
        assert consumer.stats.receive_calls <= 2
        began = time.monotonic()
        send(endpoint, "idle", [b"wake up"])
        listener.wait_for(1)
        assert time.monotonic() - began < 5.0  # woken by the arrival, not by the poll ending


@dataclass
class Span:
    group: str
    seq: int
    start: float
    end: float


def test_fifo_groups_are_handed_over_one_at_a_time_in_order(server: ServerThread) -> None:
    endpoint = server.endpoint
    server.call(lambda: server.broker.create_topic("fifo", 2, message_type="fifo"))
    groups = [f"user-{i}" for i in range(4)]
    with Producer(endpoint) as producer:
        for seq in range(15):
            for group in groups:
                producer.send("fifo", f"{group}:{seq}".encode(), message_group=group)
    spans: list[Span] = []
    lock = threading.Lock()
    second_started = threading.Event()
    first_group: list[str] = []

    def listener(message: ReceivedMessage) -> ConsumeResult:
        group, seq = message.body.decode().split(":")
        began = time.monotonic()
        with lock:
            if not first_group:
                first_group.append(group)
            elif group != first_group[0]:
                second_started.set()
        if group == first_group[0] and seq == "0":
            # Hold the first group's first message until another group runs: groups are
            # independent of each other.
            assert second_started.wait(WAIT)
        time.sleep(0.002)
        with lock:
            spans.append(Span(group, int(seq), began, time.monotonic()))
        return ConsumeResult.SUCCESS

    with PushConsumer(
        endpoint, "g", subscriptions={"fifo": "*"}, listener=listener, consume_threads=8
    ) as consumer:
        wait_until(lambda: len(spans) == 60, "60 listener calls", WAIT)
        wait_until(lambda: consumer.stats.acked == 60, "60 acks", WAIT)
    for group in groups:
        mine = sorted((s for s in spans if s.group == group), key=lambda s: s.start)
        assert [s.seq for s in mine] == list(range(15))
        for earlier, later in itertools.pairwise(mine):
            assert earlier.end <= later.start, f"{group}: two messages at once"


def test_unknown_topics_and_bad_arguments_fail_at_start(endpoint: str) -> None:
    consumer = PushConsumer(endpoint, "g", subscriptions={"missing": "*"}, listener=Recorder())
    with pytest.raises(NotFoundError, match="missing"):
        consumer.start()
    consumer.close()
    with pytest.raises(NotFoundError):
        with PushConsumer(endpoint, "g", subscriptions={"missing": "*"}, listener=Recorder()):
            pass
    with pytest.raises(InvalidArgumentError, match="subscriptions is empty"):
        PushConsumer(endpoint, "g", subscriptions={}, listener=Recorder())
    with pytest.raises(InvalidArgumentError, match="consume_threads must be an integer >= 1"):
        PushConsumer(
            endpoint, "g", subscriptions={"t": "*"}, listener=Recorder(), consume_threads=0
        )
    with pytest.raises(InvalidArgumentError, match="max_cached_bytes"):
        PushConsumer(
            endpoint, "g", subscriptions={"t": "*"}, listener=Recorder(), max_cached_bytes=-1
        )
    with pytest.raises(TypeError, match="listener must be callable"):
        PushConsumer(endpoint, "g", subscriptions={"t": "*"}, listener=None)  # type: ignore[arg-type]


def test_close_from_inside_a_listener_is_refused(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("self", queues=1)
    send(endpoint, "self", [b"x"])
    errors: list[BaseException] = []
    holder: list[PushConsumer] = []

    def closes_itself(message: ReceivedMessage) -> ConsumeResult:
        try:
            holder[0].close()
        except RuntimeError as exc:
            errors.append(exc)
        return ConsumeResult.SUCCESS

    listener = Recorder(closes_itself)
    consumer = PushConsumer(endpoint, "g", subscriptions={"self": "*"}, listener=listener)
    holder.append(consumer)
    with consumer:
        listener.wait_for(1)
        wait_until(lambda: consumer.stats.acked == 1, "1 ack", WAIT)
    assert len(errors) == 1
    assert "called from a listener" in str(errors[0])


@pytest.mark.parametrize("mode", ["pop", "queue_exclusive"])
def test_the_async_consumer_awaits_an_async_listener(endpoint: str, mode: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("coro", queues=2)
    send(endpoint, "coro", [f"a{i}".encode() for i in range(50)])

    async def scenario() -> tuple[list[bytes], PushConsumerStats]:
        seen: list[bytes] = []
        done = asyncio.Event()

        async def listener(message: ReceivedMessage) -> ConsumeResult:
            await asyncio.sleep(0)
            if message.body == b"a7" and message.delivery_attempt == 1 and mode == "pop":
                return ConsumeResult.FAILURE
            seen.append(message.body)
            if len(seen) == 50:
                done.set()
            return ConsumeResult.SUCCESS

        async with AsyncPushConsumer(
            endpoint,
            "g",
            subscriptions={"coro": "*"},
            listener=listener,
            mode=mode,  # type: ignore[arg-type]
            consume_from="first",
            heartbeat_interval_s=0.5,
            wait_s=1.0,
        ) as consumer:
            await consumer.start()
            await asyncio.wait_for(done.wait(), WAIT)
        return seen, consumer.stats

    seen, stats = asyncio.run(scenario())
    assert sorted(seen) == sorted(f"a{i}".encode() for i in range(50))
    assert stats.succeeded == 50
    if mode == "pop":
        assert (stats.acked, stats.nacked, stats.failed) == (50, 1, 1)
        assert settled(endpoint, "g", "coro")
