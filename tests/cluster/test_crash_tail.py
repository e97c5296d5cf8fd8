"""A send the proxy moved off a killed broker is stored once: the broker, restarted after its
unclean end, removes what other brokers hold of the messages it stored last before it
serves (broker/crash_tail_sync.py, broker_core/crash_tail.py).

The first test runs real `popmq broker` and `popmq proxy` processes and a real etcd
(tests/support/cluster.py), with a relay (tests/support/fault_relay.py) in front of b1: it
forwards a send to b1, holds back b1's answer, then b1 is killed with SIGKILL and the relay
stops listening, so the proxy's retry on b1 is refused and the proxy moves the send to b2
(the client gets its success). Run with `messages.crash_tail_s = 0` on b1 (no
reconciliation, as before the change), the drain after b1's restart finds that message
twice; with the default, once.

The others run brokers in-process over a real etcd (tests/support/inprocess_cluster.py): a
crash-tail message another broker holds is removed and the rest kept, a half message with
its transaction; a peer that does not
answer holds the start for `cluster.crash_tail_wait_s`, and then the broker serves with a
warning naming the messages that may be stored twice. The last two reconcile a broker core
directly: against an etcd that hangs (the wait still ends with `crash_tail_wait_s`), and
against a peer still writing its copy (that copy does not count: it may fail).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from popmq import Admin, Producer
from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq._gen.popmq.broker.v1 import broker_pb2_grpc
from popmq.broker.crash_tail_sync import reconcile_crash_tail
from popmq.broker.server import BrokerServer
from popmq.broker_core import Broker, BrokerConfig, NewMessage, StoreConfig
from popmq.coordination import EtcdCoordinator
from popmq.runtime.config import ServerConfig
from tests.cluster.traffic import copies_in, send_until_held, stored_on
from tests.support.cluster import Cluster
from tests.support.etcd import EtcdServer
from tests.support.fault_relay import FaultRelay, on_loop
from tests.support.inprocess_cluster import InProcessCluster
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

T = TypeVar("T")

BODY_BYTES = 6000
"""Bodies of random bytes this large, so that the relay tells a send from pings."""


@pytest.mark.parametrize("crash_tail_s", [30.0, 0.0], ids=["reconciled", "off"])
def test_a_send_moved_off_a_killed_broker_is_stored_once_after_its_restart(
    tmp_path: Path, relay_loop: asyncio.AbstractEventLoop, crash_tail_s: float
) -> None:
    relay = FaultRelay()
    endpoint = on_loop(relay_loop, relay.start())
    cluster = Cluster(tmp_path, brokers=2, proxies=1)
    b1 = cluster.processes["b1"]
    own = ("--set", f"messages.crash_tail_s={crash_tail_s}")
    b1.extra = (*own, "--set", f"cluster.advertise={endpoint}")
    relay.target = ("127.0.0.1", b1.port)
    try:
        cluster.start()
        proxy = cluster.endpoint("p1")
        with Admin(proxy) as admin:
            admin.create_topic("moved", queues=2)
        with Producer(proxy) as producer:
            relay.drop_next_answer(min_bytes=BODY_BYTES, hold_s=120)
            message_id, sending = send_until_held(producer, relay, "moved", BODY_BYTES)
            # b1 stored it (asked on its own address, not through the relay): then it dies
            # before its answer gets out, and its address refuses connections from now on.
            wait_until(
                lambda: stored_on(cluster.broker_address("b1"), "moved", message_id),
                f"b1 storing {message_id}",
                30,
                interval_s=0.2,
            )
            cluster.kill("b1")
            on_loop(relay_loop, relay.close(abort=True))
            receipt = sending.result(timeout=60)  # the proxy moved it to b2: no client error
            assert receipt.message_id == message_id
        b1.extra = own  # back at its own address
        cluster.restart("b1")
        copies = copies_in(proxy, "moved")
        expected = 1 if crash_tail_s else 2
        assert copies[message_id] == expected, (copies, cluster.processes["b1"].log_tail(30))
        assert {i: n for i, n in copies.items() if n > 1 and i != message_id} == {}
        if crash_tail_s:
            assert "removed 1 of the" in b1.log_since(b1.log_offsets[-1])
    finally:
        cluster.stop()
        on_loop(relay_loop, relay.close(abort=True))


async def _crash(server: BrokerServer) -> None:
    """The store closes under the broker (its clean close never runs), then it stops."""
    server.broker.store.close()
    await server.stop()


def _restarted(cluster: InProcessCluster, name: str, wait_s: float) -> ServerConfig:
    return ServerConfig(
        listen="127.0.0.1:0",
        shutdown_grace_s=1.0,
        cluster=dataclasses.replace(cluster.config, crash_tail_wait_s=wait_s),
        broker=BrokerConfig(broker_name=name, store=StoreConfig(data_dir=cluster.root / name)),
    )


@pytest.fixture
def two_brokers(tmp_path: Path) -> Iterator[InProcessCluster]:
    cluster = InProcessCluster(tmp_path).start(brokers=2, proxies=1)
    try:
        with Admin(cluster.proxies[0]) as admin:
            admin.create_topic("orders", queues=2)
        yield cluster
    finally:
        cluster.stop()


def test_crash_tail_messages_another_broker_holds_are_removed_before_the_broker_serves(
    two_brokers: InProcessCluster, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = two_brokers
    b1, b2 = cluster.brokers["b1"], cluster.brokers["b2"]
    wait_until(lambda: "orders" in b1.broker.catalog.topics, "b1 holds the topic", 20)
    wait_until(lambda: "orders" in b2.broker.catalog.topics, "b2 holds the topic", 20)
    both = NewMessage("orders", b"x", message_id="MOVED", dedup_id="order-1")
    cluster.call(lambda: b1.broker.send([both, NewMessage("orders", b"y", message_id="KEPT")]))
    cluster.call(lambda: b2.broker.send([dataclasses.replace(both, message_id="OTHER-ID")]))
    cluster.call(lambda: _crash(cluster.brokers.pop("b1")))
    caplog.set_level(logging.INFO, logger="popmq.broker.crash_tail_sync")
    again = BrokerServer(_restarted(cluster, "b1", 10.0))
    cluster.call(again.start)
    cluster.brokers["b1"] = again
    # Known to b2 by its dedup id: b1's copy goes, the other message stays.
    assert again.broker.lookup_sends("orders", [("MOVED", "order-1"), ("KEPT", "")]) == [
        False,
        True,
    ]
    assert again.servicer is not None and again.servicer.writes.reason is None
    assert "broker 'b1' removed 1 of the 2 message(s) of its crash tail" in caplog.text
    assert "b2: 1" in caplog.text


def test_a_crash_tail_half_another_broker_holds_is_removed_with_its_transaction(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A half send moved off a killed broker is a second transaction there, which a
    check-back would have its producer commit: b1's copy goes with its transaction."""
    cluster = InProcessCluster(tmp_path).start(brokers=2, proxies=1)
    try:
        with Admin(cluster.proxies[0]) as admin:
            admin.create_topic("payments", queues=2, message_type="transaction")
        b1, b2 = cluster.brokers["b1"], cluster.brokers["b2"]
        wait_until(lambda: "payments" in b1.broker.catalog.topics, "b1 holds the topic", 20)
        wait_until(lambda: "payments" in b2.broker.catalog.topics, "b2 holds the topic", 20)
        moved = NewMessage("payments", b"x", message_id="MOVED", dedup_id="pay-1")
        kept = NewMessage("payments", b"y", message_id="KEPT")
        cluster.call(lambda: b1.broker.send_half([moved, kept]))
        cluster.call(lambda: b2.broker.send_half([dataclasses.replace(moved, message_id="ID-2")]))
        cluster.call(lambda: _crash(cluster.brokers.pop("b1")))
        caplog.set_level(logging.INFO, logger="popmq.broker.crash_tail_sync")
        again = BrokerServer(_restarted(cluster, "b1", 10.0))
        cluster.call(again.start)
        cluster.brokers["b1"] = again
        broker = again.broker
        assert broker.lookup_sends("payments", [("MOVED", "pay-1"), ("KEPT", "")]) == [
            False,
            True,
        ]
        opened = cluster.call(lambda: broker.list_transactions("open"))
        assert [t.message_id for t in opened] == ["KEPT"]  # no check-back for the moved one
        assert "broker 'b1' removed 1 of the 2 message(s) of its crash tail" in caplog.text
    finally:
        cluster.stop()


