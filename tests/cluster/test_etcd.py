"""popmq's etcd client and EtcdCoordinator against a real etcd: transactions, leases,
watches, compaction, partitions and restarts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from popmq.coordination import (
    CompactedError,
    CoordinationArgumentError,
    CoordinationUnavailableError,
    EtcdCoordinator,
    LeaseNotFoundError,
    Snapshot,
)
from popmq.coordination.etcd import Compare, Delete, EtcdClient, Get, Put
from popmq.coordination.etcd_reachability import (
    PROBE_TIMEOUT_S,
    UNANSWERED_AFTER_S,
    UNREACHABLE_AFTER_S,
)
from tests.cluster.conftest import unique_cluster
from tests.cluster.link import Link
from tests.support.etcd import EtcdServer
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(60)


async def _eventually(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> float:
    """Poll `check` until true; returns the seconds it took."""
    start = time.monotonic()
    while not await check():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def _until(
    snapshots: AsyncIterator[Snapshot], done: Callable[[Snapshot], bool], timeout_s: float = 15
) -> list[Snapshot]:
    seen: list[Snapshot] = []
    while not seen or not done(seen[-1]):
        seen.append(await asyncio.wait_for(anext(snapshots), timeout_s))
    return seen


def test_get_put_delete_by_key_prefix_and_revision(etcd: EtcdServer) -> None:
    async def scenario() -> None:
        root = f"/{unique_cluster()}/"
        async with EtcdClient(etcd.endpoint) as client:
            r1 = await client.put(root + "a", b"1")
            r2 = await client.put(root + "b", b"2")
            await client.put(root + "a", b"3")
            await client.put(root + "c/x", b"4")
            everything = await client.get(root, prefix=True)
            assert [(kv.key, kv.value) for kv in everything.kvs] == [
                (f"{root}a".encode(), b"3"),
                (f"{root}b".encode(), b"2"),
                (f"{root}c/x".encode(), b"4"),
            ]
            assert everything.kvs[0].version == 2 and everything.kvs[0].create_revision == r1
            past = await client.get(root, prefix=True, revision=r2)
            assert [kv.value for kv in past.kvs] == [b"1", b"2"]
            limited = await client.get(root, prefix=True, limit=1)
            assert limited.more and limited.count == 3 and len(limited.kvs) == 1
            deleted = await client.delete(root + "c/", prefix=True)
            assert deleted.deleted == 1
            assert (await client.get(root + "c/x")).kvs == ()
            status = await client.status()
            assert status.version.startswith("3.") and status.leader and status.revision > r2

    asyncio.run(scenario())


def test_transactions_compare_version_value_and_revisions(etcd: EtcdServer) -> None:
    async def scenario() -> None:
        key = f"/{unique_cluster()}/route"
        async with EtcdClient(etcd.endpoint) as client:
            created, kv = await client.put_if_absent(key, b"v1")
            assert created and kv is not None and kv.version == 1
            again, existing = await client.put_if_absent(key, b"v2")
            assert not again and existing is not None and existing.value == b"v1"

            stale = kv.mod_revision
            swapped, now = await client.compare_and_swap(key, b"v2", mod_revision=stale)
            assert swapped and now is not None and now.value == b"v2"
            lost, current = await client.compare_and_swap(key, b"v3", mod_revision=stale)
            assert not lost and current is not None and current.value == b"v2"
            assert current.mod_revision == now.mod_revision

            result = await client.txn(
                [Compare(key, "version", "==", 2), Compare(key, "value", "==", b"v2")],
                [Put(key, b"v3"), Get(key)],
                [Get(key)],
            )
            assert result.succeeded and result.results[-1].kvs[0].value == b"v3"  # type: ignore[union-attr]
            refused = await client.txn([Compare(key, "value", "!=", b"v3")], [Delete(key)])
            assert not refused.succeeded and refused.results == ()
            deleted, _ = await client.delete_if(key, mod_revision=stale)
            assert not deleted
            latest = (await client.get(key)).kvs[0]
            deleted, _ = await client.delete_if(key, mod_revision=latest.mod_revision)
            assert deleted and (await client.get(key)).kvs == ()

    asyncio.run(scenario())


def test_a_lease_keeps_its_key_while_kept_alive_and_drops_it_after_the_ttl(
    etcd: EtcdServer,
) -> None:
    async def scenario() -> None:
        key = f"/{unique_cluster()}/brokers/a"
        async with EtcdClient(etcd.endpoint) as client:
            lease = await client.lease_grant(2)
            assert lease.ttl_s == 2
            await client.put(key, b"info", lease=lease.id)
            keeper = client.keep_alive(lease)
            await asyncio.sleep(3.0)  # longer than the TTL: only the keepalives hold it
            assert not keeper.lost
            assert (await client.get(key)).kvs[0].lease == lease.id
            await keeper.close()
            assert await keeper.wait_lost() == "keepalive stopped"

            async def gone() -> bool:
                return (await client.get(key)).kvs == ()

            waited = await _eventually(gone, 6, "the key of a lease no longer kept alive goes")
            assert waited > 0.5  # it lasted about the TTL, not less
            assert await client.lease_time_to_live(lease.id) == -1
            with pytest.raises(LeaseNotFoundError):
                await client.lease_revoke(lease.id)

    asyncio.run(scenario())


def test_watch_delivers_puts_and_deletes_in_order_from_a_revision(etcd: EtcdServer) -> None:
    async def scenario() -> None:
        root = f"/{unique_cluster()}/"
        async with EtcdClient(etcd.endpoint) as client:
            await client.put(root + "before", b"0")
            start = await client.put(root + "a", b"1")
            await client.put(root + "b", b"2")
            await client.delete(root + "a")
            await client.put(root + "b", b"3")
            await client.put("/elsewhere", b"not watched")
            events = []
            watch = client.watch(root, prefix=True, start_revision=start)
            while len(events) < 4:
                batch = await asyncio.wait_for(anext(watch), 10)
                assert batch.revision == batch.events[-1].kv.mod_revision
                events += batch.events
            later = await client.put(root + "c", b"4")  # a live change after the history
            batch = await asyncio.wait_for(anext(watch), 10)
            await watch.aclose()
        events += batch.events
        assert [(e.type, e.kv.key.decode()[len(root) :], e.kv.value) for e in events] == [
            ("put", "a", b"1"),
            ("put", "b", b"2"),
            ("delete", "a", b""),
            ("put", "b", b"3"),
            ("put", "c", b"4"),
        ]
        revisions = [e.kv.mod_revision for e in events]
        assert revisions == [*range(start, start + 4), later]

    asyncio.run(scenario())


def test_calls_fail_over_to_the_next_endpoint_and_time_out_with_a_clear_error(
    etcd: EtcdServer,
) -> None:
    async def scenario() -> None:
        dead = f"127.0.0.1:{free_port()}"
        async with EtcdClient(f"{dead},{etcd.endpoint}", timeout_s=5) as client:
            await client.put(f"/{unique_cluster()}/k", b"v")
            assert (await client.status()).endpoint == etcd.endpoint
        async with EtcdClient(dead, timeout_s=0.5) as client:
            start = time.monotonic()
            with pytest.raises(CoordinationUnavailableError, match="is etcd running") as error:
                await client.get("k")
            assert time.monotonic() - start < 2.0
            assert error.value.retriable and error.value.code == "UNAVAILABLE"

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: EtcdClient(""), "empty"),
        (lambda: EtcdClient("http://127.0.0.1:2379"), "is not host:port"),
        (lambda: EtcdClient("127.0.0.1:99999"), "is not host:port"),
        (lambda: EtcdClient("127.0.0.1:2379", timeout_s=0), "not a positive number"),
        (lambda: EtcdCoordinator("127.0.0.1:2379", cluster="a/b"), "cluster name 'a/b'"),
    ],
)
def test_bad_client_settings_are_refused(make: Callable[[], object], match: str) -> None:
    with pytest.raises(CoordinationArgumentError, match=match):
        make()


def test_bad_client_calls_are_refused(etcd: EtcdServer) -> None:
    async def scenario() -> None:
        async with EtcdClient(etcd.endpoint) as client:
            with pytest.raises(CoordinationArgumentError, match="key b'' is empty"):
                await client.put(b"", b"v")
            with pytest.raises(CoordinationArgumentError, match=r"ttl 1s is out of range"):
                await client.lease_grant(1)
            with pytest.raises(CoordinationArgumentError, match="takes an int"):
                await client.txn([Compare("k", "mod_revision", "==", b"1")], [])
            with pytest.raises(CoordinationArgumentError, match="no such revision yet"):
                await client.get("k", revision=10**9)

    asyncio.run(scenario())


@pytest.mark.slow
def test_a_partitioned_member_loses_its_session_and_registers_again(etcd: EtcdServer) -> None:
    """Cut the member's link to etcd: its key goes after the TTL, it is told, and once the
    link is back it registers again with a new epoch."""

    async def scenario() -> None:
        cluster = unique_cluster()
        async with (
            Link(etcd.endpoint) as link,
            EtcdCoordinator(link.endpoint, cluster=cluster, timeout_s=1) as member,
            EtcdCoordinator(etcd.endpoint, cluster=cluster) as observer,
        ):
            session = await member.register("broker", "broker-a", {"addr": "h:1"}, ttl_s=2)
            epoch = session.epoch
            lost = asyncio.ensure_future(session.wait_lost(epoch))
            link.cut()

            async def gone() -> bool:
                return "broker-a" not in await observer.members("broker")

            await _eventually(gone, 8, "the partitioned member's key expires")
            reason = await asyncio.wait_for(lost, 8)
            assert "no keepalive answered" in reason and not session.alive
            link.restore()
            new_epoch = await asyncio.wait_for(session.wait_registered(), 10)
            assert new_epoch > epoch and session.losses == 1
            assert (await observer.members("broker"))["broker-a"].epoch == new_epoch

    asyncio.run(scenario())


@pytest.mark.slow
def test_a_watch_behind_a_compaction_relists_and_converges(own_etcd: EtcdServer) -> None:
    async def scenario() -> None:
        cluster = unique_cluster()
        async with (
            Link(own_etcd.endpoint) as link,
            EtcdCoordinator(link.endpoint, cluster=cluster) as watcher,
            EtcdCoordinator(own_etcd.endpoint, cluster=cluster) as writer,
        ):
            await writer.put("topics/a", {"queues": 1})
            await writer.put("topics/b", {"queues": 1})
            snapshots = watcher.watch("topics/")
            first = await asyncio.wait_for(anext(snapshots), 10)
            assert first.relisted and set(first.entries) == {"topics/a", "topics/b"}
            link.cut()  # the watch misses what follows, then resumes from its revision
            await writer.put("topics/a", {"queues": 2})
            await writer.delete("topics/b")
            last = await writer.put("topics/c", {"queues": 3})
            await writer.client.compact(last.revision)
            link.restore()
            seen = await _until(snapshots, lambda s: s.revision >= last.revision)
            await snapshots.aclose()
        assert seen[-1].relisted  # the history it needed was gone: it listed again
        assert {p: e.value["queues"] for p, e in seen[-1].entries.items()} == {
            "topics/a": 2,
            "topics/c": 3,
        }
        assert "topics/b" in seen[-1].changed  # a re-list names what vanished, too

    asyncio.run(scenario())


@pytest.mark.slow
def test_compaction_is_reported_to_a_watch_from_a_compacted_revision(etcd: EtcdServer) -> None:
    async def scenario() -> None:
        key = f"/{unique_cluster()}/k"
        async with EtcdClient(etcd.endpoint) as client:
            old = await client.put(key, b"1")
            latest = await client.put(key, b"2")
            await client.compact(latest)
            watch = client.watch(key, start_revision=old)
            with pytest.raises(CompactedError) as error:
                await asyncio.wait_for(anext(watch), 10)
            assert error.value.compact_revision == latest
            with pytest.raises(CompactedError):
                await client.get(key, revision=old)

    asyncio.run(scenario())


@pytest.mark.slow
def test_watch_and_sessions_recover_after_etcd_restarts(own_etcd: EtcdServer) -> None:
    """etcd down for longer than the TTL: the member is told, the watch waits on its last
    snapshot; etcd back: it restored the member's key with its lease, and the session takes
    that key over (same epoch), so the watch never sees the member leave."""

    async def scenario() -> None:
        cluster = unique_cluster()
        async with (
            EtcdCoordinator(own_etcd.endpoint, cluster=cluster, timeout_s=1) as member,
            EtcdCoordinator(own_etcd.endpoint, cluster=cluster, timeout_s=1) as proxy,
        ):
            session = await member.register("broker", "broker-a", {"addr": "h:1"}, ttl_s=2)
            epoch = session.epoch
            brokers = proxy.watch("brokers/")
            first = await asyncio.wait_for(anext(brokers), 10)
            assert first.entries["brokers/broker-a"].created_revision == epoch

            await asyncio.to_thread(own_etcd.stop)
            reason = await asyncio.wait_for(session.wait_lost(epoch), 10)
            assert "no keepalive answered" in reason
            await asyncio.sleep(1.0)  # etcd stays down past the TTL
            await asyncio.to_thread(own_etcd.start)

            assert await asyncio.wait_for(session.wait_registered(), 15) == epoch
            assert session.losses == 1 and session.rival is None
            await proxy.put("topics/after", {"queues": 1})  # the cluster serves writes again
            await asyncio.sleep(2.5)  # past the old lease's TTL: it was revoked, not the key
            await proxy.put("brokers/zz-marker", {"addr": "h:9"})  # the watch's last change
            seen = await _until(brokers, lambda s: "brokers/zz-marker" in s.entries)
            assert all("brokers/broker-a" in s.entries for s in seen), "the member left"
            assert seen[-1].entries["brokers/broker-a"].created_revision == epoch
            await proxy.delete("brokers/zz-marker")
            await brokers.aclose()
            await session.close()
            assert await proxy.members("broker") == {}

    asyncio.run(scenario())


@pytest.mark.slow
def test_a_member_whose_name_was_taken_while_it_was_cut_off_sees_the_rival(
    etcd: EtcdServer,
) -> None:
    """Cut off past its TTL, its key expires and another process registers the name; once
    the link is back the session names the rival (epoch and address) instead of
    registering, and registers with a new epoch once the rival is gone."""

    async def scenario() -> None:
        cluster = unique_cluster()
        async with (
            Link(etcd.endpoint) as link,
            EtcdCoordinator(link.endpoint, cluster=cluster, timeout_s=1) as member,
            EtcdCoordinator(etcd.endpoint, cluster=cluster) as other,
        ):
            session = await member.register("broker", "broker-a", {"addr": "h:1"}, ttl_s=2)
            epoch = session.epoch
            link.cut()
            await asyncio.wait_for(session.wait_lost(epoch), 8)

            async def gone() -> bool:
                return "broker-a" not in await other.members("broker")

            await _eventually(gone, 8, "the cut-off member's key expires")
            rival = await other.register("broker", "broker-a", {"addr": "h:2"}, ttl_s=2)
            link.restore()

            async def rivalled() -> bool:
                return session.rival is not None

            await _eventually(rivalled, 10, "the session sees the rival")
            assert f"epoch {rival.epoch}, at h:2" in (session.rival or "")
            assert not session.alive
            await rival.close()
            new_epoch = await asyncio.wait_for(session.wait_registered(), 10)
            assert new_epoch > rival.epoch and session.rival is None
            assert (await other.members("broker"))["broker-a"].info == {"addr": "h:1"}

    asyncio.run(scenario())


@pytest.mark.slow
def test_calls_fail_at_once_while_etcd_is_unreachable_and_work_once_it_is_back(
    own_etcd: EtcdServer,
) -> None:
    """Once nothing has answered for UNREACHABLE_AFTER_S, a call fails after one short try
    instead of waiting out its 5 s timeout; the first answer after etcd returns ends that."""

    async def scenario() -> None:
        async with EtcdClient(own_etcd.endpoint, timeout_s=5) as client:
            await client.put("/k", b"v")
            await asyncio.to_thread(own_etcd.stop)
            began = time.monotonic()
            with pytest.raises(CoordinationUnavailableError, match="is etcd running"):
                await client.get("/k")  # the first call finds the outage: about 2 s
            first = time.monotonic() - began
            assert UNREACHABLE_AFTER_S <= first < 4.5, first
            assert client.reachability.unreachable_for is not None
            for _ in range(3):
                began = time.monotonic()
                with pytest.raises(CoordinationUnavailableError) as error:
                    await client.put("/k", b"w")
                assert time.monotonic() - began < 1.5
                assert f"etcd is unreachable at {own_etcd.endpoint}" in str(error.value)
                assert "failed after one short try of each endpoint" in str(error.value)
                assert error.value.retriable and error.value.code == "UNAVAILABLE"
            await asyncio.to_thread(own_etcd.start)
            deadline = time.monotonic() + 10
            while True:
                try:
                    assert (await client.get("/k")).kvs[0].value == b"v"
                    break
                except CoordinationUnavailableError:
                    assert time.monotonic() < deadline, "etcd did not answer after its return"
                    await asyncio.sleep(0.2)
            assert client.reachability.unreachable_for is None

    asyncio.run(scenario())


@pytest.mark.slow
def test_calls_fail_at_once_while_etcd_is_paused_and_work_as_soon_as_it_resumes(
    own_etcd: EtcdServer,
) -> None:
    """A paused etcd (SIGSTOP: connections open, nothing answers) fails nothing by itself:
    an unanswered keepalive shows it. Once one has waited UNANSWERED_AFTER_S the probe is
    sent, and once that has waited PROBE_TIMEOUT_S calls fail at once, without trying; the
    waiting requests (keepalive, probe) are answered as etcd resumes, and calls work
    again."""

    async def scenario() -> None:
        async with EtcdClient(own_etcd.endpoint, timeout_s=5) as client:
            await client.put("/k", b"v")
            keeper = client.keep_alive(await client.lease_grant(3))  # a keepalive every 1 s
            own_etcd.pause()
            try:
                noticed = await _eventually(
                    lambda: _true(client.reachability.hung_for is not None),
                    1 + UNANSWERED_AFTER_S + PROBE_TIMEOUT_S + 5,
                    "the hang noticed from the unanswered keepalive",
                )
                print(f"hang noticed after {noticed:.1f}s")
                for _ in range(3):
                    began = time.monotonic()
                    with pytest.raises(CoordinationUnavailableError) as error:
                        await client.put("/k", b"w")
                    # Not even PROBE_TIMEOUT_S spent on a try: refused without one.
                    assert time.monotonic() - began < PROBE_TIMEOUT_S
                    assert f"etcd is unreachable at {own_etcd.endpoint}" in str(error.value)
                    assert "Retry once it is back" in str(error.value)
                    assert "a Status request to every endpoint has waited" in str(error.value)
                    assert error.value.retriable and error.value.code == "UNAVAILABLE"
                    await asyncio.sleep(0.5)
            finally:
                own_etcd.resume()
            await _eventually(
                lambda: _true(client.reachability.unreachable_for is None),
                10,
                "etcd answering after its resume",
            )
            assert (await client.get("/k")).kvs[0].value == b"v"
            await client.put("/k", b"x")
            await keeper.close()

    asyncio.run(scenario())


async def _true(value: bool) -> bool:
    return value


def test_a_missing_etcd_fails_with_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.etcd import etcd_binary

    monkeypatch.setenv("POPMQ_ETCD", "/nonexistent/etcd")
    with pytest.raises(pytest.fail.Exception, match=r"make setup.*apt-get install etcd-server"):
        etcd_binary()
