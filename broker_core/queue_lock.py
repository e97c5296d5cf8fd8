"""Per-queue try-locks keyed `topic@group@queueId` (RocketMQ QueueLockManager).

A pop holds the lock of a queue only while it reads and records the checkpoint. The lock is
try-only: a held lock means "skip this queue", never wait, which is what lets many consumers
share few queues.
"""

from __future__ import annotations

from collections.abc import Iterable

from popmq.broker_core.errors import FailedPreconditionError


def lock_key(topic: str, group: str, queue_id: int) -> str:
    return f"{topic}@{group}@{queue_id}"


class QueueLocks:
    """Registry of held lock keys (one registry per broker, never class-level)."""

    def __init__(self) -> None:
        # Lock keys currently held; guards the read + checkpoint section of a pop per queue.
        self._held: set[str] = set()

    def try_acquire(self, key: str) -> bool:
        if key in self._held:
            return False
        self._held.add(key)
        return True

    def release(self, key: str) -> None:
        self._held.discard(key)

    def held(self, key: str) -> bool:
        return key in self._held

    def acquire_all(self, keys: Iterable[str]) -> list[str]:
        """Try-lock every key an admin operation changes, or none: FAILED_PRECONDITION if
        another holds any. Returns the keys taken, for `release`."""
        taken: list[str] = []
        for key in keys:
            if not self.try_acquire(key):
                for held in taken:
                    self.release(held)
                raise FailedPreconditionError(
                    f"another admin operation is changing {key}; retry when it is done"
                )
            taken.append(key)
        return taken
