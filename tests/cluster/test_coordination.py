"""The Coordinator contract, run against LocalCoordinator and EtcdCoordinator (a real etcd)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from popmq.coordination import (
    ConflictError,
    CoordinationArgumentError,
    Coordinator,
    EtcdCoordinator,
    MemberExistsError,
    Snapshot,
)
from popmq.coordination.coordinator import expiry_slack_s
from tests.cluster.conftest import MakeCoordinator, unique_cluster
from tests.support.etcd import EtcdServer

pytestmark = pytest.mark.timeout(60)


async def _next(snapshots: AsyncIterator[Snapshot], timeout_s: float = 10.0) -> Snapshot:
    return await asyncio.wait_for(anext(snapshots), timeout_s)


def test_compare_and_set_creates_once_and_refuses_a_stale_revision(
    make_coordinator: MakeCoordinator,
) -> None:
    async def scenario() -> None:
        async with make_coordinator() as a, make_coordinator() as b:
            created = await a.compare_and_set("topics/orders", {"queues": 4}, revision=0)
            assert created.value == {"queues": 4} and created.version == 1
            with pytest.raises(ConflictError, match="expected absent") as absent:
                await b.compare_and_set("topics/orders", {"queues": 8}, revision=0)
            assert absent.value.current_revision == created.revision
            assert absent.value.code == "FAILED_PRECONDITION"

            grown = await b.compare_and_set(
                "topics/orders", {"queues": 8}, revision=created.revision
            )
            assert grown.revision > created.revision
            assert grown.created_revision == created.created_revision
            assert grown.version == 2
            with pytest.raises(ConflictError, match=f"at revision {grown.revision}") as stale:
                await a.compare_and_set("topics/orders", {"queues": 6}, revision=created.revision)
            assert stale.value.current_revision == grown.revision
            read = await a.get("topics/orders")
            assert read is not None and read.value == {"queues": 8}

    asyncio.run(scenario())


def test_delete_at_a_revision_and_unconditional_put(make_coordinator: MakeCoordinator) -> None:
    async def scenario() -> None:
        async with make_coordinator() as c:
            first = await c.put("groups/billing", {"fifo": False})
            second = await c.put("groups/billing", {"fifo": True})
            assert second.version == 2 and second.created_revision == first.created_revision
            with pytest.raises(ConflictError):
                await c.delete("groups/billing", revision=first.revision)
            assert await c.delete("groups/billing", revision=second.revision)
            assert await c.get("groups/billing") is None
            assert not await c.delete("groups/billing")
            with pytest.raises(ConflictError, match="does not exist"):
                await c.compare_and_set("groups/billing", {}, revision=second.revision)
            again = await c.compare_and_set("groups/billing", {"fifo": True}, revision=0)
            assert again.created_revision > first.created_revision  # a new incarnation

    asyncio.run(scenario())


def test_members_register_list_and_leave(make_coordinator: MakeCoordinator) -> None:
    async def scenario() -> None:
        async with make_coordinator() as a, make_coordinator() as b:
            broker = await a.register("broker", "broker-a", {"addr": "127.0.0.1:1"}, ttl_s=5)
            proxy = await b.register("proxy", "proxy-1", {"addr": "127.0.0.1:2"})
            assert broker.alive and broker.epoch > 0
            brokers = await b.members("broker")
            assert list(brokers) == ["broker-a"]
            assert brokers["broker-a"].info == {"addr": "127.0.0.1:1"}
            assert brokers["broker-a"].epoch == broker.epoch
            assert list(await a.members("proxy")) == ["proxy-1"]
            with pytest.raises(MemberExistsError, match="registered already"):
                await b.register("broker", "broker-a", {"addr": "127.0.0.1:3"})
            await broker.close()
            assert await b.members("broker") == {}
            assert not broker.alive
            await proxy.close()
            assert await a.members("proxy") == {}

    asyncio.run(scenario())


def test_an_expired_member_is_told_and_registers_again_with_a_new_epoch(
    make_coordinator: MakeCoordinator,
) -> None:
    async def scenario() -> None:
        async with make_coordinator() as a, make_coordinator() as b:
            session = await a.register("broker", "broker-a", {"addr": "h:1"}, ttl_s=3)
            epoch = session.epoch
            lost = asyncio.ensure_future(session.wait_lost(epoch))
            assert await b.expire_member("broker", "broker-a")
            reason = await asyncio.wait_for(lost, 10)
            assert "expire" in reason or "revoked" in reason
            new_epoch = await asyncio.wait_for(session.wait_registered(), 10)
            assert new_epoch > epoch and session.losses == 1
            assert (await b.members("broker"))["broker-a"].epoch == new_epoch
            assert not await b.expire_member("broker", "nobody")
            await session.close()

    asyncio.run(scenario())


def test_watch_lists_then_follows_puts_and_deletes_in_order(
    make_coordinator: MakeCoordinator,
) -> None:
    async def scenario() -> None:
        async with make_coordinator() as writer, make_coordinator() as reader:
            await writer.put("topics/a", {"queues": 1})
            await writer.put("groups/g", {"fifo": False})  # outside the watched folder
            snapshots = reader.watch("topics/")
            first = await _next(snapshots)
            assert first.relisted and dict(first.entries).keys() == {"topics/a"}
            b = await writer.put("topics/b", {"queues": 2})
            a2 = await writer.put("topics/a", {"queues": 3})
            await writer.put("groups/g", {"fifo": True})
            await writer.delete("topics/b")
            seen: list[Snapshot] = []  # etcd may deliver several revisions in one batch
            while not seen or "topics/b" in seen[-1].entries:
                seen.append(await _next(snapshots))
            revisions = [s.revision for s in seen]
            assert revisions == sorted(revisions) and revisions[0] >= b.revision
            states = [{p: e.value["queues"] for p, e in s.entries.items()} for s in seen]
            # Each snapshot is a state the writes passed through, in their order.
            passed = [{"topics/a": 1, "topics/b": 2}, {"topics/a": 3, "topics/b": 2}]
            passed.append({"topics/a": 3})
            assert [passed.index(state) for state in states] == sorted(
                passed.index(state) for state in states
            )
            last = seen[-1]
            assert {p: e.value for p, e in last.entries.items()} == {"topics/a": {"queues": 3}}
            assert last.entries["topics/a"].revision == a2.revision
            assert not any(s.relisted for s in seen)
            assert all(p.startswith("topics/") for s in seen for p in s.changed)
            await snapshots.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda c: c.get(""), "path '' is invalid"),
        (lambda c: c.get("topics//x"), "is invalid"),
        (lambda c: c.get("topics/a b"), "is invalid"),
        (lambda c: c.list("topics"), "must be '' or end in '/'"),
        (lambda c: c.put("topics/a", ["not", "an", "object"]), "must be a JSON object"),
        (lambda c: c.put("topics/a", {"x": float("nan")}), "not JSON"),
        (lambda c: c.put("topics/a", {"x": object()}), "not JSON"),
        (lambda c: c.compare_and_set("topics/a", {}, revision=-1), "not a revision"),
        (lambda c: c.register("broker", "", {}), "name '' is invalid"),
        (lambda c: c.register("broker", "a/b", {}), "is invalid"),
        (lambda c: c.register("queen", "a", {}), "kind 'queen' is unknown"),
        (lambda c: c.register("broker", "a", {}, ttl_s=1), r"ttl 1s is out of range"),
        (lambda c: c.register("broker", "a", {}, ttl_s=100_000), r"out of range: use whole"),
        (lambda c: c.register("broker", "a", {}, ttl_s=2.5), "not a whole number"),
        (lambda c: c.put("topics/a", {}, ttl_s=1), r"ttl 1s is out of range"),
        (lambda c: c.put("topics/a", {}, ttl_s=0), r"ttl 0s is out of range"),
        (lambda c: c.compare_and_set("topics/a", {}, revision=0, ttl_s=0.5), "not a whole"),
        (lambda c: c.compare_and_set("topics/a", {}, revision=0, ttl_s=True), "not a whole"),
    ],
)
def test_bad_input_is_refused_with_what_is_allowed(
    make_coordinator: MakeCoordinator, call: object, match: str
) -> None:
    async def scenario() -> None:
        async with make_coordinator() as c:
            with pytest.raises(CoordinationArgumentError, match=match) as error:
                await call(c)  # type: ignore[operator]
            assert error.value.code == "INVALID_ARGUMENT"
            assert await c.members("broker") == {}  # nothing was registered
            assert await c.get("topics/a") is None  # nor written

    asyncio.run(scenario())


def test_both_implementations_satisfy_the_protocol(make_coordinator: MakeCoordinator) -> None:
    async def scenario() -> None:
        async with make_coordinator() as c:
            assert isinstance(c, Coordinator)

    asyncio.run(scenario())


def test_an_entry_written_with_a_ttl_lives_that_long_then_goes_and_watchers_see_it(
    make_coordinator: MakeCoordinator,
) -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        async with make_coordinator() as writer, make_coordinator() as reader:
            snapshots = reader.watch("leases/")
            assert dict((await _next(snapshots)).entries) == {}
            written = loop.time()
            await writer.put("leases/kept", {"n": 1})
            await writer.put("leases/short", {"n": 2}, ttl_s=2)
            await writer.compare_and_set("leases/cas", {"n": 3}, revision=0, ttl_s=2)
            # A put without a TTL makes an expiring entry permanent; a new TTL replaces one.
            await writer.put("leases/made-permanent", {"n": 4}, ttl_s=2)
            await writer.put("leases/made-permanent", {"n": 5})
            renewed = await writer.put("leases/renewed", {"n": 6}, ttl_s=2)
            renewed = await writer.compare_and_set(
                "leases/renewed", {"n": 7}, revision=renewed.revision, ttl_s=30
            )
            await asyncio.sleep(max(0.0, written + 1.0 - loop.time()))
            short = await reader.get("leases/short")
            assert short is not None and short.value == {"n": 2}  # lives at least its TTL

            seen = await _next(snapshots)
            give_up = written + 2 + expiry_slack_s(2) + 5  # + etcd's expiry check, generously
            while seen.revision < renewed.revision or {"leases/short", "leases/cas"} & set(
                seen.entries
            ):
                seen = await _next(snapshots, max(0.1, give_up - loop.time()))
            assert loop.time() - written >= 2
            assert set(seen.entries) == {"leases/kept", "leases/made-permanent", "leases/renewed"}
            assert await reader.get("leases/short") is None
            assert await reader.get("leases/cas") is None
            assert (await reader.get("leases/renewed")).value == {"n": 7}  # type: ignore[union-attr]
            # Gone means absent: it can be created again.
            again = await writer.compare_and_set("leases/cas", {"n": 8}, revision=0, ttl_s=5)
            assert again.version == 1
            await snapshots.aclose()

    asyncio.run(scenario())


def test_etcd_entries_with_nearby_expiries_share_a_lease_and_a_lost_lease_is_replaced(
    etcd: EtcdServer,
) -> None:
    async def scenario() -> None:
        async with EtcdCoordinator(etcd.endpoint, cluster=unique_cluster()) as c:
            # TTLs of minutes: their slack (30 s) is the window within which the second write
            # must come to share the first's lease, whatever the machine's load.
            await c.put("leases/a", {"n": 1}, ttl_s=300)
            await c.compare_and_set("leases/b", {"n": 2}, revision=0, ttl_s=301)
            await c.put("leases/c", {"n": 3}, ttl_s=3000)  # far off: a lease of its own
            a, b, far = [
                (await c.client.get(c.root + f"leases/{name}")).kvs[0].lease for name in "abc"
            ]
            assert a and a == b and far not in (0, a)
            left = await c.client.lease_time_to_live(a)
            assert 299 <= left <= 300 + expiry_slack_s(300) + 1
            await c.client.lease_revoke(a)  # its entries go with it
            assert await c.get("leases/a") is None and await c.get("leases/b") is None
            replaced = await c.put("leases/a", {"n": 4}, ttl_s=30)  # a new lease, not an error
            assert replaced.value == {"n": 4}
            lease = (await c.client.get(c.root + "leases/a")).kvs[0].lease
            assert lease not in (0, a)

    asyncio.run(scenario())
