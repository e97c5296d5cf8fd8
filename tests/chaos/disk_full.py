"""Disk full: what works while the store's disk is full, and how it comes back by itself.

The real server (``python -m popmq.cli serve``, see tests/support/server_process.py) runs on
a small tmpfs (64 MiB by default; mounting needs root). Filler files (1 MiB each, like
another program's data) take part of the disk, then:

1. **Sends fill the disk**: 256 KiB messages until a send answers RESOURCE_EXHAUSTED.
2. **While full**: an existing group pops, acks and nacks; a topic is created; a new
   group pops. Each must work (the store keeps its last megabytes for them).
3. **Another program takes the rest** (filler until ENOSPC: 0 bytes free), then frees
   ``--free-mib``: the time until a send is stored again is measured.
4. **SIGTERM on a full disk**: the exit code, and whether the log holds a traceback.
5. **Restart on a full disk**: the server must start read-only (its log says so), pops
   must work, sends must fail cleanly; then ``--free-mib`` is freed and the time until a
   send is stored again is measured.
6. **Nothing acknowledged is lost**: with the filler gone, a restart drains the topic and
   every acknowledged send must be there.

Usage (as root)::

    python -m tests.chaos.disk_full [--disk-mib 64] [--filler-mib 24] [--free-mib 10]

The exit code is 1 when an expectation failed (``DiskFullResult.violations``).
``run`` is the same run for tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from popmq import (
    AsyncAdmin,
    AsyncProducer,
    AsyncSimpleConsumer,
    PopMQError,
    ResourceExhaustedError,
    RetryPolicy,
)
from tests.support.server_process import ServerProcess

__all__ = [
    "DiskFullResult",
    "MountError",
    "NotASmallVolumeError",
    "fill_volume",
    "main",
    "mounted_tmpfs",
    "run",
]

_MIB = 1024 * 1024
_BODY = 256 * 1024


class MountError(RuntimeError):
    """A tmpfs could not be mounted (not root, or no mount permission)."""


class NotASmallVolumeError(RuntimeError):
    """A filler was aimed at a directory that is not a small volume of its own."""


def fill_volume(
    directory: Path, leave_mib: int | None, fillers: list[Path], *, volume_mib: int
) -> None:
    """Add 1 MiB filler files ("another program's data") to `fillers` in `directory` until
    `leave_mib` MiB are left free, or (None) until not a byte is left (blocking: run it in a
    thread).

    `directory` must be the mount point of a volume of at most `volume_mib` MiB, and no more
    than that is ever written: a filler whose mount is missing would otherwise fill the
    machine's own disk and fail every test after it. Each file joins `fillers` as soon as
    it exists, so the caller can free what was written even when this raises.
    """
    stats = os.statvfs(directory)
    size_mib = stats.f_blocks * stats.f_frsize / _MIB
    if not os.path.ismount(directory) or size_mib > volume_mib:
        raise NotASmallVolumeError(
            f"{directory} is not a mounted volume of at most {volume_mib} MiB "
            f"(its file system holds {size_mib:.0f} MiB): no filler written"
        )
    chunk = b"\xa5" * _MIB
    for _ in range(volume_mib + 1):
        stats = os.statvfs(directory)
        if leave_mib is not None and stats.f_bavail * stats.f_frsize <= (leave_mib + 1) * _MIB:
            return
        path = directory / f"filler-{len(fillers):04d}"
        try:
            with path.open("wb") as out:
                fillers.append(path)
                out.write(chunk)
        except OSError:
            if leave_mib is None:
                return  # full: the last, partial file holds space too, and stays a filler
            raise


@contextlib.contextmanager
def mounted_tmpfs(mount_point: Path, size_mib: int, mode: str = "0755"):  # type: ignore[no-untyped-def]
    """A tmpfs of `size_mib` at `mount_point` (its root of `mode`), unmounted afterwards."""
    mount_point.mkdir(parents=True, exist_ok=True)
    options = f"size={size_mib}m,mode={mode}"
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise MountError(f"cannot mount a tmpfs at {mount_point}: {result.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


@dataclass
class DiskFullResult:
    """What one run saw; `violations` lists broken expectations (empty = pass)."""

    disk_mib: int
    filler_mib: int
    free_mib: int
    acknowledged: int = 0
    free_when_sends_stopped_mib: float = 0.0
    full_error: str = ""
    while_full: dict[str, str] = field(default_factory=dict)
    """Operation -> "ok" or its error, while sends were refused."""
    at_zero_nack: str = ""
    """A nack with 0 bytes free: ok, or a clean RESOURCE_EXHAUSTED."""
    resume_after_free_s: float | None = None
    """Seconds from freeing `free_mib` (from 0 free) to the first stored send."""
    sigterm_exit_code: int | None = None
    sigterm_traceback: bool = False
    restart_read_only_line: str = ""
    restart_pop: str = ""
    restart_send: str = ""
    resume_after_restart_s: float | None = None
    received: int = 0
    lost: int = 0
    violations: list[str] = field(default_factory=list)

    def report(self) -> str:
        def secs(value: float | None) -> str:
            return "never (30 s)" if value is None else f"{value:.2f} s"

        lines = [
            f"disk {self.disk_mib} MiB tmpfs, filler {self.filler_mib} MiB, "
            f"freed {self.free_mib} MiB each time",
            f"sends stopped after {self.acknowledged} acknowledged 256 KiB sends, "
            f"{self.free_when_sends_stopped_mib:.1f} MiB still free: {self.full_error}",
            "while sends were refused: "
            + ", ".join(f"{op} {outcome}" for op, outcome in self.while_full.items()),
            f"0 bytes free: nack {self.at_zero_nack}",
            f"0 bytes free, then {self.free_mib} MiB freed: a send was stored after "
            f"{secs(self.resume_after_free_s)}",
            f"SIGTERM on a full disk: exit code {self.sigterm_exit_code}, "
            f"traceback in the log: {self.sigterm_traceback}",
            f"restart on a full disk: {self.restart_read_only_line or '(no read-only line)'}",
            f"  pop {self.restart_pop}; send {self.restart_send}; {self.free_mib} MiB freed: "
            f"a send was stored after {secs(self.resume_after_restart_s)}",
            f"drained {self.received} distinct messages; LOST (acknowledged, never "
            f"received): {self.lost}",
            "verdict: "
            + ("PASS" if not self.violations else "FAIL: " + "; ".join(self.violations)),
        ]
        return "\n".join(lines)


class _Disk:
    """The tmpfs and the filler files of "another program"."""

    def __init__(self, root: Path, size_mib: int) -> None:
        self.root = root
        self.size_mib = size_mib
        self._fillers: list[Path] = []

    def free_bytes(self) -> int:
        stats = os.statvfs(self.root)
        return stats.f_bavail * stats.f_frsize

    def fill(self, mib: int | None) -> None:
        """Add `mib` MiB of filler, or (None) fill until the disk has no byte left."""
        if mib is None:
            fill_volume(self.root, None, self._fillers, volume_mib=self.size_mib)
            return
        chunk = b"\xa5" * _MIB
        for _ in range(mib):
            path = self.root / f"filler-{len(self._fillers):04d}"
            self._fillers.append(path)
            path.write_bytes(chunk)

    def release(self, mib: int) -> None:
        for _ in range(min(mib, len(self._fillers))):
            self._fillers.pop().unlink(missing_ok=True)

    def release_all(self) -> None:
        self.release(len(self._fillers))


async def _outcome(call: Callable[[], Awaitable[object]]) -> str:
    try:
        await call()
    except PopMQError as exc:
        return f"FAILED {type(exc).__name__}: {exc}"
    return "ok"


async def _until_send_works(producer: AsyncProducer, topic: str, limit_s: float) -> float | None:
    began = time.monotonic()
    while time.monotonic() - began < limit_s:
        try:
            await producer.send(topic, b"resumed")
        except PopMQError:
            await asyncio.sleep(0.1)
            continue
        return time.monotonic() - began
    return None


async def run(
    root: Path, *, disk_mib: int = 64, filler_mib: int = 24, free_mib: int = 10
) -> DiskFullResult:
    """The whole scenario on a tmpfs mounted at `root` (see the module docstring)."""
    result = DiskFullResult(disk_mib, filler_mib, free_mib)
    with mounted_tmpfs(root / "disk", disk_mib) as mount:
        disk = _Disk(mount, disk_mib)
        server = ServerProcess(mount / "data", flush="sync", log_path=root / "server.log")
        try:
            await _scenario(server, disk, result)
        finally:
            if server.running:
                await server.stop()
    return result


async def _scenario(server: ServerProcess, disk: _Disk, result: DiskFullResult) -> None:
    once = RetryPolicy(max_attempts=1)
    acked: set[bytes] = set()
    endpoint = (await server.start()).endpoint
    async with AsyncAdmin(endpoint) as admin:
        await admin.create_topic("t", queues=1)
    async with AsyncSimpleConsumer(endpoint, group="g", topic="t") as consumer:
        await consumer.receive(wait_s=0)  # the group and its retry queue exist
    disk.fill(result.filler_mib)

    # 1. Sends fill the disk.
    _progress("1. Sends fill the disk.", disk)
    async with AsyncProducer(endpoint, retry=once) as producer:
        try:
            while True:
                await producer.send("t", b"%06d" % result.acknowledged + os.urandom(_BODY))
                result.acknowledged += 1
        except ResourceExhaustedError as exc:
            result.full_error = str(exc)
    result.free_when_sends_stopped_mib = disk.free_bytes() / _MIB

    # 2. What keeps working while sends are refused.
    _progress("2. What keeps working while sends are refused.", disk)
    async with AsyncSimpleConsumer(endpoint, group="g", topic="t") as consumer:
        got = await consumer.receive(max_messages=2, invisible_duration_s=60, wait_s=2)
        if len(got) == 2:
            result.while_full["ack"] = await _outcome(lambda: consumer.ack(got[0]))
            acked.add(got[0].body[:6])
            result.while_full["nack"] = await _outcome(lambda: consumer.nack(got[1], 1))
        else:
            result.violations.append(f"an existing group popped {len(got)} messages, not 2")
    async with AsyncAdmin(endpoint) as admin:
        result.while_full["create topic"] = await _outcome(lambda: admin.create_topic("t2", 1))
    async with AsyncSimpleConsumer(endpoint, group="new-group", topic="t") as consumer:
        result.while_full["new group pop"] = await _outcome(lambda: consumer.receive(wait_s=0))
    for op, outcome in result.while_full.items():
        if outcome != "ok":
            result.violations.append(f"{op} while full: {outcome}")

    # 3. Another program takes every byte, then frees some.
    _progress("3. Another program takes every byte, then frees some.", disk)
    disk.fill(None)
    async with AsyncSimpleConsumer(endpoint, group="g", topic="t") as consumer:
        got = await consumer.receive(max_messages=1, invisible_duration_s=60, wait_s=2)
        # A write at 0 bytes free fails inside RocksDB, which then refuses every write
        # until the store reopens: recovery below goes through that reopen.
        result.at_zero_nack = await _outcome(lambda: consumer.nack(got[0], 1))
    disk.release(result.free_mib)
    async with AsyncProducer(endpoint, retry=once) as producer:
        result.resume_after_free_s = await _until_send_works(producer, "t", 30)
    if result.resume_after_free_s is None or result.resume_after_free_s > 5:
        result.violations.append(
            f"sends did not resume within 5 s of freeing {result.free_mib} MiB"
        )

    # 4. SIGTERM on a full disk.
    _progress("4. SIGTERM on a full disk.", disk)
    disk.fill(None)
    async with AsyncSimpleConsumer(endpoint, group="g", topic="t") as consumer:
        await consumer.receive(max_messages=4, invisible_duration_s=2, wait_s=1)  # to persist
    log_offset = server.log_path.stat().st_size
    result.sigterm_exit_code = await server.stop()
    stop_log = _log_since(server.log_path, log_offset)
    result.sigterm_traceback = "Traceback" in stop_log
    if result.sigterm_exit_code != 0 or result.sigterm_traceback:
        result.violations.append(
            f"SIGTERM on a full disk: exit code {result.sigterm_exit_code}, "
            f"traceback {result.sigterm_traceback}"
        )

    # 5. Restart on a full disk.
    _progress("5. Restart on a full disk.", disk)
    disk.fill(None)
    log_offset = server.log_path.stat().st_size
    endpoint = (await server.start()).endpoint
    start_log = _log_since(server.log_path, log_offset)
    result.restart_read_only_line = next(
        (line for line in start_log.splitlines() if "READ-ONLY" in line), ""
    )
    async with AsyncSimpleConsumer(endpoint, group="g", topic="t") as consumer:

        async def pop_one() -> None:
            if not await consumer.receive(max_messages=1, invisible_duration_s=1, wait_s=3):
                raise ResourceExhaustedError("no message popped")

        result.restart_pop = await _outcome(pop_one)
    async with AsyncProducer(endpoint, retry=once) as producer:
        result.restart_send = await _outcome(lambda: producer.send("t", b"refused"))
        disk.release(result.free_mib)
        result.resume_after_restart_s = await _until_send_works(producer, "t", 30)
    if result.restart_pop != "ok":
        result.violations.append(f"pop after a restart on a full disk: {result.restart_pop}")
    if result.resume_after_restart_s is None or result.resume_after_restart_s > 5:
        result.violations.append("sends did not resume within 5 s after a full-disk restart")

    # 6. Nothing acknowledged is lost.
    _progress("6. Nothing acknowledged is lost.", disk)
    await server.stop()
    disk.release_all()
    endpoint = (await server.start()).endpoint
    seen = set(acked)
    async with AsyncSimpleConsumer(endpoint, group="g", topic="t") as consumer:
        while got := await consumer.receive(max_messages=32, invisible_duration_s=60, wait_s=5):
            seen.update(m.body[:6] for m in got if len(m.body) > _BODY)
            await consumer.ack(got)
    result.received = len(seen)
    result.lost = len({b"%06d" % i for i in range(result.acknowledged)} - seen)
    if result.lost:
        result.violations.append(f"{result.lost} acknowledged sends were lost")


def _progress(phase: str, disk: _Disk) -> None:
    print(
        f"{time.strftime('%H:%M:%S')} {phase} ({disk.free_bytes() / _MIB:.1f} MiB free)",
        file=sys.stderr,
        flush=True,
    )


def _log_since(path: Path, offset: int) -> str:
    with path.open("rb") as log:
        log.seek(offset)
        return log.read().decode(errors="replace")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.chaos.disk_full", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--disk-mib", type=int, default=64, help="tmpfs size (default 64)")
    parser.add_argument("--filler-mib", type=int, default=24, help="filler first (default 24)")
    parser.add_argument("--free-mib", type=int, default=10, help="MiB freed (default 10)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="popmq-disk-full-") as root:
        print(f"server log: {root}/server.log (removed at the end)", file=sys.stderr)
        try:
            result = asyncio.run(
                run(
                    Path(root),
                    disk_mib=args.disk_mib,
                    filler_mib=args.filler_mib,
                    free_mib=args.free_mib,
                )
            )
        except MountError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    print(result.report())
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
