"""Pinned lease tokens (LeasePop and AckLease `pinned`: every call on a token goes to one
proxy; proxy/lease_pinning.py) through an etcd outage: lease tables (proxies) over one real
broker store and a real etcd that is killed and started again."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from popmq.broker_core import (
    Broker,
    FailedPreconditionError,
    PopMQError,
    PoppedMessage,
    ResourceExhaustedError,
    UnavailableError,
)
from popmq.coordination import EtcdCoordinator
from popmq.coordination.errors import ConflictError
from popmq.proxy.lease_config import LeaseConfig
from popmq.proxy.lease_store import LeaseStore
from popmq.proxy.leases import LeaseOutcome, LeasePage, LeaseTable
from tests.cluster.conftest import unique_cluster
from tests.support.etcd import EtcdServer
from tests.support.lease_broker import lease_broker, popper
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(90)


def _ids(page: LeasePage) -> list[str]:
    return [m.record.message_id for m in page.messages]


async def _ack_when_back(table: LeaseTable, token: str, *, pinned: bool) -> LeaseOutcome:
    """An ack by token that a reader retries while it fails retriably (etcd coming back)."""
    for _ in range(300):
        try:
            [outcome] = await table.ack("g", [token], pinned=pinned)
        except UnavailableError:
            await asyncio.sleep(0.1)
            continue
        return outcome
    raise AssertionError(f"ack of {token} kept failing with UNAVAILABLE")


async def _acked(broker: Broker, messages: list[PoppedMessage]) -> bool:
    """Whether every one of `messages` was acknowledged (none is in flight any more)."""
    results = await asyncio.gather(
        *(broker.change_invisible_time("g", m.receipt_handle, 60) for m in messages),
        return_exceptions=True,
    )
    return all(isinstance(r, PopMQError) for r in results)


async def _answers(coordinator: EtcdCoordinator) -> bool:
    """Whether etcd answers `coordinator` again."""
    try:
        await coordinator.get("probe")
    except PopMQError:
        return False
    return True


async def _come_back(broker: Broker, messages: list[PoppedMessage]) -> None:
    """Assert that `messages` were not acknowledged: made visible again, each is delivered
    again (read twice, never lost)."""
    for m in messages:  # raises if it was acknowledged
        await broker.change_invisible_time("g", m.receipt_handle, 1)
    want = {m.record.message_id for m in messages}
    seen: set[str] = set()

    async def delivered() -> bool:
        again = await broker.pop("g", "events", max_messages=32, invisible_s=60, wait_s=0)
        seen.update(m.record.message_id for m in again)
        return want <= seen

    await until(delivered, "the unacknowledged messages delivered again", 30)


@contextlib.asynccontextmanager
async def _proxies(
    etcd: EtcdServer, tmp_path: Path, config: LeaseConfig
) -> AsyncIterator[tuple[Broker, tuple[LeaseTable, LeaseTable]]]:
    """Two proxies' lease tables, each with an etcd client of its own, over one broker."""
    cluster = unique_cluster()
    async with (
        lease_broker(tmp_path, 40) as broker,
        EtcdCoordinator(etcd.endpoint, cluster=cluster, timeout_s=1) as ca,
        EtcdCoordinator(etcd.endpoint, cluster=cluster, timeout_s=1) as cb,
    ):
        yield broker, (LeaseTable(broker, ca, config), LeaseTable(broker, cb, config))


