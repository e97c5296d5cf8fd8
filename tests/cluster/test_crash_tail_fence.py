"""While a restarted broker reconciles its crash tail (broker/crash_tail_sync.py) its
BrokerService refuses writes and the `LookupSends` of its tail's messages (it answers those
of every other message), and a start that does not finish leaves the unclean end for the
next start to reconcile.

Brokers run in-process over a real etcd (tests/support/inprocess_cluster.py); a peer that
accepts connections and answers nothing (a paused broker) holds a reconciliation open for
as long as a test needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from popmq import Admin
from popmq.broker.server import BrokerServer
from popmq.broker_core import BrokerConfig, NewMessage, PopMQError, StoreConfig
from popmq.cluster import RemoteBroker
from popmq.coordination import EtcdCoordinator
from popmq.coordination.coordinator import Session
from popmq.runtime.config import ServerConfig
from tests.support.inprocess_cluster import InProcessCluster
from tests.support.ports import free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

MOVED = NewMessage("orders", b"x", message_id="MOVED", dedup_id="order-1")
"""Stored by b1; b2 holds the same send under another message id (its dedup id)."""


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


async def _spawn(work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    return asyncio.create_task(work)


async def _cancel(task: asyncio.Task[Any]) -> None:
    """As SIGTERM during a start does (runtime/process.py `unless_stopped`)."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _refusal(address: str, call: str) -> str:
    """What the broker at `address` answers a send or a lookup of MOVED with ("" if it
    takes it)."""
    remote = RemoteBroker(address, catalog=False)
    await remote.start()
    try:
        if call == "send":
            await remote.send([dataclasses.replace(MOVED, message_id="NEW", dedup_id="")])
        else:
            await remote.lookup_sends("orders", [("MOVED", "order-1")])
    except PopMQError as exc:
        assert exc.retriable, exc
        return str(exc)
    finally:
        await remote.close()
    return ""


async def _lookup(address: str, message_id: str, dedup_id: str) -> list[bool]:
    remote = RemoteBroker(address, catalog=False)
    await remote.start()
    try:
        return await remote.lookup_sends("orders", [(message_id, dedup_id)])
    finally:
        await remote.close()


@contextlib.contextmanager
def _two_brokers_holding(root: Path, on_b2: NewMessage) -> Iterator[InProcessCluster]:
    """b1 and b2 hold the topic "orders"; b1 stored MOVED, b2 `on_b2`."""
    cluster = InProcessCluster(root).start(brokers=2, proxies=1)
    try:
        with Admin(cluster.proxies[0]) as admin:
            admin.create_topic("orders", queues=2)
        b1, b2 = cluster.brokers["b1"], cluster.brokers["b2"]
        wait_until(lambda: "orders" in b1.broker.catalog.topics, "b1 holds the topic", 20)
        wait_until(lambda: "orders" in b2.broker.catalog.topics, "b2 holds the topic", 20)
        cluster.call(lambda: b1.broker.send([MOVED]))
        cluster.call(lambda: b2.broker.send([on_b2]))
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def two_brokers(tmp_path: Path) -> Iterator[InProcessCluster]:
    """b1 and b2 both stored the send MOVED (b2 under another message id)."""
    with _two_brokers_holding(tmp_path, dataclasses.replace(MOVED, message_id="OTHER")) as made:
        yield made


@pytest.fixture
def silent_peer(two_brokers: InProcessCluster) -> Iterator[Session]:
    """A broker b9 registered in etcd whose address accepts connections and answers
    nothing: a reconciliation waits for it until `crash_tail_wait_s`."""
    cluster = two_brokers
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    host, port = silent.getsockname()
    coordinator = EtcdCoordinator([cluster.etcd.endpoint], cluster="test")
    try:
        peer = cluster.call(
            lambda: coordinator.register("broker", "b9", {"addr": f"{host}:{port}"}, ttl_s=30)
        )
        yield peer
        cluster.call(peer.close)
    finally:
        cluster.call(coordinator.close)
        silent.close()


def _restart_both_uncleanly(
    cluster: InProcessCluster, log_text: Callable[[], str], *, wait_s: float
) -> dict[str, BrokerServer]:
    """Crash b1 and b2, then start both again at once with their earlier registrations
    still alive (as after kill -9: the leases have not lapsed) at the addresses they
    restart on, so each finds the other and asks it while both reconcile; returns once
    both serve (`log_text`: what crash_tail_sync.py logged so far)."""
    cluster.call(lambda: _crash(cluster.brokers.pop("b1")))
    cluster.call(lambda: _crash(cluster.brokers.pop("b2")))
    ports = {"b1": free_port(), "b2": free_port()}
    coordinator = EtcdCoordinator([cluster.etcd.endpoint], cluster="test")
    stale = [
        cluster.call(
            lambda n=name, p=port: coordinator.register(
                "broker", n, {"addr": f"127.0.0.1:{p}"}, ttl_s=30
            )
        )
        for name, port in ports.items()
    ]
    servers = {
        name: BrokerServer(
            dataclasses.replace(_restarted(cluster, name, wait_s), listen=f"127.0.0.1:{port}")
        )
        for name, port in ports.items()
    }
    cluster.brokers.update(servers)

    async def both() -> None:
        await asyncio.gather(*(server.start() for server in servers.values()))

    try:
        starting = cluster.call(lambda: _spawn(both()))
        done = ("may also be stored", "removed ", "no other broker holds")
        wait_until(
            lambda: sum(log_text().count(d) for d in done) >= 2,
            "both brokers done reconciling",
            60,
        )
        for session in stale:  # the old leases lapse: they register now
            cluster.call(session.close)
        cluster.call(lambda: asyncio.wait_for(starting, 60))
    finally:
        cluster.call(coordinator.close)
    return servers


