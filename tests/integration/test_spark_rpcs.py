"""The RPCs the Spark connector stands on: offset reads, offset commits, lease tokens.

Real server on 127.0.0.1:0, real store, the SDK as client.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from popmq import (
    Admin,
    AsyncSimpleConsumer,
    FailedPreconditionError,
    InvalidArgumentError,
    LeasePage,
    Message,
    NotFoundError,
    Producer,
    PullConsumer,
    SimpleConsumer,
    Sql,
)
from popmq._gen.popmq.v1 import messaging_pb2, messaging_pb2_grpc
from popmq.broker_core.errors import InvalidArgumentError as BrokerInvalidArgument
from popmq.broker_core.errors import ResourceExhaustedError as BrokerResourceExhausted
from popmq.coordination import LocalCoordinator
from popmq.proxy.lease_config import LeaseConfig
from popmq.proxy.leases import LeasePage as LeasePageResult
from popmq.proxy.leases import LeaseTable
from popmq.sdk.errors import error_from_rpc_error
from tests.support.server_thread import ServerThread


def _topic(endpoint: str, name: str = "events", queues: int = 1) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic(name, queues=queues)


def _send(endpoint: str, bodies: list[bytes], topic: str = "events") -> None:
    with Producer(endpoint) as producer:
        producer.send_batch(topic, [Message(b) for b in bodies])


def _tick_past(ms: int) -> None:
    """Wait until the wall clock is past epoch ms `ms` (store times are in ms)."""
    while time.time_ns() // 1_000_000 <= ms:
        time.sleep(0.001)


# -- PullMessages ----------------------------------------------------------------------


def test_pull_reads_a_queue_by_offset_without_changing_anything(endpoint: str) -> None:
    _topic(endpoint)
    with Producer(endpoint) as producer:
        producer.send_batch(
            "events",
            [Message(f"m{i}".encode(), tag="T", keys=[f"k{i}"], properties={"i": str(i)})
             for i in range(10)],
        )  # fmt: skip
    with PullConsumer(endpoint, topic="events") as puller:
        first = puller.pull(0, 0, max_messages=4)
        assert [m.offset for m in first.messages] == [0, 1, 2, 3]
        assert [m.body for m in first.messages] == [b"m0", b"m1", b"m2", b"m3"]
        assert (first.min_offset, first.max_offset, first.next_offset) == (0, 10, 4)
        m = first.messages[1]
        assert (m.topic, m.queue_id, m.tag, m.keys, m.properties, m.delivery_attempt) == (
            "events", 0, "T", ("k1",), {"i": "1"}, 1,
        )  # fmt: skip
        rest = puller.pull(0, first.next_offset, max_messages=100)
        assert [m.offset for m in rest.messages] == list(range(4, 10))
        end = puller.pull(0, rest.next_offset)
        assert (end.messages, end.next_offset) == ([], 10)
        again = puller.pull(0, 0, max_messages=4)
        assert [m.message_id for m in again.messages] == [m.message_id for m in first.messages]
    # Pulling consumed nothing: a group still gets all ten.
    with SimpleConsumer(endpoint, group="g", topic="events") as consumer:
        assert len(consumer.receive(max_messages=32, wait_s=5)) == 10


def test_pull_rejects_bad_arguments_with_the_allowed_range(endpoint: str) -> None:
    _topic(endpoint, queues=2)
    _send(endpoint, [b"a"])
    with PullConsumer(endpoint, topic="events") as puller:
        with pytest.raises(InvalidArgumentError, match=r"queue_id 2 is outside 0\.\.1"):
            puller.pull(2, 0)
        with pytest.raises(InvalidArgumentError, match="max_offset"):
            puller.pull(0, 5)
        with pytest.raises(InvalidArgumentError, match="offset -1 is outside"):
            puller.pull(0, -1)
        with pytest.raises(InvalidArgumentError, match="max_messages 0 is below the minimum 1"):
            puller.pull(0, 0, max_messages=0)
        with pytest.raises(InvalidArgumentError, match="above the maximum 1024"):
            puller.pull(0, 0, max_messages=1025)
    with PullConsumer(endpoint, topic="nope") as puller, pytest.raises(NotFoundError):
        puller.pull(0, 0)


def test_pull_stops_before_4_mib_but_returns_at_least_one(endpoint: str) -> None:
    _topic(endpoint)
    for size in (1, 1, 3, 1):
        _send(endpoint, [os.urandom(size * 1024 * 1024)])  # incompressible: stored as is
    with PullConsumer(endpoint, topic="events") as puller:
        result = puller.pull(0, 0, max_messages=10)
        assert [m.offset for m in result.messages] == [0, 1]  # a third would pass 4 MiB
        assert result.next_offset == 2
        result = puller.pull(0, 2, max_messages=10)
        assert [m.offset for m in result.messages] == [2]  # 3 MiB + 1 MiB: past 4 MiB
        assert [m.offset for m in puller.pull(0, 3, max_messages=10).messages] == [3]


def test_pull_below_retention_starts_at_the_min_offset_and_says_so(server: ServerThread) -> None:
    endpoint = server.endpoint
    _topic(endpoint)
    _send(endpoint, [b"old-1", b"old-2"])
    with PullConsumer(endpoint, topic="events") as puller:
        stored = puller.pull(0, 0).messages[-1].store_timestamp
        _tick_past(int(stored.timestamp() * 1000))
        _send(endpoint, [b"new"])
        new_stored = puller.pull(0, 2).messages[0].store_timestamp
        retention_ms = round(server.broker.config.retention.retention_s * 1000)
        cutoff = int(new_stored.timestamp() * 1000) + retention_ms
        assert server.call(lambda: server.broker.apply_retention(now=cutoff)) == 2
        result = puller.pull(0, 0)
        assert [(m.offset, m.body) for m in result.messages] == [(2, b"new")]
        assert (result.min_offset, result.max_offset) == (2, 3)


# -- GetOffsetsAtTime ------------------------------------------------------------------


def test_offsets_at_time_finds_the_first_message_stored_at_or_after_it(endpoint: str) -> None:
    _topic(endpoint, queues=1)
    times = []
    with PullConsumer(endpoint, topic="events") as puller:
        for i in range(4):
            _send(endpoint, [f"m{i}".encode()])
            stamp = puller.pull(0, i).messages[0].store_timestamp
            times.append(stamp)
            _tick_past(int(stamp.timestamp() * 1000))
        assert puller.offsets_at(times[0] - timedelta(seconds=60)) == {0: 0}
        assert puller.offsets_at(times[2]) == {0: 2}
        assert puller.offsets_at(times[2] + timedelta(milliseconds=1)) == {0: 3}
        assert puller.offsets_at(times[3] + timedelta(seconds=1)) == {0: 4}
        with pytest.raises(InvalidArgumentError, match="timezone-aware"):
            puller.offsets_at(datetime(2026, 1, 1))
    with PullConsumer(endpoint, topic="nope") as puller, pytest.raises(NotFoundError):
        puller.offsets_at(datetime.now(UTC))


# -- CommitOffset / GetOffset ----------------------------------------------------------


def test_committed_offsets_are_durable_shown_as_lag_and_used_by_pops(
    server: ServerThread,
) -> None:
    endpoint = server.endpoint
    _topic(endpoint, queues=2)
    with Producer(endpoint) as producer:
        producer.send_batch("events", [Message(f"m{i}".encode()) for i in range(8)])
    with PullConsumer(endpoint, topic="events", group="reader") as puller:
        with pytest.raises(NotFoundError, match="reader"):
            puller.get_offsets()
        puller.commit_offsets({0: 3})
        offsets = puller.get_offsets()
        assert [(o.queue_id, o.offset, o.committed) for o in offsets] == [
            (0, 3, True),
            (1, 0, False),
        ]
        with pytest.raises(InvalidArgumentError, match=r"offset of queue 1 5 is above"):
            puller.commit_offsets({0: 4, 1: 5})
        assert puller.get_offsets()[0].offset == 3  # all or none
    with Admin(endpoint) as admin:
        lag = {r.queue_id: r for r in admin.get_group_lag("reader", "events") if not r.retry}
    assert (lag[0].consumer_offset, lag[0].lag) == (3, 1)
    endpoint = server.restart()
    with PullConsumer(endpoint, topic="events", group="reader") as puller:
        assert puller.get_offsets()[0].offset == 3
    # A pop of the same group starts where the commit put it.
    with SimpleConsumer(endpoint, group="reader", topic="events") as consumer:
        got = consumer.receive(max_messages=32, wait_s=5)
        assert sorted((m.queue_id, m.offset) for m in got) == [(0, 3), (1, 0), (1, 1), (1, 2),
                                                                (1, 3)]  # fmt: skip


def test_commit_is_refused_where_the_group_has_pops_in_flight(endpoint: str) -> None:
    _topic(endpoint, queues=1)
    _send(endpoint, [b"a", b"b"])
    with SimpleConsumer(endpoint, group="g", topic="events") as consumer:
        popped = consumer.receive(max_messages=1, wait_s=5)
        with PullConsumer(endpoint, topic="events", group="g") as puller:
            with pytest.raises(FailedPreconditionError, match="in flight"):
                puller.commit_offsets({0: 2})
            with pytest.raises(InvalidArgumentError, match="appears twice"):
                _commit_twice(endpoint)
            consumer.ack(popped)
            puller.commit_offsets({0: 2})
            assert puller.get_offsets()[0].offset == 2


def _commit_twice(endpoint: str) -> None:
    """CommitOffset with the same queue twice (the SDK's mapping cannot express it)."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        request = messaging_pb2.CommitOffsetRequest(
            group="g",
            topic="events",
            offsets=[
                messaging_pb2.QueueOffset(queue_id=0, offset=1),
                messaging_pb2.QueueOffset(queue_id=0, offset=2),
            ],
        )
        try:
            stub.CommitOffset(request, timeout=10)
        except grpc.RpcError as exc:
            raise error_from_rpc_error(exc) from exc


