"""What every popmq server process sets up the same way: `popmq serve`, `popmq proxy`,
`popmq broker` and a shard's replicas.

- the gRPC server: message size limits, the pending-call bound, connection options and
  the interceptors a process passes (`grpc_server`);
- its listeners: `listen` (with TLS when configured) and `[security] plaintext_listen`
  (`bind_listeners`);
- the Prometheus endpoint with `[security]`'s metrics credentials (`start_metrics`);
- the stop and reload signals, the event loop, the umask, the garbage collector's
  threshold (collector.py), the open-file limit (file_limit.py) and the exit code of a
  start error (`run_process`, `wait_for_stop_signal`; `stop_signal` and `unless_stopped`
  for a start that may wait, as a broker's for etcd).

What differs between the processes (their services, health, registration) stays in their
own modules.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import grpc

from popmq.broker_core import MAX_REQUEST_BYTES, PRIVATE_UMASK, DataDirError, InvalidArgumentError
from popmq.runtime.collector import configure_collector
from popmq.runtime.config import ServerConfig
from popmq.runtime.file_limit import raise_open_file_limit
from popmq.runtime.logs import configure_logging
from popmq.runtime.metrics import Metrics, MetricsEndpoint
from popmq.security.http_auth import HttpAuth
from popmq.security.protected import is_loopback
from popmq.security.tls import ServerTLS, bind

__all__ = [
    "MAX_MESSAGE_BYTES",
    "MAX_RECEIVE_BYTES",
    "Listeners",
    "bind_listeners",
    "grpc_server",
    "metrics_endpoint",
    "print_plaintext_listener",
    "run_event_loop",
    "run_process",
    "split_listen",
    "start_metrics",
    "stop_signal",
    "unless_stopped",
    "version",
    "wait_for_stop_signal",
]

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 130 * 1024 * 1024
"""Largest gRPC message the server sends (answers are bounded well below it: budget.py)."""
MAX_RECEIVE_BYTES = MAX_REQUEST_BYTES
"""Largest request: one send request at its limits (MAX_SEND_*) fits; grpc
refuses anything larger with RESOURCE_EXHAUSTED before the servicer sees it."""
_MAX_PENDING_RPCS = 100_000
"""Calls grpc.aio may queue before the loop picks them up (LongPollingConfig.max_total)."""


def split_listen(listen: str) -> tuple[str, int]:
    """Parse HOST:PORT (IPv6 as [::1]:PORT)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidArgumentError(f"listen address {listen!r} is not HOST:PORT (port 0..65535)")
    return host, int(port)


def grpc_server(
    config: ServerConfig,
    interceptors: Sequence[grpc.aio.ServerInterceptor],
    *,
    max_send_bytes: int = MAX_MESSAGE_BYTES,
) -> grpc.aio.Server:
    """The gRPC server of a popmq process (not yet bound)."""
    return grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
            ("grpc.max_send_message_length", max_send_bytes),
            ("grpc.so_reuseport", 0),
            # grpc.aio otherwise cancels calls once 1,000 wait to be picked up (3,000
            # hard): a burst of long polls or pipelined sends (from clients, or from the
            # proxies in front of a broker) would get CANCELLED. The broker's own bounds
            # (held polls, in-flight writes) apply instead.
            ("grpc.server.max_pending_requests", _MAX_PENDING_RPCS),
            ("grpc.server.max_pending_requests_hard_limit", _MAX_PENDING_RPCS),
            *config.connections.grpc_options(),
        ],
        interceptors=interceptors,
    )


@dataclass(frozen=True, slots=True)
class Listeners:
    """The ports a process's gRPC server was bound to."""

    port: int
    plaintext_port: int
    """The plaintext listener beside a TLS one; 0 when there is none."""


