"""Spark lease tokens across proxies: two proxies over one `popmq broker`, keeping leases in
a real etcd. A lease popped through one proxy is replayed, renewed and acked through the
other after the first was killed (SIGKILL), and two proxies racing for the same page agree
on one page while the loser's messages come back.

Proxy A is a process of its own (tests/cluster/lease_proxy.py) so that its death is a
real one; proxy B serves in a thread of this process.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from popmq import (
    Admin,
    AsyncSimpleConsumer,
    FailedPreconditionError,
    LeasePage,
    Message,
    Producer,
    ReceivedMessage,
    SimpleConsumer,
)
from popmq.cluster import RemoteBroker
from popmq.coordination import EtcdCoordinator
from popmq.proxy.server import PopMQServer
from tests.cluster.conftest import unique_cluster
from tests.support.brokers import ROOT, BrokerProcess
from tests.support.etcd import EtcdServer
from tests.support.ports import free_port
from tests.support.server_thread import ServerThread

pytestmark = pytest.mark.timeout(120)


class ProxyThread(ServerThread):
    """A proxy over the `popmq broker` at `broker_address`, with leases in etcd."""

    def __init__(self, data_dir: Path, broker_address: str, etcd: str, cluster: str) -> None:
        super().__init__(data_dir)
        self.broker_address = broker_address
        self.coordinator = EtcdCoordinator(etcd, cluster=cluster)

    def start(self) -> str:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="popmq-test-proxy")
        self._thread.start()
        self.server = PopMQServer(
            self._config,
            broker=RemoteBroker(self.broker_address, call_timeout_s=5.0, catalog_refresh_s=1.0),
            coordinator=self.coordinator,
        )
        self.endpoint = f"127.0.0.1:{self.call(self.server.start)}"
        return self.endpoint

    def stop(self) -> None:
        if self._loop is not None and self.server is not None:
            self.call(self.server.stop)
            self.call(self.coordinator.close)  # the caller owns it, not the server
        super().stop()


class ProxyProcess:
    """tests/cluster/lease_proxy.py as a subprocess."""

    def __init__(self, broker_address: str, etcd: str, cluster: str) -> None:
        env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.cluster.lease_proxy", "--broker", broker_address,
             "--etcd", etcd, "--cluster", cluster],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
        )  # fmt: skip
        assert self.process.stdout is not None
        lines = []
        for line in self.process.stdout:
            lines.append(line)
            if line.startswith("listening on "):
                self.endpoint = line.split()[-1]
                return
        raise AssertionError(f"the proxy did not start: {''.join(lines)}")

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(30)
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "b1", free_port())
    process.start()
    yield process
    process.stop()
    process._close()


@pytest.fixture
def cluster() -> str:
    return unique_cluster()


def _proxy_thread(
    tmp_path: Path, broker: BrokerProcess, etcd: EtcdServer, cluster: str
) -> ProxyThread:
    proxy = ProxyThread(tmp_path / "unused", broker.address, etcd.endpoint, cluster)
    proxy.start()
    return proxy


def _identity(page: LeasePage) -> list[tuple[str, bytes, int, str]]:
    return [(m.message_id, m.body, m.delivery_attempt, m.receipt_handle) for m in page.messages]


def _setup(endpoint: str, messages: int) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("events", queues=2)
    with Producer(endpoint) as producer:
        producer.send_batch("events", [Message(f"m{i}".encode()) for i in range(messages)])


def _drain(endpoint: str, count: int) -> list[ReceivedMessage]:
    got: list[ReceivedMessage] = []
    with SimpleConsumer(endpoint, group="spark", topic="events") as consumer:
        for _ in range(20):
            if len(got) >= count:
                break
            got += consumer.receive(max_messages=32, invisible_duration_s=60, wait_s=2)
        assert consumer.receive(max_messages=32, wait_s=0) == []
        consumer.ack(got)
    return got


def test_a_spark_lease_survives_the_death_of_the_proxy_that_popped_it(
    tmp_path: Path, etcd: EtcdServer, broker: BrokerProcess, cluster: str
) -> None:
    a = ProxyProcess(broker.address, etcd.endpoint, cluster)
    b = _proxy_thread(tmp_path, broker, etcd, cluster)
    try:
        _setup(b.endpoint, 20)
        token = "spark/7d3f0c2a-6b1e-4f5a/4/1"
        with SimpleConsumer(a.endpoint, group="spark", topic="events") as through_a:
            p0 = through_a.receive_lease(
                token, 0, max_messages=4, invisible_duration_s=30, wait_s=5
            )
            p1 = through_a.receive_lease(
                token, 1, max_messages=4, invisible_duration_s=30, wait_s=0
            )
        assert len(p0.messages) == len(p1.messages) == 4
        a.kill()  # mid-batch: the task's retry lands on b, which never saw the lease

        with SimpleConsumer(b.endpoint, group="spark", topic="events") as through_b:
            r0 = through_b.receive_lease(token, 0, max_messages=4, wait_s=0)
            r1 = through_b.receive_lease(token, 1, max_messages=4, wait_s=0)
            assert r0.replayed and r1.replayed
            assert _identity(r0) == _identity(p0) and _identity(r1) == _identity(p1)
            assert r0.lease_until == p0.lease_until

            (renewed,) = through_b.renew_leases([token], 60)
            assert (renewed.code, renewed.messages) == ("OK", 8)
            assert renewed.lease_until > p0.lease_until
            again = through_b.receive_lease(token, 1, max_messages=4, wait_s=0)
            assert [m.message_id for m in again.messages] == [m.message_id for m in p1.messages]
            assert again.lease_until == renewed.lease_until
            through_b.ack(again.messages)  # the renewed handles ack through b

            (acked,) = through_b.ack_leases([token])
            assert (acked.code, acked.messages) == ("OK", 8)
            with pytest.raises(FailedPreconditionError, match="acknowledged"):
                through_b.receive_lease(token, 0, wait_s=0)
        # Nothing leased comes back; the other 12 are delivered once each, first attempt.
        leased = {m.message_id for m in p0.messages + p1.messages}
        rest = _drain(b.endpoint, 12)
        assert len({m.message_id for m in rest}) == 12 and not {m.message_id for m in rest} & leased
        assert {m.delivery_attempt for m in rest} == {1}
    finally:
        b.stop()
        if a.process.poll() is None:
            a.kill()


def test_two_proxies_asked_for_the_same_pages_at_once_agree_on_each(
    tmp_path: Path, etcd: EtcdServer, broker: BrokerProcess, cluster: str
) -> None:
    a = _proxy_thread(tmp_path / "a", broker, etcd, cluster)
    b = _proxy_thread(tmp_path / "b", broker, etcd, cluster)
    tokens = [f"spark/race/0/{i}" for i in range(5)]
    try:
        _setup(a.endpoint, 40)

        async def race() -> list[tuple[LeasePage, LeasePage]]:
            async with (
                AsyncSimpleConsumer(a.endpoint, group="spark", topic="events") as via_a,
                AsyncSimpleConsumer(b.endpoint, group="spark", topic="events") as via_b,
            ):
                pairs = []
                for token in tokens:
                    for page in (0, 1):
                        first, second = await asyncio.gather(
                            via_a.receive_lease(token, page, max_messages=2, wait_s=0),
                            via_b.receive_lease(token, page, max_messages=2, wait_s=0),
                        )
                        pairs.append((first, second))
                return pairs

        pairs = asyncio.run(race())
        for first, second in pairs:
            assert [m.message_id for m in first.messages] == [m.message_id for m in second.messages]
            assert len(first.messages) == 2
            assert sorted([first.replayed, second.replayed]) == [False, True]
        leased = {m.message_id for first, _ in pairs for m in first.messages}
        assert len(leased) == 20
        with SimpleConsumer(b.endpoint, group="spark", topic="events") as consumer:
            results = consumer.ack_leases(tokens)
        assert [(r.code, r.messages) for r in results] == [("OK", 4)] * 5
        # The losers' pops were given back at once: the other 20 are all deliverable now.
        rest = _drain(a.endpoint, 20)
        assert len({m.message_id for m in rest}) == 20 and not {m.message_id for m in rest} & leased
        # Every message a loser gave back (a nack) was delivered again, to a later page or
        # to the drain: its last delivery's attempt counts the give-backs.
        nacked = a.call(a.server.broker.metrics_snapshot).nacked.get(("spark", "events"), 0)  # type: ignore[union-attr]
        final = [m for first, _ in pairs for m in first.messages] + rest
        assert sum(m.delivery_attempt - 1 for m in final) == nacked
    finally:
        a.stop()
        b.stop()