# -- lease tokens ----------------------------------------------------------------------


def test_a_lease_page_is_the_same_messages_every_time_it_is_asked_for(endpoint: str) -> None:
    _topic(endpoint, queues=2)
    _send(endpoint, [f"m{i}".encode() for i in range(10)])
    with SimpleConsumer(endpoint, group="g", topic="events") as consumer:
        page0 = consumer.receive_lease("run/0/0", 0, max_messages=4, wait_s=5)
        assert len(page0.messages) == 4
        assert not page0.replayed
        again = consumer.receive_lease("run/0/0", 0, max_messages=4, wait_s=5)
        assert again.replayed
        assert [m.message_id for m in again.messages] == [m.message_id for m in page0.messages]
        assert [m.receipt_handle for m in again.messages] == [
            m.receipt_handle for m in page0.messages
        ]
        page1 = consumer.receive_lease("run/0/0", 1, max_messages=4, wait_s=5)
        assert not {m.message_id for m in page1.messages} & {m.message_id for m in page0.messages}
        with pytest.raises(InvalidArgumentError, match="the next one is page 2"):
            consumer.receive_lease("run/0/0", 3)
        with pytest.raises(FailedPreconditionError, match="from page 0"):
            consumer.receive_lease("other", 1)
        # Leased messages are invisible to everyone else; the rest is there.
        others = consumer.receive(max_messages=32, wait_s=5)
        leased = {m.message_id for m in page0.messages + page1.messages}
        assert len(others) == 10 - len(leased)
        assert not {m.message_id for m in others} & leased
        consumer.ack(others)


