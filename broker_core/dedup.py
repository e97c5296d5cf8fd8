"""Deduplication of sends: a message whose dedup id (or message id) was sent to the same
topic within the dedup window is not stored again; its result is the first send's.

Stored sends are found in the message index (message_index.find_duplicates). Sends storing
a dedup id right now are in `PendingDedup`, so a concurrent repeat waits for the first
instead of storing a second copy. Both are keyed alike, by the index entry that finds the
send (message_index.dedup_lookup_key), so a concurrent repeat is one exactly when the same
repeat sent after the first's commit would be, and a key's hash is computed once for its
lookup, claim and release (bytes cache it; a tuple would hash again each time).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from popmq.broker_core.types import SendResult

DedupKey = bytes
"""A message's message_index.dedup_lookup_key: (topic, dedup id, or message id when the
dedup id is it)."""


class PendingDedup:
    """Dedup ids being stored right now -> the storing send's future and the index of the
    message in its stored results."""

    def __init__(self) -> None:
        # Guarded by running on the loop thread only.
        self._pending: dict[DedupKey, tuple[asyncio.Future[list[SendResult]], int]] = {}

    def waiting(self, key: DedupKey) -> tuple[asyncio.Future[list[SendResult]], int] | None:
        """The send storing `key` right now (its future and the message's index), if any."""
        return self._pending.get(key)

    def claim(self, key: DedupKey, done: asyncio.Future[list[SendResult]], index: int) -> None:
        """This send stores `key`: concurrent repeats wait on `done` and read `index`."""
        self._pending[key] = (done, index)

    def release(self, keys: Iterable[DedupKey], done: asyncio.Future[list[SendResult]]) -> None:
        """The send that owns `done` finished (stored or failed): its claims end."""
        for key in keys:
            entry = self._pending.get(key)
            if entry is not None and entry[0] is done:
                del self._pending[key]


def duplicate_of(first: SendResult) -> SendResult:
    """The result of a repeated send (or half send): the first one's, marked duplicate."""
    return SendResult(
        first.message_id,
        first.topic,
        first.queue_id,
        first.offset,
        first.recall_handle,
        duplicate=True,
        transaction_id=first.transaction_id,
    )
