"""RemoteBroker against a BrokerService over a real Broker (RocksDB) on 127.0.0.1:0, in the
test's event loop: every operation round-trips, errors keep their class and fields, long
polls wake on arrivals and are released, the catalog cache follows writes, and a send may
name its queue."""

from __future__ import annotations

import asyncio
import inspect
import time
from pathlib import Path

import pytest

from popmq.broker_core import (
    AlreadyExistsError,
    AnswerBoundError,
    BrokerAPI,
    GroupSettings,
    GroupState,
    InvalidArgumentError,
    InvalidReceiptHandleError,
    NewMessage,
    NotFoundError,
    PopConfig,
    PoppedMessage,
    ReceiptHandleSupersededError,
    Subscription,
    UnavailableError,
)
from popmq.broker_core.broker import Broker
from popmq.cluster import RemoteBroker
from tests.support.brokers import gated_port, remote, served_broker


def test_remote_broker_implements_every_member_of_the_protocol_with_its_signature() -> None:
    members = {n: v for n, v in vars(BrokerAPI).items() if not n.startswith("_") and callable(v)}
    for name, declared in sorted(members.items()):
        implemented = getattr(RemoteBroker, name, None)
        assert implemented is not None, f"RemoteBroker lacks {name}"
        assert inspect.signature(implemented) == inspect.signature(declared), name  # type: ignore[arg-type]
        assert inspect.iscoroutinefunction(implemented) == inspect.iscoroutinefunction(declared), (
            name
        )