def test_a_lease_page_larger_than_one_pop_is_filled_by_several_and_replays_whole(
    endpoint: str,
) -> None:
    """pop.max_batch is 32 here: a page of 80 is three pops, one page of the lease."""
    _topic(endpoint, queues=2)
    _send(endpoint, [f"m{i}".encode() for i in range(100)])
    with SimpleConsumer(endpoint, group="g", topic="events") as consumer:
        page0 = consumer.receive_lease("big", 0, max_messages=80, wait_s=5)
        assert len(page0.messages) == 80
        assert len({m.message_id for m in page0.messages}) == 80
        again = consumer.receive_lease("big", 0, max_messages=80, wait_s=5)
        assert again.replayed
        assert [m.receipt_handle for m in again.messages] == [
            m.receipt_handle for m in page0.messages
        ]
        page1 = consumer.receive_lease("big", 1, max_messages=80, wait_s=0)
        assert len(page1.messages) == 20, "the page stops where the backlog does"
        assert not {m.message_id for m in page1.messages} & {m.message_id for m in page0.messages}
        with pytest.raises(InvalidArgumentError, match="max_messages 1025 is above"):
            consumer.receive_lease("other", 0, max_messages=1025, wait_s=0)
        [result] = consumer.ack_leases(["big"])
        assert (result.code, result.messages) == ("OK", 100)
    with Admin(endpoint) as admin:
        rows = [r for r in admin.get_group_lag("g", "events") if not r.retry]
    assert sum(r.lag + r.inflight for r in rows) == 0