def test_a_pinned_lease_is_read_and_acked_by_token_from_memory_while_etcd_is_down(
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
            pop = popper(broker)
            # "t": page 0 stored before the outage; "n": started during it.
            before = await a.pop("g", "events", "t", 0, 30, pop, pinned=True)
            await asyncio.to_thread(own_etcd.kill)

            # Without the promise, as before: refused retriably.
            with pytest.raises(UnavailableError, match="etcd"):
                await a.pop("g", "events", "t", 1, 30, pop)
            with pytest.raises(UnavailableError, match="etcd"):
                await a.ack("g", ["t"])
            # Pinned: the proxy's memory answers, and every attempt reads the same pages.
            replay = await a.pop("g", "events", "t", 0, 30, pop, pinned=True)
            assert replay.replayed and _ids(replay) == _ids(before)
            p1 = await a.pop("g", "events", "t", 1, 30, pop, pinned=True)
            again = await a.pop("g", "events", "t", 1, 30, pop, pinned=True)
            assert not p1.replayed and again.replayed and _ids(again) == _ids(p1)
            n0 = await a.pop("g", "events", "n", 0, 30, pop, pinned=True)
            assert len(n0.messages) == 4
            assert await broker.inflight_count(group="g") == 12

            # Renewed from memory, as the driver's keeper does through the same proxy.
            [renewed] = await a.renew("g", ["t"], 60)
            assert (renewed.error, renewed.messages) == (None, 8)

            # A proxy the token is not pinned to holds none of it: its ack acks nothing.
            [refused] = await b.ack("g", ["t"], pinned=True)
            assert isinstance(refused.error, UnavailableError), refused
            assert "not held whole by this proxy: it popped none of it" in str(refused.error)
            assert await broker.inflight_count(group="g") == 12

            # The ack by token acks every page the proxy popped of each lease, once; a token
            # it holds nothing of gets its own retriable outcome, after the others' acks.
            acked_t, unknown, acked_n = await a.ack("g", ["t", "never", "n"], pinned=True)
            assert (acked_t.error, acked_t.messages) == (None, 8)
            assert isinstance(unknown.error, UnavailableError) and unknown.messages == 0
            assert (acked_n.error, acked_n.messages) == (None, 4)
            assert await broker.inflight_count(group="g") == 0
            [repeat] = await a.ack("g", ["t"], pinned=True)  # its answer was lost
            assert (repeat.error, repeat.messages) == (None, 8)
            with pytest.raises(FailedPreconditionError, match="acknowledged"):
                await a.pop("g", "events", "t", 0, 30, pop, pinned=True)

            await asyncio.to_thread(own_etcd.start)
            # The acks are written when etcd is back: every proxy then refuses replays, and
            # a repeated ack by token through any proxy acknowledges nothing more.
            store = LeaseStore(ca, margin_s=30)

            async def written() -> bool:
                with contextlib.suppress(UnavailableError):
                    t, n = await store.meta("g", "t"), await store.meta("g", "n")
                    return t is not None and t.acked and n is not None and n.acked
                return False

            await until(written, "the acks made while etcd was down written", 30)
            for token, count in (("t", 8), ("n", 4)):
                other = await _ack_when_back(b, token, pinned=False)
                assert (other.error, other.messages) == (None, count)
            with pytest.raises(FailedPreconditionError, match="acknowledged"):
                await b.pop("g", "events", "t", 0, 30, pop)
            assert await broker.inflight_count(group="g") == 0
            await a.close()
            await b.close()

    asyncio.run(scenario())


def test_a_pinned_reader_is_not_given_a_page_in_place_of_one_its_proxy_did_not_pop(
    own_etcd: EtcdServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        config = LeaseConfig(write_back_interval_s=0.2)
        async with _proxies(own_etcd, tmp_path, config) as (broker, (a, b)):
            pop = popper(broker)
            # Pages another proxy popped (the promise did not hold then), read back here.
            first = await b.pop("g", "events", "t", 0, 30, pop)
            read_back = await a.pop("g", "events", "t", 0, 30, pop, pinned=True)
            assert read_back.replayed and _ids(read_back) == _ids(first)
            mine = await a.pop("g", "events", "u", 0, 30, pop, pinned=True)
            await b.pop("g", "events", "u", 1, 30, pop)
            await a.pop("g", "events", "u", 1, 30, pop, pinned=True)
            await asyncio.to_thread(own_etcd.kill)

            # Page 0 of "t" is stored in etcd (b's): a never pops one of its own in its place,
            # nor a page after a page it did not pop; and it cannot ack either lease whole.
            with pytest.raises(UnavailableError, match="did not pop"):
                await a.pop("g", "events", "t", 0, 30, pop, pinned=True)
            with pytest.raises(UnavailableError, match="did not pop"):
                await a.pop("g", "events", "u", 2, 30, pop, pinned=True)
            replay = await a.pop("g", "events", "u", 0, 30, pop, pinned=True)
            assert replay.replayed and _ids(replay) == _ids(mine)
            inflight = await broker.inflight_count(group="g")
            for token in ("t", "u"):
                [refused] = await a.ack("g", [token], pinned=True)
                assert isinstance(refused.error, UnavailableError), refused
                assert "not held whole" in str(refused.error)
                assert "popped elsewhere or written without an answer" in str(refused.error)
            assert await broker.inflight_count(group="g") == inflight == 12

            await asyncio.to_thread(own_etcd.start)
            # With etcd back the ack by token acks what etcd stores, as before.
            acked = await _ack_when_back(a, "u", pinned=True)
            assert (acked.error, acked.messages) == (None, 8)
            assert await broker.inflight_count(group="g") == 4
            await a.close()
            await b.close()

    asyncio.run(scenario())


def test_pages_popped_for_a_pinned_reader_during_an_outage_are_acked_by_token_once_back(
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
            pop = popper(broker)
            await a.pop("g", "events", "t", 0, 30, pop, pinned=True)
            await asyncio.to_thread(own_etcd.kill)
            p1 = await a.pop("g", "events", "t", 1, 30, pop, pinned=True)
            await asyncio.to_thread(own_etcd.start)
            store = LeaseStore(ca, margin_s=30)

            async def written() -> bool:
                with contextlib.suppress(UnavailableError):
                    meta = await store.meta("g", "t")
                    return meta is not None and await store.page(meta, 1) is not None
                return False

            await until(written, "page 1 written back", 30)
            # An unpinned ack by token through another proxy cannot know that one proxy
            # popped the page: it refuses, acking nothing.
            [refused] = await b.ack("g", ["t"])
            assert refused.error is not None and "read_pages" in str(refused.error)
            assert await broker.inflight_count(group="g") == 8
            # The proxy that popped it (and is pinned) acks the lease by token.
            replay = await a.pop("g", "events", "t", 1, 30, pop, pinned=True)
            assert replay.replayed and _ids(replay) == _ids(p1)
            acked = await _ack_when_back(a, "t", pinned=True)
            assert (acked.error, acked.messages) == (None, 8)
            assert await broker.inflight_count(group="g") == 0
            await a.close()
            await b.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("before", ["restarted", "other_proxy"])
def test_a_pinned_ack_after_etcd_is_back_acks_the_pages_served_from_memory_not_etcds(
    own_etcd: EtcdServer, tmp_path: Path, before: str
) -> None:
    """Page 0 of the token is stored in etcd (incarnation I) by a first attempt: through the
    pinned proxy, which then restarts during the outage (forgetting it), or through another
    proxy before the token was pinned (a query run with another list). During the outage the
    retry reads a fresh page 0 from the pinned proxy's memory, and commits; etcd comes back
    before the ack. The ack acks what the committed attempt read; I's page comes back."""

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
            first = await (a if before == "restarted" else b).pop(
                "g", "events", "t", 0, 30, pop, pinned=before == "restarted"
            )
            await asyncio.to_thread(own_etcd.kill)
            if before == "restarted":
                await a.close()
                a = LeaseTable(broker, ca, config)  # its memory is gone
            committed = await a.pop("g", "events", "t", 0, 30, pop, pinned=True)
            assert not committed.replayed and set(_ids(committed)).isdisjoint(_ids(first))
            await asyncio.to_thread(own_etcd.start)

            outcome = await _ack_when_back(a, "t", pinned=True)
            assert (outcome.error, outcome.messages) == (None, 4)
            assert await _acked(broker, committed.messages)
            await _come_back(broker, first.messages)
            # Acked for every proxy: a repeated ack acks nothing more, replays are refused.
            [repeat] = await b.ack("g", ["t"])
            assert (repeat.error, repeat.messages) == (None, 4)
            with pytest.raises(FailedPreconditionError, match="acknowledged"):
                await b.pop("g", "events", "t", 0, 30, pop)
            await a.close()
            await b.close()

    asyncio.run(scenario())


def test_a_pinned_proxy_restarted_after_writing_back_never_acks_a_page_its_reader_did_not_read(
    own_etcd: EtcdServer, tmp_path: Path
) -> None:
    """As above, but the write-back runs before the proxy restarts again: etcd then holds the
    page the reader read at its number (the stale page 0 is not), and the proxy, holding
    nothing of the outage, refuses the ack by token: nothing acked, both pages come back."""

    async def scenario() -> None:
        cluster = unique_cluster()
        config = LeaseConfig(write_back_interval_s=60)
        async with (
            lease_broker(tmp_path, 40) as broker,
            EtcdCoordinator(own_etcd.endpoint, cluster=cluster, timeout_s=1) as ca,
        ):
            a = LeaseTable(broker, ca, config)
            pop = popper(broker)
            first = await a.pop("g", "events", "t", 0, 30, pop, pinned=True)
            await asyncio.to_thread(own_etcd.kill)
            await a.close()
            a = LeaseTable(broker, ca, config)
            committed = await a.pop("g", "events", "t", 0, 30, pop, pinned=True)
            await asyncio.to_thread(own_etcd.start)
            # A renewal (the driver's keeper) flushes the lease first; then the restart.
            for _ in range(300):
                try:
                    [renewed] = await a.renew("g", ["t"], 30)
                except UnavailableError:
                    await asyncio.sleep(0.1)
                    continue
                break
            assert renewed.error is None
            await a.close()
            a = LeaseTable(broker, ca, config)
            replay = await a.pop("g", "events", "t", 0, 30, pop, pinned=True)
            assert replay.replayed and _ids(replay) == _ids(committed)

            outcome = await _ack_when_back(a, "t", pinned=True)
            assert isinstance(outcome.error, FailedPreconditionError) and outcome.messages == 0
            assert "read_pages" in str(outcome.error)
            await _come_back(broker, first.messages + replay.messages)
            await a.close()

    asyncio.run(scenario())


def test_a_pinned_ack_never_acks_another_proxys_page_at_a_number_its_reader_read_elsewhere(
    own_etcd: EtcdServer, tmp_path: Path
) -> None:
    """Page 1 of the lease is stored by another proxy (a run with another list) that the
    pinned proxy never learnt of; during the outage the pinned proxy pops its own page 1.
    Once etcd is back the ack acks the pinned proxy's pages 0 and 1; the other page 1 comes
    back."""

    async def scenario() -> None:
        config = LeaseConfig(write_back_interval_s=60)
        async with _proxies(own_etcd, tmp_path, config) as (broker, (a, b)):
            pop = popper(broker)
            p0 = await a.pop("g", "events", "t", 0, 30, pop, pinned=True)
            other = await b.pop("g", "events", "t", 1, 30, pop)
            await asyncio.to_thread(own_etcd.kill)
            p1 = await a.pop("g", "events", "t", 1, 30, pop, pinned=True)
            assert not p1.replayed and set(_ids(p1)).isdisjoint(_ids(other))
            await asyncio.to_thread(own_etcd.start)

            # Read again once etcd is back (a retried task), then acked.
            for number, page in ((0, p0), (1, p1)):
                for _ in range(300):
                    try:
                        again = await a.pop("g", "events", "t", number, 30, pop, pinned=True)
                    except UnavailableError:
                        await asyncio.sleep(0.1)
                        continue
                    break
                assert again.replayed and _ids(again) == _ids(page)
            outcome = await _ack_when_back(a, "t", pinned=True)
            assert (outcome.error, outcome.messages) == (None, 8)
            assert await _acked(broker, p0.messages + p1.messages)
            await _come_back(broker, other.messages)
            await a.close()
            await b.close()

    asyncio.run(scenario())


def test_a_pinned_lease_that_expired_during_the_outage_is_acked_once_etcd_is_back(
    own_etcd: EtcdServer, tmp_path: Path
) -> None:
    """The lease expires during the outage and the reader reads it afresh from memory; etcd
    comes back while the expired entry is still kept (its margin): the ack acks the new
    pages."""

    async def scenario() -> None:
        cluster = unique_cluster()
        config = LeaseConfig(write_back_interval_s=60)
        async with (
            lease_broker(tmp_path, 40) as broker,
            EtcdCoordinator(own_etcd.endpoint, cluster=cluster, timeout_s=1) as ca,
        ):
            a = LeaseTable(broker, ca, config)
            expired = await a.pop(
                "g", "events", "t", 0, 1, popper(broker, invisible_s=1), pinned=True
            )
            await asyncio.to_thread(own_etcd.kill)
            await until(
                lambda: expired.lease_until_ms < time.time_ns() // 1_000_000,
                "the lease's deadline passed",
                10,
            )
            fresh = await a.pop("g", "events", "t", 0, 30, popper(broker), pinned=True)
            assert not fresh.replayed and set(_ids(fresh)).isdisjoint(_ids(expired))
            await asyncio.to_thread(own_etcd.start)

            outcome = await _ack_when_back(a, "t", pinned=True)
            assert (outcome.error, outcome.messages) == (None, 4)
            assert await _acked(broker, fresh.messages)
            await a.close()

    asyncio.run(scenario())


def test_a_pinned_ack_acks_nothing_more_once_etcd_holds_the_commits_ack(
    own_etcd: EtcdServer, tmp_path: Path
) -> None:
    """The lease was acked by token (the commit's ack) before the outage; a straggler of
    the committed batch then had a fresh page popped from memory. Once etcd is back the
    driver's repeated ack answers the acked count and acks nothing of that page: its
    messages were read by an attempt that was not committed, and come back."""

    async def scenario() -> None:
        config = LeaseConfig(write_back_interval_s=60)
        async with _proxies(own_etcd, tmp_path, config) as (broker, (a, b)):
            pop = popper(broker)
            earlier = await b.pop("g", "events", "t", 0, 30, pop)
            [acked_before] = await b.ack("g", ["t"])
            assert (acked_before.error, acked_before.messages) == (None, 4)
            await asyncio.to_thread(own_etcd.kill)
            straggler = await a.pop("g", "events", "t", 0, 30, pop, pinned=True)
            assert set(_ids(straggler)).isdisjoint(_ids(earlier))
            await asyncio.to_thread(own_etcd.start)

            outcome = await _ack_when_back(a, "t", pinned=True)
            assert (outcome.error, outcome.messages) == (None, 4)
            assert await broker.inflight_count(group="g") == 4
            await _come_back(broker, straggler.messages)
            await a.close()
            await b.close()

    asyncio.run(scenario())


def test_a_renewal_after_etcd_is_back_keeps_each_held_page_s_own_handles(
    own_etcd: EtcdServer, tmp_path: Path
) -> None:
    """Another proxy stored page 1 before the outage; this proxy popped its own page 1 in
    the outage (written back as a shadow). A renewal once etcd is back renews the stored
    page 1 but must not give this proxy's page its handles: the ack by page id acks the
    page the reader read, never the other pop's messages."""

    async def scenario() -> None:
        config = LeaseConfig(write_back_interval_s=60)
        async with _proxies(own_etcd, tmp_path, config) as (broker, (a, b)):
            pop = popper(broker)
            first = await a.pop("g", "events", "t", 0, 30, pop, by_page=True)
            other = await b.pop("g", "events", "t", 1, 30, pop, by_page=True)
            await asyncio.to_thread(own_etcd.kill)
            mine = await a.pop("g", "events", "t", 1, 30, pop, by_page=True)
            assert not mine.replayed and set(_ids(mine)).isdisjoint(_ids(other))
            await asyncio.to_thread(own_etcd.start)
            for _ in range(300):
                try:
                    await a.renew("g", ["t"], 30)
                except UnavailableError:
                    await asyncio.sleep(0.1)
                    continue
                break
            [outcome] = await a.ack("g", ["t"], {"t": [first.page_id, mine.page_id]})
            assert outcome.error is None, outcome
            assert await _acked(broker, first.messages + mine.messages)
            # The other pop's messages (renewed at the broker, so their handles are new)
            # are all still in flight: nothing of them was acked.
            assert await broker.inflight_count(group="g") == len(other.messages)
            await a.close()
            await b.close()

    asyncio.run(scenario())


def test_a_pinned_lease_whose_entry_cannot_be_taken_over_is_never_left_as_shadows(
    own_etcd: EtcdServer, tmp_path: Path
) -> None:
    """The proxy restarted in the outage and served a fresh page 0; once etcd is back its
    write-back cannot take the entry over (another writer wins every try). It must keep
    what it served rather than shadows that a renewal would drop: the ack acks the
    committed attempt's page, and the first attempt's messages come back."""

    async def scenario() -> None:
        cluster = unique_cluster()
        config = LeaseConfig(write_back_interval_s=60)
        async with (
            lease_broker(tmp_path, 40) as broker,
            EtcdCoordinator(own_etcd.endpoint, cluster=cluster, timeout_s=1) as ca,
        ):
            a = LeaseTable(broker, ca, config)
            pop = popper(broker)
            first = await a.pop("g", "events", "t", 0, 30, pop, pinned=True)
            await asyncio.to_thread(own_etcd.kill)
            await a.close()
            a = LeaseTable(broker, ca, config)  # restarted during the outage
            create = a._store.create

            async def contended(*args: object, previous: object, **kw: object) -> object:
                if previous is not None:  # someone else writes the entry every time
                    raise ConflictError("written meanwhile", key="k", current_revision=1)
                return await create(*args, previous=previous, **kw)  # type: ignore[arg-type]

            a._store.create = contended  # type: ignore[method-assign,assignment]
            committed = await a.pop("g", "events", "t", 0, 30, pop, pinned=True)
            await asyncio.to_thread(own_etcd.start)
            await until(lambda: _answers(ca), "etcd answering again", 30)
            with contextlib.suppress(UnavailableError):
                await a.renew("g", ["t"], 30)  # the keeper's renewal comes first
            outcome = await _ack_when_back(a, "t", pinned=True)
            assert outcome.error is None, outcome
            assert await _acked(broker, committed.messages)
            await _come_back(broker, first.messages)
            await a.close()

    asyncio.run(scenario())


def test_a_pinned_proxys_marks_of_pages_popped_elsewhere_count_as_leases_and_go_once_acked(
    own_etcd: EtcdServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        async with (
            lease_broker(tmp_path, 40) as broker,
            EtcdCoordinator(own_etcd.endpoint, cluster=cluster, timeout_s=1) as ca,
            EtcdCoordinator(own_etcd.endpoint, cluster=cluster, timeout_s=1) as cb,
        ):
            a = LeaseTable(broker, ca, LeaseConfig(max_leases=2, write_back_interval_s=0.2))
            b = LeaseTable(broker, cb, LeaseConfig(write_back_interval_s=0.2))
            pop = popper(broker)
            # Pages another proxy popped (before the tokens were pinned to a).
            for token in ("t", "u"):
                await b.pop("g", "events", token, 0, 30, pop)
            # a remembers that t's page 0 was popped elsewhere: one lease of its table.
            read_back = await a.pop("g", "events", "t", 0, 30, pop, pinned=True)
            assert read_back.replayed and len(a) == 1
            await a.pop("g", "events", "w", 0, 30, pop, pinned=True)
            assert len(a) == 2
            # Full: a third lease is refused, whether a read back or a page of its own.
            inflight = await broker.inflight_count(group="g")
            with pytest.raises(ResourceExhaustedError, match=r"2 leases.*max_leases.*'u'"):
                await a.pop("g", "events", "u", 0, 30, pop, pinned=True)
            with pytest.raises(ResourceExhaustedError, match=r"max_leases.*'x'"):
                await a.pop("g", "events", "x", 0, 30, pop, pinned=True)
            assert len(a) == 2
            assert await broker.inflight_count(group="g") == inflight  # nothing popped

            # Acked: the mark no longer matters. While etcd is down a replay is refused as
            # acknowledged (not as a page popped elsewhere) and a repeated ack answers from
            # memory what the ack acked.
            [acked] = await a.ack("g", ["t"], pinned=True)
            assert (acked.error, acked.messages) == (None, 4)
            await asyncio.to_thread(own_etcd.kill)
            with pytest.raises(FailedPreconditionError, match="acknowledged"):
                await a.pop("g", "events", "t", 0, 30, pop, pinned=True)
            [repeat] = await a.ack("g", ["t"], pinned=True)
            assert (repeat.error, repeat.messages) == (None, 4)
            await asyncio.to_thread(own_etcd.start)
            await a.close()
            await b.close()

    asyncio.run(scenario())
