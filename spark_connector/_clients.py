"""SDK clients cached per process, so Spark's reused Python workers keep their channels.

Executors run read() and write() in long-lived Python workers; opening a channel per task
would add a connection set-up to every task. Clients are keyed by what configures them and
closed at interpreter exit. A client inherited through a fork keeps working: the SDK starts
a new loop thread in the child and reopens the channel on it.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any, TypeVar

from popmq import Admin, Credentials, Producer, PullConsumer, SimpleConsumer, Sql
from popmq.sdk.tls import TLS

__all__ = ["admin", "producer", "pull_consumer", "simple_consumer"]

_T = TypeVar("_T")

# Guards _cache: tasks and the driver's lease keeper may ask from several threads.
_lock = threading.Lock()
_cache: dict[tuple[Any, ...], Any] = {}


def _get(key: tuple[Any, ...], make: type[_T], *args: Any, **kwargs: Any) -> _T:
    with _lock:
        client = _cache.get(key)
        if client is None:
            client = _cache[key] = make(*args, **kwargs)
        return client


def pull_consumer(
    endpoint: str,
    topic: str,
    group: str,
    timeout_s: float,
    *,
    tls: TLS = False,
    credentials: Credentials | None = None,
) -> PullConsumer:
    return _get(
        ("pull", endpoint, topic, group, timeout_s, tls, credentials),
        PullConsumer,
        endpoint,
        topic=topic,
        group=group,
        timeout_s=timeout_s,
        tls=tls,
        credentials=credentials,
    )


def simple_consumer(
    endpoint: str,
    group: str,
    topic: str,
    filter: str | Sql,
    timeout_s: float,
    *,
    tls: TLS = False,
    credentials: Credentials | None = None,
) -> SimpleConsumer:
    return _get(
        ("simple", endpoint, group, topic, filter, timeout_s, tls, credentials),
        SimpleConsumer,
        endpoint,
        group=group,
        topic=topic,
        filter=filter,
        timeout_s=timeout_s,
        tls=tls,
        credentials=credentials,
    )


def producer(
    endpoint: str, timeout_s: float, *, tls: TLS = False, credentials: Credentials | None = None
) -> Producer:
    return _get(
        ("producer", endpoint, timeout_s, tls, credentials),
        Producer,
        endpoint,
        timeout_s=timeout_s,
        tls=tls,
        credentials=credentials,
    )


def admin(
    endpoint: str, timeout_s: float, *, tls: TLS = False, credentials: Credentials | None = None
) -> Admin:
    return _get(
        ("admin", endpoint, timeout_s, tls, credentials),
        Admin,
        endpoint,
        timeout_s=timeout_s,
        tls=tls,
        credentials=credentials,
    )


@atexit.register
def _close_all() -> None:
    with _lock:
        clients = list(_cache.values())
        _cache.clear()
    for client in clients:
        client.close()