def test_a_lease_page_stays_within_one_answer_of_4_mib(endpoint: str) -> None:
    """The pops after a page's first are bounded by the bytes left: of 60 messages of 100 KB
    the first pop takes 32 (3.2 MB), the next only what still fits in 4 MiB, and the rest
    is the next page."""
    _topic(endpoint)
    body = os.urandom(100_000)
    for _ in range(6):
        _send(endpoint, [body] * 10)
    with SimpleConsumer(endpoint, group="g", topic="events") as consumer:
        page0 = consumer.receive_lease("wide", 0, max_messages=60, wait_s=5)
        assert 32 < len(page0.messages) < 60
        assert sum(len(m.body) for m in page0.messages) < 4 * 1024 * 1024
        page1 = consumer.receive_lease("wide", 1, max_messages=60, wait_s=0)
        assert len(page0.messages) + len(page1.messages) == 60
        assert consumer.ack_leases(["wide"])[0].messages == 60


def test_ack_lease_acks_every_page_and_a_replay_is_refused_afterwards(endpoint: str) -> None:
    _topic(endpoint)
    _send(endpoint, [f"m{i}".encode() for i in range(6)])
    with SimpleConsumer(endpoint, group="g", topic="events") as consumer:
        p0 = consumer.receive_lease("t", 0, max_messages=3, invisible_duration_s=2, wait_s=5)
        p1 = consumer.receive_lease("t", 1, max_messages=3, invisible_duration_s=2, wait_s=5)
        assert len(p0.messages) + len(p1.messages) == 6
        (result, unknown) = consumer.ack_leases(["t", "never-popped"])
        assert (result.lease_token, result.code, result.messages) == ("t", "OK", 6)
        assert (unknown.code, unknown.messages) == ("NOT_FOUND", 0)
        assert "unknown" in unknown.message
        assert consumer.ack_leases(["t"])[0].ok  # repeated ack: fine
        with pytest.raises(FailedPreconditionError, match="acknowledged"):
            consumer.receive_lease("t", 0)
        # Past the old deadline nothing comes back: everything was acked.
        assert consumer.receive(max_messages=32, invisible_duration_s=30, wait_s=3) == []
    with Admin(endpoint) as admin:
        rows = [r for r in admin.get_group_lag("g", "events") if not r.retry]
    assert (rows[0].lag, rows[0].inflight) == (0, 0)


def test_a_pinned_lease_is_read_and_acked_by_token_through_a_client_of_one_endpoint(
    endpoint: str,
) -> None:
    _topic(endpoint)
    _send(endpoint, [f"m{i}".encode() for i in range(6)])
    with SimpleConsumer(endpoint, group="g", topic="events") as consumer:
        page = consumer.receive_lease("t", 0, max_messages=6, wait_s=5, pinned=True)
        assert len(page.messages) == 6
        again = consumer.receive_lease("t", 0, max_messages=6, wait_s=5, pinned=True)
        assert again.replayed and again.page_id == page.page_id
        [result] = consumer.ack_leases(["t"], pinned=True)
        assert (result.code, result.messages) == ("OK", 6)
    # A client of several endpoints fails over, which would break the promise.
    with SimpleConsumer(f"{endpoint},127.0.0.1:1", group="g", topic="events") as several:
        with pytest.raises(InvalidArgumentError, match="pinned=True needs a client of one"):
            several.receive_lease("u", 0, pinned=True)
        with pytest.raises(InvalidArgumentError, match="pinned=True needs a client of one"):
            several.ack_leases(["u"], pinned=True)


