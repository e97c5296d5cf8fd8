"""The console's HTTP server: uvicorn in the server's own event loop, beside grpc.aio.

`ConsoleServer.bind()` checks the address and binds the socket while the server binds its
gRPC listener (a bad or busy address fails the start before the store opens, exit 2, as
the gRPC listener's does); `start(...)` serves the console once the admin servicer and the
security store exist; `stop()` ends live streams and closes it, before the gRPC server
drains.

uvicorn runs as `uvicorn.Server(Config(app, lifespan="off", ...)).serve(sockets=[sock])`
on the running loop (uvloop under `popmq serve`): the socket is bound here, so uvicorn
never binds (it would `sys.exit` when it cannot), and its signal capture is replaced by a
no-op, so the server's SIGTERM / SIGINT handlers (`loop.add_signal_handler`) stay in
place. Its log config is left alone (popmq's logging applies) and its access log is off.

Protected mode: with `[security] authentication` off the console listens on loopback
addresses only, whatever `allow_anonymous` says: a browser-facing page is reachable by
other sites' pages in the operator's browser, so an open console stays on this machine.
With `[security] tls_cert_file` it serves HTTPS with the server's certificate (read at
start; a certificate reloaded on SIGHUP reaches the gRPC listener, the console at its next
start).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from popmq.broker_core import BrokerAPI, InvalidArgumentError
from popmq.console.config import ConsoleConfig
from popmq.security.config import SecurityConfig
from popmq.security.gate import Gate
from popmq.security.protected import ProtectedModeError, is_loopback
from popmq.security.store import SecurityStore

if TYPE_CHECKING:
    import uvicorn

    from popmq.console.app import Console
    from popmq.console.history import Sampler

_BACKLOG = 128
_STOP_S = 5.0
"""How long stop() waits for open answers before it cancels them."""


def split_listen(listen: str) -> tuple[str, int]:
    """HOST and PORT of `console.listen` (IPv6 as "[::1]:8080")."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidArgumentError(f"console.listen {listen!r} is not HOST:PORT (port 0..65535)")
    return host, int(port)


def check_console_protected(config: ConsoleConfig, security: SecurityConfig) -> None:
    """Refuse a console beyond loopback without authentication (see the module docstring).

    Raises:
        ProtectedModeError: The console's host is not loopback and authentication is off.
    """
    host, _ = split_listen(config.listen)
    if security.authentication or is_loopback(host):
        return
    raise ProtectedModeError(
        f"the console refuses to listen on {config.listen} without authentication "
        "(protected mode): anyone who reaches it could read, change and delete everything, "
        "and other sites' pages in an operator's browser could reach it too. Set [security] "
        "authentication = true (the console then asks for a user's access key and secret "
        "key) or listen on a loopback address (127.0.0.1); [security] allow_anonymous does "
        "not apply to the console. See docs/console.md"
    )


