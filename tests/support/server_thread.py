"""The real popmq server on 127.0.0.1:0 in a background thread, for integration tests."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.proxy.server import PopMQServer
from popmq.runtime.config import ServerConfig
from popmq.runtime.metrics import MetricsConfig
from popmq.security.config import SecurityConfig
from tests.support.thread_loops import stop_thread_loop

T = TypeVar("T")


class ServerThread:
    """Runs PopMQServer on its own event loop thread; restartable over the same data dir."""

    def __init__(
        self,
        data_dir: Path,
        broker: BrokerConfig | None = None,
        *,
        metrics: bool = False,
        security: SecurityConfig | None = None,
    ) -> None:
        """``metrics``: count RPCs (read them with ``rpc_count``); ``security``: the
        server's `[security]` section (TLS, authentication...; default: all off)."""
        self.data_dir = data_dir
        base = broker or BrokerConfig()
        self._config = ServerConfig(
            listen="127.0.0.1:0",
            shutdown_grace_s=1.0,
            broker=dataclasses.replace(
                base, store=StoreConfig(data_dir=data_dir, flush=base.store.flush)
            ),
            metrics=MetricsConfig(listen="127.0.0.1:0" if metrics else ""),
            security=security or SecurityConfig(),
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.server: PopMQServer | None = None
        self.endpoint = ""

    def start(self, *, listen_only: bool = False) -> str:
        """Start serving; ``listen_only``: bind and serve health only, so every other call
        is refused UNAVAILABLE (a server that is starting)."""
        loop = asyncio.new_event_loop()
        ready: Future[None] = Future()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="popmq-test-server")
        self._thread.start()
        self.server = PopMQServer(self._config)
        port = self.call(self.server.listen if listen_only else self.server.start)
        del ready
        self.endpoint = f"127.0.0.1:{port}"
        return self.endpoint

    def rpc_count(self, method: str | None = None, code: str | None = None) -> int:
        """Calls (stream requests included) of ``method`` ("AdminService/GetTopic", None: any)
        answered with ``code`` (None: any); needs ``metrics=True``."""
        assert self.server is not None and self.server.metrics is not None, "metrics=True"
        total = 0.0
        for family in self.server.metrics.registry.collect():
            for sample in family.samples:
                if sample.name != "popmq_rpc_duration_seconds_count":
                    continue
                if method is not None and sample.labels["method"] != f"popmq.v1.{method}":
                    continue
                if code is None or sample.labels["code"] == code:
                    total += sample.value
        return int(total)

    def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run a coroutine function on the server's loop and return its result."""
        assert self._loop is not None

        async def run() -> T:
            return await fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=60)

    def sync(self, fn: Callable[[], T]) -> T:
        """Run a plain function on the server's loop (to read broker state safely)."""

        async def run() -> T:
            return fn()

        return self.call(run)

    def held_pops(self) -> int:
        """Pops parked in the broker's long polling now (a change no waiter announces)."""
        held: int = self.sync(lambda: self.broker.polling.held)
        return held

    def stop(self) -> None:
        if self._loop is None or self.server is None:
            return
        self.call(self.server.stop)
        assert self._thread is not None
        stop_thread_loop(self._loop, self._thread)
        self._loop = None
        self.server = None

    def restart(self) -> str:
        """Stop cleanly and start again on the same data dir (a new port)."""
        self.stop()
        return self.start()

    @property
    def broker(self) -> Any:
        assert self.server is not None
        return self.server.broker