def test_ack_lease_naming_the_pages_read_acks_exactly_those(endpoint: str) -> None:
    _topic(endpoint)
    _send(endpoint, [f"m{i}".encode() for i in range(9)])
    with SimpleConsumer(endpoint, group="g", topic="events") as consumer:

        def page(token: str, number: int) -> LeasePage:
            return consumer.receive_lease(
                token, number, max_messages=3, invisible_duration_s=30, wait_s=5, acks_by_page=True
            )

        p0, p1, u0 = page("t", 0), page("t", 1), page("u", 0)
        assert p0.page_id and p1.page_id and p0.page_id != p1.page_id
        assert page("t", 0).page_id == p0.page_id  # a replay names the same page
        [other] = consumer.ack_leases(["t"], {"t": ["0.0.0"]})  # not the lease's page 0
        assert (other.code, other.messages) == ("FAILED_PRECONDITION", 0)
        assert "not stored as its pages" in other.message
        with pytest.raises(InvalidArgumentError, match="is not one LeasePop answered"):
            consumer.ack_leases(["t"], {"t": ["page-0"]})
        [result] = consumer.ack_leases(["t"], {"t": [p0.page_id]})
        assert (result.code, result.messages) == ("OK", 3)
        # A page id of "" (a server of an earlier release answered it) cannot be named:
        # that lease is acked whole, by token.
        [whole] = consumer.ack_leases(["u"], {"u": [""]})
        assert (whole.code, whole.messages) == ("OK", len(u0.messages))
    with Admin(endpoint) as admin:
        rows = [r for r in admin.get_group_lag("g", "events") if not r.retry]
    assert rows[0].inflight == len(p1.messages) == 3  # read by no committed reader: not acked


def test_an_expired_lease_comes_back_and_its_token_starts_afresh(endpoint: str) -> None:
    _topic(endpoint)
    _send(endpoint, [b"a", b"b"])
    with SimpleConsumer(endpoint, group="g", topic="events") as consumer:
        first = consumer.receive_lease("t", 0, max_messages=2, invisible_duration_s=1, wait_s=5)
        ids = sorted(m.message_id for m in first.messages)
        assert len(ids) == 2
        # Not acked: after the lease ends the broker delivers them again, attempt 2.
        back = []
        give_up = time.monotonic() + 15
        while len(back) < 2 and time.monotonic() < give_up:
            back += consumer.receive(max_messages=32, invisible_duration_s=30, wait_s=5)
        assert sorted(m.message_id for m in back) == ids
        assert {m.delivery_attempt for m in back} == {2}
        with pytest.raises(FailedPreconditionError, match="from page 0"):
            consumer.receive_lease("t", 1, wait_s=0)
        fresh = consumer.receive_lease("t", 0, wait_s=0)
        assert (fresh.replayed, fresh.messages) == (False, [])
        (result,) = consumer.renew_leases(["t"], 30)
        assert result.ok
        consumer.ack(back)


def test_renew_lease_extends_every_message_and_keeps_replays_working(endpoint: str) -> None:
    _topic(endpoint)
    _send(endpoint, [b"a", b"b", b"c"])
    with SimpleConsumer(endpoint, group="g", topic="events") as consumer:
        page = consumer.receive_lease("t", 0, max_messages=3, invisible_duration_s=2, wait_s=5)
        (result,) = consumer.renew_leases(["t"], 30)
        assert (result.code, result.messages) == ("OK", 3)
        assert result.lease_until > page.lease_until + timedelta(seconds=20)
        # The old deadline passes without a redelivery.
        assert consumer.receive(max_messages=32, wait_s=3) == []
        replay = consumer.receive_lease("t", 0)
        assert replay.replayed
        assert [m.message_id for m in replay.messages] == [m.message_id for m in page.messages]
        assert all(
            new.receipt_handle != old.receipt_handle
            for new, old in zip(replay.messages, page.messages, strict=True)
        )
        assert consumer.ack_leases(["t"])[0].ok
        (unknown,) = consumer.renew_leases(["nope"], 30)
        assert unknown.code == "NOT_FOUND"
        with pytest.raises(InvalidArgumentError, match=r"invisible_duration 0\.5s is outside"):
            consumer.renew_leases(["t"], 0.5)
        with pytest.raises(InvalidArgumentError, match="lease_token is empty"):
            consumer.receive_lease("")


def test_a_proxy_restart_forgets_leases_and_their_messages_return(server: ServerThread) -> None:
    _topic(server.endpoint)
    _send(server.endpoint, [b"a"])
    with SimpleConsumer(server.endpoint, group="g", topic="events") as consumer:
        (message,) = consumer.receive_lease("t", 0, invisible_duration_s=2, wait_s=5).messages
    endpoint = server.restart()
    with SimpleConsumer(endpoint, group="g", topic="events") as consumer:
        assert consumer.ack_leases(["t"])[0].code == "NOT_FOUND"
        back = consumer.receive(max_messages=32, invisible_duration_s=30, wait_s=10)
        assert [(m.message_id, m.delivery_attempt) for m in back] == [(message.message_id, 2)]
        consumer.ack(back)