def test_a_silent_peer_holds_the_start_for_crash_tail_wait_s_then_it_serves_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = InProcessCluster(tmp_path).start(brokers=1, proxies=1)
    silent = socket.socket()  # accepts connections (the backlog), answers nothing: paused
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    coordinator = EtcdCoordinator([cluster.etcd.endpoint], cluster="test")
    try:
        with Admin(cluster.proxies[0]) as admin:
            admin.create_topic("orders", queues=1)
        b1 = cluster.brokers["b1"]
        wait_until(lambda: "orders" in b1.broker.catalog.topics, "b1 holds the topic", 20)
        cluster.call(lambda: b1.broker.send([NewMessage("orders", b"x", message_id="M-1")]))
        cluster.call(lambda: _crash(cluster.brokers.pop("b1")))
        host, port = silent.getsockname()
        peer = cluster.call(
            lambda: coordinator.register("broker", "b9", {"addr": f"{host}:{port}"}, ttl_s=30)
        )
        caplog.set_level(logging.INFO, logger="popmq.broker.crash_tail_sync")
        again = BrokerServer(_restarted(cluster, "b1", 2.0))
        began = time.monotonic()
        cluster.call(again.start)
        took = time.monotonic() - began
        cluster.brokers["b1"] = again
        assert 1.5 <= took < 60, took  # it waited for b9, and not for ever
        assert again.broker.lookup_sends("orders", [("M-1", "")]) == [True]  # kept
        assert again.servicer is not None and again.servicer.writes.reason is None
        warning = next(r for r in caplog.records if "may also be stored" in r.getMessage())
        assert warning.levelno == logging.WARNING
        assert "b9:" in warning.getMessage() and "orders/M-1" in warning.getMessage()
        cluster.call(peer.close)
    finally:
        cluster.call(coordinator.close)
        silent.close()
        cluster.stop()


