"""Lease tokens kept in the coordinator: two lease tables (two proxies) over one broker and
one coordinator agree on every page, whichever of them popped it, against LocalCoordinator
and a real etcd."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from popmq.broker_core import (
    FailedPreconditionError,
    PoppedMessage,
    UnavailableError,
)
from popmq.coordination import EtcdCoordinator
from popmq.proxy.lease_config import LeaseConfig
from popmq.proxy.lease_store import FOLDER
from popmq.proxy.leases import LeasePage, LeaseTable
from tests.cluster.conftest import MakeCoordinator, unique_cluster
from tests.support.etcd import EtcdServer
from tests.support.lease_broker import Pop, lease_broker, popper

pytestmark = pytest.mark.timeout(90)


def _identity(page: LeasePage) -> list[tuple[str, bytes, int, str, int]]:
    return [
        (
            m.record.message_id,
            m.record.body,
            m.delivery_attempt,
            m.receipt_handle,
            m.invisible_until_ms,
        )
        for m in page.messages
    ]


def test_a_page_popped_through_one_proxy_replays_through_another_with_the_same_messages(
    make_coordinator: MakeCoordinator, tmp_path: Path
) -> None:
    async def scenario() -> None:
        async with (
            lease_broker(tmp_path, 20) as broker,
            make_coordinator() as ca,
            make_coordinator() as cb,
        ):
            a, b = LeaseTable(broker, ca), LeaseTable(broker, cb)
            token = "spark/run-1/0/3 ✓"  # any printable token
            p0 = await a.pop("g", "events", token, 0, 30, popper(broker))
            p1 = await a.pop("g", "events", token, 1, 30, popper(broker))
            assert (p0.replayed, p1.replayed, len(p0.messages), len(p1.messages)) == (
                False, False, 4, 4,
            )  # fmt: skip
            # b never popped it: it reads the pages back from the broker by handle.
            r0 = await b.pop("g", "events", token, 0, 30, popper(broker))
            r1 = await b.pop("g", "events", token, 1, 30, popper(broker))
            assert r0.replayed and r1.replayed
            assert _identity(r0) == _identity(p0) and _identity(r1) == _identity(p1)
            assert r0.messages == p0.messages  # topic, queue, offset, record too
            assert r0.lease_until_ms == p0.lease_until_ms
            assert b.held_bytes == 0 and len(b) == 0  # replays cache nothing
            # The next page is b's to pop, and then a replays it.
            p2 = await b.pop("g", "events", token, 2, 30, popper(broker))
            assert not p2.replayed and len(p2.messages) == 4
            assert _identity(await a.pop("g", "events", token, 2, 30, popper(broker))) == (
                _identity(p2)
            )
            ids = {m.record.message_id for p in (p0, p1, p2) for m in p.messages}
            assert len(ids) == 12 and await broker.inflight_count(group="g") == 12

    asyncio.run(scenario())


def test_two_proxies_racing_for_a_page_agree_and_the_loser_gives_its_messages_back(
    make_coordinator: MakeCoordinator, tmp_path: Path
) -> None:
    async def scenario() -> None:
        async with (
            lease_broker(tmp_path, 20) as broker,
            make_coordinator() as ca,
            make_coordinator() as cb,
        ):
            a, b = LeaseTable(broker, ca), LeaseTable(broker, cb)
            both_popped = asyncio.Barrier(2)

            def racing() -> Pop:
                async def pop() -> list[PoppedMessage]:
                    popped = await popper(broker)()
                    await both_popped.wait()  # neither has recorded its page yet
                    return popped

                return pop

            leased: set[str] = set()
            for page in (0, 1):
                first, second = await asyncio.gather(
                    a.pop("g", "events", "t", page, 30, racing()),
                    b.pop("g", "events", "t", page, 30, racing()),
                )
                assert _identity(first) == _identity(second)
                assert sorted([first.replayed, second.replayed]) == [False, True]
                assert len(first.messages) == 4
                leased |= {m.record.message_id for m in first.messages}
            # The losers' messages came back at once (a nack without delay, attempt 2): the
            # 8 leased are in flight, the other 12 deliverable now.
            rest: list[PoppedMessage] = []
            while len(rest) < 12:
                rest += await broker.pop("g", "events", max_messages=32, invisible_s=30, wait_s=5)
            others = {m.record.message_id for m in rest}
            assert len(others) == 12 and not others & leased
            assert sum(m.delivery_attempt == 2 for m in rest) == 8
            assert await broker.pop("g", "events", wait_s=0) == []

    asyncio.run(scenario())


def test_renew_and_ack_through_another_proxy_act_on_every_page(
    make_coordinator: MakeCoordinator, tmp_path: Path
) -> None:
    async def scenario() -> None:
        async with (
            lease_broker(tmp_path, 10) as broker,
            make_coordinator() as ca,
            make_coordinator() as cb,
        ):
            a, b = LeaseTable(broker, ca), LeaseTable(broker, cb)
            p0 = await a.pop("g", "events", "t", 0, 10, popper(broker, invisible_s=10))
            await a.pop("g", "events", "t", 1, 10, popper(broker, invisible_s=10))
            (renewed,) = await b.renew("g", ["t"], 60)
            assert renewed.error is None and renewed.messages == 8
            assert renewed.lease_until_ms > p0.lease_until_ms + 40_000
            # Both proxies now replay the new handles: a's cache follows b's renewal.
            via_a = await a.pop("g", "events", "t", 0, 10, popper(broker))
            via_b = await b.pop("g", "events", "t", 0, 10, popper(broker))
            assert _identity(via_a) == _identity(via_b)
            assert via_a.lease_until_ms == renewed.lease_until_ms
            assert [m.record.message_id for m in via_a.messages] == [
                m.record.message_id for m in p0.messages
            ]
            assert not {m.receipt_handle for m in via_a.messages} & {
                m.receipt_handle for m in p0.messages
            }
            (acked,) = await b.ack("g", ["t"])
            assert (acked.error, acked.messages) == (None, 8)
            assert await broker.inflight_count(group="g") == 0
            for table in (a, b):
                with pytest.raises(FailedPreconditionError, match="acknowledged"):
                    await table.pop("g", "events", "t", 1, 10, popper(broker))
            (again,) = await a.ack("g", ["t"])
            assert (again.error, again.messages) == (None, 8)  # repeated: fine, anywhere
            (late,) = await a.renew("g", ["t"], 30)
            assert late.error is not None and "acknowledged" in str(late.error)
            assert a.held_bytes == 0  # an acked lease keeps no bodies

    asyncio.run(scenario())


def test_an_expired_lease_starts_afresh_and_its_entries_go_by_themselves(
    make_coordinator: MakeCoordinator, tmp_path: Path
) -> None:
    async def scenario() -> None:
        async with lease_broker(tmp_path, 6) as broker, make_coordinator() as coordinator:
            table = LeaseTable(broker, coordinator, LeaseConfig(expiry_margin_s=0))
            p0 = await table.pop("g", "events", "t", 0, 1, popper(broker, 2, invisible_s=1))
            await table.pop("g", "events", "t", 1, 1, popper(broker, 2, invisible_s=1))
            assert (await coordinator.list(FOLDER)).entries  # the lease and its two pages
            await asyncio.sleep((p0.lease_until_ms - _now_ms()) / 1000 + 0.05)
            with pytest.raises(FailedPreconditionError, match=r"expired .* from page 0"):
                await table.pop("g", "events", "t", 1, 30, popper(broker))
            fresh = await table.pop("g", "events", "t", 0, 30, popper(broker, 2))
            assert not fresh.replayed
            # Page 1 is the new incarnation's to pop, not the old one's to replay.
            page1 = await table.pop("g", "events", "t", 1, 30, popper(broker, 2))
            assert not page1.replayed
            (acked,) = await table.ack("g", ["t"])
            assert acked.error is None and acked.messages == len(fresh.messages) + len(
                page1.messages
            )
            # The old incarnation's pages expire (TTL: deadline + margin, 2 s at least).
            for _ in range(75):  # 15 s
                if len((await coordinator.list(FOLDER)).entries) <= 3:
                    break
                await asyncio.sleep(0.2)
            assert len((await coordinator.list(FOLDER)).entries) == 3  # lease, pages 0 and 1

    asyncio.run(scenario())


def test_a_coordinator_that_does_not_answer_is_a_retriable_unavailable_naming_etcd(
    own_etcd: EtcdServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        async with (
            lease_broker(tmp_path, 4) as broker,
            EtcdCoordinator(own_etcd.endpoint, cluster=unique_cluster(), timeout_s=1) as c,
        ):
            table = LeaseTable(broker, c)

            async def pop_then_lose_etcd() -> list[PoppedMessage]:
                popped = await popper(broker)()
                await asyncio.to_thread(own_etcd.kill)
                return popped

            with pytest.raises(UnavailableError, match="etcd") as lost:
                await table.pop("g", "events", "t", 0, 30, pop_then_lose_etcd)
            assert lost.value.retriable and lost.value.code == "UNAVAILABLE"
            assert "may not be recorded" in str(lost.value)
            # Not given back (the write may have landed): invisible until their deadline.
            assert await broker.inflight_count(group="g") == 4
            with pytest.raises(UnavailableError, match="etcd"):
                await table.ack("g", ["t"])
            with pytest.raises(UnavailableError, match="etcd"):
                await table.pop("g", "events", "t", 0, 30, popper(broker))
            assert await broker.inflight_count(group="g") == 4  # nothing popped blind

    asyncio.run(scenario())


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
