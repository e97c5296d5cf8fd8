"""`popmq broker` as a real subprocess (RocksDB, 127.0.0.1): the broker API round-trips
through it, a proxy in front of it fails with a clear retriable UNAVAILABLE while it is
killed (-9) and works again once it is back, SIGTERM stops it cleanly, and with --etcd it
registers, keeps taking writes while etcd is down, and waits for an etcd that is down when
it starts."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from popmq import Admin, Producer, SimpleConsumer
from popmq.broker_core import NewMessage, UnavailableError
from popmq.cluster import RemoteBroker
from popmq.coordination import EtcdCoordinator
from popmq.sdk import UnavailableError as SdkUnavailableError
from tests.cluster.link import Link
from tests.support.brokers import ROOT, BrokerProcess, RemoteServerThread
from tests.support.etcd import EtcdServer
from tests.support.ports import free_port
from tests.support.waiting import until


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "broker", free_port())
    process.start()
    yield process
    process.stop()


def test_the_broker_api_round_trips_through_a_broker_process(
    broker_process: BrokerProcess,
) -> None:
    async def scenario() -> None:
        api = RemoteBroker(broker_process.address)
        await api.start()
        try:
            assert api.server_info().broker_name == "b1"
            assert api.server_info().data_dir == str((broker_process.data_dir).resolve())
            await api.create_topic("orders", 2)
            await api.create_group("g")
            sent = await api.send([NewMessage("orders", b"a", queue_id=1)])
            assert sent[0].queue_id == 1
            popped = await api.pop("g", "orders", wait_s=1)
            assert [m.record.body for m in popped] == [b"a"]
            assert await api.ack("g", [popped[0].receipt_handle]) == [None]
            lag = await api.group_lag("g", "orders")
            assert sum(row.lag for row in lag) == 0
        finally:
            await api.close()

    asyncio.run(scenario())
    assert broker_process.terminate() == 0  # SIGTERM: a clean stop


def test_a_proxy_fails_retriably_while_its_broker_is_killed_and_works_once_it_is_back(
    tmp_path: Path, broker_process: BrokerProcess
) -> None:
    proxy = RemoteServerThread(tmp_path / "unused")
    proxy.broker_address = broker_process.address
    endpoint = proxy.start()
    try:
        with Admin(endpoint) as admin:
            admin.create_topic("orders", queues=2)
            admin.create_group("g")
        with Producer(endpoint) as producer:
            producer.send("orders", b"before")
        with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
            (unacked,) = consumer.receive(invisible_duration_s=2, wait_s=2)
        broker_process.kill()
        with Producer(endpoint) as producer, pytest.raises(SdkUnavailableError) as error:
            producer.send("orders", b"lost?")
        assert broker_process.address in str(error.value)
        assert error.value.retriable
        with Admin(endpoint) as admin, pytest.raises(SdkUnavailableError):
            admin.list_topics()

        broker_process.start()  # the same address and store
        deadline = time.monotonic() + 10
        while True:
            try:
                with Producer(endpoint) as producer:
                    producer.send("orders", b"after")
                break
            except SdkUnavailableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
            got: list[bytes] = []
            until = time.monotonic() + 15
            while len(got) < 2 and time.monotonic() < until:
                batch = consumer.receive(wait_s=2)
                got += [m.body for m in batch]
                consumer.ack(batch)
        assert sorted(got) == [b"after", b"before"]  # the unacked one came back
        assert unacked.body == b"before"
    finally:
        proxy.stop()


def test_a_broker_with_etcd_registers_and_keeps_taking_writes_while_etcd_is_down(
    tmp_path: Path,
) -> None:
    """etcd down for several TTLs: a standalone broker keeps taking writes (no other
    process can serve its queues meanwhile); once etcd is back it holds its registration
    again, under the same epoch (etcd restored its key, and the broker took it over)."""
    etcd = EtcdServer(tmp_path / "etcd").start()
    process = BrokerProcess(
        tmp_path / "broker",
        free_port(),
        "--etcd",
        etcd.endpoint,
        "--set",
        "cluster.name=bs",
        "--set",
        "cluster.session_ttl_s=2",
    )
    try:
        process.start()

        async def scenario() -> None:
            coordinator = EtcdCoordinator(etcd.endpoint, cluster="bs")
            api = RemoteBroker(process.address, call_timeout_s=3)
            await api.start()
            try:
                members = await coordinator.members("broker")
                assert members["b1"].info["addr"] == process.address
                epoch = members["b1"].epoch
                await api.create_topic("orders", 1)
                await api.create_group("g")
                etcd.stop()  # the broker cannot renew its lease: after the TTL it is lost
                give_up = time.monotonic() + 6  # three TTLs
                sent = 0
                while time.monotonic() < give_up:
                    await api.send([NewMessage("orders", f"m{sent}".encode())])
                    sent += 1
                    await asyncio.sleep(0.05)
                popped = await api.pop("g", "orders", max_messages=32, wait_s=1)
                assert len(popped) > 0
                assert await api.ack("g", [m.receipt_handle for m in popped]) == [None] * len(
                    popped
                )
                await asyncio.to_thread(etcd.start)
                for _ in range(100):  # it holds its registration again by itself
                    members = await coordinator.members("broker")
                    if "b1" in members:
                        break
                    await asyncio.sleep(0.1)
                assert members["b1"].epoch == epoch
                assert members["b1"].info["addr"] == process.address
                await api.send([NewMessage("orders", b"after")])
            finally:
                await api.close()
                await coordinator.close()

        asyncio.run(scenario())
        assert process.terminate() == 0
        assert "lost its etcd session: it keeps taking writes" in "".join(process.output)

        async def gone() -> None:
            async with EtcdCoordinator(etcd.endpoint, cluster="bs") as coordinator:
                assert "b1" not in await coordinator.members("broker")  # deregistered

        asyncio.run(gone())
    finally:
        process.stop()
        etcd.stop()


def test_a_broker_cut_off_from_etcd_refuses_writes_once_it_finds_its_name_taken(
    tmp_path: Path, own_etcd: EtcdServer
) -> None:
    """The one case where another process may serve a standalone broker's queues: while it
    was cut off (etcd up, its link to etcd cut past the TTL), another member registered its
    name. It cannot know before the link is back; then its re-registration meets the rival,
    and it refuses writes (retriable, naming the rival) until the name is free again."""

    async def scenario() -> None:
        async with (
            Link(own_etcd.endpoint) as link,
            EtcdCoordinator(own_etcd.endpoint, cluster="rv") as observer,
        ):
            process = BrokerProcess(
                tmp_path / "broker",
                free_port(),
                "--etcd",
                link.endpoint,
                "--set",
                "cluster.name=rv",
                "--set",
                "cluster.session_ttl_s=2",
            )
            api = RemoteBroker(process.address, call_timeout_s=3)
            try:
                await asyncio.to_thread(process.start)
                await api.start()
                await api.create_topic("orders", 1)
                link.cut()

                async def gone() -> bool:
                    return "b1" not in await observer.members("broker")

                await until(gone, "b1's key to expire", 10, interval_s=0.1)
                rival = await observer.register("broker", "b1", {"addr": "10.0.0.9:1"}, ttl_s=2)
                await api.send([NewMessage("orders", b"cut off")])  # it cannot know yet
                link.restore()
                refused: UnavailableError | None = None
                give_up = time.monotonic() + 10
                while refused is None and time.monotonic() < give_up:
                    try:
                        await api.send([NewMessage("orders", b"x")])
                    except UnavailableError as exc:
                        refused = exc
                    await asyncio.sleep(0.1)
                assert refused is not None, "writes went on with the name taken"
                assert "another process holds its etcd registration" in str(refused)
                assert f"epoch {rival.epoch}, at 10.0.0.9:1" in str(refused)
                assert refused.retriable
                assert (await api.get_topic("orders"))[0].queues == 1  # reads still work
                await rival.close()

                async def takes_writes() -> bool:
                    try:
                        await api.send([NewMessage("orders", b"y")])
                    except UnavailableError:
                        return False
                    return True

                await until(takes_writes, "writes once the name is free", 10, interval_s=0.1)
                member = (await observer.members("broker"))["b1"]
                assert member.info["addr"] == process.address and member.epoch > rival.epoch
            finally:
                await api.close()
                await asyncio.to_thread(process.stop)

    asyncio.run(scenario())


def test_a_broker_started_while_etcd_is_down_waits_for_it_then_starts(tmp_path: Path) -> None:
    etcd = EtcdServer(tmp_path / "etcd")  # its ports are chosen; it is not running yet
    process = BrokerProcess(
        tmp_path / "broker", free_port(), "--etcd", etcd.endpoint, "--set", "cluster.name=w"
    )
    try:
        process.spawn()
        waiting = process.wait_for("waiting for etcd")
        assert f"waiting for etcd at {etcd.endpoint}" in waiting
        assert "retrying every 1s" in waiting
        assert process.process is not None and process.process.poll() is None
        etcd.start()
        started = time.monotonic()
        process.wait_for("listening on ")
        assert time.monotonic() - started < 15

        async def registered() -> None:
            async with EtcdCoordinator(etcd.endpoint, cluster="w") as coordinator:
                assert (await coordinator.members("broker"))["b1"].info["addr"] == process.address

        asyncio.run(registered())
        assert process.terminate() == 0
    finally:
        process.stop()
        etcd.stop()


def test_a_broker_waiting_for_etcd_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "broker", free_port(), "--etcd", f"127.0.0.1:{free_port()}")
    try:
        process.spawn()
        process.wait_for("waiting for etcd")
        assert process.terminate() == 0
        assert "stopped before it started" in "".join(process.output)
    finally:
        process.stop()


def test_popmq_broker_prints_its_config_with_the_cluster_section(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "popmq.cli", "broker", "--name", "b7", "--listen",
         "127.0.0.1:0", "--data-dir", str(tmp_path), "--etcd", "127.0.0.1:1,127.0.0.1:2",
         "--print-config"],
        capture_output=True, text=True, check=True, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert 'broker_name = "b7"' in out.stdout
    assert 'etcd = "127.0.0.1:1,127.0.0.1:2"' in out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "popmq.cli", "broker", "--name", "b7", "--listen",
         "127.0.0.1:0", "--data-dir", str(tmp_path), "--set", "cluster.session_ttl_s=1"],
        capture_output=True, text=True, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert bad.returncode == 2
    assert "session_ttl_s" in bad.stderr and json.dumps(2) in bad.stderr


def test_a_broker_restarted_at_once_after_kill_9_waits_for_its_old_lease(tmp_path: Path) -> None:
    """A supervisor restarts a crashed broker at once; its old registration is still alive
    then, and the new process waits for it to lapse instead of exiting."""
    etcd = EtcdServer(tmp_path / "etcd").start()
    args = ("--etcd", etcd.endpoint, "--set", "cluster.name=rs", "--set", "cluster.session_ttl_s=3")
    process = BrokerProcess(tmp_path / "broker", free_port(), *args)
    try:
        process.start()
        process.kill()
        started = time.monotonic()
        process.start()  # the lease of the killed run lives up to 3 s more
        assert time.monotonic() - started < 20

        async def registered() -> None:
            async with EtcdCoordinator(etcd.endpoint, cluster="rs") as coordinator:
                assert (await coordinator.members("broker"))["b1"].info["addr"] == process.address

        asyncio.run(registered())
    finally:
        process.stop()
        etcd.stop()