def test_lease_pop_applies_sql_filters_like_pop(endpoint: str) -> None:
    _topic(endpoint)
    with Producer(endpoint) as producer:
        producer.send_batch(
            "events",
            [Message(f"{r}-{i}".encode(), properties={"region": r}) for i in range(3)
             for r in ("eu", "us")],
        )  # fmt: skip
    with SimpleConsumer(endpoint, group="g", topic="events", filter=Sql("region = 'eu'")) as c:
        page = c.receive_lease("t", 0, max_messages=32, wait_s=5)
        assert sorted(m.body for m in page.messages) == [b"eu-0", b"eu-1", b"eu-2"]
        assert c.ack_leases(["t"])[0].ok


def test_concurrent_asks_for_one_lease_page_share_one_pop(endpoint: str) -> None:
    _topic(endpoint, queues=2)
    _send(endpoint, [f"m{i}".encode() for i in range(10)])

    async def scenario() -> tuple[LeasePage, LeasePage]:
        # A retried task racing its zombie attempt: both ask for page 0 at once.
        async with AsyncSimpleConsumer(endpoint, group="g", topic="events") as consumer:
            first, second = await asyncio.gather(
                consumer.receive_lease("t", 0, max_messages=4, wait_s=5),
                consumer.receive_lease("t", 0, max_messages=4, wait_s=5),
            )
            return first, second

    first, second = asyncio.run(scenario())
    assert [m.message_id for m in first.messages] == [m.message_id for m in second.messages]
    assert len(first.messages) == 4
    assert sorted([first.replayed, second.replayed]) == [False, True]
    with Admin(endpoint) as admin:
        rows = admin.get_group_lag("g", "events")
    assert sum(r.inflight for r in rows) == 4, "one pop, not two"


def test_the_lease_table_bounds_are_explicit_errors(server: ServerThread) -> None:
    _topic(server.endpoint)
    _send(server.endpoint, [b"a", b"b", b"c"])
    broker = server.broker
    table = LeaseTable(broker, LocalCoordinator(), LeaseConfig(max_leases=2, max_pages=1))

    def pop(token: str, page: int, topic: str = "events") -> LeasePageResult:
        async def one() -> LeasePageResult:
            return await table.pop(
                "g", topic, token, page, 30.0,
                lambda: broker.pop("g", "events", max_messages=1, invisible_s=30, wait_s=0),
            )  # fmt: skip

        return server.call(one)

    assert len(pop("a", 0).messages) == 1
    assert len(pop("b", 0).messages) == 1
    with pytest.raises(
        BrokerResourceExhausted, match=r"holds 2 leases, the most it may \(leases.max_leases\)"
    ):
        pop("c", 0)
    with pytest.raises(
        BrokerResourceExhausted,
        match=r"has 1 pages, the most one lease may have \(leases.max_pages\)",
    ):
        pop("a", 1)
    with pytest.raises(BrokerInvalidArgument, match="holds messages of topic 'events', not 'x'"):
        pop("a", 0, topic="x")
    with pytest.raises(BrokerInvalidArgument, match="page -1 is negative"):
        pop("a", -1)


def test_leases_hold_a_bounded_number_of_message_bytes(server: ServerThread) -> None:
    """Each lease keeps its pages for replay: the proxy bounds the bytes of all of them."""
    _topic(server.endpoint)
    _send(server.endpoint, [b"x" * 1000 for _ in range(4)])
    broker = server.broker
    table = LeaseTable(broker, LocalCoordinator(), LeaseConfig(max_bytes=2500))

    def pop(token: str) -> LeasePageResult:
        async def one() -> LeasePageResult:
            return await table.pop(
                "g", "events", token, 0, 30.0,
                lambda: broker.pop("g", "events", max_messages=1, invisible_s=30, wait_s=0),
            )  # fmt: skip

        return server.call(one)

    pop("a")
    one = table.held_bytes
    assert one > 1000 + 1024  # the stored record: body, id, times
    pop("b")
    two = table.held_bytes
    assert two > one
    with pytest.raises(BrokerResourceExhausted, match=rf"leases hold {two} bytes .* \(2500\)"):
        pop("c")
    outcomes = server.call(lambda: table.ack("g", ["a"]))
    assert outcomes[0].error is None
    assert table.held_bytes == two - one  # an acked lease keeps no bodies
    assert len(pop("c").messages) == 1
