"""The servers under test as child processes on loopback: popmq, redis-server, nats-server.

Each server gets a free port and its own temp dir, and is stopped (then killed if it lingers)
and its dir removed on exit, so a failed benchmark leaves nothing running. popmq runs as
``popmq serve`` in its own process, so the load generator does not share the server's GIL
(the in-process ``ServerThread`` of the integration tests would), and py-spy can attach to it.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Literal, Self

__all__ = [
    "NatsServer",
    "PeerMissingError",
    "PopmqServer",
    "RedisServer",
    "ServerProcess",
    "find_binary",
    "free_port",
    "popmq_command",
    "read_port_line",
]

_START_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 15.0
# Debian puts nats-server in /usr/sbin, which a non-root PATH may lack.
_EXTRA_BIN_DIRS = ("/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin")


class PeerMissingError(RuntimeError):
    """A peer server binary is not installed (run ``make bench-peers``)."""


def find_binary(name: str) -> str | None:
    """The path of ``name`` on PATH or in the usual sbin/bin dirs, or None."""
    found = shutil.which(name)
    if found:
        return found
    for directory in _EXTRA_BIN_DIRS:
        candidate = Path(directory) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def read_port_line(
    proc: subprocess.Popen[bytes], deadline: float, prefix: str, log_tail: Callable[[], str]
) -> int:
    """Read the child's first stdout line, ``<prefix>HOST:PORT``, and return the port.

    For servers that bind port 0 themselves and print the port they got.
    """
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    raw = b""
    while not raw.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{proc.args!r} did not start in time")
        readable, _, _ = select.select([fd], [], [], left)
        if readable:
            chunk = os.read(fd, 4096)
            if not chunk:  # exited before printing
                break
            raw += chunk
    line = raw.decode(errors="replace").strip()
    if not line.startswith(prefix):
        raise RuntimeError(f"server failed to start: {line!r} {log_tail()}")
    return int(line[len(prefix) :].rpartition(":")[2])


class ServerProcess:
    """One server child process with a temp dir; a context manager that always cleans up.

    Subclasses give the command line and how readiness is seen; ``endpoint`` is
    ``127.0.0.1:PORT`` once started.
    """

    name = "server"
    picks_own_port = False
    """True when the server binds port 0 itself and reports the port (no race)."""
    start_timeout_s = _START_TIMEOUT_S
    """How long ``wait_until_ready`` waits after the spawn."""

    def __init__(self) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._ready = False
        self._deadline = 0.0
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self._proc is not None, "not started"
        return self._proc.pid

    @property
    def data_dir(self) -> Path:
        assert self._tmp is not None, "not started"
        return Path(self._tmp.name) / "data"

    @property
    def log_path(self) -> Path:
        """The child's stderr (and stdout unless piped); removed with the temp dir."""
        assert self._tmp is not None, "not started"
        return Path(self._tmp.name) / "server.log"

    def _command(self, data_dir: Path) -> list[str]:
        raise NotImplementedError

    def _wait_ready(self, proc: subprocess.Popen[bytes], deadline: float) -> None:
        """Default readiness: the port accepts TCP connections."""
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {proc.returncode}: {self._log_tail()}")
            if _accepts(self.port):
                return
            time.sleep(0.02)
        raise TimeoutError(f"{self.name} did not start in {self.start_timeout_s:.0f}s")

    def _stdout(self) -> int | IO[bytes]:
        assert self._log is not None
        return self._log

    def _env(self) -> dict[str, str] | None:
        """The child's environment; None inherits ours."""
        return None

    def _prepare(self, data_dir: Path) -> None:
        """Called with the empty data dir before the server starts."""

    def start(self) -> str:
        """Start the server and return its endpoint once it accepts connections."""
        self.spawn()
        return self.wait_until_ready()

    def spawn(self) -> None:
        """Start the child without waiting for it to be ready (``wait_until_ready`` does),
        so that several servers start at once. Idempotent."""
        if self._proc is not None:
            return
        self._tmp = tempfile.TemporaryDirectory(prefix=f"popmq-bench-{self.name}-")
        root = Path(self._tmp.name)
        # Private, as `popmq serve` wants its data dir (it warns about a readable one).
        self.data_dir.mkdir(mode=0o700)
        self._prepare(self.data_dir)
        self._log = self.log_path.open("wb")
        self.port = 0 if self.picks_own_port else free_port()
        command = self._command(self.data_dir)
        self._ready = False
        self._deadline = time.monotonic() + self.start_timeout_s
        self._proc = subprocess.Popen(
            command,
            stdout=self._stdout(),
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            cwd=root,
            env=self._env(),
        )

    def wait_until_ready(self) -> str:
        """The endpoint, once the spawned server is ready; it is stopped if it fails to be."""
        if self._proc is None:
            raise RuntimeError(f"{self.name} was not spawned")
        if not self._ready:
            try:
                self._wait_ready(self._proc, self._deadline)
            except BaseException:
                self.stop()
                raise
            self._ready = True
        return self.endpoint

    def stop(self) -> None:
        """SIGTERM, wait, SIGKILL if needed; then remove the temp dir. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=_STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        self.port = 0

    def _log_tail(self) -> str:
        if self._tmp is None:
            return ""
        path = self.log_path
        if self._log is not None:
            self._log.flush()
        with contextlib.suppress(OSError):
            return path.read_text(errors="replace")[-2000:]
        return ""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def popmq_command() -> list[str]:
    """How to run the ``popmq`` CLI: the venv's script beside this Python, else ``-c``."""
    script = Path(sys.executable).with_name("popmq")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from popmq.cli.main import main; sys.exit(main())"]


class PopmqServer(ServerProcess):
    """``popmq serve`` on 127.0.0.1 with a fresh store; ready when it prints its port."""

    name = "popmq"
    picks_own_port = True

    def __init__(
        self,
        *,
        flush: Literal["sync", "async"] = "sync",
        prepare: Callable[[Path], None] | None = None,
    ) -> None:
        """``prepare`` gets the empty data dir first, e.g. to pre-fill a store."""
        super().__init__()
        self.flush = flush
        self._prepare_store = prepare

    def _prepare(self, data_dir: Path) -> None:
        if self._prepare_store is not None:
            self._prepare_store(data_dir)

    def _command(self, data_dir: Path) -> list[str]:
        return [
            *popmq_command(),
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(data_dir),
            "--flush",
            self.flush,
        ]

    def _stdout(self) -> int | IO[bytes]:
        return subprocess.PIPE

    def _wait_ready(self, proc: subprocess.Popen[bytes], deadline: float) -> None:
        self.port = read_port_line(proc, deadline, "popmq listening on ", self._log_tail)


class RedisServer(ServerProcess):
    """redis-server with AOF on; ``appendfsync`` always (durability-matched) or everysec."""

    name = "redis"

    def __init__(self, *, appendfsync: Literal["always", "everysec"]) -> None:
        super().__init__()
        self.appendfsync = appendfsync

    def _command(self, data_dir: Path) -> list[str]:
        binary = find_binary("redis-server")
        if binary is None:
            raise PeerMissingError("redis-server is not installed; run `make bench-peers`")
        return [
            binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(data_dir),
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--save", "",
            "--protected-mode", "no",
            "--daemonize", "no",
        ]  # fmt: skip


class NatsServer(ServerProcess):
    """nats-server with JetStream (``-js``) storing in the temp dir (its default sync)."""

    name = "nats"

    def _command(self, data_dir: Path) -> list[str]:
        binary = find_binary("nats-server")
        if binary is None:
            raise PeerMissingError("nats-server is not installed; run `make bench-peers`")
        return [binary, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(data_dir)]
