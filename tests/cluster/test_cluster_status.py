"""`popmq cluster status` and the metrics per broker: the status builder (cluster/status.py)
against real brokers, then whole clusters (etcd, brokers and proxies in this event loop)
through the SDK, the CLI and the Prometheus endpoints."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from popmq import AsyncAdmin, AsyncProducer
from popmq.broker.server import BrokerServer
from popmq.broker_core import BrokerConfig, StoreConfig
from popmq.cli.commands import EXIT_UNHEALTHY
from popmq.cli.main import main
from popmq.cluster.cluster_broker import ClusterBroker
from popmq.cluster.proxy_server import ProxyServer, proxy_info
from popmq.cluster.status import ClusterStatus
from popmq.coordination import EtcdCoordinator, LocalCoordinator, RoutesConfig
from popmq.coordination.config import ClusterConfig
from popmq.runtime.config import ServerConfig
from popmq.runtime.metrics import MetricsConfig
from tests.cluster.conftest import unique_cluster
from tests.support.brokers import served_broker
from tests.support.etcd import EtcdServer
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(120)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def _scrape(port: int) -> Samples:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
    await writer.drain()
    response = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.split()[1] == b"200", head
    samples: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _per_broker(samples: Samples, name: str) -> dict[str, float]:
    return {
        dict(labels)["broker"]: value
        for (sample, labels), value in samples.items()
        if sample == name
    }


async def _until(
    check: Callable[[], bool], wait: Callable[[], Awaitable[None]], timeout_s: float
) -> None:
    """Wait for changes (no polling) until `check()` holds."""
    async with asyncio.timeout(timeout_s):
        while not check():
            await wait()


# -- the builder, over LocalCoordinator and real brokers ------------------------------------


@dataclass
class InFlight:
    """Calls the hanging brokers hold now, and the most they held at once."""

    now: int = 0
    most: int = 0
    arrived: int = 0


@contextlib.asynccontextmanager
async def _hanging_broker(calls: InFlight | None = None) -> AsyncIterator[str]:
    """A BrokerService whose GetMetricsSnapshot never answers: a broker that is stuck."""
    stuck = asyncio.Event()  # never set: every call waits until cancelled
    calls = calls or InFlight()

    async def hang(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        calls.arrived += 1
        calls.now += 1
        calls.most = max(calls.most, calls.now)
        try:
            await stuck.wait()
        finally:
            calls.now -= 1
        return b""

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "popmq.broker.v1.BrokerService",
                {"GetMetricsSnapshot": grpc.unary_unary_rpc_method_handler(hang)},
            )
        ]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


def test_builder_reports_a_hanging_broker_unreachable_within_its_deadline_and_a_gone_one_down(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        coordinator = LocalCoordinator(unique_cluster())
        async with served_broker(tmp_path / "b1") as b1, _hanging_broker() as hanging:
            s1 = await coordinator.register("broker", "b1", {"addr": b1.address})
            s2 = await coordinator.register("broker", "b2", {"addr": hanging})
            s3 = await coordinator.register("broker", "b3", {"addr": "127.0.0.1:9"})
            await coordinator.register("proxy", "p1", {"addr": "127.0.0.1:8081"})
            await coordinator.register("proxy", "p2", {"addr": "127.0.0.1:8082"})
            # A call timeout far above the probe deadline: the deadline is what bounds it.
            cluster = ClusterBroker(coordinator, proxy_info(ServerConfig()), call_timeout_s=60)
            await cluster.start()
            try:
                route = await cluster.route_admin.create_topic(
                    "orders", queues={"b1": 2, "b2": 3, "b3": 1}
                )
                await cluster.routes.wait_for(route.revision, timeout_s=10)
                cluster.faults.update("b2", 1.0, failed=True)
                status = ClusterStatus(cluster, proxy_name=lambda: "p1", probe_timeout_s=0.5)
                began = time.monotonic()
                first_report = await status.report()  # sees b3 live: its address is kept
                took_first = time.monotonic() - began
                await s3.close()
                await _until(
                    lambda: "b3" not in cluster.routes.live_brokers,
                    cluster.routes.wait_changed,
                    10,
                )
                began = time.monotonic()
                report = await status.report()
                took = time.monotonic() - began
            finally:
                await cluster.close()
            # The 0.5 s deadline bounds a report, not the 60 s call timeout.
            assert max(took_first, took) < 10, (took_first, took)
            assert first_report.brokers[1].error == "no answer within 0.5s"
            assert (report.mode, report.cluster, report.proxy) == (
                "cluster", coordinator.cluster, "p1",
            )  # fmt: skip
            first, second, third = report.brokers
            assert (first.name, first.address, first.live, first.reachable) == (
                "b1", b1.address, True, True,
            )  # fmt: skip
            assert (first.epoch, first.topics, first.queues, first.error) == (s1.epoch, 1, 2, "")
            assert first.metrics is not None
            assert first.metrics.store_bytes > 0
            assert first.metrics.disk_free_bytes is not None
            assert first.metrics.disk_free_bytes > 0
            assert (second.name, second.live, second.reachable) == ("b2", True, False)
            assert (second.epoch, second.queues) == (s2.epoch, 3)
            assert second.error == "no answer within 0.5s"
            assert second.metrics is None
            assert second.faults is not None
            assert second.faults.failures == 1
            assert second.faults.isolated_for_s > 0
            assert (third.name, third.live, third.reachable, third.epoch) == ("b3", False, False, 0)
            assert (third.address, third.queues) == ("127.0.0.1:9", 1)
            assert "not registered" in third.error
            assert [(p.name, p.address, p.this_proxy) for p in report.proxies] == [
                ("p1", "127.0.0.1:8081", True),
                ("p2", "127.0.0.1:8082", False),
            ]
            assert not report.proxies_stale
            assert report.etcd is None  # not coordinated by etcd
            assert first.lease_ttl_s is None
        await coordinator.close()

    asyncio.run(scenario())


def test_builder_reports_the_epoch_a_registration_names() -> None:
    """A shard leader registered again under its term names the term's epoch: that is its
    epoch, not the new key's create revision."""

    async def scenario() -> None:
        coordinator = LocalCoordinator(unique_cluster())
        await coordinator.register("broker", "b1", {"addr": "127.0.0.1:9"})
        cluster = ClusterBroker(coordinator, proxy_info(ServerConfig()))
        await cluster.start()
        try:
            await _until(
                lambda: "b1" in cluster.routes.live_brokers, cluster.routes.wait_changed, 10
            )
            epoch = cluster.routes.live_brokers["b1"].created_revision
            await coordinator.register("broker", "b2", {"addr": "127.0.0.1:9", "epoch": epoch})
            await _until(
                lambda: "b2" in cluster.routes.live_brokers, cluster.routes.wait_changed, 10
            )
            assert cluster.routes.live_brokers["b2"].created_revision > epoch
            status = ClusterStatus(cluster, proxy_name=lambda: "p1", probe_timeout_s=0.5)
            report = await status.report()
        finally:
            await cluster.close()
            await coordinator.close()
        assert [(b.name, b.epoch) for b in report.brokers] == [("b1", epoch), ("b2", epoch)]

    asyncio.run(scenario())