def bind_listeners(
    server: grpc.aio.Server, config: ServerConfig, tls: ServerTLS | None
) -> Listeners:
    """Bind `listen` (with TLS when given) and `[security] plaintext_listen`, if set."""
    host, port = split_listen(config.listen)
    bound = bind(server, f"{host}:{port}", tls, shown=config.listen)
    plaintext = config.security.plaintext_listen
    plaintext_port = 0
    if plaintext:
        plain_host, plain_port = split_listen(plaintext)
        plaintext_port = bind(server, f"{plain_host}:{plain_port}", None, shown=plaintext)
    return Listeners(bound, plaintext_port)


def metrics_endpoint(metrics: Metrics, config: ServerConfig) -> MetricsEndpoint:
    """The Prometheus endpoint of `config.metrics.listen`, with `[security]`'s metrics
    credentials; warns when it is open to other machines (it names topics and groups, not
    what they hold)."""
    host, port = split_listen(config.metrics.listen)
    auth = HttpAuth.from_security(config.security)
    if not auth.required and not is_loopback(host):
        log.warning(
            "the metrics endpoint on %s answers anyone who reaches it (topic and group names "
            "and counts): set [security] metrics_username and metrics_password, or "
            "metrics_bearer_token",
            config.metrics.listen,
        )
    return MetricsEndpoint(metrics, host, port, auth=auth)


async def start_metrics(metrics: Metrics, config: ServerConfig) -> MetricsEndpoint:
    """Serve `metrics` on `config.metrics.listen`; a port that cannot be bound is the
    configuration's error (the process exits 2 saying so)."""
    endpoint = metrics_endpoint(metrics, config)
    try:
        await endpoint.start()
    except OSError as exc:
        raise InvalidArgumentError(
            f"cannot serve metrics on {config.metrics.listen}: {exc}"
        ) from exc
    return endpoint


def stop_signal() -> asyncio.Event:
    """An event set at the first SIGTERM or SIGINT from now on (its handlers are installed
    at once): for a process that may wait long before it serves (`popmq broker` waiting
    for etcd) and must stop cleanly meanwhile."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def unless_stopped(work: Coroutine[Any, Any, Any], stop: asyncio.Event) -> bool:
    """Run `work` to its end, unless `stop` is set first: then cancel it (its own cleanup
    runs) and return False."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if task.done():
        task.result()  # its error, if it failed
        return True
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # this caller is being cancelled too
    return False


async def wait_for_stop_signal(
    *, hangup: Callable[[], None] | None = None, stop: asyncio.Event | None = None
) -> None:
    """Return at the first SIGTERM or SIGINT (or once `stop`, a `stop_signal()`, is set);
    call `hangup` (the TLS certificate's reload) at each SIGHUP, when given."""
    if stop is None:
        stop = stop_signal()
    if hangup is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, hangup)
    await stop.wait()


def print_plaintext_listener(config: ServerConfig, port: int) -> None:
    """Say where the plaintext listener beside the TLS one is, if there is one."""
    if port:
        host, _ = split_listen(config.security.plaintext_listen)
        print(f"popmq plaintext listener on {host}:{port}", flush=True)


def version() -> str:
    """The installed popmq's version."""
    try:
        return metadata.version("popmq")
    except metadata.PackageNotFoundError:  # a source tree that is not installed
        return "0+unknown"


def run_event_loop(main: Coroutine[Any, Any, None], event_loop: str) -> None:
    """Run `main` on the configured event loop ("uvloop" when installed, else asyncio's)."""
    if event_loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            log.warning("uvloop is not installed: running on asyncio's own event loop")
        else:
            uvloop.run(main)
            return
    asyncio.run(main)


def run_process(
    main: Callable[[ServerConfig], Coroutine[Any, Any, None]], config: ServerConfig
) -> int:
    """Run a server process's `main(config)` to its end; 2 after printing a start error."""
    configure_logging(config.log)
    configure_collector(config.gc)
    raise_open_file_limit()
    # Every file the server creates (RocksDB's tables and WAL files, made as it runs) is
    # its user's alone: the store holds messages, and used to hold the receipt key.
    os.umask(PRIVATE_UMASK)
    try:
        run_event_loop(main(config), config.event_loop)
    except (InvalidArgumentError, DataDirError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
