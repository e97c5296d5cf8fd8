"""Lease page identities (AckLease naming the pages read) and pages served from a proxy's
memory while etcd is down (proxy/lease_outage.py): lease tables (proxies) over one real
broker store and a real etcd (or LocalCoordinator where etcd stays up)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest

from popmq.broker_core import (
    InvalidArgumentError,
    UnavailableError,
)
from popmq.coordination import EtcdCoordinator
from popmq.proxy.lease_config import LeaseConfig
from popmq.proxy.lease_store import LeaseStore, PageId
from popmq.proxy.leases import LeaseOutcome, LeasePage, LeaseTable
from tests.cluster.conftest import MakeCoordinator, unique_cluster
from tests.support.etcd import EtcdServer
from tests.support.lease_broker import lease_broker, popper
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(90)


def _ids(page: LeasePage) -> list[str]:
    return [m.record.message_id for m in page.messages]


def test_an_ack_naming_a_page_that_is_not_the_stored_one_acks_nothing_of_it(
    make_coordinator: MakeCoordinator, tmp_path: Path
) -> None:
    async def scenario() -> None:
        async with lease_broker(tmp_path, 20) as broker, make_coordinator() as coordinator:
            table = LeaseTable(broker, coordinator)
            p0 = await table.pop("g", "events", "t", 0, 30, popper(broker))
            p1 = await table.pop("g", "events", "t", 1, 30, popper(broker))
            assert p0.page_id and p1.page_id and p0.page_id != p1.page_id
            replay = await table.pop("g", "events", "t", 0, 30, popper(broker))
            assert replay.replayed and replay.page_id == p0.page_id
            # Page 0 of the same lease as another pop made it (another proxy's, during an
            # outage): not the stored page 0, so nothing of the stored one is acked.
            stored = PageId.parse(p0.page_id)
            other = str(PageId(stored.incarnation, 0, "0123456789abcdef"))
            [mismatch] = await table.ack("g", ["t"], {"t": [other]})
            assert mismatch.error is not None and mismatch.error.code == "FAILED_PRECONDITION"
            assert "not stored as its pages" in str(mismatch.error), mismatch.error
            assert mismatch.messages == 0
            assert await broker.inflight_count(group="g") == 8
            # Named rightly: exactly page 0, not page 1 (the reader did not read it).
            [acked] = await table.ack("g", ["t"], {"t": [p0.page_id]})
            assert (acked.error, acked.messages) == (None, 4)
            assert await broker.inflight_count(group="g") == 4
            # A repeated ack (its answer was lost) answers the same and acks nothing more.
            [again] = await table.ack("g", ["t"], {"t": [p0.page_id]})
            assert (again.error, again.messages) == (None, 4)
            assert await broker.inflight_count(group="g") == 4
            with pytest.raises(InvalidArgumentError, match="page id 'p0' is not one"):
                await table.ack("g", ["t"], {"t": ["p0"]})
            with pytest.raises(InvalidArgumentError, match="lease_tokens does not list"):
                await table.ack("g", ["t"], {"u": [p0.page_id]})

    asyncio.run(scenario())


async def _ack_when_back(table: LeaseTable, token: str, page_ids: list[str]) -> LeaseOutcome:
    """The ack a reader retries while it fails retriably (etcd coming back, pages being
    written back)."""
    for _ in range(300):
        try:
            [outcome] = await table.ack("g", [token], {token: page_ids})
        except UnavailableError:
            await asyncio.sleep(0.1)
            continue
        return outcome
    raise AssertionError(f"ack of {token} kept failing with UNAVAILABLE")


def test_pages_popped_while_etcd_is_down_are_served_acked_by_page_and_written_back(
    own_etcd: EtcdServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        config = LeaseConfig(write_back_interval_s=0.2)
        async with (
            lease_broker(tmp_path, 40) as broker,
            EtcdCoordinator(own_etcd.endpoint, cluster=cluster, timeout_s=1) as ca,
            EtcdCoordinator(own_etcd.endpoint, cluster=cluster, timeout_s=1) as cb,
        ):
            a, b = LeaseTable(broker, ca, config), LeaseTable(broker, cb, config)
            bounded = LeaseTable(broker, ca, LeaseConfig(max_outage_pages=1))
            pop = popper(broker)
            before = await a.pop("g", "events", "t", 0, 30, pop, by_page=True)
            await asyncio.to_thread(own_etcd.kill)

            # A reader that acks by token is refused, as before.
            with pytest.raises(UnavailableError, match="etcd"):
                await a.pop("g", "events", "t", 1, 30, pop)
            # One that acks by page reads on from this proxy's memory.
            replay = await a.pop("g", "events", "t", 0, 30, pop, by_page=True)
            assert replay.replayed and _ids(replay) == _ids(before)
            assert replay.page_id == before.page_id
            p1 = await a.pop("g", "events", "t", 1, 30, pop, by_page=True)
            assert not p1.replayed and len(p1.messages) == 4 and p1.page_id
            again = await a.pop("g", "events", "t", 1, 30, pop, by_page=True)
            assert again.replayed and _ids(again) == _ids(p1) and again.page_id == p1.page_id

            # Another proxy cannot know a's pages: page 1 fails retriably, and page 0 is a
            # page of its own (another attempt of the read), which a's ack never acks.
            with pytest.raises(UnavailableError, match="etcd"):
                await b.pop("g", "events", "t", 1, 30, pop, by_page=True)
            other = await b.pop("g", "events", "t", 0, 30, pop, by_page=True)
            assert other.page_id != before.page_id
            assert not set(_ids(other)) & set(_ids(before) + _ids(p1))
            with pytest.raises(UnavailableError, match="not held by this proxy"):
                await b.ack("g", ["t"], {"t": [before.page_id, p1.page_id]})

            # Renewed at the broker from memory.
            [renewed] = await a.renew("g", ["t"], 60)
            assert (renewed.error, renewed.messages) == (None, 8)
            with pytest.raises(UnavailableError, match="not held by this proxy"):
                await b.renew("g", ["absent"], 60)

            # Bounded: past max_outage_pages a new page is refused retriably.
            await bounded.pop("g", "events", "u", 0, 30, pop, by_page=True)
            inflight = await broker.inflight_count(group="g")
            with pytest.raises(UnavailableError, match="max_outage_pages"):
                await bounded.pop("g", "events", "u", 1, 30, pop, by_page=True)
            assert await broker.inflight_count(group="g") == inflight  # nothing popped

            await asyncio.to_thread(own_etcd.start)
            # Each proxy writes what it popped: a's page 1 at its number, b's page 0 (the
            # number was a's) as a shadow, under its own id; a writes its renewal too (the
            # lease's deadline), so the lease does not look expired before its messages.
            store = LeaseStore(ca, margin_s=30)

            async def written() -> bool:
                with contextlib.suppress(UnavailableError):
                    found = [
                        await store.page_by_id("g", "t", PageId.parse(p.page_id))
                        for p in (p1, other)
                    ]
                    meta = await store.meta("g", "t")
                    assert meta is not None and meta.deadline_ms <= renewed.lease_until_ms
                    return None not in found and meta.deadline_ms == renewed.lease_until_ms
                return False

            await until(written, "the pages popped while etcd was down written", 30)
            # Now every proxy answers the stored pages: b replays a's page 0.
            after = await b.pop("g", "events", "t", 0, 30, pop, by_page=True)
            assert after.replayed and after.page_id == before.page_id
            assert _ids(after) == _ids(before)
            acked = await _ack_when_back(b, "t", [before.page_id, p1.page_id])
            assert (acked.error, acked.messages) == (None, 8)
            acked_other = await _ack_when_back(a, "t", [other.page_id])
            assert (acked_other.error, acked_other.messages) == (None, 4)
            assert await broker.inflight_count(group="g") == 4  # the bounded table's page
            await bounded.close()
            await a.close()
            await b.close()

    asyncio.run(scenario())


def test_a_replay_of_a_number_another_proxy_stored_first_answers_that_page_whole(
    own_etcd: EtcdServer, tmp_path: Path
) -> None:
    """A proxy popped page 1 into memory during the outage; once etcd is back another proxy
    stores its own page 1 before the first one's write-back (which then makes a shadow). A
    replay of page 1 through the first proxy answers the stored page, its messages and its
    id together, never the held page's messages under the stored page's id."""

    async def scenario() -> None:
        cluster = unique_cluster()
        config = LeaseConfig(write_back_interval_s=60)  # only the calls flush
        async with (
            lease_broker(tmp_path, 40) as broker,
            EtcdCoordinator(own_etcd.endpoint, cluster=cluster, timeout_s=1) as ca,
            EtcdCoordinator(own_etcd.endpoint, cluster=cluster, timeout_s=1) as cb,
        ):
            a, b = LeaseTable(broker, ca, config), LeaseTable(broker, cb, config)
            pop = popper(broker)
            await a.pop("g", "events", "t", 0, 30, pop, by_page=True)
            await asyncio.to_thread(own_etcd.kill)
            held = await a.pop("g", "events", "t", 1, 30, pop, by_page=True)
            await asyncio.to_thread(own_etcd.start)
            for _ in range(300):
                with contextlib.suppress(UnavailableError):
                    stored = await b.pop("g", "events", "t", 1, 30, pop, by_page=True)
                    break
                await asyncio.sleep(0.1)
            assert not stored.replayed and set(_ids(stored)).isdisjoint(_ids(held))

            replay = await a.pop("g", "events", "t", 1, 30, pop, by_page=True)
            assert (replay.page_id, _ids(replay)) == (stored.page_id, _ids(stored))
            # Acked by the id it answered: exactly the stored page's messages.
            [acked] = await a.ack("g", ["t"], {"t": [replay.page_id]})
            assert (acked.error, acked.messages) == (None, 4)
            assert await broker.inflight_count(group="g") == 8  # page 0 and the held page 1
            await a.close()
            await b.close()

    asyncio.run(scenario())


def test_the_outage_page_bound_frees_room_as_held_pages_are_acked_expire_or_are_written(
    own_etcd: EtcdServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        config = LeaseConfig(max_outage_pages=2, write_back_interval_s=0.2)
        async with (
            lease_broker(tmp_path, 40) as broker,
            EtcdCoordinator(own_etcd.endpoint, cluster=cluster, timeout_s=1) as coordinator,
        ):
            table = LeaseTable(broker, coordinator, config)
            pop, brief = popper(broker), popper(broker, invisible_s=1)
            await asyncio.to_thread(own_etcd.kill)
            u0 = await table.pop("g", "events", "u", 0, 30, pop, by_page=True)
            v0 = await table.pop("g", "events", "v", 0, 1, brief, by_page=True)
            with pytest.raises(UnavailableError, match="max_outage_pages"):
                await table.pop("g", "events", "w", 0, 30, pop, by_page=True)
            # A replay holds nothing more.
            again = await table.pop("g", "events", "u", 0, 30, pop, by_page=True)
            assert again.replayed and again.page_id == u0.page_id

            # Acked from memory: its page no longer waits to be written, so one more fits.
            [acked] = await table.ack("g", ["u"], {"u": [u0.page_id]})
            assert (acked.error, acked.messages) == (None, 4)
            w0 = await table.pop("g", "events", "w", 0, 30, pop, by_page=True)
            with pytest.raises(UnavailableError, match="max_outage_pages"):
                await table.pop("g", "events", "x", 0, 30, pop, by_page=True)

            # Past its deadline: its messages are the broker's again, and it holds no room.
            await until(lambda: _now_ms() > v0.lease_until_ms, "lease v's deadline passed", 30)
            x0 = await table.pop("g", "events", "x", 0, 30, pop, by_page=True)

            # Written once etcd is back: the room is free again for the next outage.
            await asyncio.to_thread(own_etcd.start)
            store = LeaseStore(coordinator, margin_s=30)

            async def written() -> bool:
                with contextlib.suppress(UnavailableError):
                    found = [
                        await store.page_by_id("g", token, PageId.parse(p.page_id))
                        for token, p in (("w", w0), ("x", x0))
                    ]
                    return None not in found
                return False

            await until(written, "the pages held through the outage written", 30)
            await asyncio.to_thread(own_etcd.kill)
            for token in ("y", "z"):
                fresh = await table.pop("g", "events", token, 0, 30, pop, by_page=True)
                assert not fresh.replayed and len(fresh.messages) == 4
            await asyncio.to_thread(own_etcd.start)
            await table.close()

    asyncio.run(scenario())


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
