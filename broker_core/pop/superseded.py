"""Receipt handles replaced by ChangeInvisibleTime or Nack (or dropped by a forced offset
reset), refused until their old deadline, across restarts.

One object owns them: the record written in the batch that replaces a handle, the memory
set after that batch committed, the check an ack makes, recovery at start and the expiry
the revive loop runs.
"""

from __future__ import annotations

import heapq

from popmq.broker_core import keys
from popmq.broker_core.store import Batch, Store


class SupersededHandles:
    """(checkpoint id, index) of refused handles -> the deadline they are refused until."""

    def __init__(self) -> None:
        # (ck_id, index) -> old deadline; and the expiry heap (deadline, ck_id, index).
        # Guarded by running on the loop thread only.
        self._until: dict[tuple[int, int], int] = {}
        self._expiry: list[tuple[int, int, int]] = []

    def __contains__(self, entry: tuple[int, int]) -> bool:
        return entry in self._until

    @staticmethod
    def write(batch: Batch, ck_id: int, index: int, deadline_ms: int) -> None:
        """Put the record that keeps the handle refused across a restart (in the batch that
        replaces or drops the delivery)."""
        batch.put("meta", keys.superseded_key(ck_id, index), keys.encode_u64(deadline_ms))

    def remember(self, ck_id: int, index: int, deadline_ms: int) -> None:
        """Refuse the handle from now on (after the batch holding its record committed)."""
        self._until[(ck_id, index)] = deadline_ms
        heapq.heappush(self._expiry, (deadline_ms, ck_id, index))

    def recover(self, store: Store, now: int, stale: Batch) -> None:
        """Load the records still in force; delete the expired ones in `stale`."""
        prefix = keys.SUPERSEDED_PREFIX
        for key, value in store.scan("meta", prefix, prefix[:-1] + b";"):
            deadline = keys.decode_u64(value)
            if deadline <= now:
                stale.delete("meta", key)
                continue
            ck_id, index = keys.parse_superseded_key(key)
            self.remember(ck_id, index, deadline)

    def expire(self, now: int) -> list[bytes]:
        """Forget handles whose deadline passed; returns the meta keys of their records."""
        expired: list[bytes] = []
        expiry = self._expiry
        while expiry and expiry[0][0] <= now:
            _, ck_id, index = heapq.heappop(expiry)
            self._until.pop((ck_id, index), None)
            expired.append(keys.superseded_key(ck_id, index))
        return expired
