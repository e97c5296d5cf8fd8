"""Fixtures of the coordination tests: a real etcd (tests/support/etcd.py), and the
coordinator under test, parametrized over LocalCoordinator and EtcdCoordinator.

There is no pytest-asyncio: a test writes its scenario as an `async def` and runs it with
`asyncio.run`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from popmq.cluster import Coordinator, EtcdCoordinator, LocalCoordinator
from tests.support.etcd import EtcdServer

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
