"""`popmq serve` as a subprocess on a fixed data dir: start, SIGKILL, restart, SIGTERM.

Each start is an *incarnation* with its own port (the server listens on 127.0.0.1:0). The
current endpoint lives in an ``EndpointHolder`` that clients re-read after a failure: ``up``
is cleared before a kill and set again once the next incarnation printed its listening line.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "KILLED",
    "REPO_ROOT",
    "STOPPED",
    "EndpointHolder",
    "Incarnation",
    "ServerDiedError",
    "ServerProcess",
    "ServerStartError",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
KILLED = "kill -9"
"""``Incarnation.ended_by`` of an incarnation the nemesis killed."""
STOPPED = "SIGTERM"
"""``Incarnation.ended_by`` of an incarnation stopped cleanly."""

_LISTENING = re.compile(rb"listening on (\S+:(\d+))")
_OPENED = re.compile(
    r"opened in ([0-9.]+)s: \d+ topics, \d+ groups, (\d+) in-flight checkpoints recovered"
)


class ServerStartError(RuntimeError):
    """The server exited or stayed silent instead of printing its listening line."""


class ServerDiedError(RuntimeError):
    """The server exited on its own, not killed or stopped by us."""


@dataclass(slots=True)
class Incarnation:
    """One run of the server process.

    Attributes:
        number: 1 for the first start, +1 per restart.
        endpoint: ``host:port`` it listened on.
        spawn_to_listening_s: From spawning the process to reading its listening line
            (interpreter start, imports, store open and recovery, bind).
        recovery_s: The broker's own recovery time, from its log line (None if absent).
        recovered_checkpoints: In-flight checkpoints it reloaded (None if absent).
        after: How the previous incarnation ended (``""`` for the first start).
        ended_by: ``KILLED``, ``STOPPED`` (or how a stop that hung ended), ``""`` while
            running.
        exit_code: The process's exit code once it ended.
    """

    number: int
    endpoint: str
    spawn_to_listening_s: float
    recovery_s: float | None
    recovered_checkpoints: int | None
    after: str = ""
    ended_by: str = ""
    exit_code: int | None = None


class EndpointHolder:
    """Where the server currently listens; clients re-read it after a failed call."""

    def __init__(self) -> None:
        self.address = ""
        self.generation = 0
        """Incarnation number of ``address``; a client made for an older one is stale."""
        self.up = asyncio.Event()
        """Set while an incarnation is serving; cleared just before it is killed or stopped."""

    def publish(self, address: str) -> None:
        self.address = address
        self.generation += 1
        self.up.set()


class ServerProcess:
    """The popmq server as a child process over one data dir, restartable.

    Args:
        data_dir: The store directory, kept across incarnations.
        flush: ``sync`` or ``async`` (the server's ``--flush``).
        log_path: The server's stderr (its log) from every incarnation, appended.
        start_timeout_s: How long a start may take before it is an error.
        on_death: Called with a ``ServerDiedError`` when an incarnation exits on its own.
        extra_args: More ``popmq serve`` arguments (e.g. ``--set broker.broker_name=b``).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        flush: Literal["sync", "async"],
        log_path: Path,
        start_timeout_s: float = 60.0,
        on_death: Callable[[ServerDiedError], None] | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.data_dir = data_dir
        self.flush = flush
        self.log_path = log_path
        self.start_timeout_s = start_timeout_s
        self.holder = EndpointHolder()
        self.incarnations: list[Incarnation] = []
        self.on_death = on_death
        self.extra_args = tuple(extra_args)
        self._process: asyncio.subprocess.Process | None = None
        self._watcher: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._process is not None

    async def start(self) -> Incarnation:
        """Spawn the server and wait for its listening line; publish the new endpoint."""
        if self._process is not None:
            raise RuntimeError("the server is already running")
        number = len(self.incarnations) + 1
        with self.log_path.open("ab") as log:
            log.write(f"=== chaos: incarnation {number} ===\n".encode())
            log_offset = log.tell()
            began = time.perf_counter()
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "popmq.cli",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                str(self.data_dir),
                "--flush",
                self.flush,
                *self.extra_args,
                cwd=REPO_ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
            )
        assert process.stdout is not None
        try:
            endpoint = await asyncio.wait_for(
                self._read_listening_line(process.stdout), self.start_timeout_s
            )
        except (TimeoutError, ServerStartError) as exc:
            process.kill()
            await process.communicate()
            raise ServerStartError(
                f"incarnation {number} did not start ({exc or 'timed out'}); "
                f"log tail:\n{self._log_tail()}"
            ) from exc
        elapsed = time.perf_counter() - began
        self._process = process
        recovery_s, recovered = self._parse_recovery(log_offset)
        after = self.incarnations[-1].ended_by if self.incarnations else ""
        incarnation = Incarnation(number, endpoint, elapsed, recovery_s, recovered, after)
        self.incarnations.append(incarnation)
        self._watcher = asyncio.create_task(self._watch(process, incarnation))
        self.holder.publish(endpoint)
        return incarnation

    async def kill(self) -> None:
        """SIGKILL the running incarnation (kill -9) and reap it."""
        await self._end(KILLED)

    async def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM the running incarnation (clean stop) and return its exit code.

        A server that does not stop within ``timeout_s`` is killed; None is returned then.
        """
        return await self._end(STOPPED, timeout_s)

    async def _end(self, how: str, timeout_s: float = 30.0) -> int | None:
        process = self._process
        if process is None:
            return None
        self.holder.up.clear()
        self._process = None
        exit_code: int | None
        if how == KILLED:
            process.kill()
            exit_code = await process.wait()
        else:
            process.send_signal(signal.SIGTERM)
            try:
                exit_code = await asyncio.wait_for(process.wait(), timeout_s)
            except TimeoutError:
                process.kill()
                await process.wait()
                exit_code = None
                how = f"{STOPPED} (hung; then {KILLED})"
        if self._watcher is not None:
            await self._watcher
            self._watcher = None
        incarnation = self.incarnations[-1]
        incarnation.ended_by = how
        incarnation.exit_code = exit_code
        return exit_code

    async def _read_listening_line(self, stdout: asyncio.StreamReader) -> str:
        while True:
            line = await stdout.readline()
            if not line:
                raise ServerStartError("the process exited before listening")
            match = _LISTENING.search(line)
            if match:
                return match.group(1).decode()

    async def _watch(self, process: asyncio.subprocess.Process, incarnation: Incarnation) -> None:
        """Drain stdout (nothing more is printed there) and notice an exit we did not cause."""
        assert process.stdout is not None
        while await process.stdout.read(65536):
            pass
        exit_code = await process.wait()
        if self._process is not process:
            return  # killed or stopped by us
        self._process = None
        self._watcher = None
        self.holder.up.clear()
        incarnation.ended_by = f"died (exit code {exit_code})"
        incarnation.exit_code = exit_code
        if self.on_death is not None:
            self.on_death(
                ServerDiedError(
                    f"incarnation {incarnation.number} exited on its own with {exit_code}; "
                    f"log tail:\n{self._log_tail()}"
                )
            )

    def _parse_recovery(self, offset: int) -> tuple[float | None, int | None]:
        with self.log_path.open("rb") as log:
            log.seek(offset)
            text = log.read().decode(errors="replace")
        match = _OPENED.search(text)
        if match is None:
            return None, None
        return float(match.group(1)), int(match.group(2))

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])
