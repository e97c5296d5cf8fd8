"""A whole cluster in one background event loop: a real etcd (its own process), brokers
(BrokerServer: a real Broker over BrokerService, registered in etcd) and proxies
(ProxyServer: PopMQServer over a ClusterBroker), each on 127.0.0.1:0.

Fast enough to run many cluster behaviours; the multi-process tests (kill -9 and restarts of
real `popmq broker` / `popmq proxy` processes) live elsewhere. Tests drive it with the sync
SDK, which runs its own loop thread, while the servers run here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from popmq.broker.server import BrokerServer
from popmq.broker_core import BrokerConfig, StoreConfig
from popmq.cluster.cluster_broker import ClusterBroker
from popmq.cluster.proxy_server import ProxyServer
from popmq.console import ConsoleConfig
from popmq.coordination.config import ClusterConfig
from popmq.runtime.config import ServerConfig
from popmq.security.config import SecurityConfig
from tests.support.etcd import EtcdServer
from tests.support.thread_loops import stop_thread_loop

T = TypeVar("T")


class InProcessCluster:
    """etcd + brokers + proxies; `proxies[i]` is an endpoint for the SDK.

    `broker_security` and `proxy_security` are the `[security]` sections of the brokers and
    of the proxies (TLS between them, for one); `proxy_console` the proxies' `[console]`
    (off by default; `console_urls` lists where each proxy's answers)."""

    def __init__(
        self,
        root: Path,
        *,
        cluster: str = "test",
        session_ttl_s: int = 3,
        broker_security: SecurityConfig | None = None,
        proxy_security: SecurityConfig | None = None,
        proxy_console: ConsoleConfig | None = None,
    ) -> None:
        self.root = root
        self._broker_security = broker_security or SecurityConfig()
        self._proxy_security = proxy_security or SecurityConfig()
        self._proxy_console = proxy_console or ConsoleConfig()
        self.etcd = EtcdServer(root / "etcd")
        self._cluster_name = cluster
        self._ttl = session_ttl_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="popmq-cluster")
        self.brokers: dict[str, BrokerServer] = {}
        self._proxies: list[ProxyServer] = []
        self.proxies: list[str] = []

    @property
    def config(self) -> ClusterConfig:
        return ClusterConfig(
            etcd=self.etcd.endpoint, name=self._cluster_name, session_ttl_s=self._ttl
        )

    def start(self, brokers: int = 3, proxies: int = 2) -> InProcessCluster:
        self.etcd.start()
        self._thread.start()
        for i in range(brokers):
            self.add_broker(f"b{i + 1}")
        for _ in range(proxies):
            self.add_proxy()
        return self

    def call(self, fn: Callable[[], Awaitable[T]], timeout_s: float = 60) -> T:
        """Run a coroutine function on the cluster's loop; its result."""

        async def run() -> T:
            return await fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=timeout_s)

    def add_broker(self, name: str, *, advertise: str = "") -> BrokerServer:
        """Start broker `name`; it registers `advertise` (a relay in front of it, say) as
        its address when given."""
        config = ServerConfig(
            listen="127.0.0.1:0",
            shutdown_grace_s=1.0,
            cluster=dataclasses.replace(self.config, advertise=advertise),
            broker=BrokerConfig(broker_name=name, store=StoreConfig(data_dir=self.root / name)),
            security=self._broker_security,
        )
        server = BrokerServer(config)
        self.call(server.start)
        self.brokers[name] = server
        self.wait_live({*self.brokers})
        return server

    def stop_broker(self, name: str) -> None:
        """Stop a broker cleanly (its registration is revoked: proxies drop it at once)."""
        self.call(self.brokers.pop(name).stop)
        self.wait_live(set(self.brokers))

    def add_proxy(self) -> str:
        proxy = ProxyServer(
            ServerConfig(
                listen="127.0.0.1:0",
                cluster=self.config,
                security=self._proxy_security,
                console=self._proxy_console,
            )
        )
        port = self.call(proxy.start)
        self._proxies.append(proxy)
        self.proxies.append(f"127.0.0.1:{port}")
        return self.proxies[-1]

    @property
    def console_urls(self) -> list[str]:
        """Each proxy's console URL (with `proxy_console` on)."""
        return [p.server.console.url for p in self._proxies if p.server.console is not None]

    def cluster_broker(self, index: int = 0) -> ClusterBroker:
        return self._proxies[index].broker

    def wait_live(self, names: set[str], timeout_s: float = 20) -> None:
        """Until every proxy's route cache has exactly `names` as live brokers."""

        async def until() -> None:
            async with asyncio.timeout(timeout_s):
                for proxy in self._proxies:
                    routes = proxy.broker.routes
                    while set(routes.live_brokers) != names:
                        await routes.wait_changed()

        self.call(until, timeout_s + 5)

    def stop(self) -> None:
        async def stop_all() -> None:
            for proxy in self._proxies:
                await proxy.stop()
            for broker in self.brokers.values():
                await broker.stop()

        try:
            if self._thread.is_alive():
                self.call(stop_all)
            stop_thread_loop(self._loop, self._thread)
        finally:
            self.etcd.stop()