async def _restarted_after_a_crash(data_dir: Path) -> Broker:
    """Broker b1 that stored M-1 in topic orders and crashed, started again (unclean end)."""
    config = BrokerConfig(broker_name="b1", store=StoreConfig(data_dir=data_dir))
    broker = Broker(config)
    await broker.start()
    await broker.create_topic("orders", 1)
    await broker.send([NewMessage("orders", b"x", message_id="M-1")])
    broker.store.close()  # crash
    await broker.close()
    again = Broker(config)
    await again.start()
    return again


def test_the_wait_ends_with_crash_tail_wait_s_even_when_etcd_hangs(
    own_etcd: EtcdServer, tmp_path: Path
) -> None:
    """Listing the peers is bounded by the wait too: with etcd hanging (SIGSTOP), a call of
    its client would take its own 5 s timeout, far past a 1 s wait."""

    async def scenario(data_dir: Path) -> float:
        again = await _restarted_after_a_crash(data_dir)
        coordinator = EtcdCoordinator([own_etcd.endpoint], cluster="hang")
        assert await coordinator.members("broker") == {}  # connected: then etcd hangs
        own_etcd.pause()
        try:
            loop = asyncio.get_running_loop()
            began = loop.time()
            removed = await reconcile_crash_tail(again, coordinator, name="b1", wait_s=1.0)
            took = loop.time() - began
            assert removed == 0
            assert again.lookup_sends("orders", [("M-1", "")]) == [True]
            return took
        finally:
            own_etcd.resume()
            await coordinator.close()
            await again.close()

    took = asyncio.run(scenario(tmp_path / "b1"))
    assert 0.9 <= took < 4, took  # the 1 s wait, with a sanity margin below etcd's 5 s


class _StillWriting(broker_pb2_grpc.BrokerServiceServicer):
    """A peer whose send of every message asked about is still being written (it may fail):
    held by its dedup window, not stored."""

    def __init__(self) -> None:
        self.asked: list[pb.LookupSendsRequest] = []

    async def LookupSends(
        self, request: pb.LookupSendsRequest, context: Any
    ) -> pb.LookupSendsResponse:
        self.asked.append(request)
        return pb.LookupSendsResponse(held=[not request.stored_only] * len(request.message_ids))


def test_a_copy_a_peer_is_still_writing_does_not_count(
    own_etcd: EtcdServer, tmp_path: Path
) -> None:
    """Removing this broker's copy because a peer's write of it is under way would leave no
    copy if that write then failed: only a stored copy counts."""

    async def scenario(data_dir: Path) -> None:
        peer = _StillWriting()
        server = grpc.aio.server()
        broker_pb2_grpc.add_BrokerServiceServicer_to_server(peer, server)  # type: ignore[no-untyped-call]
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        again = await _restarted_after_a_crash(data_dir)
        coordinator = EtcdCoordinator([own_etcd.endpoint], cluster="writing")
        registration = await coordinator.register(
            "broker", "b2", {"addr": f"127.0.0.1:{port}"}, ttl_s=30
        )
        try:
            removed = await reconcile_crash_tail(again, coordinator, name="b1", wait_s=2.0)
            assert removed == 0
            assert again.lookup_sends("orders", [("M-1", "")]) == [True]  # kept
            assert [(list(r.message_ids), r.stored_only) for r in peer.asked] == [(["M-1"], True)]
        finally:
            await registration.close()
            await coordinator.close()
            await again.close()
            await server.stop(None)

    asyncio.run(scenario(tmp_path / "b1"))
