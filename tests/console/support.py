"""A real popmq server with its console, in the test's own event loop.

`serving(tmp_path, ...)` starts PopMQServer on 127.0.0.1:0 with `[console] listen =
"127.0.0.1:0"` (the console in the same loop, as `popmq serve` runs it) and stops it; the
tests talk to the console over real HTTP (httpx against its bound port) and to the gRPC
API with the SDK.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

import httpx

from popmq.broker_core import BrokerConfig, StoreConfig
from popmq.console import ConsoleConfig
from popmq.proxy.server import PopMQServer
from popmq.runtime.config import ServerConfig
from popmq.security.config import SecurityConfig

ROOT_KEY = "root"
ROOT_SECRET = "root-secret-0123456789"
AUTHENTICATED = SecurityConfig(
    authentication=True, root_access_key=ROOT_KEY, root_secret_key=ROOT_SECRET
)
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def config(
    data_dir: Path,
    *,
    security: SecurityConfig | None = None,
    console: ConsoleConfig | None = None,
    flush: Literal["sync", "async"] = "sync",
) -> ServerConfig:
    return ServerConfig(
        listen="127.0.0.1:0",
        shutdown_grace_s=1.0,
        broker=BrokerConfig(store=StoreConfig(data_dir=data_dir, flush=flush)),
        security=security or SecurityConfig(),
        console=console or ConsoleConfig(listen="127.0.0.1:0", sample_interval_s=0.2),
    )


@contextlib.asynccontextmanager
async def serving(
    data_dir: Path,
    *,
    security: SecurityConfig | None = None,
    console: ConsoleConfig | None = None,
    flush: Literal["sync", "async"] = "sync",
) -> AsyncIterator[PopMQServer]:
    """`flush="async"` for tests that create thousands of resources before they look."""
    server = PopMQServer(config(data_dir, security=security, console=console, flush=flush))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def browser(server: PopMQServer) -> httpx.AsyncClient:
    """An HTTP client of the server's console that sends its Origin, as a browser does on
    the console's own pages, and keeps cookies."""
    assert server.console is not None
    url = server.console.url
    return httpx.AsyncClient(base_url=url, headers={"origin": url}, follow_redirects=False)


def csrf_of(page: str) -> str:
    """The CSRF token a page's forms carry."""
    match = _CSRF.search(page)
    assert match, "the page has no form with a CSRF token"
    return match.group(1)


async def log_in(client: httpx.AsyncClient, access_key: str, secret_key: str) -> httpx.Response:
    return await client.post("/login", data={"access_key": access_key, "secret_key": secret_key})


class AuditLines(logging.Handler):
    """The audit lines written while it is attached (the `audit_lines` fixture)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[dict[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(record.getMessage()))