def test_a_reconciling_broker_refuses_writes_and_lookups_and_a_start_cut_short_reconciles_next(
    two_brokers: InProcessCluster, silent_peer: Session, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = two_brokers
    caplog.set_level(logging.INFO, logger="popmq.broker.crash_tail_sync")
    cluster.call(lambda: _crash(cluster.brokers.pop("b1")))
    first = BrokerServer(_restarted(cluster, "b1", 120.0))
    starting = cluster.call(lambda: _spawn(first.start()))
    wait_until(lambda: "did not stop cleanly" in caplog.text, "b1 reconciling its crash tail", 30)
    assert not starting.done()  # held by b9's silence
    refusal = cluster.call(lambda: _refusal(first.address, "send"))
    assert "refuses writes" in refusal and "unclean stop" in refusal, refusal
    # A lookup of the tail's message waits for the reconciliation; others are answered.
    refusal = cluster.call(lambda: _refusal(first.address, "lookup"))
    assert "is checking its crash tail, which holds a send of 'order-1'" in refusal, refusal
    assert cluster.call(lambda: _lookup(first.address, "UNSENT", "")) == [False]
    assert cluster.call(lambda: _lookup(first.address, "MOVED", "order-2")) == [False]
    cluster.call(lambda: _cancel(starting))  # stopped before it finished
    cluster.call(silent_peer.close)  # b2 alone answers now

    again = BrokerServer(_restarted(cluster, "b1", 10.0))
    cluster.call(again.start)
    cluster.brokers["b1"] = again
    # The unclean end was still on record: b2 holds MOVED, so b1's copy is gone.
    assert again.broker.lookup_sends("orders", [("MOVED", "order-1")]) == [False]
    assert "broker 'b1' removed 1 of the 1 message(s) of its crash tail" in caplog.text
    assert cluster.call(lambda: _refusal(again.address, "send")) == ""  # serving


def test_two_brokers_restarting_uncleanly_at_once_keep_a_copy_of_a_send_both_stored(
    two_brokers: InProcessCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """As after kill -9, each one's earlier registration is still alive (its lease has not
    lapsed), at the address it restarts on: each finds the other and asks it while both
    reconcile. Each refuses the other's lookups meanwhile, so neither removes its copy
    because the other one has it (then both would be gone)."""
    caplog.set_level(logging.INFO, logger="popmq.broker.crash_tail_sync")
    servers = _restart_both_uncleanly(two_brokers, lambda: caplog.text, wait_s=3.0)
    held = [
        servers["b1"].broker.lookup_sends("orders", [("MOVED", "order-1")])[0],
        servers["b2"].broker.lookup_sends("orders", [("OTHER", "order-1")])[0],
    ]
    assert any(held), caplog.text
    # Asked while the other reconciled, each was refused (the send is in the other's tail),
    # not ignored. (One that asks again once the other serves finds the other's copy
    # and removes its own.)
    refusals = [
        f"broker {name!r} is checking its crash tail, which holds a send of 'order-1'"
        for name in ("b1", "b2")
    ]
    assert any(refusal in caplog.text for refusal in refusals), caplog.text


def test_two_brokers_restarting_uncleanly_at_once_answer_each_other_about_other_messages(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As above, but their tails share no message (a whole cluster killed and restarted):
    each answers the other's lookups while it reconciles, so both finish as soon as they
    asked each other, not when `crash_tail_wait_s` runs out, and both messages stay."""
    caplog.set_level(logging.INFO, logger="popmq.broker.crash_tail_sync")
    apart = NewMessage("orders", b"y", message_id="APART", dedup_id="order-2")
    with _two_brokers_holding(tmp_path, apart) as cluster:
        servers = _restart_both_uncleanly(cluster, lambda: caplog.text, wait_s=120.0)
        for name in ("b1", "b2"):
            assert f"broker {name!r}: no other broker holds a message of its crash tail" in (
                caplog.text
            ), caplog.text
        assert "may also be stored" not in caplog.text, caplog.text
        assert servers["b1"].broker.lookup_sends("orders", [("MOVED", "order-1")]) == [True]
        assert servers["b2"].broker.lookup_sends("orders", [("APART", "order-2")]) == [True]
