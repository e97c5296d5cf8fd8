"""What the total-queue checker runs against: one `popmq serve`, or a cluster.

A target starts the system, says where clients connect (one EndpointHolder per endpoint;
clients re-read it after a failure), lets the nemesis kill -9 one process and bring it back,
stops everything cleanly (the exit code says whether the stop was clean) and starts it again
over the same data.

- `LocalTarget`: `popmq serve` as a subprocess (tests/support/server_process.py); the
  nemesis kills the server and starts it again on a new port.
- `ClusterTarget`: etcd + brokers + proxies (tests/support/cluster.py). The nemesis kills a
  random broker (or proxy), waits for its etcd lease to lapse (a killed process cannot
  register its name before that), starts it again on its address and waits until every
  proxy serves it. Broker kills do not stop the clients: sends go to the other brokers and
  pops read them. A proxy kill clears its holder (the clients of that proxy wait, as local
  mode's clients wait for the server) until it is back. It also kills etcd (kill -9, down
  for `etcd_down_s`, started again on its data), pauses etcd (SIGSTOP for `etcd_down_s`,
  then SIGCONT), and pauses a random broker (SIGSTOP for `broker_pause_s`, past the proxy's
  10 s broker call timeout, then SIGCONT); the clients go on meanwhile. With `disk_mib` set,
  each broker's data dir is a tmpfs of its own (mounting needs root, as on CI), and the
  disk-full fault fills a random broker's one until sends no longer fit, holds it full for
  `disk_full_s` and frees it (faults.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Protocol

from tests.chaos.disk_full import fill_volume, mounted_tmpfs
from tests.chaos.faults import (
    DISK_FULL,
    FILL_PAUSE_S,
    LEFT_FREE_MIB,
    NEAR_FLOOR_MIB,
    DiskFull,
    free_mib,
)
from tests.support.cluster import Cluster
from tests.support.etcd import EtcdServer
from tests.support.server_process import (
    KILLED,
    EndpointHolder,
    Incarnation,
    ServerDiedError,
    ServerProcess,
)

__all__ = [
    "BROKER_PAUSE",
    "ETCD_KILL",
    "ETCD_PAUSE",
    "REGISTERED_AGAIN_WITHIN_S",
    "ClusterTarget",
    "LocalTarget",
    "Target",
]

ETCD_KILL = "etcd-kill"
ETCD_PAUSE = "etcd-pause"
BROKER_PAUSE = "broker-pause"

_OPENED = re.compile(
    r"opened in ([0-9.]+)s: \d+ topics, \d+ groups, (\d+) in-flight checkpoints recovered"
)
_DEATH_POLL_S = 0.5
REGISTERED_AGAIN_WITHIN_S = 10.0
"""How soon after etcd's return (or a broker's wake-up) every broker must be registered
again: the bound the docs give for an etcd outage."""


class Target(Protocol):
    """The system under test, as the checker drives it."""

    holders: list[EndpointHolder]
    """Where clients connect: one per endpoint (the server, or each proxy)."""
    incarnations: list[Incarnation]
    """Each start of a process (the restarts after kills among them)."""

    async def start(self) -> None: ...

    async def kill_and_restart(self, kind: str, rng: random.Random) -> None:
        """kill -9 one process of `kind` and bring it back."""
        ...

    async def stop(self) -> int | None:
        """Clean stop of everything: 0 if every process exited 0, else the first other
        code (None: one hung and was killed)."""
        ...

    async def start_again(self) -> None:
        """Start everything again after `stop`, over the same data."""
        ...

    async def close(self) -> None:
        """Kill whatever still runs (the end of a run, also after a failure)."""
        ...


class LocalTarget:
    """`popmq serve` over one data dir."""

    kinds = ("server",)

    def __init__(
        self,
        data_dir: Path,
        *,
        flush: Literal["sync", "async"],
        start_timeout_s: float,
        on_death: Callable[[ServerDiedError], None],
    ) -> None:
        self.server = ServerProcess(
            data_dir / "store",
            flush=flush,
            log_path=data_dir / "server.log",
            start_timeout_s=start_timeout_s,
            on_death=on_death,
        )
        self.holders = [self.server.holder]
        self.incarnations = self.server.incarnations

    async def start(self) -> None:
        await self.server.start()

    async def kill_and_restart(self, kind: str, rng: random.Random) -> None:
        await self.server.kill()
        await self.server.start()

    async def stop(self) -> int | None:
        return await self.server.stop()

    async def start_again(self) -> None:
        await self.server.start()

    async def close(self) -> None:
        if self.server.running:
            await self.server.kill()


class ClusterTarget:
    """etcd + brokers + proxies, each a subprocess (a `Cluster`, not started yet).

    Attributes:
        lease_lapse_s: Per kill, seconds from the kill until etcd dropped the process's
            registration (its session TTL, give or take etcd's expiry tick).
        disk_fulls: Each disk-full fault, in order (the history fills in its findings).
        unregistered: Per etcd fault, broker pause or disk-full fault, in order: its kind
            and the brokers not registered in etcd again `REGISTERED_AGAIN_WITHIN_S` after it.
        queue_brokers: The checked topic's broker of each global queue id (`prepare`).
    """

    kinds = ("broker", "proxy", ETCD_KILL, ETCD_PAUSE, BROKER_PAUSE, DISK_FULL)

    def __init__(
        self,
        cluster: Cluster,
        *,
        on_death: Callable[[ServerDiedError], None],
        etcd_down_s: float = 4.0,
        broker_pause_s: float = 11.0,
        disk_mib: int | None = None,
        disk_full_s: float = 8.0,
    ) -> None:
        self.cluster = cluster
        self.etcd_down_s = etcd_down_s
        self.broker_pause_s = broker_pause_s
        self.disk_mib = disk_mib
        self.disk_full_s = disk_full_s
        self.disk_fulls: list[DiskFull] = []
        self.unregistered: list[tuple[str, list[str]]] = []
        self.queue_brokers: list[str] = []
        # The brokers' tmpfs mounts, unmounted by close().
        self._mounts = contextlib.ExitStack()
        self.holders = [EndpointHolder() for _ in self.cluster.proxies]
        self.incarnations: list[Incarnation] = []
        self.lease_lapse_s: list[float] = []
        self._on_death = on_death
        # Polls for processes that exit on their own (held so it runs).
        self._watcher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.disk_mib is not None:
            for name in self.cluster.brokers:
                data_dir = self.cluster.processes[name].data_dir
                # 0700 like the data dir the broker makes (it warns of wider modes).
                self._mounts.enter_context(mounted_tmpfs(data_dir, self.disk_mib, "0700"))
        await asyncio.to_thread(self.cluster.start)
        self._publish()
        self._watcher = asyncio.create_task(self._watch())

    async def prepare(self, topic: str) -> None:
        """Read which broker holds each queue of the checked topic (once it exists)."""
        self.queue_brokers = [broker for broker, _ in await self.cluster.route_queues(topic)]

    def _publish(self) -> None:
        for holder, proxy in zip(self.holders, self.cluster.proxies, strict=True):
            holder.publish(self.cluster.endpoint(proxy))

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(_DEATH_POLL_S)
            died = self.cluster.died()
            if died:
                self._on_death(
                    ServerDiedError(
                        f"{', '.join(died)} exited on their own; logs:\n{self.cluster.logs()}"
                    )
                )
                return

    async def kill_and_restart(self, kind: str, rng: random.Random) -> None:
        if kind in (ETCD_KILL, ETCD_PAUSE, BROKER_PAUSE, DISK_FULL):
            if kind == DISK_FULL:
                await self._disk_full(rng)
            else:
                await self._fault(kind, rng)
            self.unregistered.append((kind, await self._unregistered_after()))
            return
        names = self.cluster.brokers if kind == "broker" else self.cluster.proxies
        name = rng.choice(names)
        holder = self.holders[names.index(name)] if kind == "proxy" else None
        if holder is not None:
            holder.up.clear()
        await asyncio.to_thread(self.cluster.kill, name)
        self.lease_lapse_s.append(await asyncio.to_thread(self.cluster.wait_deregistered, name))
        await asyncio.to_thread(self.cluster.restart, name)
        process = self.cluster.processes[name]
        recovery_s: float | None = None
        recovered: int | None = None
        match = _OPENED.search(process.log_since(process.log_offsets[-1]))
        if match is not None:
            recovery_s, recovered = float(match.group(1)), int(match.group(2))
        self.incarnations.append(
            Incarnation(
                number=len(self.incarnations) + 1,
                endpoint=f"{name}@{process.address}",
                spawn_to_listening_s=process.starts[-1],
                recovery_s=recovery_s,
                recovered_checkpoints=recovered,
                after=KILLED,
            )
        )
        if holder is not None:
            holder.publish(process.address)

    async def _fault(self, kind: str, rng: random.Random) -> None:
        """A fault that kills nothing of popmq's: etcd down or hung, a broker hung."""
        etcd = self.cluster.etcd
        assert isinstance(etcd, EtcdServer), "etcd faults need a single-member etcd"
        if kind == ETCD_KILL:
            await asyncio.to_thread(etcd.kill)
            await asyncio.sleep(self.etcd_down_s)
            await asyncio.to_thread(etcd.start)
        elif kind == ETCD_PAUSE:
            etcd.pause()
            try:
                await asyncio.sleep(self.etcd_down_s)
            finally:
                etcd.resume()
        else:
            name = rng.choice(self.cluster.brokers)
            self.cluster.pause(name)
            try:
                await asyncio.sleep(self.broker_pause_s)
            finally:
                self.cluster.resume(name)

    async def _unregistered_after(self) -> list[str]:
        """The brokers etcd still lacks `REGISTERED_AGAIN_WITHIN_S` after a fault ended
        (none: every one is registered again; a broker the proxies no longer see takes
        no sends and serves no pops, which no client error shows)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + REGISTERED_AGAIN_WITHIN_S
        while True:
            missing = sorted(set(self.cluster.brokers) - set(await self.cluster.live_brokers()))
            if not missing or loop.time() >= deadline:
                return missing
            await asyncio.sleep(0.2)

    async def _disk_full(self, rng: random.Random) -> None:
        """Fill a random broker's volume past its send floor, hold it, free it."""
        assert self.disk_mib is not None, "disk-full faults need the brokers on tmpfs"
        name = rng.choice(self.cluster.brokers)
        volume = self.cluster.processes[name].data_dir
        fault = DiskFull(broker=name, began=time.monotonic())
        self.disk_fulls.append(fault)
        fillers: list[Path] = []
        try:
            await asyncio.to_thread(
                fill_volume, volume, NEAR_FLOOR_MIB, fillers, volume_mib=self.disk_mib
            )
            await asyncio.sleep(FILL_PAUSE_S)
            await asyncio.to_thread(
                fill_volume, volume, LEFT_FREE_MIB, fillers, volume_mib=self.disk_mib
            )
            fault.full_at = time.monotonic()
            fault.filler_mib = len(fillers)
            fault.free_mib = free_mib(volume)
            await asyncio.sleep(self.disk_full_s)
        finally:
            for path in fillers:
                path.unlink(missing_ok=True)
            fault.freed_at = time.monotonic()

    async def stop(self) -> int | None:
        await self._stop_watching()
        for holder in self.holders:
            holder.up.clear()
        codes: list[int | None] = []
        for name in [*self.cluster.proxies, *self.cluster.brokers]:
            codes.append(await asyncio.to_thread(self.cluster.terminate, name))
        return next((code for code in codes if code != 0), 0)

    async def start_again(self) -> None:
        for name in [*self.cluster.brokers, *self.cluster.proxies]:
            await asyncio.to_thread(self.cluster.restart, name)
        self._publish()
        self._watcher = asyncio.create_task(self._watch())

    async def _stop_watching(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def close(self) -> None:
        await self._stop_watching()
        try:
            await asyncio.to_thread(self.cluster.stop)
        finally:
            self._mounts.close()
