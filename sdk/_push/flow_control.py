"""Flow control: what the consumer holds, and whether there is room to receive more.

Everything here runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from popmq.sdk.consumer import AsyncSimpleConsumer
from popmq.sdk.types import ReceivedMessage


class FlowControl:
    """Counts held messages and bytes; receivers wait here for room.

    Both modes count here: POP for each message from receipt until it is settled,
    queue-exclusive for each pulled batch while it is processed.
    """

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.messages = 0
        self.bytes = 0
        # Set whenever there is room; receivers wait on it while the cache is full.
        self._room = asyncio.Event()
        self._room.set()

    def room(self) -> int:
        """How many more messages may be received now (0 when full)."""
        if self.bytes >= self.max_bytes:
            return 0
        return max(0, self.max_messages - self.messages)

    async def wait_for_room(self) -> int:
        """Wait until there is room; returns how much."""
        await self.wait_until(lambda: self.room() > 0)
        return self.room()

    async def wait_until(self, ready: Callable[[], bool]) -> None:
        """Wait until ``ready()``, checked whenever room is freed or ``wake`` is called."""
        while not ready():
            self._room.clear()
            await self._room.wait()

    def wake(self) -> None:
        """Have the receivers waiting in ``wait_until`` check their condition again."""
        self._room.set()

    def add(self, size: int, count: int = 1) -> None:
        """Count ``count`` messages of ``size`` body bytes in all as held."""
        self.messages += count
        self.bytes += size

    def remove(self, size: int, count: int = 1) -> None:
        """Free what ``add`` counted; wakes the receivers when there is room again."""
        self.messages -= count
        self.bytes -= size
        if self.room() > 0:
            self._room.set()


@dataclass(eq=False)
class Held:
    """A POP delivery from receipt until it is acked, nacked or released."""

    message: ReceivedMessage
    consumer: AsyncSimpleConsumer
    size: int
    received_at: float
    # Serializes renewals with the final ack/nack, so each uses the newest handle.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    started: bool = False
    settled: bool = False


class HeldMessages:
    """The POP deliveries held now; each holds its room in ``FlowControl`` until forgotten."""

    def __init__(self, flow: FlowControl) -> None:
        self._flow = flow
        # Every held delivery, so close can find the unstarted ones.
        self._held: set[Held] = set()

    def add(self, held: Held) -> None:
        """Hold ``held`` and take its room."""
        self._held.add(held)
        self._flow.add(held.size)

    def forget(self, held: Held) -> None:
        """Free ``held``'s room; idempotent, so ack, nack and release may all call it."""
        if held in self._held:
            self._held.discard(held)
            self._flow.remove(held.size)

    def unstarted(self) -> list[Held]:
        """The held deliveries whose listener has not started and that are not settled."""
        return [h for h in self._held if not h.started and not h.settled]
