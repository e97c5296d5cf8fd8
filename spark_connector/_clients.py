"""SDK clients cached per process, so Spark's reused Python workers keep their channels.

Executors run read() and write() in long-lived Python workers; opening a channel per task
would add a connection set-up to every task. Clients are keyed by what configures them and
closed at interpreter exit. A client inherited through a fork keeps working: the SDK starts
a new loop thread in the child and reopens the channel on it.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from popmq import Admin, Credentials, Producer, PullConsumer, SimpleConsumer, Sql
from popmq.sdk.tls import TLS

__all__ = ["admin", "producer", "pull_consumer", "simple_consumer"]

_T = TypeVar("_T")

# Guards _cache: tasks and the driver's lease keeper may ask from several threads.
_lock = threading.Lock()
_cache: dict[tuple[Any, ...], Any] = {}


class Connected(Protocol):
    """What configures a client's connection: ReadOptions and WriteOptions have it."""

    @property
    def endpoint(self) -> str: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def tls(self) -> TLS: ...
    @property
    def credentials(self) -> Credentials | None: ...


def _get(
    kind: str,
    options: Connected,
    make: Callable[..., _T],
    endpoint: str | None = None,
    **kwargs: Any,
) -> _T:
    """The cached client `make` of `options`' connection (to `endpoint` instead of
    `options.endpoint` when given) with `kwargs`, made on first use."""
    endpoint = options.endpoint if endpoint is None else endpoint
    key = (kind, endpoint, options.timeout_s, options.tls, options.credentials,
           *kwargs.values())  # fmt: skip
    with _lock:
        client = _cache.get(key)
        if client is None:
            client = _cache[key] = make(
                endpoint,
                timeout_s=options.timeout_s,
                tls=options.tls,
                credentials=options.credentials,
                **kwargs,
            )
        return client


def pull_consumer(options: Connected, topic: str, group: str) -> PullConsumer:
    return _get("pull", options, PullConsumer, topic=topic, group=group)


def simple_consumer(
    options: Connected, group: str, topic: str, filter: str | Sql, endpoint: str | None = None
) -> SimpleConsumer:
    """A consumer of `options.endpoint` (failing over), or of `endpoint` alone (a proxy
    lease tokens are pinned to)."""
    return _get(
        "simple", options, SimpleConsumer, endpoint, group=group, topic=topic, filter=filter
    )


def producer(options: Connected) -> Producer:
    return _get("producer", options, Producer)


def admin(options: Connected) -> Admin:
    return _get("admin", options, Admin)


@atexit.register
def _close_all() -> None:
    with _lock:
        clients = list(_cache.values())
        _cache.clear()
    for client in clients:
        client.close()