def test_builder_reports_a_broker_held_past_its_vanished_registration(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    """A broker whose registration vanished while this proxy's connection to it stayed up
    is held (routed to) for `vanished_grace_s`: the report lists it as held, not live, with
    how long it may still be held, and as a plain member again once it registers again."""

    async def scenario() -> None:
        name = unique_cluster()
        async with (
            served_broker(tmp_path / "b1") as b1,
            EtcdCoordinator(etcd.endpoint, cluster=name) as brokers,
            EtcdCoordinator(etcd.endpoint, cluster=name) as proxy,
        ):
            session = await brokers.register("broker", "b1", {"addr": b1.address})
            cluster = ClusterBroker(
                proxy, proxy_info(ServerConfig()), routes=RoutesConfig(vanished_grace_s=30)
            )
            await cluster.start()
            try:
                status = ClusterStatus(cluster, proxy_name=lambda: "p1", probe_timeout_s=2)
                await until(lambda: cluster.pool.answering("b1"), "a connection to b1", 10)
                (registered,) = (await status.report()).brokers
                assert (registered.live, registered.held_for_s, registered.hold_left_s) == (
                    True, None, None,
                )  # fmt: skip

                await session.close()  # its key vanishes; the connection stays up
                await until(lambda: "b1" in cluster.routes.held, "b1 held", 10)
                (held,) = (await status.report()).brokers
                await brokers.register("broker", "b1", {"addr": b1.address})
                await until(lambda: not cluster.routes.held, "b1 registered again", 10)
                (again,) = (await status.report()).brokers
            finally:
                await cluster.close()
        assert (held.name, held.live, held.reachable, held.epoch) == (
            "b1", False, True, registered.epoch,
        )  # fmt: skip
        assert held.held_for_s is not None and held.hold_left_s is not None
        assert 0 <= held.held_for_s < 30 and held.hold_left_s == 30 - held.held_for_s
        assert "proxy p1 holds it, routing to it for up to" in held.error, held.error
        assert held.lease_ttl_s is None  # no key in etcd
        assert (again.live, again.held_for_s, again.error) == (True, None, "")
        assert again.epoch > registered.epoch

    asyncio.run(scenario())


def test_builder_asks_at_most_max_probes_brokers_at_once() -> None:
    async def scenario() -> None:
        coordinator = LocalCoordinator(unique_cluster())
        calls = InFlight()
        async with contextlib.AsyncExitStack() as stack:
            for name in ("b1", "b2", "b3", "b4", "b5"):
                address = await stack.enter_async_context(_hanging_broker(calls))
                await coordinator.register("broker", name, {"addr": address})
            cluster = ClusterBroker(coordinator, proxy_info(ServerConfig()))
            await cluster.start()
            stack.push_async_callback(cluster.close)
            status = ClusterStatus(
                cluster, proxy_name=lambda: "p1", probe_timeout_s=0.3, max_probes=1
            )
            brokers = await status.brokers()
        assert [(b.name, b.reachable) for b in brokers] == [(f"b{i}", False) for i in range(1, 6)]
        assert calls.arrived == 5
        # One at a time; the next call may reach its broker a moment before the cancel of
        # the previous one reaches that one, so two can overlap (five would without a bound).
        assert calls.most <= 2
        await coordinator.close()

    asyncio.run(scenario())


def test_builder_refuses_a_deadline_or_bound_that_could_never_answer() -> None:
    async def scenario() -> None:
        coordinator = LocalCoordinator(unique_cluster())
        cluster = ClusterBroker(coordinator, proxy_info(ServerConfig()))
        with pytest.raises(ValueError, match="probe_timeout_s 0 must be positive"):
            ClusterStatus(cluster, proxy_name=lambda: "p", probe_timeout_s=0)
        with pytest.raises(ValueError, match="max_probes 0 must be at least 1"):
            ClusterStatus(cluster, proxy_name=lambda: "p", max_probes=0)
        await coordinator.close()

    asyncio.run(scenario())


# -- whole clusters over a real etcd ------------------------------------------------------


@dataclass
class Cluster:
    brokers: dict[str, BrokerServer]
    proxies: dict[str, ProxyServer]

    def endpoint(self, proxy: str) -> str:
        return f"127.0.0.1:{self.proxies[proxy].port}"


@contextlib.asynccontextmanager
async def _cluster(
    tmp: Path, etcd: str, brokers: Sequence[str], proxies: Sequence[str]
) -> AsyncIterator[Cluster]:
    """Brokers and proxies in this event loop; the first of each serves /metrics."""
    config = ClusterConfig(etcd=etcd, name=unique_cluster())
    running = Cluster({}, {})
    try:
        for i, name in enumerate(brokers):
            server = BrokerServer(
                ServerConfig(
                    listen="127.0.0.1:0",
                    shutdown_grace_s=1.0,
                    cluster=config,
                    metrics=MetricsConfig(listen="127.0.0.1:0" if i == 0 else ""),
                    broker=BrokerConfig(broker_name=name, store=StoreConfig(data_dir=tmp / name)),
                )
            )
            await server.start()
            running.brokers[name] = server
        for i, name in enumerate(proxies):
            proxy = ProxyServer(
                ServerConfig(
                    listen="127.0.0.1:0",
                    shutdown_grace_s=1.0,
                    cluster=ClusterConfig(etcd=config.etcd, name=config.name, proxy_name=name),
                    metrics=MetricsConfig(listen="127.0.0.1:0" if i == 0 else ""),
                )
            )
            await proxy.start()
            running.proxies[name] = proxy
        yield running
    finally:
        for proxy in running.proxies.values():
            await proxy.stop()
        for server in running.brokers.values():
            await server.stop()


async def _cli(*args: str, exit_code: int = 0) -> None:
    """`popmq ARGS` in a thread (its Admin is blocking; this loop serves the cluster)."""
    code = await asyncio.to_thread(main, list(args))
    assert code == exit_code, args


def test_status_lists_every_broker_proxy_and_etcd_and_shows_a_stopped_broker_down(
    tmp_path: Path, etcd: EtcdServer, capsys: pytest.CaptureFixture[str]
) -> None:
    async def scenario() -> None:
        async with _cluster(tmp_path, etcd.endpoint, ["b1", "b2", "b3"], ["pa", "pb"]) as c:
            endpoint = c.endpoint("pa")
            async with AsyncAdmin(endpoint) as admin, AsyncProducer(endpoint) as producer:
                await admin.create_topic("orders", queues=2)
                for i in range(6):
                    await producer.send("orders", f"m{i}".encode())
                status = await admin.cluster_status()
                assert (status.mode, status.proxy) == ("cluster", "pa")
                assert status.cluster == c.proxies["pa"].config.cluster.name
                assert [b.name for b in status.brokers] == ["b1", "b2", "b3"]
                for b in status.brokers:
                    server = c.brokers[b.name]
                    assert server.session is not None
                    assert (b.address, b.epoch) == (server.address, server.session.epoch)
                    assert (b.live, b.reachable, b.error) == (True, True, ""), b
                    assert (b.topics, b.queues) == (1, 2)
                    assert b.lease_ttl_s is not None
                    assert 0 < b.lease_ttl_s <= server.config.cluster.session_ttl_s
                    assert b.store_bytes is not None and b.store_bytes > 0
                    assert b.disk_free_bytes is not None and b.disk_free_bytes > 0
                sent = {b.name: b.messages_sent for b in status.brokers}
                assert sum(n or 0 for n in sent.values()) == 6
                assert [(p.name, p.address, p.this_proxy) for p in status.proxies] == [
                    ("pa", c.proxies["pa"].advertised, True),
                    ("pb", c.proxies["pb"].advertised, False),
                ]
                for p in status.proxies:
                    session = c.proxies[p.name].session
                    assert session is not None
                    assert p.epoch == session.epoch
                assert not status.proxies_stale
                assert status.etcd is not None
                (member,) = status.etcd
                assert (member.endpoint, member.reachable, member.is_leader) == (
                    etcd.endpoint, True, True,
                )  # fmt: skip
                assert member.version and member.db_size_bytes > 0
                assert status.problems == []

                proxy_metrics = await _scrape(c.proxies["pa"].server.metrics_port)
                assert _per_broker(proxy_metrics, "popmq_broker_up") == {
                    "b1": 1, "b2": 1, "b3": 1,
                }  # fmt: skip
                for family in ("popmq_broker_store_bytes", "popmq_broker_disk_free_bytes"):
                    values = _per_broker(proxy_metrics, family)
                    assert set(values) == {"b1", "b2", "b3"} and min(values.values()) > 0
                assert _per_broker(proxy_metrics, "popmq_broker_messages_sent_total") == sent
                assert set(_per_broker(proxy_metrics, "popmq_broker_long_polls_held")) == {
                    "b1", "b2", "b3",
                }  # fmt: skip
                assert _per_broker(proxy_metrics, "popmq_broker_send_failures_total") == {
                    "b1": 0, "b2": 0, "b3": 0,
                }  # fmt: skip
                own = await _scrape(c.brokers["b1"].metrics_port)
                assert own[("popmq_messages_sent_total", (("topic", "orders"),))] == sent["b1"]
                assert own[("popmq_store_bytes", ())] > 0
                assert own[("popmq_disk_free_bytes", ())] > 0
                assert ("popmq_topics", ()) in own

                gone = c.brokers.pop("b3")
                await gone.stop()
                routes = c.proxies["pa"].broker.routes
                await _until(lambda: "b3" not in routes.live_brokers, routes.wait_changed, 20)
                status = await admin.cluster_status()
                b3 = status.brokers[2]
                assert (b3.name, b3.live, b3.reachable, b3.epoch) == ("b3", False, False, 0)
                assert (b3.address, b3.queues) == (gone.address, 2)
                assert "not registered" in b3.error
                assert b3.store_bytes is None
                assert [b.reachable for b in status.brokers[:2]] == [True, True]
                proxy_metrics = await _scrape(c.proxies["pa"].server.metrics_port)
                assert _per_broker(proxy_metrics, "popmq_broker_up")["b3"] == 0
                assert _per_broker(proxy_metrics, "popmq_broker_live")["b3"] == 0
                assert "b3" not in _per_broker(proxy_metrics, "popmq_broker_store_bytes")

                assert status.problems == [f"broker b3 is down (not registered): {b3.error}"]
                capsys.readouterr()
                await _cli("cluster", "status", "--endpoint", endpoint, exit_code=EXIT_UNHEALTHY)
                out, err = capsys.readouterr()
                assert err == f"popmq: broker b3 is down (not registered): {b3.error}\n"
                assert out.startswith(f"cluster {status.cluster}, as proxy pa sees it")
                assert "DOWN" in next(line for line in out.splitlines() if " b3 " in line)
                assert " up " in next(line for line in out.splitlines() if " b1 " in line)
                assert "this proxy" in next(
                    line for line in out.splitlines() if line.startswith("│ pa ")
                )
                assert "broker b3: not registered in etcd now" in out

    asyncio.run(scenario())


def test_status_answers_from_the_cached_view_with_etcd_down(
    tmp_path: Path, own_etcd: EtcdServer, capsys: pytest.CaptureFixture[str]
) -> None:
    async def scenario() -> None:
        async with _cluster(tmp_path, own_etcd.endpoint, ["b1", "b2"], ["pa", "pb"]) as c:
            endpoint = c.endpoint("pa")
            async with AsyncAdmin(endpoint) as admin:
                await admin.create_topic("orders", queues=1)
                before = await admin.cluster_status()
                assert before.etcd_reachable is True
                await asyncio.to_thread(own_etcd.stop)
                try:
                    began = time.monotonic()
                    status = await admin.cluster_status()
                    took = time.monotonic() - began
                    assert took < 15, took  # short deadlines, not etcd's 5 s per call
                    assert status.etcd_reachable is False
                    assert status.etcd is not None
                    assert status.etcd[0].error
                    assert status.proxies_stale
                    assert [p.name for p in status.proxies] == ["pa", "pb"]
                    assert status.proxies_read_time == before.proxies_read_time
                    assert [(b.name, b.live, b.reachable) for b in status.brokers] == [
                        ("b1", True, True),
                        ("b2", True, True),
                    ]
                    assert [b.epoch for b in status.brokers] == [b.epoch for b in before.brokers]
                    assert all(b.lease_ttl_s is None for b in status.brokers)
                    assert all(b.store_bytes for b in status.brokers)
                    assert status.problems == [
                        f"etcd endpoint {own_etcd.endpoint} is unreachable: {status.etcd[0].error}",
                        "the proxy list is stale: etcd did not answer",
                    ]
                    capsys.readouterr()
                    await _cli(
                        "cluster", "status", "--endpoint", endpoint, "--json",
                        exit_code=EXIT_UNHEALTHY,
                    )  # fmt: skip
                    out, err = capsys.readouterr()
                    document = json.loads(out)
                    assert "is unreachable" in err
                    assert document["etcd"][0]["reachable"] is False
                    assert document["proxies_stale"] is True
                    assert [b["name"] for b in document["brokers"]] == ["b1", "b2"]
                finally:
                    # Back before the teardown, so sessions end at once rather than time out.
                    await asyncio.to_thread(own_etcd.start)

    asyncio.run(scenario())


def test_popmq_broker_takes_metrics_listen_into_its_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["broker", "--name", "b7", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path),
            "--metrics-listen", "127.0.0.1:9464", "--print-config"]  # fmt: skip
    assert main(argv) == 0
    assert tomllib.loads(capsys.readouterr().out)["metrics"]["listen"] == "127.0.0.1:9464"