def bind_socket(listen: str) -> socket.socket:
    """A listening, non-blocking TCP socket on `listen`.

    Raises:
        InvalidArgumentError: The address is malformed, unknown, or cannot be bound.
    """
    host, port = split_listen(listen)
    name = host.strip("[]")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            name, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot serve the console on {listen}: {exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise InvalidArgumentError(f"cannot serve the console on {listen}: {exc}") from exc
    return sock


class ConsoleServer:
    """The console of one server process (see the module docstring).

    Args:
        config: `[console]`.
        security: `[security]`: authentication (protected mode) and TLS.
    """

    def __init__(self, config: ConsoleConfig, security: SecurityConfig) -> None:
        self.config = config
        self._security = security
        self._socket: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._sampler: Sampler | None = None
        self.console: Console | None = None
        """The application, once started (tests read its sessions)."""
        self.port = 0
        """The bound port (the real one when `listen` asked for port 0)."""

    @property
    def tls(self) -> bool:
        return self._security.tls

    @property
    def url(self) -> str:
        """Where the console answers: http(s)://HOST:PORT with the bound port."""
        host, _ = split_listen(self.config.listen)
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{host}:{self.port}"

    def bind(self) -> int:
        """Check protected mode and bind the socket; returns the bound port. Idempotent.

        Raises:
            ProtectedModeError: See `check_console_protected`.
            InvalidArgumentError: The address cannot be bound.
        """
        if self._socket is None:
            check_console_protected(self.config, self._security)
            self._socket = bind_socket(self.config.listen)
            self.port = self._socket.getsockname()[1]
        return self.port

    async def start(
        self,
        *,
        broker: BrokerAPI,
        admin: object,
        gate: Gate,
        security_store: SecurityStore | None,
        serving: Callable[[], str | None] = lambda: None,
    ) -> None:
        """Serve the console on the bound socket (binding it first if needed).

        Args:
            broker: Sampled for the overview's live numbers.
            admin: The AdminService servicer every action runs through.
            gate: The server's gate (users, access control).
            security_store: Stored users' policies (which buttons to offer).
            serving: Why the server is not serving, or None when it is.
        """
        if self._task is not None:
            return
        import uvicorn

        from popmq.console.actions import AdminActions
        from popmq.console.app import Console
        from popmq.console.history import History, Sampler

        self.bind()
        assert self._socket is not None
        history = History(self.config.sample_interval_s)
        self._sampler = Sampler(broker, history)
        self.console = Console(
            AdminActions(admin, gate),
            broker,
            history,
            security_store=security_store,
            serving=serving,
            tls=self.tls,
            idle_s=self.config.session_idle_s,
            max_s=self.config.session_max_s,
        )
        config = uvicorn.Config(
            self.console.app,
            lifespan="off",
            log_config=None,
            access_log=False,
            http="h11",
            ws="none",
            server_header=False,
            proxy_headers=False,
            timeout_graceful_shutdown=int(_STOP_S),
            ssl_certfile=self._security.tls_cert_file or None,
            ssl_keyfile=self._security.tls_key_file or None,
        )
        server = _in_loop_server(config)
        self._server = server
        self._sampler.start()
        self._task = asyncio.get_running_loop().create_task(
            server.serve(sockets=[self._socket]), name="popmq-console"
        )
        while not server.started:
            if self._task.done():
                self._task.result()  # its error
                raise InvalidArgumentError(f"the console on {self.config.listen} did not start")
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        """End live streams, stop accepting, close the socket; idempotent."""
        if self.console is not None:
            self.console.closing.set()
        server, task = self._server, self._task
        self._server = self._task = None
        if server is not None and task is not None:
            if self._socket is not None:
                # Accept nothing more, and let a connection accepted in this loop pass get
                # its transport before uvicorn closes its Server (3.11 leaves the socket of
                # one whose transport is made after that to the garbage collector).
                asyncio.get_running_loop().remove_reader(self._socket.fileno())
                await asyncio.sleep(0)
            server.should_exit = True
            try:
                await asyncio.wait_for(asyncio.shield(task), _STOP_S + 1)
            except TimeoutError:
                server.force_exit = True
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            # uvicorn closes the connections it knew of as it stopped; one accepted as it
            # stopped, or left by a forced exit, would keep its socket until collected.
            for connection in list(server.server_state.connections):
                transport = getattr(connection, "transport", None)
                if transport is not None:
                    transport.abort()
        if self._sampler is not None:
            sampler, self._sampler = self._sampler, None
            await sampler.close()
        if self._socket is not None:
            sock, self._socket = self._socket, None
            sock.close()


def _in_loop_server(config: uvicorn.Config) -> uvicorn.Server:
    """A uvicorn server without its signal capture: the server process owns the signals.
    (uvicorn, Starlette and Jinja2 are imported when a console starts, not by every process
    that reads `[console]`.)"""
    import uvicorn

    class InLoopServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return InLoopServer(config)
