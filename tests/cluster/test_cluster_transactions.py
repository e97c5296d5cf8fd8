"""Transactions in cluster mode (in-process cluster: real etcd, BrokerService brokers,
ClusterBroker proxies): a half message sent through one proxy is ended through another (the
transaction id names its broker: RocketMQ's proxy-affinity bug #9431 cannot happen), and
each proxy claims only the checks of topics it has a producer for."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from popmq import Admin
from popmq.broker_core import FailedPreconditionError, NewMessage
from popmq.broker_core.handles import issuer_of
from tests.support.inprocess_cluster import InProcessCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    running = InProcessCluster(tmp_path_factory.mktemp("tx-cluster")).start(brokers=2, proxies=2)
    try:
        yield running
    finally:
        running.stop()


def test_a_transaction_sent_through_one_proxy_is_ended_through_another(
    cluster: InProcessCluster,
) -> None:
    first, second = cluster.cluster_broker(0), cluster.cluster_broker(1)

    async def scenario() -> None:
        await first.create_topic("payments", 2, message_type="transaction")
        await first.create_group("ledger")
        halves = await first.send_half([NewMessage("payments", f"p{n}".encode()) for n in range(6)])
        assert all(h.transaction_id and h.offset == -1 for h in halves)
        assert {issuer_of(h.transaction_id) for h in halves} <= {"b1", "b2"}
        # Through the other proxy: commit the even ones, roll back the odd ones.
        for n, half in enumerate(halves):
            info = await second.end_transaction(half.transaction_id, commit=n % 2 == 0)
            assert info.state == ("committed" if n % 2 == 0 else "rolled_back")
        with pytest.raises(FailedPreconditionError, match="rolled"):
            await second.end_transaction(halves[1].transaction_id, commit=True)
        again = await first.end_transaction(halves[0].transaction_id, commit=True)
        assert again.state == "committed"
        got: list[bytes] = []
        for _ in range(20):
            popped = await second.pop("ledger", "payments", max_messages=32, wait_s=0.5)
            if popped:
                await second.ack("ledger", [m.receipt_handle for m in popped])
                got += [m.record.body for m in popped]
            if len(got) >= 3:
                break
        assert sorted(got) == [b"p0", b"p2", b"p4"]
        listed = await second.list_transactions("open", topic="payments")
        assert listed == []

    cluster.call(scenario)


def test_each_proxy_claims_the_checks_of_topics_it_has_producers_for(
    cluster: InProcessCluster,
) -> None:
    first, second = cluster.cluster_broker(0), cluster.cluster_broker(1)

    async def scenario() -> None:
        await first.create_topic("orders", 2, message_type="transaction")
        await first.create_topic("refunds", 2, message_type="transaction")
        [order] = await first.send_half([NewMessage("orders", b"o")], check_first_s=0.2)
        [refund] = await first.send_half([NewMessage("refunds", b"r")], check_first_s=0.2)
        await asyncio.sleep(0.3)
        # The second proxy asks only for orders: it gets that check, not the refund's.
        checks = await second.due_checks(8, wait_s=2.0, topics=["orders"])
        assert [c.transaction_id for c in checks] == [order.transaction_id]
        assert checks[0].attempt == 1 and checks[0].message.body == b"o"
        # The first proxy, a producer of refunds, gets the refund's.
        checks = await first.due_checks(8, wait_s=2.0, topics=["refunds"])
        assert [c.transaction_id for c in checks] == [refund.transaction_id]
        info = await second.get_transaction(order.transaction_id)
        assert info.state == "open" and info.checks == 1

    cluster.call(scenario)


def test_a_half_message_is_read_through_any_proxy_from_the_broker_holding_it(
    cluster: InProcessCluster,
) -> None:
    first = cluster.cluster_broker(0)

    async def send() -> list[str]:
        await first.create_topic("invoices", 1, message_type="transaction")
        ids = []
        for n in range(12):  # one by one: a batch is stored whole on one broker
            (half,) = await first.send_half([NewMessage("invoices", b"i%d" % n, keys=(f"k{n}",))])
            ids.append(half.transaction_id)
        return ids

    ids = cluster.call(send)
    assert {issuer_of(i) for i in ids} == {"b1", "b2"}  # both brokers hold some
    for proxy in cluster.proxies:
        with Admin(proxy) as admin:
            listed = {t.transaction_id: t for t in admin.list_transactions(topic="invoices")}
            for n, transaction_id in enumerate(ids):
                half = admin.half_message(transaction_id, topic="invoices")
                assert (half.body, half.keys) == (f"i{n}".encode(), (f"k{n}",))
                assert half.queue_id == listed[transaction_id].queue_id  # a global id
