"""Fixtures of the coordination tests: a real etcd (tests/support/etcd.py), and the
coordinator under test, parametrized over LocalCoordinator and EtcdCoordinator.

There is no pytest-asyncio: a test writes its scenario as an `async def` and runs it with
`asyncio.run`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

from popmq.coordination import Coordinator, EtcdCoordinator, LocalCoordinator
from tests.support.cluster import Cluster
from tests.support.etcd import EtcdServer
from tests.support.fault_relay import FaultRelay, relay_loop
from tests.support.inprocess_cluster import InProcessCluster

_clusters = itertools.count()


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One etcd shared by the tests that neither stop nor compact it (each uses its own
    cluster name, so their keys never meet)."""
    server = EtcdServer(tmp_path_factory.mktemp("etcd") / "data").start()
    yield server
    server.stop()


@pytest.fixture
def own_etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """An etcd of this test alone: it may stop, restart or compact it."""
    server = EtcdServer(tmp_path / "etcd").start()
    yield server
    server.stop()


def unique_cluster() -> str:
    return f"test{next(_clusters)}"


MakeCoordinator = Callable[[], Coordinator]


@pytest.fixture(params=["local", "etcd"])
def make_coordinator(request: pytest.FixtureRequest) -> MakeCoordinator:
    """A factory (call it inside the test's event loop) of the coordinator under test.

    For etcd every call opens a new client on the same cluster, as another process would;
    for local every call returns the one in-process coordinator.
    """
    cluster = unique_cluster()
    if request.param == "local":
        local: list[LocalCoordinator] = []

        def make_local() -> Coordinator:
            if not local:
                local.append(LocalCoordinator(cluster))
            return local[0]

        return make_local
    server: EtcdServer = request.getfixturevalue("etcd")
    return lambda: EtcdCoordinator(server.endpoint, cluster=cluster)


# -- real clusters of processes (tests/support/cluster.py) ---------------------------------


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Keep each phase's report on the item, so a cluster fixture knows at teardown whether
    the test failed (and prints the processes' logs then)."""
    report: pytest.TestReport = yield
    setattr(item, f"report_{report.when}", report)
    return report


def _failed(request: pytest.FixtureRequest) -> bool:
    return any(
        getattr(getattr(request.node, f"report_{when}", None), "failed", False)
        for when in ("setup", "call")
    )


@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """etcd + 3 brokers + 2 proxies shared by the tests of one module that kill nothing
    (each uses its own topics and groups)."""
    cluster = Cluster(tmp_path_factory.mktemp("cluster"))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster(module_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """The module's shared cluster, every process running; its logs are printed after a
    failed test."""
    down = [p.name for p in module_cluster.processes.values() if not p.running]
    assert not down, f"processes of the shared cluster are down: {down}\n{module_cluster.logs()}"
    yield module_cluster
    if _failed(request):
        print(module_cluster.logs(80))


@pytest.fixture
def own_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A cluster of this test alone (it may kill, stop or restart anything), etcd + 3
    brokers + 2 proxies with a 3 s session TTL; a test marks `cluster_options(...)` for
    others. Logs are printed after a failed test."""
    marker = request.node.get_closest_marker("cluster_options")
    options = dict(marker.kwargs) if marker is not None else {}
    cluster = Cluster(tmp_path / "cluster", **options)
    cluster.start()
    try:
        yield cluster
    finally:
        if _failed(request):
            print(cluster.logs(80))
        cluster.stop()


@pytest.fixture
def relayed_b2(tmp_path: Path) -> Iterator[tuple[InProcessCluster, FaultRelay]]:
    """An in-process cluster (etcd, broker b1, one proxy) and a second broker b2 that
    registers the address of a FaultRelay in front of it, so every call to b2 passes the
    relay: a test injects its faults on that link alone."""
    cluster = InProcessCluster(tmp_path).start(brokers=1, proxies=1)
    relay = FaultRelay()
    try:
        endpoint = cluster.call(relay.start)
        b2 = cluster.add_broker("b2", advertise=endpoint)
        relay.target = ("127.0.0.1", b2.port)
        yield cluster, relay
    finally:
        cluster.call(relay.close)
        cluster.stop()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster_options(**kwargs): Cluster arguments of the own_cluster fixture"
    )


@pytest.fixture(name="relay_loop")
def relay_loop_fixture() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop in a thread of its own, for FaultRelays in front of processes."""
    with relay_loop() as loop:
        yield loop