def test_every_operation_round_trips(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b", pop=PopConfig(max_batch=16)) as served:
            async with remote(served.address) as api:
                local: Broker = served.broker
                info = api.server_info()
                assert info == local.server_info()
                assert info.pop.max_batch == 16

                topic = await api.create_topic("orders", 2)
                assert api.topic_info("orders") == topic == local.topic_info("orders")
                delay = await api.create_topic("later", 1, message_type="delay")
                assert delay.message_type_name == "delay"
                assert {t.name for t in await api.list_topics()} == {"orders", "later"}
                grown = await api.update_topic("orders", 3)
                assert grown.queues == 3 and api.topic_info("orders").queues == 3

                group = await api.create_group("g", max_delivery_attempts=3, retry_backoff_s=[1, 2])
                assert api.get_group("g") == group == local.get_group("g")
                settings = GroupSettings(
                    fifo=False, subscriptions=(Subscription("orders", "tag", "red || blue"),)
                )
                g2 = await api.create_group_with_settings("g2", settings=settings)
                assert api.group_settings("g2") == local.group_settings("g2")
                assert api.subscription_filter("g2", "orders") == ("tag", "red || blue")
                assert api.subscription_filter("nobody", "orders") is None
                updated = await api.update_group("g2", max_delivery_attempts=5, fifo=True)
                assert updated.max_delivery_attempts == 5 and api.group_settings("g2").fifo
                assert {g.name for g in await api.list_groups()} == {"g", "g2"}
                assert g2.name == "g2"

                sent = await api.send(
                    [
                        NewMessage("orders", b"a", tag="red", keys=("k1",), properties={"p": "1"}),
                        NewMessage("orders", b"b", tag="blue", queue_id=2),
                    ]
                )
                assert sent[1].queue_id == 2
                delayed = await api.send(
                    [NewMessage("later", b"d", deliver_at_ms=int(time.time() * 1000) + 60_000)]
                )
                assert delayed[0].recall_handle
                assert await api.recall("later", delayed[0].recall_handle) == delayed[0].message_id

                found = await api.query_message("orders", sent[0].message_id)
                assert (
                    found.record == (await local.query_message("orders", sent[0].message_id)).record
                )
                assert found.record.properties == {"p": "1"}
                by_key = await api.query_messages_by_key("orders", "k1")
                assert [m.record.body for m in by_key] == [b"a"]

                api.server_info().pop_arguments(max_messages=16, invisible_s=30, wait_s=1)
                popped = await api.pop("g", "orders", max_messages=8, invisible_s=30, wait_s=0)
                assert sorted(m.record.body for m in popped) == [b"a", b"b"]
                assert all(m.delivery_attempt == 1 for m in popped)
                assert await api.inflight_count(group="g") == 2
                assert await api.inflight_count(group="g", topic="orders") == 2
                first, second = popped
                new_handle, until = await api.change_invisible_time("g", first.receipt_handle, 60)
                assert new_handle != first.receipt_handle and until > time.time() * 1000
                live, stale = await api.get_deliveries("g", [new_handle, first.receipt_handle])
                assert [live] == (await local.get_deliveries("g", [new_handle]))
                assert isinstance(live, PoppedMessage)
                assert (live.receipt_handle, live.invisible_until_ms) == (new_handle, until)
                assert live.record == first.record and live.offset == first.offset
                assert isinstance(stale, ReceiptHandleSupersededError)
                assert stale.code == "FAILED_PRECONDITION"
                followed = await api.follow_handles(
                    "g", [first.receipt_handle, new_handle, "not-a-handle"]
                )
                assert followed[:2] == [(new_handle, until)] * 2  # the old one leads to it
                assert isinstance(followed[2], InvalidReceiptHandleError)
                redeliver_at = await api.nack("g", second.receipt_handle, 1.0)
                assert redeliver_at > 0
                acks = await api.ack("g", [new_handle, first.receipt_handle])
                assert acks[0] is None
                assert isinstance(acks[1], ReceiptHandleSupersededError)

                lag = await api.group_lag("g", "orders")
                assert lag == await local.group_lag("g", "orders")
                report = await api.lag_report("g")
                assert report == await local.lag_report("g")

                again = await api.pop("g", "orders", max_messages=1, wait_s=3)
                assert [m.record.body for m in again] == [b"b"]
                assert again[0].delivery_attempt == 2
                assert (await api.dead_letter("g", again[0].receipt_handle)) == "%DLQ%g"
                assert "%DLQ%g" in {t.name for t in await api.list_topics()}
                redriven = await api.redrive("g")
                assert (redriven.moved, redriven.remaining) == (1, 0)

                pulled = await api.pull("orders", 0, 0, 8)
                assert pulled == await local.pull("orders", 0, 0, 8)
                waited = await api.pull_wait("orders", 2, 0, 8, wait_s=0, filter_expression="blue")
                assert waited == await local.pull_wait("orders", 2, 0, 8, filter_expression="blue")
                assert waited.messages and {r.body for _, r in waited.messages} == {b"b"}
                await api.commit_offsets("g2", "orders", [(0, 1)])
                offsets = await api.get_offsets("g2", "orders")
                assert offsets == await local.get_offsets("g2", "orders")
                assert (offsets[0].offset, offsets[0].committed) == (1, True)
                assert await api.offsets_at("orders", 0) == await local.offsets_at("orders", 0)
                ready = await api.await_messages("orders", {0: 0}, 0.1)
                assert ready == await local.await_messages("orders", {0: 0}, 0.1)

                desc = await api.describe_topic("orders")
                assert desc == await local.describe_topic("orders")
                got = await api.get_topic("orders")
                assert got == await local.get_topic("orders")
                peeked = await api.peek("orders", queue_id=0, offset=0, max_messages=4)
                assert [m.record for m in peeked] == [
                    m.record
                    for m in await local.peek("orders", queue_id=0, offset=0, max_messages=4)
                ]
                reset = await api.reset_offsets("g2", "orders", target="earliest", force=True)
                assert reset.queues
                reset = await api.reset_offsets(
                    "g2", "orders", target="offsets", offsets={0: 1}, force=True
                )
                assert [(c.queue_id, c.new_offset) for c in reset.queues] == [(0, 1)]
                assert await api.purge("orders", 0) == 1

                metrics = await api.metrics_snapshot()
                assert metrics.sent["orders"] >= 2 and metrics.popped[("g", "orders")] >= 2
                assert (
                    len(metrics.write_seconds_synced.counts)
                    == len(metrics.write_seconds_synced.bounds) + 1
                )

                await api.delete_group("g2", force=True)
                with pytest.raises(NotFoundError):
                    api.get_group("g2")
                await api.delete_topic_guarded("later")
                with pytest.raises(NotFoundError):
                    api.topic_info("later")
                await api.delete_topic("orders")
                assert "orders" not in {t.name for t in await api.list_topics()}

    asyncio.run(scenario())


def test_errors_keep_their_class_and_fields_across_the_wire(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            async with remote(served.address) as api:
                await api.create_topic("orders", 1)
                await api.create_group("g")
                with pytest.raises(InvalidArgumentError) as bad_name:
                    await api.create_topic("bad name!", 1)
                with pytest.raises(InvalidArgumentError) as local_bad:
                    await served.broker.create_topic("bad name!", 1)
                assert type(bad_name.value) is type(local_bad.value)
                assert str(bad_name.value) == str(local_bad.value)
                assert (bad_name.value.field, bad_name.value.value, bad_name.value.allowed) == (
                    local_bad.value.field, local_bad.value.value, local_bad.value.allowed,
                )  # fmt: skip
                assert bad_name.value.field == "topic"
                with pytest.raises(AlreadyExistsError):
                    await api.create_topic("orders", 1)
                with pytest.raises(NotFoundError, match="nothere"):
                    await api.get_topic("nothere")
                with pytest.raises(InvalidReceiptHandleError) as handle:
                    await api.change_invisible_time("g", "not-a-handle", 10)
                assert handle.value.code == "INVALID_ARGUMENT" and not handle.value.retriable

                await api.send([NewMessage("orders", b"x" * 5000)])
                with pytest.raises(AnswerBoundError) as bound:
                    await api.pop("g", "orders", wait_s=0, max_bytes=100)
                assert bound.value.needed_bytes > 5000
                assert bound.value.retriable and bound.value.code == "RESOURCE_EXHAUSTED"

                with pytest.raises(InvalidArgumentError) as queue:
                    await api.send([NewMessage("orders", b"y", queue_id=1)])
                assert (queue.value.field, queue.value.value, queue.value.allowed) == (
                    "message.queue_id", "1", "0..0",
                )  # fmt: skip
                with pytest.raises(InvalidArgumentError):
                    api.server_info().pop_arguments(max_messages=999, invisible_s=30, wait_s=0)
                # A lookup of sends names at most one send's messages.
                with pytest.raises(
                    InvalidArgumentError, match="at most 1024 are allowed"
                ) as lookup_size:
                    await api.lookup_sends("orders", [(f"id{i}", "") for i in range(1025)])
                assert lookup_size.value.field == "message_ids"
                assert await api.lookup_sends("orders", [("id0", "")]) == [False]

                served.servicer.writes.fence("etcd session lost")
                with pytest.raises(UnavailableError, match="etcd session lost") as fenced:
                    await api.send([NewMessage("orders", b"z")])
                assert fenced.value.retriable
                assert (await api.get_topic("orders"))[0].name == "orders"  # reads still work
                (lookup,) = await api.get_deliveries("g", ["not-a-handle"])  # a read, too
                assert isinstance(lookup, InvalidReceiptHandleError)
                served.servicer.writes.unfence()
                await api.send([NewMessage("orders", b"z")])

    asyncio.run(scenario())


def test_a_send_may_name_its_queue_and_the_broker_checks_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            local = served.broker
            await local.create_topic("orders", 4)
            results = await local.send([NewMessage("orders", b"a", queue_id=3)] * 3)
            assert [r.queue_id for r in results] == [3, 3, 3]
            chosen = await local.send([NewMessage("orders", b"b") for _ in range(4)])
            assert sorted(r.queue_id for r in chosen) == [0, 1, 2, 3]  # round-robin as before
            for bad in (4, -1):
                with pytest.raises(InvalidArgumentError, match=r"queues 0\.\.3") as error:
                    await local.send([NewMessage("orders", b"c", queue_id=bad)])
                assert (error.value.field, error.value.allowed) == ("message.queue_id", "0..3")
            async with remote(served.address) as api:
                (result,) = await api.send([NewMessage("orders", b"d", queue_id=1)])
                assert (result.queue_id, result.offset) == (1, 1)

    asyncio.run(scenario())


def test_a_held_pop_wakes_when_a_send_arrives_and_release_answers_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            async with (
                remote(served.address, call_timeout_s=2.0) as api,
                remote(served.address) as sender,
            ):
                await api.create_topic("orders", 1)
                await api.create_group("g")
                began = time.monotonic()
                held = asyncio.create_task(api.pop("g", "orders", wait_s=10))
                await asyncio.sleep(0.3)
                await sender.send([NewMessage("orders", b"hello")])
                popped = await held
                assert [m.record.body for m in popped] == [b"hello"]
                assert time.monotonic() - began < 3  # woken, not timed out
                # A wait longer than the call timeout is not cut by it.
                began = time.monotonic()
                assert await api.pop("g", "orders", wait_s=2.5) == []
                assert time.monotonic() - began >= 2.4

                held = asyncio.create_task(api.pop("g", "orders", wait_s=20))
                watch = asyncio.create_task(api.await_messages("orders", {0: 5}, 20))
                await asyncio.sleep(0.3)
                began = time.monotonic()
                api.release_waiters()
                assert await held == []
                assert await watch == []
                assert time.monotonic() - began < 2
                assert await api.pop("g", "orders", wait_s=20) == []  # holds no new ones

    asyncio.run(scenario())


def test_the_catalog_cache_learns_what_the_broker_created_by_itself(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b", auto_create_topics=True) as served:
            async with remote(served.address, catalog_refresh_s=60) as api:
                await api.send([NewMessage("auto", b"x")])  # auto-created by the broker
                assert api.topic_info("auto").name == "auto"
                await api.pop("fresh", "auto", wait_s=0)  # the group is auto-created
                assert api.get_group("fresh").auto_created
                await served.broker.create_topic("elsewhere", 1)  # not through this client
                with pytest.raises(NotFoundError):
                    api.topic_info("elsewhere")
                for _ in range(50):  # the miss refreshed that name in the background
                    await asyncio.sleep(0.05)
                    try:
                        assert api.topic_info("elsewhere").queues == 1
                        break
                    except NotFoundError:
                        pass
                else:
                    raise AssertionError("the miss was not refreshed")
                with pytest.raises(InvalidArgumentError):
                    api.topic_info("bad name!")

    asyncio.run(scenario())


def test_an_unreachable_broker_is_a_retriable_unavailable_naming_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            api = RemoteBroker(served.address, call_timeout_s=2.0)
            await api.start()
            address = served.address
        try:
            with pytest.raises(UnavailableError, match=address) as error:
                await api.list_topics()
            assert error.value.retriable
        finally:
            await api.close()
        # Start waits for a connection within its call timeout, and says so.
        with pytest.raises(
            UnavailableError,
            match=f"{address} did not answer within the call "
            "timeout 1.0s of starting [(]no connection could be made[)]",
        ):
            await RemoteBroker(address, call_timeout_s=1.0).start()

    asyncio.run(scenario())


def test_a_remote_broker_starting_against_a_broker_slow_to_accept_waits_for_it(
    tmp_path: Path,
) -> None:
    # A broker up but slow to accept (a loaded machine): the channel gives up on its first
    # connect attempt and tries again, and start waits for a connection instead of failing.
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served, gated_port(served.address) as gate:
            api = RemoteBroker(gate.address, call_timeout_s=120.0)
            starting = asyncio.ensure_future(api.start())
            retried = asyncio.ensure_future(gate.connections(2))
            try:
                done, _ = await asyncio.wait(
                    {starting, retried}, return_when=asyncio.FIRST_COMPLETED
                )
                assert starting not in done, f"start ended: {starting.exception()!r}"
                gate.open()
                await starting
                assert api.server_info().broker_name == "b1"
            finally:
                retried.cancel()
                await api.close()

    asyncio.run(scenario())


def test_a_call_cut_off_by_closing_the_connection_is_a_retriable_unavailable(
    tmp_path: Path,
) -> None:
    # The proxy's pool closes a broker's connection when it leaves the cluster (or a shard's
    # leader moves): a call in flight must fail retriably, not as the client's CANCELLED.
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            api = RemoteBroker(served.address, call_timeout_s=5.0, catalog=False)
            await api.start()
            waiting = asyncio.ensure_future(api.due_checks(8, wait_s=5.0))
            await asyncio.sleep(0.3)
            await api.close()
            with pytest.raises(UnavailableError, match="left the cluster") as error:
                await waiting
            assert error.value.retriable

    asyncio.run(scenario())


def test_a_routed_create_replaces_another_incarnation_and_is_fenced(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            async with remote(served.address) as api:
                local: Broker = served.broker
                first = await api.create_routed_topic(
                    "orders", 2, message_type="fifo", route_create_time_ms=1000
                )
                held = local.topic_info("orders")
                assert (first.topic_id, first.queues) == (held.topic_id, 2)
                assert held.route_create_time_ms == 1000  # (not on the wire's Topic)
                await local.send([NewMessage("orders", b"old", message_group="a")])
                # The same incarnation again: ALREADY_EXISTS (the proxy then grows it).
                with pytest.raises(AlreadyExistsError):
                    await api.create_routed_topic(
                        "orders", 3, message_type="fifo", route_create_time_ms=1000
                    )
                assert await local.peek("orders") != []

                served.servicer.writes.fence("etcd session lost")
                with pytest.raises(UnavailableError, match="etcd session lost"):
                    await api.create_routed_topic(
                        "orders", 2, message_type="fifo", route_create_time_ms=2000
                    )
                assert local.topic_info("orders") == held
                served.servicer.writes.unfence()

                # The name used again while this broker was away: the old topic goes.
                again = await api.create_routed_topic(
                    "orders", 2, message_type="fifo", route_create_time_ms=2000
                )
                assert again.topic_id != first.topic_id
                assert local.topic_info("orders").route_create_time_ms == 2000
                assert await local.peek("orders") == []

                with pytest.raises(InvalidArgumentError, match="queues 0") as bad:
                    await api.create_routed_topic(
                        "other", 0, message_type="normal", route_create_time_ms=2000
                    )
                assert bad.value.field == "queues"

    asyncio.run(scenario())


def test_apply_group_sets_the_record_ignores_an_older_one_and_is_fenced(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            async with remote(served.address) as api:
                await api.create_topic("orders", 1)
                subscriptions = (
                    Subscription("elsewhere", "tag", "*"),  # a topic this broker lacks
                    Subscription("orders", "tag", "A"),
                )
                state = GroupState(
                    4, (1000, 2000), GroupSettings(fifo=True, subscriptions=subscriptions)
                )
                info = await api.apply_group("g", state, create_time_ms=77, revision=10)
                assert info == served.broker.get_group("g") == api.get_group("g")
                assert (info.max_delivery_attempts, info.retry_backoff_ms) == (4, (1000, 2000))
                assert (info.create_time_ms, info.auto_created) == (77, False)
                assert api.group_settings("g") == served.broker.group_settings("g")
                assert api.group_settings("g").subscriptions == subscriptions[1:]

                older = GroupState(9, (1000,), GroupSettings())
                stale = await api.apply_group("g", older, create_time_ms=77, revision=9)
                assert (
                    stale.max_delivery_attempts
                    == 4
                    == served.broker.get_group("g").max_delivery_attempts
                )

                with pytest.raises(InvalidArgumentError, match="max_delivery_attempts 0") as bad:
                    await api.apply_group(
                        "g", GroupState(0, (1000,), GroupSettings()), create_time_ms=1, revision=11
                    )
                assert bad.value.field == "max_delivery_attempts"

                served.servicer.writes.fence("etcd session lost")
                with pytest.raises(UnavailableError, match="etcd session lost"):
                    await api.apply_group("g", older, create_time_ms=77, revision=12)
                assert served.broker.get_group("g").max_delivery_attempts == 4
                served.servicer.writes.unfence()
                applied = await api.apply_group("g", older, create_time_ms=77, revision=12)
                assert (
                    applied.max_delivery_attempts == 9 == api.get_group("g").max_delivery_attempts
                )

                # Deleted at revision 20: a push of an older record, arriving late, is
                # refused rather than creating the group again.
                await api.delete_group_record("g", revision=20)
                with pytest.raises(NotFoundError, match="deleted at cluster revision 20"):
                    await api.apply_group("g", state, create_time_ms=77, revision=15)
                assert "g" not in [g.name for g in await served.broker.list_groups()]
                again = await api.apply_group("g", state, create_time_ms=78, revision=21)
                assert again.create_time_ms == 78

    asyncio.run(scenario())
